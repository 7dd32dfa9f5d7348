/**
 * `kvcanary engine`: runs the reference engine until SIGTERM or SIGINT.
 * The first stdout line holds the URL (`http://127.0.0.1:PORT`); everything else goes to stderr.
 * Exit codes: 0 clean stop, 64 bad usage (the message names the flag), 70 failed to start.
 */
import { parseArgs } from 'node:util';
import { ATTENTION_MODES, type AttentionMode } from './attention/kernel.js';
import { EngineConfigError } from './config.js';
import { DEFENSES } from './defenses.js';
import { FAULTS, RACE_FAULTS, isFaultName, isRaceFault } from './faults.js';
import { FREE_LIST_POLICIES, type FreeListPolicy } from './free-list.js';
import { PRESETS } from './presets.js';
import { startEngine, type StartEngineOptions } from './start.js';

/**
 * A flag value for a usage error: a short plain word or number is quoted; anything else (a key pasted into the
 * wrong flag, control characters) is described by its length, never echoed.
 */
function shown(value: unknown): string {
  const s = String(value);
  return /^[A-Za-z0-9_.+-]{1,24}$/.test(s) && !/\d.*[A-Za-z]{3}|[A-Za-z]{3}.*\d/.test(s) ? `'${s}'` : `a value of ${s.length} characters (not shown)`;
}

const EXIT_OK = 0;
const EXIT_USAGE = 64;
const EXIT_INTERNAL = 70;

const USAGE = `usage: kvcanary engine [options]

Runs the bundled reference engine (OpenAI-compatible API) until SIGTERM/SIGINT.

options:
  --preset NAME          ${Object.keys(PRESETS).join(' | ')} (default single)
${Object.values(PRESETS)
  .map((p) => `                           ${p.name}: ${p.description}`)
  .join('\n')}
  --scale N              divide the preset's capacities by N (default 1)
  --fault NAME           add a fault to the preset (repeatable): ${FAULTS.join(', ')}
  --defense NAME         add a defense to the preset (repeatable): ${DEFENSES.join(', ')}
  --fault-rate NAME=X    a race fault (${RACE_FAULTS.join(', ')}) fires on a fraction X in (0, 1] of its
                         eligible events, drawn from a seeded generator (repeatable; the fault must be on; default 1)
  --fault-seed N         seed of that generator, 0-4294967295 (default 0)
  --context-tokens N     context limit (overrides the preset, not scaled)
  --pool-tokens N        KV pool capacity in tokens, prefill's when disaggregated (overrides the preset, not scaled)
  --decode-pool-tokens N decode's KV pool capacity (disaggregated; overrides the preset, not scaled)
  --transfer-latency-ms X  mean flight time of one KV transfer batch (disaggregated; default 4)
  --transfer-batch-tokens N  tokens per KV transfer batch (disaggregated; default 16384 / scale)
  --host-offload         the host-offload tier (disaggregated; on with --fault offload-release-race)
  --page-size N          slots per KV page, multiple of 4 (default 16)
  --free-list POLICY     ${FREE_LIST_POLICIES.join(' | ')} (default fifo)
  --zero-on-release      zero KV pages when they are freed (default off, as real engines); same as --defense zero-on-release
  --no-prefix-cache      turn the prefix cache off (single node; on by default, as in vLLM and SGLang)
  --chunk-tokens N       prompt tokens prefilled per scheduler step (default 4096)
  --model-id ID          served model name (default kvcanary-engine)
  --model-ngram N        tokens of context the copy head matches on, 1-64 (default 8; shorter copies less faithfully)
  --model-beta X         attention sharpness, > 0 (default 20; lower is flatter attention)
                         sampling temperature comes from each request (\`temperature\`, 0 = greedy)
  --attention MODE       full | skip (default full); skip keeps every admission, page and accounting
                         decision and skips the attention arithmetic: for measuring cost at full scale,
                         never detection (generation copies nothing)
  --host HOST            default 127.0.0.1
  --port P               default 0 (a free port)
  -h, --help

The first line on stdout holds the URL. Exit codes: 0 stopped cleanly, 64 bad usage, 70 failed to start.`;

class UsageError extends Error {}

function positiveInt(flag: string, value: string | undefined, min = 1, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
    throw new UsageError(`--${flag} must be an integer in [${min}, ${max}], got ${shown(value)}`);
  }
  return Number(value);
}

/** `--fault-rate NAME=X`, repeatable: each a race fault that is on, once, with a rate in (0, 1]. */
function parseFaultRates(given: string[] | undefined, faultsOn: readonly string[]): Record<string, number> | undefined {
  if (given === undefined) return undefined;
  const rates: Record<string, number> = {};
  for (const item of given) {
    const m = /^([a-z-]+)=(\d*\.?\d+)$/.exec(item);
    if (m === null) throw new UsageError(`--fault-rate must be NAME=RATE (e.g. late-write=0.1), got '${item}'`);
    const [, name, text] = m as unknown as [string, string, string];
    const rate = Number(text);
    if (!isRaceFault(name)) {
      throw new UsageError(
        isFaultName(name)
          ? `--fault-rate: '${name}' has no rate; only race faults do: ${RACE_FAULTS.join(', ')}`
          : `--fault-rate: unknown fault '${name}'; race faults: ${RACE_FAULTS.join(', ')}`,
      );
    }
    if (!(rate > 0 && rate <= 1)) throw new UsageError(`--fault-rate ${name}: the rate must be in (0, 1], got '${text}'`);
    if (name in rates) throw new UsageError(`--fault-rate ${name} given twice`);
    if (!faultsOn.includes(name)) throw new UsageError(`--fault-rate ${name} needs the fault on: add --fault ${name}`);
    rates[name] = rate;
  }
  return rates;
}

export function parseEngineArgs(args: string[]): StartEngineOptions | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        preset: { type: 'string' },
        scale: { type: 'string' },
        'context-tokens': { type: 'string' },
        'pool-tokens': { type: 'string' },
        'decode-pool-tokens': { type: 'string' },
        fault: { type: 'string', multiple: true },
        defense: { type: 'string', multiple: true },
        'fault-rate': { type: 'string', multiple: true },
        'fault-seed': { type: 'string' },
        'transfer-latency-ms': { type: 'string' },
        'transfer-batch-tokens': { type: 'string' },
        'host-offload': { type: 'boolean' },
        'page-size': { type: 'string' },
        'free-list': { type: 'string' },
        'zero-on-release': { type: 'boolean' },
        'no-prefix-cache': { type: 'boolean' },
        'chunk-tokens': { type: 'string' },
        'model-id': { type: 'string' },
        'model-ngram': { type: 'string' },
        'model-beta': { type: 'string' },
        attention: { type: 'string' },
        host: { type: 'string' },
        port: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    // node:util's messages already name the flag ("Unknown option '--x'", "Option '--port <value>' argument missing").
    throw new UsageError((err as Error).message.split('. To specify')[0] as string);
  }
  const v = parsed.values;
  if (v.help === true) return 'help';
  const preset = v.preset;
  if (preset !== undefined && PRESETS[preset] === undefined) {
    throw new UsageError(`--preset must be one of ${Object.keys(PRESETS).join(', ')}, got ${shown(preset)}`);
  }
  const freeList = v['free-list'];
  if (freeList !== undefined && !(FREE_LIST_POLICIES as readonly string[]).includes(freeList)) {
    throw new UsageError(`--free-list must be one of ${FREE_LIST_POLICIES.join(', ')}, got ${shown(freeList)}`);
  }
  for (const [flag, given, known] of [
    ['fault', v.fault, FAULTS],
    ['defense', v.defense, DEFENSES],
  ] as const) {
    for (const name of given ?? []) {
      if (!(known as readonly string[]).includes(name)) throw new UsageError(`--${flag} must be one of ${known.join(', ')}, got ${shown(name)}`);
    }
  }
  const faultRates = parseFaultRates(v['fault-rate'], [...(v.fault ?? []), ...(PRESETS[preset ?? 'single']?.faults ?? [])]);
  const latency = v['transfer-latency-ms'];
  if (latency !== undefined && !(/^\d+(\.\d+)?$/.test(latency) && Number(latency) <= 60_000)) {
    throw new UsageError(`--transfer-latency-ms must be a number of milliseconds in [0, 60000], got ${shown(latency)}`);
  }
  const beta = v['model-beta'];
  if (beta !== undefined && !(/^\d+(\.\d+)?$/.test(beta) && Number(beta) > 0 && Number(beta) <= 1000)) {
    throw new UsageError(`--model-beta must be a number in (0, 1000], got ${shown(beta)}`);
  }
  const attention = v.attention;
  if (attention !== undefined && !(ATTENTION_MODES as readonly string[]).includes(attention)) {
    throw new UsageError(`--attention must be one of ${ATTENTION_MODES.join(', ')}, got '${attention}'`);
  }
  const ngram = positiveInt('model-ngram', v['model-ngram'], 1, 64);
  const model = { ...(ngram !== undefined ? { ngram } : {}), ...(beta !== undefined ? { beta: Number(beta) } : {}) };
  const options: StartEngineOptions = {
    ...(preset !== undefined ? { preset } : {}),
    ...(v.fault !== undefined ? { faults: v.fault } : {}),
    ...(v.defense !== undefined ? { defenses: v.defense } : {}),
    ...(faultRates !== undefined ? { faultRates } : {}),
    ...(latency !== undefined ? { transferLatencyMs: Number(latency) } : {}),
    ...(v['host-offload'] === true ? { hostOffload: true } : {}),
    ...(freeList !== undefined ? { freeList: freeList as FreeListPolicy } : {}),
    ...(v['zero-on-release'] === true ? { zeroOnRelease: true } : {}),
    ...(v['no-prefix-cache'] === true ? { prefixCache: false } : {}),
    ...(v['model-id'] !== undefined ? { modelId: v['model-id'] } : {}),
    ...(Object.keys(model).length > 0 ? { model } : {}),
    ...(attention !== undefined ? { attention: attention as AttentionMode } : {}),
    ...(v.host !== undefined ? { host: v.host } : {}),
  };
  const ints: [keyof StartEngineOptions, string, number?, number?][] = [
    ['scale', 'scale'],
    ['contextTokens', 'context-tokens', 2],
    ['poolTokens', 'pool-tokens'],
    ['decodePoolTokens', 'decode-pool-tokens'],
    ['transferBatchTokens', 'transfer-batch-tokens'],
    ['pageSize', 'page-size', 4, 1024],
    ['chunkTokens', 'chunk-tokens'],
    ['port', 'port', 0, 65535],
    ['faultSeed', 'fault-seed', 0, 0xffffffff],
  ];
  for (const [key, flag, min, max] of ints) {
    const n = positiveInt(flag, v[flag as keyof typeof v] as string | undefined, min, max);
    if (n !== undefined) (options as Record<string, unknown>)[key] = n;
  }
  return options;
}

/** Resolves with the exit code once the engine has stopped. */
export async function engineMain(args: string[]): Promise<number> {
  let options: StartEngineOptions | 'help';
  try {
    options = parseEngineArgs(args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`kvcanary engine: ${err.message}\n\n${USAGE}\n`);
    return EXIT_USAGE;
  }
  if (options === 'help') {
    process.stdout.write(USAGE + '\n');
    return EXIT_OK;
  }
  let running;
  try {
    running = await startEngine(options);
  } catch (err) {
    if (err instanceof EngineConfigError) {
      process.stderr.write(`kvcanary engine: ${err.message}\n`);
      return EXIT_USAGE;
    }
    process.stderr.write(`kvcanary engine: failed to start: ${(err as Error).message}\n`);
    return EXIT_INTERNAL;
  }
  const c = running.config;
  const pools =
    c.disaggregated === undefined
      ? `pool ${c.poolTokens} tokens in ${c.numPages} pages of ${c.pageSize}`
      : `prefill pool ${c.poolTokens} tokens, decode pool ${c.disaggregated.decodePoolTokens} tokens, pages of ${c.pageSize}`;
  process.stdout.write(
    `kvcanary engine listening on ${running.url} (preset ${c.preset}, ${c.mode}, context ${c.contextTokens} tokens, ` +
      `${pools}, free list ${c.freeList}, prefix cache ${c.prefixCache ? 'on' : 'off'}, faults [${c.faults.map((f) => (c.faultRates[f as keyof typeof c.faultRates] !== undefined ? `${f} at rate ${c.faultRates[f as keyof typeof c.faultRates]}` : f)).join(', ')}], defenses [${c.defenses.join(', ')}], ` +
      `model ngram ${c.model.ngram} beta ${c.model.beta}, ` +
      `kernel ${running.engine.info().kernel})\n`,
  );
  await new Promise<void>((resolve) => {
    const stop = (signal: NodeJS.Signals): void => {
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      process.stderr.write(`kvcanary engine: ${signal}, stopping\n`);
      resolve();
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
  await running.close();
  return EXIT_OK;
}
