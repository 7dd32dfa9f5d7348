#!/usr/bin/env bash
# `bash bench/consecutive-runs.sh [N]`: N (default 10) consecutive `kvcanary run --scenario overlimit-handoff`
# against ONE incident engine (1/64 scale), as a user would type them, in a scratch installation home. For each
# run: its exit code, whether it raised cross-request-leak, and who planted the leaked marker (this run or an
# earlier one, by run id), checked against the runs' recorded requests in the installation's run store.
set -euo pipefail
N=${1:-10}
cd "$(dirname "$0")/.."
WORK=$(mktemp -d /tmp/kvc-runs-XXXXXX)
export KVCANARY_HOME="$WORK/home"
node bin/kvcanary.js engine --preset incident --scale 64 >"$WORK/engine.log" 2>&1 &
ENGINE=$!
trap 'kill $ENGINE 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/engine.log" | head -1 || true); [ -n "$URL" ] && break; sleep 0.2; done
for i in $(seq 1 "$N"); do
  code=0
  node bin/kvcanary.js run --target "$URL" --scenario overlimit-handoff --json -q >"$WORK/run$i.json" 2>"$WORK/run$i.err" || code=$?
  echo "$code" >"$WORK/run$i.code"
done
node -e '
const fs = require("fs"); const D = require("better-sqlite3");
const [dir, n] = [process.argv[1], Number(process.argv[2])];
const db = new D(dir + "/home/runs.sqlite", { readonly: true });
const sent = db.prepare("SELECT run_id, request_id, role, tenant FROM requests");
const byRun = new Map(); for (const r of sent.all()) { if (!byRun.has(r.run_id)) byRun.set(r.run_id, new Map()); byRun.get(r.run_id).set(r.request_id, r); }
let leaks = 0, attributed = 0, earlier = 0;
for (let i = 1; i <= n; i++) {
  const run = JSON.parse(fs.readFileSync(`${dir}/run${i}.json`, "utf8"));
  const code = fs.readFileSync(`${dir}/run${i}.code`, "utf8").trim();
  const found = run.findings.filter((f) => f.kind === "cross-request-leak");
  const ok = found.filter((f) => { const p = f.evidence.planted; const r = byRun.get(p.runId)?.get(p.requestId);
    return r !== undefined && r.role === p.role && r.tenant === p.tenant && p.by === (p.runId === run.runId ? "this-run" : "earlier-run"); });
  if (found.length > 0) leaks++;
  if (found.length > 0 && ok.length === found.length) attributed++;
  if (found.some((f) => f.evidence.planted.by === "earlier-run")) earlier++;
  console.log(`run ${i} ${run.runId} exit ${code}: ${found.length} cross-request-leak; planted by ` +
    (found.map((f) => `${f.evidence.planted.by} ${f.evidence.planted.runId}`).join(", ") || "-") + `; attribution checked ${ok.length}/${found.length}`);
}
db.close();
console.log(`${leaks}/${n} runs raised cross-request-leak; ${attributed}/${n} attributed to the run that sent the planting request; ${earlier} of them from an earlier run`);
' "$WORK" "$N"
