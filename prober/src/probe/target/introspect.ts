/**
 * Learns what an endpoint exposes about its limits, from whichever of the engines' own routes it has:
 * - `GET /v1/models`: model ids; `max_model_len` (vLLM, SGLang), `context_length`, llama.cpp `meta.n_ctx`
 *   (per slot; `n_ctx_train` is the model's, not the server's, and is only noted);
 * - SGLang `GET /get_server_info` (older `/server_info`): `context_length`, `max_total_num_tokens` (top level
 *   or per DP rank in `internal_states`), `page_size`, `max_req_input_len`; in PD mode the load balancer
 *   answers `{prefill: [...], decode: [...]}`, and the smallest pool binds;
 * - llama.cpp `GET /props`: `default_generation_settings.n_ctx`, `total_slots`; `GET /slots`: each slot's
 *   `n_ctx` (the context that slot enforces, split from `-c` or the whole unified buffer with `--kv-unified`).
 *   /slots also lists each slot's last prompt text: only the numbers are ever read out of it;
 * - vLLM `GET /metrics`: `vllm:cache_config_info{block_size, num_gpu_blocks}` gives the KV pool;
 * - `POST /tokenize`: vLLM/SGLang `{model, prompt}` → `{count | tokens}`, llama.cpp `{content}` → `{tokens}`.
 * Every probe is optional: a 404, a timeout or an odd shape is noted and skipped, never thrown. The
 * dialect is a best guess from evidence each engine alone produces; a tie stays `unknown`.
 * Only numbers and model ids are kept, never the documents: SGLang's server_info lists its server args,
 * the API key among them.
 */
import type { CallResult, TargetClient } from './client.js';
import { isRecord } from './error-body.js';
import { PROMPT_HOLE, type Prompt } from './prompt-body.js';

export type Dialect = 'vllm' | 'sglang' | 'llamacpp' | 'unknown';

export interface Introspection {
  models: string[];
  /** The context limit the endpoint advertises for the model, in tokens. */
  contextTokens?: number;
  /** KV pool capacity in tokens (the smallest, where several pools or ranks exist). */
  poolTokens?: number;
  /** The largest KV pool seen (in disaggregated serving, usually decode's, where reservations live). */
  largestPoolTokens?: number;
  /**
   * The pool where a request's pages are reserved and read: decode's, when a disaggregated deployment names
   * its decode pool (the smallest decode pool where there are several), else undefined (then the largest is the
   * best guess). Race workloads size their ballast to it: prefill's pool may be larger and holds nothing for long.
   */
  reservationPoolTokens?: number;
  pageSize?: number;
  /** The longest input the server admits (SGLang's max_req_input_len). */
  maxInputTokens?: number;
  dialect: Dialect;
  /** Counts tokens with the endpoint's own tokenizer; undefined when it has none that answered sanely. */
  tokenize?: (text: Prompt) => Promise<number | undefined>;
  /**
   * The token ids the endpoint's tokenizer gives a short text (special tokens as its /tokenize adds them by
   * default, BOS included where the model has one); undefined when /tokenize lists no ids.
   */
  tokenizeIds?: (text: string) => Promise<number[] | undefined>;
  /** llama.cpp: its slots, from /props `total_slots` and /slots `n_ctx` per slot (numbers only). */
  slots?: { total: number; nCtx: number[] };
  /** llama.cpp: reads /slots now (numbers only, never the prompts it lists); undefined when /slots did not answer. */
  readSlots?: () => Promise<SlotState[] | undefined>;
  /** What was found and where, one line each. */
  notes: string[];
  /** At least one probe got an HTTP response. */
  reachable: boolean;
}

/** One llama.cpp slot as /slots shows it, numbers only. */
export interface SlotState {
  id: number;
  nCtx: number;
  /** Tokens of the prompt the slot holds now (its last task's), when it had one. */
  nPromptTokens?: number;
  processing: boolean;
}

export interface IntrospectOptions {
  /** The model the caller will probe; selects its entry in /v1/models. @default the first listed */
  model?: string;
  /** Deadline per probe. @default min(client.timeoutMs, 10000) */
  timeoutMs?: number;
  signal?: AbortSignal;
}

const METRICS_MAX_BYTES = 4 * 1024 * 1024;
/** /slots lists each slot's last prompt and output: bounded, and only numbers are kept. */
const SLOTS_MAX_BYTES = 8 * 1024 * 1024;
/** /tokenize answers for the short texts whose ids a probe asks for (a few thousand tokens at most). */
const TOKENIZE_IDS_MAX_BYTES = 1024 * 1024;
const PROBE_TEXT = 'kvcanary tokenizer probe: the quick brown fox jumps over the lazy dog.';
const SGLANG_ARG_KEYS = ['tp_size', 'dp_size', 'mem_fraction_static', 'chunked_prefill_size', 'schedule_policy', 'disable_radix_cache', 'disaggregation_mode'];

export async function introspect(client: TargetClient, opts: IntrospectOptions = {}): Promise<Introspection> {
  const call = { timeoutMs: opts.timeoutMs ?? Math.min(client.timeoutMs, 10_000), ...(opts.signal !== undefined ? { signal: opts.signal } : {}) };
  const notes: string[] = [];
  const score: Record<Exclude<Dialect, 'unknown'>, number> = { vllm: 0, sglang: 0, llamacpp: 0 };
  const out: Introspection = { models: [], dialect: 'unknown', notes, reachable: false };
  const seen = (r: CallResult<unknown>): void => {
    if (r.status !== undefined) out.reachable = true;
  };

  const [models, props, slots, serverInfo, metrics] = await Promise.all([
    client.requestJson('GET', '/v1/models', undefined, call),
    client.requestJson('GET', '/props', undefined, call),
    client.requestJson('GET', '/slots', undefined, { ...call, maxBytes: SLOTS_MAX_BYTES }),
    client.requestJson('GET', '/get_server_info', undefined, call).then(async (r) =>
      r.transport === 'ok' ? { path: '/get_server_info', r } : { path: '/server_info', r: await client.requestJson('GET', '/server_info', undefined, call), first: r },
    ),
    client.requestText('/metrics', { ...call, maxBytes: METRICS_MAX_BYTES }),
  ]);
  for (const r of [models, props, slots, serverInfo.r, metrics]) seen(r);
  if ('first' in serverInfo && serverInfo.first !== undefined) seen(serverInfo.first);

  // --- /v1/models
  let modelsContext: number | undefined;
  if (models.transport === 'ok' && isRecord(models.value) && Array.isArray(models.value['data'])) {
    const entries = models.value['data'].filter(isRecord);
    out.models = entries.map((e) => e['id']).filter((id): id is string => typeof id === 'string');
    const entry = entries.find((e) => e['id'] === opts.model) ?? entries[0];
    for (const e of entries) {
      const owner = typeof e['owned_by'] === 'string' ? e['owned_by'].toLowerCase() : '';
      if (owner === 'vllm') score.vllm += 3;
      if (owner === 'sglang') score.sglang += 3;
      if (owner === 'llamacpp' || owner === 'llama.cpp') score.llamacpp += 3;
      if (isRecord(e['meta'])) score.llamacpp += 2;
    }
    if (entry !== undefined) {
      const meta = isRecord(entry['meta']) ? entry['meta'] : {};
      const [value, field] = firstInt([entry['max_model_len'], 'max_model_len'], [entry['context_length'], 'context_length'], [meta['n_ctx'], 'meta.n_ctx']);
      modelsContext = value;
      notes.push(`GET /v1/models: ${out.models.length} model(s)${value !== undefined ? `; ${field} ${value} for ${String(entry['id'])}` : '; no context limit listed'}`);
      const train = int(meta['n_ctx_train']);
      if (train !== undefined) notes.push(`GET /v1/models: meta.n_ctx_train ${train} is the model's training context, not the server's limit`);
    } else {
      notes.push('GET /v1/models: no models listed');
    }
    if (opts.model !== undefined && !out.models.includes(opts.model) && entry !== undefined) {
      notes.push(`GET /v1/models: model ${opts.model} not listed; limits read from ${String(entry['id'])}`);
    }
  } else {
    notes.push(`GET /v1/models: ${outcomeText(models, 'no `data` list')}`);
  }

  // --- llama.cpp /props
  let propsContext: number | undefined;
  if (props.transport === 'ok' && isRecord(props.value)) {
    const dgs = isRecord(props.value['default_generation_settings']) ? props.value['default_generation_settings'] : undefined;
    const nCtx = int(dgs?.['n_ctx']) ?? int(props.value['n_ctx']);
    const slots = int(props.value['total_slots']);
    if (dgs !== undefined || slots !== undefined) score.llamacpp += 3;
    if (nCtx !== undefined) {
      propsContext = nCtx;
      notes.push(`GET /props: n_ctx ${nCtx} per slot${slots !== undefined ? `, ${slots} slot(s)` : ''}`);
    } else {
      notes.push('GET /props: answered without n_ctx');
    }
  } else {
    notes.push(`GET /props: ${outcomeText(props, 'not an object')}`);
  }

  // --- llama.cpp /slots: numbers only (each entry also carries its last prompt's text)
  const slotStates = slots.transport === 'ok' ? slotStatesOf(slots.value) : undefined;
  if (slotStates !== undefined && slotStates.length > 0) {
    score.llamacpp += 2;
    const total = int(isRecord(props.value) ? props.value['total_slots'] : undefined) ?? slotStates.length;
    out.slots = { total, nCtx: slotStates.map((s) => s.nCtx) };
    out.readSlots = async () => {
      const r = await client.requestJson('GET', '/slots', undefined, { ...call, maxBytes: SLOTS_MAX_BYTES });
      return r.transport === 'ok' ? slotStatesOf(r.value) : undefined;
    };
    notes.push(`GET /slots: ${slotStates.length} slot(s), n_ctx ${[...new Set(out.slots.nCtx)].join('/')} per slot`);
  } else {
    notes.push(`GET /slots: ${outcomeText(slots, 'no slots listed')}`);
  }

  // --- SGLang /get_server_info
  let infoContext: number | undefined;
  if (serverInfo.r.transport === 'ok' && isRecord(serverInfo.r.value)) {
    const info = serverInfo.r.value;
    if ('first' in serverInfo && serverInfo.first !== undefined) notes.push(`GET /get_server_info: ${outcomeText(serverInfo.first, 'not an object')}; trying /server_info`);
    const servers: Array<{ role: string; s: Record<string, unknown> }> = [];
    const pd = Array.isArray(info['prefill']) || Array.isArray(info['decode']);
    if (pd) {
      for (const role of ['prefill', 'decode'] as const) {
        const list = info[role];
        if (Array.isArray(list)) list.filter(isRecord).forEach((s, i) => servers.push({ role: `${role}[${i}]`, s }));
      }
      score.sglang += 3;
    } else {
      servers.push({ role: 'server', s: info });
      // Some PD deployments (and the bundled engine) report each role's pool as a nested object.
      for (const role of ['prefill', 'decode'] as const) {
        const nested = info[role];
        if (isRecord(nested)) servers.push({ role, s: nested });
      }
    }
    for (const { role, s } of servers) {
      const ctx = int(s['context_length']) ?? int(s['max_context_length']);
      const pool = minInt([int(s['max_total_num_tokens']), ...ranks(s, (r) => int(r['max_total_num_tokens']) ?? (isRecord(r['memory_usage']) ? int(r['memory_usage']['token_capacity']) : undefined))]);
      const page = int(s['page_size']);
      const maxIn = minInt([int(s['max_req_input_len']), ...ranks(s, (r) => int(r['max_req_input_len']))]);
      if (ctx !== undefined) infoContext = infoContext === undefined ? ctx : Math.min(infoContext, ctx);
      if (pool !== undefined) {
        out.poolTokens = out.poolTokens === undefined ? pool : Math.min(out.poolTokens, pool);
        out.largestPoolTokens = Math.max(out.largestPoolTokens ?? 0, pool);
        if (role.startsWith('decode')) out.reservationPoolTokens = Math.min(out.reservationPoolTokens ?? Infinity, pool);
      }
      if (page !== undefined) out.pageSize ??= page;
      if (maxIn !== undefined) out.maxInputTokens = out.maxInputTokens === undefined ? maxIn : Math.min(out.maxInputTokens, maxIn);
      const found = [
        ctx !== undefined ? `context_length ${ctx}` : undefined,
        pool !== undefined ? `max_total_num_tokens ${pool}` : undefined,
        page !== undefined ? `page_size ${page}` : undefined,
        maxIn !== undefined ? `max_req_input_len ${maxIn}` : undefined,
      ].filter((x) => x !== undefined);
      notes.push(`GET ${serverInfo.path} (${role}): ${found.length > 0 ? found.join(', ') : 'no limits listed'}`);
      const argKeys = SGLANG_ARG_KEYS.filter((k) => k in s).length;
      if (!pd) score.sglang += argKeys >= 2 ? 3 : pool !== undefined ? 1 : 0;
    }
  } else {
    const first = 'first' in serverInfo ? serverInfo.first : undefined;
    notes.push(`GET /get_server_info: ${outcomeText(first ?? serverInfo.r, 'not an object')}`);
    if (first !== undefined) notes.push(`GET /server_info: ${outcomeText(serverInfo.r, 'not an object')}`);
  }

  // --- /metrics (vLLM exposes its KV pool here)
  if (metrics.transport === 'ok' && typeof metrics.value === 'string') {
    const text = metrics.value;
    if (/^vllm:/m.test(text)) score.vllm += 3;
    if (/^sglang:/m.test(text)) score.sglang += 3;
    if (/^llamacpp:/m.test(text)) score.llamacpp += 3;
    const cache = /^vllm:cache_config_info\{([^}]*)\}/m.exec(text);
    if (cache !== null) {
      const labels = parseLabels(cache[1] ?? '');
      const block = int(Number(labels['block_size']));
      const blocks = int(Number(labels['num_gpu_blocks']));
      if (block !== undefined && blocks !== undefined) {
        const pool = block * blocks;
        out.poolTokens = out.poolTokens === undefined ? pool : Math.min(out.poolTokens, pool);
        out.largestPoolTokens = Math.max(out.largestPoolTokens ?? 0, pool);
        out.pageSize ??= block;
        notes.push(`GET /metrics: vllm:cache_config_info num_gpu_blocks ${blocks} × block_size ${block} = ${pool} tokens`);
      } else {
        notes.push('GET /metrics: vllm:cache_config_info without num_gpu_blocks and block_size');
      }
    }
  } else {
    notes.push(`GET /metrics: ${outcomeText(metrics, 'unreadable')}`);
  }

  // --- /tokenize: try the likelier dialect's shape first; accept one that counts sanely.
  const model = opts.model ?? out.models[0];
  const vllmShape = (): Record<string, unknown> => (model !== undefined ? { model, prompt: PROMPT_HOLE } : { prompt: PROMPT_HOLE });
  const llamaShape = (): Record<string, unknown> => ({ content: PROMPT_HOLE, add_special: true });
  const shapes: Array<[string, () => Record<string, unknown>]> =
    score.llamacpp > Math.max(score.vllm, score.sglang) ? [['llama.cpp {content}', llamaShape], ['vLLM {model, prompt}', vllmShape]] : [['vLLM {model, prompt}', vllmShape], ['llama.cpp {content}', llamaShape]];
  for (const [label, shape] of shapes) {
    const small = await client.requestTokenCount('/tokenize', shape(), PROBE_TEXT, call);
    seen(small);
    if (small.transport !== 'ok' || small.value === undefined) {
      notes.push(`POST /tokenize ${label}: ${outcomeText(small, 'no count')}`);
      if (small.status === undefined || small.status === 404 || small.status === 405) break; // no such route: the other shape will not help
      continue;
    }
    const big = await client.requestTokenCount('/tokenize', shape(), PROBE_TEXT.repeat(4), call);
    if (big.value === undefined || !(small.value >= 1 && big.value > small.value)) {
      notes.push(`POST /tokenize ${label}: counts not sane (${small.value}, then ${String(big.value)} for 4× the text)`);
      continue;
    }
    const template = shape();
    out.tokenize = async (text: Prompt) => (await client.requestTokenCount('/tokenize', template, text, call)).value;
    out.tokenizeIds = async (text: string) => {
      const r = await client.requestJson('POST', '/tokenize', fillHole(template, text), { ...call, maxBytes: TOKENIZE_IDS_MAX_BYTES });
      return r.transport === 'ok' ? tokenIdsOf(r.value) : undefined;
    };
    notes.push(`POST /tokenize ${label}: ${small.value} tokens for a ${PROBE_TEXT.length}-char probe`);
    if (label.startsWith('llama')) score.llamacpp += 1;
    else score.vllm += 1;
    break;
  }

  out.contextTokens = modelsContext ?? infoContext ?? propsContext;
  const sources = [
    ['/v1/models', modelsContext],
    ['server_info', infoContext],
    ['/props', propsContext],
  ].filter((s): s is [string, number] => s[1] !== undefined);
  if (new Set(sources.map((s) => s[1])).size > 1) {
    notes.push(`context limits disagree: ${sources.map(([k, v]) => `${k} ${v}`).join(', ')}; using ${out.contextTokens}`);
  }

  const ranked = (Object.entries(score) as Array<[Exclude<Dialect, 'unknown'>, number]>).sort((a, b) => b[1] - a[1]);
  const [best, second] = ranked;
  if (best !== undefined && best[1] > 0 && (second === undefined || best[1] > second[1])) out.dialect = best[0];
  notes.push(`dialect: ${out.dialect} (evidence vllm ${score.vllm}, sglang ${score.sglang}, llamacpp ${score.llamacpp})`);
  return out;
}

/** llama.cpp /slots entries, numbers only; undefined when the shape is not a list of slots. */
function slotStatesOf(value: unknown): SlotState[] | undefined {
  if (!Array.isArray(value)) return undefined;
  const states: SlotState[] = [];
  for (const e of value) {
    if (!isRecord(e) || typeof e['id'] !== 'number' || !Number.isSafeInteger(e['id'])) return undefined;
    const nCtx = int(e['n_ctx']);
    if (nCtx === undefined) return undefined;
    const prompt = typeof e['n_prompt_tokens'] === 'number' && Number.isSafeInteger(e['n_prompt_tokens']) && e['n_prompt_tokens'] >= 0 ? e['n_prompt_tokens'] : undefined;
    states.push({ id: e['id'], nCtx, ...(prompt !== undefined ? { nPromptTokens: prompt } : {}), processing: e['is_processing'] === true });
  }
  return states;
}

function outcomeText(r: CallResult<unknown>, oddShape: string): string {
  if (r.transport === 'ok') return oddShape;
  if (r.status !== undefined) return `HTTP ${r.status}`;
  return r.transport + (r.detail !== undefined ? ` (${r.detail})` : '');
}

function int(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value > 0 ? value : undefined;
}

function firstInt(...candidates: Array<[unknown, string]>): [number | undefined, string] {
  for (const [value, name] of candidates) {
    const n = int(value);
    if (n !== undefined) return [n, name];
  }
  return [undefined, ''];
}

function minInt(values: Array<number | undefined>): number | undefined {
  const present = values.filter((v): v is number => v !== undefined);
  return present.length === 0 ? undefined : Math.min(...present);
}

/** Per-DP-rank scheduler states SGLang nests under `internal_states`. */
function ranks<T>(s: Record<string, unknown>, pick: (rank: Record<string, unknown>) => T | undefined): T[] {
  const states = s['internal_states'];
  if (!Array.isArray(states)) return [];
  return states.filter(isRecord).map(pick).filter((v): v is T => v !== undefined);
}

function parseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of text.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
    if (m[1] !== undefined && m[2] !== undefined) out[m[1]] = m[2];
  }
  return out;
}

/** The template with the prompt hole replaced by `text`. */
function fillHole(template: Record<string, unknown>, text: string): Record<string, unknown> {
  return Object.fromEntries(Object.entries(template).map(([k, v]) => [k, v === PROMPT_HOLE ? text : v]));
}

/** `tokens` as ids: vLLM/SGLang list integers, llama.cpp integers or (with_pieces) `{id, piece}` objects. */
export function tokenIdsOf(value: unknown): number[] | undefined {
  if (!isRecord(value) || !Array.isArray(value['tokens']) || value['tokens'].length === 0) return undefined;
  const ids: number[] = [];
  for (const t of value['tokens']) {
    const id = isRecord(t) ? t['id'] : t;
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) return undefined;
    ids.push(id);
  }
  return ids;
}
