/**
 * The hourly token budget of one target: a sliding one-hour window of what its probes spent, plus what is
 * reserved by probes still in flight.
 *
 * What a scenario run costs is max(tokens sent, tokens billed): an over-limit prompt that the endpoint
 * rejects bills nothing yet still made it tokenize a million tokens, and a billed completion can exceed
 * the prompt estimate.
 *
 * A cycle is admitted only if what its scenarios cost last time fits in what is left (capped at the hourly
 * limit, so a cycle that once overspent still runs, at most hourly, rather than never again). Within a
 * cycle, each scenario, as it starts, is granted a share of what is available in proportion to what it
 * cost last time (scenarios never run yet weigh as the mean of the known ones), so the cheap introspection
 * scenario does not take a third of the budget from the over-limit sweep. The grant is what the probe is
 * told it may spend; what it actually spent is charged when it returns, even beyond the grant.
 */

export const WINDOW_MS = 3_600_000;

export function costOf(tokens: { sent: number; billed: number }): number {
  const c = Math.max(tokens.sent, tokens.billed);
  return Number.isFinite(c) && c > 0 ? Math.round(c) : 0;
}

export interface Reservation {
  readonly amount: number;
  /** Holds `tokens` more (a probe drew beyond its grant: TokenBudget.spare says what may be). */
  grow(tokens: number): void;
  /** Releases the reservation and charges what was really spent at `at` (unix ms). */
  settle(spent: number, at: number): void;
}

export class TokenBudget {
  private spends: { at: number; tokens: number }[] = [];
  private reserved = 0;
  private readonly lastCost = new Map<string, number>();

  constructor(private limit: number) {}

  get tokensPerHour(): number { return this.limit; }

  setLimit(limit: number): void { this.limit = limit; }

  /** Tokens spent within the window ending at `now`. */
  spent(now: number): number {
    const from = now - WINDOW_MS;
    while (this.spends.length > 0 && this.spends[0]!.at <= from) this.spends.shift();
    let total = 0;
    for (const s of this.spends) if (s.at <= now) total += s.tokens;
    return total;
  }

  /** Left in the current hourly budget, ignoring reservations (what the gauge shows). */
  remaining(now: number): number {
    return Math.max(0, this.limit - this.spent(now));
  }

  /** Left for a new probe: remaining minus what in-flight probes hold. */
  available(now: number): number {
    return Math.max(0, this.limit - this.spent(now) - this.reserved);
  }

  /** Records spend without a reservation (seeding from the store after a restart). */
  charge(tokens: number, at: number): void {
    if (tokens <= 0) return;
    // Keep the list ordered by time so spent() can drop expired entries from the front.
    let i = this.spends.length;
    while (i > 0 && this.spends[i - 1]!.at > at) i--;
    this.spends.splice(i, 0, { at, tokens });
  }

  noteCost(scenario: string, tokens: number): void { this.lastCost.set(scenario, tokens); }

  costEstimate(scenario: string): number | undefined { return this.lastCost.get(scenario); }

  /** What a cycle of these scenarios is expected to cost (unknown scenarios count as 0), uncapped. */
  cycleCost(scenarios: readonly string[]): number {
    let total = 0;
    for (const s of scenarios) total += this.lastCost.get(s) ?? 0;
    return total;
  }

  /** cycleCost capped at the limit: what admission asks for (a cycle that once overspent still runs, at most hourly). */
  cycleEstimate(scenarios: readonly string[]): number {
    return Math.min(this.cycleCost(scenarios), this.limit);
  }

  /**
   * Can a cycle of these scenarios start now? `needed` is what admission asks for (capped at the limit);
   * `cost` what the cycle cost last time, uncapped (what logs and warnings report).
   */
  fits(scenarios: readonly string[], now: number): { ok: boolean; needed: number; cost: number; available: number } {
    const available = this.available(now);
    const needed = this.cycleEstimate(scenarios);
    return { ok: available > 0 && needed <= available, needed, cost: this.cycleCost(scenarios), available };
  }

  /** The share of what is available now for `scenario`, given the cycle's scenarios not yet started (including it). */
  grant(scenario: string, unstarted: readonly string[], now: number): number {
    const available = this.available(now);
    if (available <= 0) return 0;
    const known = unstarted.map((s) => this.lastCost.get(s)).filter((c): c is number => c !== undefined);
    const mean = known.length > 0 ? known.reduce((a, b) => a + b, 0) / known.length : 1;
    const weight = (s: string): number => Math.max(1, this.lastCost.get(s) ?? mean);
    const total = unstarted.reduce((a, s) => a + weight(s), 0);
    return Math.floor(available * (weight(scenario) / Math.max(total, weight(scenario))));
  }

  /**
   * What a running scenario may draw beyond its grant now: what is available less what the cycle's scenarios
   * not yet started are expected to need (their last cost; one never run, an equal share of the hourly limit
   * among the `cycleSize` scenarios of the cycle). A first cycle has no costs to share by, so its grants are
   * equal shares, and a scenario that costs more than its share (abort-race at 4,096-token planters) draws
   * the rest from here instead of being cut short with most of the budget unspent.
   */
  spare(unstarted: readonly string[], cycleSize: number, now: number): number {
    const share = this.limit / Math.max(1, cycleSize);
    const expected = unstarted.reduce((a, s) => a + (this.lastCost.get(s) ?? share), 0);
    return Math.max(0, this.available(now) - expected);
  }

  reserve(amount: number): Reservation {
    let held = Math.max(0, amount);
    this.reserved += held;
    let settled = false;
    return {
      get amount() { return held; },
      grow: (tokens) => {
        if (settled || !(tokens > 0)) return;
        held += tokens;
        this.reserved += tokens;
      },
      settle: (spent, at) => {
        if (settled) return;
        settled = true;
        this.reserved -= held;
        this.charge(spent, at);
      },
    };
  }
}
