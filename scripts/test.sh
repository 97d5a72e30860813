#!/usr/bin/env bash
# Set up a virtual environment (.venv) with moeplan, its test extras, the MCP SDK (the mcp extra), the serve
# extra (moeplan serve), Megatron-Core (CPU torch) and Debian's chromium, then run the whole test suite. Exits
# non-zero on any failure and when no test ran. With MOEPLAN_STRICT=1 (what .ci/run sets) a missing
# Megatron-Core, MCP SDK, serve extra or chromium is an error, so the tests that need them run instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
"${PIP[@]}" -e '.[test,mcp]'
# `moeplan serve` and its tests (Starlette's test client, Playwright driving Debian's chromium: no browser download)
"${PIP[@]}" -e '.[test,mcp,serve,serve-test]' \
  || echo "warning: the serve extra could not be installed; the moeplan serve tests will be skipped" >&2
# Optional extra for the Megatron-Core validation tests; torch 2.13.0 is the CPU build on this disk.
"${PIP[@]}" 'torch==2.13.0' && "${PIP[@]}" -e '.[mcore]' \
  || echo "warning: megatron-core could not be installed; its tests will be skipped" >&2
# Megatron Bridge 0.3.1 / 0.6.2 environments for the Bridge contract tests, cached outside the clone
# (${MOEPLAN_ENV_CACHE:-$HOME/.cache/moeplan}); built once per machine, reused after.
if ! bash scripts/bridge_envs.sh; then
  if [ "${MOEPLAN_STRICT:-0}" = "1" ]; then echo "error: the Bridge environments could not be built" >&2; exit 1; fi
  echo "warning: the Bridge environments could not be built; their contract tests will be skipped" >&2
fi
# Debian's chromium for the headless HTML-report test.
bash .ci/install-chromium.sh
if [ "${MOEPLAN_STRICT:-0}" = "1" ]; then
  .venv/bin/python -c "import megatron.core" || { echo "error: megatron-core is not importable" >&2; exit 1; }
  .venv/bin/python -c "import mcp.server.mcpserver" || { echo "error: the MCP SDK (mcp) is not importable" >&2; exit 1; }
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
    || { echo "error: chromium is not installed" >&2; exit 1; }
  .venv/bin/python -c "import starlette, uvicorn, multipart, httpx, playwright.sync_api" \
    || { echo "error: the serve extra (moeplan[serve,serve-test]) is not importable" >&2; exit 1; }
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
