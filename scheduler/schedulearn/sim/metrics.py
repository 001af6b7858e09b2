"""The numbers a simulation reports, per policy.

JCT = finish - submit. Makespan = last finish - first submit. Queueing = JCT - time spent
running (first wait plus any time preempted). Utilisation = GPU-seconds allocated to jobs /
(GPUs x makespan)."""

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
    return {
        "policy": policy,
        "jobs": len(done),
        "avg_jct_s": round(float(jct.mean()), 3),
        "p50_jct_s": round(float(np.percentile(jct, 50)), 3),
        "p99_jct_s": round(float(np.percentile(jct, 99)), 3),
        "makespan_s": round(float(makespan), 3),
        "avg_queue_s": round(float((jct - ran).mean()), 3),
        "gpu_utilization": round(busy / (gpus * makespan), 4) if makespan > 0 else 0.0,
    }
