"""``LayerscopeCallback`` for the Hugging Face Trainer: the phase breakdown of ``train()``.

    from layerscope.integrations.transformers import LayerscopeCallback
    trainer = Trainer(..., callbacks=[LayerscopeCallback(out="train.json")])

The Watch starts at ``on_train_begin``, restricted to the Trainer's optimizer (unwrapped from
accelerate's ``AcceleratedOptimizer``: the step hooks fire on the torch optimizer inside), and
stops at ``on_train_end``. Steps are the optimizer's steps, counted by its own hooks as under
``layerscope run``: with ``gradient_accumulation_steps=k`` one step holds k forward and backward
passes, like the Trainer's own ``global_step``. ``on_step_end`` only asks the Trainer to stop
once ``steps`` are done. The Trainer's logging is left as it is; only the process of rank 0
(``state.is_world_process_zero``) writes the files.

The Trainer has no callback for a failed run: when ``train()`` raises, the Watch stays installed
until ``callback.close()`` (or the next ``on_train_begin`` of this callback) stops it.
"""
from __future__ import annotations

from typing import Any

from layerscope.integrations.session import SessionCallback, first_optimizer

try:  # transformers is optional; importing layerscope never needs it
    from transformers import TrainerCallback as _Callback
except ImportError:  # pragma: no cover - depends on what is installed
    _Callback = object


class LayerscopeCallback(SessionCallback, _Callback):  # type: ignore[misc,valid-type]
    """Measure ``Trainer.train``'s steps; the report is ``callback.report`` afterwards (a
    ``TrainReport``, kind "train") and is written to ``out`` / ``html`` when given (``out``'s
    format from ``format`` or its extension: json, csv, html, table, png). ``steps``: stop
    training after that many optimizer steps (warm-up included); ``warmup_steps``: left out of
    the breakdown; ``layers`` / ``memory``: as ``layerscope run --layers / --memory``."""

    _trainer = ("transformers", "hf") if _Callback is object else None
    _writer = True  # rank 0 (set at each on_train_begin)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._writer = bool(state.is_world_process_zero)
        self._session.start(first_optimizer(kwargs.get("optimizer")), "transformers")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._session.wants_stop():
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._session.stop(write=self._writer)

    def close(self) -> None:
        """Stop a Watch that a failed ``train()`` left running (its report is kept, not
        written)."""
        self._session.stop(write=False)
