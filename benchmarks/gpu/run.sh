#!/usr/bin/env bash
# GPU proof for tirl, for a machine with an NVIDIA GPU, nvcc and PyTorch; no Node.js and no
# network needed. Builds libtirl, libtirl_cuda and tirl_gpu_check with CMake, checks every
# op on the GPU against the CPU kernels (ctest -L gpu: one test per op), times each against
# PyTorch eager CUDA and a device-to-device copy, and writes gpu_check.json, results.json
# and results.md to $OUT.
#
#   bash benchmarks/gpu/run.sh [--build-only] [--quick]
#
# Environment: OUT (default ./gpu-results), BUILD_DIR (default build-gpu),
# CUDA_ARCHS (default: the GPU's own, else 80;90), JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/../.."

build_only=0
quick=()
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --quick) quick=(--quick) ;;
    *) echo "usage: $0 [--build-only] [--quick]" >&2; exit 64 ;;
  esac
done

OUT=${OUT:-$PWD/gpu-results}
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
if [[ -z "${CUDA_ARCHS:-}" ]]; then
  # The GPU's compute capability, e.g. "9.0" -> 90; a build machine without one gets 80;90.
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)
  CUDA_ARCHS=${cap:-80;90}
fi
mkdir -p "$OUT"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
echo "== configure ($BUILD_DIR, CUDA architectures $CUDA_ARCHS)"
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTIRL_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS" -DTIRL_BUILD_TESTS=ON -DTIRL_BUILD_GPU_CHECK=ON
echo "== build"
cmake --build "$BUILD_DIR" --parallel "$JOBS" --target tirl_shared tirl_cuda tirl_gpu_check tirl_c_abi_test
if [[ $build_only == 1 ]]; then
  echo "built: $(ls "$BUILD_DIR"/libtirl.so "$BUILD_DIR"/libtirl_cuda.so "$BUILD_DIR"/tirl_gpu_check)"
  exit 0
fi

echo "== GPU"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
status=0
echo "== C ABI test (CPU and CUDA)"
"$BUILD_DIR/tirl_c_abi_test" | tee "$OUT/c_abi_test.txt" || status=$?
echo "== GPU vs CPU checks, one ctest test per op (native/test/gpu/<op>.cc)"
ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure | tee "$OUT/gpu_tests.txt" || status=$?
echo "== GPU vs CPU checks and tirl timings"
check_status=0
"$BUILD_DIR/tirl_gpu_check" --json "$OUT/gpu_check.json" "${quick[@]}" | tee "$OUT/gpu_check.txt" || check_status=$?
[[ $check_status != 0 ]] && status=$check_status
if [[ ! -s "$OUT/gpu_check.json" ]]; then
  echo "tirl_gpu_check wrote no results (exit status $check_status)" >&2
  exit 1
fi
echo "== PyTorch eager peers, results table"
python3 benchmarks/peers/torch_peers.py --gpu --tirl "$OUT/gpu_check.json" --out "$OUT" "${quick[@]}"
exit "$status"
