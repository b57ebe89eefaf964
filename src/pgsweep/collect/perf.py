"""CPU profiles (issue 26, opt in: [experiment] cpu_profile): `perf script` output of a
`perf record -g` folded into stacks, one line per distinct stack, "frame;frame;... N"
from the root to the leaf (the format flame graph tools read), for the server's processes
only (comm "postgres": every PostgreSQL process keeps its command name whatever title it
shows). Kept per trial as the artifact profile.folded."""

from __future__ import annotations

from collections import Counter

ARTIFACT = "profile.folded"
SERVER_COMM = "postgres"
MAX_STACKS = 20_000  # distinct stacks kept (the most sampled), bounding the artifact


def fold(script: str, comm: str = SERVER_COMM) -> Counter[str]:
    """`perf script -F comm,pid,ip,sym` -> stack -> samples, for processes named `comm`.
    A sample is a header line ("COMM PID"), then its frames leaf first ("ADDR SYMBOL"),
    then a blank line; an unresolved frame is "[unknown]"."""
    stacks: Counter[str] = Counter()
    name: str | None = None
    frames: list[str] = []

    def flush() -> None:
        if name == comm and frames:
            stacks[";".join([comm, *reversed(frames)])] += 1

    for line in script.splitlines():
        if not line.strip():
            flush()
            name, frames = None, []
        elif line[0] in " \t":
            parts = line.split(None, 1)
            frames.append(_frame(parts[1] if len(parts) > 1 else "[unknown]"))
        else:
            flush()
            words = line.split()
            name = " ".join(words[:-1]) if len(words) > 1 and words[-1].isdigit() else line
            name, frames = name.strip(), []
    flush()
    return stacks


def _frame(symbol: str) -> str:
    """A frame's name as a folded line can hold it (no ';', no line end; C++ and Rust
    symbols keep their angle brackets: the renderer escapes them)."""
    return symbol.strip().split("+0x")[0].replace(";", ":") or "[unknown]"


def to_text(stacks: Counter[str]) -> str:
    return "".join(f"{s} {n}\n" for s, n in stacks.most_common(MAX_STACKS))


def parse(text: str) -> Counter[str]:
    """A profile.folded artifact back into stack -> samples (lines it cannot read are
    skipped: the artifact is the run's own, but a reader trusts nothing it reads)."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            out[stack] += int(n)
    return out
