"""`python -I -S exitwrap.py EXIT_FILE COMMAND...`: run a local job's command, record its exit
status in EXIT_FILE, and exit with it (128+N when signal N ended it, as a shell says).

The local executor starts every run through it (`schedulearn.executors.launch.wrap_exit_code`):
the wrapper is the run's process-group leader and outlives the command when the group is
stopped, so a job started before a server restart reports its real exit status to the next
server. The command gets default dispositions for SIGTERM and SIGINT; the wrapper itself
survives them.

Why not `/bin/sh -c 'trap : TERM INT; "$@"; echo $? > FILE'`: a SIGTERM sent to the group
between the shell's fork and the command's exec reached the forked child while it still had
the shell's handler, and vanished with the exec. The command ran on as if never stopped, and a
cancel in the first milliseconds of a run (`schedulearn cancel 4 5`: stopping job 4 started job
5, and its cancel came 2 ms later) waited out the whole grace period for SIGKILL, blamed on the
job. Here SIGTERM and SIGINT are blocked across the spawn: the command starts with them
unblocked and at their defaults (`posix_spawn`'s `setsigmask`, `setsigdef`), a signal sent to
the group once it exists is pending in it across its exec, and one sent before it existed is
pending here and forwarded to it.

Standard library only; run by its path, never imported by the job.
"""

from __future__ import annotations

import _signal as signal  # the C module: `signal` imports `enum`, a third of this program's start-up
import errno
import os
import sys

STOPS = (signal.SIGTERM, signal.SIGINT)
NAME = "schedulearn-job"  # how its own messages start (its `$0` as a shell, before)


def _spawn(command: list[str]) -> int:
    kw = {"setsigmask": (), "setsigdef": STOPS}
    try:
        return os.posix_spawnp(command[0], command, os.environ, **kw)
    except OSError as e:
        if e.errno != errno.ENOEXEC:
            raise
        return os.posix_spawn("/bin/sh", ["/bin/sh", *command], os.environ, **kw)  # as a shell would


def main(argv: list[str]) -> int:
    exit_file, command = argv[0], argv[1:]
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    for sig in STOPS:
        signal.signal(sig, lambda *_: None)  # outlive them (the command is told through the group)
    try:
        pid = _spawn(command)
    except OSError as e:
        code = 127 if e.errno == errno.ENOENT else 126  # as a shell says
        print(f"{NAME}: {command[0]}: {'not found' if code == 127 else e.strerror}", file=sys.stderr)
    else:
        early = signal.sigpending() & set(STOPS)  # sent to the group before the command was in it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        for sig in early:
            os.kill(pid, sig)
        status = os.waitpid(pid, 0)[1]
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
    with open(exit_file, "w") as f:
        f.write(f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
