/**
 * The prober against the bundled engine, as a newcomer runs it (`kvcanary run --json` as a process): every
 * detection claim on a known positive and a known negative.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import { runCli } from '../helpers/cli.js';

interface RunDoc {
  outcome: string;
  scenarios: Array<{ name: string; outcome: string }>;
  findings: Array<{ kind: string; scenario: string; chance: number; evidence: { excerpt?: string; planted?: { requestId: string }; read?: { requestId: string } } }>;
}

const ISSUE4_SCENARIOS = ['--scenario', 'capacity-audit', '--scenario', 'overlimit-handoff', '--scenario', 'abort-race'];

let engine: RunningEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function probe(options: StartEngineOptions, extra: string[] = []): Promise<{ code: number | null; doc: RunDoc; kinds: Set<string> }> {
  engine = await startEngine({ scale: 64, ...options });
  const r = await runCli(['run', '--target', engine.url, '--json', '-q', ...ISSUE4_SCENARIOS, ...extra], { timeoutMs: 120_000 });
  const doc = JSON.parse(r.stdout) as RunDoc;
  return { code: r.code, doc, kinds: new Set(doc.findings.map((f) => f.kind)) };
}

describe('kvcanary run against the bundled engine', () => {
  it('incident: exit 1 with cross-request-leak, rejection-not-enforced and pool-below-context', async () => {
    // The rejection and the pool are certain in every run; the marker leak is a per-cycle chance (99 of 100
    // cycles at this scale, bench's runSeries): up to three runs on fresh engines, one must show it.
    let leak: RunDoc['findings'][number] | undefined;
    for (let run = 0; run < 3 && leak === undefined; run++) {
      await engine?.close();
      const { code, doc, kinds } = await probe({ preset: 'incident' });
      expect(code).toBe(1);
      expect(doc.outcome).toBe('fail');
      expect([...kinds].filter((k) => k !== 'cross-request-leak').sort()).toEqual(['pool-below-context', 'rejection-not-enforced']);
      leak = doc.findings.find((f) => f.kind === 'cross-request-leak');
    }
    expect(leak).toBeDefined();
    expect(leak!.scenario).toBe('overlimit-handoff');
    expect(leak!.chance).toBeLessThan(1e-6);
    expect(leak!.evidence.planted!.requestId).not.toBe(leak!.evidence.read!.requestId);
    expect((leak!.evidence.excerpt ?? '').length).toBeLessThanOrEqual(200);
  }, 300_000);

  it('remediated: exit 0, every scenario passes', async () => {
    const { code, doc } = await probe({ preset: 'remediated' });
    expect(doc.findings).toEqual([]);
    expect(doc.scenarios.map((s) => s.outcome)).toEqual(['pass', 'pass', 'pass']);
    expect(code).toBe(0);
  }, 120_000);

  it('hardened: only pool-below-context', async () => {
    const { code, kinds } = await probe({ preset: 'hardened' });
    expect([...kinds]).toEqual(['pool-below-context']);
    expect(code).toBe(1);
  }, 120_000);

  it('incident + zero-on-release: rejection-not-enforced without a leak', async () => {
    const { kinds } = await probe({ preset: 'incident', defenses: ['zero-on-release'] });
    expect(kinds.has('rejection-not-enforced')).toBe(true);
    expect(kinds.has('cross-request-leak')).toBe(false);
  }, 120_000);

  // A race: each cycle catches it with some probability (bench/REPORT.md measures it), so allow a few cycles.
  it.each([
    ['late-write', 'lifo'],
    ['offload-release-race', 'fifo'],
  ] as const)('%s (%s free list): cross-request-leak from abort-race within 3 cycles', async (fault, freeList) => {
    engine = await startEngine({ scale: 64, preset: 'disaggregated', faults: [fault], freeList });
    let leaks: RunDoc['findings'] = [];
    for (let cycle = 0; cycle < 3 && leaks.length === 0; cycle++) {
      const r = await runCli(['run', '--target', engine.url, '--json', '-q', '--scenario', 'abort-race', '--rounds', '12'], { timeoutMs: 120_000 });
      leaks = (JSON.parse(r.stdout) as RunDoc).findings.filter((f) => f.kind === 'cross-request-leak');
    }
    expect(leaks.length).toBeGreaterThan(0);
    expect(leaks.every((f) => f.scenario === 'abort-race')).toBe(true);
  }, 240_000);
});

describe('prefix-isolation against the bundled engine', () => {
  const run = async (options: StartEngineOptions, extra: string[] = [], env: Record<string, string> = {}): Promise<{ code: number | null; doc: RunDoc }> => {
    engine = await startEngine({ scale: 64, ...options });
    const r = await runCli(['run', '--target', engine.url, '--json', '-q', '--scenario', 'prefix-isolation', ...extra], { timeoutMs: 120_000, env });
    return { code: r.code, doc: JSON.parse(r.stdout) as RunDoc };
  };

  it('prefix-cache-ignores-salt, two configured tenants with different keys: prefix-cache-shared-across-tenants, critical', async () => {
    const { code, doc } = await run({ preset: 'single', faults: ['prefix-cache-ignores-salt'] }, ['--tenant', 'alice=KVC_TEST_ALICE', '--tenant', 'bob=KVC_TEST_BOB'], {
      KVC_TEST_ALICE: 'sk-alice-000000000001',
      KVC_TEST_BOB: 'sk-bob-000000000002',
    });
    const shared = doc.findings.find((f) => f.kind === 'prefix-cache-shared-across-tenants') as { severity?: string } | undefined;
    expect(shared?.severity).toBe('critical');
    expect(code).toBe(1);
  }, 120_000);

  it('prefix-cache-ignores-salt, no tenants configured: the synthetic salt identities share, cache-salt-ignored (info)', async () => {
    const { code, doc } = await run({ preset: 'single', faults: ['prefix-cache-ignores-salt'] });
    expect(doc.findings.map((f) => f.kind)).toContain('cache-salt-ignored');
    expect(doc.findings.map((f) => f.kind)).not.toContain('prefix-cache-shared-across-tenants');
    expect(doc.scenarios[0]?.outcome).toBe('not-applicable');
    expect(code).toBe(2); // nothing applicable was run: not a pass
  }, 120_000);

  it('hardened: pass (the same-tenant control showed reuse, the other tenant none); alone it is no run pass (partial, exit 2)', async () => {
    const { code, doc } = await run({ preset: 'hardened' });
    expect(doc.findings).toEqual([]);
    expect(doc.scenarios[0]?.outcome).toBe('pass');
    // The overall rule: without a behavioural scenario the run establishes no isolation.
    expect({ outcome: doc.outcome, code }).toEqual({ outcome: 'partial', code: 2 });
  }, 120_000);

  it('caching off: not-applicable with the evidence, never a pass', async () => {
    const { code, doc } = await run({ preset: 'hardened', prefixCache: false });
    const s = doc.scenarios[0] as { outcome?: string; reason?: string; notes?: string[] } | undefined;
    // Absence needs a timing test powered to see a hit: on a loaded host it may not be, and then it says so.
    if (s?.outcome === 'not-applicable') expect((s.notes ?? []).join('\n')).toMatch(/no prefix reuse detectable \(a saving >= \d+% would have shown with probability 0\.95/);
    else expect({ outcome: s?.outcome, reason: s?.reason }).toEqual({ outcome: 'inconclusive', reason: 'power' });
    expect(code).toBe(2);
  }, 120_000);
});

describe('a default run against the bundled engine without its prefix cache', () => {
  it('remediated --no-prefix-cache: exit 0, the three prefix scenarios not-applicable (or, underpowered, inconclusive: never a pass)', async () => {
    engine = await startEngine({ scale: 64, preset: 'remediated', prefixCache: false });
    const r = await runCli(['run', '--target', engine.url, '--json', '-q'], { timeoutMs: 240_000 });
    const doc = JSON.parse(r.stdout) as RunDoc;
    const prefix = ['prefix-isolation', 'prefix-collision', 'prefix-churn'].map((name) => doc.scenarios.find((s) => s.name === name) as { name: string; outcome?: string; reason?: string } | undefined);
    // Absence needs the shared timing test powered to see a hit: on a loaded host it may not be, and then the
    // scenarios say so (inconclusive, reason power) and the run is inconclusive: never a pass on less.
    const underpowered = prefix.some((s) => s?.outcome === 'inconclusive');
    for (const s of prefix) {
      if (s?.outcome !== 'not-applicable') expect({ name: s?.name, outcome: s?.outcome, reason: s?.reason }).toEqual({ name: s?.name, outcome: 'inconclusive', reason: 'power' });
    }
    expect(doc.findings).toEqual([]);
    expect({ outcome: doc.outcome, code: r.code }).toEqual(underpowered ? { outcome: 'inconclusive', code: 2 } : { outcome: 'pass', code: 0 });
  }, 300_000);
});

describe('prefix-collision against the bundled engine', () => {
  const run = async (options: StartEngineOptions): Promise<{ code: number | null; doc: RunDoc }> => {
    engine = await startEngine({ scale: 64, ...options });
    const r = await runCli(['run', '--target', engine.url, '--json', '-q', '--scenario', 'prefix-collision'], { timeoutMs: 120_000 });
    return { code: r.code, doc: JSON.parse(r.stdout) as RunDoc };
  };

  it('weak-prefix-hash: a reordered prompt is served the plant\'s cached pages (prefix-cache-collision) and their text', async () => {
    // The collision shows in every run; the plant's text in the collider's answer is a per-cycle chance (48 of
    // 50, bench/REPORT.md): up to three runs on fresh engines, one must show it.
    let leaked = false;
    for (let i = 0; i < 3 && !leaked; i++) {
      await engine?.close();
      const { code, doc } = await run({ preset: 'single', faults: ['weak-prefix-hash'] });
      const kinds = new Set(doc.findings.map((f) => f.kind));
      expect([...kinds].filter((k) => k !== 'cross-request-leak')).toEqual(['prefix-cache-collision']);
      expect(code).toBe(1);
      leaked = kinds.has('cross-request-leak');
    }
    expect(leaked).toBe(true);
  }, 300_000);

  it('strong-prefix-hash on the same fault, and the plain single preset: pass (the control showed reuse)', async () => {
    for (const options of [{ preset: 'single', faults: ['weak-prefix-hash'], defenses: ['strong-prefix-hash'] }, { preset: 'single' }]) {
      const { code, doc } = await run(options);
      expect(doc.findings).toEqual([]);
      expect(doc.scenarios[0]?.outcome).toBe('pass');
      expect({ outcome: doc.outcome, code }).toEqual({ outcome: 'partial', code: 2 });
      await engine?.close();
      engine = undefined;
    }
  }, 120_000);

  it('caching off: exit 2 (inconclusive or not applicable), never a pass', async () => {
    const { code } = await run({ preset: 'single', prefixCache: false });
    expect(code).toBe(2);
  }, 120_000);
});

