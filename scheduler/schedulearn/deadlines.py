"""QoE targets as times: "trained by 18:00" or "within 2 hours".

A job's deadline (`JobSpec.deadline`) is absolute: seconds since the epoch live, virtual seconds
in simulation. Front-ends turn what users type into it with `parse` (`2h`, `90m`, `1h30m`, `45s`,
`2d`, `1d12h`, `1w` relative to now; `18:00` today; `2026-11-24 18:00` or ISO 8601, each with a UTC
offset if wanted: `18:00Z`, `2026-11-24 18:00 +01:00`), and the engine
refuses a deadline in the past or more than `HORIZON_S` ahead (`check`: one line naming the field).

What users read (`describe`): `on track`, `at risk` (it can still make it with more GPUs),
`will miss` (the scheduler's estimate says it cannot, even on all the GPUs it may use), `met`,
`missed by 12 min` — the statuses `estimates.deadline.status` computes.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from .model import MAX_TIME_LIMIT_S, SpecError

#: the furthest a deadline may be, seconds after submission (30 days)
HORIZON_S = 30 * 86400.0
#: the statuses a deadline can have, as the API spells them
STATUSES = ("on_track", "at_risk", "will_miss", "unknown", "met", "missed")

_NUM = r"(\d+(?:\.\d+)?)\s*"  # a number, then a unit: its letter or its word (2h, 2 hours, 2 hrs)
_DURATION = re.compile(rf"^\s*(?:{_NUM}w(?:eeks?|ks?)?)?\s*(?:{_NUM}d(?:ays?)?)?\s*"
                       rf"(?:{_NUM}h(?:ours?|rs?)?)?\s*"
                       rf"(?:{_NUM}m(?:in(?:ute)?s?)?)?\s*(?:{_NUM}s(?:ec(?:ond)?s?)?)?\s*$", re.IGNORECASE)
_UNIT_S = (7 * 86400, 86400, 3600, 60, 1)  # the seconds of _DURATION's units, in its order
#: a UTC offset after a time (`Z`, `UTC`, `+01:00`, `-0500`), typed with or without a space
_OFFSET = r"(?:Z|UTC|[+-]\d{2}(?::?\d{2})?)"
_CLOCK = re.compile(rf"^\s*(\d{{1,2}}):(\d{{2}})(?::(\d{{2}}))?\s*({_OFFSET})?\s*$",  # 18:00, 18:00:30 UTC
                    re.IGNORECASE)
_DATE = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")  # a date without a time of day
ALLOWED = "a duration (2h, 90m, 1h30m, 2d), a time today (18:00) or a date and time (2026-11-24 18:00)"


def _seconds(m: re.Match) -> float:
    """The seconds of a `_DURATION` match."""
    return sum(float(g) * unit for g, unit in zip(m.groups(), _UNIT_S, strict=True) if g)


def _zone(text: str | None) -> timezone | None:
    """The time zone of a `_OFFSET` (None: none given, the server's local time)."""
    if not text:
        return None
    if text.upper() in ("Z", "UTC"):
        return timezone.utc
    digits = text[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + int(digits[2:] or 0)
    return timezone(timedelta(minutes=minutes if text[0] == "+" else -minutes))


def parse(text: str, now: float | None = None) -> float:
    """Absolute deadline (epoch seconds) from what a user typed; `SpecError` (one line) if it
    cannot be read or is not in the future within the horizon."""
    now = time.time() if now is None else now
    raw = (text or "").strip()
    value: float | None = None
    if raw.startswith("-") and (m := _DURATION.match(raw[1:])) and any(m.groups()):
        raise SpecError(f"deadline: {raw} is a duration back in the past; expected a time after "
                        "submission, such as 2h or 90m from now")
    m = _DURATION.match(raw)
    if raw and m and any(m.groups()):
        if not _seconds(m):
            raise SpecError(f"deadline: {raw} from now is no time at all; expected a time after "
                            "submission, such as 2h or 90m from now")
        value = now + _seconds(m)
    elif (c := _CLOCK.match(raw)) is not None:
        hour, minute, second = int(c.group(1)), int(c.group(2)), int(c.group(3) or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise SpecError(f"deadline: {raw!r} is not a time of day; expected {ALLOWED}")
        try:  # today where the offset says, else in the server's local time
            zone = _zone(c.group(4))
        except ValueError:  # (+25:00)
            raise SpecError(f"deadline: cannot read {raw!r}; expected {ALLOWED}") from None
        today = datetime.fromtimestamp(now, zone).replace(hour=hour, minute=minute, second=second,
                                                          microsecond=0)
        value = today.timestamp()
        if value <= now:
            raise SpecError(f"deadline: {raw} today has passed; give a date and time "
                            f"({datetime.fromtimestamp(now + 86400, zone):%Y-%m-%d} {raw}) or a duration")
    elif _DATE.match(raw):  # midnight at its start, when "by Tuesday" means Tuesday evening
        raise SpecError(f"deadline: {raw} is a date without a time of day; give one too "
                        f"({raw} 18:00), or a duration")
    else:
        try:
            value = datetime.fromisoformat(re.sub(r"\s*UTC$", "+00:00", raw, flags=re.IGNORECASE)).timestamp()
        except (ValueError, OverflowError, OSError):
            raise SpecError(f"deadline: cannot read {raw!r}; expected {ALLOWED}") from None
    check(value, now)
    return value


def check(deadline: float, now: float) -> None:
    """A deadline must be after `now` and at most `HORIZON_S` later."""
    if deadline <= now:
        raise SpecError(f"deadline: {_when(deadline, now)} is in the past (now {_when(now, now)}); "
                        "expected a time after submission")
    if deadline - now > HORIZON_S:
        raise SpecError(f"deadline: {_when(deadline, now)} is more than {HORIZON_S / 86400:.0f} days "
                        "ahead; expected a time within 30 days of submission")


def resolve(value: object, now: float) -> object:
    """A deadline as an API request may give it: a number (epoch seconds) unchanged, a string
    read by `parse` against `now` (the server's clock: `2h` is two hours after submission)."""
    return parse(value, now) if isinstance(value, str) else value


def _when(t: float, now: float) -> str:
    if abs(now) < 1e8:  # virtual (simulated) time: seconds from the start
        return f"t={t:.0f}s"
    try:
        return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{t:.0f} s since the epoch"


def fmt_minutes(seconds: float) -> str:
    """`40 s`, `1 min 29 s` (under 10 min), `12 min`, `1 h 05 min`; from a day on `2 d 03 h` (as
    the sidebar: `2d 3h`)."""
    s = round(abs(seconds))
    if s < 60:
        return f"{s} s"
    if s < 600:  # seconds still count: `1 min 29 s`, not `1 min` (nor 59.6 s as `60 s`)
        return f"{s // 60} min {s % 60:02d} s" if s % 60 else f"{s // 60} min"
    m = round(s / 60)
    if m < 60:
        return f"{m} min"
    h = m // 60
    return f"{h} h {m % 60:02d} min" if h < 24 else f"{h // 24} d {h % 24:02d} h"


def parse_duration(text: str, option: str = "--timeout") -> float:
    """Seconds from a duration as typed: a number of seconds (`90`) or with units (`90s`, `10m`,
    `2h`, `1h30m`, `2d`); `SpecError` naming `option` otherwise."""
    raw = (text or "").strip()
    try:
        value = float(raw)
    except ValueError:
        m = _DURATION.match(raw)
        value = _seconds(m) if raw and m and any(m.groups()) else -1.0
    if not value > 0 or value == float("inf"):
        raise SpecError(f"{option}: expected a duration > 0 such as 90, 90s, 10m, 2h or 1h30m, got {text!r}")
    return value


def parse_timeout(text: str, option: str = "--timeout") -> float:
    """A job's time limit as typed (`parse_duration`), at most `model.MAX_TIME_LIMIT_S` (a year):
    past it, one line in the user's own words (it said `time_limit: ... got 34560000.0` of
    `--timeout 400d`)."""
    value = parse_duration(text, option)
    if value > MAX_TIME_LIMIT_S:
        raise SpecError(f"{option}: expected a duration of at most a year (365d), got {text!r}")
    return value


#: options whose value may be typed with a leading minus (`--deadline -5m`): argparse would read
#: it as an option and answer "expected one argument"; `attach_values` keeps it the value
VALUE_OPTIONS = ("--deadline", "--timeout", "--since")


_DATE_TIME = re.compile(rf"\d{{4}}-\d{{2}}-\d{{2}}[ T]\d{{1,2}}:\d{{2}}(:\d{{2}}(\.\d+)?)?( ?{_OFFSET})?",
                        re.IGNORECASE)
#: a number and a word of time that is no unit here (`1 month`): one value, for its error to name
_TIME_WORDS = re.compile(r"\d+(\.\d+)? (months?|mos?|years?|yrs?|fortnights?)", re.IGNORECASE)
_MAX_WORDS = 10  # "1 w 1 d 2 h 30 m 10 s"


def _one_value(words: list[str]) -> bool:
    """Whether these words, joined by spaces, are one value: a date and time (with its UTC
    offset), a time of day and its offset, or a duration (or one in units no option reads)."""
    text = " ".join(words)
    if _DATE_TIME.fullmatch(text) or _TIME_WORDS.fullmatch(text) or _CLOCK.match(text):
        return True
    m = _DURATION.match(text)
    return bool(m and any(m.groups()))


def _words(argv: list[str], i: int, first: list[str]) -> int:
    """How many words from `argv[i]` on continue the value `first` starts (0: none): the longest
    run that makes one value with it."""
    for n in range(min(_MAX_WORDS, len(argv) - i), 0, -1):
        more = argv[i:i + n]
        if "--" not in more and _one_value(first + more):
            return n
    return 0


def attach_values(argv: list[str], options: tuple[str, ...] = VALUE_OPTIONS) -> list[str]:
    """`argv` with `--deadline -5m` written `--deadline=-5m` (for each of `options` followed by a
    value that starts with a minus and a digit), so that the value reaches its own check and
    its one-line error; and a value typed as several words without quotes (`--deadline
    2026-11-24 18:00`, as the help and the errors write it, or `--deadline 2 hours`) kept one,
    `--deadline=2026-11-24 18:00`. Nothing after `--` is touched: a job's command goes there
    (`schedulearn submit [options] -- COMMAND`); one given without `--` that has such an option
    of its own gets it in the `--option=value` form, which argparse, click and getopt read the
    same."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        name, eq, value = arg.partition("=")
        if name in options and eq and (n := _words(argv, i + 1, [value])):
            out.append(" ".join(argv[i:i + 1 + n]))  # --deadline=2026-11-24 18:00
            i += 1 + n
            continue
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if arg in options and nxt and nxt != "--" and (n := _words(argv, i + 2, [nxt])):
            out.append(f"{arg}={' '.join(argv[i + 1:i + 2 + n])}")
            i += 2 + n
            continue
        if arg in options and re.match(r"-\d", nxt):
            out.append(f"{arg}={nxt}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def unplanned_note(client: Any, switch: str) -> str | None:
    """The note for a job just submitted with a deadline when the server's policy does not plan
    for deadlines (`GET policy`'s `plans_deadlines`; None when it does, or cannot be asked):
    the deadline is then only watched. `switch`: how this front-end switches the policy."""
    try:
        info = client.policy_info()
    except Exception:  # a note is not worth failing a submission that went through
        return None
    if not isinstance(info, dict) or info.get("plans_deadlines", True):
        return None
    return (f"note: the {info.get('policy')} policy does not plan for deadlines: this one is only "
            f"watched (on track, at risk, met or missed); the qoe policy plans for it ({switch})")


def describe(status: str | None, missed_by_s: float | None = None) -> str:
    """What a user reads for a deadline status."""
    if status == "missed" and missed_by_s is not None:
        return f"missed by {fmt_minutes(missed_by_s)}"
    return {"on_track": "on track", "at_risk": "at risk", "will_miss": "will miss", "met": "met",
            "missed": "missed", "unknown": "no estimate yet"}.get(status or "", "")


def deadline_text(job: dict, now: float | None = None) -> str:
    """One phrase on a job dict's deadline (empty without one), for `schedulearn ls`, the job
    widget and the text views: `deadline in 1 h 05 min, at risk`, `deadline met`,
    `deadline missed by 12 min`, `deadline passed 3 min ago`."""
    deadline = job.get("deadline", (job.get("spec") or {}).get("deadline"))
    if deadline is None:
        return ""
    status = job.get("deadline_status")
    if job.get("state") in ("succeeded", "failed", "cancelled"):
        return f"deadline {describe(status, job.get('missed_by_s'))}" if status else ""
    now = time.time() if now is None else now
    left = float(deadline) - now
    if left <= 0:
        return f"deadline passed {fmt_minutes(left)} ago"
    said = describe(status)
    return f"deadline in {fmt_minutes(left)}, {said}" if said else f"deadline in {fmt_minutes(left)}"
