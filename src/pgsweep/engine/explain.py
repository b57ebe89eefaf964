"""What explains a trial, collected over its measured window beside pgbench (issue 26;
cheap, always on): where sessions waited (collect.waits, a connection of its own sampling
pg_stat_activity), CPU by process type (collect.processes, /proc of the postmaster's
children and of the pgbench client, read through the hosts), and the server's devices and
dirty memory per second (collect.device_series). The WAL, checkpoint, buffer
and pg_stat_io deltas come with the trial's counters (collect.counters).

Explain collection never fails a trial: what it could not collect is missing from the
record, and why is kept as the trial's artifact `explain.err`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..collect import device_series, processes, wait_profile, waits
from ..layers.context import TrialContext
from ..store import TrialRecord

# pgbench's backends exit after it does, flushing their statistics as they go; the closing
# counter snapshot waits up to this long for them to be gone (then it goes on)
BACKENDS_GONE_S = 5.0
PGBENCH_BACKENDS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'"


class ExplainWatcher:
    """A Watcher (layers.context): begin right before the measured pgbench, end right after."""

    def __init__(self) -> None:
        self.sampler: waits.WaitSampler | None = None
        self.before: processes.Snapshot | None = None
        self.seen: dict[int, processes.Usage] = {}  # postmaster children seen in the window
        self.devices: device_series.DeviceSeries | None = None
        self.profile: tuple[float, float] | None = None  # pg_wait_sampling: period ms, began
        self.stopped = 0.0
        self.problems: list[str] = []

    def begin(self, trial: TrialContext) -> None:
        postmaster = trial.cluster.postmaster_pid()

        def track() -> None:  # 5 times a second, on the sampler's thread
            processes.track(trial.run.host, postmaster, self.seen, self._skip())

        self.sampler = waits.WaitSampler(trial.cluster.connect, tick=track)
        self.sampler.start()
        self._start_profile(trial)
        self.devices = device_series.DeviceSeries(trial.run.host, trial.server.devices)
        self.devices.start()
        self.before = self._processes(trial)

    def _skip(self) -> frozenset[int]:
        return frozenset({self.sampler.pid} if self.sampler and self.sampler.pid else ())

    def _processes(self, trial: TrialContext) -> processes.Snapshot:
        cs = trial.run.client_side
        client = cs.host if cs is not None else trial.run.host
        return processes.snapshot(trial.run.host, trial.cluster.postmaster_pid(), client,
                                  self._skip())  # fmt: skip

    def end(self, trial: TrialContext, record: TrialRecord, abort: bool = False) -> None:
        after = None if abort else self._processes(trial)
        cost = {} if abort else self._cost(trial)
        if self.sampler is not None:
            self.sampler.stop()
        self.stopped = time.monotonic()  # the profile's window ends with the sampler's
        seconds = self.devices.stop() if self.devices is not None else []
        if abort:
            return
        self._device_seconds(trial, record, seconds)
        sampler, before = self.sampler, self.before
        if sampler is not None and sampler.error is None and sampler.samples > 0:
            record.waits = waits.profile(sampler.counts, sampler.samples)
            record.metrics["explain.wait_samples"] = float(sampler.samples)
            record.metrics["explain.wait_hz"] = sampler.rate()
            self._read_profile(trial, record, sampler)
        elif sampler is not None:
            self.problems.append(f"pg_stat_activity was not sampled: {sampler.error}")
        record.metrics.update(cost)
        if before is not None and after is not None:
            record.processes = [(kind, n, *values) for kind, n, values
                                in processes.delta(before, after, self.seen)]  # fmt: skip
        self._backends_gone(trial)
        if self.problems:
            record.artifacts["explain.err"] = "\n".join(self.problems).encode()

    def _start_profile(self, trial: TrialContext) -> None:
        """pg_wait_sampling's profile emptied for the window, when the server has it."""
        try:
            with trial.cluster.connect() as conn:
                period = wait_profile.start(conn)
        except Exception as exc:
            self.problems.append(f"pg_wait_sampling was not reset: {exc}")
            return
        if period is not None:
            self.profile = (period, time.monotonic())

    def _read_profile(self, trial: TrialContext, record: TrialRecord,
                      sampler: waits.WaitSampler) -> None:  # fmt: skip
        """The window's waits from pg_wait_sampling instead of pgsweep's own sampling (its
        process types from it), and the rate it sampled at (explain.wait_source: 1 for
        pg_wait_sampling, 0 for pg_stat_activity)."""
        record.metrics["explain.wait_source"] = 0.0
        if self.profile is None:
            return
        period, began = self.profile
        try:
            with trial.cluster.connect() as conn:
                present = {pid: n / sampler.samples for pid, n in sampler.seen.items()}
                rows, samples = wait_profile.read(conn, sampler.types, present, self._skip(),
                                                  self.stopped - began, period)  # fmt: skip
        except Exception as exc:
            self.problems.append(f"pg_wait_sampling was not read: {exc}")
            return
        if rows:
            record.waits = rows
            record.metrics.update({"explain.wait_source": 1.0, "explain.wait_samples": samples,
                                   "explain.wait_hz": 1000.0 / period})  # fmt: skip

    def _device_seconds(self, trial: TrialContext, record: TrialRecord,
                        seconds: list[tuple[Any, ...]]) -> None:  # fmt: skip
        if self.devices is not None and self.devices.error is not None:
            self.problems.append(f"devices per second were not read: {self.devices.error}")
        record.device_seconds = seconds
        record.metrics.update(device_series.summary(seconds, trial.server.primary_devices))

    def _cost(self, trial: TrialContext) -> dict[str, float]:
        """What sampling cost the server's machine, in CPU seconds: the sampling backend
        (its whole life, the window's length) and the thread that drives it here (pgsweep
        runs where the server runs)."""
        out: dict[str, float] = {}
        sampler = self.sampler
        if sampler is None:
            return out
        where = {"explain.sampler_backend_cpu_s": f"/proc/{sampler.pid}/stat",
                 "explain.sampler_thread_cpu_s": f"/proc/self/task/{sampler.native_id}/stat"}
        for name, path in where.items():
            if "None" in path:
                continue
            try:
                out[name] = processes.cpu_seconds(trial.run.host.read_text(Path(path)))
            except Exception:  # gone, or not readable: no figure rather than a wrong one
                continue
        return out

    def _backends_gone(self, trial: TrialContext) -> None:
        """Wait (bounded) until pgbench's backends have exited: each flushes its statistics
        as it exits, and the closing snapshot should count them."""
        deadline = time.monotonic() + BACKENDS_GONE_S
        try:
            with trial.cluster.connect() as conn:
                while time.monotonic() < deadline:
                    row = conn.execute(PGBENCH_BACKENDS).fetchone()
                    if not row or not row[0]:
                        return
                    time.sleep(0.02)
            self.problems.append(f"pgbench's backends were still there {BACKENDS_GONE_S:g} s "
                                 "after it ended: their last statistics may be missing")
        except Exception as exc:
            self.problems.append(f"pg_stat_activity was not read after the window: {exc}")
