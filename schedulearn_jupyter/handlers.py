"""The API's handlers as tornado mixins, and the route table, shared by both servers: the
Jupyter extension binds them to Jupyter Server's authentication (`extension.py`), the standalone
`schedulearn serve` to its tokens (`serve.py`). Each handler is a few lines: read the request,
call the manager (`schedulearn.service.Manager`), write JSON. The binding supplies `manager`,
authentication and `user_name()`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from schedulearn.jobfiles import MAX_REQUEST_BYTES
from schedulearn.joblogs import LOG_SIZE, NEXT_OFFSET
from schedulearn.service import ApiError, Manager, store_failure
from tornado import iostream, web, websocket

log = logging.getLogger("schedulearn.server")

API_PREFIX = "schedulearn/api"
#: the largest request body accepted (a job spec with a bundled notebook cell fits easily)
MAX_BODY = MAX_REQUEST_BYTES
TEXT = "text/plain; charset=UTF-8"
JSON = "application/json; charset=UTF-8"


class ApiMixin:
    """JSON in and out; errors as `{"error": "<field>: <what is allowed>"}`."""

    manager: Manager

    def prepare(self):  # type: ignore[override]
        length = self.request.headers.get("Content-Length", "")
        too_long = length.isdigit() and int(length) > MAX_BODY
        if too_long or len(self.request.body or b"") > MAX_BODY:
            raise ApiError(f"body: at most {MAX_BODY} bytes", 413)
        return super().prepare()  # type: ignore[misc]

    def user_name(self) -> str:
        raise NotImplementedError

    def json_body(self) -> Any:
        return parse_json(self.request.body)

    def send_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(data))

    def finish_as(self, data: str | bytes, content_type: str) -> Any:
        """Finish with a body that is not JSON (the Jupyter base forces JSON otherwise)."""
        self.set_header("Content-Type", content_type)
        return self.finish(data)

    async def send_stream(self, chunks: Any, content_type: str) -> None:
        """Send `chunks` (an async iterator) as they come, at the client's pace (what is unsent
        stays where it is). A failure once the answer has begun cuts it short — the connection
        closed before its end, which the client reads as an error — never ends it well: a
        result that changed on the way, or a remote answer cut short, must not read as whole
        (tornado itself would end such an answer properly)."""
        self.set_header("Content-Type", content_type)
        begun = False
        try:
            async for chunk in chunks:
                self.write(chunk)
                await self.flush()
                begun = True
        except iostream.StreamClosedError:
            return  # the client went away
        except Exception as e:
            if not begun:
                raise  # nothing sent yet: answered as any error
            log.warning("%s %s: %s; answer cut short", self.request.method, self.request.path, e)
            self.request.connection.close()
            return
        finally:
            await chunks.aclose()
        self.finish_as(b"", content_type)

    def log_exception(self, typ, value, tb):  # type: ignore[override]
        if not log_answered(self, value):
            super().log_exception(typ, value, tb)  # type: ignore[misc]

    def write_error(self, status_code: int, **kwargs: Any) -> None:  # type: ignore[override]
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if exc is not None and not isinstance(exc, ApiError) and store_failure(exc):
            exc = ApiError(str(exc), 503)  # the store is down: nothing was changed, try again
        if isinstance(exc, ApiError):
            self.set_status(exc.status)
            message = str(exc)
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        else:
            message = self._reason  # type: ignore[attr-defined]
        self.clear_header("Content-Type")
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"error": message}))


def parse_json(body: bytes | None) -> Any:
    """A request body as JSON; `ApiError` (400) with one line when it is not, or when it nests
    deeper than the parser can follow (`[` x 100000 would otherwise be a `RecursionError`)."""
    try:
        return json.loads(body or b"null", parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(f"body: invalid JSON ({e})") from None
    except RecursionError:
        raise ApiError("body: invalid JSON (nested too deeply; a JobSpec nests 2 levels)") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def redact_uri(uri: str) -> str:
    """`uri` with the value of a `token` query argument replaced by `[secret]` (for logs)."""
    path, sep, query = uri.partition("?")
    if not sep or "token" not in query.lower():
        return uri
    parts = []
    for part in query.split("&"):
        name, eq, _value = part.partition("=")
        parts.append(f"{name}=[secret]" if eq and name.lower() in ("token", "_xsrf") else part)
    return path + "?" + "&".join(parts)


def log_answered(handler: Any, value: BaseException | None) -> bool:
    """Log an error the API answered on purpose (no traceback; the access log has the request's
    line) and say whether it was one: an `ApiError` or a `tornado.web.HTTPError` such as a
    refused token."""
    req = handler.request
    if isinstance(value, ApiError):
        log.debug("%s %s -> %s %s", req.method, redact_uri(req.uri), value.status, value)
        return True
    if isinstance(value, web.HTTPError):
        text = value.log_message % value.args if value.log_message and value.args else value.log_message
        # the access log has the request's line already (as a warning for a 4xx)
        log.debug("%d %s %s (%s)%s", value.status_code, req.method, redact_uri(req.uri), req.remote_ip,
                  f": {text}" if text else "")
        return True
    if store_failure(value):  # one line: the store's own message says what failed
        log.error("%s %s -> 503 %s", req.method, redact_uri(req.uri), value)
        return True
    return False


class PoliciesHandler(ApiMixin):
    @web.authenticated
    async def get(self):
        self.send_json(await self.manager.policies())


class PolicyHandler(ApiMixin):
    @web.authenticated
    async def get(self):
        self.send_json(await self.manager.policy(self.user_name()))

    @web.authenticated
    async def put(self):
        body = self.json_body()
        name = body.get("policy") if isinstance(body, dict) else None
        self.send_json(await self.manager.set_policy(name, self.user_name()))


class PauseHandler(ApiMixin):
    """An operator's pause of scheduling: PUT pauses (body `{"reason": "..."}`, optional),
    DELETE resumes; admins only."""

    @web.authenticated
    async def get(self):
        self.send_json({"paused": (await self.manager.policy(self.user_name())).get("paused")})

    @web.authenticated
    async def put(self):
        body = self.json_body() if self.request.body else {}
        if not isinstance(body, dict):
            raise ApiError("body: expected a JSON object, {\"reason\": \"...\"}")
        self.send_json(await self.manager.pause(body.get("reason"), self.user_name()))

    @web.authenticated
    async def delete(self):
        self.send_json(await self.manager.resume(self.user_name()))


class GpusHandler(ApiMixin):
    @web.authenticated
    async def get(self):
        self.send_json(await self.manager.gpus())


class JobsHandler(ApiMixin):
    @web.authenticated
    async def get(self):
        query = {k: self.get_query_argument(k, None) for k in ("state", "user", "limit")}
        self.finish_as(await self.manager.list_jobs_json(**query, viewer=self.user_name()), JSON)

    @web.authenticated
    async def post(self):
        job = await self.manager.submit(self.json_body(), self.user_name())
        self.set_header("Location", f"{self.request.path.rstrip('/')}/{job['id']}")
        self.send_json(job, 201)


class JobHandler(ApiMixin):
    @web.authenticated
    async def get(self, job_id: str):
        self.send_json(await self.manager.get_job(job_id, self.user_name()))

    @web.authenticated
    async def delete(self, job_id: str):
        self.send_json(await self.manager.cancel(job_id, self.user_name()))


class ScriptHandler(ApiMixin):
    """The script a job runs: job dicts carry its size only (`script_bytes`)."""

    @web.authenticated
    async def get(self, job_id: str):
        await self.manager.check_reader(job_id, self.user_name())
        self.finish_as(await self.manager.script(job_id), "text/x-python; charset=UTF-8")


class LogsHandler(ApiMixin):
    """The log: its last `tail` lines, a page of it from `offset` (the byte after the last
    page read: the next one's start is in `X-Schedulearn-Next-Offset`), all of it (sent a page
    at a time: a job that wrote gigabytes is never held in memory), or `follow` it."""

    @web.authenticated
    async def get(self, job_id: str):
        tail = self.get_query_argument("tail", None)
        offset = self.get_query_argument("offset", None)
        follow = self.get_query_argument("follow", "0").lower() in ("1", "true", "yes")
        await self.manager.check_reader(job_id, self.user_name())
        if offset is not None:
            if tail is not None or follow:
                raise ApiError("offset: a page of the log is read alone, without tail or follow")
            data, after, size = await self.manager.log_page(job_id, offset)
            self.set_header(NEXT_OFFSET, str(after))
            self.set_header(LOG_SIZE, str(size))
            self.finish_as(data, TEXT)
        elif follow:
            await self._stream(await self.manager.follow_logs(job_id, tail))
        elif tail is not None:
            self.finish_as(await self.manager.logs(job_id, tail), TEXT)
        else:
            await self._stream(self._pages(job_id, *await self.manager.log_page(job_id, 0)))

    async def _pages(self, job_id: str, data: bytes, after: int, size: int):
        """The log as it was at the first page: page after page, up to the size it had then."""
        while data:
            yield data
            if after >= size:
                return
            data, after, _ = await self.manager.log_page(job_id, after)

    async def _stream(self, chunks: Any) -> None:
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        await self.send_stream(chunks, TEXT)


class ResultHandler(ApiMixin):
    """The result, sent a block at a time (chunked): a result that changed while it was sent is
    cut short (no last chunk), which the client reads as an error, never as a whole result."""

    @web.authenticated
    async def get(self, job_id: str):
        await self.manager.check_reader(job_id, self.user_name())
        await self.send_stream(await self.manager.result(job_id), "application/octet-stream")


class ShownHandler(ApiMixin):
    """What a notebook cell's job has shown (figures, `display()`), from `offset` on, as it runs."""

    @web.authenticated
    async def get(self, job_id: str):
        await self.manager.check_reader(job_id, self.user_name())
        self.send_json(await self.manager.shown(job_id, self.get_query_argument("offset", "0")))


class OpenApiHandler(ApiMixin):
    @web.authenticated
    async def get(self):
        from .openapi import openapi_document

        self.send_json(openapi_document(self.api_base))

    @property
    def api_base(self) -> str:
        path = self.request.path
        return path[: -len("openapi.json")]


class NotFoundHandler(ApiMixin):
    """Anything else under the API prefix: a JSON 404 (for an authenticated caller)."""

    @web.authenticated
    async def get(self, *args):
        raise ApiError(f"path: no route {self.request.path}", 404)

    post = put = delete = patch = get


class EventsMixin:
    """The `events` websocket: a `hello`, then every job, policy and inventory event.
    Subclasses authenticate in `get` before calling `super().get()`."""

    manager: Manager
    subscription: Any = None
    _pump: Any = None

    def user_name(self) -> str:  # who subscribes (a shared scheduler hides others' private parts)
        raise NotImplementedError

    async def get(self, *args, **kwargs):
        if self.request.headers.get("Upgrade", "").lower() != "websocket":
            raise ApiError("events: a WebSocket endpoint; connect with 'Upgrade: websocket'", 400)
        if self.manager.unavailable:
            raise ApiError(f"scheduler: unavailable: {self.manager.unavailable}", 503)
        res = super().get(*args, **kwargs)  # type: ignore[misc]
        if res is not None:
            await res

    async def open(self, *args, **kwargs):
        import asyncio

        self.subscription = await self.manager.subscribe(self.user_name())
        hello = await self.manager.hello()
        self.write_message(json.dumps(hello))
        self._pump = asyncio.ensure_future(self._forward())

    async def _forward(self):
        try:
            async for event in self.subscription:
                self.write_message(json.dumps(event))
        except websocket.WebSocketClosedError:
            pass
        finally:
            self.close()

    def on_message(self, message):  # the socket is one-way; pings are answered by tornado
        pass

    def write_error(self, status_code: int, **kwargs: Any) -> None:  # JSON, not an HTML page
        ApiMixin.write_error(self, status_code, **kwargs)  # type: ignore[arg-type]

    def log_exception(self, typ, value, tb):  # type: ignore[override]
        # A refused socket (no token, not an upgrade) is one line, not a traceback.
        if not log_answered(self, value):
            super().log_exception(typ, value, tb)  # type: ignore[misc]

    def on_close(self):
        if self.subscription is not None:
            self.subscription.close()
        if self._pump is not None:
            self._pump.cancel()


#: (path under the API prefix, handler mixin) — the route table of both servers.
ROUTES: list[tuple[str, type]] = [
    (r"policies", PoliciesHandler),
    (r"policy", PolicyHandler),
    (r"pause", PauseHandler),
    (r"gpus", GpusHandler),
    (r"jobs", JobsHandler),
    (r"jobs/(\d+)", JobHandler),
    (r"jobs/(\d+)/script", ScriptHandler),
    (r"jobs/(\d+)/logs", LogsHandler),
    (r"jobs/(\d+)/result", ResultHandler),
    (r"jobs/(\d+)/shown", ShownHandler),
    (r"openapi\.json", OpenApiHandler),
]
