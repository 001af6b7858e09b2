"""A result is code (issue 16): the server hands out only the `result.pkl` the job's own run
wrote and signed; a forged one (written into the job's directory afterwards, or planted by
another job signing with its own key) is refused with 409 and never unpickled in the kernel.
Real server (local executor), real jobs, the magics in an IPython shell."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from schedulearn.client import Client, ClientError

from tests.fixtures.jupyter import LiveServer


class _Evil:
    """Unpickling it makes a folder: the proof that a pickle ran in this process."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _job_dir(server: LiveServer, job_id: int) -> Path:
    return Path(server.traits["job_root"]) / str(job_id)


def _refused(shell: InteractiveShell, job_id: int) -> str:
    r = shell.run_cell(f"%schedulearn result {job_id}")
    assert not r.success
    return str(r.error_in_exec)


def test_a_genuine_result_comes_back_a_forged_one_is_refused(
        shell: InteractiveShell, client: Client, server: LiveServer, tmp_path: Path) -> None:
    r = shell.run_cell("%%schedulearn --name victim\n{'answer': 42}")
    assert r.success, r.error_in_exec
    assert r.result == {"answer": 42}
    victim = client.jobs()[-1]["id"]
    d = _job_dir(server, victim)
    assert (d / "result.pkl.hmac").is_file()
    assert shell.run_cell(f"%schedulearn result {victim}").result == {"answer": 42}  # still fetchable

    # written into the job's directory after the job ran, without the key
    marker = tmp_path / "pickle-ran"
    (d / "result.pkl").write_bytes(pickle.dumps(_Evil(marker)))
    msg = _refused(shell, victim)
    assert f"result: not written by job {victim}'s run" in msg and "\n" not in msg
    with pytest.raises(ClientError) as e:
        client.result(victim)
    assert e.value.status == 409
    assert not marker.exists()

    # planted by another user's job, signed with that job's own key (what a job can do)
    evil = pickle.dumps(_Evil(marker))
    r = shell.run_cell(
        "%%schedulearn --name attacker\n"
        "import os\n"
        "from schedulearn.run import write_result\n"
        f"write_result({evil!r}, {str(d / 'result.pkl')!r})\n"
        "'planted'")
    assert r.success, r.error_in_exec
    assert r.result == "planted"  # the attacker's own result is its own
    assert (d / "result.pkl").read_bytes() == evil
    assert f"result: not written by job {victim}'s run" in _refused(shell, victim)
    assert not marker.exists()

    # a job's genuine result copied (with its signature) into another job's directory: refused
    attacker = client.jobs()[-1]["id"]
    for name in ("result.pkl", "result.pkl.hmac"):
        (d / name).write_bytes((_job_dir(server, attacker) / name).read_bytes())
    assert f"result: not written by job {victim}'s run" in _refused(shell, victim)
    assert shell.run_cell(f"%schedulearn result {attacker}").result == "planted"
