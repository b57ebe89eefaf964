"""The one error type a user can act on. It is raised anywhere and caught once, in main."""

from __future__ import annotations

# Exit codes, documented in docs/running.md.
EXIT_OK = 0
EXIT_INTERNAL = 1  # pgsweep itself failed (a bug, or the machine refused something)
EXIT_INPUT = 2  # invalid input: nothing was started or changed
EXIT_FAILED_TRIALS = 3  # the run finished, but some trials failed
EXIT_REGRESSION = 4  # compare --fail-if-slower: a slowdown beyond the threshold is significant
EXIT_INTERRUPTED = 130  # Ctrl-C: results so far are kept, `--resume` continues


class PgsweepError(Exception):
    """What failed, where, and how to fix it.

    `where` names the file and key (and line) for input errors; `fix` tells the user what
    to do. `exit_code` is EXIT_INPUT for bad input, EXIT_INTERNAL for everything else.
    """

    def __init__(
        self,
        what: str,
        *,
        where: str | None = None,
        expected: str | None = None,
        fix: str | None = None,
        exit_code: int = EXIT_INPUT,
    ) -> None:
        self.what = what
        self.where = where
        self.expected = expected
        self.fix = fix
        self.exit_code = exit_code
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.where}: {self.what}" if self.where else self.what
        lines = [f"error: {head}"]
        if self.expected:
            lines.append(f"  expected: {self.expected}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


def internal(what: str, fix: str | None = None) -> PgsweepError:
    """A failure of the machine or of pgsweep, not of the experiment file."""
    return PgsweepError(what, fix=fix, exit_code=EXIT_INTERNAL)
