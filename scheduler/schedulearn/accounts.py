"""Which OS account runs a user's jobs, in the shared set-up (`schedulearn serve --tokens`).

The operator maps Schedulearn user names (the names in the tokens file) to OS accounts:
`alice=alice,bob=b.smith` (`--user-map`, `$SCHEDULEARN_USER_MAP`), or `same` for "the account
named like the user". A job then runs with that account's uid, gid, supplementary groups, HOME,
USER and LOGNAME, and its job directory belongs to that account (mode 0700). Switching to
another account needs root: a server that cannot switch refuses to start rather than run
everyone's jobs as itself. `server` (no map) runs every job as the server's own account, with
no isolation between users (a trusted group; what the single-user set-up always does).
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from .model import SpecError

#: `--user-map same`: every user runs as the OS account of the same name
SAME = "same"
#: `--user-map server`: no switching, every job runs as the server's account
SERVER = "server"


class NoAccount(SpecError):
    """A user without an OS account to run their jobs as."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def lookup(cls, name: str) -> Account:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise NoAccount(f"user_map: no OS account {name!r} on this host") from None
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)),
                   pw.pw_dir)

    def popen_kwargs(self) -> dict[str, object]:
        """What `subprocess.Popen` needs to start a process as this account (no preexec_fn)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}

    def env(self) -> dict[str, str]:
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def can_enter(self, path: str | os.PathLike[str]) -> bool:
        """Whether this account may make `path` its working directory: asked of a process running
        as the account (`cd`), so the permissions and ACLs of `path` and of every directory above
        it count, as they do for its jobs. Root's say-so proves nothing: a process that changed
        into a directory as root, then became the account, reads what lies there even when a
        folder above is private to someone else."""
        try:
            p = subprocess.run(["/bin/sh", "-c", 'cd -- "$1"', "schedulearn-cd", os.fspath(path)],
                               cwd="/", env={"PATH": os.defpath}, capture_output=True, timeout=30,
                               **self.popen_kwargs())
        except (OSError, subprocess.TimeoutExpired):
            return False
        return p.returncode == 0

    @property
    def docker_user(self) -> str:
        return f"{self.uid}:{self.gid}"


@dataclass(frozen=True)
class UserMap:
    """Schedulearn user name -> OS account name (`same`: the account of the same name)."""

    entries: Mapping[str, str] = field(default_factory=dict)
    same: bool = False

    @classmethod
    def parse(cls, text: str | None) -> UserMap | None:
        """`alice=alice,bob=b.smith` or `same`; None for `server` (or nothing: no map)."""
        text = (text or "").strip()
        if text in ("", SERVER):
            return None
        if text == SAME:
            return cls(same=True)
        entries: dict[str, str] = {}
        for item in text.split(","):
            user, eq, account = (s.strip() for s in item.partition("="))
            if not eq or not user or not account:
                raise SpecError(f"user_map: expected user=account[,user=account...], '{SAME}' or "
                                f"'{SERVER}', got {item.strip()!r}")
            if user in entries:
                raise SpecError(f"user_map: {user!r} is mapped twice")
            entries[user] = account
        return cls(entries)

    def account_name(self, user: str) -> str | None:
        if self.same:
            return user or None
        return self.entries.get(user)

    def account(self, user: str) -> Account:
        """The account `user`'s jobs run as; `NoAccount` (one line) when there is none or it is root."""
        name = self.account_name(user)
        if name is None:
            raise NoAccount(f"user: {user!r} has no OS account on this server (user_map); "
                            "ask the operator to map it")
        account = Account.lookup(name)
        if account.uid == 0:
            raise NoAccount(f"user_map: {user!r} maps to {name!r}, which is root; jobs never run as root")
        return account

    def check(self) -> None:
        """Every account named exists and none is root (the server refuses to start otherwise)."""
        for user in self.entries:
            self.account(user)

    def __str__(self) -> str:
        return SAME if self.same else ",".join(f"{u}={a}" for u, a in self.entries.items())


def check_can_switch(euid: int | None = None) -> None:
    """Starting processes as other accounts and giving them their directories needs root."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        try:
            me = pwd.getpwuid(euid).pw_name
        except KeyError:
            me = str(euid)
        raise SpecError(f"user_map: running jobs as their users' OS accounts needs root, but this server "
                        f"runs as {me!r} (uid {euid}); start it as root, or give --user-map {SERVER} to run "
                        "every job as the server's account (no isolation between users)")
