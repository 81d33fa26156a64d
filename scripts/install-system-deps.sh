#!/usr/bin/env bash
# Installs the Debian packages the tests and benchmarks need, as listed one per line in
# scripts/system-deps/*.txt (the sandbox needs bubblewrap; the benchmark's PyTorch peer
# needs python3-torch). Safe to run again: apt skips what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

shopt -s nullglob
lists=(scripts/system-deps/*.txt)
[ ${#lists[@]} -eq 0 ] && exit 0
packages=$(grep -hv '^\s*#' "${lists[@]}" | awk 'NF' | sort -u | tr '\n' ' ')
[ -z "$packages" ] && exit 0

missing=()
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "system packages: all present ($packages)"; exit 0; }

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "system packages: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
