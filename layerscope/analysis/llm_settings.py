"""The settings of the language-model commands, each declared once: ``LLMSettings``
(``layerscope llm`` and ``layerscope.llm``, analysis/llm.py) and ``PlanSettings``
(``layerscope plan`` and ``layerscope.plan``, analysis/plan.py). A module of its own, without
torch, so that the command line starts without it."""
from __future__ import annotations

import dataclasses
from typing import Any

from layerscope.analysis.llm_gpus import WEIGHT_DTYPES, dtype_name
from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.llm_records import ATTENTION, KERNELS, RECOMPUTE, STRATEGIES, TRAIN_DTYPES
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


def weight_dtype(value: Any, name: str | None = None) -> str:
    """A dtype of weights or of the KV cache: fp32, bf16, ... (or a name of one: bfloat16)."""
    if name is not None:
        return dtype_name(value, name)
    try:
        return dtype_name(value)
    except UserError:
        raise UserError(f"must be one of {', '.join(WEIGHT_DTYPES)}, got {value!r}") from None


@dataclasses.dataclass(kw_only=True, eq=False)
class LLMSettings(Settings):
    """Every setting of ``layerscope llm`` and ``layerscope.llm``: a new one is a field here
    (the CLI's option, the API's argument and the report's ``settings`` follow). ``gpu``: a
    name, a JSON file or a ``GPU`` (the report keeps its name)."""

    model: Any = option(REQUIRED, "an LLM preset (gpt2, llama-3-8b, llama-3-70b, "
                                  "llama-3.1-405b, mixtral-8x7b, qwen2.5-7b) or "
                                  "hf:PATH/config.json", positional=True, record=False)
    seq_len: int | None = option(None, "prompt length S (default: the preset's, 2048 for most)",
                                 parse=values.positive_int)
    context: int | None = option(None, "tokens in the KV cache for decode and the cache size "
                                       "(default: S)", parse=values.positive_int)
    batch_size: int = option(1, "sequences B", parse=values.positive_int)
    dtype: str = option("bf16", "weight dtype for the roofline bound (default bf16)",
                        parse=weight_dtype, choices=WEIGHT_DTYPES)
    kv_dtype: str | None = option(None, "KV-cache dtype (default: --dtype)", parse=weight_dtype,
                                  choices=WEIGHT_DTYPES)
    gpu: Any = option(None, "h100-sxm, h100-pcie, h200, a100-40gb, a100-80gb, l4, rtx-4090 or "
                            "a JSON file (name, bf16_flops, bandwidth_bytes_per_s, "
                            "memory_bytes)", metavar="NAME|FILE.json", reads=True)
    tp: int = option(1, "GPUs the weights and KV cache are split across for the --gpu bound "
                        "(tensor parallel; default 1)", parse=values.positive_int)
    attention: str = option("causal", "count causal attention's lower triangle (default) or the "
                                      "full matrix", choices=ATTENTION)


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

