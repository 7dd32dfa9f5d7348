#!/usr/bin/env bash
# Builds the fault-injection llama-server: the same pinned snapshot with the patches beside this script.
#   build-faults.sh LLAMA_DIR  ->  LLAMA_DIR/faults/bin/llama-server
# LLAMA_DIR holds the pristine build made by ../build-llama-server.sh (its src/ and build/). That build is
# reused: its tree is copied with every path in it moved to LLAMA_DIR/faults/, the patches are applied to
# the copied sources, and make recompiles only the patched files (a minute or two instead of ~8). Should the
# reused tree not build, a clean build of the patched sources follows.
# Idempotent: a finished build for the same snapshot and patches is reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
llama=$(cd "${1:?usage: build-faults.sh LLAMA_DIR}" && pwd)
out="$llama/faults"
[ -x "$llama/bin/llama-server" ] && [ -d "$llama/src" ] && [ -d "$llama/build" ] \
  || { echo "build-faults.sh: no pristine build in $llama (run build-llama-server.sh first)" >&2; exit 1; }
stamp=$( (cat "$llama/.snapshot"; cat "$here"/*.patch) | sha256sum | cut -c1-16)
if [ -x "$out/bin/llama-server" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$out/bin/llama-server"
  exit 0
fi
rm -rf "$out"
mkdir -p "$out"
cp -a "$llama/src" "$out/src"
for p in "$here"/*.patch; do
  patch -s --no-backup-if-mismatch -p1 -d "$out/src" <"$p" || { echo "build-faults.sh: $(basename "$p") does not apply" >&2; exit 1; }
done

reuse() {
  cp -a "$llama/build" "$out/build"
  # Move every absolute path of the copied tree to the copy, keeping each file's modification time so make
  # sees the tree as up to date except for the patched sources.
  grep -rlIZ -e "$llama/src" -e "$llama/build" "$out/build" | while IFS= read -r -d '' f; do
    rel=${f#"$out/build/"}
    sed -i -e "s#$llama/src\\([/\"; ]\\|\$\\)#$out/src\\1#g" -e "s#$llama/build\\([/\"; :]\\|\$\\)#$out/build\\1#g" "$f"
    touch -r "$llama/build/$rel" "$f"
  done
  cmake --build "$out/build" -j"$(nproc)" --target llama-server >"$out/build.log" 2>&1
}
clean() {
  rm -rf "$out/build"
  cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$out/configure.log" 2>&1 \
    || { tail -30 "$out/configure.log" >&2; exit 1; }
  cmake --build "$out/build" -j"$(nproc)" --target llama-server >"$out/build.log" 2>&1 \
    || { tail -30 "$out/build.log" >&2; exit 1; }
}
if ! reuse; then
  echo "build-faults.sh: the reused tree did not build (tail of $out/build.log below); building the patched sources from scratch" >&2
  tail -5 "$out/build.log" >&2
  clean
fi
ln -sfn "$out/build/bin" "$out/bin"
echo "$stamp" >"$out/.stamp"
echo "$out/bin/llama-server"
