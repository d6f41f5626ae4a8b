"""What both trainers' callbacks share: one Watch from the start of training to its end, the
report kept for the caller and written by the process of rank 0 only."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.io import check_output, outputs
from layerscope.renderers import FORMATS, pick_format, render


def missing(package: str, extra: str) -> UserError:
    """The one line a callback gives when its trainer is not installed."""
    return UserError(f"{package} is not installed: pip install layerscope[{extra}]")


class WatchSession:
    """Options validated when the callback is made (a bad output path stops the script before
    training, not after it); ``start`` / ``stop`` bracket the training."""

    def __init__(self, *, out: str | None = None, html: str | None = None,
                 format: str | None = None, steps: int | None = None,
                 warmup_steps: int = 0, layers: bool = False, memory: bool = False,
                 name: str | None = None):
        if steps is not None:
            values.positive_int(steps, "steps")
        values.non_negative_int(warmup_steps, "warmup_steps")
        if format is not None and format not in FORMATS:
            raise UserError(f"unknown format {format!r}: use one of {', '.join(FORMATS)}")
        for path, what in ((out, "out"), (html, "html")):
            if path is not None:
                check_output(path, what)
        self.out, self.html, self.format = out, html, format
        self.steps, self.warmup_steps = steps, warmup_steps
        self.layers, self.memory, self.name = layers, memory, name
        self.watch: Any = None
        self.report: Any = None
        self._owned = False
        self._limit_reached = False

    def wants_stop(self) -> bool:
        """``steps`` steps are done (warm-up included, as ``Watch(steps=...)`` counts them): the
        trainer should stop at the end of this batch."""
        return self._limit_reached

    def start(self, optimizer: Any, trainer: str) -> None:
        """Measure from here. Under ``layerscope run`` (or inside ``layerscope.watch()``) a
        Watch is already measuring this process: the callback reports from that one rather
        than starting a second, so both give the same steps."""
        from layerscope.training.watch import Watch, active

        if self.watch is not None:  # a run that failed without telling the callback
            self.stop(write=False)
        self.report, self._limit_reached = None, False
        running = active()
        if running is not None:
            self.watch, self._owned = running, False
            return
        # Not restricted to the trainer's model: a LightningModule's training_step may call
        # its submodules and loss modules directly, and the Watch counts only the model's own
        # outermost call when given one; unrestricted, it counts the outermost module calls,
        # as under ``layerscope run``. The optimizer restriction keeps other optimizers' steps
        # (none in a one-optimizer trainer) from ending steps.
        self.watch = Watch(None, optimizer, steps=self.steps, warmup_steps=self.warmup_steps,
                           layers=self.layers, memory=self.memory,
                           name=self.name or _script_name(trainer), on_stop=self._on_limit)
        self._owned = True
        self.watch.start()

    def _on_limit(self, watch: Any) -> None:
        self._limit_reached = True

    def stop(self, write: bool) -> Any:
        """Stop the Watch this session started (nothing of it stays installed; one that was
        already running goes on) and keep its report; write it when ``write`` (rank 0). A
        second call does nothing."""
        if self.watch is None:
            return self.report
        watch, self.watch = self.watch, None
        if self._owned:
            watch.stop()
        self.report = watch.report()
        if write:
            self.write(self.report)
        return self.report

    def write(self, report: Any) -> None:
        if self.out is None and self.html is None:
            return
        with outputs() as tx:
            if self.out is not None:
                fmt = pick_format(self.format, self.out)
                if fmt == "png":
                    from layerscope.renderers.plot import render_png

                    tx.write(self.out, render_png(report))
                else:
                    tx.write(self.out, render(report, fmt, width=160))
            if self.html is not None:
                tx.write(self.html, render(report, "html"))


class SessionCallback:
    """The options and the report both callbacks share; mixed in before the trainer's own
    callback class, which says through ``_trainer`` (name, extra) whether it is installed."""

    _trainer: tuple[str, str] | None = None  # (package, extra) when the package is missing

    def __init__(self, out: str | None = None, *, html: str | None = None,
                 format: str | None = None, steps: int | None = None,
                 warmup_steps: int = 0, layers: bool = False, memory: bool = False,
                 name: str | None = None):
        if self._trainer is not None:
            raise missing(*self._trainer)
        super().__init__()
        self._session = WatchSession(out=out, html=html, format=format, steps=steps,
                                     warmup_steps=warmup_steps, layers=layers, memory=memory,
                                     name=name)

    @property
    def report(self) -> Any:
        """The TrainReport of the last training (None before it ends)."""
        return self._session.report


def _script_name(trainer: str) -> str:
    """The script's file name, as ``layerscope run`` names its report."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script or trainer


def first_optimizer(optimizers: Sequence[Any] | Any) -> Any:
    """The torch optimizer to restrict the Watch to: the only one, unwrapped from the
    trainers' wrappers (accelerate's AcceleratedOptimizer and Lightning's LightningOptimizer
    hold it as ``.optimizer``; the global step hooks fire on that inner one); None when there
    are several or none (then every optimizer's steps count)."""
    import torch

    if isinstance(optimizers, (list, tuple)):
        if len(optimizers) != 1:
            return None
        optimizers = optimizers[0]
    inner = getattr(optimizers, "optimizer", None)
    while isinstance(inner, torch.optim.Optimizer) and inner is not optimizers:
        optimizers, inner = inner, getattr(inner, "optimizer", None)
    return optimizers if isinstance(optimizers, torch.optim.Optimizer) else None
