#!/usr/bin/env bash
# Install Debian's chromium for the headless HTML-report test (tests/unit/test_plots_report.py) and the
# `moeplan serve` browser test (tests/web/test_serve_browser.py, Playwright with executable_path).
# fonts-dejavu-core: the font the inline SVG plots name (recommends are skipped to keep it small).
# Idempotent: does nothing when a chromium binary is already on PATH. Never fails the build:
# without root or without network it prints a warning and exits 0 (the test then skips).
set -u
for bin in chromium chromium-browser; do
  if command -v "$bin" >/dev/null 2>&1; then
    echo "install-chromium: $(command -v "$bin") already present"
    exit 0
  fi
done
if [ "${EUID:-$(id -u)}" -ne 0 ]; then
  echo "warning: install-chromium: not root, cannot apt-get install chromium; the headless report test will be skipped" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "warning: install-chromium: apt-get not found; the headless report test will be skipped" >&2
  exit 0
fi
if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; then
  echo "install-chromium: installed $(command -v chromium)"
else
  echo "warning: install-chromium: apt-get install chromium failed; the headless report test will be skipped" >&2
fi
exit 0
