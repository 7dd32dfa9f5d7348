/**
 * The engine's Prometheus metrics, on a registry of its own (never the global one). Engine-side values
 * are pulled from `engine.stats()` at scrape time, so the engine core stays free of prom-client and a
 * disaggregated engine only has to report the same stats. Labels are low-cardinality by construction:
 * endpoint is a route name, never a raw path.
 */
import { Counter, Gauge, Registry } from 'prom-client';
import { DEFENSES } from './defenses.js';
import type { Engine, EngineStats } from './engine.js';

export interface EngineMetrics {
  registry: Registry;
  observeHttp(endpoint: string, status: number): void;
}

/** A counter mirroring a monotonic total from the engine's stats. */
function mirroredCounter(
  registry: Registry,
  engine: Engine,
  name: string,
  help: string,
  read: (s: EngineStats) => number,
): void {
  let reported = 0;
  new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      const now = read(engine.stats());
      if (now > reported) this.inc(now - reported);
      reported = Math.max(reported, now);
    },
  });
}

function mirroredLabelledCounter(
  registry: Registry,
  engine: Engine,
  name: string,
  help: string,
  label: string,
  known: string[],
  read: (s: EngineStats) => Record<string, number>,
): void {
  const reported = new Map<string, number>();
  const counter = new Counter({
    name,
    help,
    labelNames: [label],
    registers: [registry],
    collect() {
      for (const [value, now] of Object.entries(read(engine.stats()))) {
        const before = reported.get(value) ?? 0;
        if (now > before) this.inc({ [label]: value }, now - before);
        reported.set(value, Math.max(before, now));
      }
    },
  });
  for (const value of known) counter.inc({ [label]: value }, 0);
}

export function createEngineMetrics(engine: Engine, registry: Registry = new Registry()): EngineMetrics {
  const http = new Counter({
    name: 'kvcanary_engine_http_requests_total',
    help: 'HTTP requests answered, by endpoint and status code.',
    labelNames: ['endpoint', 'status'],
    registers: [registry],
  });
  new Gauge({
    name: 'kvcanary_engine_sequences',
    help: 'Sequences in the engine, by state (running: prefill or decode; waiting: queued for pages).',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const s = engine.stats();
      this.set({ state: 'running' }, s.running);
      this.set({ state: 'waiting' }, s.waiting);
    },
  });
  new Gauge({
    name: 'kvcanary_engine_kv_pool_pages',
    help: 'KV pool pages, by state.',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const p = engine.stats().pool;
      this.set({ state: 'used' }, p.usedPages);
      this.set({ state: 'free' }, p.freePages);
    },
  });
  new Gauge({
    name: 'kvcanary_engine_kv_pool_capacity_tokens',
    help: 'Tokens the KV pool can hold.',
    registers: [registry],
    collect() {
      this.set(engine.info().poolTokens);
    },
  });
  new Gauge({
    name: 'kvcanary_engine_context_length_tokens',
    help: 'The advertised context limit (max_model_len).',
    registers: [registry],
    collect() {
      this.set(engine.info().contextTokens);
    },
  });
  mirroredCounter(registry, engine, 'kvcanary_engine_prompt_tokens_total', 'Prompt tokens prefilled.', (s) => s.promptTokensTotal);
  mirroredCounter(registry, engine, 'kvcanary_engine_generation_tokens_total', 'Tokens generated.', (s) => s.generationTokensTotal);
  mirroredCounter(
    registry,
    engine,
    'kvcanary_engine_prefix_cache_cached_tokens_total',
    'Prompt tokens served from the prefix cache instead of prefill (usage.prompt_tokens_details.cached_tokens).',
    (s) => s.prefixCache?.cachedTokensTotal ?? 0,
  );
  mirroredCounter(
    registry,
    engine,
    'kvcanary_engine_prefix_cache_stale_restores_refused_total',
    'restore-fencing defense: prefix-cache entries refused at restore because their page was handed out since.',
    (s) => s.prefixCache?.staleRestoresRefused ?? 0,
  );
  mirroredCounter(
    registry,
    engine,
    'kvcanary_engine_foreign_page_reads_total',
    'Ground truth: KV pages read by attention that held data written by another request (one per page per read).',
    (s) => s.foreignPageReadsTotal,
  );
  mirroredCounter(
    registry,
    engine,
    'kvcanary_engine_page_tag_mismatches_total',
    'page-tags defense: attention reads refused because a page was not written by its reader under its current allocation (each fails its request closed).',
    (s) => s.defended?.pageTagMismatches ?? 0,
  );
  mirroredCounter(
    registry,
    engine,
    'kvcanary_engine_transfer_batches_dropped_total',
    'transfer-integrity defense: KV transfer batches dropped as stale (their pages changed owner or generation) or corrupt.',
    (s) => s.defended?.staleBatchesDropped ?? 0,
  );
  mirroredCounter(
    registry,
    engine,
    'kvcanary_engine_host_copies_dropped_total',
    'transfer-integrity defense: host-offload copies dropped as stale.',
    (s) => s.defended?.staleCopiesDropped ?? 0,
  );
  mirroredLabelledCounter(
    registry,
    engine,
    'kvcanary_engine_defense_blocks_total',
    'What each defense stopped (requests refused before bootstrap, pages parked, reads failed closed, pages zeroed with data, stale transfers and copies dropped, prefix-cache lookups refused), by defense; 0 for a defense that is off.',
    'defense',
    [...DEFENSES],
    (s) => s.defenseBlocks,
  );
  mirroredCounter(registry, engine, 'kvcanary_engine_transfer_tokens_total', 'Disaggregated mode: prompt tokens of KV landed in decode\'s pool.', (s) => s.transfer?.tokensLanded ?? 0);
  mirroredCounter(
    registry,
    engine,
    'kvcanary_engine_late_transfer_batches_total',
    'Ground truth: KV transfer batches that landed on pages their room no longer held (late writes).',
    (s) => s.transfer?.lateBatchesLanded ?? 0,
  );
  new Gauge({
    name: 'kvcanary_engine_role_kv_pool_pages',
    help: 'Disaggregated mode: each role\'s KV pool pages, by state (pending_release: released, held until no copy can touch them).',
    labelNames: ['role', 'state'],
    registers: [registry],
    collect() {
      const pools = engine.stats().pools;
      if (pools === undefined) return;
      for (const role of ['prefill', 'decode'] as const) {
        const p = pools[role];
        this.set({ role, state: 'used' }, p.usedPages - p.pendingReleasePages);
        this.set({ role, state: 'free' }, p.freePages);
        this.set({ role, state: 'pending_release' }, p.pendingReleasePages);
      }
    },
  });
  mirroredLabelledCounter(
    registry,
    engine,
    'kvcanary_engine_requests_finished_total',
    'Requests that left the engine, by reason (length; aborted: client gone, stop string or shutdown; error).',
    'reason',
    ['length', 'aborted', 'error'],
    (s) => s.finishedTotal,
  );
  mirroredLabelledCounter(
    registry,
    engine,
    'kvcanary_engine_requests_rejected_total',
    'Requests refused by admission, by code.',
    'code',
    ['context_length_exceeded', 'kv_pool_capacity_exceeded', 'engine_overloaded'],
    (s) => s.rejectedTotal,
  );
  return {
    registry,
    observeHttp: (endpoint, status) => http.inc({ endpoint, status: String(status) }),
  };
}
