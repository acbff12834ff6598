#!/usr/bin/env bash
# The page of `interlingua serve` in a real browser: installs Debian's chromium and chromium-driver
# (when /usr/bin/chromium or /usr/bin/chromedriver is missing) and the `browser` extra (selenium),
# trains two tiny models, serves each on 127.0.0.1 and drives the page in headless Chromium
# (scripts/browser_test.py), saving screenshots in docs/screenshots/. Not run by CI: it installs a browser.
#   bash scripts/browser-test.sh [--work DIR] [--steps N] [--screenshots DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver
fi
[ -x .venv/bin/python ] || bash scripts/setup.sh
.venv/bin/python -c "import selenium" 2>/dev/null || .venv/bin/pip install -q -e ".[browser]"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec .venv/bin/python scripts/browser_test.py "$@"
