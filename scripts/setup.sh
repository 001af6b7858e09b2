#!/usr/bin/env bash
# Schedulearn developer/test environment setup.
#
# Creates <repo>/.venv and installs everything the project and its tests need:
#   * system packages (apt): docker.io, postgresql, chromium, chromium-driver, openssh,
#     fonts-dejavu-core, the build tools Horovod needs (cmake, g++, make) and
#     Slurm with munge (slurmctld, slurmd, slurm-client, munge: scripts/slurm-dev.sh)
#   * torch==2.13.0 (CPU is fine) into the venv
#   * Horovod 0.28.1 built from source against that torch (wheel cached in
#     ~/.cache/schedulearn/wheels/ so other venvs/clones reuse it)
#   * the project itself: pip install -e ".[test]"
#
# Idempotent: every step is skipped when its result is already there, so a
# second run is a fast no-op.
#
# Usage: scripts/setup.sh [--no-system]
#   --no-system   skip apt (no root needed); the system packages must already
#                 be there or the dependent features will be unavailable.
# Environment:
#   PYTHON        interpreter used to create the venv (default: python3)
#   VENV          venv location (default: <repo>/.venv)
set -euo pipefail
{  # braces: bash reads the whole script before running any of it

TORCH_VERSION=2.13.0
HOROVOD_VERSION=0.28.1

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO_ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
WHEEL_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/schedulearn/wheels"

WITH_SYSTEM=1
for arg in "$@"; do
    case "$arg" in
        --no-system) WITH_SYSTEM=0 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { echo "==> $*"; }
skip() { echo "    $* (already done, skipping)"; }
T0=$SECONDS
took() { echo "    took $((SECONDS - $1))s"; }

# ---------------------------------------------------------------- apt
APT_PACKAGES=(docker.io postgresql chromium chromium-driver fonts-dejavu-core
              cmake g++ make
              slurmctld slurmd slurm-client munge  # scripts/slurm-dev.sh: a private 2-node Slurm
              openssh-server openssh-client)  # Horovod across Docker hosts (the test image's sshd)
# A Debian system python needs the venv module and headers (Horovod build).
if [ "$("$PYTHON" -c 'import sys; print(sys.base_prefix)')" = "/usr" ]; then
    APT_PACKAGES+=(python3-venv python3-dev)
fi

pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

if [ "$WITH_SYSTEM" = 1 ]; then
    missing=()
    for p in "${APT_PACKAGES[@]}"; do
        pkg_installed "$p" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        skip "apt packages present"
    else
        log "installing apt packages: ${missing[*]}"
        t=$SECONDS
        if [ "$(id -u)" = 0 ]; then
            SUDO=()
        elif command -v sudo >/dev/null; then
            SUDO=(sudo)
        else
            echo "error: need root (or sudo) for apt; rerun as root or with --no-system" >&2
            exit 1
        fi
        apt_log=$(mktemp /tmp/schedulearn-apt.XXXXXX.log)
        if ! { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q \
               && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
                  apt-get install -y -q --no-install-recommends "${missing[@]}"
             } > "$apt_log" 2>&1; then
            tail -n 30 "$apt_log" >&2
            echo "error: apt failed, full log in $apt_log" >&2
            exit 1
        fi
        rm -f "$apt_log"
        took $t
    fi
else
    log "skipping apt (--no-system)"
fi

# ---------------------------------------------------------------- venv
VPY="$VENV/bin/python"
if [ -x "$VPY" ] && "$VPY" -c 'import sys' 2>/dev/null; then
    skip "virtualenv $VENV"
else
    log "creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
    log "upgrading pip"
    "$VPY" -m pip install -q --upgrade pip setuptools wheel
fi

# Pin torch for every pip call below so that nothing (horovod's deps, the
# project's extras) ever pulls a different torch build.
CONSTRAINTS="$VENV/schedulearn-constraints.txt"
echo "torch==$TORCH_VERSION" > "$CONSTRAINTS"
pip_install() { "$VPY" -m pip install -q -c "$CONSTRAINTS" "$@"; }

# ---------------------------------------------------------------- torch
if "$VPY" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    skip "torch $TORCH_VERSION"
else
    log "installing torch==$TORCH_VERSION"
    t=$SECONDS
    pip_install "torch==$TORCH_VERSION"
    took $t
fi

# ---------------------------------------------------------------- horovod
# Horovod 0.28.1 (the newest release) does not compile against modern torch
# as released: its CMake files ask for C++14, torch headers need C++17.
# We patch that and build with Gloo only (no MPI, no TF, no MXNet).
HVD_CACHE="$WHEEL_CACHE/horovod-$HOROVOD_VERSION-torch$TORCH_VERSION"
if "$VPY" -c "import horovod.torch" 2>/dev/null; then
    skip "horovod $HOROVOD_VERSION"
else
    wheel=$(find "$HVD_CACHE" -maxdepth 1 -name "horovod-$HOROVOD_VERSION-*.whl" 2>/dev/null | head -n1 || true)
    if [ -n "$wheel" ]; then
        log "installing horovod from cached wheel $wheel"
    else
        log "building horovod $HOROVOD_VERSION from source (takes a few minutes)"
        t=$SECONDS
        # build-time requirements (no build isolation: it must see our torch)
        pip_install setuptools wheel
        build=$(mktemp -d)
        trap 'rm -rf "$build"' EXIT
        "$VPY" -m pip download -q --no-deps --no-binary :all: \
            -d "$build" "horovod==$HOROVOD_VERSION"
        tar -C "$build" -xzf "$build/horovod-$HOROVOD_VERSION.tar.gz"
        src="$build/horovod-$HOROVOD_VERSION"
        sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' \
            "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
        mkdir -p "$HVD_CACHE"
        if ! HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
             HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
             MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}" \
             "$VPY" -m pip wheel --no-build-isolation --no-deps \
                 -w "$build/wheel" "$src" > "$build/build.log" 2>&1; then
            tail -n 40 "$build/build.log" >&2
            cp "$build/build.log" /tmp/schedulearn-horovod-build.log
            echo "error: horovod build failed, log in /tmp/schedulearn-horovod-build.log" >&2
            exit 1
        fi
        wheel=$(find "$build/wheel" -name "horovod-$HOROVOD_VERSION-*.whl" | head -n1)
        cp "$wheel" "$HVD_CACHE/"
        wheel="$HVD_CACHE/$(basename "$wheel")"
        rm -rf "$build"
        trap - EXIT
        took $t
    fi
    pip_install "$wheel"
    "$VPY" -W ignore -c "import horovod.torch"
fi

# ---------------------------------------------------------------- project
STAMP="$VENV/.schedulearn-editable.stamp"
if [ ! -f "$REPO_ROOT/pyproject.toml" ]; then
    echo "warning: $REPO_ROOT/pyproject.toml not found; skipping project install" >&2
else
    want=$(sha256sum "$REPO_ROOT/pyproject.toml" | cut -d' ' -f1)
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
        && "$VPY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('schedulearn') is None)"; then
        skip "schedulearn (editable, [test])"
    else
        log "installing schedulearn: pip install -e .[test]"
        t=$SECONDS
        pip_install -e "${REPO_ROOT}[test]"
        echo "$want" > "$STAMP"
        took $t
    fi
fi

# ---------------------------------------------------------------- labextension (sidebar)
# Development build of labextension/ (npm workspace at the repo root) into
# schedulearn_jupyter/labextension, linked into the venv like `jupyter labextension develop`.
# Skipped when the build output is newer than every source file; a missing Node only warns.
LX_OUT="$REPO_ROOT/schedulearn_jupyter/labextension"
LX_LINK="$VENV/share/jupyter/labextensions/schedulearn-labextension"
if ! command -v npm >/dev/null; then
    echo "warning: npm not found; the JupyterLab sidebar is not built (apt-get install nodejs npm)" >&2
elif [ -f "$LX_OUT/package.json" ] && [ -d "$REPO_ROOT/labextension/lib" ] && [ -z "$(find \
        "$REPO_ROOT/labextension/src" "$REPO_ROOT/labextension/style" "$REPO_ROOT/labextension/schema" \
        "$REPO_ROOT/labextension/package.json" "$REPO_ROOT/package-lock.json" \
        -newer "$LX_OUT/package.json" -print -quit)" ]; then
    skip "labextension build"
else
    log "building the JupyterLab sidebar (npm ci, npm run build)"
    t=$SECONDS
    ( cd "$REPO_ROOT" && export PATH="$VENV/bin:$PATH" \
      && { [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ] \
           || npm ci --no-audit --no-fund --loglevel=error; } \
      && npm run --silent build )
    took $t
fi
if [ -f "$LX_OUT/package.json" ] && [ "$(readlink "$LX_LINK" 2>/dev/null)" != "$LX_OUT" ]; then
    mkdir -p "$(dirname "$LX_LINK")" && rm -rf "$LX_LINK" && ln -s "$LX_OUT" "$LX_LINK"
    log "linked $LX_LINK -> $LX_OUT"
fi

log "done in $((SECONDS - T0))s; activate with: source $VENV/bin/activate"
exit 0
}
