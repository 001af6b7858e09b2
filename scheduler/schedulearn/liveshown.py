"""What a notebook cell's job shows while it runs, handed out as it comes (`GET jobs/{id}/shown`).

The job's cell runner (`schedulearn_magics.cell_runner.LiveShown`) appends a line to
`shown.jsonl` in the job directory for each figure or display it keeps, and for each update of
one: `<HMAC-SHA256 hex> <JSON>`, the JSON `{"run", "at", "bundle"}` (the run that wrote it, the
item's place among what the cell shows, its MIME bundle), signed with the job's result key
(`results.job_key`). A waiting cell reads the records a page at a time and displays them: a
record is display data the notebook shows as trusted output, so only lines with the job's own
signature are handed out (a line anyone else wrote into the directory is skipped, and logged).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from pathlib import Path
from typing import Any

from . import nofollow
from .jobfiles import SHOWN_FILE

log = logging.getLogger(__name__)

#: The most bytes one page reads: twice the longest line a job writes (`LiveShown.LINE_LIMIT`),
#: so a page always ends with at least one whole line when there is one.
PAGE = 8 << 20


def page(key: str, job_id: int, job_dir: Path | str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The records of job `job_id`'s `shown.jsonl` from byte `offset` on (whole lines, at most
    `PAGE` bytes) whose signature is `key`'s, and the offset the next page starts at; none (at
    `offset`) while there is no record, or the file is not a regular one."""
    try:
        data = nofollow.read_bytes(Path(job_dir) / SHOWN_FILE, offset=offset, limit=PAGE)
    except (FileNotFoundError, nofollow.NotAFile):
        return [], offset
    end = data.rfind(b"\n") + 1  # (a line being written: read with the next page)
    records, forged = [], 0
    for line in data[:end].splitlines():
        mac, _, body = line.partition(b" ")
        good = hmac.new(key.encode("ascii"), body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, good):
            forged += 1
            continue
        try:
            record = json.loads(body)
        except ValueError:
            forged += 1
            continue
        if isinstance(record, dict) and isinstance(record.get("bundle"), dict) \
                and isinstance(record.get("at"), int):
            records.append({"run": str(record.get("run", "")), "at": record["at"],
                            "bundle": record["bundle"]})
    if forged:
        log.warning("job %s: %d line(s) of %s not signed by the job: skipped", job_id, forged, SHOWN_FILE)
    return records, offset + end
