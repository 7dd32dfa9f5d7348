/**
 * What the scheduler does with a finished cycle and with a skip: store it, count it in the metrics, log it, and
 * hand a run to the onRun hook. A store or hook failure is logged, never thrown: metrics and logs still carry
 * the run. Logs carry a finding's kind, target and severity only: its evidence (someone else's data, perhaps)
 * stays in the store.
 */
import type { Logger } from 'pino';
import type { Clock } from './clock.js';
import { levelForSeverity } from './logger.js';
import { observeFindings, observeRun, type Metrics, type SkipReason } from './metrics.js';
import type { Finding } from '../probe/findings.js';
import type { ProbeRun } from '../probe/result.js';
import type { SkipRecord } from './server.js';
import type { Store } from './store.js';

export interface RecorderDeps {
  /** recordSkip, when present, stores skips for `report`. */
  store: Pick<Store, 'recordRun' | 'addFindings'> & Partial<Pick<Store, 'recordSkip'>>;
  metrics: Metrics;
  logger: Logger;
  clock: Clock;
  onRun?: (run: ProbeRun) => void | Promise<void>;
}

export interface Recorder {
  /** Stores, counts and logs the run, then awaits onRun; resolves to whether the store took it. */
  record(run: ProbeRun): Promise<boolean>;
  /** Findings a probe returned after its cycle was recorded without it (it ignored its abort). */
  recordLateFindings(target: string, runId: string, findings: readonly Finding[]): void;
  /** A cycle, or a scenario of one, that did not run: counted, stored, and logged with `fields`. */
  recordSkip(target: string, skip: SkipRecord & { reason: SkipReason }, fields: Record<string, unknown>): void;
}

export function createRecorder(deps: RecorderDeps): Recorder {
  const { store, metrics, logger, clock } = deps;

  function logFinding(target: string, runId: string, f: Finding): void {
    logger[levelForSeverity(f.severity)]({ target, runId, scenario: f.scenario, kind: f.kind, severity: f.severity, chance: f.chance },
      `finding ${f.kind} (${f.severity}) on ${target}`);
  }

  return {
    async record(run) {
      let stored = true;
      try {
        store.recordRun(run);
      } catch (err) {
        stored = false;
        logger.error({ err, target: run.target, runId: run.runId }, 'could not store probe run (metrics and logs still carry it)');
      }
      observeRun(metrics, run);
      const findings = run.scenarios.flatMap((s) => s.findings);
      // A run that sent nothing at all is worth a warning, with its reason (a key file emptied, say).
      const sentNothing = run.scenarios.every((s) => s.requests.length === 0) && run.outcome === 'inconclusive';
      logger[sentNothing ? 'warn' : 'info']({
        target: run.target, runId: run.runId, outcome: run.outcome, up: run.up, findings: findings.length,
        ...(run.outcome === 'inconclusive' ? { why: run.scenarios.find((s) => s.outcome === 'inconclusive')?.notes[0]?.slice(0, 200) } : {}),
        scenarios: Object.fromEntries(run.scenarios.map((s) => [s.name, s.outcome])),
        durationMs: Date.parse(run.finishedAt) - Date.parse(run.startedAt),
      }, `probe run ${run.outcome}: ${run.target}`);
      for (const f of findings) logFinding(run.target, run.runId, f);
      if (deps.onRun !== undefined) {
        try {
          await deps.onRun(run);
        } catch (err) {
          logger.error({ err, target: run.target, runId: run.runId }, 'onRun hook failed');
        }
      }
      return stored;
    },

    recordLateFindings(target, runId, findings) {
      try {
        store.addFindings({ runId, target }, findings, new Date(clock.now()).toISOString());
      } catch (err) {
        logger.error({ err, target, runId }, 'could not store late findings');
      }
      observeFindings(metrics, target, findings);
      metrics.open.observeLate(target, runId, findings);
      for (const f of findings) logFinding(target, runId, f);
    },

    recordSkip(target, skip, fields) {
      const { reason } = skip;
      metrics.runsSkipped.inc({ target, reason });
      try {
        store.recordSkip?.({ target, ...skip });
      } catch (err) {
        logger.error({ err, target, reason }, 'could not store a skip (the metric and this log still carry it)');
      }
      const level = reason === 'shutdown' ? 'info' : 'warn';
      logger[level]({ target, reason, ...fields }, `probe run skipped (${reason})`);
    },
  };
}
