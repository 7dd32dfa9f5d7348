/**
 * `kvcanary_open_findings`: the findings that page, as a gauge the alert rules read directly.
 *
 * Its value, per target, scenario and kind, is the number of findings recorded in the scenario's last run or
 * in any run of the last 15 minutes (OPEN_WINDOW_MS) that no silence acknowledges *now*. Silences are
 * re-read at every scrape, so a `kvcanary ack` (into the store) or a config silence (on SIGHUP) takes the
 * covered series to 0 at the next scrape, and the alert resolves at the next rule evaluation: nothing waits
 * for a 15-minute window over a counter to empty. Findings recorded before the ack stay in the store and in
 * kvcanary_findings_total, the history; they no longer page.
 *
 * Each series carries what an on-call needs to route and act: `shard` (INDEX/COUNT), `status_page` (the
 * shard's page at `external_url`, anchored at the target; absent without `external_url`), `source` (the
 * discovery entry, or the target's own name) and the labels discovery gave the target (file_sd group labels),
 * as kvcanary_target_info has them. Series exist only where a finding was seen (a handful per target), so the
 * extra labels cost next to nothing; they drop to 0, not away, when a later run finds none or a silence
 * covers them, and go when the target leaves.
 *
 * A restart loses the 15-minute window but not the last run: the service seeds the last run's counts from
 * the store (seed), so an alert that was firing keeps firing.
 */
import { Gauge, type Registry } from 'prom-client';
import { FINDING_KINDS, type Finding } from '../probe/findings.js';
import type { ProbeRun } from '../probe/result.js';
import { matchSilence, type Silence } from './silences.js';

export const OPEN_WINDOW_MS = 15 * 60_000;
/** Findings kept per series for the window: more than this in 15 minutes is "many", and memory stays bounded. */
const MAX_RECENT = 256;
const BASE_LABELS = ['target', 'scenario', 'kind', 'severity', 'shard', 'status_page', 'source'] as const;
/** Discovery labels that would collide with the gauge's own labels or Prometheus's and Alertmanager's. */
const RESERVED = new Set<string>([...BASE_LABELS, 'job', 'instance', 'alertname', 'le', 'quantile']);
const MAX_EXTRA_LABELS = 32;

/** Where a target sits: its discovery source and labels (as kvcanary_target_info has them). */
export interface TargetPlacement {
  source: string;
  labels: Readonly<Record<string, string>>;
}

export interface OpenFindingsContext {
  shard: string;
  /** The status page URL of a target (external_url with its anchor), if external_url is set. */
  statusPage?: (target: string) => string | undefined;
  placements: ReadonlyMap<string, TargetPlacement>;
}

export interface OpenFindings {
  /** A recorded cycle: each scenario's unacknowledged findings become its last-run count and enter the window. */
  observeRun(run: ProbeRun): void;
  /** Findings a probe returned after its cycle was recorded: they enter the window. */
  observeLate(target: string, runId: string, findings: readonly Finding[]): void;
  /** After a restart: the last run's unacknowledged counts per kind, from the store. */
  seed(target: string, scenario: string, runId: string, counts: Readonly<Record<string, number>>): void;
  /** The target left (config or discovery): its series go. */
  forget(target: string): void;
  /** Shard, status page and discovery labels for the series (on start and whenever the target set changes). */
  setContext(ctx: OpenFindingsContext): void;
}

interface Cell {
  target: string;
  scenario: string;
  kind: string;
  severity: string;
  lastRunId: string | undefined;
  lastRunCount: number;
  /** Unacknowledged findings recorded in the window: when, and in which run. */
  recent: { at: number; runId: string }[];
}

export interface OpenFindingsOptions {
  registry: Registry;
  /** The silences in force now (config and store); read at every scrape. */
  silences: () => readonly Silence[];
  now: () => number;
}

const cellKey = (target: string, scenario: string, kind: string): string => `${target}\u0000${scenario}\u0000${kind}`;
const kindOf = (kind: string): string => (Object.hasOwn(FINDING_KINDS, kind) ? kind : 'unknown');
const severityOf = (kind: string, given?: string): string =>
  given ?? (Object.hasOwn(FINDING_KINDS, kind) ? FINDING_KINDS[kind as keyof typeof FINDING_KINDS].severity : 'critical');

export function createOpenFindings(opts: OpenFindingsOptions): OpenFindings {
  const cells = new Map<string, Cell>();
  let ctx: OpenFindingsContext = { shard: '0/1', placements: new Map() };
  let extra: string[] = [];
  let gauge: Gauge<string> | undefined;
  let gaugeNames = '';

  const cell = (target: string, scenario: string, kind: string, severity?: string): Cell => {
    const k = cellKey(target, scenario, kind);
    let c = cells.get(k);
    if (c === undefined) {
      c = { target, scenario, kind, severity: severityOf(kind, severity), lastRunId: undefined, lastRunCount: 0, recent: [] };
      cells.set(k, c);
    }
    return c;
  };

  function valueOf(c: Cell, silences: readonly Silence[], now: number): number {
    c.recent = c.recent.filter((e) => now - e.at <= OPEN_WINDOW_MS);
    if (matchSilence(silences, c.target, { kind: c.kind as Finding['kind'], scenario: c.scenario }, now) !== undefined) return 0;
    return c.lastRunCount + c.recent.filter((e) => e.runId !== c.lastRunId).length;
  }

  function collect(this: Gauge<string>): void {
    this.reset();
    const now = opts.now();
    const silences = opts.silences();
    for (const c of cells.values()) {
      const place = ctx.placements.get(c.target);
      const labels: Record<string, string> = { target: c.target, scenario: c.scenario, kind: c.kind, severity: c.severity, shard: ctx.shard, source: place?.source ?? c.target };
      const page = ctx.statusPage?.(c.target);
      if (page !== undefined) labels.status_page = page;
      // A label a target does not have is left out (Prometheus reads an empty label as no label).
      for (const name of extra) if (place?.labels[name] !== undefined && place.labels[name] !== '') labels[name] = place.labels[name];
      this.set(labels, valueOf(c, silences, now));
    }
  }

  const register = (): void => {
    const names = [...BASE_LABELS, ...extra];
    if (gauge !== undefined && gaugeNames === names.join(',')) return;
    if (gauge !== undefined) opts.registry.removeSingleMetric('kvcanary_open_findings');
    gaugeNames = names.join(',');
    gauge = new Gauge({
      name: 'kvcanary_open_findings',
      help: 'Findings that page: those of the scenario\'s last run or of the last 15 minutes that no silence acknowledges now (silences re-read at every scrape).',
      labelNames: names, registers: [opts.registry], collect,
    });
  };
  register();

  function enter(target: string, runId: string, findings: readonly Finding[], at: number): void {
    for (const f of findings) {
      if (f.acknowledged !== undefined) continue;
      const c = cell(target, f.scenario, kindOf(f.kind), f.severity);
      c.recent.push({ at, runId });
      if (c.recent.length > MAX_RECENT) c.recent.shift();
    }
  }

  return {
    observeRun(run) {
      const at = opts.now();
      for (const s of run.scenarios) {
        const counts = new Map<string, { n: number; severity: string }>();
        for (const f of s.findings) {
          if (f.acknowledged !== undefined) continue;
          const kind = kindOf(f.kind);
          counts.set(kind, { n: (counts.get(kind)?.n ?? 0) + 1, severity: f.severity });
        }
        for (const c of cells.values()) {
          if (c.target === run.target && c.scenario === s.name) { c.lastRunId = run.runId; c.lastRunCount = 0; }
        }
        for (const [kind, { n, severity }] of counts) {
          const c = cell(run.target, s.name, kind, severity);
          c.lastRunId = run.runId;
          c.lastRunCount = n;
        }
        enter(run.target, run.runId, s.findings, at);
      }
    },
    observeLate(target, runId, findings) {
      enter(target, runId, findings, opts.now());
    },
    seed(target, scenario, runId, counts) {
      for (const [kind, n] of Object.entries(counts)) {
        if (n <= 0) continue;
        const c = cell(target, scenario, kindOf(kind));
        c.lastRunId = runId;
        c.lastRunCount = n;
      }
    },
    forget(target) {
      for (const [k, c] of cells) if (c.target === target) cells.delete(k);
    },
    setContext(next) {
      ctx = next;
      const names = new Set<string>();
      for (const p of next.placements.values()) for (const k of Object.keys(p.labels)) if (!RESERVED.has(k)) names.add(k);
      extra = [...names].sort().slice(0, MAX_EXTRA_LABELS);
      register();
    },
  };
}
