"""`RemoteManager`: the extension's API answered by a standalone scheduler (`schedulearn serve`).

Configured with `SchedulearnApp.remote_url` / `remote_token`; the extension then runs no engine
of its own and forwards each call of the `schedulearn.service.Manager` protocol (the websocket
and log streams included). The remote server records the user its token belongs to.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

from schedulearn.joblogs import LOG_SIZE, NEXT_OFFSET
from schedulearn.service import ApiError
from tornado import httpclient, websocket

API_PATH = "schedulearn/api/"


class RemoteSubscription:
    def __init__(self, conn: Any):
        self.conn = conn
        self.closed = False

    def __aiter__(self) -> RemoteSubscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self.closed:
            msg = await self.conn.read_message()
            if msg is None:
                break
            event = json.loads(msg)
            if event.get("type") != "hello":
                return event
        raise StopAsyncIteration

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.conn.close()


class RemoteManager:
    """A `schedulearn.service.Manager` that forwards to a standalone server."""

    unavailable: str | None = None

    def __init__(self, url: str, token: str = "", timeout: float = 30.0):
        url = url if url.endswith("/") else url + "/"
        self.api = url if url.endswith(API_PATH) else url + API_PATH
        self.token = token
        self.timeout = timeout
        self.http = httpclient.AsyncHTTPClient()
        # streams (`_download`: a followed log, a result) pass through, never held: no 100 MB cap
        self.streams = httpclient.AsyncHTTPClient(force_instance=True, max_body_size=1 << 62)

    def start(self, loop: Any = None) -> None:
        pass

    async def stop(self) -> None:
        pass

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = f"token {self.token}"
        return h

    def _url(self, path: str, params: dict[str, Any] | None = None) -> str:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        return self.api + path + ("?" + urllib.parse.urlencode(query) if query else "")

    async def _fetch(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                     raw: bool = False, whole: bool = False, **kw: Any) -> Any:
        req = httpclient.HTTPRequest(
            self._url(path, params), method=method, headers=self._headers(),
            body=json.dumps(body) if body is not None else (b"" if method in ("POST", "PUT") else None),
            request_timeout=kw.pop("request_timeout", self.timeout), allow_nonstandard_methods=True, **kw)
        try:
            resp = await self.http.fetch(req, raise_error=False)
        except OSError as e:
            raise ApiError(f"remote: cannot reach {self.api} ({e})", 502) from None
        if resp.code == 599 or resp.code >= 400:
            raise self._error(resp.code, resp.body, resp.error)
        if whole:  # the response itself (its headers too)
            return resp
        return resp.body if raw else (json.loads(resp.body) if resp.body else None)

    def _error(self, code: int, body: bytes | None, error: Any = None) -> ApiError:
        """The remote's error, passed on: its one-line message, and its status where it is the
        caller's (4xx; 503: the remote's store is down, nothing changed, try again), else 502."""
        if code == 599:
            return ApiError(f"remote: cannot reach {self.api} ({error})", 502)
        try:
            message = json.loads(body or b"")["error"]
        except (ValueError, KeyError, TypeError):
            message = f"remote: HTTP {code}"
        return ApiError(message, code if code < 500 or code == 503 else 502)

    async def _download(self, path: str, params: dict[str, Any] | None = None) -> AsyncIterator[bytes]:
        """A large answer passed on as it comes, never held whole here: the remote's error (a
        4xx) is raised before anything is handed on, and an answer cut short upstream (a result
        that changed while it was sent) is raised at its end, so that ours is cut short too."""
        # a few chunks at most wait here: `streaming_callback=queue.put`, which tornado waits on,
        # reads the remote at the pace of whoever reads them
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=8)
        status: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def header(line: str) -> None:
            if line.startswith("HTTP/") and not status.done():
                status.set_result(int(line.split()[1]))

        req = httpclient.HTTPRequest(self._url(path, params), headers=self._headers(),
                                     request_timeout=24 * 3600, header_callback=header,
                                     streaming_callback=queue.put)
        fetch = asyncio.ensure_future(self.streams.fetch(req, raise_error=False))
        # None after the last chunk, once the fetch is over (however it ended)
        fetch.add_done_callback(lambda _: asyncio.ensure_future(queue.put(None)))
        first = await queue.get()
        code = status.result() if status.done() else 599
        if code != 200:
            body = b""
            while first is not None:
                body, first = body + first, await queue.get()
            try:
                resp = await fetch
            except Exception as e:  # (connection errors are raised, not answered)
                raise ApiError(f"remote: cannot reach {self.api} ({e})", 502) from None
            raise self._error(code if code != 599 else resp.code, body, resp.error)
        return self._passed_on(first, queue, fetch)

    async def _passed_on(self, first: bytes | None, queue: asyncio.Queue, fetch: Any) -> AsyncIterator[bytes]:
        chunk = first
        try:
            while chunk is not None:
                yield chunk
                chunk = await queue.get()
            try:
                resp = fetch.result()
            except Exception as e:  # the remote closed it before its end
                raise ApiError(f"remote: the answer was cut short ({e})", 502) from None
            if resp.code != 200 or resp.error is not None:
                raise ApiError(f"remote: the answer was cut short ({resp.error or resp.code})", 502)
        finally:  # ended early or late: the fetch stopped, its queue emptied (room for the None)
            fetch.cancel()
            with contextlib.suppress(BaseException):
                await fetch
            while not queue.empty():
                queue.get_nowait()

    async def policies(self) -> list[dict[str, str]]:
        return await self._fetch("GET", "policies")

    async def policy(self, user: str = "") -> dict[str, Any]:
        """The remote policy, and whether this server's token may switch it (`can_switch`)."""
        return await self._fetch("GET", "policy")

    async def set_policy(self, name: Any, user: str = "") -> dict[str, str]:
        return await self._fetch("PUT", "policy", {"policy": name})

    async def pause(self, reason: Any, user: str = "") -> dict[str, Any]:
        return await self._fetch("PUT", "pause", {"reason": reason})

    async def resume(self, user: str = "") -> dict[str, Any]:
        return await self._fetch("DELETE", "pause")

    async def gpus(self) -> dict[str, Any]:
        data = await self._fetch("GET", "gpus")
        if isinstance(data, dict) and "executor" in data:  # its paths are another machine's, maybe
            data["executor"] = "remote"
        return data

    async def submit(self, data: Any, user: str) -> dict[str, Any]:
        return await self._fetch("POST", "jobs", data)

    async def list_jobs(self, state: str | None = None, user: str | None = None, limit: Any = None,
                        viewer: str | None = None) -> dict:
        return await self._fetch("GET", "jobs", params={"state": state, "user": user, "limit": limit})

    async def list_jobs_json(self, state: str | None = None, user: str | None = None,
                             limit: Any = None, viewer: str | None = None) -> str:
        """The remote list as the remote server wrote it (passed on without re-encoding)."""
        params = {"state": state, "user": user, "limit": limit}
        return (await self._fetch("GET", "jobs", params=params, raw=True)).decode()

    async def get_job(self, job_id: Any, viewer: str | None = None) -> dict[str, Any]:
        return await self._fetch("GET", f"jobs/{job_id}")

    async def check_reader(self, job_id: Any, viewer: str) -> None:
        """Nothing here: the remote scheduler answers for this user's token (403 for a job of
        another user where it keeps jobs private)."""

    async def cancel(self, job_id: Any, user: str) -> dict[str, Any]:
        return await self._fetch("DELETE", f"jobs/{job_id}")

    async def script(self, job_id: Any) -> str:
        return (await self._fetch("GET", f"jobs/{job_id}/script", raw=True)).decode()

    async def logs(self, job_id: Any, tail: Any = None) -> str:
        return (await self._fetch("GET", f"jobs/{job_id}/logs", params={"tail": tail}, raw=True)).decode()

    async def log_page(self, job_id: Any, offset: Any) -> tuple[bytes, int, int]:
        resp = await self._fetch("GET", f"jobs/{job_id}/logs", params={"offset": offset}, whole=True)
        try:
            return resp.body, int(resp.headers[NEXT_OFFSET]), int(resp.headers[LOG_SIZE])
        except (KeyError, ValueError):
            raise ApiError(f"remote: {NEXT_OFFSET} and {LOG_SIZE} missing from the log's page", 502) from None

    async def follow_logs(self, job_id: Any, tail: Any = None) -> AsyncIterator[str]:
        await self.get_job(job_id)  # a 404 now rather than an empty stream
        return self._follow(job_id, tail)

    async def _follow(self, job_id: Any, tail: Any) -> AsyncIterator[str]:
        chunks = await self._download(f"jobs/{job_id}/logs", {"tail": tail, "follow": 1})
        decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a chunk may end mid-character
        try:
            async for chunk in chunks:
                if text := decoder.decode(chunk):
                    yield text
            if text := decoder.decode(b"", final=True):
                yield text
        finally:
            await chunks.aclose()

    async def result(self, job_id: Any) -> AsyncIterator[bytes]:
        """The remote's result, passed on as it comes (`_download`)."""
        return await self._download(f"jobs/{job_id}/result")

    async def shown(self, job_id: Any, offset: Any) -> dict[str, Any]:
        return await self._fetch("GET", f"jobs/{job_id}/shown", params={"offset": offset})

    async def subscribe(self, viewer: str | None = None) -> RemoteSubscription:
        ws_url = "ws" + self.api[len("http"):] + "events"
        req = httpclient.HTTPRequest(ws_url, headers=self._headers(), connect_timeout=self.timeout)
        try:
            conn = await websocket.websocket_connect(req)
        except (OSError, httpclient.HTTPClientError) as e:
            raise ApiError(f"remote: cannot open the events socket of {self.api} ({e})", 502) from None
        return RemoteSubscription(conn)

    async def hello(self) -> dict[str, Any]:
        policy = await self.policy()
        return {"type": "hello", "policy": policy["policy"], "remote": self.api}
