#!/usr/bin/env bash
# libFuzzer on the C ABI (usage: scripts/fuzz-native.sh [seconds per harness, default 60]).
#
# Builds each harness of native/fuzz/ with clang, -fsanitize=fuzzer,address,undefined into
# build-fuzz/ (CPU only) and runs it for the given time, one process, keeping what it finds
# in build-fuzz/corpus/<harness>/ for the next run. A crash, a sanitizer report, a leak or
# a broken contract stops the run with the input saved as build-fuzz/crash-*; this script
# then fails. Debian: the packages clang and libclang-rt-14-dev
# (scripts/system-deps/native-checks.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
out=build-fuzz

mkdir -p "$out"
CC=clang CXX=clang++ cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=Release \
  -DTIRL_FUZZ=ON -DTIRL_SANITIZE="address;undefined" -DTIRL_CUDA=OFF \
  -DTIRL_BUILD_TESTS=OFF -DTIRL_BUILD_BENCHMARKS=OFF > "$out/configure.log" 2>&1 ||
  { cat "$out/configure.log"; exit 1; }
cmake --build "$out" -j 2

export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for source in native/fuzz/*.cc; do
  name=$(basename "$source" .cc)
  mkdir -p "$out/corpus/$name"
  echo "fuzz-native: $name for ${seconds}s"
  # -timeout: a call that hangs for 20 s is a finding too.
  "$out/tirl_$name" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$out/" "$out/corpus/$name"
done
