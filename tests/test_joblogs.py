"""`schedulearn.joblogs` on real files: pages, bounded tails, following a log past a page and an
endless progress-bar line, and cuts that never split a UTF-8 character."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from schedulearn import joblogs
from schedulearn.joblogs import PAGE, TAIL_BYTES


def test_pages_read_the_log_in_order_and_say_where_the_next_starts(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    content = b"x" + "é".encode() * (PAGE + 1000)  # multi-byte characters across page ends
    log.write_bytes(content)
    got, offset, pages = b"", 0, 0
    while True:
        data, offset, size = joblogs.page(log, offset)
        assert size == len(content) and len(data) <= PAGE
        if not data:
            break
        got += data
        pages += 1
    assert got == content and offset == len(content) and pages == 3
    assert joblogs.page(log, len(content) + 10) == (b"", len(content) + 10, len(content))
    assert joblogs.page(tmp_path / "absent.txt", 5) == (b"", 5, 0)
    with pytest.raises(ValueError, match="offset: expected a byte offset >= 0, got -1"):
        joblogs.page(log, -1)
    # decoded page by page with an incremental decoder, the text is whole
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    text, offset = "", 0
    while data := joblogs.page(log, offset, 4097)[0]:
        text += decoder.decode(data)
        offset += len(data)
    assert text == content.decode()


def test_tail_counts_lines_at_newlines_only(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("first\nepoch 1\r 10%\r 50%\r100%\nsaved\x0cpage\nlast")
    assert joblogs.tail(log, 2) == "saved\x0cpage\nlast"
    assert joblogs.tail(log, 3) == "epoch 1\r 10%\r 50%\r100%\nsaved\x0cpage\nlast"
    assert joblogs.tail(log, 10) == log.read_bytes().decode()
    assert joblogs.tail(log, None) == log.read_bytes().decode()


def test_tail_reads_a_bounded_end_of_an_endless_line(tmp_path: Path) -> None:
    """A progress bar redrawn with carriage returns for hours is one line of many MiB: a tail
    reads at most `TAIL_BYTES` of it, starting on a whole character, not the whole file."""
    log = tmp_path / "log.txt"
    bar = "".join(f"\rstep {i} ±" for i in range(TAIL_BYTES // 8))  # ~1.5 × TAIL_BYTES
    log.write_text("started\n" + bar)
    assert log.stat().st_size > TAIL_BYTES * 1.2
    out = joblogs.tail(log, 5)
    assert 0 < len(out.encode()) <= TAIL_BYTES
    assert bar.endswith(out) and "started" not in out and "\ufffd" not in out
    # lines before an endless line within the bound are kept whole
    log.write_text("a\n" * 10 + "b" * 1000)
    assert joblogs.tail(log, 3) == "a\na\n" + "b" * 1000


def test_follow_reads_past_a_page_and_passes_an_endless_line_in_pieces(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    lines = [f"line {i:07d}\n" for i in range(3 * PAGE // 13)]  # ~3 pages of ended lines
    bar = "".join(f"\r{i:09d}%" for i in range(PAGE // 5))  # an endless line of 2 pages
    log.write_text("".join(lines) + bar + "\ndone")
    out = list(joblogs.follow(log, done=lambda: True))
    assert "".join(out) == log.read_bytes().decode()  # all of it, once, in order, though done at once
    assert out[: len(lines)] == lines
    pieces = out[len(lines):-1]  # the progress bar's endless line: in pieces, as read
    assert len(pieces) >= 3 and "".join(pieces) == bar + "\n"
    assert all(len(p) <= 2 * PAGE for p in out)


def test_follow_holds_a_line_until_it_ends_but_not_a_progress_bar(tmp_path: Path) -> None:
    """Readers get whole lines (a line caught half-written is held until its newline), but a
    progress bar's drawings as they come: its line has carriage returns and may never end."""
    log = tmp_path / "log.txt"
    log.write_text("ready\nloading")
    done = False
    reader = joblogs.follow(log, lambda: done, interval=0.01)
    assert next(reader) == "ready\n"
    with log.open("a") as f:
        f.write(" done\n\rstep 1")
    assert next(reader) == "loading done\n" and next(reader) == "\rstep 1"
    with log.open("a") as f:
        f.write("\rstep 2")
    assert next(reader) == "\rstep 2"
    done = True
    with log.open("a") as f:
        f.write("\nend")
    assert list(reader) == ["\n", "end"]


async def test_afollow_is_follow_for_asyncio(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("".join(f"row {i}\n" for i in range(PAGE // 4)) + "tail")
    got = [chunk async for chunk in joblogs.afollow(log, done=lambda: True)]
    assert "".join(got) == log.read_bytes().decode() and got[-1] == "tail"


@pytest.mark.parametrize(("data", "cut"), [
    (b"abc", 3), ("aé".encode(), 3), ("aé".encode()[:2], 1), ("a€".encode()[:3], 1),
    ("a€".encode()[:2], 1), ("a😀".encode()[:4], 1), ("a😀".encode(), 5), (b"", 0),
    (b"\x80\x80", 2),  # no lead byte to be found: nothing kept back
])
def test_utf8_boundary(data: bytes, cut: int) -> None:
    assert joblogs.utf8_boundary(data) == cut
    if data and data[0] < 0x80:
        data[:cut].decode()  # whole characters


def test_a_marker_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """Output that left its line open (`print(..., end="")`, a progress bar) does not swallow
    the scheduler's marker: a reader that looks for lines starting with it finds it."""
    log = tmp_path / "log.txt"
    joblogs.append_line(log, "=== schedulearn: start #0 ===\n")  # an empty log: nothing before
    with log.open("ab") as f:
        f.write(b"done\n")
    joblogs.append_line(log, "=== schedulearn: resized ===\n")
    with log.open("ab") as f:
        f.write(b"epoch 1\repoch 2")
    joblogs.append_line(log, "=== schedulearn: exit of run #0: code 0 ===\n")
    assert log.read_bytes().decode().split("\n") == [
        "=== schedulearn: start #0 ===", "done", "=== schedulearn: resized ===", "epoch 1\repoch 2",
        "=== schedulearn: exit of run #0: code 0 ===", ""]


def test_lines_since_start_counts_newlines_of_the_last_run_only(tmp_path: Path) -> None:
    """What a run re-attached after a restart already wrote, counted as the Docker daemon counts
    the lines it sends again: at newlines only. (`str.splitlines` also cut at each of a progress
    bar's carriage returns, so a re-attached job's next lines, as many as the bar's drawings,
    were left out of its log.)"""
    log = tmp_path / "log.txt"
    assert joblogs.lines_since_start(log) == 0  # no log yet
    bar = "".join(f"\rtraining {i}/500" for i in range(500))
    log.write_text("=== schedulearn: start #0 of job 1 ===\nold\nold\n"
                   "=== schedulearn: exit of run #0: code 0 ===\n"
                   "=== schedulearn: start #1 of job 1 ===\n"
                   f"[h0] a\n[h1] b\n[h0] {bar}\n[h0] {'x' * 200_000}\n"
                   "=== schedulearn: resized ===\n[h1] c\f\v\x1c\x85\n[h0] open", newline="")
    assert joblogs.lines_since_start(log, "[h0] ") == 3  # its open line is not counted
    assert joblogs.lines_since_start(log, "[h1] ") == 2
    assert joblogs.lines_since_start(log) == 5  # one host: every line but the markers
