"""Policies, registered by name. Third parties add theirs through the entry-point group
`schedulearn.policies` (name = policy name, value = a `Policy` subclass)."""

from __future__ import annotations

from functools import cache

from .. import plugins
from ..model import SpecError
from .base import Policy, RoundContext, Want
from .edf import EarliestDeadlineFirst
from .elastic_fifo import ElasticFifo
from .fifo import Fifo
from .goodput import Goodput
from .las import LeastAttainedService
from .qoe import QoE
from .round_robin import RoundRobin

BUILTIN: tuple[type[Policy], ...] = (Fifo, ElasticFifo, RoundRobin, LeastAttainedService, Goodput,
                                     EarliestDeadlineFirst, QoE)
ENTRY_POINT_GROUP = "schedulearn.policies"

__all__ = ["Policy", "RoundContext", "Want", "available", "create", "policy_classes"]


@cache
def _plugins() -> tuple[type[Policy], ...]:
    found = []
    for name, cls in plugins.load(ENTRY_POINT_GROUP, "policy", _is_policy, "a Policy subclass"):
        if not cls.name:
            cls.name = name
        found.append(cls)
    return tuple(found)


def _is_policy(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, Policy)


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
