#!/usr/bin/env bash
# Set up a virtual environment (.venv) with moeplan, its test extras and Megatron-Core (CPU torch),
# then run the whole test suite. Exits non-zero on any failure, and when no test ran.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
if [ "${MOEPLAN_SKIP_MCORE:-0}" != "1" ]; then
  # Optional extra, installed here so the Megatron-Core validation tests run (torch: the CPU build).
  .venv/bin/python -m pip install -q --disable-pip-version-check 'torch==2.13.0' \
    && .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[mcore]' \
    || echo "warning: megatron-core could not be installed; its tests will be skipped" >&2
fi
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: no tests were collected" >&2
  exit 1
fi
exit "$rc"
