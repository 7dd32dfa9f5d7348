/**
 * The reference engine's public API: start one (`startEngine`), or build the pieces yourself.
 * The CLI (`kvcanary engine`) is in cli.ts.
 */
export { startEngine, type RunningEngine, type StartEngineOptions } from './start.js';
export { resolveEngineConfig, EngineConfigError, type EngineConfig, type EngineOptions, type DisaggregatedConfig } from './config.js';
export { PRESETS, DEFAULT_PRESET, type Preset, type EngineMode } from './presets.js';
export { FAULTS, FAULT_DESCRIPTIONS, type FaultName } from './faults.js';
export { DEFENSES, DEFENSE_DESCRIPTIONS, type DefenseName } from './defenses.js';
export { createSingleNodeEngine, type EngineDeps } from './single-node.js';
export { createDisaggregatedEngine, type DisaggregatedDeps } from './disagg/router.js';
export type {
  Engine,
  EngineEvent,
  EngineInfo,
  EngineStats,
  DefenseStats,
  HostOffloadStats,
  TransferStats,
  GenerationRequest,
  RequestHandle,
  SubmitResult,
} from './engine.js';
export { createEngineServer, type EngineServerOptions } from './server.js';
export { createEngineMetrics, type EngineMetrics } from './metrics.js';
export { checkAdmission, type Rejection, type RejectionCode } from './admission.js';
export { KvMemory, PageState, NEVER_WRITTEN, MIXED_WRITERS, NO_OWNER, D_HEAD, type KvMemoryShape } from './kv-memory.js';
export { KvPool, PageTable, KvPoolError, type AllocationResult, type KvPoolStats } from './kv-pool.js';
export { InductionModel, DEFAULT_MODEL_CONFIG, type ModelConfig, type ForeignRead } from './model.js';
export { ExposureLog, type Exposure, type ExposureSnapshot } from './exposure-log.js';
export { BOS, PLACEHOLDER, VOCAB_SIZE, encodePrompt, countPromptTokens, renderChat, decodeTokens, TokenTextDecoder } from './tokenizer.js';
export { engineMain } from './cli.js';
