"""`scripts/slurm-dev.sh`: a private two-node Slurm with fake GPUs in one command (issue 14).

`up` prints eval-able exports and is idempotent; the cluster runs real jobs on the fake GPUs
(Slurm sets CUDA_VISIBLE_DEVICES from the gres devices, two concurrent 2-GPU jobs on one node get
disjoint ones); a job submitted by root with `--uid` runs as that account (munge authentication);
`down` cancels what runs and stops the daemons, and `status` says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fixtures.slurm import SlurmCluster, _available, parse_exports, slurm_dev

pytestmark = pytest.mark.slow

SHOW = "#!/bin/sh\necho \"node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES uid=$(id -u)\"\nsleep 5\n"


def _wait_done(slurm: SlurmCluster, ids: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while any(str(j["job_id"]) in ids for j in slurm.active_jobs()):
        assert time.monotonic() < deadline, slurm.active_jobs()
        time.sleep(0.2)


def test_up_is_idempotent_and_prints_the_client_environment(slurm: SlurmCluster) -> None:
    again = slurm_dev("up", slurm.dir)
    assert again.returncode == 0, again.stderr
    assert parse_exports(again.stdout) == slurm.env
    assert "already running" in again.stderr
    assert slurm.env["SLURM_CONF"] == str(slurm.dir / "slurm.conf")
    out = slurm.run("sinfo", "-h", "-o", "%P %D %t %G").stdout.split()
    assert out == ["debug*", "2", "idle", "gpu:4"]
    status = slurm_dev("status", slurm.dir)
    assert status.returncode == 0 and "slurmd-n2: running" in status.stdout


def test_jobs_get_disjoint_fake_gpus_and_run_as_the_account_asked_for(slurm: SlurmCluster) -> None:
    tmp_path = Path(tempfile.mkdtemp(prefix="sl-jobs-"))  # pytest's own is private to root
    tmp_path.chmod(0o777)  # the job running as nobody writes its output here
    script = tmp_path / "show.sh"
    script.write_text(SHOW)
    script.chmod(0o755)
    ids = []
    for i, extra in enumerate([[], [], ["--uid=nobody"]]):
        r = slurm.run("sbatch", "--parsable", "--gres=gpu:2", "--nodelist=n1" if i < 2 else "--nodelist=n2",
                      f"--output={tmp_path}/out-{i}.txt", f"--chdir={tmp_path}", *extra, str(script))
        ids.append(r.stdout.strip().split(";")[0])
    try:
        _wait_done(slurm, ids)
        outs = [(tmp_path / f"out-{i}.txt").read_text() for i in range(3)]
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
    parsed = [dict(kv.split("=") for kv in re.search(r"node=.*", o).group(0).split()) for o in outs]
    assert [p["node"] for p in parsed] == ["n1", "n1", "n2"]
    assert {parsed[0]["cvd"], parsed[1]["cvd"]} == {"0,1", "2,3"}
    assert parsed[2]["cvd"] == "0,1"
    assert parsed[0]["uid"] == "0" and parsed[2]["uid"] == "65534"


def test_down_cancels_jobs_and_stops_the_daemons(tmp_path_factory: pytest.TempPathFactory) -> None:
    ok, why = _available()
    require(ok, why)
    d = tmp_path_factory.mktemp("slurm-down")
    up = slurm_dev("up", d)
    try:
        assert up.returncode == 0, up.stderr
        cluster = SlurmCluster(d, parse_exports(up.stdout))
        (d / "sleep.sh").write_text("#!/bin/sh\nexec sleep 300\n")
        (d / "sleep.sh").chmod(0o755)
        cluster.run("sbatch", "--parsable", "--gres=gpu:1", f"--output={d}/o.txt", str(d / "sleep.sh"))
        deadline = time.monotonic() + 30
        while not any(j["job_state"] == "RUNNING" for j in cluster.jobs()):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        down = slurm_dev("down", d)
    assert down.returncode == 0, down.stderr
    assert "cancelling 1 job(s)" in down.stderr
    status = slurm_dev("status", d)
    assert status.returncode == 1 and "slurmctld: stopped" in status.stdout
    ps = subprocess.run(["pgrep", "-f", f"{d}/sleep.sh"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", "a job process outlived `down`"
