#!/usr/bin/env bash
# `bash bench/serve-soak.sh MINUTES [OUT]`: a soak of `kvcanary serve` as the embedded demo runs it (the
# bundled engine twice, incident and remediated presets at 1/64 scale, every scenario every 30 s, two probes
# at once), but on a free port and a scratch store and installation home so it disturbs nothing. Every 30 s
# it samples the serve process's RSS (VmRSS), the store's size (file + WAL) and its plantings rows; at the
# end it prints the samples and the RSS growth over the last two thirds. Writes OUT (default
# bench/serve-soak.json). Run it niced: `nice -n 10 bash bench/serve-soak.sh 30`.
set -euo pipefail
MINUTES=${1:?usage: bench/serve-soak.sh MINUTES [OUT]}
OUT=${2:-bench/serve-soak.json}
cd "$(dirname "$0")/.."
WORK=$(mktemp -d /tmp/kvc-soak-XXXXXX)
export KVCANARY_HOME="$WORK/home"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

start_engine() { # preset, log file: starts it in this shell so cleanup can stop it
  node bin/kvcanary.js engine --preset "$1" --scale 64 --port 0 >"$2" 2>&1 &
  pids+=($!)
}
engine_url() { # log file -> prints URL once the engine listens
  for _ in $(seq 1 100); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$1" | head -1 || true)
    [ -n "$url" ] && { echo "$url"; return; }
    sleep 0.2
  done
  echo "engine ($1) did not start" >&2; exit 1
}
start_engine incident "$WORK/incident.log"
start_engine remediated "$WORK/remediated.log"
INCIDENT=$(engine_url "$WORK/incident.log")
REMEDIATED=$(engine_url "$WORK/remediated.log")
cat >"$WORK/soak.yaml" <<EOF
listen: 127.0.0.1:0
store: { path: $WORK/soak.sqlite, retention: 1d }
schedule: { interval: 30s, timeout: 25s, jitter: 2s, scenarios: every_cycle }
budget: { tokens_per_hour: 50000000 }
concurrency: { global: 2, per_target: 1 }
log: { level: warn }
targets:
  - name: engine-incident
    base_url: $INCIDENT
  - name: engine-remediated
    base_url: $REMEDIATED
EOF
node bin/kvcanary.js serve --config "$WORK/soak.yaml" >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE=$!
pids+=($SERVE)
START=$(date +%s)
END=$((START + MINUTES * 60))
SAMPLES="$WORK/samples.tsv"
: >"$SAMPLES"
while [ "$(date +%s)" -lt "$END" ]; do
  sleep 30
  kill -0 "$SERVE" 2>/dev/null || { echo "serve exited early" >&2; cat "$WORK/serve.err" >&2; exit 1; }
  rss=$(awk '/VmRSS/ {print $2}' /proc/$SERVE/status)
  db=$(( $(stat -c %s "$WORK/soak.sqlite") + $(stat -c %s "$WORK/soak.sqlite-wal" 2>/dev/null || echo 0) ))
  rows=$(node -e "const D=require('better-sqlite3');const d=new D(process.argv[1],{readonly:true});const p=d.prepare('select count(*) n, coalesce(sum(marker_count),0) m from plantings').get();const r=d.prepare('select count(*) n from runs').get();console.log(p.n+'\t'+p.m+'\t'+r.n)" "$WORK/soak.sqlite")
  findings=$(grep -c '^FINDING' "$WORK/serve.out" || true)
  printf '%s\t%s\t%s\t%s\t%s\n' "$(( $(date +%s) - START ))" "$rss" "$db" "$rows" "$findings" | tee -a "$SAMPLES"
done
node -e '
const fs = require("fs");
const rows = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map((l) => l.split("\t").map(Number));
const samples = rows.map(([s, rssKb, dbBytes, plantings, markers, runs, findings]) => ({ s, rssMb: +(rssKb / 1024).toFixed(1), dbMb: +(dbBytes / 1048576).toFixed(2), plantings, markersDerived: markers, runs, findings }));
const third = samples.find((x) => x.s >= samples[samples.length - 1].s / 3) ?? samples[0];
const last = samples[samples.length - 1];
const tail = samples.filter((x) => x.s >= third.s);
const out = {
  command: `bash bench/serve-soak.sh ${process.argv[3]}`,
  minutes: +(last.s / 60).toFixed(1),
  rssGrowthLastTwoThirdsMb: +(last.rssMb - third.rssMb).toFixed(1),
  rssRangeLastTwoThirdsMb: [Math.min(...tail.map((x) => x.rssMb)), Math.max(...tail.map((x) => x.rssMb))],
  dbGrowthMbPerMinute: +((last.dbMb - samples[0].dbMb) / ((last.s - samples[0].s) / 60 || 1)).toFixed(3),
  samples,
};
fs.writeFileSync(process.argv[2], JSON.stringify(out, null, 2) + "\n");
console.log(JSON.stringify({ minutes: out.minutes, rssGrowthLastTwoThirdsMb: out.rssGrowthLastTwoThirdsMb, rssRangeLastTwoThirdsMb: out.rssRangeLastTwoThirdsMb, dbGrowthMbPerMinute: out.dbGrowthMbPerMinute, last }));
' "$SAMPLES" "$OUT" "$MINUTES"
