"""Policies, registered by name. Third parties add theirs through the entry-point group
`schedulearn.policies` (name = policy name, value = a `Policy` subclass)."""

from __future__ import annotations

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

__all__ = ["Policy", "RoundContext", "Want", "available", "create", "policy_classes"]


@cache
def _plugins() -> tuple[type[Policy], ...]:
    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Policy)):
            raise TypeError(f"entry point {ep.name!r} in {ENTRY_POINT_GROUP} is not a Policy class")
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
