#!/usr/bin/env bash
# Real-GPU validation of Schedulearn (docs/gpu-check.md): run on a machine with an NVIDIA GPU.
#
# Creates a fresh virtualenv, installs torch from PyPI (the CUDA build on Linux x86_64) and this
# project (`pip install -e .[test]`, or a wheel), then runs scripts/gpu_check.py: a real Jupyter
# server with the Schedulearn extension, a kernel, and real jobs. It prints one line per check,
# `PASS|FAIL|SKIP <name>: <detail>`, `TIME` lines with the launch figures, and a summary
# `N passed, N failed, N skipped`; the exit status is non-zero when any check failed.
# Without an NVIDIA GPU the GPU-only checks SKIP (with the reason) and the rest runs on
# virtual GPUs with jobs on the CPU.
#
# Usage: scripts/gpu-check.sh [--venv PATH] [--keep] [--wheel FILE] [--cpu] [CHECK OPTIONS]
#   --venv PATH    use this existing virtualenv as it is (nothing is installed into it)
#   --keep         keep the fresh virtualenv (its path is printed) instead of removing it
#   --wheel FILE   install this Schedulearn wheel (with its [test] extras) instead of the checkout
#   --cpu          no CUDA even where there is a GPU (virtual GPUs, jobs on the CPU): what CI runs
#   CHECK OPTIONS  passed to scripts/gpu_check.py (--help lists them: --virtual-gpus N,
#                  --repeat N, --train-steps N, --step-sleep S, --util-seconds S, --keep-work)
# Environment:
#   PYTHON         interpreter that creates the virtualenv (default: python3)
#   TORCH_SPEC     the torch requirement (default: torch==2.13.0, as scripts/setup.sh)
#   PIP_INDEX_URL  and other pip variables are honoured (e.g. a CUDA-specific PyTorch index)
set -euo pipefail
{  # braces: bash reads the whole script before running any of it

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"

VENV=""
KEEP=0
WHEEL=""
CHECK_ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --venv) [ $# -ge 2 ] || { echo "error: --venv: expected a path" >&2; exit 2; }
                VENV="$2"; shift 2 ;;
        --venv=*) VENV="${1#--venv=}"; shift ;;
        --keep) KEEP=1; shift ;;
        --wheel) [ $# -ge 2 ] || { echo "error: --wheel: expected a .whl file" >&2; exit 2; }
                 WHEEL="$2"; shift 2 ;;
        --wheel=*) WHEEL="${1#--wheel=}"; shift ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) CHECK_ARGS+=("$1"); shift ;;
    esac
done

if [ -n "$VENV" ]; then
    if [ ! -x "$VENV/bin/python" ]; then
        echo "error: --venv: $VENV/bin/python not found (expected an existing virtualenv)" >&2
        exit 2
    fi
    if [ "$KEEP" = 1 ] || [ -n "$WHEEL" ]; then
        echo "error: --keep and --wheel apply to a fresh virtualenv, not to --venv" >&2
        exit 2
    fi
    VPY="$VENV/bin/python"
    if ! "$VPY" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in
            ('schedulearn', 'schedulearn_jupyter', 'jupyter_client', 'ipykernel', 'torch')))" 2>/dev/null; then
        echo "error: --venv: $VENV lacks schedulearn[test] or torch (scripts/setup.sh installs both)" >&2
        exit 2
    fi
else
    if [ -n "$WHEEL" ] && [ ! -f "$WHEEL" ]; then
        echo "error: --wheel: $WHEEL not found" >&2
        exit 2
    fi
    VENV="$(mktemp -d "${TMPDIR:-/tmp}/schedulearn-gpu-check-venv.XXXXXX")"
    if [ "$KEEP" = 1 ]; then
        echo "==> virtualenv $VENV (kept: --keep)"
    else
        trap 'rm -rf "$VENV"' EXIT
    fi
    VPY="$VENV/bin/python"
    echo "==> creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
    "$VPY" -m pip install -q --upgrade pip
    echo "==> installing $TORCH_SPEC from PyPI"
    "$VPY" -m pip install -q "$TORCH_SPEC"
    echo "$TORCH_SPEC" > "$VENV/gpu-check-constraints.txt"
    if [ -n "$WHEEL" ]; then
        echo "==> installing $WHEEL[test]"
        "$VPY" -m pip install -q -c "$VENV/gpu-check-constraints.txt" "$(realpath "$WHEEL")[test]"
    else
        echo "==> installing schedulearn: pip install -e $REPO_ROOT[test]"
        "$VPY" -m pip install -q -c "$VENV/gpu-check-constraints.txt" -e "$REPO_ROOT[test]"
    fi
    "$VPY" -c "import torch; print('==> torch', torch.__version__, 'CUDA', torch.version.cuda, \
'available' if torch.cuda.is_available() else 'not available')"
fi

# The jobs run with the server's Python; make it and its scripts (torchrun) first on PATH.
export PATH="$VENV/bin:$PATH"
status=0
"$VPY" "$REPO_ROOT/scripts/gpu_check.py" "${CHECK_ARGS[@]}" || status=$?
exit "$status"
}
