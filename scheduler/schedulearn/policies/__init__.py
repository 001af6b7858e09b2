"""Policies, registered by name. Third parties add theirs through the entry-point group
`schedulearn.policies` (name = policy name, value = a `Policy` subclass)."""

from __future__ import annotations

import logging
from functools import cache
from importlib.metadata import entry_points

from ..model import SpecError
from .base import Policy, RoundContext, Want
from .elastic_fifo import ElasticFifo
from .fifo import Fifo
from .goodput import Goodput
from .las import LeastAttainedService
from .round_robin import RoundRobin

BUILTIN: tuple[type[Policy], ...] = (Fifo, ElasticFifo, RoundRobin, LeastAttainedService, Goodput)
ENTRY_POINT_GROUP = "schedulearn.policies"
log = logging.getLogger("schedulearn.policies")

__all__ = ["Policy", "RoundContext", "Want", "available", "create", "policy_classes"]


@cache
def _plugins() -> tuple[type[Policy], ...]:
    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = ep.load()
        except Exception as e:  # one broken plugin must not take the scheduler down
            log.warning("policy plugin %r (%s) not loaded: %s: %s", ep.name, ep.value, type(e).__name__, e)
            continue
        if not (isinstance(cls, type) and issubclass(cls, Policy)):
            log.warning("policy plugin %r (%s) is not a Policy subclass: skipped", ep.name, ep.value)
            continue
        if not cls.name:
            cls.name = ep.name
        found.append(cls)
    return tuple(found)


def policy_classes() -> dict[str, type[Policy]]:
    classes = {c.name: c for c in BUILTIN}
    for c in _plugins():
        classes.setdefault(c.name, c)
    return classes


def available() -> list[dict[str, str]]:
    return [{"name": n, "description": c.description} for n, c in policy_classes().items()]


def create(name: str) -> Policy:
    classes = policy_classes()
    try:
        return classes[name]()
    except KeyError:
        raise SpecError(f"policy: unknown {name!r}; available: {', '.join(classes)}") from None
