"""The numerator and denominators of MFU/HFU/MBU (core.records.efficiency): the model FLOPs of one
training step from the capture ``analyze`` uses (counted once per distinct input shape), and the
peaks of this machine: the measured roofline ceilings and, on a GPU the datasheet table knows
(analysis.llm.GPUS), its dense datasheet peak."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from layerscope.core.records.efficiency import MEASURED, Efficiency, efficiency

# FLOPs per trainable parameter element of one optimizer step (torch.optim's update rules,
# without weight decay unless named):
#   sgd        p -= lr * g                                           2
#   momentum   b = mu * b + g (2);  p -= lr * b (2)                  4
#   adam       m = b1 m + (1-b1) g (3);  v = b2 v + (1-b2) g g (4);
#              d = sqrt(v) / sqrt(bc2) + eps (3);  p -= (lr/bc1) m / d (3)   13
#   adamw      adam + p *= 1 - lr wd (1)                             14
#   adadelta   a = r a + (1-r) g g (4);  u = sqrt(ad + eps) / sqrt(a + eps) g (6);
#              ad = r ad + (1-r) u u (4);  p -= lr u (2)             16
# L2 weight decay (g += wd p) adds 2 to sgd, momentum, adam and adadelta; decoupled weight
# decay (AdamW, Adam(decoupled_weight_decay=True)) is the 1 of adamw, and torch skips it in
# a group whose weight_decay is 0 (nanoGPT's biases and norms): 13 there. Nesterov momentum
# adds g += mu b (2); amsgrad v_max = max(v_max, v) (1).
OPTIMIZER_FLOPS_PER_PARAM = {"sgd": 2, "momentum": 4, "adam": 13, "adamw": 14, "adadelta": 16}


def optimizer_flops(optimizer: torch.optim.Optimizer | str | None, params: int) -> int:
    """FLOPs of one ``optimizer`` step over ``params`` trainable elements (0 for None or an
    optimizer the table does not know)."""
    if optimizer is None:
        return 0
    if isinstance(optimizer, str):
        return OPTIMIZER_FLOPS_PER_PARAM.get(optimizer, 0) * params
    name = type(optimizer).__name__.lower()
    total = 0
    for group in optimizer.param_groups:
        n = sum(p.numel() for p in group["params"] if p.requires_grad)
        total += _per_param(name, group) * n
    return total


def _per_param(name: str, group: dict[str, Any]) -> int:
    """FLOPs per parameter of one torch.optim optimizer's step on one parameter group."""
    kind = "momentum" if name == "sgd" and group.get("momentum") else name
    per = OPTIMIZER_FLOPS_PER_PARAM.get(kind, 0)
    if not per:
        return 0
    decay = group.get("weight_decay")
    if kind == "adamw" or (kind == "adam" and group.get("decoupled_weight_decay")):
        per = OPTIMIZER_FLOPS_PER_PARAM["adam"] + (1 if decay else 0)
    elif decay:
        per += 2
    if kind == "momentum" and group.get("nesterov"):
        per += 2
    if kind in ("adam", "adamw") and group.get("amsgrad"):
        per += 1
    return per


@dataclass(frozen=True)
class StepFlops:
    """One optimizer step's FLOPs: forward, backward, optimizer, and the forward FLOPs
    recomputed in backward by activation checkpointing (for HFU)."""

    forward: float
    backward: float
    optimizer: float
    recompute: float = 0.0

    @property
    def model(self) -> float:
        return self.forward + self.backward + self.optimizer

    @property
    def hardware(self) -> float:
        return self.model + self.recompute


def step_flops(model: nn.Module, inputs: Any, *, kwargs: dict[str, Any] | None = None,
               optimizer: torch.optim.Optimizer | str | None = None, micro_batches: int = 1,
               attention: str = "causal") -> StepFlops:
    """The FLOPs of one optimizer step of ``model`` on ``inputs`` (one micro-batch: a shape, a
    tensor or a tuple of them, as ``analyze`` takes; ``kwargs``: forward's keyword arguments),
    repeated ``micro_batches`` times
    (gradient accumulation) before one ``optimizer`` step. Counted by
    ``analyze(mode="training")`` as executed (causal attention as its kernel runs it); the
    forward FLOPs that activation checkpointing recomputes inside backward are kept apart
    (they count for HFU, not MFU)."""
    from layerscope.analysis.analyze import analyze

    t = analyze(model, inputs, kwargs=kwargs, mode="training", attention=attention).totals
    recompute = t.recompute_flops or 0
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return StepFlops(forward=micro_batches * t.flops,
                     backward=micro_batches * ((t.backward_flops or 0) - recompute),
                     optimizer=optimizer_flops(optimizer, trainable),
                     recompute=micro_batches * recompute)


def _datasheet_gpu(device_name: str):
    from layerscope.analysis.llm import GPUS

    n = device_name.lower().replace("-", " ")
    for key, gpu in (("h200", "h200"), ("h100 pcie", "h100-pcie"), ("h100", "h100-sxm"),
                     ("a100 sxm4 40gb", "a100-40gb"), ("a100 pcie 40gb", "a100-40gb"),
                     ("a100", "a100-80gb"), ("l4", "l4"), ("4090", "rtx-4090")):
        if key in n.split() or (" " in key and key in n) or (key.isdigit() and key in n):
            return GPUS[gpu]
    return None


def datasheet_peak(device: str, dtype: torch.dtype = torch.float32
                   ) -> tuple[str, float, float] | None:
    """(source, dense peak FLOP/s, bandwidth) from the GPU datasheet table for the CUDA
    device in use, or None (a CPU, or a GPU the table does not know)."""
    if device != "cuda" or not torch.cuda.is_available():
        return None
    gpu = _datasheet_gpu(torch.cuda.get_device_name())
    if gpu is None:
        return None
    from layerscope.analysis.llm import peak_flops

    name = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "bf16"}.get(dtype,
                                                                                     "bf16")
    peak, _ = peak_flops(gpu, name)
    return f"{gpu.name} datasheet ({name}, dense)", peak, gpu.bandwidth


def measured_peak(device: str, dtype: torch.dtype = torch.float32,
                  threads: int | None = None) -> tuple[float, float]:
    """(peak FLOP/s, bandwidth bytes/s) measured by ``layerscope roofline`` (cached)."""
    from layerscope.analysis import roofline

    c = roofline.ceilings(device, dtype, threads)
    return c.peak_flops, c.bandwidth


def of_steps(flops_by_shape: dict[Any, StepFlops], shapes: Sequence[Any],
             step_seconds: Sequence[float], device: str, dtype: torch.dtype = torch.float32,
             world_size: int = 1) -> Efficiency:
    """The efficiency of measured steps (one input shape and wall time each) on this
    machine's peaks; ``world_size``: the FLOPs are per rank (per GPU) already, the peak is one
    device's."""
    peak, _bandwidth = measured_peak(device, dtype)
    model = [flops_by_shape[s].model for s in shapes]
    extra = [flops_by_shape[s].recompute for s in shapes]
    sheet = datasheet_peak(device, dtype)
    result = efficiency(model, step_seconds, peak, MEASURED, recompute_flops_per_step=extra,
                        datasheet=(sheet[0], sheet[1], None) if sheet else None)
    if world_size > 1:
        result.notes.append(f"per GPU: this rank's FLOPs and step time against one device's "
                            f"peak ({world_size} ranks)")
    return result


def of_batches(module: nn.Module, inputs: Any, batch_seconds: Sequence[float], device: str,
               dtype: torch.dtype = torch.float32) -> Efficiency:
    """The efficiency of inference batches of ``module`` on ``inputs`` (one batch, as
    ``analyze`` takes them), each timed, against the measured ceilings (and a datasheet)."""
    from layerscope.analysis import roofline
    from layerscope.analysis.analyze import analyze

    t = analyze(module, inputs).totals
    c = roofline.ceilings(device, dtype)
    return efficiency(t.flops, batch_seconds, c.peak_flops, MEASURED,
                      bytes_per_step=t.bytes_read + t.bytes_written, peak_bytes_per_s=c.bandwidth,
                      datasheet=datasheet_peak(device, dtype), training=False)


def of_inference(flops_per_batch: float, bytes_per_batch: float, batch_seconds: float,
                 device: str, dtype: torch.dtype, peak_flops_per_s: float,
                 bandwidth: float) -> Efficiency:
    """The efficiency of inference batches (forward FLOPs and bytes moved per batch at the
    median batch time) against the measured ceilings, and a GPU's datasheet."""
    return efficiency(flops_per_batch, batch_seconds, peak_flops_per_s, MEASURED,
                      bytes_per_step=bytes_per_batch, peak_bytes_per_s=bandwidth,
                      datasheet=datasheet_peak(device, dtype), training=False)
