/**
 * Acknowledging a known finding for a while: a silence matches findings by target, kind and (optionally)
 * scenario until it expires. A matching finding is still recorded with its evidence, shown and counted (as
 * acknowledged: kvcanary_findings_acknowledged_total, not kvcanary_findings_total, so it does not page),
 * and it no longer fails its scenario: a scenario whose only failing findings are acknowledged is recorded
 * as pass, with a note naming the silence. Every silence carries a reason and an expiry; an expired one
 * simply stops matching.
 *
 * Silences come from the config (`silences:`) and from the store (`kvcanary ack`, listed by `report`). `serve`
 * applies them to every run; `kvcanary run` applies those of its `--config` and its store (run-silences.ts).
 */
import { FINDING_KINDS, type Finding } from '../probe/findings.js';
import type { ProbeFn } from '../probe/probe-fn.js';
import { combineOutcomes, outcomeWithoutFindings, type ProbeRun } from '../probe/result.js';
import { globMatch } from './glob.js';
import { shownString } from '../shown-value.js';

export interface Silence {
  /** Store id (ack) or `config[i]`. */
  id: string;
  /** A target name; `*` matches any run of characters (`glm/*` silences every discovered replica of glm). */
  target: string;
  /** A finding kind, or `*`. */
  kind: string;
  scenario?: string;
  reason: string;
  /** ISO time. */
  expiresAt: string;
  createdAt: string;
  /** 'config' or who ran `kvcanary ack` ($USER). */
  createdBy: string;
}

export interface SilenceIssue { path: string; message: string }

/** A silence may last at most this long: "acknowledged forever" is how a leak gets forgotten. */
export const MAX_SILENCE_MS = 90 * 86_400_000;
const MAX_REASON = 300;
/** `ack --expires` must reach at least this far ahead: `0d` or `1ms` acknowledges nothing. */
export const MIN_SILENCE_MS = 60_000;
// eslint-disable-next-line no-control-regex
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

/**
 * An absolute expiry: a date (YYYY-MM-DD, midnight UTC) or a date and time with its zone (Z or ±HH:MM). A time
 * without a zone would be read in the local zone of whichever machine reads it, and Date.parse rolls
 * 2026-02-30 over to March 2: both are refused. The epoch milliseconds, or what is wrong.
 */
export function parseExpiry(text: string): number | string {
  const m = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i.exec(text.trim());
  if (m === null) return 'expected an ISO date (2026-07-01) or a time with its zone (2026-07-01T12:00:00Z)';
  const [, y, mo, d, h, mi, sec, zone] = m;
  if (h !== undefined && zone === undefined) return 'expected a time with its zone (Z or +HH:MM): a zone-less time means a different moment on every machine';
  const day = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d)));
  if (day.getUTCFullYear() !== Number(y) || day.getUTCMonth() !== Number(mo) - 1 || day.getUTCDate() !== Number(d)) return 'expected a real calendar date';
  if (h !== undefined && (Number(h) > 23 || Number(mi) > 59 || Number(sec ?? 0) > 59)) return 'expected a real time of day';
  if (zone !== undefined && zone.toUpperCase() !== 'Z' && (Number(zone.slice(1, 3)) > 23 || Number(zone.slice(-2)) > 59)) return 'expected a real zone offset';
  const t = Date.parse(h === undefined ? `${y}-${mo}-${d}T00:00:00Z` : text.trim().replace(' ', 'T'));
  return Number.isNaN(t) ? 'expected an ISO date or time' : t;
}


export function isActive(s: Silence, now: number): boolean {
  return Date.parse(s.expiresAt) > now;
}

/** The first active silence matching the finding; `target` may be several names the run is known by. */
export function matchSilence(silences: readonly Silence[], target: string | readonly string[], f: Pick<Finding, 'kind' | 'scenario'>, now: number): Silence | undefined {
  const names = typeof target === 'string' ? [target] : target;
  return silences.find((s) => isActive(s, now) && (s.kind === '*' || s.kind === f.kind)
    && (s.scenario === undefined || s.scenario === f.scenario) && names.some((n) => globMatch(s.target, n)));
}

export function describeSilence(s: Silence): string {
  return `silence ${s.id} (${s.createdBy}) until ${s.expiresAt}: ${s.reason}`;
}

/** Which of these silences acknowledged the finding (the text applySilences wrote names it), if any. */
export function silenceOf(f: Finding, silences: readonly Silence[]): Silence | undefined {
  return f.acknowledged === undefined ? undefined : silences.find((s) => describeSilence(s) === f.acknowledged);
}

/**
 * Marks the run's findings that a silence matches and recomputes outcomes without them. Silences match the
 * run's target, or any of `names` when given (what else the run's endpoint is called).
 */
export function applySilences(run: ProbeRun, silences: readonly Silence[], now: number, names: readonly string[] = [run.target]): ProbeRun {
  if (silences.length === 0) return run;
  let changed = false;
  const scenarios = run.scenarios.map((s) => {
    let acked = 0;
    const findings = s.findings.map((f) => {
      const hit = f.acknowledged === undefined ? matchSilence(silences, names, f, now) : undefined;
      if (hit === undefined) return f;
      acked++;
      return { ...f, acknowledged: describeSilence(hit) };
    });
    if (acked === 0) return s;
    changed = true;
    const failing = findings.some((f) => f.acknowledged === undefined && f.severity !== 'info');
    return {
      ...s, findings,
      // Set aside, the findings leave what the scenario established without them: never a pass for one that
      // stopped at its first finding (result.ts outcomeWithoutFindings).
      outcome: s.outcome === 'fail' && !failing ? outcomeWithoutFindings(s) : s.outcome,
      notes: [...s.notes, `${acked} finding(s) acknowledged: ${[...new Set(findings.flatMap((f) => (f.acknowledged === undefined ? [] : [f.acknowledged])))].join('; ')}`],
    };
  });
  return changed ? { ...run, scenarios, outcome: combineOutcomes(scenarios) } : run;
}

/** Wraps a probe so every run it returns (late ones too) has its silenced findings acknowledged. */
export function withSilences(probe: ProbeFn, current: () => readonly Silence[], now: () => number = Date.now): ProbeFn {
  return async (req) => applySilences(await probe(req), current(), now());
}

/**
 * Validates a `silences:` list (config) or one `ack` (CLI): target, kind, optional scenario, expires (an ISO
 * time, or for ack a duration from now), reason.
 */
export function parseSilence(
  raw: unknown, p: string, opts: { now: number; knownScenarios: readonly string[]; durationOf?: (s: string) => number | undefined; id: string; createdBy: string },
): { silence?: Silence; issues: SilenceIssue[] } {
  const issues: SilenceIssue[] = [];
  const fail = (k: string, message: string): void => { issues.push({ path: k === '' ? p : `${p}.${k}`, message }); };
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    fail('', 'expected a mapping with target, kind, expires and reason');
    return { issues };
  }
  const o = raw as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!['target', 'kind', 'scenario', 'expires', 'reason'].includes(k)) fail(k, 'unknown key; allowed here: target, kind, scenario, expires, reason');
  const str = (k: string): string | undefined => {
    const v = o[k];
    if (typeof v !== 'string' || v.trim() === '') { fail(k, v === undefined ? 'required' : 'expected a non-empty string'); return undefined; }
    return v.trim();
  };
  const target = str('target');
  if (target !== undefined && !/^[a-zA-Z0-9_.:\[\]/*-]{1,200}$/.test(target)) fail('target', 'expected a target name or a pattern with * (letters, digits, _ . : / [ ] -)');
  const kind = str('kind');
  if (kind !== undefined && kind !== '*' && !Object.hasOwn(FINDING_KINDS, kind)) fail('kind', `unknown finding kind ${shownString(kind)}; known: ${Object.keys(FINDING_KINDS).join(', ')}, or *`);
  let scenario: string | undefined;
  if (o.scenario !== undefined) {
    scenario = str('scenario');
    if (scenario !== undefined && !opts.knownScenarios.includes(scenario)) fail('scenario', `unknown scenario; known: ${opts.knownScenarios.join(', ')}`);
  }
  const reason = str('reason');
  if (reason !== undefined && reason.length > MAX_REASON) fail('reason', `at most ${MAX_REASON} characters`);
  // A reason is printed inside the run summary, report and logs: a line break would forge a line there.
  else if (reason !== undefined && UNPRINTABLE.test(reason)) fail('reason', 'expected one line of text: no line breaks, control characters or bidi overrides');
  let expiresAt: string | undefined;
  const e = o.expires instanceof Date ? o.expires.toISOString() : o.expires;
  const relative = opts.durationOf !== undefined;
  if (typeof e !== 'string' || e === '') {
    fail('expires', `required: an ISO date or time such as 2026-07-01T00:00:00Z${relative ? ', or a duration from now such as 7d' : ''}`);
  } else {
    const rel = opts.durationOf?.(e);
    const t = rel !== undefined ? opts.now + rel : parseExpiry(e);
    if (typeof t === 'string') fail('expires', `${t}${relative ? ' (or a duration such as 7d)' : ''}, got ${shownString(e)}`);
    else if (rel !== undefined && rel < MIN_SILENCE_MS) fail('expires', `a duration of at least ${MIN_SILENCE_MS / 60_000}m (a silence that ends at once acknowledges nothing), got ${shownString(e)}`);
    else if (relative && t - opts.now < MIN_SILENCE_MS) fail('expires', `a time at least ${MIN_SILENCE_MS / 60_000}m in the future, got ${new Date(t).toISOString()}`);
    else if (t - opts.now > MAX_SILENCE_MS) fail('expires', `at most 90 days ahead (a silence must be looked at again), got ${new Date(t).toISOString()}`);
    else expiresAt = new Date(t).toISOString();
  }
  if (issues.length > 0 || target === undefined || kind === undefined || reason === undefined || expiresAt === undefined) return { issues };
  const silence: Silence = { id: opts.id, target, kind, reason, expiresAt, createdAt: new Date(opts.now).toISOString(), createdBy: opts.createdBy };
  if (scenario !== undefined) silence.scenario = scenario;
  return { silence, issues };
}
