#!/usr/bin/env bash
# Runs every test (after scripts/setup.sh): lint, then the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
echo "==> ruff"
ruff check .
echo "==> pytest"
python -m pytest -ra "$@"
