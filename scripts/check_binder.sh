#!/usr/bin/env bash
# Exercises binder/ the way repo2docker does, without Docker: a fresh virtualenv gets
# binder/requirements.txt, then binder/postBuild runs in a clean copy of this working tree (no
# node_modules, no built extension: npm installs and builds from scratch). Then it checks that
#   * `jupyter labextension list` shows schedulearn-labextension enabled and OK,
#   * `jupyter server extension list` shows schedulearn_jupyter enabled and OK,
#   * a started `jupyter lab` serves 4 virtual GPUs on /schedulearn/api/gpus, the sidebar's
#     bundle, and examples/quickstart.ipynb as its default page.
# Usage: scripts/check_binder.sh [--keep]   (PYTHON=python3.11 picks the interpreter)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d /tmp/schedulearn-binder.XXXXXX)"
KEEP=0; [ "${1:-}" = "--keep" ] && KEEP=1
SERVER_PID=""
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    if [ "$KEEP" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
fail() { echo "check_binder: FAIL: $*" >&2; exit 1; }
T0=$SECONDS
step() { echo "==> [$((SECONDS - T0))s] $*"; }

step "copying the working tree (tracked and untracked, not ignored) to $WORK/repo"
mkdir -p "$WORK/repo"
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard \
    | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' \
    | tar --null -T - -cf -) | tar -C "$WORK/repo" -xf -
[ ! -e "$WORK/repo/node_modules" ] && [ ! -e "$WORK/repo/schedulearn_jupyter/labextension" ] \
    || fail "the copy is not clean"

step "fresh virtualenv + binder/requirements.txt"
"$PYTHON" -m venv "$WORK/venv"
export PATH="$WORK/venv/bin:$PATH"
export JUPYTER_CONFIG_DIR="$WORK/home/.jupyter" JUPYTER_DATA_DIR="$WORK/home/data" \
       JUPYTER_RUNTIME_DIR="$WORK/home/runtime" JUPYTERLAB_SETTINGS_DIR="$WORK/home/settings" \
       JUPYTERLAB_WORKSPACES_DIR="$WORK/home/workspaces"
unset SCHEDULEARN_VIRTUAL_GPUS SCHEDULEARN_URL SCHEDULEARN_TOKEN PYTHONPATH || true
pip install -q --upgrade pip
pip install -q -r "$WORK/repo/binder/requirements.txt"

step "binder/postBuild"
(cd "$WORK/repo" && bash binder/postBuild)

step "jupyter labextension list / jupyter server extension list"
nocolor() { sed 's/\x1b\[[0-9;]*m//g'; }
lx="$(jupyter labextension list 2>&1 | nocolor)"; echo "$lx" | grep -i schedulearn || true
echo "$lx" | grep -E "schedulearn-labextension v[0-9.]+ +enabled +OK" >/dev/null \
    || fail "schedulearn-labextension is not enabled and OK: $lx"
sx="$(jupyter server extension list 2>&1 | nocolor)"; echo "$sx" | grep -i "schedulearn_jupyter" || true
echo "$sx" | grep -E "schedulearn_jupyter +enabled" >/dev/null || fail "schedulearn_jupyter not enabled: $sx"
echo "$sx" | grep -E "schedulearn_jupyter +[0-9][^ ]* +OK" >/dev/null \
    || fail "schedulearn_jupyter does not import OK: $sx"

step "starting jupyter lab from the postBuild environment"
PORT="$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
TOKEN=binder-check
mkdir -p "$WORK/home"
(cd "$WORK/repo" && exec jupyter lab --no-browser --allow-root --ip=127.0.0.1 --port="$PORT" \
    --IdentityProvider.token="$TOKEN" --ServerApp.open_browser=False \
    --SchedulearnApp.job_root="$WORK/jobs" --SchedulearnApp.store_url="sqlite:///$WORK/jobs.db" \
    > "$WORK/lab.log" 2>&1) &
SERVER_PID=$!
URL="http://127.0.0.1:$PORT"
get() { curl -fsS -H "Authorization: token $TOKEN" "$URL/$1"; }
for _ in $(seq 1 150); do get "api/status" >/dev/null 2>&1 && break; sleep 0.2; done
get "api/status" >/dev/null || { tail -n 40 "$WORK/lab.log" >&2; fail "jupyter lab did not start"; }
gpus="$(get schedulearn/api/gpus)" || fail "GET schedulearn/api/gpus failed"
n="$(echo "$gpus" | python -c 'import json,sys; d=json.load(sys.stdin); print(sum(len(n["gpus"]) for n in d["nodes"] if n["virtual"]))')"
[ "$n" = 4 ] || fail "expected 4 virtual GPUs, got $n: $gpus"
get "lab/extensions/schedulearn-labextension/static/style.js" >/dev/null || fail "sidebar bundle not served"
loc="$(curl -s -o /dev/null -w '%{redirect_url}' "$URL/?token=$TOKEN")"
case "$loc" in *lab/tree/examples/quickstart.ipynb*) ;; *) fail "default page is '$loc', not the quick start";; esac
get "api/contents/examples/quickstart.ipynb?content=0" >/dev/null || fail "quickstart.ipynb not in the root"
step "OK: binder environment builds, extensions enabled, 4 virtual GPUs, quick start opens"
