"""``layerscope.plan``: per-device training memory of a decoder-only LM, and whether it fits.

Model states (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", section 3.1): mixed-precision Adam keeps 2 bytes of bf16/fp16 weights, 2 of
gradients and K = 12 of optimizer state (fp32 master weights, momentum, variance) per parameter,
16 in all. Tensor parallelism (t) and pipeline parallelism (p) first divide the model's
parameters, Psi/(t p) per device; the d = N/(t p) data-parallel replicas then keep
- ddp: everything replicated, (2 + 2 + 12) Psi/(t p);
- zero1: the optimizer states sharded, (2 + 2 + 12/d) Psi/(t p);
- zero2: gradients too, (2 + (2 + 12)/d) Psi/(t p);
- zero3 / fsdp (full shard): weights too, 16 Psi/(t p d).
Training in fp32 keeps 4 + 4 + 8 (momentum, variance) bytes per parameter.

Activations are measured, not taken from a formula: the model built with its first n decoder
blocks runs forward in training mode (with its loss) on fake CUDA tensors (no memory, no GPU
needed; fake CUDA dispatches to what a GPU would run, e.g. dropout saves a 1-byte mask, not the
CPU's float noise tensor), under ``torch.autograd.graph.saved_tensors_hooks``; the distinct
storages autograd saves for backward, parameters and buffers excluded, are summed. The layers
are grouped by structure as ``llm`` groups them (analysis/llm_structure.py: the blocks' modules
and shapes and each layer's attention; DeepSeek-V3's dense first layers and its MoE layers,
Gemma-3's window and global layers): the first f + 1 blocks minus the first f, f a group's
member, is that group's block; one block minus its block is what the embeddings, final norm,
head and loss save (a first layer alone in its group is measured against the model of no
blocks). All blocks alike: two blocks minus one. Tests check the per-block figure against
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
sbh(34 + 5as/h), and the grouped sum against the full model's measurement.

Then per device:
- pipeline: a stage holds L/p blocks; with the 1F1B schedule the first stage keeps p
  micro-batches in flight, so it holds (L/p) x p micro-batches' activations (Korthikanti et al.
  section 4.2.3); we assume at least p micro-batches per step. With layers of several
  structures stage k (contiguous layers) keeps p - k micro-batches, and the stage holding the
  most counts;
- tensor parallelism with sequence parallelism divides every saved tensor by t (Korthikanti et
  al. eq. 4, sbh(34/t + 5as/(ht))); the embeddings/head/loss are divided by t too (vocabulary-
  parallel head) and counted once, on the stage that is the peak;
- kernels: ``unfused`` is the block as measured (its code as written: a Hugging Face-style
  RMSNorm keeps an fp32 copy of its input, SiLU keeps its output, GQA's K/V are expanded before
  attention); ``fused`` (the default for the presets' dense blocks) counts what fused RMSNorm,
  fused SwiGLU and flash attention on un-expanded K/V save, from the block's shapes
  (``block_bytes.fused_layer_bytes``, where the derivation is);
- recompute: ``selective`` drops the seq x seq tensors (attention scores, softmax, dropout:
  Korthikanti et al.'s 5as^2b/t term), recomputing them during backward; ``op`` is torchtitan's
  op-level selective checkpointing (the block input and the outputs of attention and of every
  other matmul are kept, the rest recomputed: ``block_bytes.op_checkpoint_bytes``); ``full``
  keeps each block's input only and recomputes the block during its backward. While a block is
  recomputed its activations are live again (``recompute_working_bytes``: the recomputed part).
Peak = weights + gradients + optimizer states + activations (+ the recompute working set)
+ the loss's backward (the fp32 gradients of the log-probabilities and of the logits, one
micro-batch, beside the fp32 log-probabilities the loss saved, which the activations outside the
blocks hold) + for zero3/fsdp the gather buffers (one block's unsharded weights, divided by tp,
twice: FSDP prefetches the next block's all-gather while the current one computes) and the
reduce-scatter buffers (one block's unsharded gradients, divided by tp, and the previous
block's reduce-scatter input, still in flight: FSDP2's ``foreach_reduce`` frees it only when
the next block's gradients are copied in). With tp > 1, PyTorch's sequence parallelism saves
the all-gathered inputs of the column-parallel projections whole (``block_bytes.
gathered_input_bytes``; the head's input too): the (tp - 1) / tp of them that dividing every
activation by tp leaves out is its own line, in every kept block without recomputation, in the
recomputed block under ``op``/``full`` (the all-gather is redone); and PyTorch's loss parallel
backward (``torch.distributed.tensor.parallel.loss_parallel``, the vocabulary-parallel
cross-entropy) computes (one-hot + exp(log-probabilities)) x grad, one more fp32
logits-sized tensor beside the two gradients. The loss's backward and a block's recompute are
summed although the loss's runs first; a block's backward temporaries (activation gradients),
the optimizer step's temporaries and the allocator's fragmentation are not counted (say so in
the report's notes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis import llm_structure
from layerscope.analysis.block_bytes import (
    fused_layer_bytes,
    gathered_input_bytes,
    op_checkpoint_bytes,
)
from layerscope.analysis.capture.nodynamo import without_dynamo
from layerscope.analysis.llm import (
    LLMSource,
    check_tokens,
    first_layers,
    param_counts,
    resolve_llm,
    source_layer_keys,
    with_layers,
)
from layerscope.analysis.llm_settings import PlanSettings
from layerscope.analysis.plan_saved import (
    TORCH_DTYPES,
    FlashAttention,
    Saved,
    SavedCounter,
    measure_saved,
)
from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError, first_line
from layerscope.core.llm_records import (
    STRATEGIES,
    PlanActivations,
    PlanLayerGroup,
    PlanReport,
    PlanRow,
)
from layerscope.core.settings import of_call
from layerscope.frontends.llm_configs import LLMConfig, preset

# with the saved-tensor counter, declared in its own module and importable from here as before
# (measure_activations calls measure_saved through this module, so a test may replace it here)
__all__ = ["TORCH_DTYPES", "FlashAttention", "GroupMeasured", "Measured", "Saved",
           "SavedCounter", "fit_micro_batches", "measure_activations", "measure_saved",
           "model_state_bytes", "plan"]


@dataclass(frozen=True)
class GroupMeasured:
    """One group of identical layers (``llm_structure.describe_groups``): its first layer, how
    many, its name in the report, one block's saved bytes, their seq x seq part and the block's
    parameters."""

    first: int
    layers: int
    label: str
    per_layer: int
    scores: int
    params: int


@dataclass(frozen=True)
class Measured:
    groups: tuple[GroupMeasured, ...]
    layer_group: tuple[int, ...]  # each layer's index into groups
    other: int
    device: str
    notes: tuple[str, ...] = ()
    gathered: bool = False  # expert weights copied per token were left out

    @property
    def heaviest(self) -> GroupMeasured:
        return max(self.groups, key=lambda g: g.per_layer)

    @property
    def per_layer(self) -> int:
        return self.heaviest.per_layer

    @property
    def scores(self) -> int:
        return self.heaviest.scores


def measure_activations(source: LLMSource, micro_batch: int, seq: int, dtype: str) -> Measured:
    """Each group of identical layers' block (the model of the first f + 1 layers minus that of
    the first f, f the group's first member after layer 0, else layer 0 against the model of no
    layers) and what lies outside the blocks (embeddings, head, loss: the first layer's model
    less its block). A hybrid's models hold its first attention layer (``first_layers``: s =
    that layer + 1): f is a group's first member from s on, and outside is the model of the
    first s layers less their blocks. Layers are grouped as ``llm`` groups them
    (analysis/llm_structure.py: the blocks' modules and shapes, and each layer's attention):
    DeepSeek-V3's first three dense layers, the mixture-of-experts ones after, Gemma-3's window
    and global layers are measured apart. The whole model's figure, sum of group x layers +
    outside, is that of the full model (tests compare it)."""
    torch_dtype = TORCH_DTYPES[dtype]
    route = (source.config.experts_per_token, source.config.num_experts)
    keys, notes = source_layer_keys(source)
    spans = llm_structure.describe_groups(keys)
    index = {keys[first]: i for i, (first, _) in enumerate(spans)}
    layer_group = tuple(index[k] for k in keys)
    start = first_layers(source)  # a hybrid's models hold an attention layer
    # each group's block: a member from ``start`` on, against the model before it; a group of
    # a hybrid with members before its first attention layer only (None): read from the model
    # of the first ``start`` layers, the bytes its members' blocks saved
    measured_at: list[int | None] = [
        next((j for j in range(start, len(keys)) if layer_group[j] == i),
             None if start > 1 else 0) for i in range(len(spans))]
    sizes = sorted({start} | {m for m in measured_at if m is not None}
                   | {m + 1 for m in measured_at if m is not None})
    models = {n: source.build(with_layers(source.config, n)) for n in sizes}
    probe = _probe_seq(seq, source, list(models.values()))
    for device in ("cuda", "meta"):
        try:
            saved = {n: measure_saved(models[n], micro_batch, seq, torch_dtype, device, route)
                     for n in sizes}
            # some model dimension equals seq: (.., seq, seq) is not only scores
            at_probe = saved if probe == seq else {
                n: measure_saved(models[n], micro_batch, probe, torch_dtype, device, route)
                for n in sizes}
        except (RuntimeError, NotImplementedError, AssertionError, ValueError) as exc:
            if device == "meta":
                raise _measure_error(source, micro_batch, seq, exc) from None
            continue
        params = {n: sum(p.numel() for p in models[n].parameters()) for n in sizes}
        groups = []
        for i, ((first, layers), at, label) in enumerate(zip(
                spans, measured_at, llm_structure.group_labels(keys))):
            if at is None:
                per_layer, scores, own = _attributed(
                    models[start], start, [j for j in range(start) if layer_group[j] == i],
                    saved[start], at_probe[start])
            else:
                per_layer = saved[at + 1].total - saved[at].total
                scores = at_probe[at + 1].scores - at_probe[at].scores
                own = params[at + 1] - params[at]
            groups.append(GroupMeasured(
                first, layers, label, per_layer,
                scores if probe == seq else round(scores * seq * seq / (probe * probe)), own))
        other = saved[start].total - sum(groups[g].per_layer for g in layer_group[:start])
        return Measured(tuple(groups), layer_group, other, device, tuple(notes),
                        any(x.gathered for x in saved.values()))
    raise AssertionError("unreachable")


def _attributed(model: nn.Module, layers: int, members: list[int], saved: Saved,
                probe: Saved) -> tuple[int, int, int]:
    """(bytes, seq x seq bytes at the probe length, parameters) of one block of ``members``
    (layers of ``model``, the model of the first ``layers`` layers): what their blocks saved
    first, averaged."""
    blocks = llm_structure.decoder_blocks(model, layers) or []
    names = {id(m): name for name, m in model.named_modules()}
    got = [(saved.within(names[id(blocks[j])])[0], probe.within(names[id(blocks[j])])[1],
            sum(p.numel() for p in blocks[j].parameters())) for j in members if j < len(blocks)]
    if not got:
        return 0, 0, 0
    n = len(got)
    return (sum(g[0] for g in got) // n, sum(g[1] for g in got) // n,
            sum(g[2] for g in got) // n)


def _measure_error(source: LLMSource, batch: int, seq: int, exc: Exception) -> UserError:
    """The one line for a failed measurement, blaming what failed: the model when its own
    forward (plain meta tensors: no hooks, no fake tensors) refuses the token ids too, else the
    measurement."""
    model = source.build(with_layers(source.config, first_layers(source)))
    try:
        with torch.no_grad():
            model(torch.zeros(batch, seq, dtype=torch.long, device="meta"))
    except Exception as own:  # the model's own failure, whatever it raises
        return UserError(f"{source.name} rejected a {batch} x {seq} batch of token ids: "
                         f"{first_line(own, with_type=True)[:300]}")
    return UserError(f"{source.name}: measuring the activations on fake tensors failed "
                     f"({first_line(exc, with_type=True)[:300]}), although the model runs a "
                     f"{batch} x {seq} batch of token ids: a limitation of layerscope's "
                     "measurement for this architecture; please report it")


def _probe_seq(seq: int, source: LLMSource, models: list[nn.Module]) -> int:
    """``seq``, or the next length no dimension of the model has: the seq x seq tensors are told
    apart by their last two dimensions, which a (batch, seq, hidden) tensor shares when hidden
    equals seq (Llama-3-70B at 8192), or a (tokens, width) one when an expert's width equals seq
    (DeepSeek-V3's 2048). The dimensions are the config's and every parameter's and buffer's in
    the built ``models`` (expert widths, latent ranks, expert counts). Their bytes grow as seq^2,
    so a probe length scales back exactly. A position table (learned, or MPT's ALiBi biases)
    caps the probe (BERT at its 512 positions probes 511)."""
    c = source.config
    dims = {c.hidden_size, c.intermediate_size, c.vocab_size, c.head_dim, c.num_heads,
            c.num_kv_heads * c.head_dim, c.num_heads * c.head_dim, c.max_position}
    dims |= {d for m in models for t in (*m.parameters(), *m.buffers()) for d in t.shape}
    top = c.max_position if source.position_cap() else values.INT64_MAX
    for step in range(len(dims) + 1):  # among seq +- 0..len(dims), one is free of dims
        for probe in (seq + step, seq - step):
            if 1 <= probe <= top and probe not in dims:
                return probe
    return seq


def model_state_bytes(params: int, strategy: str, dtype: str, tp: int, pp: int,
                      dp: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer states) bytes per device; see the module's docstring."""
    w = 4 if dtype == "fp32" else 2
    k = 8 if dtype == "fp32" else 12
    per = params / (tp * pp)  # tensor and pipeline parallelism divide the model first
    shard = {"ddp": (1, 1, 1), "zero1": (1, 1, dp), "zero2": (1, dp, dp),
             "zero3": (dp, dp, dp), "fsdp": (dp, dp, dp)}[strategy]
    return (math.ceil(w * per / shard[0]), math.ceil(w * per / shard[1]),
            math.ceil(k * per / shard[2]))


@without_dynamo()  # the meta builds and the fake runs compile nothing
def plan(model: str | LLMSource | None = None, gpus: int | None = None, *,
         settings: PlanSettings | None = None, **overrides: Any) -> PlanReport:
    """Per-device bytes of weights, gradients, optimizer states and activations for training
    ``model`` on ``gpus`` devices (tensor-parallel ``tp``, pipeline-parallel ``pp``, the rest
    data-parallel), for one ``strategy`` or all of them, and whether each fits ``gpu_memory``.
    ``kernels`` ("fused" or "unfused"; default: fused for a dense preset, else unfused) picks
    how a block's activations are counted (see the module's docstring). ``fit``: a budget per
    GPU (bytes, '80GB', '80GiB'): also each strategy's largest micro-batch whose peak fits it
    (``fit_micro_batches``). ``settings``: a ``PlanSettings``; keyword arguments override its
    fields (``tp=8``).
    """
    s = of_call(PlanSettings, settings, overrides, "plan", model=model, gpus=gpus)
    source, seq_len, kernels, preset_default = _checked(s)
    config = source.config
    tp, pp, micro_batch, dtype = s.tp, s.pp, s.micro_batch, s.dtype
    dp = s.gpus // (tp * pp)
    params, active = param_counts(source)
    elem = 4 if dtype == "fp32" else 2
    measured = measure_activations(source, micro_batch, seq_len, dtype)
    acts = _activations(measured, config, micro_batch, seq_len, elem, pp, s.recompute, kernels)
    working = acts.recompute_working_bytes // tp
    rows = _rows(s, source, measured, acts, seq_len, kernels, dp)
    if s.fit is not None:
        def peaks(n: int) -> dict[str, int]:
            again = rows if n == micro_batch else plan(settings=PlanSettings.of(
                s, model=source, micro_batch=n, seq_len=seq_len, kernels=kernels,
                fit=None)).strategies
            return {r.strategy: r.peak_bytes for r in again}

        for row, size in zip(rows, fit_micro_batches(peaks, [r.strategy for r in rows], s.fit)):
            row.fit_micro_batch = size
    return PlanReport(
        model=source.name, params_total=params, params_active=active, gpus=s.gpus, tp=tp,
        pp=pp, dp=dp, micro_batch=micro_batch, seq_len=seq_len, recompute=s.recompute,
        dtype=dtype, gpu_memory_bytes=s.gpu_memory, activations=acts, strategies=rows,
        kernels=kernels, config=config.to_dict(), environment=environment(),
        notes=[*source.config_notes]
        + _notes(measured, tp, pp, dtype, s.recompute, working, kernels, preset_default)
        + ([f"fit: the largest micro-batch per strategy whose peak is at most {s.fit:,} "
            "bytes, from this plan's per-micro-batch peak (affine in it: solved from "
            "micro-batches 1 and 2, checked at the answer and the next size)"]
           if s.fit is not None else []),
        fit_budget_bytes=s.fit)


def _checked(s: PlanSettings) -> tuple[LLMSource, int, str, bool]:
    """The model ``s`` names, its sequence length and kernels (defaults filled in) and whether
    it is a preset given by name, once the settings are known to fit it (the positions, the
    layers for ``pp``, the heads for ``tp``; a mixture of experts is counted unfused, without
    ``op`` recomputation)."""
    source = resolve_llm(s.model)
    config = source.config
    seq_len = config.default_seq_len if s.seq_len is None else s.seq_len
    table = source.position_cap()
    if table and seq_len > config.max_position:
        raise UserError(f"seq_len {seq_len} is longer than {source.name}'s {table} "
                        f"({config.max_position} positions)", arguments="seq_len")
    check_tokens(config, s.micro_batch, seq_len, "micro_batch x seq_len")
    if s.pp > config.num_layers:
        raise UserError(f"pp {s.pp} is more pipeline stages than {source.name} has layers "
                        f"({config.num_layers})", arguments="pp")
    if config.num_heads % s.tp:
        raise UserError(f"tp {s.tp} does not divide {source.name}'s {config.num_heads} "
                        "attention heads", arguments="tp")
    preset_default = isinstance(s.model, str) and preset(s.model) is not None
    kernels = s.kernels or ("fused" if preset_default and not config.is_moe else "unfused")
    if config.is_moe and (kernels == "fused" or s.recompute == "op"):
        name, value, fix = (("kernels", kernels, "measure it unfused") if kernels == "fused"
                            else ("recompute", s.recompute, "choose none, selective or full"))
        raise UserError(f"{name} {value} is counted for dense blocks only; {source.name} has a "
                        f"mixture of experts: {fix}", arguments=name)
    return source, seq_len, kernels, preset_default


def _rows(s: PlanSettings, source: LLMSource, measured, acts, seq_len: int, kernels: str,
          dp: int) -> list[PlanRow]:
    """One row per strategy (``s.strategy``, or all): its per-device bytes and peak."""
    config, tp, pp, dtype = source.config, s.tp, s.pp, s.dtype
    elem = 4 if dtype == "fp32" else 2
    params, _ = param_counts(source)
    # the largest block is gathered (a mixture-of-experts block, not a dense first layer)
    block_params = max(g.params for g in measured.groups)
    held = (acts.blocks_bytes + acts.other_bytes) // tp
    working = acts.recompute_working_bytes // tp
    loss_grad = s.micro_batch * seq_len * config.vocab_size * 4 // tp  # fp32, vocab-parallel
    loss_parallel = loss_grad if tp > 1 else 0  # (one-hot + exp(log-probabilities)), fp32
    gathered = _gathered_bytes(config, s.micro_batch, seq_len, elem, tp, s.recompute,
                               acts.layers_per_stage * acts.micro_batches_in_flight)
    rows = []
    for name in ([s.strategy] if s.strategy else STRATEGIES):
        w, g, o = model_state_bytes(params, name, dtype, tp, pp, dp)
        # zero3/fsdp over more than one replica all-gather each block before it runs (this
        # block's and the prefetched next one's) and reduce-scatter its gradients (this
        # block's unsharded gradients and the previous block's reduce-scatter input)
        block_buffers = (2 * elem * block_params // tp
                         if name in ("zero3", "fsdp") and dp > 1 else 0)
        peak = (w + g + o + held + working + gathered + 2 * loss_grad + loss_parallel
                + 2 * block_buffers)
        rows.append(PlanRow(strategy=name, weights_bytes=w, grads_bytes=g, optimizer_bytes=o,
                            activations_bytes=held, peak_bytes=peak, fits=peak <= s.gpu_memory,
                            logprobs_grad_bytes=loss_grad, logits_grad_bytes=loss_grad,
                            gather_bytes=block_buffers, gathered_inputs_bytes=gathered,
                            loss_parallel_bytes=loss_parallel,
                            reduce_scatter_bytes=block_buffers))
    return rows


def fit_micro_batches(peaks, strategies: list[str], budget: int) -> list[int]:
    """Each strategy's largest micro-batch whose peak (``peaks(n)``: strategy -> peak bytes at
    micro-batch n) is at most ``budget``; 0 where even one sequence does not fit.
    ``memory_fit.largest_batch`` solves it (each micro-batch's figures computed once)."""
    from layerscope.analysis.memory_fit import largest_batch

    seen: dict[int, dict[str, int]] = {}

    def at(n: int) -> dict[str, int]:
        if n not in seen:
            seen[n] = peaks(n)
        return seen[n]

    out = []
    for name in strategies:
        try:
            out.append(largest_batch(lambda n, name=name: at(n)[name], budget).size)
        except UserError:  # micro-batch 1 already needs more
            out.append(0)
    return out


def _gathered_bytes(config: LLMConfig, batch: int, seq: int, elem: int, tp: int,
                    recompute: str, blocks: int) -> int:
    """tp > 1: the part of the sequence-parallel all-gathered inputs (saved whole by the
    column-parallel projections) that dividing every activation by tp leaves out, (tp - 1) /
    tp of them: every kept block's under ``none``/``selective``, the one recomputed block's
    under ``op``/``full`` (the all-gather is not saved: the recompute does it again), and the
    head's input (the final norm's output, e T h), which nothing recomputes."""
    block = gathered_input_bytes(config, batch, seq, elem)
    kept = blocks if recompute in ("none", "selective") else 1
    head = elem * batch * seq * config.hidden_size
    return (kept * block + head) * (tp - 1) // tp


def _activations(m: Measured, config: LLMConfig, batch: int, seq: int, elem: int, pp: int,
                 recompute: str, kernels: str) -> PlanActivations:
    """Each group's per-layer figures after the kernels and recompute; the blocks' kept bytes on
    the stage that holds the most: the layers in contiguous stages of ceil(L/p), stage k (from
    0) holding p - k micro-batches under 1F1B (all alike: the first stage, L/p x p)."""
    groups, working = [], 0
    for g in m.groups:
        if kernels == "fused":  # flash attention: no seq x seq tensor
            per_layer, scores = fused_layer_bytes(config, batch, seq, elem), 0
        else:
            per_layer, scores = g.per_layer, g.scores
        if recompute == "op":
            kept = op_checkpoint_bytes(config, batch, seq, elem)
            rework = max(per_layer - kept, 0)
        else:
            kept = {"none": per_layer, "selective": per_layer - scores,
                    "full": batch * seq * config.hidden_size * elem}[recompute]
            rework = {"none": 0, "selective": scores, "full": per_layer}[recompute]
        working = max(working, rework)
        groups.append(PlanLayerGroup(first_layer=g.first, layers=g.layers, label=g.label,
                                     per_layer_bytes=per_layer, per_layer_kept_bytes=kept,
                                     attention_scores_bytes=scores))
    per_stage = math.ceil(config.num_layers / pp)
    stages = [m.layer_group[i:i + per_stage] for i in range(0, config.num_layers, per_stage)]
    blocks = max((pp - k) * sum(groups[i].per_layer_kept_bytes for i in stage)
                 for k, stage in enumerate(stages))
    top = groups[m.groups.index(m.heaviest)]
    return PlanActivations(
        per_layer_bytes=top.per_layer_bytes, per_layer_kept_bytes=top.per_layer_kept_bytes,
        attention_scores_bytes=top.attention_scores_bytes, other_bytes=m.other,
        recompute_working_bytes=working, layers_per_stage=per_stage,
        micro_batches_in_flight=pp, measured_on=f"{m.device} (fake tensors)",
        measured_per_layer_bytes=m.per_layer, groups=groups if len(groups) > 1 else [],
        blocks_bytes=blocks)


def _notes(m: Measured, tp: int, pp: int, dtype: str, recompute: str, working: int,
           kernels: str, preset_default: bool) -> list[str]:
    w, k = (4, 8) if dtype == "fp32" else (2, 12)
    notes = [f"model states: {w} bytes of weights, {w} of gradients and {k} of Adam states "
             f"({'fp32 master weights, momentum, variance' if k == 12 else 'momentum, variance'})"
             " per parameter before sharding (ZeRO, Rajbhandari et al. 2020); fsdp = zero3",
             "activations: what autograd saves in one forward with the loss, measured on "
             f"{m.device} fake tensors (saved-tensor hooks; parameters excluded)", *m.notes]
    if len(m.groups) > 1:
        notes.append("activations per group of identical layers, each measured on one of its "
                     "layers: " + " + ".join(f"{g.layers} {g.label}" for g in m.groups)
                     + " layers")
    if m.gathered:
        notes.append("mixture of experts: measured as a GPU's grouped GEMM trains it; the "
                     "per-token copies of the expert weights that transformers' batched_mm "
                     "makes are weights, not counted")
    if kernels == "fused":
        notes.append("kernels fused: per layer, what fused RMSNorm/LayerNorm, fused SwiGLU "
                     "(bias-GeLU) and flash attention on un-expanded K/V save, counted from the "
                     f"block's shapes ({m.per_layer:,} bytes measured as the code is written)")
    elif preset_default:
        notes.append("kernels unfused: the block as its code is written (a mixture of experts "
                     "is measured so)")
    if pp > 1:
        notes.append(f"pipeline: 1F1B, the first stage holds {pp} micro-batches in flight")
    if tp > 1:
        notes.append("tensor parallel with sequence parallelism: every activation divided by "
                     f"{tp}")
    if recompute == "selective" and (kernels == "fused" or not m.scores):
        notes.append("recompute selective: this model saves no seq x seq tensors (flash "
                     "attention keeps q, k, v, out and the log-sum-exp): nothing to drop")
    elif recompute != "none":
        notes.append(f"recompute {recompute}: the block being recomputed during backward "
                     f"adds {working:,} bytes to the peak")
    if recompute == "op":
        notes.append("recompute op: torchtitan's per-op selective checkpointing (the block "
                     "input, attention's output and every other matmul's output kept)")
    notes.append("peak adds the loss's backward (fp32 gradients of the log-probabilities and of "
                 "the logits, one micro-batch) and, for zero3/fsdp, one block's unsharded "
                 "weights twice (FSDP prefetches the next block's all-gather) and its gradients "
                 "twice (this block's unsharded gradients and the previous block's "
                 "reduce-scatter input)")
    if tp > 1:
        notes.append("tensor parallel (PyTorch's): the projections' all-gathered inputs are "
                     "saved whole, (tp - 1)/tp of them added to the peak; loss parallel's "
                     "backward adds one fp32 logits-sized tensor")
    notes.append("peak leaves out a block's backward temporaries (activation gradients), the "
                 "optimizer step's temporaries, float8 casts and the allocator's reserve and "
                 "fragmentation: keep a margin")
    return notes
