#!/usr/bin/env bash
# The native tests and the Node test suite under AddressSanitizer and
# UndefinedBehaviorSanitizer (usage: scripts/test-sanitize.sh [test files...]).
#
# Builds every C and C++ target with TIRL_SANITIZE into build-sanitize/ (CPU only: the CUDA
# library is not instrumented), runs ctest there, then the suite against that addon
# (TIRL_NATIVE_DIR). Node itself is not instrumented, so the sanitizer runtimes are
# preloaded into it and every process it starts; leak detection is on for the native tests
# only (Node's own allocations are not ours to judge). Any report aborts the process, so the
# test that caused it fails and so does this script.
set -euo pipefail
cd "$(dirname "$0")/.."

out=build-sanitize
sanitizers="address;undefined"

npx cmake-js compile --out "$out" --CDTIRL_SANITIZE="$sanitizers" --CDTIRL_CUDA=OFF \
  --CDTIRL_BUILD_BENCHMARKS=OFF
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1 \
  ctest --test-dir "$out" --output-on-failure

npm run build:ts
cxx=${CXX:-c++}
runtimes="$($cxx -print-file-name=libasan.so) $($cxx -print-file-name=libubsan.so)"
for runtime in $runtimes; do
  [ -f "$runtime" ] || { echo "test-sanitize: no sanitizer runtime at $runtime" >&2; exit 1; }
done

# Not run here, each for a reason:
#  - package.test.js packs and installs the package, which loads the prebuild, not this build;
excluded=(dist/test/package.test.js)
if [ $# -gt 0 ]; then
  files=("$@")
else
  files=()
  for file in dist/test/*.test.js; do
    [[ " ${excluded[*]} " == *" $file "* ]] || files+=("$file")
  done
fi

LD_PRELOAD="$runtimes" TIRL_NATIVE_DIR="$out/Release" \
  ASAN_OPTIONS=detect_leaks=0 \
  node --test "${files[@]}"
