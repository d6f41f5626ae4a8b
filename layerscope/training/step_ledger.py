"""The step ledger of a watched run: every completed step's figures, and what is read from them.

Plain Python (no torch): ``training.watch.Watch`` measures the steps (its hooks, phase stack and
CUDA events) and records each completed one here; the ledger merges the parts of one step
(backward passes before the first optimizer step, the optimizers of one iteration), drops the
parts of a step that never ended, closes epochs, and answers which steps are measured (after the
warm-up, less the one-time costs of ``training.phases.transient_steps``) and their totals.

Every completed step is kept, warm-up included: the totals are summed from these when asked, so
a step's end costs a few list appends, and steps found to be parts of one step are merged
afterwards.
"""
from __future__ import annotations

from typing import Any, Protocol

from layerscope.training.phases import PHASES, PhaseTotals, transient_steps

# a layer row's key: id(module), or (id(module), function) for a function's row (``functions``)
LayerKey = int | tuple[int, str]


class Follower(Protocol):
    """Per-step figures kept elsewhere that merge and drop with the ledger's steps (the
    model's inputs seen per step: ``training.model_seen.ModelSeen``)."""

    def merge_last(self, k: int) -> None: ...

    def drop_last(self, k: int) -> None: ...


class StepLedger:
    """The completed steps (warm-up included), one entry per step in each list."""

    def __init__(self, warmup_steps: int = 0, trace: bool = False,
                 follower: Follower | None = None):
        self.warmup_steps, self.trace, self.follower = warmup_steps, trace, follower
        self.seconds: list[float] = []
        self.phases: list[dict[str, float]] = []
        self.samples_of: list[int] = []
        self.tokens_of: list[int] = []
        self.opt_of: list[dict[int, float]] = []  # optimizer index -> its seconds in the step
        self.opts_of: list[tuple[int, ...]] = []  # the optimizers that stepped in it, in order
        # one-time costs: dynamo's compile seconds in each step, and the profiler's start and
        # stop (kernels), timed and kept out of the step they fell in (``transient_rows``)
        self.compile_of: list[float] = []
        self.profiler_rows: list[dict[str, Any]] = []
        # per layer: forward rows (key -> [name, type, calls, s]) and backward seconds (module
        # name -> s) of each step, so a layer's time per step and the phases' are over the
        # same steps
        self.fwd_of: list[dict[LayerKey, list[Any]]] = []
        self.bwd_of: list[dict[str, float]] = []
        self.step_spans: list[tuple[int, float, float]] = []  # (step, t0, t1): trace only
        self.epoch_ends: list[int] = []  # steps done (warm-up included) when each epoch ended
        # the optimizers, in the order they first stepped, their names and step counts;
        # ``cycle``: the optimizers of one iteration in step order, its last one ending a step
        # (None until one optimizer steps again: learnt from the step before); ``pending``:
        # the optimizer of each part closed since the last step ended (parts that end no step
        # yet); ``provisional``: trailing steps that ended at a backward, before any optimizer
        self.opt_seen = False  # an optimizer step has started
        self.opt_ids: list[int] = []
        self.opt_names: list[tuple[str, str]] = []  # (by variable or "", by class)
        self.opt_counts: list[int] = []
        self.cycle: list[int] | None = None
        self.pending: list[int] = []
        self.provisional = 0

    # ---- recording ------------------------------------------------------------------
    def record(self, wall: float, phases: dict[str, float], samples: int, tokens: int, *,
               optimizers: dict[int, float] | None = None, order: tuple[int, ...] = (),
               compile_s: float = 0.0, fwd: dict[LayerKey, list[Any]] | None = None,
               bwd: dict[str, float] | None = None,
               span: tuple[float, float] | None = None) -> None:
        """One completed step (or part of one): its wall time and phases, the samples and
        tokens it took, the optimizers' seconds in it and their order, dynamo's compile
        seconds, its layer rows, and (``trace``) its start and end on the clock."""
        self.seconds.append(wall)
        self.phases.append(phases)
        self.samples_of.append(samples)
        self.tokens_of.append(tokens)
        self.opt_of.append({} if optimizers is None else optimizers)
        self.opts_of.append(order)
        self.compile_of.append(compile_s)
        if self.trace and span is not None:
            self.step_spans.append((len(self.seconds), *span))
        self.fwd_of.append({} if fwd is None else fwd)
        self.bwd_of.append({} if bwd is None else bwd)

    def add_optimizer(self, key: int, names: tuple[str, str]) -> int:
        """A new optimizer (its first step): its index."""
        self.opt_ids.append(key)
        self.opt_counts.append(0)
        self.opt_names.append(names)
        return len(self.opt_ids) - 1

    @property
    def steps(self) -> int:
        """Steps completed so far (warm-up steps included): the parts closed so far, less those
        that wait for the optimizer step that ends them (``pending``; the backward passes
        before it, once an optimizer has started stepping)."""
        return len(self.seconds) - len(self.pending) - (self.provisional if self.opt_seen
                                                         else 0)

    def merge_last(self, k: int) -> None:
        """The last ``k`` completed steps become one step (they were parts of it: the steps
        ended at backward passes before the first optimizer step)."""
        first = len(self.seconds) - k
        if k < 2 or first < 0:
            return
        phases = dict.fromkeys(PHASES, 0.0)
        for row in self.phases[first:]:
            for name, v in row.items():
                phases[name] += v
        self.seconds[first:] = [sum(self.seconds[first:])]
        if self.follower is not None:
            self.follower.merge_last(k)
        self.phases[first:] = [phases]
        self.samples_of[first:] = [sum(self.samples_of[first:])]
        self.tokens_of[first:] = [sum(self.tokens_of[first:])]
        by_opt: dict[int, float] = {}
        for row in self.opt_of[first:]:
            for i, v in row.items():
                by_opt[i] = by_opt.get(i, 0.0) + v
        self.opt_of[first:] = [by_opt]
        self.opts_of[first:] = [tuple(i for row in self.opts_of[first:] for i in row)]
        self.compile_of[first:] = [sum(self.compile_of[first:])]
        fwd, bwd = sum_layers(self.fwd_of[first:], self.bwd_of[first:])
        self.fwd_of[first:], self.bwd_of[first:] = [fwd], [bwd]
        if self.trace:
            self.step_spans[first:] = [(first + 1, self.step_spans[first][1],
                                        self.step_spans[-1][2])]
        ends = [min(e, first + 1) for e in self.epoch_ends]
        self.epoch_ends = sorted(set(ends))

    def drop_last(self, k: int) -> None:
        """The last ``k`` completed parts belong to a step that never ended (the run stopped
        inside it): they are dropped, as the step still open is."""
        if k <= 0:
            return
        keep = len(self.seconds) - k
        for parts in (self.seconds, self.phases, self.samples_of, self.tokens_of,
                      self.opt_of, self.opts_of, self.compile_of, self.fwd_of, self.bwd_of):
            del parts[keep:]
        if self.follower is not None:
            self.follower.drop_last(k)
        if self.trace:
            self.step_spans = [span for span in self.step_spans if span[0] <= keep]
        self.epoch_ends = sorted({min(e, keep) for e in self.epoch_ends if e})

    def end_parts(self) -> None:
        """The parts closed since the last step ended (and the backward passes before the
        first optimizer step) are one step, which ends here."""
        parts = len(self.pending) + self.provisional
        self.pending, self.provisional = [], 0
        self.merge_last(parts)

    def settle(self) -> None:
        """The parts left waiting when the run stops: optimizer steps waiting for the
        iteration's last optimizer are one last step (each is a whole optimizer step); the
        backward passes of a first step whose optimizer step never returned (the run failed
        inside it) are dropped, as the step still open is."""
        if self.pending:
            self.merge_last(len(self.pending))
            self.pending = []
        elif self.provisional and self.opt_seen:
            self.drop_last(self.provisional)
            self.provisional = 0

    def close_epoch(self) -> None:
        """A training loader's new pass ends an epoch at the steps done so far."""
        done = self.steps  # (parts waiting for their step's end belong to the next one)
        if done > (self.epoch_ends[-1] if self.epoch_ends else 0):
            self.epoch_ends.append(done)

    # ---- reading --------------------------------------------------------------------
    def measured(self) -> list[int]:
        """The completed steps measured: after the warm-up, less the one-time costs (a
        compilation step: ``transient``)."""
        done = self.steps
        left_out = self.transient(done)
        return [i for i in range(min(self.warmup_steps, done), done) if i not in left_out]

    def transient(self, done: int) -> dict[int, str]:
        """The completed steps after the warm-up kept out as one-time costs, with the cause
        (``training.phases.transient_steps``)."""
        compute = [p.get("forward", 0.0) + p.get("backward", 0.0) for p in self.phases[:done]]
        return transient_steps(self.compile_of[:done], compute, self.warmup_steps)

    def sum(self, steps: list[int]) -> PhaseTotals:
        """The phases, wall time, samples and tokens of ``steps`` added up."""
        totals = PhaseTotals()
        for i in steps:
            totals.add(self.phases[i], self.seconds[i], self.samples_of[i], self.tokens_of[i])
        return totals

    def epoch_totals(self) -> list[PhaseTotals]:
        """The measured steps of each epoch (a training loader's end closes one; the steps
        after the last end are the epoch in progress; an epoch all warm-up is left out)."""
        first, done, measured = self.warmup_steps, self.steps, self.measured()
        bounds = [first, *(e for e in self.epoch_ends if first < e <= done)]
        if done > bounds[-1]:
            bounds.append(done)
        return [self.sum([i for i in measured if a <= i < b]) for a, b in zip(bounds, bounds[1:])]

    def layer_totals(self) -> tuple[dict[LayerKey, list[Any]], dict[str, float]]:
        """The per-layer forward rows and backward seconds summed over the measured steps."""
        measured = self.measured()
        return sum_layers([self.fwd_of[i] for i in measured],
                          [self.bwd_of[i] for i in measured])

    def transient_rows(self) -> list[dict[str, Any]]:
        """The one-time costs kept out of the measured steps (``TransientCost`` records): each
        step left out (a compilation step, with dynamo's compile seconds in it; a first step
        far above the others), each warm-up step that compiled, and the profiler's start and
        stop (kernels), which no step holds."""
        done = self.steps
        left_out = self.transient(done)
        rows = []
        for i in range(done):
            why = left_out.get(i) or ("compile" if i < self.warmup_steps and self.compile_of[i]
                                      else None)
            if why is not None:
                rows.append({"kind": why, "step": i + 1, "seconds": self.seconds[i],
                             "compile_s": self.compile_of[i] or None,
                             "warmup": i < self.warmup_steps or None})
        for row in self.profiler_rows:
            kind = "profiler start" if row["what"] == "profiler start" else "profiler stop"
            rows.append({"kind": kind, "step": row["step"], "seconds": row["seconds"]})
        return [{k: v for k, v in row.items() if v is not None} for row in rows]

    def optimizers_note(self, on_backward: bool, host_time: bool) -> str:
        """Which optimizers stepped, how their steps were grouped into steps (``on_backward``:
        steps end at backward passes), and the optimizer phase by optimizer over the measured
        steps (``host_time``: read on the host, CUDA in use)."""
        by_var = [v for v, _ in self.opt_names]
        # a variable name that two optimizers share (a loop's variable) names neither
        names = [f"{v} ({c.split(' #')[0]})" if v and by_var.count(v) == 1 else c
                 for v, c in self.opt_names]
        seconds = [0.0] * len(names)
        for i in self.measured():
            for k, v in self.opt_of[i].items():
                seconds[k] += v
        split = ", ".join(
            f"{n} {s:.3g} s" if s or not count else
            f"{n} none in the measured steps (its {count} step{'s' if count != 1 else ''} "
            "fell in warm-up or left-out steps)"
            for n, s, count in zip(names, seconds, self.opt_counts))
        groups = optimizer_groups(self.opts_of[:self.steps])
        kinds = "; ".join(f"{'+'.join(names[k] for k in group)}: {n} step{'s' if n != 1 else ''}"
                          for group, n in groups)
        if on_backward:
            where = "steps end at backward passes"
        elif groups and all(len(g) == 1 for g, _ in groups):
            where = ("they stepped one after another, and an optimizer that steps again before "
                     "the others end a step ends its own: each optimizer step is a step ("
                     + kinds + ")")
        else:
            cycle = self.cycle or [0]
            where = (f"a step is one iteration, ending where {names[cycle[-1]]} steps"
                     if len(cycle) > 1 else f"a step ends where {names[cycle[0]]} steps")
            if len(groups) > 1:
                where += ("; an optimizer that steps again before the others end a step ends "
                          f"its own (steps by the optimizers in them: {kinds})")
        return (f"{len(names)} optimizers stepped ({', '.join(names)}): {where}; the optimizer "
                f"phase by optimizer{' (host time)' if host_time else ''}: {split}")


def optimizer_groups(steps: list[tuple[int, ...]]) -> list[tuple[tuple[int, ...], int]]:
    """How many steps each set of optimizers made (each step's optimizers, in first-step
    order within it, once each), the sets in the order they first appear."""
    counts: dict[tuple[int, ...], int] = {}
    for step in steps:
        if step:
            key = tuple(dict.fromkeys(step))
            counts[key] = counts.get(key, 0) + 1
    return list(counts.items())


def sum_layers(fwd_of: list[dict[LayerKey, list[Any]]], bwd_of: list[dict[str, float]]
               ) -> tuple[dict[LayerKey, list[Any]], dict[str, float]]:
    """Per-step layer rows (id(module) -> [name, type, calls, s]) and backward seconds (module
    name -> s) added up over the steps given."""
    fwd: dict[LayerKey, list[Any]] = {}
    for step in fwd_of:
        for key, (name, kind, calls, s) in step.items():
            row = fwd.setdefault(key, [name, kind, 0, 0.0])
            row[2] += calls
            row[3] += s
    bwd: dict[str, float] = {}
    for step in bwd_of:
        for name, s in step.items():
            bwd[name] = bwd.get(name, 0.0) + s
    return fwd, bwd


def transient_text(row: dict[str, Any]) -> str:
    """One one-time cost in words: "compile 167 s in step 1", "profiler stop and export 6.9 s
    after step 4"."""
    seconds = row["seconds"]
    text = f"{seconds:.3g} s" if seconds >= 0.01 else f"{seconds * 1e3:.3g} ms"
    kind, step = row["kind"], row.get("step")
    if kind == "compile":
        compiled = row.get("compile_s")
        return (f"compile {text} in step {step}"
                + (f" ({compiled:.3g} s of it compiling)" if compiled else "")
                + (" (a warm-up step)" if row.get("warmup") else ""))
    if kind == "first step":
        return f"first step {text} (step {step}: far above the others, a one-time cost)"
    if kind == "profiler start":
        return f"profiler start {text} after step {step}"
    return f"profiler stop and export {text} after step {step}"


def transients_note(rows: list[dict[str, Any]]) -> str:
    """The note that names the one-time costs the measured steps leave out."""
    return ("one-time costs kept out of the measured steps (their phases, MFU and advice): "
            + "; ".join(transient_text(r) for r in rows))
