"""`schedulearn.nofollow`: what the (root) server opens in a job's directory is a regular file, never
a link or a FIFO a job put in its place; log reading treats those as no log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from schedulearn import joblogs, nofollow


def test_regular_files_read_and_write(tmp_path: Path):
    nofollow.write_text(tmp_path / "a.txt", "hello\n")
    assert nofollow.read_text(tmp_path / "a.txt") == "hello\n"
    with open(tmp_path / "a.txt", "ab", opener=nofollow.opener) as f:
        f.write(b"more\n")
    assert joblogs.tail(tmp_path / "a.txt", 1) == "more\n"


def test_a_link_is_not_followed_for_reading_or_writing(tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_text("top secret\n")
    link = tmp_path / "log.txt"
    link.symlink_to(secret)
    with pytest.raises(nofollow.NotAFile):
        nofollow.read_bytes(link)
    with pytest.raises(nofollow.NotAFile):
        open(link, "ab", opener=nofollow.opener)  # noqa: SIM115
    with pytest.raises(nofollow.NotAFile):
        nofollow.write_text(link, "overwritten")
    assert secret.read_text() == "top secret\n"
    assert joblogs.tail(link) == "" and joblogs.tail(link, 5) == ""
    assert list(joblogs.follow(link, lambda: True)) == []


def test_a_fifo_is_refused_without_blocking(tmp_path: Path):
    fifo = tmp_path / "log.txt"
    os.mkfifo(fifo)
    with pytest.raises(nofollow.NotAFile):
        nofollow.read_bytes(fifo)  # a plain open() would wait for a writer forever
    with pytest.raises(nofollow.NotAFile):
        open(fifo, "ab", opener=nofollow.opener)  # noqa: SIM115
    assert joblogs.tail(fifo) == ""


def test_owner_check(tmp_path: Path):
    path = tmp_path / "pid"
    path.write_text("{}")
    assert nofollow.read_text(path, owner=os.geteuid()) == "{}"
    with pytest.raises(PermissionError):
        nofollow.read_text(path, owner=os.geteuid() + 1)
