#!/usr/bin/env bash
# Runs the main job (after scripts/setup.sh). Until the Jupyter server extension lands this is
# a simulation demo: the Philly trace replayed under every policy.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
trace=../shared/traces/philly.csv
[ -f "$trace" ] || trace=tests/data/small-trace.csv
exec schedulearn simulate "$trace" --policy all --cluster 8x8 --limit 2000
