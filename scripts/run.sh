#!/usr/bin/env bash
# The main job (after scripts/setup.sh): JupyterLab with Schedulearn, the embedded SQLite store,
# and this machine's GPUs -- or 4 virtual GPUs where NVML finds none
# (override: SCHEDULEARN_VIRTUAL_GPUS=N make run). Extra arguments go to `jupyter lab`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export SCHEDULEARN_VIRTUAL_GPUS="${SCHEDULEARN_VIRTUAL_GPUS:-4}"
args=(--ServerApp.root_dir="$PWD" --ip="${JUPYTER_IP:-127.0.0.1}" --port="${JUPYTER_PORT:-8888}")
[ "$(id -u)" = 0 ] && args+=(--allow-root)
[ -n "${CI:-}${NO_BROWSER:-}" ] && args+=(--no-browser)
# The URL Jupyter prints opens the quickstart notebook (not the Launcher).
args+=(--LabApp.default_url=/lab/tree/examples/quickstart.ipynb)
echo "==> JupyterLab with Schedulearn: open the URL below (the quickstart notebook and the Schedulearn sidebar)"
exec jupyter lab "${args[@]}" "$@"
