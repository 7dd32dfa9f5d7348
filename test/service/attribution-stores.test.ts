/**
 * Attribution survives stores: a marker planted through one shard's store and read by another shard (same
 * installation key, no planting row) keeps its decrypted request number, says "planted by request #N of this
 * installation (not in this store)" and never a placeholder owner or date; `report` over both stores names the
 * planter from the store that holds it. Real registries, scanner, stores and the `report` CLI.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeFinding } from '../../prober/src/probe/findings.js';
import { createMarkerRegistry, plantingRows } from '../../prober/src/probe/marker-registry.js';
import type { ProbeRun } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import { plantedEvidence } from '../../prober/src/probe/scenarios/exchange.js';
import { renderStatusPage } from '../../prober/src/service/server.js';
import { openStore } from '../../prober/src/service/store.js';
import { runCli } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-attrib-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const key = Uint8Array.from({ length: 16 }, (_, i) => i * 7 + 1);

describe('a planter another store holds', () => {
  it('is named by its request number, never by placeholders, and report over both stores resolves it', async () => {
    const now = Date.now();
    const plantedAt = new Date(now - 60_000).toISOString();
    // Shard A plants and records the planting row in its store.
    const shardA = createMarkerRegistry({ key });
    const entry = shardA.plant({ runId: 'run-a', requestId: 'planter-9', role: 'planter', tenant: 'acme' });
    const storeA = path.join(dir, 'a.sqlite');
    const a = openStore({ path: storeA, retentionMs: 86_400_000 });
    a.recordPlantings(plantingRows([entry]).map((r) => ({ ...r, plantedAt })));
    a.close();

    // Shard B (same installation key, its own store without that row) reads the marker in a response.
    const storeB = path.join(dir, 'b.sqlite');
    const b = openStore({ path: storeB, retentionMs: 86_400_000 });
    const shardB = createMarkerRegistry({ key, lookupPlanting: (no) => b.findPlanting(no) });
    const session = createScanner(shardB).open({ requestId: 'reader-1', tenant: 'globex', role: 'reader', runId: 'run-b' });
    session.push(`leaked text ${entry.marker} more`);
    const [match] = session.end();
    expect(match).toBeDefined();
    const planted = plantedEvidence(match!.owner, match!.plantedBy);
    expect(planted).toEqual({
      requestNo: entry.requestNo, by: 'unknown', note: `planted by request #${entry.requestNo} of this installation (not in this store)`,
    });
    const finding = makeFinding('cross-request-leak', 'abort-race', { match: entry.marker, excerpt: 'x', planted, read: { requestId: 'reader-1', role: 'reader', tenant: 'globex' } }, 1e-30);
    const at = new Date(now - 30_000).toISOString();
    const run: ProbeRun = {
      runId: 'run-b', target: 'replica-b', baseUrl: 'http://b:8000', model: 'm', startedAt: at, finishedAt: at, outcome: 'fail', up: true, capacity: {},
      scenarios: [{ name: 'abort-race', outcome: 'fail', findings: [finding], requests: [], notes: [], tokens: { sent: 1, billed: 1 }, durationMs: 1 }],
    };
    b.recordRun(run);
    const page = renderStatusPage({ latest: b.latestPerTarget(), findings: b.findings(), configured: [], health: undefined, now });
    b.close();

    // One store: the number and what it means; nowhere a placeholder owner or an epoch date.
    const alone = await runCli(['report', '--store', storeB]);
    expect(alone.stdout).toContain(`planted by request #${entry.requestNo} of this installation (not in this store)`);
    for (const text of [alone.stdout, page]) {
      expect(text).not.toMatch(/1970-01-01|unknown\/unknown/);
    }
    expect(page).toContain(`planted by request #${entry.requestNo} of this installation (not in this store)`);

    // Both stores: the planter is named from the store that holds its row.
    const both = await runCli(['report', '--store', storeB, '--store', storeA]);
    expect(both.stdout).toContain(`planted by acme/planter planter-9 at ${plantedAt} (from ${storeA})`);
    const json = JSON.parse((await runCli(['report', '--store', storeB, '--store', storeA, '--json'])).stdout) as { findings: { evidence: { planted: Record<string, unknown> } }[] };
    expect(json.findings[0]!.evidence.planted).toMatchObject({ requestNo: entry.requestNo, runId: 'run-a', requestId: 'planter-9', tenant: 'acme', by: 'earlier-run', resolvedFrom: storeA });
  }, 60_000);
});
