"""What Ctrl-C, SIGTERM and SIGHUP do while pgsweep changes a machine: the first ends the
work through its cleanup, and none cuts the cleanup short."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP end the run through its cleanup. The first one raises
    KeyboardInterrupt and from then on all three are ignored, so a second signal can cut
    neither the unwinding nor the cleanup short. The handlers come back only after a run
    that was not stopped: a stopped one is on its way out, and a signal arriving after its
    cleanup must not turn exit code 130 into a kill."""
    stopped = []

    def handler(signum: int, frame: FrameType | None) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        stopped.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        if not stopped:
            for s, h in old.items():
                signal.signal(s, h)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Cleanup runs to its end: a further Ctrl-C or SIGTERM is ignored meanwhile."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
