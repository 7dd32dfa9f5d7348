/**
 * Engine configuration: a preset, divided by a scale, with explicit overrides on top. Validated once
 * here; every error names the option, what was expected and what was given.
 */
import { DEFAULT_MODEL_CONFIG, type ModelConfig } from './model.js';
import { FREE_LIST_POLICIES, type FreeListPolicy } from './free-list.js';
import { DEFAULT_PRESET, PRESETS } from './presets.js';
import type { KernelPreference } from './attention/kernel.js';

export interface EngineOptions {
  /** @default 'single' */
  preset?: string;
  /** Divides the preset's capacities (not explicit token overrides). @default 1 */
  scale?: number;
  /** Overrides the preset's context limit (after scaling). */
  contextTokens?: number;
  /** Overrides the preset's pool capacity (after scaling); rounded down to whole pages. */
  poolTokens?: number;
  /** Slots per KV page, a multiple of 4 in [4, 1024]. @default 16 */
  pageSize?: number;
  /** @default 'fifo' */
  freeList?: FreeListPolicy;
  /** @default false */
  zeroOnRelease?: boolean;
  /** Prompt tokens prefilled per scheduler step. @default 4096 */
  chunkTokens?: number;
  /** Attention positions read by decode per scheduler step. @default 4_194_304 */
  decodePositionsPerStep?: number;
  /** @default 256 */
  maxRunning?: number;
  /** Requests queued beyond this get 503. @default 1024 */
  maxWaiting?: number;
  /** @default 'kvcanary-engine' */
  modelId?: string;
  model?: Partial<ModelConfig>;
  /** @default 'auto' (SIMD when available) */
  kernel?: KernelPreference;
  /** Request body limit. @default 6 bytes per context token + 1 MiB (a fully escaped max-length prompt). */
  maxBodyBytes?: number;
  /** Sampling seed when a request gives none. @default 0 */
  defaultSeed?: number;
}

export interface EngineConfig {
  preset: string;
  mode: 'single';
  contextTokens: number;
  poolTokens: number;
  numPages: number;
  pageSize: number;
  freeList: FreeListPolicy;
  zeroOnRelease: boolean;
  chunkTokens: number;
  decodePositionsPerStep: number;
  maxRunning: number;
  maxWaiting: number;
  modelId: string;
  model: ModelConfig;
  kernel: KernelPreference;
  maxBodyBytes: number;
  defaultSeed: number;
}

export class EngineConfigError extends Error {
  readonly code = 'ENGINE_CONFIG_INVALID';
  constructor(readonly option: string, message: string) {
    super(message);
    this.name = 'EngineConfigError';
  }
}

function describe(value: unknown): string {
  return `\`${typeof value === 'string' ? value : JSON.stringify(value)}\` (${typeof value})`;
}

function integer(option: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new EngineConfigError(option, `Expected \`${option}\` to be an integer in [${min}, ${max}], got ${describe(value)}`);
  }
  return value;
}

export function resolveEngineConfig(options: EngineOptions = {}): EngineConfig {
  const presetName = options.preset ?? DEFAULT_PRESET;
  const preset = PRESETS[presetName];
  if (preset === undefined) {
    throw new EngineConfigError('preset', `Unknown preset \`${presetName}\`; known presets: ${Object.keys(PRESETS).join(', ')}`);
  }
  const scale = options.scale === undefined ? 1 : integer('scale', options.scale, 1, 1 << 20);
  const pageSize = options.pageSize === undefined ? 16 : integer('pageSize', options.pageSize, 4, 1024);
  if (pageSize % 4 !== 0) throw new EngineConfigError('pageSize', `Expected \`pageSize\` to be a multiple of 4, got ${pageSize}`);
  const contextTokens =
    options.contextTokens === undefined ? Math.floor(preset.contextTokens / scale) : integer('contextTokens', options.contextTokens, 2);
  if (contextTokens < 2) throw new EngineConfigError('scale', `--scale ${scale} leaves a context of ${contextTokens} tokens; at least 2 are needed`);
  const poolRequested =
    options.poolTokens === undefined ? Math.floor(preset.poolTokens / scale) : integer('poolTokens', options.poolTokens, pageSize);
  const numPages = Math.floor(poolRequested / pageSize);
  if (numPages < 1) {
    throw new EngineConfigError('poolTokens', `Expected the pool to hold at least one page of ${pageSize} tokens, got ${poolRequested} tokens`);
  }
  const freeList = options.freeList ?? 'fifo';
  if (!FREE_LIST_POLICIES.includes(freeList)) {
    throw new EngineConfigError('freeList', `Expected \`freeList\` to be one of ${FREE_LIST_POLICIES.join(', ')}, got ${describe(freeList)}`);
  }
  const kernel = options.kernel ?? 'auto';
  if (!['auto', 'wasm-simd', 'js'].includes(kernel)) {
    throw new EngineConfigError('kernel', `Expected \`kernel\` to be auto, wasm-simd or js, got ${describe(kernel)}`);
  }
  const model = { ...DEFAULT_MODEL_CONFIG, ...options.model };
  integer('model.ngram', model.ngram, 1, 64);
  for (const key of ['beta', 'logitScale'] as const) {
    if (typeof model[key] !== 'number' || !(model[key] > 0) || !Number.isFinite(model[key])) {
      throw new EngineConfigError(`model.${key}`, `Expected \`model.${key}\` to be a finite number > 0, got ${describe(model[key])}`);
    }
  }
  const modelId = options.modelId ?? 'kvcanary-engine';
  if (typeof modelId !== 'string' || modelId.length === 0) {
    throw new EngineConfigError('modelId', `Expected \`modelId\` to be a non-empty string, got ${describe(modelId)}`);
  }
  return {
    preset: preset.name,
    mode: preset.mode,
    contextTokens,
    poolTokens: numPages * pageSize,
    numPages,
    pageSize,
    freeList,
    zeroOnRelease: options.zeroOnRelease ?? false,
    chunkTokens: options.chunkTokens === undefined ? 4096 : integer('chunkTokens', options.chunkTokens, 1),
    decodePositionsPerStep:
      options.decodePositionsPerStep === undefined ? 4_194_304 : integer('decodePositionsPerStep', options.decodePositionsPerStep, 1),
    maxRunning: options.maxRunning === undefined ? 256 : integer('maxRunning', options.maxRunning, 1),
    maxWaiting: options.maxWaiting === undefined ? 1024 : integer('maxWaiting', options.maxWaiting, 0),
    modelId,
    model,
    kernel,
    maxBodyBytes:
      options.maxBodyBytes === undefined ? 6 * contextTokens + 1024 * 1024 : integer('maxBodyBytes', options.maxBodyBytes, 1024),
    defaultSeed: options.defaultSeed === undefined ? 0 : integer('defaultSeed', options.defaultSeed, 0, 0xffffffff),
  };
}
