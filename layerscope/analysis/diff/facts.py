"""The static side of two whole results, joined before any timing: what each result records
of its model and run (the model FLOPs per step, the parameters, the input shapes, the batch
size, the dtype, compilation, the threads) and which of those differ.

A timing difference is read against these first. When the work differs, a slower step is what
the new work costs, not a regression, and the summary says so before anything else; and no row
of a result that keeps no static figures per row (train, run, loop: a phase or a layer keeps
only its time) can be taken for unchanged work, so nothing estimated across rows (the whole
run's shift, a group's, the rows' typical move, the drift they share) may come from them.

What each kind records:
- profile, analyze: the totals' FLOPs (MACs where no FLOPs were counted) and parameters, the
  input shapes (the batch size is their first dimension) and dtypes, the threads;
- train, run: the model FLOPs per step (``efficiency``), the batch size (the config's, else the
  samples per step), the threads, and train's compile, TorchScript, autocast and channels-last
  settings;
- loop: the model FLOPs per batch, the batch size, the threads;
- scaling: the model FLOPs per step where every point counted the same, the batch and threads
  per rank;
- sweep: the input shapes (a cell's dtype, threads and batch size are in its name: a cell that
  differs in one is another cell).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from layerscope.analysis.diff.measures import Timed, same
from layerscope.analysis.diff.static import numel, shape_change
from layerscope.analysis.diff.unfair import batch_differs, threads_of
from layerscope.core.diff_records import FACTS, StaticChange
from layerscope.core.units import shape_str

# two counts of work (FLOPs, MACs, parameters) further apart than this share differ: a run's
# FLOPs per step are the median over its steps, which a few odd batches may move a little
FACT_APART = 0.01
# what one FLOPs figure is of, per kind
PER = {"train": "step", "loop": "batch", "scaling": "step", "profile": "forward pass",
       "analyze": "forward pass"}
FLAGS = {"compile": "torch.compile", "torchscript": "TorchScript", "amp": "autocast",
         "channels_last": "channels-last"}
_SCALES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"), (1.0, ""))


def facts(result: Any, t: Timed) -> dict[str, Any]:
    """The static facts ``result`` records (``t``: what it timed), by name (``FACTS``); a fact it
    does not record is absent."""
    kind = result.kind
    out: dict[str, Any] = {}
    if kind in ("profile", "analyze"):
        totals = result.totals
        out["flops"] = int(totals.flops or 0) or None
        if not out["flops"]:
            out["macs"] = int(totals.macs or 0) or None
        out["params"] = int(totals.params or 0) or None
        inputs = [i for i in result.inputs or [] if isinstance(i, dict)]
        out["inputs"] = [i.get("shape") for i in inputs] or None
        out["dtype"] = ", ".join(str(i["dtype"]) for i in inputs if i.get("dtype")) or None
    elif kind == "sweep":
        out["inputs"] = (result.settings or {}).get("inputs")
    else:
        out["flops"] = _flops_per_step(result)
        out["batch"] = t.batch
        config = getattr(result, "config", None) or {}
        for flag in FLAGS:
            if flag in config:
                out[flag] = bool(config[flag])
    if kind != "sweep":
        out["threads"] = threads_of(result, t)
    return {k: v for k, v in out.items() if v is not None}


def _flops_per_step(result: Any) -> float | None:
    if result.kind == "scaling":
        return same(p.utilisation["model_flops_per_step"] for p in result.points
                    if p.utilisation is not None)
    eff = getattr(result, "efficiency", None)
    flops = eff.get("model_flops_per_step") if eff else None
    return float(flops) if flops else None


def static_changes(base: Any, new: Any, tb: Timed, tn: Timed) -> list[StaticChange]:
    """The facts of ``base`` and ``new`` that both record and that differ, in ``FACTS``
    order."""
    a, b = facts(base, tb), facts(new, tn)
    per = PER.get(new.kind, "step")
    out = []
    for fact in FACTS:
        if fact in a and fact in b:
            found = _change(fact, a[fact], b[fact], per)
            if found is not None:
                out.append(found)
    return out


def _change(fact: str, x: Any, y: Any, per: str) -> StaticChange | None:
    if fact in ("flops", "macs", "params"):
        if not x or abs(y / x - 1) <= FACT_APART:
            return None
        ratio = y / x
        if fact == "params":
            text = f"parameters {_si(x)} → {_si(y)} ({times(ratio)})"
        else:
            what = "FLOPs" if fact == "flops" else "MACs"
            text = f"the model does {times(ratio)} the {what} per {per} ({_pair(x, y, what)})"
        return StaticChange(fact, x, y, text, ratio, _sign(y - x))
    if fact == "inputs":
        grew = shape_change(x, y, "the input")
        if grew is None:
            return None
        na, nb = numel(x), numel(y)
        return StaticChange(fact, x, y, grew, nb / na if na and nb else None,
                            _sign(nb - na) if na and nb else 0)
    if fact == "batch":
        if not batch_differs(x, y):
            return None
        return StaticChange(fact, x, y, f"batch size {x:g} → {y:g}", y / x if x else None,
                            _sign(y - x))
    if x == y:
        return None
    if fact in FLAGS:
        on = {True: "on", False: "off"}
        return StaticChange(fact, x, y, f"{FLAGS[fact]} {on[bool(x)]} → {on[bool(y)]}")
    label = {"dtype": "dtype", "threads": "torch threads"}[fact]
    return StaticChange(fact, x, y, f"{label} {x} → {y}")


def work_direction(changes: Sequence[StaticChange]) -> int:
    """1 when every amount of work that differs grew, -1 when every one shrank, else 0 (none
    differs, they disagree, or only settings differ)."""
    signs = {c.work for c in changes if c.work}
    return signs.pop() if len(signs) == 1 else 0


def settings_differ(changes: Sequence[StaticChange]) -> bool:
    """A setting that is no amount of work differs (dtype, compilation, threads): it changes
    every row, so no row's time is comparable."""
    return any(not c.work for c in changes)


def flops_ratio(changes: Sequence[StaticChange]) -> float | None:
    """new / base of the model's FLOPs (MACs where no FLOPs were counted), where they differ."""
    return next((c.ratio for c in changes if c.fact in ("flops", "macs")), None)


def clause(changes: Sequence[StaticChange]) -> str:
    """The differences in words, the summary's first clause."""
    return ", ".join(c.text for c in changes)


def short(changes: Sequence[StaticChange]) -> str:
    """The differences as "FLOPs 4.53 → 43.7 MFLOP, batch size 32 → 64": a row's cause."""
    def one(c: StaticChange) -> str:
        if c.fact in ("flops", "macs"):
            what = "FLOPs" if c.fact == "flops" else "MACs"
            return f"{what} {_pair(c.base, c.new, what)}"
        if c.fact == "inputs":
            return f"input {shape_str(c.base)} → {shape_str(c.new)}"
        return c.text.removeprefix("the model does ")
    return ", ".join(one(c) for c in changes)


def times(ratio: float) -> str:
    """3.51×, 0.286×"""
    return f"{ratio:.3g}×"


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _scale(v: float) -> tuple[float, str]:
    return next(((s, p) for s, p in _SCALES if abs(v) >= s), (1.0, ""))


def _si(v: float) -> str:
    s, p = _scale(v)
    return f"{v / s:.3g}{p}"


def _pair(x: float, y: float, what: str) -> str:
    """"0.67 → 2.35 GFLOP": both in the unit of the larger."""
    s, p = _scale(max(abs(x), abs(y)))
    unit = "FLOP" if what == "FLOPs" else "MAC"
    return f"{x / s:.3g} → {y / s:.3g} {p}{unit}"

