"""The auth gate (as in the JupyterLab extension template): every route the extension registers
refuses a request without a token, and does nothing for it."""

from __future__ import annotations

import json
import re

import pytest
from tornado.httpclient import HTTPClientError
from tornado.routing import PathMatches, Router

METHODS = ("get", "post", "put", "delete", "patch")


def _walk(router: Router):
    for rule in getattr(router, "rules", []):
        target = rule.target
        if isinstance(target, Router):
            yield from _walk(target)
        elif isinstance(target, type) and isinstance(rule.matcher, PathMatches):
            yield rule.matcher.regex.pattern, target


def extension_routes(web_app) -> list[tuple[str, type]]:
    return [(p, h) for p, h in _walk(web_app.default_router)
            if h.__module__.startswith("schedulearn_jupyter") or "schedulearn/api" in p]


def example_path(pattern: str) -> str:
    path = pattern.rstrip("$")
    path = path.replace(r"(\d+)", "1").replace("(?:/.*)?", "/anything").replace(r"\.", ".")
    assert not re.search(r"[()\\*?+\[\]]", path), f"cannot build a URL for {pattern}"
    return path


def own_methods(handler: type) -> list[str]:
    from tornado.web import RequestHandler

    return [m for m in METHODS if getattr(handler, m, None) is not getattr(RequestHandler, m)]


async def test_every_route_needs_a_token(jp_serverapp, http_server_client, sl_api, sl_manager):
    code, _ = await sl_api("POST", "jobs", {"command": ["true"]})  # so that jobs/1 exists
    assert code == 201
    routes = extension_routes(jp_serverapp.web_app)
    paths = {example_path(p) for p, _ in routes}
    base = jp_serverapp.base_url + "schedulearn/api/"
    for name in ("policies", "policy", "gpus", "jobs", "jobs/1", "jobs/1/logs", "jobs/1/result",
                 "jobs/1/shown", "events", "openapi.json", "anything"):
        assert any(p.startswith(base) and p.endswith(name) for p in paths), f"route {name} not registered"
    checked = 0
    for pattern, handler in routes:
        url = example_path(pattern)
        for method in own_methods(handler):
            body = json.dumps({"command": ["true"], "policy": "las"}) if method in ("post", "put", "patch") \
                else None
            with pytest.raises(HTTPClientError) as e:
                await http_server_client.fetch(url, method=method.upper(), body=body,
                                               allow_nonstandard_methods=True, raise_error=True)
            what = f"{method.upper()} {url} answered {e.value.code}"
            assert e.value.code in (401, 403), f"{what} without a token"
            # and with a wrong token
            with pytest.raises(HTTPClientError) as e:
                await http_server_client.fetch(url, method=method.upper(), body=body,
                                               headers={"Authorization": "token wrong"},
                                               allow_nonstandard_methods=True, raise_error=True)
            what = f"{method.upper()} {url} answered {e.value.code}"
            assert e.value.code in (401, 403), f"{what} to a bad token"
            checked += 1
    assert checked >= 12
    # nothing happened on the refused requests
    assert [j.id for j in sl_manager.store.list_jobs()] == [1]
    assert sl_manager.engine.policy.name == "fifo"
    assert sl_manager.engine.get(1).state.value != "cancelled"


async def test_websocket_needs_a_token(jp_ws_fetch):
    with pytest.raises(HTTPClientError) as e:
        await jp_ws_fetch("schedulearn", "api", "events", headers={"Authorization": ""})
    assert e.value.code == 403
    ws = await jp_ws_fetch("schedulearn", "api", "events")
    hello = json.loads(await ws.read_message())
    assert hello["type"] == "hello" and hello["policy"] == "fifo"
    ws.close()


def test_a_tokens_file_an_editor_began_with_a_byte_order_mark_is_read(tmp_path):
    """`--tokens` as some editors save JSON (a UTF-8 byte-order mark first): read as written,
    not refused as `Unexpected UTF-8 BOM`."""
    import argparse

    from schedulearn_jupyter.serve import load_tokens

    path = tmp_path / "tokens.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"alice-token": "alice", "bob-token": "bob"}).encode())
    path.chmod(0o600)
    args = argparse.Namespace(tokens=path, token=None, user=None)
    assert load_tokens(args) == {"alice-token": "alice", "bob-token": "bob"}
