"""The settings of the language-model commands, each declared once: ``PlanSettings``
(``layerscope plan`` and ``layerscope.plan``, analysis/plan.py). A module of its own, without
torch, so that the command line starts without it."""
from __future__ import annotations

import dataclasses
from typing import Any

from layerscope.analysis.llm_gpus import dtype_name
from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.llm_records import KERNELS, RECOMPUTE, STRATEGIES, TRAIN_DTYPES
from layerscope.core.settings import REQUIRED, Settings, option

LLM_MODEL_HELP = "an LLM preset (llama-3-70b, ...) or hf:PATH/config.json"


def train_dtype(value: Any, name: str | None = None) -> str:
    """A training precision: bf16, fp16 or fp32 (or a name of one: bfloat16, torch.float16)."""
    try:
        text = dtype_name(value, name or "dtype")
    except UserError:
        text = str(value)
    if text not in TRAIN_DTYPES:
        words = f"must be one of {', '.join(TRAIN_DTYPES)}, got {value!r}"
        raise UserError(f"{name} for training {words}" if name else f"{words} (training)",
                        arguments=name or ())
    return text


@dataclasses.dataclass(kw_only=True, eq=False)
class PlanSettings(Settings):
    """Every setting of ``layerscope plan`` and ``layerscope.plan``: a new one is a field here
    (the CLI's option and the API's argument follow). A plan records its settings as its own
    fields (gpus, tp, ...), so it has no ``settings`` dict."""

    model: Any = option(REQUIRED, LLM_MODEL_HELP, positional=True, record=False)
    gpus: int = option(REQUIRED, "devices in all", parse=values.positive_int)
    strategy: str | None = option(None, "one strategy (default: a table of all)",
                                  choices=STRATEGIES)
    tp: int = option(1, "tensor-parallel degree", parse=values.positive_int)
    pp: int = option(1, "pipeline stages", parse=values.positive_int)
    micro_batch: int = option(1, "sequences per micro-batch", parse=values.positive_int)
    seq_len: int | None = option(None, "tokens per sequence (default: the preset's)",
                                 parse=values.positive_int)
    recompute: str = option("none", "activation recomputation (selective: attention scores; "
                                    "op: torchtitan's per-op checkpointing, keeping every other "
                                    "matmul's output; full: blocks)", choices=RECOMPUTE)
    kernels: str | None = option(None, "fused: fused norms, SwiGLU and flash attention on "
                                       "un-expanded K/V, counted from the shapes; unfused: the "
                                       "block's code as measured (default: fused for a dense "
                                       "preset, unfused otherwise)", choices=KERNELS)
    dtype: str = option("bf16", "training precision (bf16/fp16: mixed-precision Adam, 16 "
                                "bytes/param)", parse=train_dtype, choices=TRAIN_DTYPES)
    gpu_memory: int = option("80GB", "memory per GPU: 80GB (10^9 bytes), 80GiB (2^30), ... "
                                     "(default 80GB)", parse=values.byte_size, metavar="SIZE")
    fit: int | None = option(None, "also each strategy's largest micro-batch whose peak fits "
                                   "this budget per GPU (80GB, 80GiB, ...)",
                             parse=values.byte_size, metavar="SIZE")

    def check(self) -> None:
        if self.gpus % (self.tp * self.pp):
            raise UserError(f"gpus {self.gpus} is not a multiple of tp x pp = "
                            f"{self.tp * self.pp}", arguments=("gpus", "tp", "pp"))

