#!/usr/bin/env bash
# The Python package's tests (python/tests, pytest), run by `npm test` after the JS suite.
# Interpreter: $TIRL_PYTHON, else the first python3 that imports torch and pytest (Debian's
# python3-torch and python3-pytest live under /usr/bin/python3, which a pyenv or venv
# python3 on PATH may not see). TIRL_SKIP_PYTHON=1 skips them, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${TIRL_SKIP_PYTHON:-0}" = 1 ]; then
  echo "python tests: skipped (TIRL_SKIP_PYTHON=1)"
  exit 0
fi
candidates=("${TIRL_PYTHON:-}" python3 /usr/bin/python3)
for python in "${candidates[@]}"; do
  [ -n "$python" ] || continue
  if "$python" -c 'import torch, pytest' 2>/dev/null; then
    exec env OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" PYTHONDONTWRITEBYTECODE=1 \
      "$python" -m pytest -q -p no:cacheprovider python/tests "$@"
  fi
done
echo "python tests: no python3 with torch and pytest (apt-get install python3-torch python3-pytest," \
  "or set TIRL_PYTHON; TIRL_SKIP_PYTHON=1 skips them)" >&2
exit 1
