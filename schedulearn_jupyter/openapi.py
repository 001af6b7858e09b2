"""The OpenAPI 3.1 document of the API (served as `openapi.json`). The JobSpec schema is the core
model's own (pydantic), so the document cannot drift from what the server validates."""

from __future__ import annotations

from functools import cache
from typing import Any

from schedulearn import __version__, policies
from schedulearn.deadlines import STATUSES
from schedulearn.model import JobSpec, JobState

STATES = [s.value for s in JobState]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_NULLABLE_NUM = {"type": ["number", "null"]}
_NULLABLE_INT = {"type": ["integer", "null"]}

_ALLOC = {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}}

JOB = {
    "type": "object",
    "required": ["id", "spec", "name", "user", "state", "submit_time", "gpus", "alloc", "restarts",
                 "reason"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "spec": _ref("JobSpec"),
        "name": {"type": "string"},
        "user": {"type": "string"},
        "state": {"type": "string", "enum": STATES},
        "submit_time": {"type": "number"},
        "start_time": _NULLABLE_NUM,
        "end_time": _NULLABLE_NUM,
        "gpus": {"type": "integer", "minimum": 0},
        "alloc": _ALLOC,
        "last_alloc": {**_ALLOC, "description": "the allocation the job held last (kept after it ends)"},
        "releasing": {**_ALLOC, "description": "GPUs a shrink gave up, held until the old run exited"},
        "restarts": {"type": "integer", "minimum": 0},
        "exit_code": _NULLABLE_INT,
        "reason": {"type": "string"},
        "attained_gpu_s": {"type": "number"},
        "run_s": {"type": "number"},
        "script_bytes": {"type": "integer", "minimum": 0,
                         "description": "a job that runs a script: its size; the spec leaves the script "
                                        "out (a notebook cell's is 30 KB to 4 MB), GET jobs/{job_id}/script "
                                        "has it"},
        "progress": {"type": "number", "minimum": 0, "maximum": 1,
                     "description": "fraction of its work done, as the job reports it"},
        "eta_s": {"type": "number", "minimum": 0,
                  "description": "estimated seconds left on the GPUs it has"},
        "eta_basis": {"type": "string", "enum": ["progress", "history"],
                      "description": "what eta_s comes from: the job's progress and rate, or "
                                     "similar finished jobs"},
        "silent_s": {"type": "number", "minimum": 0,
                     "description": "a running job that stopped reporting: seconds since its last report "
                                    "(or its start on its GPUs), once past 3 min and 10 times its gap "
                                    "between reports"},
        "deadline": {"type": "number", "description": "finish by (seconds since the epoch), as submitted"},
        "files_removed": {"type": "number",
                          "description": "when the job's directory (log, result, checkpoints) was removed "
                                         "(seconds since the epoch; keep_job_dirs): its logs and result "
                                         "then answer 404"},
        "deadline_status": {"type": "string", "enum": list(STATUSES),
                            "description": "the scheduler's estimate: on_track, at_risk (it needs more "
                                           "GPUs than it has), will_miss (no size makes it), unknown; "
                                           "met or missed once it ended"},
        "deadline_left_s": {"type": "number", "description": "seconds to the deadline (negative: past)"},
        "missed_by_s": {"type": "number", "minimum": 0,
                        "description": "how late a job that finished after its deadline was"},
        "private": {"type": "boolean",
                    "description": "another user's job on a shared scheduler (serve --tokens): its "
                                   "spec's env values and a failed run's reason read '(hidden)', "
                                   "and its script, log and result answer 403"},
    },
}

GPU = {
    "type": "object",
    "required": ["index", "uuid", "name", "memory_total_mb", "memory_used_mb", "utilization", "job_id"],
    "properties": {
        "index": {"type": "integer"},
        "uuid": {"type": "string"},
        "name": {"type": "string"},
        "memory_total_mb": {"type": "integer"},
        "memory_used_mb": {"type": "integer"},
        "utilization": {"type": ["number", "null"],
                        "description": "percent; null where it is not known (Slurm nodes)"},
        "job_id": _NULLABLE_INT,
        "held_by": {"type": ["string", "null"],
                    "description": "what holds it outside the scheduler (a Slurm job of another user)"},
    },
}

NODES = {
    "type": "object",
    "required": ["nodes"],
    "properties": {"nodes": {"type": "array", "items": {
        "type": "object",
        "required": ["name", "virtual", "gpus"],
        "properties": {
            "name": {"type": "string"},
            "virtual": {"type": "boolean"},
            "healthy": {"type": "boolean"},
            "gpus": {"type": "array", "items": _ref("Gpu")},
        },
    }}, "executor": {"type": "string", "description": "What runs the jobs: local, docker, slurm or sim; "
                                                     "remote from a Jupyter server that forwards to a "
                                                     "standalone scheduler (how the CLI picks a job's "
                                                     "default working directory)"},
        "note": {"type": "string", "description": "Only when there are no GPUs: why, and how to "
                                                   "declare virtual ones (every submission is refused "
                                                   "until there are GPUs)"}},
}

JOB_ID = {"name": "job_id", "in": "path", "required": True,
          "schema": {"type": "integer", "minimum": 1}, "description": "The job's id"}

E400 = _error("Invalid input: `{\"error\": \"<field>: <what is allowed>\"}`")
E403 = _error("No or a wrong token; or (DELETE) the job is another user's and the caller no admin; or "
              "(POST, shared set-up) "
              "the caller has no OS account to run jobs as; or (logs, result, shared set-up) the "
              "job is another user's")
E404 = _error("No such job (or no result yet)")
E413 = _error("Request body too large")
E503 = _error("The scheduler cannot answer: its store is unreachable, or (a Jupyter server) another "
              "scheduler holds the store's lease; the message says which")


def _spec_schemas() -> dict[str, Any]:
    schema = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    deadline = schema["properties"]["deadline"]
    deadline["anyOf"].insert(1, {"type": "string", "examples": ["2h", "90m", "18:00", "2026-11-24 18:00"]})
    deadline["description"] = ("Finish by: seconds since the epoch, or (on submission) a duration from "
                               "now, a time today or an ISO 8601 date and time, read on the server's "
                               "clock; at most 30 days ahead. The qoe policy plans for it.")
    schema["properties"]["time_limit"]["description"] = (
        "Seconds of run time (its runs together; not the queue) after which the scheduler stops the "
        "job as a cancel does (SIGTERM, the grace period, SIGKILL); it then fails with exit code 124.")
    return {"JobSpec": schema, **defs}


@cache
def _document() -> dict[str, Any]:
    auth = [{"token": []}]
    paths: dict[str, Any] = {
        "/policies": {"get": {
            "operationId": "listPolicies", "summary": "The scheduling policies that can be chosen",
            "responses": {"200": _json({"type": "array", "items": _ref("PolicyInfo")}, "Policies"),
                          "403": E403},
        }},
        "/policy": {
            "get": {"operationId": "getPolicy",
                    "summary": "The policy in force, and whether the caller may switch it",
                    "responses": {"200": _json(_ref("PolicyState"), "The policy"), "403": E403}},
            "put": {"operationId": "setPolicy", "summary": "Switch the policy (from the next round on)",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": {
                        "type": "object", "required": ["policy"],
                        "properties": {"policy": {"type": "string",
                                                  "enum": [p["name"] for p in policies.available()]}},
                    }}}},
                    "responses": {"200": _json(_ref("Policy"), "The new policy"),
                                  "400": _error("Unknown policy (the message lists the names), or not "
                                                "JSON"),
                                  "403": _error("No or a wrong token; or the caller is not one of the "
                                                "scheduler's admins (`can_switch` is false)"),
                                  "413": E413}},
        },
        "/pause": {
            "get": {"operationId": "getPause", "summary": "Whether scheduling is paused: who, since, why",
                    "responses": {"200": _json(_ref("PauseState"), "The pause, or null"), "403": E403}},
            "put": {"operationId": "pause",
                    "summary": "Pause scheduling: no queued job starts and no running job is preempted or "
                               "resized until resumed; running jobs run on (admins)",
                    "requestBody": {"required": False, "content": {"application/json": {"schema": {
                        "type": "object", "properties": {"reason": {
                            "type": "string", "maxLength": 200,
                            "description": "why, for everyone to see (one line)"}}}}}},
                    "responses": {"200": _json(_ref("PauseState"), "The pause"),
                                  "400": _error("A reason that is not one line of text of at most 200 "
                                                "characters, or not JSON"),
                                  "403": _error("No or a wrong token; or the caller is not one of the "
                                                "scheduler's admins"), "413": E413}},
            "delete": {"operationId": "resume", "summary": "Resume scheduling (a round at once; admins)",
                       "responses": {"200": _json(_ref("PauseState"), "null: scheduling"),
                                     "403": _error("No or a wrong token; or the caller is not one of the "
                                                   "scheduler's admins")}},
        },
        "/gpus": {"get": {
            "operationId": "listGpus", "summary": "The GPU inventory and which job holds each GPU",
            "responses": {"200": _json(_ref("Nodes"), "Nodes and their GPUs"), "403": E403},
        }},
        "/jobs": {
            "get": {
                "operationId": "listJobs", "summary": "Jobs, oldest first",
                "parameters": [
                    {"name": "state", "in": "query", "required": False,
                     "schema": {"type": "string", "enum": STATES}},
                    {"name": "user", "in": "query", "required": False, "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 0},
                     "description": "Only the newest `limit` jobs"},
                ],
                "responses": {"200": _json({"type": "object", "required": ["jobs"],
                                            "properties": {"jobs": {"type": "array", "items": _ref("Job")}}},
                                           "The jobs"),
                              "400": E400, "403": E403},
            },
            "post": {
                "operationId": "submitJob",
                "summary": "Queue a job (the caller's user name is recorded as spec.user)",
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": _ref("JobSpec")}}},
                "responses": {"201": _json(_ref("Job"), "The queued job"), "400": E400, "403": E403,
                              "413": E413},
            },
        },
        "/jobs/{job_id}": {
            "parameters": [JOB_ID],
            "get": {"operationId": "getJob", "summary": "One job",
                    "responses": {"200": _json(_ref("Job"), "The job"), "403": E403, "404": E404}},
            "delete": {"operationId": "cancelJob", "summary": "Cancel a job",
                       "description": "A job's user may cancel it, and so may the scheduler's named admins "
                                      "(`--admins`): the job's reason then says `cancelled by <admin> (an "
                                      "admin)`.",
                       "responses": {"200": _json(_ref("Job"), "The job (cancelled, or stopping)"),
                                     "403": _error("No or a wrong token; or the job is another user's and "
                                                   "the caller is not an admin"), "404": E404,
                                     "409": _error("The job has already finished")}},
        },
        "/jobs/{job_id}/script": {
            "parameters": [JOB_ID],
            "get": {
                "operationId": "getJobScript",
                "summary": "The script the job runs (a notebook cell's: the cell with its files and "
                           "variables and the runner); job dicts carry its size only, script_bytes",
                "responses": {"200": {"description": "The script",
                                      "content": {"text/x-python": {"schema": {"type": "string"}}}},
                              "403": E403, "404": _error("No such job, or the job runs a command")},
            },
        },
        "/jobs/{job_id}/logs": {
            "parameters": [JOB_ID],
            "get": {
                "operationId": "getJobLogs", "summary": "The job's log (all runs of it)",
                "parameters": [
                    {"name": "tail", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 0}, "description": "Only the last N lines"},
                    {"name": "follow", "in": "query", "required": False,
                     "schema": {"type": "integer", "enum": [0, 1]},
                     "description": "1: stream the log as it grows until the job ends"},
                    {"name": "offset", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 0},
                     "description": "A page of the log (at most 1 MiB) from this byte on; the next "
                                    "page's offset and the log's size are in the headers "
                                    "(alone: not with tail or follow)"},
                ],
                "responses": {"200": {"description": "The log text (a page of it with offset; it "
                                                     "may end inside a UTF-8 character)",
                                      "headers": {
                                          "X-Schedulearn-Next-Offset": {
                                              "description": "with offset: where the next page starts",
                                              "schema": {"type": "integer"}},
                                          "X-Schedulearn-Log-Size": {
                                              "description": "with offset: the log's size in bytes",
                                              "schema": {"type": "integer"}}},
                                      "content": {"text/plain": {"schema": {"type": "string"}}}},
                              "400": E400, "403": E403, "404": E404},
            },
        },
        "/jobs/{job_id}/result": {
            "parameters": [JOB_ID],
            "get": {
                "operationId": "getJobResult",
                "summary": "The pickled result the job's own run wrote and signed (job_dir/result.pkl; "
                           "the magics use it)",
                "responses": {"200": {"description": "Pickle bytes",
                                      "content": {"application/octet-stream": {
                                          "schema": {"type": "string", "format": "binary"}}}},
                              "403": E403, "404": E404,
                              "409": _error("A result.pkl is there but this job's run did not write it "
                                            "(no valid signature): refused")},
            },
        },
        "/jobs/{job_id}/shown": {
            "parameters": [JOB_ID],
            "get": {
                "operationId": "getJobShown",
                "summary": "What a notebook cell's job has shown (its figures and display() calls) as it "
                           "runs, from a byte offset of its live record on: the records its own run signed",
                "parameters": [{"name": "offset", "in": "query", "required": False,
                                "schema": {"type": "integer", "minimum": 0},
                                "description": "Where to read from: 0, or the last answer's next"}],
                "responses": {"200": _json({
                    "type": "object", "required": ["items", "next"],
                    "properties": {
                        "items": {"type": "array", "items": {
                            "type": "object", "required": ["run", "at", "bundle"],
                            "properties": {
                                "run": {"type": "string", "description": "The run (process) that showed it"},
                                "at": {"type": "integer", "minimum": 0,
                                       "description": "Its place among what the run showed (an update: "
                                                      "the place it replaces)"},
                                "bundle": {"type": "object",
                                           "description": "Its MIME bundle, as Jupyter's display_data "
                                                          "(images base64)"}}}},
                        "next": {"type": "integer", "description": "The next page's offset"}}},
                    "A page of records (none yet: an empty list, next = offset)"),
                    "400": E400, "403": E403, "404": E404},
            },
        },
        "/events": {"get": {
            "operationId": "events",
            "summary": "WebSocket: a `hello`, then job state changes, policy changes and inventory "
                       "updates as JSON messages (`type`: job | policy | inventory)",
            "responses": {"101": {"description": "Switching to the WebSocket protocol"},
                          "400": _error("Not a WebSocket upgrade request"), "403": E403},
        }},
        "/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document",
            "responses": {"200": _json({"type": "object"}, "The OpenAPI document"), "403": E403},
        }},
    }
    for item in paths.values():
        for method, op in item.items():
            if method != "parameters":
                op["security"] = auth
                if item is not paths["/openapi.json"]:
                    op["responses"]["503"] = E503
    return {
        "openapi": "3.1.0",
        "info": {"title": "Schedulearn API", "version": __version__,
                 "description": "Schedule deep-learning jobs on shared GPUs. Authenticate with the "
                                "Jupyter server's (or `schedulearn serve`'s) token: "
                                "`Authorization: token <TOKEN>`."},
        "paths": paths,
        "components": {
            "securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": "Authorization",
                                          "description": "`token <TOKEN>`"}},
            "schemas": {
                **_spec_schemas(),
                "Job": JOB,
                "Gpu": GPU,
                "Nodes": NODES,
                "Policy": {"type": "object", "required": ["policy"],
                           "properties": {"policy": {"type": "string"}}},
                "PolicyState": {"type": "object", "required": ["policy", "can_switch"],
                                "properties": {"policy": {"type": "string"},
                                               "can_switch": {"type": "boolean", "description":
                                                              "whether the caller may switch the policy "
                                                              "(an admin; everyone where none are set)"},
                                               "admin": {"type": "boolean", "description":
                                                         "whether the caller is one of the scheduler's "
                                                         "named admins (`--admins`), who may also cancel "
                                                         "anyone's job"},
                                               "user": {"type": "string", "description":
                                                        "the caller's Schedulearn user name (whose jobs "
                                                        "the sidebar notifies about)"},
                                               "plans_deadlines": {"type": "boolean", "description":
                                                                   "whether the policy plans for jobs' "
                                                                   "deadlines (qoe, edf); under the "
                                                                   "others they are only shown"},
                                               "paused": _ref("Paused")}},
                "Paused": {"type": ["object", "null"],
                           "description": "an admin's pause of scheduling, or the scheduler's own (by "
                                          "'schedulearn': the job root's disk is full), which has `until`",
                           "properties": {"by": {"type": "string"},
                                          "since": {"type": "number", "description": "epoch seconds"},
                                          "reason": {"type": "string"},
                                          "until": {"type": "string",
                                                    "description": "the scheduler's own pause: when "
                                                                   "it ends by itself"}}},
                "PauseState": {"type": "object", "required": ["paused"],
                               "properties": {"paused": _ref("Paused")}},
                "PolicyInfo": {"type": "object", "required": ["name", "description"],
                               "properties": {"name": {"type": "string"},
                                              "description": {"type": "string"}}},
                "Error": {"type": "object", "required": ["error"],
                          "properties": {"error": {"type": "string"}}},
            },
        },
    }


def openapi_document(api_base: str = "/schedulearn/api/") -> dict[str, Any]:
    """The document, with `servers` pointing at `api_base` (the API's root path or URL)."""
    doc = dict(_document())
    doc["servers"] = [{"url": api_base.rstrip("/")}]
    return doc
