"""``LayerscopeCallback`` for Lightning: the phase breakdown of ``trainer.fit``.

    from layerscope.integrations.lightning import LayerscopeCallback
    trainer = Trainer(callbacks=[LayerscopeCallback(out="train.json")])

The Watch starts at ``on_train_start`` (after the sanity check, before the first batch is
fetched), restricted to the trainer's optimizer when it has one; it stops at ``on_train_end``
(or ``on_exception``: the steps done so far are kept and written). Steps are counted by the
optimizer's own step hooks, exactly as ``layerscope run`` counts them, so the two give the same
breakdown: under automatic optimisation Lightning runs forward and backward inside
``optimizer.step(closure)``, and the Watch takes them out of the optimizer phase there as
anywhere else. ``on_train_batch_end`` only asks the trainer to stop once ``steps`` are measured.
Every rank measures its own steps; only global rank 0 writes the files.
"""
from __future__ import annotations

from typing import Any

from layerscope.integrations.session import SessionCallback, first_optimizer

try:  # the unified package, else the standalone one; neither is needed to import layerscope
    from lightning.pytorch.callbacks import Callback as _Callback
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        from pytorch_lightning.callbacks import Callback as _Callback
    except ImportError:
        _Callback = object


class LayerscopeCallback(SessionCallback, _Callback):  # type: ignore[misc,valid-type]
    """Measure ``trainer.fit``'s steps; the report is ``callback.report`` afterwards (a
    ``TrainReport``, kind "train") and is written to ``out`` / ``html`` when given (``out``'s
    format from ``format`` or its extension: json, csv, html, table, png). ``steps``: stop
    the fit after that many optimizer steps (warm-up included); ``warmup_steps``: left out of
    the breakdown; ``layers`` / ``memory``: as ``layerscope run --layers / --memory``."""

    _trainer = ("Lightning", "lightning") if _Callback is object else None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._session.start(first_optimizer(trainer.optimizers), "lightning")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._session.wants_stop():
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._session.stop(write=trainer.is_global_zero)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._session.stop(write=trainer.is_global_zero)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._session.stop(write=trainer.is_global_zero)  # nothing if already stopped
