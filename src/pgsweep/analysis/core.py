"""From a results folder to what a report says. One model per metric (pgsweep.verdict: log value
~ round + configuration, pooled error, split-plot error for whole-plot factors), two
families of claims judged together at the report's alpha (one budget per metric): every
configuration against the baseline, and the factor effects (main effects first, then every
two-factor interaction). Intervals are simultaneous, so an interval and its verdict never
disagree. The result is plain data: the JSON report is this, serialised; the other formats
render it."""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import verdict as sm
from ..errors import PgsweepError
from ..plan import fleet_periods
from ..store import TPS, Results
from ..verdict import sequential as sq
from .builds import assertion_warning, build_rows, phase_rows
from .checks import replication_rows, warnings
from .design import surviving
from .explain import panels
from .fleet import fleet_rows, group_facts
from .headline import config_names, headline
from .types import METRICS, NEGLIGIBLE_BYTES, WHOLE_PLOT_COSTS, Analysis, Config
from .workload import workload_info


def analyse(
    results: Results, baseline: dict[str, Any] | None = None, margin: float | None = None,
    alpha: float = sm.ALPHA,
) -> Analysis:  # fmt: skip
    exp = results.experiment()
    plan = exp.plan
    factors = exp.factors
    whole = [f["name"] for f in plan["factors"] if f.get("cost") in WHOLE_PLOT_COSTS]
    every = rebuild_every(plan)
    configs = _load(results)
    design = surviving(configs, _baseline(configs, baseline))
    kept, base = design.configs, design.baseline  # lost configurations leave the design
    rounds = results.rounds_here()  # a shard's own, the merged shards', or every round
    fleet_of = results.group_of_round()
    if int(plan.get("shards", 1)) > 1:  # each group made its own instances
        periods = fleet_periods(int(plan["rounds"]), int(plan["shards"]), every)
        every_or_fleet: int | tuple[int, ...] = tuple(periods[r - 1] for r in rounds)
    else:
        every_or_fleet = every
    adaptive = plan.get("adaptive")
    seq = ran = None
    notes: list[str] = list(design.notes)
    if adaptive:
        done = complete_rounds(results, len(configs))
        if any(r > done for c in configs for r in c.values.get(TPS, {})):
            notes.append(f"round {done + 1} was cut short: its trials are not in the verdicts")
        rounds = rounds[:done]
        seq = sequential(kept, base, whole, every, adaptive, alpha, done)
        ran = seq  # the looks as the run made them: the file's own baseline and alpha
        run_base, run_alpha = _stored_options(exp.file_text)
        if (run_base, run_alpha) != (baseline or None, alpha):
            ran = sequential(kept, surviving(configs, _baseline(configs, run_base)).baseline,
                             whole, every, adaptive, run_alpha, done)  # fmt: skip
            notes.append("the run's looks used the file's [report] baseline and alpha; the "
                         "verdicts here use the ones given to the report")  # fmt: skip
    comparisons: list[dict[str, Any]] = []
    effects: list[dict[str, Any]] = []
    tps_model = None
    fleet: dict[str, Any] = {}
    for metric, (label, higher, _) in METRICS.items():
        obs = _observations(kept, metric, rounds, base, higher, whole, every_or_fleet)
        if obs is None:
            continue
        model = sm.fit(obs)
        tps_model = model if metric == TPS else tps_model
        if metric == TPS and fleet_of:
            fleet = fleet_rows(obs, [fleet_of.get(r, "?") for r in rounds], kept, alpha,
                               group_facts(results))  # fmt: skip
            fleet["facts_differ"] = results.fleet().get("facts_differ", "")
        _summaries(kept, metric, model, alpha)
        level: sm.Level = alpha if seq is None else seq.level
        both = sm.report_families(model, level, margin, effects=bool(model.obs.levels[0]))
        for kind, family, into in (("baseline", both[0], comparisons),
                                   ("effects", both[1], effects)):  # fmt: skip
            contrasts = family.contrasts
            if kind == "effects" and not contrasts:
                continue
            if seq is not None and seq.look is not None and metric == TPS and kind == seq.decide:
                family, contrasts = seq.look.family, seq.look.contrasts()
            notes += [f"{label}: {n}" for n in family.notes]
            into += [_row(c, metric, label, higher, family, kept, base)
                     for c in contrasts]  # fmt: skip
    judged = min([c["detectable"] for c in comparisons if c["metric"] == TPS] or [0.05])
    drift = asdict(sq.drift(tps_model, margin or judged)) if tps_model is not None else None
    info = {
        k: getattr(exp, k)
        for k in ("name", "seed", "created_at", "postgres_version", "pgsweep_version")
    }
    info |= {"rounds": plan.get("rounds"), "rebuild": plan.get("rebuild"),
             "rebuild_every": every, "replicated": replicated(plan, every),
             "keep_alive": plan.get("keep_alive", True)}  # fmt: skip
    info["workload"] = workload_info(results, comparisons)  # the tool and what it judged
    # what ran otherwise than the file says (server.include's settings, what pgsweep
    # manages itself, ...), as plan and run said it
    info["run_notes"] = [f.value for f in sorted(results.environment(), key=lambda f: f.name)
                         if f.scope == "notes"]  # fmt: skip
    method = {"alpha": alpha, "families": "baseline and effects judged together: alpha for "
              "all of a metric's verdicts",
              "critical": "single-step max-|t| (simultaneous intervals)",
              "notes": notes}  # fmt: skip
    if seq is not None:
        method["critical"] = ("group-sequential: O'Brien-Fleming alpha spending over the looks, "
                              "repeated confidence intervals at the last look")  # fmt: skip
        method["adaptive"] = (ran or seq).summary()
        info["rounds"] = len(rounds)
    round_rows = _round_levels(configs, rounds)
    out = Analysis(info, factors, whole, base.id, configs, comparisons, effects, round_rows,
                   drift, method, [])  # fmt: skip
    out.builds = build_rows(results)
    out.phases = phase_rows(results, configs, alpha)
    out.warnings = assertion_warning(out.builds) + warnings(out, results)
    out.replication = replication_rows(results)
    out.fleet = fleet
    if fleet:
        for row in (*comparisons, *effects):  # what every verdict rests on
            row["groups"], row["rounds"] = len(fleet["groups"]), fleet["rounds_total"]
    out.names = config_names(out)
    out.headline = headline(out, out.names)
    out.explain = panels(out, results)
    return out


def _load(results: Results) -> list[Config]:
    """Each configuration's values per metric and round."""
    configs = {
        c.id: Config(c.id, dict(c.levels), c.label, c.group) for c in results.configurations()
    }
    for t in results.trials():
        if not t.ok:
            configs[t.config_id].failed += 1
    for (config_id, r), v in results.metric_by_round(TPS).items():
        configs[config_id].values.setdefault(TPS, {})[r] = v
    for name in sorted(m for m in METRICS if m != TPS):
        for (config_id, r), v in sorted(results.metric_by_round(name).items()):
            c = configs[config_id]
            if METRICS[name][2] == "B" and v < NEGLIGIBLE_BYTES:
                if name not in c.negligible:
                    c.negligible.append(name)
                continue
            c.values.setdefault(name, {})[r] = v
    return list(configs.values())


def _baseline(configs: list[Config], wanted: dict[str, Any] | None) -> Config:
    """The configuration of every factor's first level (c01), or the one asked for; a
    baseline no configuration matches is an error, never a silent fallback."""
    if not wanted:
        return configs[0]
    for c in configs:
        if all(str(c.levels.get(k)) == str(v) for k, v in wanted.items()):
            return c
    known = {k: sorted({str(c.levels.get(k)) for c in configs}) for k in configs[0].levels}
    raise PgsweepError(
        f"no configuration has the baseline levels {wanted}",
        expected="; ".join(f"{k}: {', '.join(v)}" for k, v in known.items()) or "no factors",
        fix="name a factor and one of its levels, e.g. --baseline server.work_mem=4MB",
    )


def rebuild_every(plan: dict[str, Any]) -> int:
    """Rounds one instance of each whole plot served (plan.json); plans from before it:
    batches and per_round rebuilt every round, once never."""
    if "rebuild_every" in plan and plan.get("keep_alive", True):
        return int(plan["rebuild_every"])
    return 1 if plan.get("rebuild") == "per_round" or not plan.get("keep_alive", True) else 0


def replicated(plan: dict[str, Any], every: int) -> bool:
    """Whole plots on at least two instances per level."""
    return every > 0 and (int(plan.get("rounds", 1)) - 1) // every >= 1


def _observations(
    configs: list[Config], metric: str, rounds: list[int], base: Config, higher: bool,
    whole: list[str], every: int | tuple[int, ...],
) -> sm.Observations | None:  # fmt: skip
    values = np.full((len(configs), len(rounds)), np.nan)
    for i, c in enumerate(configs):
        for j, r in enumerate(rounds):
            v = c.values.get(metric, {}).get(r)
            if v is not None and v > 0 and math.isfinite(v):  # 0 TPS has no place on a log scale
                values[i, j] = v
    if np.count_nonzero(~np.isnan(values)) < 2:
        return None
    given = every if isinstance(every, tuple) else None  # a fleet's periods
    return sm.Observations(values, [c.levels for c in configs], configs.index(base), higher,
                           tuple(whole), every if isinstance(every, int) else 1,
                           given)  # fmt: skip


def complete_rounds(results: Results, n_configs: int) -> int:
    """Rounds 1..N each hold a trial (ok or failed) of every configuration: the rounds an
    adaptive run has looked at. A round cut short is not one."""
    seen: dict[int, set[str]] = {}
    for t in results.trials():
        seen.setdefault(t.round, set()).add(t.config_id)
    done = 0
    while len(seen.get(done + 1, ())) == n_configs:
        done += 1
    return done


def _stored_options(file_text: str) -> tuple[dict[str, Any] | None, float]:
    """The [report] baseline and alpha the run itself judged its looks by."""
    table = tomllib.loads(file_text).get("report", {})
    return table.get("baseline") or None, float(table.get("alpha", sm.ALPHA))


@dataclass
class Sequential:
    """An adaptive run's looks replayed on its TPS: the look at the last round run (None
    before the first planned look) and the level every family is judged at there."""

    plan: sq.SequentialPlan
    decide: str
    precision: float
    interest: float
    rounds: int
    look: sq.Look | None
    stopped_at: int | None  # the first look that said stop
    decided_at: dict[str, int]  # contrast label -> the round of the look that decided it

    def level(self, corr: np.ndarray, df: float) -> float:
        """Every family's level at the last look: the boundaries hold for any stopping
        time, so families the stop did not look at stay valid too."""
        return sq.look_level(self.plan, self.look.index if self.look else 0)(corr, df)

    def summary(self) -> dict[str, Any]:
        look = self.look
        if look is None:
            reason = f"stopped before the first look (round {self.plan.looks[0]})"
        elif self.stopped_at is not None:
            reason = look.reason if look.stop else f"a look said stop at round {self.stopped_at}"
        else:
            reason = f"interrupted after round {self.rounds}: {look.reason}"
        return {"decide": self.decide, "precision": self.precision, "interest": self.interest,
                "rounds": self.rounds,
                "min_rounds": self.plan.looks[0], "max_rounds": self.plan.max_rounds,
                "stopped_at": self.stopped_at, "reason": reason, "decided_at": self.decided_at,
                "looks": list(self.plan.looks),
                "z": [round(z, 3) if math.isfinite(z) else None for z in self.plan.z]}  # fmt: skip


def sequential(
    configs: list[Config], base: Config, whole: list[str], every: int,
    adaptive: dict[str, Any], alpha: float, done: int,
) -> Sequential:  # fmt: skip
    """Replay the looks a `rounds = "auto"` run makes after each of its `done` complete
    rounds, on TPS. Runs from before `interest` judged futility by the precision."""
    plan = _seq_plan(int(adaptive["max_rounds"]), int(adaptive["min_rounds"]), alpha)
    decide, precision = str(adaptive["decide"]), float(adaptive["precision"])
    interest = float(adaptive.get("interest", precision))
    rounds = list(range(1, done + 1))
    obs = _observations(configs, TPS, rounds, base, True, whole, every)
    look: sq.Look | None = None
    stopped: int | None = None
    decided: dict[str, sm.Contrast] = {}
    first: dict[str, int] = {}
    for r in (r for r in plan.looks if r <= done):
        if obs is None:
            break
        look = sq.decide_at_look(plan, obs.first_rounds(r), decide, precision, interest,
                                 decided)  # fmt: skip
        decided = look.decided
        first |= {label: r for label in decided if label not in first}
        if look.stop and stopped is None:
            stopped = r
    return Sequential(plan, decide, precision, interest, done, look, stopped, first)


@functools.lru_cache(maxsize=16)
def _seq_plan(max_rounds: int, min_rounds: int, alpha: float) -> sq.SequentialPlan:
    return sq.make_plan(max_rounds, min(min_rounds, max_rounds), alpha=alpha)


def stop_reason(results: Results, rounds: int) -> str | None:
    """Why an adaptive run may stop after `rounds` complete rounds, or None to go on (the
    engine asks after each round, and on --resume), judged by the [report] baseline and
    alpha of the file the run froze, as the report's account of the run is."""
    exp = results.experiment()
    plan = exp.plan
    baseline, alpha = _stored_options(exp.file_text)
    configs = _load(results)
    for c in configs:
        c.values = {m: {r: v for r, v in by.items() if r <= rounds} for m, by in c.values.items()}
    whole = [f["name"] for f in plan["factors"] if f.get("cost") in WHOLE_PLOT_COSTS]
    design = surviving(configs, _baseline(configs, baseline))  # as the report will judge
    seq = sequential(design.configs, design.baseline, whole, rebuild_every(plan),
                     plan["adaptive"], alpha, rounds)  # fmt: skip
    if seq.look is None or not seq.look.stop or seq.look.rounds != seq.rounds:
        return None
    return seq.look.reason


def _summaries(configs: list[Config], metric: str, model: sm.Model, alpha: float) -> None:
    """n, mean, median, stddev, CV, min, max over trials, and the model's level of the
    configuration over this run's rounds with its interval (ci_low, ci_high)."""
    levels = {m.config: m for m in sm.config_means(model, alpha)}
    for i, c in enumerate(configs):
        x = np.array([v for v in c.values.get(metric, {}).values() if v is not None])
        if len(x) == 0:
            continue
        sd = float(x.std(ddof=1)) if len(x) > 1 else None
        level = levels.get(i)
        finite = level is not None and math.isfinite(level.mean) and len(x) > 1
        c.summary[metric] = {
            "n": len(x), "mean": float(x.mean()), "median": float(np.median(x)),
            "stddev": sd, "cv": sd / float(x.mean()) if sd is not None and x.mean() else None,
            "min": float(x.min()), "max": float(x.max()),
            "level": level.mean if finite and level else None,
            "ci_low": level.low if finite and level else None,
            "ci_high": level.high if finite and level else None,
        }  # fmt: skip


def _row(c: sm.Contrast, metric: str, label: str, higher: bool, family: sm.Family,
         configs: list[Config], base: Config) -> dict[str, Any]:  # fmt: skip
    row: dict[str, Any] = {
        "metric": metric, "label": label, "kind": c.kind, "contrast": c.label,
        "ratio": c.ratio, "ci_low": c.low, "ci_high": c.high, "p_adjusted": c.p_adjusted,
        "decision": c.decision, "error": c.error, "replicates": c.replicates, "df": c.df,
        "se": c.se, "detectable": c.detectable, "verdict": sm.verdict(c, higher),
        "caveats": sm.caveats(c), "method": family.method,
    }  # fmt: skip
    if c.kind == "baseline" and c.config is not None:
        row |= {"config": configs[c.config].id, "baseline": base.id}
    else:
        row["terms"] = [{"factor": f, "level": lv, "reference": ref} for f, lv, ref in c.terms]
        row |= {"factor": c.terms[0][0], "level": c.terms[0][1], "reference": c.terms[0][2]}
    return row


def _round_levels(configs: list[Config], rounds: list[int]) -> list[dict[str, Any]]:
    """Each round's TPS level: the geometric mean over the configurations it ran, so slow
    and fast stretches of the machine show, round by round."""
    out = []
    for r in rounds:
        vals = [c.values.get(TPS, {}).get(r) for c in configs]
        ok = [v for v in vals if v is not None and v > 0]
        if ok:
            gmean = math.exp(sum(math.log(v) for v in ok) / len(ok))
            out.append({"round": r, "tps": gmean, "configurations": len(ok)})
    return out


def tps_noise(results: Results) -> tuple[float, int] | None:
    """The residual SD of one trial's log TPS around its round and configuration, and its
    degrees of freedom, in a finished run: what `plan --noise-from` plans the next with.
    None when the run has too few complete rounds to tell."""
    plan = results.experiment().plan
    configs = _load(results)
    rounds = list(range(1, int(plan.get("rounds", 1)) + 1))
    obs = _observations(configs, TPS, rounds, configs[0], True, [], False)
    if obs is None:
        return None
    model = sm.fit(obs)
    if model.sub.df < 1:
        return None
    return float(model.sub.sigma), int(model.sub.df)
