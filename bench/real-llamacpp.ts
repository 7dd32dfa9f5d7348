/**
 * `npm run bench:real`: known positives on a real inference server. A default `kvcanary run` (exactly as a
 * user types it, a child process each, one installation home per configuration) against llama.cpp's
 * llama-server with the written copying model (vendor/llama.cpp/make-copier-model.mjs):
 *  - on the fault-injection build with one fault named (vendor/llama.cpp/faults/): per-run recall, i.e. runs
 *    that exited 1 with cross-request-leak, and in how many some leak carried a whole marker body;
 *  - on the pristine build: false positives (any finding above info, or an exit other than 0).
 * Also the copier's prefill speed at -t 1 (one 8k-token prompt). Proportions with 95% Wilson intervals,
 * zero counts with their exact one-sided 95% bound. Needs scripts/setup-test-env.sh to have run.
 *
 *   npx tsx bench/real-llamacpp.ts [--runs N] [--configs NAME,...] [--out FILE] [--resume]
 *
 * Writes bench/real-llamacpp.json (or --out) after every run, merged with the rows already there for
 * configurations not run this time, and prints a table. Each row keeps its runs (`records`); `--resume`
 * continues a row from them up to --runs instead of starting it again. Run it under `nice -n 10`.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { COPIER_MODEL, FAULTS_SERVER, LLAMA_SERVER, startLlamaServer } from '../test/real/llama-server.js';
import { FAULTS, THREADS } from '../test/real/layouts.js';
import { runKvcanary } from './cli-run.js';
import { proportion, zeroEventUpperBound, type Proportion } from './proportion.js';
import type { CopyFidelityResult } from './copy-fidelity.js';
import type { RealLlamaFigures, RealLlamaRow } from './real-llamacpp-figures.js';

interface Config {
  name: string;
  args: string[];
  /** A named fault (the fault build), or none (the pristine build). */
  fault?: string;
}

const CONFIGS: Config[] = [
  ...FAULTS.map((f) => ({ name: f.name, args: f.args, fault: f.name })),
  { name: 'pristine -np 1', args: ['-c', '4096', '-np', '1'] },
  { name: 'pristine -np 4 --kv-unified', args: ['-c', '4096', '-np', '4', '--kv-unified'] },
];

type RunRecord = NonNullable<RealLlamaRow['records']>[number];

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

interface RunDoc {
  findings?: { kind: string; severity: string; evidence?: { facts?: { matchedChars?: number; exact?: boolean } } }[];
  scenarios?: { notes: string[] }[];
}

async function runCli(url: string, home: string): Promise<RunRecord> {
  const { exit, ms, doc } = await runKvcanary<RunDoc>(url, home);
  const rec: RunRecord = { exit, ms, kinds: [], aboveInfo: 0, longestLeak: 0, wholeMarker: false, selfEcho: false };
  if (doc === undefined) return { ...rec, kinds: ['(no JSON on stdout)'] };
  const findings = doc.findings ?? [];
  rec.kinds = [...new Set(findings.map((f) => f.kind))];
  rec.aboveInfo = findings.filter((f) => f.severity !== 'info').length;
  for (const f of findings.filter((x) => x.kind === 'cross-request-leak')) {
    rec.longestLeak = Math.max(rec.longestLeak, f.evidence?.facts?.matchedChars ?? 0);
    rec.wholeMarker ||= f.evidence?.facts?.exact === true;
  }
  rec.selfEcho = (doc.scenarios ?? []).some((s) => s.notes.some((n) => /self-echo: [1-9]\d* of/.test(n)));
  return rec;
}

/** One 8k-token prefill of the copier at -t 1, on the pristine build. */
async function measurePrefill(): Promise<RealLlamaFigures['prefill']> {
  const server = await startLlamaServer(['-c', '8448', '-np', '1', ...THREADS], { model: COPIER_MODEL });
  try {
    const line = 'vault:73' + '0123456789abcdef0123' + '\n';
    const prompt = `Stored keys:\n${line.repeat(300)}Recall one stored key: vault:73`;
    const r = await fetch(`${server.url}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt, n_predict: 1, cache_prompt: false }) });
    const body = (await r.json()) as { timings: { prompt_n: number; prompt_ms: number } };
    return { tokens: body.timings.prompt_n, ms: Math.round(body.timings.prompt_ms), tokensPerSecond: Math.round(body.timings.prompt_n / (body.timings.prompt_ms / 1000)), threads: 1 };
  } finally {
    await server.stop();
  }
}

/** A row's figures from its runs (this invocation's and, with --resume, the file's). */
function summarize(config: Config, records: RunRecord[], faultFirings: number): RealLlamaRow {
  const exits: Record<string, number> = {};
  for (const r of records) exits[String(r.exit)] = (exits[String(r.exit)] ?? 0) + 1;
  const s = records.map((r) => r.ms / 1000).sort((a, b) => a - b);
  const base = {
    config: config.name,
    flags: config.args.join(' '),
    runs: records.length,
    exits,
    selfEchoRuns: records.filter((r) => r.selfEcho).length,
    medianRunS: Math.round(s[Math.floor(s.length / 2)]! * 10) / 10,
    maxRunS: Math.round(s[s.length - 1]! * 10) / 10,
    faultFirings,
    records,
  };
  if (config.fault !== undefined) {
    const caught = records.filter((r) => r.exit === 1 && r.kinds.includes('cross-request-leak')).length;
    return { ...base, fault: config.fault, caught, recall: proportion(caught, records.length) as Proportion & { p: number }, wholeMarkerRuns: records.filter((r) => r.wholeMarker).length };
  }
  const falsePositives = records.filter((r) => r.aboveInfo > 0 || r.exit !== 0).length;
  return { ...base, falsePositives, falsePositiveBound: falsePositives === 0 ? zeroEventUpperBound(records.length) : null };
}

/** Runs `config` until it has `runs` runs (counting `prior`'s), handing the row to `save` after every run. */
async function runConfig(config: Config, runs: number, prior: RealLlamaRow | undefined, save: (row: RealLlamaRow) => void): Promise<void> {
  const records: RunRecord[] = [...(prior?.records ?? [])];
  if (records.length >= runs) return;
  const server = await startLlamaServer([...config.args, ...THREADS], {
    model: COPIER_MODEL,
    ...(config.fault !== undefined ? { binary: FAULTS_SERVER, faults: [config.fault] } : {}),
  });
  const firedBefore = prior?.faultFirings ?? 0;
  const fired = (): number => firedBefore + Object.values(server.faultsFired()).reduce((a, b) => a + b, 0);
  const home = mkdtempSync(join(tmpdir(), 'kvc-bench-real-'));
  try {
    while (records.length < runs) {
      const rec = await runCli(server.url, home);
      records.push(rec);
      process.stderr.write(`${config.name} run ${records.length}/${runs}: exit ${rec.exit}, ${(rec.ms / 1000).toFixed(0)} s, ${rec.kinds.join(',') || 'no findings'}\n`);
      save(summarize(config, records, fired()));
    }
  } finally {
    await server.stop();
    rmSync(home, { recursive: true, force: true });
  }
}

const runs = Number(arg('runs') ?? 20);
const wanted = arg('configs')?.split(',');
const out = arg('out') ?? 'bench/real-llamacpp.json';
if (!existsSync(LLAMA_SERVER) || !existsSync(FAULTS_SERVER) || !existsSync(COPIER_MODEL)) {
  process.stderr.write(`bench:real needs the builds and the copier from scripts/setup-test-env.sh (${LLAMA_SERVER}, ${FAULTS_SERVER}, ${COPIER_MODEL})\n`);
  process.exit(1);
}
/** The bundled engine's default copy-fidelity row (dense planters), as bench/report.json measured it. */
function bundledCopyFidelity(): RealLlamaFigures['bundled'] {
  try {
    const report = JSON.parse(readFileSync('bench/report.json', 'utf8')) as { sections?: { copyFidelity?: { result?: CopyFidelityResult } } };
    const cf = report.sections?.copyFidelity?.result;
    const row = cf?.rows.find((r) => r.layout === 'dense' && r.ngram === cf.defaults.ngram && r.beta === cf.defaults.beta && r.temperature === cf.defaults.temperature);
    if (cf === undefined || row === undefined) return undefined;
    return {
      source: 'bench/report.json, copy fidelity',
      copier: `exact copy head (n-gram ${row.ngram}, beta ${row.beta}, temperature ${row.temperature}, dense planters, 1/${cf.scale} scale)`,
      cycles: row.cycles,
      markerCycles: row.markerCycles,
      wholeMarkerCycles: row.wholeMarkerCycles,
    };
  } catch {
    return undefined;
  }
}

const previous: RealLlamaFigures | undefined = existsSync(out) ? (JSON.parse(readFileSync(out, 'utf8')) as RealLlamaFigures) : undefined;
const figures: RealLlamaFigures = {
  command: `npm run bench:real -- ${process.argv.slice(2).join(' ')}`.trim(),
  measuredAt: new Date().toISOString(),
  loadAverage: { start: loadavg()[0]!, end: loadavg()[0]! },
  threads: 1,
  ...(bundledCopyFidelity() !== undefined ? { bundled: bundledCopyFidelity() } : {}),
  prefill: wanted === undefined || wanted.includes('prefill') || previous === undefined ? await measurePrefill() : previous.prefill,
  rows: [...(previous?.rows ?? [])],
};
process.stderr.write(`copier prefill: ${figures.prefill.tokens} tokens in ${figures.prefill.ms} ms at -t 1\n`);
const resume = process.argv.includes('--resume');
for (const config of CONFIGS.filter((c) => wanted === undefined || wanted.includes(c.name))) {
  const prior = resume ? previous?.rows.find((r) => r.config === config.name && r.records !== undefined) : undefined;
  await runConfig(config, runs, prior, (row) => {
    figures.rows = [...figures.rows.filter((r) => r.config !== row.config), row].sort((a, b) => CONFIGS.findIndex((c) => c.name === a.config) - CONFIGS.findIndex((c) => c.name === b.config));
    figures.loadAverage.end = loadavg()[0]!;
    writeFileSync(out, JSON.stringify(figures, null, 2) + '\n');
  });
}
process.stdout.write(figures.rows.map((r) => `${r.config}: ${r.runs} runs, ${r.fault !== undefined ? `caught ${r.caught}` : `false positives ${r.falsePositives}`}, median ${r.medianRunS} s`).join('\n') + '\n');
