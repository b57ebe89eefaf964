"""The one reader of /proc/self/mountinfo. The kernel escapes space, tab, newline and
backslash in mount points and sources as octal (`\\040`); every comparison with a path
uses the unescaped text, so a results folder with a space in its name is still found."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
_ESCAPE = re.compile(r"\\([0-7]{3})")


def unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: str  # per-mount and superblock options, each once
    source: str
    device: str  # "major:minor"

    def contains(self, path: str) -> bool:
        return path == self.point or path.startswith(self.point.rstrip("/") + "/")


def parse(text: str) -> list[Mount]:
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        sep = fields.index("-")
        extra = fields[sep + 3] if len(fields) > sep + 3 else ""
        options = ",".join(dict.fromkeys(f"{fields[5]},{extra}".strip(",").split(",")))
        out.append(Mount(unescape(fields[4]), unescape(fields[sep + 1]), unescape(options),
                         unescape(fields[sep + 2]), fields[2]))  # fmt: skip
    return out


def mounts() -> list[Mount]:
    return parse(MOUNTINFO.read_text())


def mount_of(path: Path) -> Mount:
    """The mount holding `path`: the longest mount point that contains it."""
    target = str(path.resolve())
    best = Mount("", "", "", "", "")
    for m in mounts():
        if m.contains(target) and len(m.point) >= len(best.point):
            best = m
    return best


def mounted_under(root: Path) -> list[str]:
    """Mount points inside `root` (not `root` itself)."""
    inside = str(root).rstrip("/") + "/"
    return [m.point for m in mounts() if m.point.startswith(inside)]


def is_mounted(point: Path) -> bool:
    return any(m.point == str(point) for m in mounts())
