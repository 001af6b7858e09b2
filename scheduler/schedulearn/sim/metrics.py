"""The numbers a simulation reports, per policy.

JCT = finish - submit. Makespan = last finish - first submit. Queueing = JCT - time spent
running (first wait plus any time preempted). Utilisation = GPU-seconds allocated to jobs /
(GPUs x makespan). With deadlines: `deadline_met` = the share of the jobs with a deadline that
finished by it (a job that never finished missed it), `avg_tardiness_s` = their mean lateness
(0 for those on time), `deadline_jobs` = how many had one; `be_avg_jct_s` = the average JCT of
the jobs without one (best effort)."""

from __future__ import annotations

import numpy as np

from ..model import Job


def summarize(policy: str, jobs: list[Job], gpus: int) -> dict:
    done = [j for j in jobs if j.end_time is not None]
    if not done:
        return {"policy": policy, "jobs": 0, "avg_jct_s": 0.0, "p50_jct_s": 0.0, "p99_jct_s": 0.0,
                "makespan_s": 0.0, "avg_queue_s": 0.0, "gpu_utilization": 0.0}
    jct = np.array([j.end_time - j.submit_time for j in done])
    ran = np.array([j.run_base for j in done])
    makespan = max(j.end_time for j in done) - min(j.submit_time for j in done)
    busy = sum(j.attained_base for j in done)
    out = {
        "policy": policy,
        "jobs": len(done),
        "avg_jct_s": round(float(jct.mean()), 3),
        "p50_jct_s": round(float(np.percentile(jct, 50)), 3),
        "p99_jct_s": round(float(np.percentile(jct, 99)), 3),
        "makespan_s": round(float(makespan), 3),
        "avg_queue_s": round(float((jct - ran).mean()), 3),
        "gpu_utilization": round(busy / (gpus * makespan), 4) if makespan > 0 else 0.0,
    }
    out.update(deadline_metrics(jobs))
    return out


def deadline_metrics(jobs: list[Job]) -> dict:
    """`deadline_met`, `avg_tardiness_s`, `deadline_jobs`, `be_avg_jct_s` (empty without deadlines)."""
    with_dl = [j for j in jobs if j.spec.deadline is not None]
    if not with_dl:
        return {}
    late = [max((j.end_time if j.end_time is not None else np.inf) - j.spec.deadline, 0.0) for j in with_dl]
    best = [j.end_time - j.submit_time for j in jobs if j.spec.deadline is None and j.end_time is not None]
    return {
        "deadline_jobs": len(with_dl),
        "deadline_met": round(sum(1 for t in late if t == 0) / len(with_dl), 4),
        "avg_tardiness_s": round(float(np.mean(late)), 3),
        "be_avg_jct_s": round(float(np.mean(best)), 3) if best else None,
    }
