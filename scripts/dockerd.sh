#!/usr/bin/env bash
# Private, throw-away Docker daemon for tests and local experiments.
#
# Usage: scripts/dockerd.sh start|stop|status DIR SOCKET
#
#   start   run dockerd in the background with all its state under DIR
#           (DIR/data = --data-root, DIR/exec = --exec-root, DIR/pid, DIR/log)
#           listening on unix://SOCKET; waits (60 s max) until
#           `docker -H unix://SOCKET info` answers.
#   stop    kill it (pidfile DIR/pid) and wait until it is gone.
#   status  exit 0 and print "running PID" if it answers, else exit 1.
#
# Several instances may run at once (distinct DIR and SOCKET). Each one runs
# with --iptables=false --bridge=none (no NAT/bridge needed: test containers
# use network_mode=host) and gets its own containerd:
#   * If a system containerd is listening on /run/containerd/containerd.sock,
#     dockerd would share it; to keep instances apart we then start a
#     per-instance containerd (own --address, root and state under DIR).
#   * Otherwise dockerd starts its own managed containerd whose socket, root
#     and state live under DIR/exec and DIR/data, so instances do not clash.
# Needs root (dockerd does).
set -euo pipefail

usage() { echo "usage: $0 start|stop|status DIR SOCKET" >&2; exit 2; }
[ $# -eq 3 ] || usage
CMD=$1
DIR=$(mkdir -p "$2" && cd "$2" && pwd)
SOCKET=$3
case "$SOCKET" in /*) ;; *) SOCKET="$PWD/$SOCKET" ;; esac
PIDFILE="$DIR/pid"
LAUNCH_PIDFILE="$DIR/launch.pid"
LOG="$DIR/log"
CTRD_PIDFILE="$DIR/containerd.pid"
CTRD_SOCK="$DIR/containerd/containerd.sock"
TIMEOUT=${DOCKERD_TIMEOUT:-60}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
dpid() { cat "$PIDFILE" 2>/dev/null || cat "$LAUNCH_PIDFILE" 2>/dev/null; }
answers() { docker -H "unix://$SOCKET" info >/dev/null 2>&1; }

stop_pid() {  # stop_pid PIDFILE NAME
    local pidfile=$1 name=$2 pid i
    alive "$pidfile" || { rm -f "$pidfile"; return 0; }
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "$name ($pid) did not exit in 30 s, killing" >&2
        kill -9 "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$pidfile"
}

stop_dockerd() {
    if alive "$PIDFILE"; then
        stop_pid "$PIDFILE" dockerd
    fi
    stop_pid "$LAUNCH_PIDFILE" dockerd
    rm -f "$PIDFILE"
}

fail_start() {
    echo "dockerd did not come up on unix://$SOCKET ($1); log tail:" >&2
    tail -n 30 "$LOG" >&2 || true
    if [ -f "$DIR/containerd.log" ]; then
        echo "--- containerd log tail:" >&2
        tail -n 15 "$DIR/containerd.log" >&2
    fi
    stop_dockerd
    stop_pid "$CTRD_PIDFILE" containerd
    exit 1
}

case "$CMD" in
start)
    if { alive "$PIDFILE" || alive "$LAUNCH_PIDFILE"; } && answers; then
        echo "dockerd already running (pid $(dpid)) on unix://$SOCKET"
        exit 0
    fi
    command -v dockerd >/dev/null || { echo "dockerd not found (apt-get install docker.io)" >&2; exit 1; }
    mkdir -p "$DIR/data" "$DIR/exec" "$(dirname "$SOCKET")"
    stop_dockerd  # leftovers of an instance that does not answer
    rm -f "$SOCKET"
    extra=()
    if [ -S /run/containerd/containerd.sock ]; then
        # A system containerd exists; dockerd would attach to it. Give this
        # instance a containerd of its own instead.
        mkdir -p "$DIR/containerd"
        if ! alive "$CTRD_PIDFILE"; then
            rm -f "$CTRD_SOCK"
            # setsid: own session, so the caller's Ctrl-C does not reach it
            setsid containerd --address "$CTRD_SOCK" \
                --root "$DIR/data/containerd" --state "$DIR/exec/containerd" \
                > "$DIR/containerd.log" 2>&1 < /dev/null &
            echo $! > "$CTRD_PIDFILE"
            for ((i = 0; i < 50; i++)); do [ -S "$CTRD_SOCK" ] && break; sleep 0.2; done
        fi
        extra=(--containerd "$CTRD_SOCK")
    fi
    setsid dockerd --iptables=false --bridge=none \
        --data-root "$DIR/data" --exec-root "$DIR/exec" \
        -H "unix://$SOCKET" --pidfile "$PIDFILE" "${extra[@]}" \
        > "$LOG" 2>&1 < /dev/null &
    pid=$!
    # dockerd writes DIR/pid itself (and refuses to start if that file names a
    # live process), so remember the pid separately for `stop` during start-up.
    echo "$pid" > "$LAUNCH_PIDFILE"
    for ((i = 0; i < TIMEOUT * 5; i++)); do
        if answers; then
            echo "dockerd running (pid $pid) on unix://$SOCKET"
            exit 0
        fi
        kill -0 "$pid" 2>/dev/null || fail_start "dockerd exited"
        sleep 0.2
    done
    fail_start "no answer within ${TIMEOUT}s"
    ;;
stop)
    stop_dockerd
    stop_pid "$CTRD_PIDFILE" containerd
    # dockerd leaves mounts behind (data-root bind-mounted onto itself,
    # exec/netns/default); undo them, innermost first, so DIR can be deleted.
    awk -v d="$DIR/" 'index($2 "/", d) == 1 {print $2}' /proc/mounts | sort -ru |
        while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    rm -f "$SOCKET"
    echo "dockerd stopped ($DIR)"
    ;;
status)
    if { alive "$PIDFILE" || alive "$LAUNCH_PIDFILE"; } && answers; then
        echo "running $(dpid)"
    else
        echo "not running"
        exit 1
    fi
    ;;
*) usage ;;
esac
