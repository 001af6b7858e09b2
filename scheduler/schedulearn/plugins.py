"""Plugins from other packages: objects named by an entry-point group (`schedulearn.policies`,
`schedulearn.executors`). One that cannot be loaded, or is not what the group holds, is logged
and skipped: a broken plugin must not take the scheduler down."""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

log = logging.getLogger("schedulearn.plugins")


def load(group: str, what: str, accept: Callable[[Any], bool], kind: str) -> list[tuple[str, Any]]:
    """(entry-point name, object) of each `group` entry point whose object `accept`s; `what` and
    `kind` word the warnings ("policy plugin 'x' (...) is not a Policy subclass: skipped")."""
    found = []
    for ep in entry_points(group=group):
        try:
            obj = ep.load()
        except Exception as e:
            log.warning("%s plugin %r (%s) not loaded: %s: %s", what, ep.name, ep.value, type(e).__name__, e)
            continue
        if not accept(obj):
            log.warning("%s plugin %r (%s) is not %s: skipped", what, ep.name, ep.value, kind)
            continue
        found.append((ep.name, obj))
    return found
