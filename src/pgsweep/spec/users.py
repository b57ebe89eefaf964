"""The account the servers run as ([postgres] user): a system account that owns nothing
else, never root or a person's; the dedicated `pgsweep` account when it exists."""

from __future__ import annotations

import os
from pathlib import Path

from ..host.proc import RunAs
from ..layers.base import Source

DEDICATED_USER = "pgsweep"  # a system account that owns nothing else (scripts/setup.sh)


def _system_uid_max() -> int:
    """Accounts below UID_MIN (/etc/login.defs, 1000 by default) are system accounts."""
    try:
        for line in Path("/etc/login.defs").read_text().splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == "UID_MIN" and fields[1].isdigit():
                return int(fields[1])
    except OSError:
        pass
    return 1000


def default_user() -> str:
    """The dedicated account when it exists, else `postgres` (whose throwaway servers then
    share an account with the machine's own clusters)."""
    try:
        RunAs(DEDICATED_USER).uid  # noqa: B018 - does it exist?
        return DEDICATED_USER
    except KeyError:
        return "postgres"


def resolve_user(setting: str | None, source: Source) -> RunAs | None:
    """The unprivileged account the server runs as. PostgreSQL refuses to run as root, and
    experiments run code as this account (custom scripts, archive_command): it must be a
    system account, never root or a person's."""
    if os.geteuid() != 0:
        if setting and setting != RunAs.current_name():
            raise source.error(
                ("postgres", "user"),
                f"cannot run the server as {setting!r} without root",
                fix="run pgsweep as root, or remove [postgres] user",
            )
        return None
    name = setting or default_user()
    try:
        user = RunAs(name)
        uid = user.uid
    except KeyError:
        raise source.error(
            ("postgres", "user"),
            f"there is no OS user {name!r} to run the server as",
            fix=f"scripts/setup.sh makes the account {DEDICATED_USER!r}; or useradd --system "
            f"{name}; or set [postgres] user",
        ) from None
    if uid == 0 or uid >= _system_uid_max():
        raise source.error(
            ("postgres", "user"),
            f"the server must not run as {name!r} (uid {uid}): "
            + ("root" if uid == 0 else "a person's account, whose files an experiment could "
               "reach"),
            expected="a system account that owns nothing else, such as "
            f"{DEDICATED_USER!r} (scripts/setup.sh makes it) or postgres",
            fix=f'set [postgres] user = "{DEDICATED_USER}"',
        )  # fmt: skip
    return user
