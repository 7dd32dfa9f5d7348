/**
 * Engine configuration: a preset, divided by a scale, with explicit overrides on top; faults and defenses
 * named on top of a preset add to the preset's own. Validated once here; every error names the option,
 * what was expected and what was given.
 */
import { DEFAULT_MODEL_CONFIG, type ModelConfig } from './model.js';
import { FREE_LIST_POLICIES, type FreeListPolicy } from './free-list.js';
import { DEFAULT_PRESET, PRESETS, type EngineMode } from './presets.js';
import { DEFENSES, SINGLE_NODE_DEFENSES, isDefenseName, type DefenseName } from './defenses.js';
import { FAULTS, PREFIX_CACHE_FAULTS, RACE_FAULTS, isFaultName, isRaceFault, type FaultName, type RaceFaultName } from './faults.js';
import { ATTENTION_MODES, type AttentionMode, type KernelPreference } from './attention/kernel.js';

export interface EngineOptions {
  /** @default 'single' */
  preset?: string;
  /** Divides the preset's capacities (not explicit token overrides). @default 1 */
  scale?: number;
  /** Overrides the preset's context limit (after scaling). */
  contextTokens?: number;
  /**
   * Overrides the preset's pool capacity (after scaling); rounded down to whole pages. In the
   * disaggregated mode this is the prefill pool (the one that bounds admission).
   */
  poolTokens?: number;
  /** Disaggregated mode: overrides decode's pool capacity (after scaling). */
  decodePoolTokens?: number;
  /** Faults to add to the preset's (see faults.ts). */
  faults?: readonly string[];
  /** Defenses to add to the preset's (see defenses.ts). `zero-on-release` is the same as `zeroOnRelease`. */
  defenses?: readonly string[];
  /**
   * Race faults' rates: the fraction of eligible events, in (0, 1], each fires on (faults.ts RACE_FAULTS),
   * drawn from a generator seeded with `faultSeed`. Only for faults that are on. @default 1 for each
   */
  faultRates?: Readonly<Record<string, number>>;
  /** Seed of the generator the race faults' rates draw from. @default 0 */
  faultSeed?: number;
  /** Disaggregated mode: milliseconds for one transfer batch (or host copy batch) to land. @default 4 */
  transferLatencyMs?: number;
  /** Disaggregated mode: tokens per transfer batch. @default 16,384 / scale (at least one page) */
  transferBatchTokens?: number;
  /**
   * Disaggregated mode: the host-offload tier (decode writes finished requests' prompt pages back to host
   * memory and loads them again on a prefix hit). @default true when `offload-release-race` is named
   */
  hostOffload?: boolean;
  /** Host tier capacity in tokens. @default decode's pool capacity */
  hostCacheTokens?: number;
  /** The prefix cache (decode's pool in the disaggregated mode; on by default, as in vLLM and SGLang). @default true */
  prefixCache?: boolean;
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
  /**
   * `skip` keeps every admission, page and accounting decision and skips the attention arithmetic
   * (attention/skip-kernel.ts): for measuring cost at full scale, never detection. @default 'full'
   */
  attention?: AttentionMode;
  /** Request body limit. @default 6 bytes per context token + 1 MiB (a fully escaped max-length prompt). */
  maxBodyBytes?: number;
  /** Sampling seed when a request gives none. @default 0 */
  defaultSeed?: number;
}

/** The disaggregated mode's own settings. */
export interface DisaggregatedConfig {
  decodePoolTokens: number;
  decodeNumPages: number;
  transferLatencyMs: number;
  transferBatchTokens: number;
  hostOffload: boolean;
  hostCacheTokens: number;
}

export interface EngineConfig {
  preset: string;
  mode: EngineMode;
  contextTokens: number;
  /** The pool that bounds admission: the only pool in single mode, prefill's in the disaggregated mode. */
  poolTokens: number;
  numPages: number;
  pageSize: number;
  freeList: FreeListPolicy;
  zeroOnRelease: boolean;
  /** Full prompt pages shared between requests by a chained block hash (prefix-cache.ts); decode's pool when disaggregated. */
  prefixCache: boolean;
  chunkTokens: number;
  decodePositionsPerStep: number;
  maxRunning: number;
  maxWaiting: number;
  modelId: string;
  model: ModelConfig;
  kernel: KernelPreference;
  attention: AttentionMode;
  maxBodyBytes: number;
  defaultSeed: number;
  faults: FaultName[];
  /** Rated race faults (absent: fires on every eligible event). */
  faultRates: Partial<Record<RaceFaultName, number>>;
  faultSeed: number;
  /** Includes `zero-on-release` exactly when zeroOnRelease is set. */
  defenses: DefenseName[];
  /** Present exactly in the disaggregated mode. */
  disaggregated?: DisaggregatedConfig;
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

function names<T extends string>(option: 'faults' | 'defenses', given: readonly string[] | undefined, known: readonly T[], is: (n: string) => n is T): T[] {
  if (given === undefined) return [];
  if (!Array.isArray(given)) throw new EngineConfigError(option, `Expected \`${option}\` to be an array of names, got ${describe(given)}`);
  return given.map((name) => {
    if (typeof name !== 'string' || !is(name)) {
      throw new EngineConfigError(option, `Unknown ${option === 'faults' ? 'fault' : 'defense'} ${describe(name)}; known: ${known.join(', ')}`);
    }
    return name;
  });
}

function faultRates(given: EngineOptions['faultRates'], faults: readonly FaultName[]): Partial<Record<RaceFaultName, number>> {
  if (given === undefined) return {};
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new EngineConfigError('faultRates', `Expected \`faultRates\` to be an object of fault name to rate, got ${describe(given)}`);
  }
  const rates: Partial<Record<RaceFaultName, number>> = {};
  for (const [name, rate] of Object.entries(given)) {
    if (!isRaceFault(name)) {
      throw new EngineConfigError(
        'faultRates',
        isFaultName(name)
          ? `The fault \`${name}\` has no rate: only race faults fire on a fraction of events (${RACE_FAULTS.join(', ')})`
          : `Unknown fault ${describe(name)} in \`faultRates\`; race faults: ${RACE_FAULTS.join(', ')}`,
      );
    }
    if (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0 || rate > 1) {
      throw new EngineConfigError('faultRates', `Expected the rate of \`${name}\` to be a number in (0, 1], got ${describe(rate)}`);
    }
    if (!faults.includes(name)) {
      throw new EngineConfigError('faultRates', `A rate for \`${name}\` needs the fault on: name it as a fault too (--fault ${name})`);
    }
    rates[name] = rate;
  }
  return rates;
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
  const attention = options.attention ?? 'full';
  if (!ATTENTION_MODES.includes(attention)) {
    throw new EngineConfigError('attention', `Expected \`attention\` to be ${ATTENTION_MODES.join(' or ')}, got ${describe(attention)}`);
  }
  const model = { ...DEFAULT_MODEL_CONFIG, ...options.model };
  integer('model.ngram', model.ngram, 1, 64);
  for (const key of ['beta', 'logitScale'] as const) {
    if (typeof model[key] !== 'number' || !(model[key] > 0) || !Number.isFinite(model[key])) {
      throw new EngineConfigError(`model.${key}`, `Expected \`model.${key}\` to be a finite number > 0, got ${describe(model[key])}`);
    }
  }
  const faults = [...new Set([...preset.faults, ...names('faults', options.faults, FAULTS, isFaultName)])];
  const defenseSet = new Set([...preset.defenses, ...names('defenses', options.defenses, DEFENSES, isDefenseName)]);
  if (options.zeroOnRelease === true) defenseSet.add('zero-on-release');
  const defenses = DEFENSES.filter((d) => defenseSet.has(d));
  const disaggregatedPresets = Object.values(PRESETS).filter((p) => p.mode === 'disaggregated').map((p) => p.name);
  // The host-offload tier is its own prefix-reuse path (decode loads a finished request's pages back on a
  // prefix hit); the two are not combined, so naming the tier turns the device prefix cache off by default.
  // `host-tier-ignores-salt` is the exception: its point is a device cache that honours the salt in front of
  // a host tier that does not, so it keeps the prefix cache on.
  const hostTierNamed = options.hostOffload === true || faults.includes('offload-release-race') || faults.includes('host-tier-ignores-salt');
  const prefixCache = options.prefixCache ?? (!hostTierNamed || faults.includes('host-tier-ignores-salt'));
  if (typeof prefixCache !== 'boolean') throw new EngineConfigError('prefixCache', `Expected \`prefixCache\` to be a boolean, got ${describe(prefixCache)}`);
  const cacheFault = faults.find((f) => PREFIX_CACHE_FAULTS.includes(f));
  if (cacheFault !== undefined && !prefixCache) {
    throw new EngineConfigError('prefixCache', `The fault \`${cacheFault}\` lives in the prefix cache: it cannot be named with the prefix cache off`);
  }
  if (preset.mode === 'single') {
    const misplaced = [...faults.filter((f) => !PREFIX_CACHE_FAULTS.includes(f)), ...defenses.filter((d) => !SINGLE_NODE_DEFENSES.includes(d))];
    if (misplaced.length > 0) {
      throw new EngineConfigError(
        isFaultName(misplaced[0] as string) ? 'faults' : 'defenses',
        `\`${misplaced[0]}\` needs a disaggregated preset (${disaggregatedPresets.join(', ')}); preset \`${preset.name}\` runs on one node`,
      );
    }
    for (const key of ['decodePoolTokens', 'transferLatencyMs', 'transferBatchTokens', 'hostOffload', 'hostCacheTokens'] as const) {
      if (options[key] !== undefined) {
        throw new EngineConfigError(key, `\`${key}\` needs a disaggregated preset (${disaggregatedPresets.join(', ')}); preset \`${preset.name}\` runs on one node`);
      }
    }
  }
  let disaggregated: DisaggregatedConfig | undefined;
  if (preset.mode === 'disaggregated') {
    const decodeRequested =
      options.decodePoolTokens === undefined
        ? Math.floor((preset.decodePoolTokens ?? preset.contextTokens) / scale)
        : integer('decodePoolTokens', options.decodePoolTokens, pageSize);
    const decodeNumPages = Math.floor(decodeRequested / pageSize);
    if (decodeNumPages < 1) {
      throw new EngineConfigError('decodePoolTokens', `Expected decode's pool to hold at least one page of ${pageSize} tokens, got ${decodeRequested} tokens`);
    }
    const latency = options.transferLatencyMs ?? 4;
    if (typeof latency !== 'number' || !Number.isFinite(latency) || latency < 0 || latency > 60_000) {
      throw new EngineConfigError('transferLatencyMs', `Expected \`transferLatencyMs\` to be a number in [0, 60000], got ${describe(latency)}`);
    }
    const hostOffload = options.hostOffload ?? (faults.includes('offload-release-race') || faults.includes('host-tier-ignores-salt'));
    if (typeof hostOffload !== 'boolean') throw new EngineConfigError('hostOffload', `Expected \`hostOffload\` to be a boolean, got ${describe(hostOffload)}`);
    if (!hostOffload && faults.includes('offload-release-race')) {
      throw new EngineConfigError('hostOffload', 'The fault `offload-release-race` lives in the host-offload tier: it cannot be named with `hostOffload` false');
    }
    if (!hostOffload && faults.includes('host-tier-ignores-salt')) {
      throw new EngineConfigError('hostOffload', 'The fault `host-tier-ignores-salt` lives in the host-offload tier: it cannot be named with `hostOffload` false');
    }
    disaggregated = {
      decodePoolTokens: decodeNumPages * pageSize,
      decodeNumPages,
      transferLatencyMs: latency,
      transferBatchTokens:
        options.transferBatchTokens === undefined
          ? Math.max(pageSize, Math.floor(16_384 / scale))
          : integer('transferBatchTokens', options.transferBatchTokens, 1),
      hostOffload,
      hostCacheTokens:
        options.hostCacheTokens === undefined ? decodeNumPages * pageSize : integer('hostCacheTokens', options.hostCacheTokens, pageSize),
    };
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
    zeroOnRelease: defenses.includes('zero-on-release'),
    prefixCache,
    chunkTokens: options.chunkTokens === undefined ? 4096 : integer('chunkTokens', options.chunkTokens, 1),
    decodePositionsPerStep:
      options.decodePositionsPerStep === undefined ? 4_194_304 : integer('decodePositionsPerStep', options.decodePositionsPerStep, 1),
    maxRunning: options.maxRunning === undefined ? 256 : integer('maxRunning', options.maxRunning, 1),
    maxWaiting: options.maxWaiting === undefined ? 1024 : integer('maxWaiting', options.maxWaiting, 0),
    modelId,
    model,
    kernel,
    attention,
    maxBodyBytes:
      options.maxBodyBytes === undefined ? 6 * contextTokens + 1024 * 1024 : integer('maxBodyBytes', options.maxBodyBytes, 1024),
    defaultSeed: options.defaultSeed === undefined ? 0 : integer('defaultSeed', options.defaultSeed, 0, 0xffffffff),
    faults,
    faultRates: faultRates(options.faultRates, faults),
    faultSeed: options.faultSeed === undefined ? 0 : integer('faultSeed', options.faultSeed, 0, 0xffffffff),
    defenses,
    ...(disaggregated !== undefined ? { disaggregated } : {}),
  };
}
