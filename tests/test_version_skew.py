"""A client newer than its server: a notebook kernel upgraded, a shared server not.

The older server is a stand-in (an HTTP server answering as the Schedulearn of before `cell`
did: `cell: unknown field; allowed: …`): no older release runs here to start. The client is the
real one, over real HTTP, and so is the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from schedulearn import __version__
from schedulearn.client import Client, ClientError

OLD_FIELDS = ["name", "command", "script", "gpus", "env"]


class OldServer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(200, {"executor": "local", "nodes": []})  # (`gpus`: the CLI's look at the executor)

    def do_POST(self) -> None:  # noqa: N802
        spec = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        extra = [k for k in spec if k not in OLD_FIELDS]
        if extra:
            self._answer(400, {"error": f"{extra[0]}: unknown field; allowed: {', '.join(OLD_FIELDS)}"})
        else:
            self._answer(201, {"id": 1, "state": "queued", "spec": spec})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def old_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), OldServer)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def test_a_field_the_older_server_lacks_is_said_to_be_the_servers_age(old_server: str) -> None:
    c = Client(old_server, "t")
    with pytest.raises(ClientError) as e:
        c.submit({"name": "x", "command": ["true"], "cell": {"source": "1"}})
    assert str(e.value) == (f"cell: the server at {old_server}/schedulearn/api/ does not know this field: it "
                            f"runs an older Schedulearn than this client ({__version__}); upgrade "
                            "schedulearn where the server runs, then restart it (HTTP 400)")
    assert e.value.status == 400
    # a typo neither knows is the server's to name, with the fields it allows
    with pytest.raises(ClientError, match=r"^colour: unknown field; allowed: name, command, script, "
                                          r"gpus, env \(HTTP 400\)$"):
        c.submit({"name": "x", "command": ["true"], "colour": "red"})
    assert c.submit({"name": "x", "command": ["true"]})["state"] == "queued"


def test_the_cli_says_it_in_one_line(old_server: str) -> None:
    cli = subprocess.run([sys.executable, "-m", "schedulearn.cli", "submit", "--url", old_server,
                          "--token", "t", "--deadline", "2h", "--", "true"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert cli.returncode != 0
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1, cli.stderr
    assert "deadline: the server at " in lines[0] and "older Schedulearn" in lines[0], cli.stderr
