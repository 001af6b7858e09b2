"""How the CLI and the magics follow a job's log: page by page from where the last read stopped
(`follow_pages`), so that a wait rides out a server restart (`Reconnecting`) without losing or
repeating a byte; the live versions are in test_server_live.py and magics/test_magics.py."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from schedulearn import joblogs
from schedulearn.client import ClientError, Reconnecting, _tail_until, follow_pages


class FileServer:
    """The two calls `follow_pages` makes (`log_page`, `job`), answered from a log file; every
    `flaky`-th call fails as an unreachable server does, and the job ends after `polls` polls
    (writing one more line each poll until then)."""

    def __init__(self, path: Path, polls: int = 5, flaky: int = 0):
        self.path, self.polls, self.flaky, self.calls = path, polls, flaky, 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.flaky and self.calls % self.flaky == 0:
            raise ClientError("url: cannot reach http://x/schedulearn/api/ (Connection refused)")

    def log_page(self, job_id: int, offset: int = 0) -> tuple[bytes, int, int]:
        self._maybe_fail()
        return joblogs.page(self.path, offset, size=100)  # small pages: many requests

    def job(self, job_id: int) -> dict:
        self._maybe_fail()
        if self.polls:
            self.polls -= 1
            with open(self.path, "a") as f:
                f.write(f"written at poll {self.polls}\n" + "\r" + "bar " * 30)
            return {"id": job_id, "state": "running"}
        return {"id": job_id, "state": "succeeded"}


def test_a_log_followed_through_failing_calls_comes_whole_and_once(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("".join(f"line {i} é\n" for i in range(200)))
    said: list[str] = []
    server = FileServer(log, polls=6, flaky=3)
    call = Reconnecting(say=said.append, sleep=lambda s: None)
    got = "".join(follow_pages(server, 1, call=call, poll=0.0))  # type: ignore[arg-type]
    assert got == log.read_bytes().decode()  # (read_text would read the carriage returns as newlines)
    assert said[0].startswith("lost touch with the server (url: cannot reach") and \
        said[1].startswith("the server answers again") and len(said) % 2 == 0, said


@pytest.mark.parametrize("lines", [0, 1, 3, 50, 10_000])
def test_the_tail_read_back_page_by_page_is_the_servers_tail(tmp_path: Path, lines: int) -> None:
    rng = random.Random(lines)
    log = tmp_path / "log.txt"
    parts = []
    for i in range(400):
        parts.append(rng.choice([f"line {i}\n", f"\rbar {i}" * rng.randint(1, 5), "é" * rng.randint(0, 9),
                                 "\n"]))
    log.write_text("".join(parts))
    size = log.stat().st_size
    server = FileServer(log, polls=0)
    assert _tail_until(server, 1, lines, size) == joblogs.tail(log, lines)  # type: ignore[arg-type]


def test_the_tail_of_an_endless_line_is_bounded_as_the_servers(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_bytes(b"first\n" + b"\rx" * (joblogs.TAIL_BYTES // 2 + 10) + b"\nlast\n")
    server = FileServer(log, polls=0)
    server.log_page = lambda job_id, offset=0: joblogs.page(log, offset)  # type: ignore[method-assign]
    assert _tail_until(server, 1, 2, log.stat().st_size) == joblogs.tail(log, 2)  # type: ignore[arg-type]


def test_a_refusal_is_not_waited_out_and_a_server_gone_too_long_is_given_up() -> None:
    call = Reconnecting(say=lambda text: None, sleep=lambda s: None)

    def refused() -> None:
        raise ClientError("job: no job with id 9 (HTTP 404)", 404)

    with pytest.raises(ClientError, match=r"^job: no job with id 9 \(HTTP 404\)$"):
        call(refused)
    clock = iter(range(0, 10_000, 100))
    gone = Reconnecting(say=lambda text: None, patience=600, sleep=lambda s: None)

    def unreachable() -> None:
        raise ClientError("url: cannot reach http://x/ (Connection refused)")

    import schedulearn.client as client_module

    real = client_module.time.monotonic
    client_module.time.monotonic = lambda: float(next(clock))  # type: ignore[assignment]
    try:
        with pytest.raises(ClientError, match=r"\(Connection refused\); gave up after 10 min$"):
            gone(unreachable)
    finally:
        client_module.time.monotonic = real  # type: ignore[assignment]
    assert ClientError("x", 503).transient and ClientError("x").transient
    assert not ClientError("x", 409).transient
