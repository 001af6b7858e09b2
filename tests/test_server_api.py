"""Every route of the Jupyter extension and its errors, through a real Jupyter server
(pytest-jupyter `jp_fetch`), with the local executor on 4 virtual GPUs and a SQLite store."""

from __future__ import annotations

import asyncio
import json
import pickle
import time

import pytest
from schedulearn import policies
from schedulearn.service import default_user

SLEEP = ["python", "-c", "import time; time.sleep(60)"]
INT64 = "expected an integer between -2**63 and 2**63-1"


async def wait_state(api, job_id: int, states: set[str], timeout: float = 30.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, job = await api("GET", f"jobs/{job_id}")
        assert code == 200
        if job["state"] in states:
            return job
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"job {job_id} still {job['state']} after {timeout}s: {job}")
        await asyncio.sleep(0.05)


async def test_policies_and_policy_switch(sl_api, sl_manager):
    code, data = await sl_api("GET", "policies")
    assert code == 200
    assert [p["name"] for p in data] == [p["name"] for p in policies.available()]
    assert all(p["description"] for p in data)
    # the one user of an embedded server is its admin
    me = default_user()  # the OS user: a plain Jupyter server's one user
    # (admin: none is named, so no one may cancel another user's job; fifo, las: deadlines watched)
    state = {"can_switch": True, "user": me, "admin": False, "plans_deadlines": False, "paused": None}
    assert await sl_api("GET", "policy") == (200, {"policy": "fifo", **state})
    assert await sl_api("PUT", "policy", {"policy": "las"}) == (200, {"policy": "las"})
    assert sl_manager.engine.policy.name == "las"
    assert sl_manager.store.get_policy() == "las"  # remembered across restarts
    assert await sl_api("GET", "policy") == (200, {"policy": "las", **state})
    assert await sl_api("PUT", "policy", {"policy": "qoe"}) == (200, {"policy": "qoe"})
    assert await sl_api("GET", "policy") == (200, {"policy": "qoe", **state, "plans_deadlines": True})


@pytest.mark.parametrize("body", [{"policy": "nope"}, {"policy": 3}, {}, [], '"x"'])
async def test_unknown_policy_is_400_listing_names(sl_api, sl_manager, body):
    code, data = await sl_api("PUT", "policy", body)
    assert code == 400
    assert data["error"].startswith("policy: ")
    for name in ("fifo", "las", "round-robin"):
        if name in policies.policy_classes():
            assert name in data["error"]
    assert sl_manager.engine.policy.name == "fifo"


async def test_policy_invalid_json_is_400(sl_api):
    code, data = await sl_api("PUT", "policy", b"{not json")
    assert code == 400 and data["error"].startswith("body: invalid JSON")


async def test_gpus_shape(sl_api):
    code, data = await sl_api("GET", "gpus")
    assert code == 200
    [node] = data["nodes"]
    assert node["virtual"] is True
    assert [g["index"] for g in node["gpus"]] == [0, 1, 2, 3]
    for g in node["gpus"]:
        assert set(g) >= {"index", "uuid", "name", "memory_total_mb", "memory_used_mb", "utilization",
                          "job_id"}
        assert g["job_id"] is None


async def test_submit_get_list_cancel(sl_api, sl_manager):
    code, job = await sl_api("POST", "jobs", {"name": "sleeper", "command": SLEEP, "gpus": 2})
    assert code == 201
    assert job["id"] == 1 and job["name"] == "sleeper" and job["state"] == "queued"
    assert job["user"] == job["spec"]["user"] != ""
    job = await wait_state(sl_api, 1, {"running"})
    assert job["gpus"] == 2
    # the GPUs it holds say so
    _, gpus = await sl_api("GET", "gpus")
    held = [g["index"] for g in gpus["nodes"][0]["gpus"] if g["job_id"] == 1]
    assert len(held) == 2
    # listed, filtered by state and user
    code, data = await sl_api("GET", "jobs")
    assert code == 200 and [j["id"] for j in data["jobs"]] == [1]
    assert (await sl_api("GET", "jobs", params={"state": "running"}))[1]["jobs"][0]["id"] == 1
    assert (await sl_api("GET", "jobs", params={"state": "queued"}))[1]["jobs"] == []
    assert (await sl_api("GET", "jobs", params={"user": job["user"]}))[1]["jobs"][0]["id"] == 1
    assert (await sl_api("GET", "jobs", params={"user": "somebody-else"}))[1]["jobs"] == []
    # cancelled: stopping at once, cancelled when the process is gone
    code, data = await sl_api("DELETE", "jobs/1")
    assert code == 200 and data["id"] == 1
    job = await wait_state(sl_api, 1, {"cancelled"})
    assert job["end_time"] is not None
    # a second cancel: 409
    code, data = await sl_api("DELETE", "jobs/1")
    assert code == 409 and "already cancelled" in data["error"]
    # stored
    assert sl_manager.store.get_job(1).state.value == "cancelled"


async def test_list_jobs_bad_filters(sl_api):
    code, data = await sl_api("GET", "jobs", params={"state": "sleeping"})
    assert code == 400
    assert data["error"] == ("state: expected one of queued, starting, running, succeeded, failed, "
                             "cancelled, got 'sleeping'")
    code, data = await sl_api("GET", "jobs", params={"limit": "-1"})
    assert code == 400 and data["error"].startswith("limit: expected an integer >= 0")


async def test_list_jobs_limit_gives_newest(sl_api):
    for i in range(5):
        code, _ = await sl_api("POST", "jobs", {"name": f"j{i}", "command": ["true"], "gpus": 1})
        assert code == 201
    _, data = await sl_api("GET", "jobs", params={"limit": "2"})
    assert [j["name"] for j in data["jobs"]] == ["j3", "j4"]


@pytest.mark.parametrize(
    "body, error",
    [
        ({"command": ["x"], "gpus": 0}, "gpus: expected an integer >= 1 or 'auto', got 0"),
        ({"command": ["x"], "gpus": "lots"}, "gpus: expected an integer >= 1 or 'auto', got 'lots'"),
        ({"command": ["x"], "gpus": 99}, "gpus: at most 4 (the GPUs of this cluster), got 99"),
        ({"command": ["x"], "launcher": "mpirun"},
         "launcher: expected one of python, torchrun, horovod, got 'mpirun'"),
        ({"name": "nothing"}, "command: give a command (argv list) or a script (Python source)"),
        ({"command": ["x"], "colour": "red"}, "colour: unknown field; allowed: "),
        ({"command": []}, "command: expected a non-empty argv list"),
        ({"command": ["x"], "min_gpus": 3, "max_gpus": 2}, "min_gpus: must be <= max_gpus (2), got 3"),
        ([1, 2], "body: expected a JSON object (a JobSpec)"),
        ({"command": ["x"], "batch_size": 2**63}, "batch_size: " + INT64),
        ({"command": ["x"], "priority": -(2**70)}, "priority: " + INT64),
        ({"command": ["x", "a\u0000b"]}, "command: NUL characters (\\u0000) are not allowed"),
        ({"command": ["x"], "env": {"K": "\u0000"}}, "env: NUL characters"),
        (None, "body: expected a JSON object (a JobSpec)"),
        ({"command": ["x"], "deadline": 1e9}, "deadline: 2001-09-0"),  # (the 9th, UTC) ... is in the past
        ({"command": ["x"], "deadline": "soon"}, "deadline: cannot read 'soon'; expected a duration"),
        ({"command": ["x"], "deadline": "900h"}, "deadline: "),  # ... more than 30 days ahead
        ({"command": ["x"], "deadline": [1]}, "deadline: expected a time in seconds since the epoch"),
    ],
)
async def test_bad_specs_are_400_and_store_nothing(sl_api, sl_manager, body, error):
    code, data = await sl_api("POST", "jobs", json.dumps(body))
    assert code == 400
    assert data["error"].startswith(error), data
    assert "\n" not in data["error"]
    assert sl_manager.store.list_jobs() == [] and sl_manager.engine.jobs == {}
    assert (await sl_api("GET", "jobs"))[1] == {"jobs": []}


async def test_a_deadline_may_be_given_as_people_say_it(sl_api):
    """`"2h"` is read on the server's clock at submission; the job dict carries the deadline
    and the scheduler's estimate of it, and, once the job ended, whether it was met."""
    before = time.time()
    code, job = await sl_api("POST", "jobs", {"command": ["true"], "deadline": "2h"})
    assert code == 201, job
    assert before + 7200 <= job["deadline"] == job["spec"]["deadline"] <= time.time() + 7200
    assert job["deadline_status"] in ("unknown", "at_risk", "on_track")
    assert 7190 < job["deadline_left_s"] <= 7200
    job = await wait_state(sl_api, job["id"], {"succeeded"})
    assert job["deadline_status"] == "met" and "deadline_left_s" not in job


async def test_invalid_json_and_oversized_body(sl_api, sl_manager):
    code, data = await sl_api("POST", "jobs", b'{"command": ')
    assert code == 400 and data["error"].startswith("body: invalid JSON")
    code, data = await sl_api("POST", "jobs", b'{"command": ["x"], "duration": Infinity}')
    assert code == 400 and "Infinity is not JSON" in data["error"]
    big = json.dumps({"script": "x = 1\n" * 800_000})
    code, data = await sl_api("POST", "jobs", big)
    assert code == 413 and data["error"].startswith("body: at most")
    assert sl_manager.store.list_jobs() == []


async def test_the_user_is_the_servers_not_the_callers(sl_api):
    code, job = await sl_api("POST", "jobs", {"command": ["true"], "user": "mallory"})
    assert code == 201 and job["user"] != "mallory" and job["spec"]["user"] == job["user"]


async def test_pause_holds_the_queue_until_resumed(sl_api, sl_manager):
    """`PUT pause` (an admin's; here the one user): a job submitted meanwhile stays queued and
    says why; `GET policy` and `GET pause` say who paused, since when and why; a bad reason is
    a one-line 400 that changes nothing; `DELETE pause` starts the queue."""
    me = default_user()
    for body, error in ((
            {"reason": "a\nb"}, "reason: expected one line of text (at most 200 characters), got 'a\\nb'"),
            ({"reason": 3}, "reason: expected one line of text (at most 200 characters), got 3"),
            ({"reason": "x" * 201}, "reason: expected one line of text (at most 200 characters), got 'xxx")):
        code, data = await sl_api("PUT", "pause", body)
        assert code == 400 and data["error"].startswith(error), data
    assert (await sl_api("GET", "pause"))[1] == {"paused": None}
    code, data = await sl_api("PUT", "pause", {"reason": "reboot at 19:00"})
    assert code == 200 and data["paused"]["by"] == me and data["paused"]["reason"] == "reboot at 19:00"
    assert (await sl_api("GET", "policy"))[1]["paused"] == data["paused"]
    assert (await sl_api("GET", "pause"))[1] == data
    code, job = await sl_api("POST", "jobs", {"name": "held", "command": SLEEP})
    assert code == 201
    for _ in range(10):  # rounds run (the tick is short): it stays queued
        await asyncio.sleep(0.1)
        code, job = await sl_api("GET", f"jobs/{job['id']}")
        assert job["state"] == "queued", job
    assert job["reason"].startswith(f"waiting: scheduling paused by {me} (reboot at 19:00); "), job
    assert (await sl_api("DELETE", "pause")) == (200, {"paused": None})
    await wait_state(sl_api, job["id"], {"running"})
    await sl_api("DELETE", f"jobs/{job['id']}")


async def test_cancel_someone_elses_job_is_403(sl_api, sl_manager):
    # a job of another user in the shared store (submitted by their own server)
    other = await sl_manager.submit({"command": SLEEP, "gpus": 1}, "alice")
    code, data = await sl_api("DELETE", f"jobs/{other['id']}")
    assert code == 403 and "alice" in data["error"]
    assert sl_manager.engine.get(other["id"]).stopping is None
    await sl_manager.cancel(other["id"], "alice")


async def test_unknown_jobs_and_routes_are_404(sl_api):
    for method, path in [("GET", "jobs/42"), ("DELETE", "jobs/42"), ("GET", "jobs/42/logs"),
                         ("GET", "jobs/42/result"), ("GET", "jobs/abc"), ("GET", "nothing"),
                         ("POST", "gpus/1"), ("GET", "jobs/1/other")]:
        code, data = await sl_api(method, path, body=b"" if method == "POST" else None)
        assert code == 404, (method, path, code, data)
        assert isinstance(data, dict) and data["error"]
    code, data = await sl_api("GET", "jobs/42")
    assert data == {"error": "job: no job with id 42"}


async def test_method_not_allowed(sl_api):
    code, _ = await sl_api("DELETE", "gpus")
    assert code == 405
    code, _ = await sl_api("POST", "policies", body=b"{}")
    assert code == 405


async def test_logs_tail_and_bad_tail(sl_api, sl_manager):
    code, job = await sl_api("POST", "jobs", {
        "command": ["python", "-c", "for i in range(10): print('line', i)"]})
    assert code == 201
    await wait_state(sl_api, job["id"], {"succeeded"})
    code, text = await sl_api("GET", f"jobs/{job['id']}/logs", raw=True)
    assert code == 200
    text = text.decode()
    assert "line 0\n" in text and "line 9\n" in text
    code, tail = await sl_api("GET", f"jobs/{job['id']}/logs", params={"tail": "3"}, raw=True)
    assert tail.decode().splitlines() == text.splitlines()[-3:]
    assert "line 6" not in tail.decode()
    code, data = await sl_api("GET", f"jobs/{job['id']}/logs", params={"tail": "many"})
    assert code == 400 and data["error"] == "tail: expected an integer >= 0, got 'many'"


async def test_logs_by_pages_and_a_log_of_many_pages_whole(sl_api, sl_manager):
    """`?offset=` answers a page (at most a MiB) and where the next starts; the whole log of a
    job that wrote more than a page comes back whole, sent a page at a time."""
    from schedulearn.joblogs import LOG_SIZE, NEXT_OFFSET, PAGE

    code, job = await sl_api("POST", "jobs", {"command": [
        "python", "-c", "import sys\nfor i in range(200000): sys.stdout.write(f'row {i:06d} é\\n')"]})
    assert code == 201
    await wait_state(sl_api, job["id"], {"succeeded"})
    on_disk = (sl_manager.executor.job_dir(job["id"]) / "log.txt").read_bytes()
    assert len(on_disk) > 2 * PAGE
    code, whole = await sl_api("GET", f"jobs/{job['id']}/logs", raw=True)
    assert code == 200 and whole == on_disk
    pages, offset = [], 0
    while True:
        resp = await sl_api("GET", f"jobs/{job['id']}/logs", params={"offset": str(offset)}, whole=True)
        assert resp.code == 200 and int(resp.headers[LOG_SIZE]) == len(on_disk)
        if not resp.body:
            break
        assert len(resp.body) <= PAGE and int(resp.headers[NEXT_OFFSET]) == offset + len(resp.body)
        pages.append(resp.body)
        offset = int(resp.headers[NEXT_OFFSET])
    assert b"".join(pages) == on_disk and len(pages) == 3
    for params, message in [
        ({"offset": "-1"}, "offset: expected an integer >= 0, got '-1'"),
        ({"offset": "x"}, "offset: expected an integer >= 0, got 'x'"),
        ({"offset": "0", "tail": "3"}, "offset: a page of the log is read alone, without tail or follow"),
        ({"offset": "0", "follow": "1"}, "offset: a page of the log is read alone, without tail or follow"),
    ]:
        code, data = await sl_api("GET", f"jobs/{job['id']}/logs", params=params)
        assert (code, data) == (400, {"error": message})
    code, data = await sl_api("GET", "jobs/4242/logs", params={"offset": "0"})
    assert code == 404


async def test_logs_follow_streams_until_the_job_ends(sl_api):
    code, job = await sl_api("POST", "jobs", {"command": [
        "python", "-u", "-c", "import time\nfor i in range(5):\n print('tick', i)\n time.sleep(0.3)"]})
    assert code == 201
    chunks: list[bytes] = []
    code, _ = await sl_api("GET", f"jobs/{job['id']}/logs", params={"follow": "1"},
                           streaming_callback=chunks.append, request_timeout=60, raw=True)
    assert code == 200
    text = b"".join(chunks).decode()
    assert [ln for ln in text.splitlines() if ln.startswith("tick")] == [f"tick {i}" for i in range(5)]
    assert len(chunks) >= 2  # it came in pieces, as it was written
    code, done = await sl_api("GET", f"jobs/{job['id']}")
    assert done["state"] == "succeeded"


async def test_result_404_until_written(sl_api, sl_manager):
    code, job = await sl_api("POST", "jobs", {"command": SLEEP})
    assert code == 201
    code, data = await sl_api("GET", f"jobs/{job['id']}/result")
    assert code == 404 and data["error"].startswith(f"result: job {job['id']} has no result")
    payload = pickle.dumps({"loss": 0.25})
    job_dir = sl_manager.executor.job_dir(job["id"])
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "result.pkl").write_bytes(payload)  # unsigned: not the job's own
    code, data = await sl_api("GET", f"jobs/{job['id']}/result")
    assert code == 409 and "not written by job" in data["error"]
    from schedulearn.run import write_result

    write_result(payload, str(job_dir / "result.pkl"), key=sl_manager.executor.result_key(job["id"]))
    code, data = await sl_api("GET", f"jobs/{job['id']}/result", raw=True)
    assert code == 200 and pickle.loads(data) == {"loss": 0.25}
    await sl_api("DELETE", f"jobs/{job['id']}")
