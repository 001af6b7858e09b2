"""What a policy may know of a job: its spec and its reports.

Live jobs report with `schedulearn.elastic.report(...)` (a line of `metrics.jsonl` per report,
read before each round by the executor that owns the job directory); simulated jobs emit the
same records from their job model (`sim.executor`). Both go through `ingest`, and policies read
the result only through `estimate(job, now)`: goodput on any placement, the best batch size, the
speed-up curve, the exploration cap, progress and the work left (`estimates.job`). Jobs that
declare no progress get a run time predicted from finished jobs (`estimates.predict`).

This package never imports `schedulearn.sim`: ground truth stays in the simulator.
"""

from .deadline import summary as deadline_summary
from .job import Estimate, estimate, packed_shape, remaining_s1, summary
from .reports import REPORTS_KEY, ingest, load_reports, progress_of, refresh
from .throughput import PerfParams, fit

__all__ = ["REPORTS_KEY", "Estimate", "PerfParams", "deadline_summary", "estimate", "fit", "ingest",
           "load_reports", "packed_shape", "progress_of", "refresh", "remaining_s1", "summary"]
