"""Executors by name: what the server's `executor` setting may name, and how each is made.

An executor is registered once, as an `ExecutorKind`: its name, a one-line description (the
help of the `executor` setting), the settings of its own (`Option`s: the Jupyter extension's
traits, `schedulearn serve`'s flags and the `SCHEDULEARN_<NAME>` variables are made from them),
and its factory (`Settings -> Executor`). Nothing else names an executor: the server, the
standalone server's flags and the extension's traits all read this registry.

The built-in kinds are the `KIND`s of `schedulearn.executors.local`, `schedulearn.executors.docker`,
`schedulearn.executors.slurm` and `schedulearn.sim.executor`; other packages add theirs through the
entry-point group `schedulearn.executors` (name = executor name, value = `module:KIND`), or by
calling `register`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from .. import plugins
from ..model import SpecError

if TYPE_CHECKING:
    from ..service import Settings
    from .base import Executor

ENTRY_POINT_GROUP = "schedulearn.executors"
BUILTIN = ("schedulearn.executors.local:KIND", "schedulearn.executors.docker:KIND",
           "schedulearn.executors.slurm:KIND",
           "schedulearn.sim.executor:KIND")
ENV_PREFIX = "SCHEDULEARN_"
_BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


@dataclass(frozen=True)
class Option:
    """A setting of one executor. Its type is its default's: `str`, `int`, `float`, `bool` or
    `list` (of strings). It is `Settings.options[name]`, the trait `SchedulearnApp.<name>`, the
    variable `SCHEDULEARN_<NAME>` (a list: comma-separated) and the flag `flag` of
    `schedulearn serve` (default `--<name-with-dashes>`; a list's flag is repeated)."""

    name: str
    default: Any
    help: str
    flag: str = ""
    choices: tuple[str, ...] = ()  # a text setting's allowed values (none: any text)

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def parse(self, text: str) -> Any:
        """A value of this option from text (a variable, a flag); `ValueError` (one line, naming
        the variable) when it is not one."""
        kind = type(self.default)
        if kind is list:
            return [item.strip() for item in text.split(",") if item.strip()]
        if kind is bool:
            if text.strip().lower() not in _BOOLS:
                raise ValueError(f"{self.env}: expected true or false, got {text!r}")
            return _BOOLS[text.strip().lower()]
        if kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                what = "an integer" if kind is int else "a number"
                raise ValueError(f"{self.env}: expected {what}, got {text!r}") from None
        if self.choices and text not in self.choices:  # (refused where it is set, whichever
            raise ValueError(f"{self.env}: expected one of {', '.join(self.choices)}, got {text!r}")
        return text  # executor runs: `SCHEDULEARN_DOCKER_PULL=sometimes` passed under `local`)

    def from_env(self) -> Any:
        """Its value from `SCHEDULEARN_<NAME>`, or its default."""
        text = os.environ.get(self.env)
        return self.default if text in (None, "") else self.parse(text)


@dataclass(frozen=True)
class ExecutorKind:
    """One registered executor: `make(settings)` returns a ready `executor_class`."""

    name: str
    description: str
    executor_class: type[Executor]
    make: Callable[[Settings], Executor]
    options: tuple[Option, ...] = field(default=())

    @property
    def simulated(self) -> bool:
        """Its runs are simulated (no programs, no OS accounts)."""
        return self.executor_class.simulated


_registered: dict[str, ExecutorKind] = {}


def register(kind: ExecutorKind) -> ExecutorKind:
    """Make `kind` available by its name (the latest registration of a name wins)."""
    _registered[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    _registered.pop(name, None)


@cache
def _builtin_and_plugins() -> tuple[ExecutorKind, ...]:
    found = [_load(ref) for ref in BUILTIN]
    found += [kind for _, kind in plugins.load(ENTRY_POINT_GROUP, "executor",
                                                lambda obj: isinstance(obj, ExecutorKind), "an ExecutorKind")]
    return tuple(found)


def _load(ref: str) -> ExecutorKind:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def kinds() -> dict[str, ExecutorKind]:
    """Every executor kind by name: the built-in ones first, then plugins and registrations."""
    out = {k.name: k for k in _builtin_and_plugins()}
    out.update(_registered)
    return out


def names() -> tuple[str, ...]:
    return tuple(kinds())


def get(name: str) -> ExecutorKind:
    """The kind named `name`; `SpecError` naming the executors when there is none."""
    found = kinds()
    try:
        return found[name]
    except KeyError:
        raise SpecError(f"executor: expected one of {', '.join(found)}, got {name!r}") from None


def options() -> list[Option]:
    """The options of every kind (each name once, in registration order)."""
    seen: dict[str, Option] = {}
    for kind in kinds().values():
        for opt in kind.options:
            seen.setdefault(opt.name, opt)
    return list(seen.values())


def describe() -> str:
    """One line per kind, for help texts: `'local': processes on this host; ...`."""
    return "; ".join(f"'{k.name}': {k.description}" for k in kinds().values())
