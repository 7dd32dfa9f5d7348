#!/usr/bin/env bash
# Makes a fresh machine ready for kvcanary's whole test suite (README: "npm run test:all"):
#   - Debian packages the end-to-end tests start for real: prometheus (and promtool), prometheus-alertmanager
#     (and amtool), chromium (the status page in a real browser), bubblewrap (bwrap: stands in for the
#     container runtime in test/e2e/confined-serve.test.ts). Installed with apt-get when run as root;
#     otherwise one line says exactly what to install, and the script fails.
#   - llama.cpp's llama-server, built once from vendor/llama.cpp into $KVCANARY_CACHE/llama.cpp
#     (default ~/.cache/kvcanary), a tiny random-weight model and the copying model (copier.gguf) beside it,
#     and the fault-injection build of the same snapshot in faults/ (vendor/llama.cpp/faults/).
# Idempotent: what is already there is kept. Progress lines go to stderr.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${KVCANARY_CACHE:-$HOME/.cache/kvcanary}
say() { printf 'setup: %s\n' "$*" >&2; }

# --- Debian packages -----------------------------------------------------------------------------------
declare -A provides=([prometheus]=prometheus [promtool]=prometheus [prometheus-alertmanager]=prometheus-alertmanager
  [amtool]=prometheus-alertmanager [chromium]=chromium [cmake]=cmake [g++]=g++ [patch]=patch [bwrap]=bubblewrap)
missing=()
for cmd in "${!provides[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${provides[$cmd]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  if [ "$(id -u)" -ne 0 ]; then
    say "missing Debian packages; install them and re-run: sudo apt-get install -y --no-install-recommends $pkgs"
    exit 1
  fi
  say "installing Debian packages: $pkgs(a minute or two)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi
# The packages start system services on :9090/:9093; the tests start their own on free ports.
for svc in prometheus prometheus-alertmanager; do
  systemctl stop "$svc" >/dev/null 2>&1 || service "$svc" stop >/dev/null 2>&1 || true
done

# --- llama.cpp -------------------------------------------------------------------------------------------
llama="$cache/llama.cpp"
if [ ! -x "$llama/bin/llama-server" ]; then
  say "building llama-server from vendor/llama.cpp into $llama (once; about 8 minutes on 2 cores)"
fi
"$repo/vendor/llama.cpp/build-llama-server.sh" "$llama" >/dev/null
vocab="$llama/models/ggml-vocab-llama-spm.gguf"
[ -s "$vocab" ] || tar -xJf "$repo"/vendor/llama.cpp/llama.cpp-*.tar.xz -C "$llama" ./models/ggml-vocab-llama-spm.gguf
if [ ! -s "$llama/tiny.gguf" ]; then
  say "writing the tiny random-weight model $llama/tiny.gguf"
  node "$repo/vendor/llama.cpp/make-tiny-model.mjs" "$vocab" "$llama/tiny.gguf" >/dev/null
fi
# The copying model is rewritten whenever its script changes (the stamp is the script's hash).
copier_stamp=$(cat "$repo/vendor/llama.cpp/make-copier-model.mjs" "$repo/vendor/llama.cpp/gguf.mjs" | sha256sum | cut -c1-16)
if [ ! -s "$llama/copier.gguf" ] || [ "$(cat "$llama/copier.stamp" 2>/dev/null)" != "$copier_stamp" ]; then
  say "writing the copying model $llama/copier.gguf"
  node "$repo/vendor/llama.cpp/make-copier-model.mjs" "$vocab" "$llama/copier.gguf" >/dev/null
  echo "$copier_stamp" >"$llama/copier.stamp"
fi
# The fault-injection build: the same snapshot with vendor/llama.cpp/faults/*.patch, reusing the build above.
if [ ! -x "$llama/faults/bin/llama-server" ]; then
  say "building the fault-injection llama-server into $llama/faults (reuses the pristine build; a minute or two)"
fi
"$repo/vendor/llama.cpp/faults/build-faults.sh" "$llama" >/dev/null
say "ready: llama-server at $llama/bin/llama-server, fault build at $llama/faults/bin/llama-server"
