"""Deadlines live: real processes under the local executor on 4 virtual GPUs and the `qoe`
policy, on the wall clock.

The jobs (tests/jobs/deadline_work.py) run at a speed proportional to their GPUs, report their
progress, and resume from their own checkpoint when a resize restarts them. `loose` asks for 2
GPUs with ten minutes to spare; `tight` asks for 1 but needs 32 s of work on one GPU done within
30 s. From its first progress reports the policy works out that it needs more and gives it more
(taking from `loose`, which can spare them), and it makes its deadline; so does `loose`. Its
restarts' pauses are measured from its progress reports (it reports no step times). A third
job like `tight` (same name: the history knows what it needs) with a deadline of 4 s cannot make
it on any size: the scheduler says `will_miss` in the answer to its submission and in an event.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from schedulearn import pauses
from schedulearn.engine import Engine, RealClock
from schedulearn.executors.local import LocalExecutor
from schedulearn.model import JobState, virtual_cluster

from tests.conftest import wait_for

JOB = Path(__file__).parent / "jobs" / "deadline_work.py"


def _spec(name: str, gpus: int, units: int, deadline: float) -> dict:
    return {"name": name, "command": [sys.executable, str(JOB)], "gpus": gpus, "min_gpus": 1, "max_gpus": 4,
            "deadline": deadline, "env": {"UNITS": str(units), "UNIT_S": "0.5", "REPORT_S": "0.5"}}


def test_the_tight_job_gets_what_it_needs_and_an_infeasible_one_is_flagged_at_submission(tmp_path):
    async def main():
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=10)
        # the set-up's restart cost (the server's `restart_cost`): a process restart here costs
        # about a second, not the default 30 s
        eng = Engine(virtual_cluster(1, 4), "qoe", executor=ex, restart_cost=2.0)
        assert eng.policy.restart_cost == 2.0
        events: list[dict] = []
        eng.listeners.append(events.append)
        task = asyncio.create_task(eng.run(RealClock(tick=0.5)))
        try:
            loose = eng.submit(_spec("loose", 2, 40, time.time() + 600))
            await wait_for(lambda: loose.state is JobState.running, 30, "loose to start")
            tight = eng.submit(_spec("tight", 1, 64, time.time() + 30))
            sizes = []

            def ended():
                if tight.size and (not sizes or sizes[-1] != tight.size):
                    sizes.append(tight.size)
                return tight.state.final and loose.state.final
            await wait_for(ended, 120, "both jobs to end")
            assert tight.state is JobState.succeeded and loose.state is JobState.succeeded, (tight.reason,
                                                                                             loose.reason)
            assert sizes[0] == 1 and max(sizes) >= 2, sizes  # what it asked for, then what it needs
            assert tight.end_time <= tight.spec.deadline, (tight.end_time - tight.spec.deadline, sizes)
            assert eng.job_dict(tight, time.time())["deadline_status"] == "met"
            # its restarts, priced by the pauses measured from its progress reports alone (a
            # process restart here: about a second)
            measured = pauses.measured(tight, False)
            assert measured and all(0 <= p < 10 for p in measured), measured
            assert [e for e in events if e["event"] == "resize_pause" and e["job"]["id"] == tight.id]
            assert eng.job_dict(loose, time.time())["deadline_status"] == "met"
            # like `tight`, which needed 32 GPU-seconds: 8 s on 4 GPUs at best, and it has 4
            submitted = time.time()
            doomed = eng.submit(_spec("tight", 1, 64, submitted + 4))
            answer = eng.job_dict(doomed, submitted)
            assert answer["deadline_status"] == "will_miss", answer
            flagged = [e for e in events if e["event"] == "deadline" and e["job"]["id"] == doomed.id]
            assert flagged and flagged[0]["job"]["deadline_status"] == "will_miss"
            eng.cancel(doomed.id)
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())
