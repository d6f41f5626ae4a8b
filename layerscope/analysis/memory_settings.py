"""``layerscope.memory``'s settings, declared once (``MemorySettings``): every option of
``layerscope memory`` and argument of ``layerscope.memory`` (``memory_usage.memory``, the
analysis; ``training.recipe_memory.memory``, a recipe's name resolved first). A module of its
own, without torch, so that the command line starts without it."""
from __future__ import annotations

import dataclasses
from typing import Any

from layerscope.core import options, values
from layerscope.core.errors import UserError
from layerscope.core.settings import Settings, of_call, option

MODES = options.MODES
ZERO_GRAD = ("none", "zeros")
OPTIMIZER_NAMES = options.OPTIMIZER_NAMES + ("adadelta",)  # memory_track.OPTIMIZERS
DEFAULT_OPTIMIZER = "adam"


@dataclasses.dataclass(kw_only=True, eq=False)
class MemorySettings(Settings):
    """Every setting of ``layerscope memory`` and ``layerscope.memory``: a new one is a field
    here (the CLI's option, the API's argument and the saved result's ``settings`` follow).
    The API's ``set_to_none=`` is ``zero_grad`` (True: none, False: zeros)."""

    model: Any = options.model()
    inputs: Any = options.inputs()
    batch_size: int | None = options.batch_size()
    mode: str = options.mode()
    optimizer: Any = option(
        None, "optimizer whose states --mode training tracks: sgd (none), momentum (SGD with "
              "momentum 0.9), adam, adamw or adadelta (default: a train recipe's own for its "
              "name, else adam)", choices=OPTIMIZER_NAMES, record=False)  # report.optimizer
    zero_grad: str = option("none", "what optimizer.zero_grad() does between steps: none frees "
                                    "the gradients (set_to_none=True, torch's default), zeros "
                                    "keeps them, zeroed", choices=ZERO_GRAD)
    measure: bool = option(False, "also run the step for real on the CPU (random weights, zero "
                                  "inputs) and reconcile its peak with the static one")
    device: str = options.device()  # where measure runs the step (cuda: the allocator's too)
    fit: int | None = option(None, "also the largest batch size whose peak fits this budget: "
                                   "24GB (10^9 bytes), 24GiB (2^30), ...",
                             parse=values.byte_size, metavar="SIZE")
    fit_seq: bool = option(False, "with --fit, for a language model: also the longest "
                                  "--seq-len that fits at --batch-size")
    seq_len: int | None = options.seq_len()

    @property
    def set_to_none(self) -> bool:
        return self.zero_grad == "none"

    def check(self) -> None:
        if self.device != "cpu" and not self.measure:
            raise UserError(f"device {self.device} is where the measured step runs: add measure; "
                            "the static figures use no device", arguments=("device", "measure"))
        if self.fit_seq and self.fit is None:
            raise UserError("fit_seq needs a memory budget: give fit SIZE (24GB, 24GiB)",
                            arguments=("fit_seq", "fit"))
        if self.optimizer is not None and not isinstance(self.optimizer, str) \
                and not callable(self.optimizer):
            raise UserError(f"unknown optimizer {self.optimizer!r}: use one of "
                            f"{', '.join(OPTIMIZER_NAMES)} or a function of the parameters "
                            "returning a torch.optim.Optimizer", arguments="optimizer")


def memory_settings(settings: MemorySettings | None, model: Any, inputs: Any,
                    overrides: dict[str, Any]) -> MemorySettings:
    """The settings of a call: ``settings`` with the model, inputs and keyword arguments given
    (``set_to_none`` as ``zero_grad``)."""
    if "set_to_none" in overrides:
        overrides["zero_grad"] = ZERO_GRAD[0] if overrides.pop("set_to_none") else ZERO_GRAD[1]
    return of_call(MemorySettings, settings, overrides, "memory", model=model, inputs=inputs)
