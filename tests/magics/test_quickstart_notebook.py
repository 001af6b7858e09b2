"""examples/quickstart.ipynb executed end to end with nbclient in a real kernel, against a live
server: real torchrun jobs on CPU with virtual GPUs, results returned into the notebook."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from schedulearn.client import Client

from tests.fixtures.jupyter import LiveServer

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "quickstart.ipynb"


@pytest.mark.slow
def test_quickstart_runs_end_to_end(server: LiveServer, client: Client, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    pytest.importorskip("torch")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    before = {j["id"] for j in client.jobs()}
    # The kernel inherits SCHEDULEARN_URL/TOKEN from this process (the conftest's server sets
    # them), as kernels started by a Jupyter server with the extension do.
    assert os.environ["SCHEDULEARN_URL"] == server.url
    run_in = {"metadata": {"path": str(tmp_path)}}
    NotebookClient(nb, timeout=300, kernel_name="python3", resources=run_in).execute()
    nbformat.write(nb, tmp_path / "quickstart.executed.ipynb")

    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors

    def text(i: int) -> str:
        out = []
        for o in nb.cells[i].get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o["text"])
            elif "data" in o and "text/plain" in o["data"]:
                out.append(o["data"]["text/plain"])
        return "".join(out)

    sources = [c.source for c in nb.cells]
    ddp = next(i for i, s in enumerate(sources) if s.startswith("%%schedulearn --gpus 2"))
    summary = text(ddp + 1)
    assert "on 2 processes" in summary, summary
    learned = summary.split("learned y = ")[1]
    w = float(learned.split(" x")[0])
    assert abs(w - 3.0) < 0.3, summary  # the model really trained
    first, final = (float(v) for v in summary.split("loss ")[1].split(" on")[0].split(" -> "))
    assert final < first / 5

    auto = next(i for i, s in enumerate(sources) if s.startswith("%%schedulearn --gpus auto"))
    assert "OrderedDict" in text(auto) or "'0.weight'" in text(auto) or "tensor(" in text(auto)
    handle_cell = next(i for i, s in enumerate(sources) if s.startswith("job.result("))
    assert text(handle_cell).strip() == str(sum(i * 10 for i in range(100)))

    # The jobs ran on the server as real torchrun / python jobs and succeeded.
    new = [j for j in client.jobs() if j["id"] not in before]
    by_name = {j["name"]: j for j in new}
    assert by_name["ddp-quickstart"]["state"] == "succeeded"
    assert by_name["ddp-quickstart"]["spec"]["launcher"] == "torchrun"
    assert by_name["auto-quickstart"]["spec"]["launcher"] == "torchrun"
    assert by_name["auto-quickstart"]["spec"]["gpus"] == "auto"
    assert all(j["state"] == "succeeded" for j in new), [(j["name"], j["state"]) for j in new]
    timed = by_name["deadline-quickstart"]  # it reported its progress and made its deadline
    assert timed["deadline_status"] == "met" and timed["progress"] == 1.0, timed
    shown = text(next(i for i, s in enumerate(sources) if s.startswith("%%schedulearn --deadline")))
    assert "deadline in 10 min" in shown and shown.strip().endswith("'20 steps done'"), shown
    assert "rank 1/2 step 0" in client.logs(by_name["ddp-quickstart"]["id"])
    plotted = next(i for i, s in enumerate(sources) if s.startswith("%%schedulearn --name plot-quickstart"))
    shown_kinds = [o.output_type for o in nb.cells[plotted].outputs if "image/png" in o.get("data", {})]
    assert shown_kinds == ["display_data"], nb.cells[plotted].outputs  # the loss curve, once
    assert text(plotted).index("<Figure size") < text(plotted).index("'learned w = "), text(plotted)
    value = text(plotted).strip().rsplit("'learned w = ", 1)[1]
    assert abs(float(value.rstrip("'")) - 3.0) < 0.05, text(plotted)  # the value, after the figure

    # Widgets were shown (a widget frontend: nbclient keeps their state): the job views ended
    # 'succeeded', and the queue widget's dropdown lists the server's policies.
    widgets = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    state = widgets.get("state", {})
    models = [m.get("state", {}) for m in state.values()]
    assert any("succeeded" in str(m.get("value", "")) and "ddp-quickstart" in str(m.get("value", ""))
               for m in models), json.dumps(models)[:2000]
    dropdowns = [m for m in models if m.get("_model_name") == "DropdownModel"]
    assert dropdowns, "the queue widget's policy dropdown is missing"
    labels = dropdowns[0].get("_options_labels")
    assert list(labels) == [p["name"] for p in client.policies()]
