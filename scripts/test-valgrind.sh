#!/usr/bin/env bash
# valgrind memcheck of the C ABI test program (usage: scripts/test-valgrind.sh [build dir],
# default build/, as built by `npm run build`), on the CPU and against the host emulation of
# the CUDA library: any memory error or a definite or indirect leak fails. Memory still
# reachable at exit (the thread pool and the lazily loaded CUDA state live for the whole
# process, by design), and the thread-local storage of its detached workers ("possibly
# lost"), are reported but are not errors.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
program="$build/tirl_c_abi_test"
emulation="$PWD/$build/test/libtirl_host_backend.so"
[ -x "$program" ] && [ -f "$emulation" ] ||
  { echo "test-valgrind: $program or $emulation is not built (npm run build)" >&2; exit 1; }
memcheck() {
  valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible \
    --errors-for-leak-kinds=definite,indirect --track-origins=yes --error-exitcode=99 "$@"
}
echo "test-valgrind: $program"
memcheck "$program"
# Again with the host emulation of the CUDA library: the device path of the core too.
echo "test-valgrind: $program with TIRL_CUDA_LIBRARY=$emulation"
TIRL_CUDA_LIBRARY="$emulation" memcheck "$program"
