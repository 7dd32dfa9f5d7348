/**
 * Known positives through a real forward pass: llama.cpp's llama-server with the written copying model
 * (vendor/llama.cpp/make-copier-model.mjs), on the pristine build and on the fault-injection build
 * (vendor/llama.cpp/faults/, one fault at a time via KVCANARY_LLAMA_FAULTS).
 *  - The copier copies: secrets of a format kvcanary never uses, cued by their shared prefix only, are
 *    continued for 12+ characters in >= 90% of prompts at N = 12, 100 and the most the context holds, and no
 *    12-character piece of an answer is absent from its prompt.
 *  - Pristine server + copier, every slot layout: exit 0, pass, nothing above info, and the self-echo control
 *    positive (the model copied its own planted markers in that very run).
 *  - Each fault: a default `kvcanary run` exits 1 with cross-request-leak read from a response (markers the
 *    model generated), and the fault logged that it fired. The fault build with no fault named: exit 0.
 *  - The random-weight model on each fault: what behaviour alone (no copying) still catches.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { COPIER_MODEL, FAULTS_SERVER, startLlamaServer, type LlamaServer, type StartOptions } from './llama-server.js';
import { FAULTS, LAYOUTS, THREADS } from './layouts.js';

interface RunJson {
  outcome: string;
  scenarios: Array<{ name: string; outcome: string; notes: string[]; findings: unknown[]; durationMs: number }>;
  findings: Array<{ kind: string; severity: string; scenario: string; evidence: { match?: string; read?: { requestId: string; role: string } } }>;
}

async function kvcanaryRun(server: LlamaServer, label: string): Promise<{ code: number | null; run: RunJson; context: string }> {
  const started = Date.now();
  const r = await runCli(['run', '--target', server.url, '--json', '-q'], { timeoutMs: 540_000 });
  const run = JSON.parse(r.stdout) as RunJson;
  const summary = run.scenarios.map((s) => `${s.name}=${s.outcome} (${(s.durationMs / 1000).toFixed(1)}s)`).join(' ');
  const fired = JSON.stringify(server.faultsFired());
  // eslint-disable-next-line no-console
  console.log(`${label}: kvcanary run ${((Date.now() - started) / 1000).toFixed(1)}s, exit ${r.code}, ${run.outcome}, faults fired ${fired}: ${summary}`);
  const context = `${summary}\n${run.scenarios.map((s) => `${s.name}:\n  ${s.notes.join('\n  ')}`).join('\n')}\n--- llama-server:\n${server.tail().slice(-1500)}`;
  return { code: r.code, run, context };
}

/** Secrets of a format kvcanary never uses: a shared prefix, then 20 hex digits (each digit is one token). */
const SECRET_PREFIX = 'vault:73';
function secretsPrompt(n: number): { prompt: string; secrets: string[] } {
  const secrets = Array.from({ length: n }, () => SECRET_PREFIX + randomBytes(10).toString('hex'));
  return { prompt: `Stored keys:\n${secrets.join('\n')}\nRecall one stored key: ${SECRET_PREFIX}`, secrets };
}

async function complete(url: string, prompt: string): Promise<{ content: string; promptTokens: number; promptMs: number }> {
  const r = await fetch(`${url}/completion`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, n_predict: 20, temperature: 0, cache_prompt: false }),
  });
  expect(r.status).toBe(200);
  const body = (await r.json()) as { content: string; timings: { prompt_n: number; prompt_ms: number } };
  return { content: body.content, promptTokens: body.timings.prompt_n, promptMs: body.timings.prompt_ms };
}

async function tokenCount(url: string, text: string): Promise<number> {
  const r = await fetch(`${url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content: text }) });
  return ((await r.json()) as { tokens: number[] }).tokens.length;
}

describe('the copying model on llama.cpp llama-server', () => {
  let server: LlamaServer | undefined;
  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });

  const start = async (args: string[], opts: StartOptions): Promise<LlamaServer> => (server = await startLlamaServer([...args, ...THREADS], opts));

  it('continues one of N secrets from their shared prefix alone, at N = 12, 100 and the most an 8k context holds, and invents no text', async () => {
    const ctx = 8192;
    const srv = await start(['-c', String(ctx), '-np', '1'], { model: COPIER_MODEL });
    // The most secrets whose prompt, plus the 20 generated tokens, fits the context.
    const perSecret = (await tokenCount(srv.url, secretsPrompt(40).prompt) - (await tokenCount(srv.url, secretsPrompt(20).prompt))) / 20;
    const overhead = (await tokenCount(srv.url, secretsPrompt(20).prompt)) - 20 * perSecret;
    const nMax = Math.floor((ctx - 24 - overhead) / perSecret);
    for (const [n, prompts] of [[12, 20], [100, 10], [nMax, 5]] as const) {
      let copied = 0;
      let slowest = 0;
      for (let i = 0; i < prompts; i++) {
        let { prompt, secrets } = secretsPrompt(n);
        // Random digits tokenize a little differently from prompt to prompt: drop secrets until this one fits.
        while (n === nMax && (await tokenCount(srv.url, prompt)) + 24 > ctx) ({ prompt, secrets } = secretsPrompt(secrets.length - 1));
        const out = await complete(srv.url, prompt);
        slowest = Math.max(slowest, out.promptMs);
        if (secrets.some((s) => s.slice(SECRET_PREFIX.length, SECRET_PREFIX.length + 12) === out.content.slice(0, 12))) copied++;
        for (let j = 0; j + 12 <= out.content.length; j++) expect(prompt, `invented "${out.content}"`).toContain(out.content.slice(j, j + 12));
        if (n === nMax && i === 0) expect(out.promptTokens).toBeGreaterThan(ctx - 300);
      }
      // eslint-disable-next-line no-console
      console.log(`copier: N=${n}: ${copied}/${prompts} prompts continued a secret for 12+ characters; slowest prefill ${(slowest / 1000).toFixed(1)} s`);
      expect(copied / prompts, `N=${n}`).toBeGreaterThanOrEqual(0.9);
    }
  }, 600_000);

  for (const layout of LAYOUTS) {
    it(`pristine ${layout.name} with the copier: exit 0, pass, nothing above info, self-echo seen`, async () => {
      const srv = await start(layout.args, { model: COPIER_MODEL });
      const { code, run, context } = await kvcanaryRun(srv, `pristine ${layout.name} + copier`);
      expect(run.findings.filter((f) => f.severity !== 'info'), context).toEqual([]);
      expect({ code, outcome: run.outcome }, context).toEqual({ code: 0, outcome: 'pass' });
      const notes = run.scenarios.flatMap((s) => s.notes).join('\n');
      expect(notes, context).toMatch(/self-echo: [1-9]\d* of \d+ responses repeated their own markers/);
    }, 600_000);
  }

  for (const fault of FAULTS) {
    it(`fault ${fault.name} (${fault.args.join(' ')}) with the copier: exit 1, cross-request-leak read from a response`, async () => {
      const srv = await start(fault.args, { model: COPIER_MODEL, binary: FAULTS_SERVER, faults: [fault.name] });
      const { code, run, context } = await kvcanaryRun(srv, `fault ${fault.name} + copier`);
      expect(srv.faultsFired()[fault.name] ?? 0, `the fault never fired\n${context}`).toBeGreaterThan(0);
      const leaks = run.findings.filter((f) => f.kind === 'cross-request-leak');
      expect(leaks.length, context).toBeGreaterThan(0);
      // Evidence through the forward pass: marker text the model generated, in a response a request read.
      for (const leak of leaks) {
        expect(leak.evidence.match?.length ?? 0).toBeGreaterThanOrEqual(12);
        expect(leak.evidence.read?.requestId).toBeTruthy();
      }
      expect(code, context).toBe(1);
    }, 600_000);
  }

  it('the fault build with no fault named behaves as the pristine server: exit 0', async () => {
    const srv = await start(['-c', '4096', '-np', '1'], { model: COPIER_MODEL, binary: FAULTS_SERVER });
    const { code, run, context } = await kvcanaryRun(srv, 'fault build, no fault named + copier');
    expect(srv.faultsFired(), context).toEqual({});
    expect(run.findings.filter((f) => f.severity !== 'info'), context).toEqual([]);
    expect(code, context).toBe(0);
  }, 600_000);

  for (const fault of FAULTS) {
    const expected = fault.randomWeights === undefined ? 'outcome reported (not yet measured)' : fault.randomWeights.caught === 'never' ? 'not caught without a copying model' : `caught ${fault.randomWeights.caught} by behaviour alone`;
    it(`fault ${fault.name} with the random-weight model: ${expected}`, async () => {
      const srv = await start(fault.args, { binary: FAULTS_SERVER, faults: [fault.name] });
      const { code, run, context } = await kvcanaryRun(srv, `fault ${fault.name} + random weights`);
      expect(srv.faultsFired()[fault.name] ?? 0, `the fault never fired\n${context}`).toBeGreaterThan(0);
      const failing = [...new Set(run.findings.filter((f) => f.severity !== 'info').map((f) => `${f.scenario}:${f.kind}`))];
      // Printed so that a run of the suite is the measurement layouts.ts records (randomWeights).
      console.log(`random weights + ${fault.name}: exit ${code}, ${failing.join(', ') || 'no finding above info'}`);
      if (fault.randomWeights === undefined) return;
      const { caught, by } = fault.randomWeights;
      // Only the behavioural detections this fault can give, never a marker leak (the model does not copy).
      expect(failing.filter((k) => !by.includes(k)), context).toEqual([]);
      if (caught === 'always') expect(failing.length, context).toBeGreaterThan(0);
      if (failing.length > 0) expect(code, context).toBe(1);
      else expect(code, context).not.toBe(1);
    }, 600_000);
  }
});
