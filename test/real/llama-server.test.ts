/**
 * kvcanary against a real llama.cpp llama-server (a tiny random-weight model), in several slot layouts: a
 * default `kvcanary run` must judge each clean — exit 0, pass — from llama.cpp's own signals: the rejection
 * of an over-limit prompt (exceed_context_size_error), /props and /slots for capacity, cached_tokens and
 * pinned slots for the prefix cache. Random weights emit noise in many scripts: nothing above info may be
 * found in any response.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { startLlamaServer, type LlamaServer } from './llama-server.js';
import { LAYOUTS, THREADS } from './layouts.js';

interface RunJson {
  outcome: string;
  scenarios: Array<{ name: string; outcome: string; notes: string[]; findings: unknown[]; durationMs: number }>;
  findings: Array<{ kind: string; severity: string }>;
}

describe('kvcanary run against llama.cpp llama-server', () => {
  let server: LlamaServer | undefined;
  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });

  it('fails fast with the tail of llama-server\'s output when the server cannot start', async () => {
    const err = await startLlamaServer(['-c', '4096', '--no-such-flag']).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/exited .* before listening/);
    expect(err?.message).toMatch(/no-such-flag/);
  });

  for (const layout of LAYOUTS) {
    it(`judges ${layout.name} clean: exit 0, pass, from llama.cpp's own signals`, async () => {
      server = await startLlamaServer([...layout.args, ...THREADS]);
      const started = Date.now();
      const r = await runCli(['run', '--target', server.url, '--json', '-q'], { timeoutMs: 540_000 });
      const seconds = ((Date.now() - started) / 1000).toFixed(1);
      const run = JSON.parse(r.stdout) as RunJson;
      const by = Object.fromEntries(run.scenarios.map((s) => [s.name, s]));
      const summary = run.scenarios.map((s) => `${s.name}=${s.outcome} (${(s.durationMs / 1000).toFixed(1)}s)`).join(' ');
      // eslint-disable-next-line no-console
      console.log(`llama-server ${layout.name}: kvcanary run ${seconds}s, exit ${r.code}, ${run.outcome}: ${summary}`);
      const context = `${summary}\n${run.scenarios.map((s) => `${s.name}:\n  ${s.notes.join('\n  ')}`).join('\n')}\n--- llama-server:\n${server.tail().slice(-1500)}`;

      expect(run.findings.filter((f) => f.severity !== 'info'), context).toEqual([]);
      expect({ code: r.code, outcome: run.outcome }, context).toEqual({ code: 0, outcome: 'pass' });
      for (const name of ['overlimit-handoff', 'abort-race', 'concurrent-interleave']) expect(by[name]?.outcome, `${name}\n${context}`).toBe('pass');
      // The rejection llama.cpp gives a prompt over its slot's context.
      expect(by['overlimit-handoff']!.notes.join('\n')).toMatch(/beyond-context .*rejected 400 \(llamacpp, limit \d+\)/);
      // Capacity from /props and /slots.
      expect(by['capacity-audit']!.outcome).toBe('pass');
      expect(by['capacity-audit']!.notes.join('\n')).toMatch(/llama\.cpp: \d+ slot\(s\), \/slots n_ctx \d+/);
      // Prefix scenarios: judged from cached_tokens (reported by llama.cpp), or not applicable with the evidence.
      const isolation = by['prefix-isolation']!;
      expect(isolation.outcome).toBe('not-applicable');
      expect(run.findings.map((f) => f.kind)).toContain('cache-salt-ignored');
      expect(isolation.notes.join('\n')).toMatch(/differ only by cache_salt, which it ignores/);
      expect(by['prefix-collision']!.outcome).toBe('pass');
      expect(by['prefix-collision']!.notes.join('\n')).toMatch(/control cached tokens above the baseline/);
      const churn = by['prefix-churn']!;
      expect(churn.outcome).toBe('pass');
      expect(churn.notes.join('\n')).toMatch(/pins its sends and its churn to one of \d+ slot/);
      expect(churn.notes.join('\n')).toMatch(layout.args.includes('--cache-ram') ? /P evicted by the churn/ : /P (evicted by the churn|restored from a copy kept beyond the slot)/);
    }, 600_000);
  }
});
