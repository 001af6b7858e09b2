"""The OpenAPI document: valid, complete (every route, nothing more), and true (real responses
match its schemas); schemathesis fuzzes a live server from it and finds no 5xx."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import jsonschema
import pytest
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from schedulearn_jupyter.extension import make_handlers
from schedulearn_jupyter.openapi import openapi_document


def route_to_doc_path(pattern: str) -> str | None:
    path = pattern.removeprefix("schedulearn/api/")
    if "(?:" in path:
        return None  # the catch-all 404
    return "/" + path.replace(r"(\d+)", "{job_id}").replace(r"\.", ".")


def test_document_is_valid_openapi():
    validate(openapi_document())


def test_document_covers_exactly_the_routes():
    routes = {route_to_doc_path(p) for p, _ in make_handlers()} - {None}
    assert routes == set(openapi_document()["paths"])


class Checker:
    def __init__(self, doc: dict):
        self.doc = doc
        self.registry = Registry().with_resource("urn:doc", Resource.from_contents(
            doc, default_specification=DRAFT202012))

    def check(self, path: str, method: str, status: int, body) -> None:
        op = self.doc["paths"][path][method.lower()]
        assert str(status) in op["responses"], f"{method} {path}: status {status} not documented"
        content = op["responses"][str(status)].get("content", {})
        if "application/json" in content:
            pointer = "/".join(["", "paths", path.replace("~", "~0").replace("/", "~1"), method.lower(),
                                "responses", str(status), "content", "application~1json", "schema"])
            ref = {"$ref": "urn:doc#" + pointer}
            jsonschema.Draft202012Validator(ref, registry=self.registry).validate(body)


async def test_real_responses_match_the_document(sl_api, sl_manager):
    code, doc = await sl_api("GET", "openapi.json")
    assert code == 200
    assert doc["servers"][0]["url"].endswith("/schedulearn/api")
    c = Checker(doc)
    calls = [
        ("GET", "/policies", "policies", None),
        ("GET", "/policy", "policy", None),
        ("PUT", "/policy", "policy", {"policy": "las"}),
        ("PUT", "/policy", "policy", {"policy": "nope"}),
        ("GET", "/gpus", "gpus", None),
        ("POST", "/jobs", "jobs", {"command": ["python", "-c", "import time; time.sleep(30)"], "gpus": 2}),
        ("POST", "/jobs", "jobs", {"command": ["x"], "gpus": -1}),
        ("GET", "/jobs", "jobs", None),
        ("GET", "/jobs/{job_id}", "jobs/1", None),
        ("GET", "/jobs/{job_id}", "jobs/99", None),
        ("GET", "/gpus", "gpus", None),
        ("GET", "/jobs/{job_id}/result", "jobs/1/result", None),
        ("GET", "/jobs/{job_id}/shown", "jobs/1/shown", None),
        ("GET", "/jobs/{job_id}/shown", "jobs/1/shown?offset=-1", None),
        ("DELETE", "/jobs/{job_id}", "jobs/1", None),
        ("DELETE", "/jobs/{job_id}", "jobs/99", None),
        ("GET", "/openapi.json", "openapi.json", None),
    ]
    statuses = set()
    for method, doc_path, path, body in calls:
        code, data = await sl_api(method, path, body)
        c.check(doc_path, method, code, data)
        statuses.add(code)
        if path == "jobs" and method == "POST" and code == 201:
            # wait until it runs so that GET gpus shows a job_id (a non-null, typed field)
            for _ in range(100):
                if sl_manager.engine.get(data["id"]).state.value == "running":
                    break
                import asyncio

                await asyncio.sleep(0.05)
    assert {200, 201, 400, 404} <= statuses
    # a cancelled job, then 409
    await sl_api("DELETE", "jobs/1")
    for _ in range(200):
        if sl_manager.engine.get(1).state.value == "cancelled":
            break
        import asyncio

        await asyncio.sleep(0.05)
    code, data = await sl_api("DELETE", "jobs/1")
    assert code == 409
    c.check("/jobs/{job_id}", "DELETE", code, data)
    code, data = await sl_api("GET", "jobs")
    c.check("/jobs", "GET", code, data)
    assert data["jobs"][0]["state"] == "cancelled"


def test_checker_catches_a_wrong_response():
    c = Checker(openapi_document())
    with pytest.raises(jsonschema.ValidationError):
        c.check("/jobs", "GET", 200, {"jobs": [{"id": "one"}]})
    with pytest.raises(AssertionError):
        c.check("/gpus", "GET", 500, {})


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(tmp_path, live_server):
    """Fuzz every operation (not the log stream, which waits for jobs to end) of a live server
    with the simulated executor (fuzzed commands must not run): zero 5xx, and every answer's
    status, content type and body as documented."""
    exe = shutil.which("schemathesis", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert exe, "schemathesis is a test dependency"
    live_server.traits.update(executor="sim")
    live_server.start()
    proc = subprocess.run(
        [exe, "run", live_server.url + "schedulearn/api/openapi.json",
         "-H", f"Authorization: token {live_server.token}",
         "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                     "response_schema_conformance",
         "--exclude-operation-id", "getJobLogs", "-n", "15", "--request-timeout", "30",
         "--seed", "1", "--max-time", "45"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path)
    tail = proc.stdout[-4000:]
    (tmp_path / "schemathesis.txt").write_text(proc.stdout + proc.stderr)
    failures = proc.stdout[proc.stdout.find("FAILURES"):][:6000] if "FAILURES" in proc.stdout else tail
    assert proc.returncode == 0, failures
    assert " passed" in tail and "failure" not in tail.lower().split("summary")[-1], tail
    assert " 500 " not in live_server.output()
    codes = json.dumps(tail)
    assert "Server error" not in codes
