/** Accumulates one scenario's requests, findings and notes, and decides nothing: the scenario sets the outcome. */
import type { Finding } from '../findings.js';
import type { InconclusiveReason, Outcome, Power, ScenarioResult } from '../result.js';
import type { Exchange } from './exchange.js';
import { billed, leakFindings } from './exchange.js';
import type { ScenarioContext } from './context.js';

export class ResultBuilder {
  readonly findings: Finding[] = [];
  readonly notes: string[] = [];
  readonly exchanges: Exchange[] = [];
  readonly #start: number;

  constructor(
    readonly name: string,
    private readonly ctx: ScenarioContext,
  ) {
    this.#start = ctx.now();
  }

  /** Records an exchange and turns any foreign marker in it into a finding. */
  add(ex: Exchange): Exchange;
  add(ex: Exchange | undefined): Exchange | undefined;
  add(ex: Exchange | undefined): Exchange | undefined {
    if (ex === undefined) return undefined;
    this.exchanges.push(ex);
    this.findings.push(...leakFindings(this.name, ex));
    return ex;
  }

  note(line: string): void {
    this.notes.push(line);
    this.ctx.progress(`${this.name}: ${line}`);
  }

  /** A race scenario's stated power (passes and attempts alike). */
  power: Power | undefined;
  /** Set when the prober's own limits (budget, deadline) cut the scenario short. */
  reason: InconclusiveReason | undefined;

  /** Findings of severity `info` are reported facts, not failures: they never fail the scenario. */
  finish(outcomeIfClean: Exclude<Outcome, 'fail'>): ScenarioResult {
    const outcome: Outcome = this.findings.some((f) => f.severity !== 'info') ? 'fail' : outcomeIfClean;
    const echoed = this.exchanges.filter((e) => e.selfEcho > 0).length;
    // The copy control: an endpoint that never echoes its own markers may not copy leaked ones either.
    if (this.exchanges.length > 0) this.notes.push(`self-echo: ${echoed} of ${this.exchanges.length} responses repeated their own markers`);
    return {
      name: this.name,
      outcome,
      findings: this.findings,
      requests: this.exchanges.map((e) => e.record),
      notes: this.notes,
      tokens: {
        sent: this.exchanges.reduce((n, e) => n + (e.record.promptTokens ?? 0), 0),
        billed: this.exchanges.reduce((n, e) => n + billed(e), 0),
      },
      durationMs: Math.round(this.ctx.now() - this.#start),
      ...(this.power !== undefined ? { power: this.power } : {}),
      ...(this.reason !== undefined && outcome === 'inconclusive' ? { reason: this.reason } : {}),
      ...(outcome === 'fail' ? { withoutFindings: outcomeIfClean } : {}),
    };
  }
}
