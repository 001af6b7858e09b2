#!/usr/bin/env bash
# A private two-node Slurm cluster on this machine, with fake GPUs, for development and tests.
#
# Usage: scripts/slurm-dev.sh up|down|status
#
#   up      start munged, slurmctld and one slurmd per node (idempotent: a running cluster is
#           left as it is), wait until every node is idle, and print on stdout the environment a
#           client needs, as eval-able lines:
#               eval "$(scripts/slurm-dev.sh up)"; sinfo
#   down    cancel every job, wait for them to end (job processes outlive killed daemons), then
#           stop the daemons. The directory is kept (logs) and reused by the next `up`.
#   status  print the daemons' pids and `sinfo`; exit 0 when the cluster answers, else 1.
#
# Environment:
#   SLURM_DEV_DIR    where everything lives (default: <repo>/.slurm-dev)
#   SLURM_DEV_NODES  number of nodes, named n1, n2, ... (default 2)
#   SLURM_DEV_GPUS   fake GPUs per node (default 4)
#   SLURM_DEV_CPUS   CPUs each node declares (default 8; more than the machine has is fine)
#
# The cluster: partition `debug` (the default) over all nodes; GPUs declared as gres `gpu`
# backed by character devices made with mknod (Slurm sets CUDA_VISIBLE_DEVICES from them);
# munge authentication with a private munged and key, so that jobs submitted by root with
# `--uid` run as other OS accounts exactly as on a real cluster. Needs root and the Debian
# packages slurmctld, slurmd, slurm-client and munge (scripts/setup.sh installs them; `up` runs
# it when they are missing). See docs/slurm.md.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
D="${SLURM_DEV_DIR:-$REPO_ROOT/.slurm-dev}"
NODES="${SLURM_DEV_NODES:-2}"
GPUS="${SLURM_DEV_GPUS:-4}"
CPUS="${SLURM_DEV_CPUS:-8}"
TIMEOUT=60

usage() { sed -n '2,15p' "$0" >&2; exit 2; }
[ $# -eq 1 ] || usage
say() { echo "slurm-dev: $*" >&2; }
die() { say "error: $*"; exit 1; }

node_names() { local i; for ((i = 1; i <= NODES; i++)); do echo "n$i"; done; }
pid_of() { [ -f "$1" ] && cat "$1" 2>/dev/null || true; }
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
answers() { [ -f "$D/slurm.conf" ] && SLURM_CONF="$D/slurm.conf" timeout 10 sinfo -h >/dev/null 2>&1; }
all_up() {
    alive "$D/run/munged.pid" && alive "$D/run/slurmctld.pid" || return 1
    local n; for n in $(node_names); do alive "$D/run/slurmd-$n.pid" || return 1; done
    answers
}
exports() {
    echo "export SLURM_CONF=$D/slurm.conf"
    echo "export SLURM_DEV_DIR=$D"
}

free_ports() {  # free_ports N: N distinct free TCP ports on localhost
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

need_packages() {
    local missing=0 b
    for b in slurmctld slurmd sbatch munged; do command -v "$b" >/dev/null || missing=1; done
    if [ "$missing" = 1 ]; then
        say "Slurm or munge is not installed: running scripts/setup.sh"
        "$REPO_ROOT/scripts/setup.sh" >&2
    fi
    for b in slurmctld slurmd sbatch munged; do
        command -v "$b" >/dev/null || die "$b not found after scripts/setup.sh"
    done
}

write_config() {
    local ports ctld names n i
    read -r -a ports <<< "$(free_ports $((NODES + 1)))"
    ctld=${ports[0]}
    names=$(node_names | paste -sd, -)
    {
        echo "# Written by scripts/slurm-dev.sh; regenerated at every 'up' of a stopped cluster."
        echo "ClusterName=schedulearn-dev"
        echo "SlurmctldHost=localhost"
        echo "SlurmctldPort=$ctld"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "AuthInfo=socket=$D/run/munge.sock"
        echo "StateSaveLocation=$D/state"
        echo "SlurmdSpoolDir=$D/spool/%n"
        echo "SlurmctldPidFile=$D/run/slurmctld.pid"
        echo "SlurmdPidFile=$D/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$D/log/slurmctld.log"
        echo "SlurmdLogFile=$D/log/slurmd-%n.log"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobCompType=jobcomp/none"
        echo "MpiDefault=none"
        echo "MailProg=/bin/true"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "GresTypes=gpu"
        echo "SlurmdParameters=config_overrides"
        echo "SchedulerParameters=batch_sched_delay=0,bf_interval=1"  # hetjobs (uneven multi-node jobs) start through backfill
        echo "ReturnToService=2"
        echo "KillWait=5"
        echo "MinJobAge=300"
        i=1
        for n in $(node_names); do
            echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=${ports[$i]} CPUs=$CPUS Gres=gpu:$GPUS State=UNKNOWN"
            i=$((i + 1))
        done
        echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP"
    } > "$D/slurm.conf"
    echo "AutoDetect=off" > "$D/gres.conf"
    echo "Name=gpu File=$D/dev/gpu[0-$((GPUS - 1))]" >> "$D/gres.conf"
}

start_daemon() {  # start_daemon LOGNAME CMD...: detached, in its own session
    local name=$1; shift
    setsid "$@" < /dev/null >> "$D/log/$name.out" 2>&1 &
}

wait_for() {  # wait_for WHAT CMD...: until CMD succeeds, TIMEOUT seconds at most
    local what=$1 i; shift
    for ((i = 0; i < TIMEOUT * 10; i++)); do
        "$@" && return 0
        sleep 0.1
    done
    die "$what did not come up in ${TIMEOUT}s; logs in $D/log"
}

nodes_idle() {
    local states
    states=$(SLURM_CONF="$D/slurm.conf" sinfo -h -o %t 2>/dev/null | sort -u | paste -sd' ' -)
    [ "$states" = idle ]
}

up() {
    [ "$(id -u)" = 0 ] || die "needs root (munged, slurmctld and slurmd run as root here)"
    need_packages
    if all_up; then
        say "already running ($D)"
        exports
        return 0
    fi
    stop_daemons  # whatever is left of an earlier run
    mkdir -p "$D"/{state,run,log,dev}
    chmod 0711 "$D" "$D/run"  # other accounts' jobs reach munge's socket through these
    local n i
    for n in $(node_names); do mkdir -p "$D/spool/$n"; done
    for ((i = 0; i < GPUS; i++)); do
        [ -c "$D/dev/gpu$i" ] || { rm -f "$D/dev/gpu$i"; mknod "$D/dev/gpu$i" c 1 3; }
    done
    if [ ! -s "$D/munge.key" ]; then
        (umask 077; head -c 1024 /dev/urandom > "$D/munge.key")
    fi
    chmod 0600 "$D/munge.key"
    write_config
    export SLURM_CONF="$D/slurm.conf"
    munged --force --socket="$D/run/munge.sock" --key-file="$D/munge.key" \
        --pid-file="$D/run/munged.pid" --log-file="$D/log/munged.log" --seed-file="$D/run/munged.seed" \
        >> "$D/log/munged.out" 2>&1 || die "munged did not start; see $D/log/munged.log"
    wait_for munged test -S "$D/run/munge.sock"
    chmod 0777 "$D/run/munge.sock"
    start_daemon slurmctld slurmctld -D -i
    wait_for slurmctld answers
    for n in $(node_names); do
        start_daemon "slurmd-$n" slurmd -D -N "$n"
    done
    wait_for "the nodes" nodes_idle
    say "up: $NODES nodes x $GPUS GPUs, partition debug ($D)"
    exports
}

stop_pidfile() {  # stop_pidfile PIDFILE: TERM, 10 s, KILL
    local p i
    p=$(pid_of "$1")
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
        kill -TERM "$p" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null || true
    fi
    rm -f "$1"
}

stop_daemons() {
    local n
    for n in $(node_names); do stop_pidfile "$D/run/slurmd-$n.pid"; done
    stop_pidfile "$D/run/slurmctld.pid"
    stop_pidfile "$D/run/munged.pid"
}

down() {
    if answers; then
        export SLURM_CONF="$D/slurm.conf"
        local ids i
        ids=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$ids" ]; then
            say "cancelling $(echo "$ids" | wc -w) job(s)"
            # shellcheck disable=SC2086
            scancel $ids 2>/dev/null || true
            for ((i = 0; i < 300; i++)); do
                [ -z "$(squeue -h -t R,CG,PD,S -o %i 2>/dev/null)" ] && break
                sleep 0.1
            done
        fi
    fi
    stop_daemons
    say "down ($D)"
}

status() {
    local n rc=0
    for n in munged slurmctld $(for x in $(node_names); do echo "slurmd-$x"; done); do
        if alive "$D/run/$n.pid"; then echo "$n: running (pid $(pid_of "$D/run/$n.pid"))"
        else echo "$n: stopped"; rc=1; fi
    done
    if answers; then
        SLURM_CONF="$D/slurm.conf" sinfo
    else
        echo "slurmctld does not answer ($D)"; rc=1
    fi
    return $rc
}

case "$1" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) usage ;;
esac
