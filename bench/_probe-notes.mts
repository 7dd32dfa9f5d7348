import { createMarkerRegistry } from '/work/wt/i22-verdicts/prober/src/probe/marker-registry.js';
import { runProbe } from '/work/wt/i22-verdicts/prober/src/probe/probe.js';
import { createScanner } from '/work/wt/i22-verdicts/prober/src/probe/scanner.js';
import { startPrefixCacheServer } from '/work/wt/i22-verdicts/test/helpers/prefix-cache-server.js';
const cases: Array<[string, any, any[]]> = JSON.parse(process.argv[2]!);
const scen = process.argv[3] ?? 'prefix-isolation';
for (const [name, opts, tenants] of cases) {
  const server = await startPrefixCacheServer(opts);
  const registry = createMarkerRegistry();
  const run = await runProbe({ registry, scanner: createScanner(registry), env: { KA: 'sk-a-00000001', KB: 'sk-b-00000002' } },
    { target: { name: 'toy', baseUrl: server.url, headers: {}, tenants, scenarios: [], schedule: { intervalMs: 60000, timeoutMs: 10000, jitterMs: 0 }, budget: { tokensPerHour: 1e9 } } as any, scenarios: [scen], runId: 'x', signal: new AbortController().signal, tokenBudget: 1e9 });
  const s = run.scenarios[0]!;
  console.log(`== ${name}: ${s.outcome} ${s.reason ?? ''} ${s.findings.map((f) => f.kind).join(',')}`);
  for (const n of s.notes) console.log('   ' + n.slice(0, 600));
  await server.close();
}
