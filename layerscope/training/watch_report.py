"""The report of a watched run: ``training.watch.Watch.report`` builds the ``train`` report
(``core.records.train.TrainReport``) from the step ledger, the per-layer clock, the memory guard
and the profiler ranges, with the notes that say what its figures are of and what they leave
out. ``WatchReport`` is a part of ``Watch`` (its state is the Watch's).
"""
from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any

from layerscope.core.environment import with_load
from layerscope.core.phases import per_step
from layerscope.core.records.memory import PostMortem
from layerscope.core.records.train import TrainReport, TransientCost
from layerscope.training import chrome_trace
from layerscope.training.phases import PhaseTotals
from layerscope.training.step_ledger import transients_note


def process_group_note(group: dict[str, Any]) -> str:
    """What a watched step of a process in a group of several holds: the hooks see backward
    and the optimizer, not the collectives DDP runs inside backward."""
    return (f"the script formed a process group (rank {group['rank']} of "
            f"{group['world_size']}, {group['backend']}): backward includes the gradient "
            "all-reduce that DDP overlaps with it; communication is not timed separately, and "
            "the ranks' waits for each other are not measured")


class WatchReport:
    """The report and the other views of a Watch's figures (a part of ``Watch``)."""

    def chrome_trace(self) -> dict[str, Any]:
        """The phases of every step as a Chrome trace (chrome://tracing, Perfetto), in the
        layout of ``train``'s distributed trace (training.chrome_trace): steps on one row,
        their phases on the next; host time (``trace=True`` keeps them)."""
        pid = int(os.environ.get("RANK", "0") or 0)
        t0 = self.step_spans[0][1] if self.step_spans else 0.0
        steps = [(f"step {step}", a - t0, b - a, {"warm-up": step <= self.warmup_steps})
                 for step, a, b in self.step_spans]
        phases = [(phase, a - t0, b - a, None) for phase, a, b in self.intervals if b > a]
        return chrome_trace.trace(chrome_trace.process_events(pid, self.name, steps, phases))

    def _environment(self) -> dict[str, Any]:
        """The environment, its torch threads those the steps ran with (when a step ended)."""
        env = with_load(self.load_at_start)  # a copy: environment() is cached
        if self.step_threads is not None:
            env["torch_threads"] = self.step_threads
        return env

    def step_on_used(self) -> str:
        """What ended the steps: "optimizer", or "backward" (given, or the fallback of the
        default when no optimizer stepped)."""
        fell_back = self.fallback and self.ledger.provisional and not self.ledger.opt_seen
        return "backward" if self.step_on == "backward" or fell_back else "optimizer"

    # ---- notes ----------------------------------------------------------------------
    def _sample_notes(self, totals: PhaseTotals) -> list[str]:
        """What the samples (and throughput) are of, where a step took no batch or the
        batches came from the forwards' arguments."""
        notes = []
        model = self._sample_module[1] if self._sample_module else "the model"
        if totals.steps and not totals.samples:
            notes.append("samples not seen: no training batch came from a DataLoader, and the "
                         "training forwards had no tensor argument to read a batch size from "
                         "(keyword arguments only, or no module forward): no throughput")
        empty = sum(1 for n in self.step_samples if not n)
        if totals.samples and empty:
            notes.append(f"{empty} of {totals.steps} measured steps took no batch: a batch counts "
                         f"in the step whose training forward of {model} takes it, so a batch "
                         "used over several steps counts once; samples and throughput are the "
                         "other steps'")
        if self._samples_from_forward and not self._loader_seen and totals.samples:
            notes.append(f"no DataLoader batch seen: samples are the batch dimension (dim 0) of "
                         f"the first tensor argument of each training forward of {model}"
                         + (", tokens its B x T token ids" if totals.tokens else ""))
        return notes

    def _no_step_notes(self, done: int) -> list[str]:
        """Why no step completed (or ran here: child processes)."""
        opt_seen = self.ledger.opt_seen
        if self.children:
            return [f"training ran in {self.children} child process"
                    f"{'es' if self.children > 1 else ''}, which "
                    f"{'are' if self.children > 1 else 'is'} not measured"
                    if not done else
                    f"{self.children} child process{'es' if self.children > 1 else ''} "
                    "started by the script (multiprocessing) not measured"]
        if done:
            return []
        if opt_seen and self.step_on == "optimizer":
            return ["no training step completed: the run ended inside the first step, in "
                    "or before its first optimizer.step()"]
        if self._backwards and self.step_on == "optimizer" and not self.fallback:
            return [f"no training step seen: --step-on optimizer ends steps only at "
                    f"optimizer.step(), and none ran ({self._backwards} backward() "
                    "call(s) did): for a loop without a torch.optim optimizer, use "
                    "--step-on auto (the default: steps end at backward passes when no "
                    "optimizer steps) or backward (watch(step_on=...))"]
        notes = ["no training step seen: no optimizer.step(), no backward() and no "
                 "mark_step()" if self.step_on == "optimizer" else
                 "no training step seen: no backward() and no mark_step()"]
        if self.limit is not None:
            notes.append(f"the step limit ({self.limit}) did not act: no step ended")
        return notes

    def _step_notes(self, totals: PhaseTotals, done: int) -> list[str]:
        """What the steps are (evaluation left out, warm-up only, steps on backward passes,
        the optimizers' grouping) and why none completed."""
        notes = []
        ledger = self.ledger
        if self.eval_seconds:
            notes.append(f"{self.eval_seconds:.3f} s of evaluation (forward passes and batches "
                         "without gradients) left out of the training steps")
        if done and not totals.steps:
            notes.append(f"all {done} steps were warm-up: nothing measured")
        if (done and ledger.provisional and not ledger.opt_seen
                and self.step_on == "optimizer"):
            notes.append("no optimizer.step() seen: each step ends where a backward() returns "
                         "(steps on backward passes)")
            if self.limit is not None:
                notes.append(f"the step limit ({self.limit}) did not act: it counts optimizer "
                             "steps and none was seen (with steps on backward passes it counts "
                             "those)")
        notes += self._sample_notes(totals)
        if len(ledger.opt_names) > 1:
            notes.append(ledger.optimizers_note(self.step_on == "backward", self.cuda_used))
        return notes + self._no_step_notes(done)

    def _rank(self) -> tuple[str | None, str | None]:
        """(rank, world size) from the launcher's environment, else from the process group
        the script formed (a trainer's, without a launcher)."""
        group = self.process_group
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if group and not (rank and world):  # a group a trainer formed (no launcher's env)
            rank, world = str(group["rank"]), str(group["world_size"])
        return rank, world

    def _config(self, given: dict[str, Any]) -> dict[str, Any]:
        """The report's settings: the Watch's arguments, what ended the steps, and the
        what-if settings applied (``given``)."""
        return {"device": "cuda" if self.cuda_used else "cpu",
                "warmup_steps": self.warmup_steps, "steps": self.limit,
                "layers": self.layers, "memory": self.memory,
                "step_on": self.step_on_used(),
                **({"memory_limit": self.memory_limit} if self.memory_limit else {}),
                **({"functions": True} if self.functions else {}),
                **({"kernels": True} if self.kernels else {}),
                **({"nvtx": True} if self.nvtx else {}),
                **given, **({"what_if": self.what_if.flags(**given)} if given else {})}

    # ---- the report -----------------------------------------------------------------
    def _build_report(self) -> TrainReport:
        """The ``train`` report of the steps measured so far (``Watch.report``)."""
        totals = self.totals
        breakdown = totals.to_dict()
        epochs = [t.to_dict() for t in self.epoch_totals()]
        if not self.cuda_used:  # no device in use: no host-to-device phase to report
            for b in (breakdown, *epochs):
                b["seconds"].pop("h2d", None)
        wall = self.clock() - self._wall0
        done = len(self.ledger.seconds)
        notes = self._step_notes(totals, done)
        group = self.process_group
        if group and group["world_size"] > 1:
            notes.append(process_group_note(group))
        rank, world = self._rank()
        argv = self.argv if self.argv is not None else list(sys.argv[1:])
        # counted once the hooks are gone (the count runs the model's forward once more)
        efficiency, why = (None, None) if self._running else self._seen.efficiency(
            self.ledger.measured(), self.step_seconds, "cuda" if self.cuda_used else "cpu",
            int(world) if world and world.isdigit() else 1,
            outside=f"Other, {totals.seconds.get('other', 0.0) / totals.wall:.0%} of the "
                    "measured steps" if totals.wall else "")
        notes += [why] if why else []
        transients = self.transient_rows()
        if transients:
            notes.append(transients_note(transients))
        notes += self._memory.notes(self.post_mortem)
        notes += self._ranges.notes(done, self.ledger.opt_seen, self.step_on)
        given = self.what_if.given() if self.what_if is not None else {}
        if given:
            notes.insert(0, self.what_if.note())
        return TrainReport(
            recipe=self.name, config=self._config(given),
            run_dir="", epochs=[], breakdown=breakdown, epoch_breakdown=epochs,
            step_seconds=list(self.step_seconds),
            step_phases=per_step(self.step_phases) if self.step_phases else None,
            cpu_utilisation=(time.process_time() - self._cpu0) / wall if wall > 0 else None,
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            peak_cuda_bytes=self._memory.run_cuda_peak() if self.cuda_used else None,
            notes=notes, environment=self._environment(),
            script={"name": self.name, "argv": argv, **self.started},
            rank=int(rank) if rank and rank.isdigit() else None,
            world_size=int(world) if world and world.isdigit() else None,
            layers=self.layer_rows() if self.layers else None,
            phase_memory={k: dict(v) for k, v in self._memory.rows.items()}
            if self.memory else None,
            process_group=group, efficiency=efficiency,
            transients=[TransientCost.from_dict(t) for t in transients] or None,
            kernels=self._ranges.result(),
            # the record, as a report read back from JSON holds it (the views read its fields)
            post_mortem=None if self.post_mortem is None
            else PostMortem.from_dict(self.post_mortem),
            data_loading=self._probe.result(h2d_s=totals.seconds.get("h2d", 0.0),
                                            cuda=self.cuda_used)
            if self._probe is not None else None)
