/**
 * The service's HTTP side: GET /metrics (Prometheus), /healthz (loop states), / (a self-contained HTML status
 * page) and a small read-only JSON API (/api/runs, /api/findings).
 *
 * Everything is read-only and served from the store and registry; there are no request bodies. The status
 * page is the one place evidence is rendered as HTML, and evidence is text from an endpoint we do not trust,
 * so every value is HTML-escaped and the page is sent with a CSP that allows no script at all.
 * Inconclusive is drawn amber with its own word, never green: "could not establish" is not "isolated".
 */
import { jsonText } from '../json-text.js';
import { createHostCheck } from './host-check.js';
import { parseSince, SinceError } from '../since.js';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { Logger } from 'pino';
import { formatDuration, parseDuration } from './config.js';
import { FINDING_KINDS, isFindingKind, plantedText } from '../probe/findings.js';
import { describePower, type RunOutcome } from '../probe/result.js';
import { targetVerdict, type TargetVerdict } from './target-verdict.js';
import { freshnessMs } from './scenario-schedule.js';
import type { ScheduleConfig } from './config.js';
import type { RunSummary, Store, StoredFinding, TargetLatest } from './store.js';
import { groupThousands } from '../locale-free.js';
import { writeExposition } from './metrics-exposition.js';
import { targetAnchor } from './external-url.js';
import { matchSilence, type Silence } from './silences.js';

export interface LoopState {
  target: string;
  state: 'idle' | 'running' | 'stopped';
  lastRunAt?: string;
  /** The last cycle's own outcome (a cycle of cheap checks that passed is `partial`). */
  lastOutcome?: RunOutcome;
  /** The target's standing by the overall rule (target-verdict.ts): what "is this target green" means. */
  verdict?: TargetVerdict;
  nextRunAt?: string;
  /** Probe calls that ignored their abort and are still running (the target is held until they end). */
  abandoned: number;
  /** Cycles (or scenarios of a running cycle) not run since the service started, by reason (budget, overlap, shutdown). */
  skipped?: Record<string, number>;
  lastSkip?: SkipRecord;
}

/** The latest skip: why, when, and for the budget what the cycle needed (uncapped) against what was left. */
export interface SkipRecord {
  reason: string;
  at: string;
  scenario?: string;
  neededTokens?: number;
  availableTokens?: number;
}

function skipsHtml(loop: LoopState | undefined, now: number): string {
  if (loop?.skipped === undefined) return '';
  const counts = Object.entries(loop.skipped).map(([r, n]) => `${escapeHtml(r)}: ${n}`).join(', ');
  const last = loop.lastSkip;
  const detail = last === undefined ? '' : ` · last ${escapeHtml(last.reason)}${last.scenario !== undefined ? ` (${escapeHtml(last.scenario)})` : ''} ${ago(last.at, now)}` +
    (last.neededTokens !== undefined ? `, needed ${groupThousands(last.neededTokens)} tokens` : '') +
    (last.availableTokens !== undefined ? `, ${groupThousands(last.availableTokens)} left this hour` : '');
  return `<p class="skips"><span class="badge inconclusive" title="not run: not a pass">SKIPPED</span> ${counts}${detail}</p>`;
}

export interface HealthReport {
  status: 'ok' | 'stopping';
  loops: LoopState[];
}

/** A configured target as the status page knows it: its schedule, when given, says how long a pass counts. */
export interface ConfiguredTarget {
  name: string;
  baseUrl: string;
  scenarios: readonly string[];
  schedule?: Pick<ScheduleConfig, 'intervalMs' | 'scenarioIntervalsMs' | 'jitterMs' | 'timeoutMs'>;
}

export interface ServiceServerOptions {
  /** @default '127.0.0.1' */
  host?: string;
  /** 0 picks a free port. */
  port: number;
  registry: Registry;
  store: Pick<Store, 'recentRuns' | 'findings' | 'latestPerTarget'>;
  /** Loop states for /healthz; 503 while the service stops. */
  health?: () => HealthReport;
  /** Configured targets, so the page lists those that have not run yet; their schedule dates their standing. */
  targets?: () => readonly ConfiguredTarget[];
  logger?: Logger;
  /** @default () => Date.now() */
  now?: () => number;
  /** GET /api/targets: what this replica probes (fleet.ts). */
  apiTargets?: () => unknown[];
  /** Extra, already escaped HTML for the status page (the fleet section). */
  extraHtml?: () => string;
  /** Host names served under besides the listen address and localhost (config `allowed_hosts:`); others get 421. */
  allowedHosts?: readonly string[];
  /** Silences in force now: a finding they cover leaves "Needs attention" at once, as it leaves the alerts. */
  silences?: () => readonly Silence[];
}

export interface ServiceServer {
  url: string;
  close(): Promise<void>;
}

class BadRequest extends Error {}

const SECURITY_HEADERS = {
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store',
} as const;

export async function startServiceServer(opts: ServiceServerOptions): Promise<ServiceServer> {
  const host = opts.host ?? '127.0.0.1';
  const now = opts.now ?? (() => Date.now());

  const hostAllowed = createHostCheck({ listenHost: host, ...(opts.allowedHosts !== undefined ? { allowedHosts: opts.allowedHosts } : {}) });
  const server = createServer((req, res) => {
    if (!hostAllowed(req.headers.host)) {
      // DNS rebinding guard (host-check.ts): a page elsewhere must not read evidence through the browser.
      send(res, 421, 'text/plain; charset=utf-8', 'misdirected request: this server does not answer under that Host (see allowed_hosts)\n');
      return;
    }
    handle(req, res).catch((err: unknown) => {
      opts.logger?.error({ err, path: req.url }, 'status server request failed');
      if (!res.headersSent) send(res, 500, 'text/plain; charset=utf-8', 'internal error\n');
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      send(res, 405, 'text/plain; charset=utf-8', 'method not allowed\n');
      return;
    }
    try {
      switch (url.pathname) {
        case '/metrics': {
          await writeExposition(res, opts.registry, SECURITY_HEADERS, req.method === 'HEAD');
          return;
        }
        case '/healthz': {
          const h = opts.health?.() ?? { status: 'ok', loops: [] };
          sendJson(res, h.status === 'ok' ? 200 : 503, h, req.method === 'HEAD');
          return;
        }
        case '/api/runs': {
          const runs = opts.store.recentRuns({ limit: limitParam(url, 50), ...sinceParam(url, now()), ...targetParam(url) });
          sendJson(res, 200, { runs }, req.method === 'HEAD');
          return;
        }
        case '/api/targets': {
          sendJson(res, 200, opts.apiTargets?.() ?? [], req.method === 'HEAD');
          return;
        }
        case '/api/findings': {
          const findings = opts.store.findings({ limit: limitParam(url, 100), ...sinceParam(url, now()), ...targetParam(url) });
          sendJson(res, 200, { findings }, req.method === 'HEAD');
          return;
        }
        case '/': {
          const page = renderStatusPage({
            latest: opts.store.latestPerTarget(),
            findings: opts.store.findings({ limit: 20 }),
            configured: opts.targets?.() ?? [],
            health: opts.health?.(),
            now: now(),
            ...(opts.extraHtml === undefined ? {} : { extraHtml: opts.extraHtml() }),
            ...(opts.silences === undefined ? {} : { silences: opts.silences() }),
          });
          res.setHeader('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'");
          send(res, 200, 'text/html; charset=utf-8', page, req.method === 'HEAD');
          return;
        }
        default:
          send(res, 404, 'text/plain; charset=utf-8', 'not found: try /, /metrics, /healthz, /api/runs, /api/findings, /api/targets\n');
      }
    } catch (err) {
      if (err instanceof BadRequest) { sendJson(res, 400, { error: err.message }); return; }
      throw err;
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, host, () => { server.off('error', reject); resolve(); });
  });
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === 'IPv6' || addr.address.includes(':') ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${shownHost}:${addr.port}/`,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}

function send(res: ServerResponse, status: number, type: string, body: string, headOnly = false): void {
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(headOnly ? undefined : body);
}

function sendJson(res: ServerResponse, status: number, value: unknown, headOnly = false): void {
  send(res, status, 'application/json; charset=utf-8', jsonText(value) + '\n', headOnly);
}

function limitParam(url: URL, dflt: number): number {
  const raw = url.searchParams.get('limit');
  if (raw === null) return dflt;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 1000) throw new BadRequest(`limit: expected an integer 1-1000, got ${JSON.stringify(raw.slice(0, 20))}`);
  return n;
}

/** `since` is a duration back from now (1h, 7d) or a date/time (since.ts); out of range is a 400, not a 500. */
function sinceParam(url: URL, now: number): { since?: number } {
  const raw = url.searchParams.get('since');
  if (raw === null) return {};
  try {
    return { since: parseSince(raw, now) };
  } catch (err) {
    if (err instanceof SinceError) throw new BadRequest(`since: ${err.message}`);
    throw err;
  }
}

function targetParam(url: URL): { target?: string } {
  const t = url.searchParams.get('target');
  return t === null || t === '' ? {} : { target: t };
}

// --- the status page ---------------------------------------------------------------------------------------

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const BADGE: Record<RunOutcome | 'none', { cls: string; text: string; title: string }> = {
  pass: { cls: 'pass', text: 'PASS', title: 'isolation positively established by this probe' },
  partial: { cls: 'partial', text: 'PARTIAL', title: 'every scenario run passed, but no behavioural scenario passed among them: isolation NOT established by this cycle (not a pass)' },
  fail: { cls: 'fail', text: 'FAIL', title: 'a finding: see the evidence below' },
  inconclusive: { cls: 'inconclusive', text: 'INCONCLUSIVE', title: 'isolation could NOT be established (errors, timeouts, nothing planted): not a pass' },
  'not-applicable': { cls: 'not-applicable', text: 'NOT APPLICABLE', title: 'the endpoint lacks the mechanism this scenario stresses (evidence in the notes): not a pass of this scenario' },
  none: { cls: 'none', text: 'NO RUN YET', title: 'no completed run of this scenario' },
};

function badge(o: RunOutcome | 'none', title?: string): string {
  const b = BADGE[o];
  return `<span class="badge ${b.cls}" title="${escapeHtml(title ?? b.title)}">${b.text}</span>`;
}

const CYCLE_PASS_TITLE = 'this cycle passed: a behavioural scenario passed and every other applicable one too';
const STANDING_PASS_TITLE = 'isolation established: the behavioural scenarios passed within their intervals and nothing applicable failed';

/** The target's standing by the overall rule (target-verdict.ts), with why it is not a pass. */
function standingHtml(v: TargetVerdict): string {
  const why = v.reasons.length > 0 ? ` <span class="notes">${v.reasons.slice(0, 4).map((r) => escapeHtml(r)).join('; ')}</span>` : '';
  return `<p class="standing">target ${badge(v.outcome, v.outcome === 'pass' ? STANDING_PASS_TITLE : undefined)}${why}</p>`;
}

function ago(iso: string, now: number): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return escapeHtml(iso);
  const d = Math.max(0, now - t);
  return `<time datetime="${escapeHtml(iso)}" title="${escapeHtml(iso)}">${escapeHtml(formatDuration(Math.round(d / 1000) * 1000))} ago</time>`;
}

const MAX_EVIDENCE_SHOWN = 1200;

function evidenceHtml(f: StoredFinding): string {
  // One line per field; strings as they are (escaped below), so an excerpt reads as text, not as JSON.
  let text = Object.entries(f.evidence).map(([k, v]) => (k === 'planted' && f.evidence.planted !== undefined
    ? `${plantedText(f.evidence.planted)}${f.evidence.planted.runId !== undefined && f.evidence.planted.requestNo !== undefined ? ` (request #${f.evidence.planted.requestNo})` : ''}`
    : `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`)).join('\n');
  if (text.length > MAX_EVIDENCE_SHOWN) text = `${text.slice(0, MAX_EVIDENCE_SHOWN)}…`;
  return `<pre>${escapeHtml(text)}</pre>`;
}

/** The finding kind's remediation line; nothing for a kind this version does not know (an older store's). */
function remediationHtml(kind: string): string {
  if (!isFindingKind(kind)) return '';
  return `<p class="todo"><b>What to do:</b> ${escapeHtml(FINDING_KINDS[kind].remediation)}</p>`;
}

/** Shown inline: the reason, power and first note; every note, whole, one click away (no script: <details>). */
function notesHtml(lead: readonly string[], notes: readonly string[]): string {
  const inline = [...lead, ...notes.slice(0, 1)].map((n) => escapeHtml(n)).join('<br>');
  if (notes.length <= 1) return inline;
  return `${inline}<details><summary>all ${notes.length} notes</summary><ol class="allnotes">${notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('')}</ol></details>`;
}

const SEVERITY_RANK: Record<string, number> = { critical: 0, high: 1, warning: 2, info: 3 };
const severityOf = (kind: string): string => (isFindingKind(kind) ? FINDING_KINDS[kind].severity : 'critical');

interface Attention { target: string; scenario: string; kind: string; count: number; severity: string; at: string }

/** What needs someone now: unacknowledged findings in each scenario's latest run, most severe first. */
function attentionItems(latest: readonly TargetLatest[], silences: readonly Silence[], now: number): Attention[] {
  const items = latest.flatMap((t) => t.scenarios.flatMap((s) => Object.entries(s.findingCounts)
    .filter(([kind, n]) => n > 0 && matchSilence(silences, t.target, { kind: kind as StoredFinding['kind'], scenario: s.scenario }, now) === undefined)
    .map(([kind, count]) => ({ target: t.target, scenario: s.scenario, kind, count, severity: severityOf(kind), at: s.at }))));
  return items.sort((a, b) => (SEVERITY_RANK[a.severity] ?? 0) - (SEVERITY_RANK[b.severity] ?? 0) || b.at.localeCompare(a.at) || a.target.localeCompare(b.target));
}

/** The top of the page: each open finding with what to do and its latest evidence, critical first. */
function attentionSection(items: readonly Attention[], findings: readonly StoredFinding[], now: number): string {
  if (items.length === 0) {
    return '<section id="attention"><h2>Needs attention</h2><p>No unacknowledged finding in any scenario\'s latest run.</p></section>';
  }
  const rows = items.map((a) => {
    const evidence = findings.find((f) => f.target === a.target && f.kind === a.kind && f.acknowledged === undefined);
    return `<tr class="sev-${escapeHtml(a.severity)}"><td><b>${escapeHtml(a.severity.toUpperCase())}</b></td>
<td><a href="#${escapeHtml(targetAnchor(a.target))}">${escapeHtml(a.target)}</a></td><td>${escapeHtml(a.scenario)}</td><td><b>${escapeHtml(a.kind)}</b> ×${a.count}<br>${ago(a.at, now)}</td>
<td>${remediationHtml(a.kind)}${evidence === undefined ? '' : `<details><summary>latest evidence</summary>${evidenceHtml(evidence)}</details>`}</td></tr>`;
  });
  return `<section id="attention"><h2>Needs attention <small>${items.length} open finding${items.length === 1 ? '' : 's'}, most severe first; \`kvcanary ack\` acknowledges a known one</small></h2>
<table><thead><tr><th>severity</th><th>target</th><th>scenario</th><th>finding</th><th>what to do</th></tr></thead><tbody>
${rows.join('\n')}
</tbody></table></section>`;
}

/** Targets with the most severe open finding first, then failing, inconclusive, the rest; the given order within. */
function targetRank(t: TargetLatest | undefined, items: readonly Attention[]): number {
  const worst = items.find((a) => a.target === t?.target);
  if (worst !== undefined) return SEVERITY_RANK[worst.severity] ?? 0;
  if (t === undefined) return 6;
  return t.scenarios.some((s) => s.outcome === 'fail') ? 4 : t.scenarios.some((s) => s.outcome === 'inconclusive') ? 5 : 6;
}

/** A run `kvcanary run` recorded (its ids start `run-`; serve's are bare UUIDs). */
export function isCliRun(runId: string): boolean {
  return runId.startsWith('run-');
}

/** Endpoints only `kvcanary run --store` probed into this store: one line each, out of the way. */
function cliRunsSection(targets: readonly TargetLatest[], now: number): string {
  if (targets.length === 0) return '';
  const rows = targets.map((t) => `<li>${badge(t.lastRun.outcome)} <b>${escapeHtml(t.target)}</b> <small>${escapeHtml(t.lastRun.baseUrl)}</small> ${ago(t.lastRun.finishedAt, now)} · ${t.lastRun.findingCount} finding${t.lastRun.findingCount === 1 ? '' : 's'} · <a href="api/runs?target=${encodeURIComponent(t.target)}">runs</a></li>`);
  return `<section id="cli-runs"><details><summary>${targets.length} endpoint${targets.length === 1 ? '' : 's'} probed by <code>kvcanary run --store</code> into this store (not probed by this serve)</summary>
<ul>${rows.join('')}</ul></details></section>`;
}

interface PageInput {
  latest: TargetLatest[];
  findings: StoredFinding[];
  configured: readonly ConfiguredTarget[];
  health: HealthReport | undefined;
  now: number;
  extraHtml?: string;
  silences?: readonly Silence[];
}

function targetSection(t: ConfiguredTarget, latest: TargetLatest | undefined, health: HealthReport | undefined, now: number): string {
  const { name, baseUrl, scenarios } = t;
  const { schedule } = t;
  // No schedule (a target no longer configured): its history is judged without freshness.
  const verdict = targetVerdict({
    scenarios, latest: latest?.scenarios ?? [], now,
    freshForMs: (s) => (schedule === undefined ? Infinity : freshnessMs({ schedule }, s)),
  });
  const last: RunSummary | undefined = latest?.lastRun;
  const loop = health?.loops.find((l) => l.target === name);
  const rows = new Map<string, string>();
  // Configured order first; a scenario with history but no longer configured follows.
  for (const s of scenarios) rows.set(s, `<tr><td>${escapeHtml(s)}</td><td>${badge('none')}</td><td></td><td></td></tr>`);
  for (const s of latest?.scenarios ?? []) {
    const power = s.power === undefined ? [] : [describePower(s.power)];
    const reason = s.reason === undefined ? [] : [`cut short: ${s.reason}`];
    const notes = notesHtml([...reason, ...power], s.notes);
    const streak = s.outcome === 'inconclusive' ? ` <span class="streak">${s.inconclusiveStreak} in a row</span>` : '';
    rows.set(s.scenario, `<tr><td>${escapeHtml(s.scenario)}</td><td>${badge(s.outcome)}${streak}</td><td>${ago(s.at, now)}</td><td class="notes">${notes}</td></tr>`);
  }
  const cap = last?.capacity ?? {};
  const capText = [
    cap.contextTokens !== undefined ? `context ${groupThousands(cap.contextTokens)} tokens` : 'context unknown',
    // The smallest pool the endpoint exposes (what capacity-audit compares): a note may name another one,
    // such as prefix-churn's largest pool (decode's, in a disaggregated deployment).
    cap.poolTokens !== undefined ? `smallest KV pool ${groupThousands(cap.poolTokens)} tokens` : 'KV pool not exposed',
  ].join(' · ');
  const below = cap.contextTokens !== undefined && cap.poolTokens !== undefined && cap.poolTokens < cap.contextTokens
    ? ' <span class="badge fail">POOL BELOW CONTEXT</span>' : '';
  const lastLine = last === undefined
    ? 'no completed cycle yet'
    : `last cycle ${badge(last.outcome, last.outcome === 'pass' ? CYCLE_PASS_TITLE : undefined)} ${ago(last.finishedAt, now)} · model ${escapeHtml(last.model || '?')} · endpoint ${last.up ? 'reached' : '<b>not reached</b>'} · ${last.findingCount} finding${last.findingCount === 1 ? '' : 's'}`;
  const loopLine = loop === undefined ? '' : ` · loop ${escapeHtml(loop.state)}${loop.nextRunAt !== undefined ? `, next run ${escapeHtml(loop.nextRunAt)}` : ''}${loop.abandoned > 0 ? `, <b>${loop.abandoned} abandoned probe(s)</b>` : ''}`;
  return `<section id="${escapeHtml(targetAnchor(name))}"><h2>${escapeHtml(name)} <small>${escapeHtml(baseUrl)}</small></h2>
${standingHtml(verdict)}<p>${lastLine}${loopLine}</p>${skipsHtml(loop, now)}<p>${escapeHtml(capText)}${below}</p>
<table><thead><tr><th>scenario</th><th>latest outcome</th><th>when</th><th>notes</th></tr></thead><tbody>
${[...rows.values()].join('\n')}
</tbody></table></section>`;
}

export function renderStatusPage(input: PageInput): string {
  const byName = new Map(input.latest.map((t) => [t.target, t]));
  const probedHere = (t: TargetLatest): boolean => input.configured.some((c) => c.name === t.target) || !isCliRun(t.lastRun.runId);
  const items = attentionItems(input.latest.filter(probedHere), input.silences ?? [], input.now);
  const sections: { rank: number; html: string }[] = [];
  const shown = new Set<string>();
  for (const t of input.configured) {
    shown.add(t.name);
    sections.push({ rank: targetRank(byName.get(t.name), items), html: targetSection(t, byName.get(t.name), input.health, input.now) });
  }
  // Targets no longer configured still have history worth seeing. Runs `kvcanary run --store` recorded into this
  // store (named by their endpoint, not probed by this serve) are listed apart, never as a lost target.
  const cliOnly: TargetLatest[] = [];
  for (const t of input.latest) {
    if (shown.has(t.target)) continue;
    if (isCliRun(t.lastRun.runId)) { cliOnly.push(t); continue; }
    const rank = items.some((a) => a.target === t.target) ? targetRank(t, items) : 7;
    sections.push({ rank, html: targetSection({ name: t.target, baseUrl: t.lastRun.baseUrl, scenarios: [] }, t, input.health, input.now).replace('</h2>', ' <small>(no longer configured)</small></h2>') });
  }
  // A stable sort: within a rank, the configured order.
  const ordered = sections.map((x, i) => ({ ...x, i })).sort((a, b) => a.rank - b.rank || a.i - b.i).map((x) => x.html);
  const findingRows = input.findings.map((f) => `<tr class="sev-${escapeHtml(f.severity)}"><td>${ago(f.at, input.now)}</td><td>${escapeHtml(f.target)}</td>
<td>${escapeHtml(f.scenario)}</td><td><b>${escapeHtml(f.kind)}</b>${f.acknowledged === undefined ? '' : `<br><span class="badge none" title="${escapeHtml(f.acknowledged)}">ACKNOWLEDGED</span> <small>${escapeHtml(f.acknowledged)}</small>`}</td><td>${escapeHtml(f.severity)}</td><td>${f.chance.toExponential(1)}</td><td>${evidenceHtml(f)}${remediationHtml(f.kind)}</td></tr>`);
  const status = input.health?.status === 'stopping' ? '<p class="badge inconclusive">service stopping</p>' : '';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="30">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>kvcanary status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em}h2{font-size:1.15em;margin-bottom:.2em}h2 small{font-weight:normal;color:#666}
section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin-bottom:1em}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eee;padding:.3em .5em;text-align:left;vertical-align:top}
.badge{display:inline-block;padding:.05em .5em;border-radius:3px;font-weight:bold;font-size:.85em;color:#fff}
.pass{background:#1a7f37}.fail{background:#cf222e}.inconclusive{background:#bf8700}.not-applicable{background:#0969da}.none{background:#6e7781}.partial{background:#8250df}
.streak{color:#9a6700}.notes{color:#555;font-size:.9em}
pre{margin:0;max-width:60em;white-space:pre-wrap;word-break:break-all;font-size:.85em;background:#f6f8fa;padding:.3em}
.sev-critical td:first-child{border-left:4px solid #cf222e}.sev-high td:first-child{border-left:4px solid #e16f24}
.sev-warning td:first-child{border-left:4px solid #bf8700}.sev-info td:first-child{border-left:4px solid #0969da}
.todo{margin:.3em 0 0;font-size:.9em}
details summary{cursor:pointer;color:#0969da;font-size:.9em}.allnotes{margin:.2em 0;padding-left:1.4em}
#attention{border-color:#cf222e}
</style></head><body>
<h1>kvcanary status</h1>
${status}<p>Legend: ${badge('pass')} isolation established · ${badge('partial')} the cheap checks run passed, no behavioural pass (not a pass) · ${badge('fail')} finding · ${badge('inconclusive')} could not be established (not a pass) · ${badge('not-applicable')} the endpoint lacks the mechanism (not a pass of that scenario) · ${badge('none')}
· <a href="metrics">/metrics</a> · <a href="api/runs">/api/runs</a> · <a href="api/findings">/api/findings</a> · <a href="healthz">/healthz</a></p>
${attentionSection(items, input.findings, input.now)}
${input.extraHtml ?? ''}${ordered.length > 0 ? ordered.join('\n') : '<p>No targets configured.</p>'}
${cliRunsSection(cliOnly, input.now)}
<section><h2>Latest findings</h2>
${findingRows.length > 0
    ? `<table><thead><tr><th>when</th><th>target</th><th>scenario</th><th>kind</th><th>severity</th><th>chance</th><th>evidence (bounded)</th></tr></thead><tbody>
${findingRows.join('\n')}
</tbody></table>`
    : '<p>No findings recorded.</p>'}
</section>
<p><small>Generated ${escapeHtml(new Date(input.now).toISOString())}</small></p>
</body></html>
`;
}
