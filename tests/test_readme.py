"""The README's commands and its policy-plugin example work as written."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.readme import blocks

SCHEDULEARN = [sys.executable, "-m", "schedulearn"]


def _run(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_two_commands_open_the_readme_and_ci_calls_the_test_one():
    first = (ROOT / "README.md").read_text().split("```")[1].strip().splitlines()
    assert first[1].startswith("make run") and first[2].startswith("make test"), first
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_simulate_commands_of_the_readme(traces):
    lines = [ln for b in blocks("bash") for ln in b.splitlines() if ln.startswith("schedulearn ")]
    assert any(" simulate " in ln for ln in lines), lines
    for line in lines:
        r = _run(SCHEDULEARN + shlex.split(line)[1:])
        assert r.returncode == 0, f"{line}: {r.stderr}"
        if "--json" in line:
            rows = json.loads(r.stdout)
            assert {row["policy"] for row in rows} == {"las", "fifo"}
            assert all(row["jobs"] == 500 for row in rows)


def test_policy_plugin_of_the_readme_is_found_through_its_entry_point(tmp_path: Path):
    (module,) = [b for b in blocks("python") if b.startswith("# my_policies.py")]
    (toml,) = [b for b in blocks("toml") if "schedulearn.policies" in b]
    (tmp_path / "my_policies.py").write_text(module)
    dist = tmp_path / "my_policies-1.0.dist-info"  # what `pip install` of the plugin leaves
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-policies\nVersion: 1.0\n")
    ini = toml.replace('project.entry-points."schedulearn.policies"', "schedulearn.policies")
    (dist / "entry_points.txt").write_text(ini.replace('"', ""))  # as pip writes it
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))

    listed = json.loads(_run(SCHEDULEARN + ["policies", "--json"], env).stdout)
    assert {"name": "smallest-first",
            "description": "Jobs asking for fewer GPUs first; running jobs are never stopped."} in listed

    broken = tmp_path / "broken-1.0.dist-info"  # a broken plugin is skipped, not fatal
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (broken / "entry_points.txt").write_text("[schedulearn.policies]\nbroken = no_such_module:Nope\n")
    listed = json.loads(_run(SCHEDULEARN + ["policies", "--json"], env).stdout)
    assert "smallest-first" in {p["name"] for p in listed} and "broken" not in {p["name"] for p in listed}

    trace = tmp_path / "t.csv"  # a 4-GPU job waits; smallest-first lets the 1-GPU job pass it
    trace.write_text("name,submit_time,gpus,duration\nhold,0,3,100\nbig,1,4,10\nsmall,2,1,10\n")
    out = {}
    for policy in ("fifo", "smallest-first"):
        argv = ["simulate", str(trace), "--policy", policy, "--cluster", "1x4", "--json"]
        r = _run(SCHEDULEARN + argv, env)
        assert r.returncode == 0, r.stderr
        out[policy] = json.loads(r.stdout)[0]["avg_jct_s"]
    # fifo: hold 0-100, big 100-110, small 110-120 -> JCTs 100, 109, 118
    # smallest-first: small runs beside hold at 2-12 -> JCTs 100, 109, 10
    assert out == {"fifo": round((100 + 109 + 118) / 3, 3), "smallest-first": round((100 + 109 + 10) / 3, 3)}
