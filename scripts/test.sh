#!/usr/bin/env bash
# Runs every test (after scripts/setup.sh): lint, then the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
echo "==> ruff"
ruff check .
echo "==> pytest"
# the slowest tests are listed at the end: the suite's time is watched against CI's 90 minutes
python -m pytest -ra --durations=25 "$@"
