"""examples/resize_in_place.ipynb executed end to end with nbclient in a real kernel, against a
live server with 4 virtual GPUs: a real Horovod Elastic job on CPU is shrunk and grown back in
place by `elastic-fifo` while it trains, and the notebook shows it."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import pytest
from schedulearn.client import Client
from schedulearn_magics.handle import load_result

from tests.fixtures.jupyter import LiveServer
from tests.magics.conftest import GPUS

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "resize_in_place.ipynb"


def _text(cell: dict) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["text"])
        elif "data" in o and "text/plain" in o["data"]:
            out.append(o["data"]["text/plain"])
    return "".join(out)


@pytest.mark.slow
def test_resize_in_place_notebook(server: LiveServer, client: Client, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    pytest.importorskip("torch")
    pytest.importorskip("horovod.torch")
    assert GPUS == 4  # the notebook's story: 2 GPUs for the elastic job, 3 asked by the other
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "stored with outputs"
    before = {j["id"] for j in client.jobs()}
    previous_policy = client.policy()
    run_in = {"metadata": {"path": str(tmp_path)}}
    try:
        # Generous: the machine is shared; the job's own waits are bounded by the notebook.
        NotebookClient(nb, timeout=900, kernel_name="python3", resources=run_in).execute()
    finally:
        nbformat.write(nb, tmp_path / "resize_in_place.executed.ipynb")
        client.set_policy(previous_policy)

    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors

    new = {j["name"]: j for j in client.jobs() if j["id"] not in before}
    elastic_job, other = new["resize-elastic"], new["resize-other"]
    assert elastic_job["state"] == other["state"] == "succeeded", (elastic_job, other)
    assert elastic_job["spec"]["launcher"] == "horovod"
    assert elastic_job["spec"]["resize"] == "in-place"
    assert other["spec"]["gpus"] == 3

    sources = [c.source for c in nb.cells]
    waited = next(i for i, s in enumerate(sources) if "world 2" in s and "job.logs()" in s)
    assert "world 2" in _text(nb.cells[waited])  # the second job came while it trained on 2

    # The job's own record (rank 0's `state.history`, its result): every step once and in
    # order, the world size 2 -> 1 -> 2, the loss falling, also across the resizes.
    history = load_result(client.result(elastic_job["id"]))
    assert [s for s, _, _ in history] == list(range(1, 401))
    worlds = [w for _, w, _ in history]
    changes = [(s, w) for (s, w, _), prev in zip(history, [0, *worlds[:-1]], strict=True) if w != prev]
    assert [w for _, w in changes] == [2, 1, 2], changes
    losses = [loss for _, _, loss in history]
    assert losses[-1] < losses[0] / 1000, (losses[0], losses[-1])
    assert all(b <= a * 1.01 for a, b in pairwise(losses)), losses

    # Rank 0's log lines: every 20th step once, the same loss as recorded, one pid throughout.
    log = client.logs(elastic_job["id"])
    lines = re.findall(r"step +(\d+) +world (\d) +loss ([0-9.]+) +pid (\d+)", log)
    assert [int(s) for s, _, _, _ in lines] == list(range(20, 401, 20)), log[-3000:]
    assert [int(w) for _, w, _, _ in lines] == worlds[19::20]
    assert [float(v) for _, _, v, _ in lines] == pytest.approx(losses[19::20], rel=1e-3, abs=1e-4)
    assert len({pid for _, _, _, pid in lines}) == 1, log[-3000:]

    # Both resizes were in place: the scheduler logged them so, no restart was counted.
    resized = [line for line in log.splitlines() if "resized in place" in line]
    assert len(resized) == 2 and "2 -> 1" in resized[0] and "1 -> 2" in resized[1], resized
    assert client.job(elastic_job["id"])["restarts"] == 0

    # What the notebook shows the user says the same.
    last = next(i for i, s in enumerate(sources) if s.startswith("history = job.result("))
    summary = _text(nb.cells[last])
    assert f"world size from step: {changes}" in summary, summary
    assert "steps 1..400, each once: True" in summary, summary
    assert f"rank 0 pids: {{'{lines[0][3]}'}}" in summary, summary
    assert "restarts: 0" in summary, summary
    assert "resized in place: 2 -> 1" in summary and "resized in place: 1 -> 2" in summary, summary
