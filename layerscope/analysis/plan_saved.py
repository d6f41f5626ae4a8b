"""What autograd saves for backward in a model's training step, counted on fake tensors: each
saved tensor once (a view shares its base's storage), weights gathered per expert told apart
from activations, the fused attention kernels' saved outputs; ``measure_saved`` runs one
forward of a model built on the meta device and returns the bytes per module."""
from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from layerscope.analysis import dense_experts, modes
from layerscope.analysis.capture.nodynamo import without_dynamo
from layerscope.analysis.capture.records import module_table
from layerscope.analysis.capture.tracker import ModuleTracker

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Saved:
    """Bytes autograd saved in one forward (+ loss): all distinct storages, those whose last two
    dimensions are (seq, seq) (attention scores and what derives from them), the block input."""

    total: int
    scores: int
    gathered: int = 0  # weights picked per token (batched_mm's expert copies), not counted
    # (module, bytes, seq x seq bytes) of the storages each module saved first
    by_module: tuple[tuple[str, int, int], ...] = ()

    def within(self, name: str) -> tuple[int, int]:
        """(bytes, seq x seq bytes) saved first by module ``name`` or its submodules."""
        got = [(b, sq) for owner, b, sq in self.by_module
               if owner == name or owner.startswith(name + ".")]
        return sum(b for b, _ in got), sum(sq for _, sq in got)


class FlashAttention(TorchFunctionMode):
    """``F.scaled_dot_product_attention`` as the flash-attention kernel a GPU runs for 16-bit
    inputs without a mask (PyTorch's fused-kernel choice needs a real GPU to ask; on fake CUDA it
    would fall back to the math path, which saves the seq x seq probabilities). The flash kernel
    saves q, k, v, its output and the log-sum-exp per row: no seq x seq tensor. The flash kernel
    needs one head size for q, k and v; where the values' differs (DeepSeek's multi-head latent
    attention: q and k 192, v 128) a GPU runs the memory-efficient kernel, which saves the same
    (q, k, v, output, log-sum-exp) and returns the values' head size."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and len(args) == 3 \
                and kwargs.get("attn_mask") is None and not kwargs.get("enable_gqa") \
                and args[0].dtype in (torch.float16, torch.bfloat16) \
                and all(t.shape[-1] <= 256 and t.shape[-1] % 8 == 0 for t in args):
            dropout, causal = kwargs.get("dropout_p", 0.0), kwargs.get("is_causal", False)
            if len({t.shape[-1] for t in args}) == 1:
                return torch.ops.aten._scaled_dot_product_flash_attention(
                    *args, dropout, causal, scale=kwargs.get("scale"))[0]
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                *args, None, True, dropout, causal, scale=kwargs.get("scale"))[0]
        return func(*args, **kwargs)


class SavedCounter:
    """``saved_tensors_hooks`` that count the distinct storages autograd saves for backward
    (views of one tensor count once), leaving out ``own`` storages (parameters, buffers) and
    expert weights copied per token (``_gathered_weights``, counted apart). A storage whose
    last two dimensions are (seq, seq) is an attention score's."""

    def __init__(self, own: set[int], seq: int, tracker: ModuleTracker | None = None):
        """``tracker``: names the module running when a tensor is saved (for a mixture of
        experts computed densely, ``dense_experts.scale_of``)."""
        self.own, self.seq, self.tracker = own, seq, tracker
        self.found: dict[int, tuple[int, bool]] = {}
        # storage -> (module that saved it, the saved tensor's shape): the largest view saved
        self.made: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.gathered: dict[int, int] = {}
        # every saved tensor is held until the count is done: a storage freed meanwhile (an op
        # whose result nothing uses) could hand its address to a later one, which would then
        # be taken for the same storage and not counted
        self.held: list[torch.Tensor] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        self.held.append(t)
        storage = t.untyped_storage()
        if _gathered_weights(t, self.own):
            self.gathered[storage._cdata] = storage.nbytes()
        elif storage._cdata not in self.own:
            square = t.dim() >= 2 and t.shape[-1] == self.seq and t.shape[-2] == self.seq
            seen = self.found.get(storage._cdata, (0, False))
            self.found[storage._cdata] = (storage.nbytes(), seen[1] or square)
            if self.tracker is not None:
                self.made.setdefault(storage._cdata, (self.tracker.current(), tuple(t.shape)))
        return t

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    def saved(self, blocks: Mapping[str, tuple[int, int, int]] | None = None) -> Saved:
        """The sums; ``blocks``: the dense mixture-of-experts blocks
        (``dense_experts.pair_scale``), whose per-(token, expert) tensors count k/E."""
        sizes = {}
        for key, (nbytes, _) in self.found.items():
            k, e = dense_experts.scale_of(*self.made[key], blocks) \
                if blocks and key in self.made else (1, 1)
            sizes[key] = nbytes * k // e
        owners: dict[str, list[int]] = {}
        for key, (_, square) in self.found.items():
            got = owners.setdefault(self.made[key][0] if key in self.made else "", [0, 0])
            got[0] += sizes[key]
            got[1] += sizes[key] if square else 0
        return Saved(total=sum(sizes.values()),
                     scores=sum(sizes[key] for key, (_, square) in self.found.items() if square),
                     gathered=sum(self.gathered.values()),
                     by_module=tuple((name, b, sq) for name, (b, sq) in owners.items()))


@without_dynamo()
def measure_saved(model: nn.Module, batch: int, seq: int, dtype: torch.dtype,
                  device: str = "cuda", route: tuple[int, int] = (1, 1)) -> Saved:
    """Run ``model`` forward in training mode on fake tensors of ``device`` and sum the bytes of
    the distinct storages autograd saves for backward (``SavedCounter``; parameters and buffers
    are not activations). The model is not changed: its parameters are replaced for the call
    only (``torch.func.functional_call``) and its train flags restored. ``route``: (k, E) of a
    mixture of experts; a block whose code runs every token through all E experts saves its
    per-(token, expert) tensors k/E as a routed implementation does (analysis/
    dense_experts.py)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call

    flags = modes.set_mode(model, True)
    try:
        with FakeTensorMode():
            state = {}
            for name, t in list(model.named_parameters()) + list(model.named_buffers()):
                float_dtype = dtype if t.is_floating_point() else t.dtype
                state[name] = torch.empty(t.shape, dtype=float_dtype, device=device,
                                          requires_grad=isinstance(t, nn.Parameter))
            stats, _ = module_table(model)
            tracker = ModuleTracker(model, stats, tag_autograd=False)
            counter = SavedCounter({t.untyped_storage()._cdata for t in state.values()}, seq,
                                   tracker)
            ids = torch.zeros(batch, seq, dtype=torch.long, device=device)
            flash = FlashAttention() if device == "cuda" else contextlib.nullcontext()
            with counter.hooks(), flash, tracker:
                out = functional_call(model, state, (ids,), strict=False, tie_weights=True)
                logits = getattr(out, "logits", out)
                # the loss as trainers compute it: cross-entropy of fp32 logits
                F.cross_entropy(logits.float().flatten(0, -2), ids.flatten())
    finally:
        modes.restore(flags)
    return counter.saved(dense_experts.pair_scale(stats, route))


def _gathered_weights(t: torch.Tensor, own: set[int]) -> bool:
    """Whether ``t`` is matrices of a stacked parameter (experts x out x in) picked by an index
    (``gate_up_proj[expert_ids]``); rows of a 2-D table (an embedding written as
    ``weight[ids]``) are activations the next op keeps, and counted. transformers'
    ``batched_mm`` experts, which the model is built with (its MACs are the chosen experts'),
    copy each (token, expert) pair's weights this way and multiply them in one bmm, which saves
    the copies: tokens x k x 3 x hidden x expert width, 1.4 TB per DeepSeek-V3 layer at 2,048
    tokens. A GPU trains the experts with ``grouped_mm`` (transformers' default there), which
    reads the weights in place and saves what batched_mm saves besides the copies (the tokens'
    inputs, the gate/up and SiLU outputs, the products, the outputs). The copies are weights,
    not activations."""
    fn = t.grad_fn
    return fn is not None and fn.name() == "IndexBackward0" and any(
        f is not None and hasattr(f, "variable") and f.variable.dim() >= 3
        and f.variable.untyped_storage()._cdata in own for f, _ in fn.next_functions)
