"""Bad input at the API boundary, through a real Jupyter server with the extension, on SQLite and
on PostgreSQL: a spec that could never launch, a mistyped one, or a body nested too deeply is a 400
with one line naming the field, and admits nothing (no job, every GPU free); a refused websocket
is logged in one line, without a traceback."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from schedulearn.client import Client, ClientError
from tornado.httpclient import HTTPClientError

from tests.fixtures.jupyter import ROOT  # noqa: F401  (the fixtures' module: pytest-jupyter loaded)

SHELL_NAME = "env: names must match [A-Za-z_][A-Za-z0-9_]* (a shell identifier), got "
NUL = "NUL characters (\\u0000) are not allowed"
SURROGATE = "lone surrogate characters (\\ud800-\\udfff) are not allowed"

# (raw JSON body, the start of the error). Raw bytes: `\udfff` must reach the server as JSON's
# escape, the way a client that sends a lone surrogate sends it.
BAD: list[tuple[bytes, str]] = [
    (b'{"command": ["true"], "env": {"A=B": "1"}}', SHELL_NAME + "'A=B'"),
    (b'{"command": ["true"], "env": {"1BAD": "1"}}', SHELL_NAME + "'1BAD'"),
    (b'{"command": ["true"], "env": {"A\\u0000B": "1"}}', SHELL_NAME + "'A\\x00B'"),
    (b'{"command": ["true"], "env": {"OK": "a\\u0000"}}', "env: " + NUL + " in a value"),
    (b'{"command": ["true", "a\\u0000"]}', "command: " + NUL + " in an argument"),
    (b'{"command": ["true"], "name": "a\\u0000"}', "name: control characters (tab, newline, escape, ...)"),
    (b'{"command": ["true"], "name": "a\\u001b[2J"}', "name: control characters (tab, newline, escape, ...) "
     "are not allowed, got 'a\\x1b[2J'"),
    (b'{"command": ["true"], "workdir": "."}', "workdir: expected an absolute path (on the machine the job "
     "runs on), got '.'"),
    (b'{"command": ["echo", "\\udfff"]}', "command: " + SURROGATE),
    (b'{"script": "print(\\"\\ud800\\")"}', "script: " + SURROGATE),
    (b'{"command": ["true"], "env": {"\\udfff": "1"}}', SHELL_NAME + "'\\udfff'"),
    (b'{"command": ["true"], "env": {"OK": "\\udfff"}}', "env: " + SURROGATE),
    (b'{"command": ["true"], "name": "\\udfffx"}', "name: " + SURROGATE),
    (b'{"command": ["true"], "duration": 5}', "duration: a simulation-only field, allowed with the 'sim'"),
    (b'{"duration": 5}', "duration: a simulation-only field"),
    (b'{"application": "bogus"}', "application: a simulation-only field"),
    (b'{"command": ["true"], "gpus": "2"}', "gpus: expected an integer >= 1 or 'auto', got '2'"),
    (b'{"command": ["true"], "gpus": 2.0}', "gpus: expected an integer >= 1 or 'auto', got 2.0"),
    (b'{"command": ["true"], "adaptive_batch": "yes"}', "adaptive_batch: expected true or false, got 'yes'"),
    (b"[" * 100_000, "body: invalid JSON (nested too deeply"),
    (b'{"command": ' + b"[" * 100_000, "body: invalid JSON (nested too deeply"),
    (b"{\"a\": " * 100_000, "body: invalid JSON (nested too deeply"),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_kind(request) -> str:
    return request.param


@pytest.fixture
def schedulearn_traits(tmp_path, store_kind, request) -> dict[str, Any]:
    store = (request.getfixturevalue("postgres_fresh_url") if store_kind == "postgresql"
             else f"sqlite:///{tmp_path / 'jobs.db'}")
    return {"virtual_gpus": 2, "executor": "local", "job_root": str(tmp_path / "jobs"), "store_url": store,
            "tick": 0.2, "inventory_interval": 0, "cancel_grace": 2.0}


async def test_bad_specs_are_400s_and_admit_nothing(sl_api, sl_manager, store_kind):
    for body, error in BAD:
        code, data = await sl_api("POST", "jobs", body)
        assert code == 400, (body[:80], code, data)
        assert data["error"].startswith(error), (body[:80], data["error"])
        assert "\n" not in data["error"]
    code, data = await sl_api("GET", "jobs")
    assert code == 200 and data["jobs"] == []
    assert sl_manager.store.list_jobs() == []
    code, data = await sl_api("GET", "gpus")
    assert [g["job_id"] for g in data["nodes"][0]["gpus"]] == [None, None]
    # the server is well: a good job (text the stores can hold, non-ASCII included) runs
    code, job = await sl_api("POST", "jobs", {"name": "ok ✓", "command": ["python", "-c", "print('é')"],
                                              "env": {"_GOOD1": "x=y ✓"}})
    assert code == 201, job
    for _ in range(300):
        code, job = await sl_api("GET", f"jobs/{job['id']}")
        if job["state"] in ("succeeded", "failed"):
            break
        await asyncio.sleep(0.1)
    assert job["state"] == "succeeded", job


@pytest.mark.parametrize("store_kind", ["sqlite"])
async def test_nested_json_elsewhere_is_400(sl_api, store_kind):
    code, data = await sl_api("PUT", "policy", b"[" * 100_000)
    assert code == 400 and data["error"].startswith("body: invalid JSON (nested too deeply")


@pytest.mark.parametrize("store_kind", ["sqlite"])
async def test_a_refused_websocket_is_one_log_line(jp_ws_fetch, caplog, store_kind):
    caplog.set_level(logging.DEBUG)
    for how in ({"headers": {"Authorization": "token wrong-secret"}},
                {"headers": {"Authorization": ""}, "params": {"token": "wrong-secret"}}):
        with pytest.raises(HTTPClientError) as e:
            await jp_ws_fetch("schedulearn", "api", "events", **how)
        assert e.value.code == 403
    await asyncio.sleep(0.2)
    text = "\n".join(r.getMessage() for r in caplog.records)
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert not tracebacks, tracebacks
    assert "TypeError" not in text and "Traceback" not in text
    assert "wrong-secret" not in text


def test_serve_logs_no_token_and_no_traceback_for_refused_sockets(tmp_path):
    """`schedulearn serve`'s log (access log included): `?token=` values redacted, a refused
    websocket one line."""
    import urllib.error
    import urllib.request

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    from tests.test_server_live import Serve

    secret, wrong = "the-real-secret-42", "a-wrong-guess-17"
    s = Serve(tmp_path / "serve", "--token", secret, "--virtual-gpus", "1", "--tick", "0.2",
              "--log-level", "debug")
    try:
        api = s.url + "schedulearn/api/"
        with urllib.request.urlopen(f"{api}jobs?token={secret}", timeout=10) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{api}jobs?limit=1&token={wrong}", timeout=10)
        assert e.value.code == 403

        async def sockets() -> None:
            ws = api.replace("http", "ws") + "events"
            for query in ("", f"?token={wrong}"):
                with pytest.raises(HTTPClientError) as e:
                    await websocket_connect(HTTPRequest(ws + query))
                assert e.value.code == 403
            conn = await websocket_connect(HTTPRequest(f"{ws}?token={secret}"))
            assert '"hello"' in await conn.read_message()
            conn.close()

        asyncio.run(sockets())
    finally:
        s.stop()
    log = (tmp_path / "serve" / "serve.log").read_text()
    assert secret not in log and wrong not in log, log
    assert "token=[secret]" in log  # the requests are logged, their tokens not
    assert "Traceback" not in log and "TypeError" not in log, log
    refused = [ln for ln in log.splitlines() if "events" in ln and "WARNING 403" in ln]
    assert len(refused) == 2, log
    assert "DEBUG 200 GET /schedulearn/api/jobs?token=[secret] (127.0.0.1)" in log, log  # debug: every read


def test_serve_logs_changes_and_refusals_not_every_read(tmp_path):
    """At the default level a read that succeeded is not logged: clients poll (a queue widget each
    second), and a lab's server logged a line for each, around the clock. Changes, refusals and
    errors are."""
    from tests.test_server_live import Serve

    s = Serve(tmp_path / "serve", "--token", "t", "--virtual-gpus", "1", "--executor", "sim")
    try:
        c = Client(s.url, "t")
        for _ in range(5):
            c.jobs()
            c.policy()
        job = c.submit({"duration": 0.1})
        with pytest.raises(ClientError):
            c.jobs(state="bogus")
        c.set_policy("las")
    finally:
        s.stop()
    lines = (tmp_path / "serve" / "serve.log").read_text().splitlines()
    access = [ln.split(" ", 2)[2] for ln in lines if "/schedulearn/api/" in ln and "API at" not in ln
              and "403 GET /schedulearn/api/policy" not in ln]  # (the start-up probe, without a token)
    assert [a.rsplit(" ", 1)[0] for a in access] == [
        "INFO 201 POST /schedulearn/api/jobs (127.0.0.1)",
        "WARNING 400 GET /schedulearn/api/jobs?state=bogus (127.0.0.1)",
        "INFO 200 PUT /schedulearn/api/policy (127.0.0.1)"], lines
    assert job["state"] == "queued"
