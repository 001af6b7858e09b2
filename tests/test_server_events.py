"""The `events` websocket: a job's whole life, policy switches and inventory updates."""

from __future__ import annotations

import asyncio
import json


async def read_until(ws, predicate, timeout: float = 30.0) -> list[dict]:
    """Messages up to and including the first one `predicate` accepts."""
    seen = []
    async with asyncio.timeout(timeout):
        while True:
            msg = await ws.read_message()
            assert msg is not None, f"socket closed; seen {seen}"
            event = json.loads(msg)
            seen.append(event)
            if predicate(event):
                return seen


async def connect(jp_ws_fetch):
    ws = await jp_ws_fetch("schedulearn", "api", "events")
    hello = json.loads(await ws.read_message())
    assert hello["type"] == "hello"
    return ws


async def test_a_jobs_whole_life(jp_ws_fetch, sl_api):
    events = await connect(jp_ws_fetch)
    code, job = await sl_api("POST", "jobs", {"name": "short", "command": ["python", "-c", "print(1)"]})
    assert code == 201
    seen = await read_until(events, lambda e: e["type"] == "job" and e["job"]["id"] == job["id"]
                            and e["job"]["state"] in ("succeeded", "failed", "cancelled"))
    mine = [e for e in seen if e["type"] == "job" and e["job"]["id"] == job["id"]]
    assert [e["event"] for e in mine] == ["submitted", "started", "succeeded"]
    assert [e["job"]["state"] for e in mine] == ["queued", "running", "succeeded"]
    assert mine[1]["job"]["gpus"] == 1 and mine[2]["job"]["exit_code"] == 0
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


async def test_cancel_is_pushed(jp_ws_fetch, sl_api):
    events = await connect(jp_ws_fetch)
    code, job = await sl_api("POST", "jobs", {"command": ["python", "-c", "import time; time.sleep(60)"]})
    await read_until(events, lambda e: e.get("event") == "started" and e["job"]["id"] == job["id"])
    code, _ = await sl_api("DELETE", f"jobs/{job['id']}")
    assert code == 200
    seen = await read_until(events, lambda e: e.get("event") == "cancelled")
    assert seen[-1]["job"]["id"] == job["id"] and seen[-1]["job"]["state"] == "cancelled"


async def test_policy_switch_is_pushed(jp_ws_fetch, sl_api):
    events = await connect(jp_ws_fetch)
    await sl_api("PUT", "policy", {"policy": "las"})
    seen = await read_until(events, lambda e: e["type"] == "policy", timeout=5)
    assert seen[-1]["policy"] == "las"


async def test_inventory_change_is_pushed(jp_ws_fetch, sl_api, sl_manager):
    events = await connect(jp_ws_fetch)
    sl_manager.executor.inventory.virtual_gpus = 6  # the host now has 6 (virtual) GPUs
    sl_manager.refresh_inventory()
    seen = await read_until(events, lambda e: e["type"] == "inventory", timeout=5)
    assert len(seen[-1]["nodes"][0]["gpus"]) == 6
    code, gpus = await sl_api("GET", "gpus")
    assert len(gpus["nodes"][0]["gpus"]) == 6
    # and a job may now take 6
    code, job = await sl_api("POST", "jobs", {"command": ["true"], "gpus": 6})
    assert code == 201, job


async def test_two_subscribers_both_get_everything(jp_ws_fetch, sl_api):
    events = await connect(jp_ws_fetch)
    other = await jp_ws_fetch("schedulearn", "api", "events")
    json.loads(await other.read_message())
    code, job = await sl_api("POST", "jobs", {"command": ["true"]})
    for ws in (events, other):
        seen = await read_until(ws, lambda e: e.get("event") == "succeeded")
        assert seen[-1]["job"]["id"] == job["id"]
    other.close()


async def test_job_dicts_carry_a_scripts_size_and_its_own_route_the_script(jp_ws_fetch, sl_api):
    """A notebook cell's job script (the cell, its `--files` and `--vars`, the runner) is 30 KB to
    4 MB, and every listing, poll and event carried it: a sidebar refresh with 200 cell jobs moved
    7 MB (benchmarks/bench_job_list.py). Job dicts now carry its size; `GET jobs/{id}/script` the
    script, byte for byte."""
    events = await connect(jp_ws_fetch)
    script = "print('é' * 3)  # " + "x" * 40_000 + "\n"
    code, job = await sl_api("POST", "jobs", {"name": "cell", "script": script})
    assert code == 201
    seen = await read_until(events, lambda e: e["type"] == "job" and e["job"]["id"] == job["id"]
                            and e["job"]["state"] == "succeeded")
    _, listed = await sl_api("GET", "jobs")
    _, polled = await sl_api("GET", f"jobs/{job['id']}")
    dicts = [job, polled, *[j for j in listed["jobs"] if j["id"] == job["id"]],
             *[e["job"] for e in seen if e["type"] == "job" and e["job"]["id"] == job["id"]]]
    assert len(dicts) == 6  # the answer to POST, GET job, the list, 3 events
    for d in dicts:
        assert "script" not in d["spec"] and d["script_bytes"] == len(script.encode()) == 40_020
        assert len(json.dumps(d)) < 3000
    r = await sl_api("GET", f"jobs/{job['id']}/script", whole=True)
    assert r.code == 200 and r.body.decode() == script
    assert r.headers["Content-Type"] == "text/x-python; charset=UTF-8"

    code, cmd = await sl_api("POST", "jobs", {"command": ["python", "-c", "print(1)"]})
    assert "script_bytes" not in cmd and cmd["spec"]["command"] == ["python", "-c", "print(1)"]
    assert await sl_api("GET", f"jobs/{cmd['id']}/script") == (
        404, {"error": f"script: job {cmd['id']} runs a command, not a script: python -c 'print(1)'"})
    assert (await sl_api("GET", "jobs/999/script"))[0] == 404
