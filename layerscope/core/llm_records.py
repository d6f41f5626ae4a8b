"""The results of ``layerscope llm`` (inference cost of a decoder-only LM) and ``layerscope plan``
(per-device training memory), as typed records; their JSON schema is generated from these fields
(layerscope/schema/generate.py). The arithmetic lives in analysis/llm.py and analysis/plan.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_empty, omit_none
from layerscope.core.report import SCHEMA_VERSION

_COUNT = {"minimum": 0}
# bytes per element; int4 packs two weights in a byte
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int4": 0.5}
ATTENTION = ("causal", "full")
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")
RECOMPUTE = ("none", "selective", "op", "full")
KERNELS = ("fused", "unfused")
TRAIN_DTYPES = ("bf16", "fp16", "fp32")


@dataclass
class PrefillCost(Record):
    """Processing the prompt: ``tokens`` = batch size x sequence length, in one forward."""

    macs: int = field(metadata=_COUNT)
    flops: int = field(metadata=_COUNT)
    tokens: int = field(metadata=_COUNT)


@dataclass
class DecodeCost(Record):
    """Generating one token with ``context`` tokens already in the KV cache (its query attends
    the ``context`` cached keys and its own)."""

    macs_per_token: int = field(metadata=_COUNT)
    flops_per_token: int = field(metadata=_COUNT)
    context: int = field(metadata=_COUNT)


@dataclass
class KVCache(Record):
    """Keys and values kept for every layer: 2 x kv_heads x head_dim (multi-head latent
    attention: its latent and rotary key) x dtype bytes per token and layer;
    ``bytes_total`` for ``batch_size`` sequences of ``context`` tokens, a sliding-window layer
    keeping at most its window's tokens."""

    bytes_per_token: int = field(metadata=_COUNT)
    bytes_total: int = field(metadata=_COUNT)
    dtype: str = "bf16"
    batch_size: int = field(default=1, metadata=_COUNT)
    context: int = field(default=0, metadata=_COUNT)


@dataclass
class AttentionLayers(Record):
    """The layers that share one attention description: ``kind`` causal, sliding (a window of
    ``window`` keys per query), chunked (queries attend their own chunk of ``chunk`` tokens),
    mla (multi-head latent attention: the cache holds a latent),
    unknown (a layer type whose mask layerscope does not know: counted as the whole matrix) or
    recurrent (no attention: a hybrid's state-space, linear-attention or convolution layers, or
    an MLP alone; no heads, no scores, no KV cache); ``counted`` says how their prefill scores
    were counted."""

    kind: str
    layers: int = field(metadata=_COUNT)
    heads: int = field(metadata=_COUNT)
    kv_heads: int = field(metadata=_COUNT)
    qk_head_dim: int = field(metadata=_COUNT)
    v_head_dim: int = field(metadata=_COUNT)
    counted: str
    kv_bytes_per_token: int = field(metadata=_COUNT)
    kv_bytes_total: int = field(metadata=_COUNT)
    window: int | None = None
    chunk: int | None = None


@dataclass
class LLMRoofline(Record):
    """Upper bounds on tokens/s on ``tp`` GPUs: a phase takes at least max(FLOPs / (tp x peak
    FLOP/s), bytes read / (tp x bandwidth)); ``*_bound`` says which of the two it was.
    ``decode_bytes_per_step``: all GPUs together."""

    gpu: str
    peak_flops: float
    bandwidth_bytes_per_s: float
    memory_bytes: int = field(metadata=_COUNT)
    prefill_tokens_per_s: float
    prefill_bound: str
    decode_tokens_per_s: float
    decode_bound: str
    decode_bytes_per_step: int = field(metadata=_COUNT)
    # absent from results saved before tensor parallelism was modelled (one GPU, no fit check)
    tp: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="GPUs the weights and the KV cache are split across (tensor "
                              "parallel); the bounds are for all of them together"))
    weights_bytes_per_gpu: int | None = field(default=None, metadata=omit_none(**_COUNT))
    kv_bytes_per_gpu: int | None = field(default=None, metadata=omit_none(**_COUNT))
    fits: bool | None = field(default=None, metadata=omit_none(
        description="weights + KV cache per GPU fit the GPU's memory"))


@dataclass
class LLMReport(ResultDocument):
    """A decoder-only language model's parameters, weight bytes, prefill and decode cost, KV
    cache and roofline bound, counted on the meta device (no weights)."""

    model: str
    params_total: int = field(metadata=_COUNT)
    params_active: int = field(metadata=_COUNT)
    weight_bytes: dict[str, int]
    prefill: PrefillCost
    decode: DecodeCost
    kv_cache: KVCache
    attention_count: str
    roofline: LLMRoofline | None = None
    attention_layers: list[AttentionLayers] = field(default_factory=list, metadata=omit_empty(
        description="one entry per distinct attention description of the layers"))
    config: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kind: str = "llm"
    schema_version: str = SCHEMA_VERSION



@dataclass
class PlanRow(Record):
    """One sharding strategy's bytes per device (each GPU holds this much)."""

    strategy: str
    weights_bytes: int = field(metadata=_COUNT)
    grads_bytes: int = field(metadata=_COUNT)
    optimizer_bytes: int = field(metadata=_COUNT)
    activations_bytes: int = field(metadata=_COUNT)
    peak_bytes: int = field(metadata=_COUNT)
    fits: bool
    # added after 0.1 (absent from older saved plans)
    logprobs_grad_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="loss backward: the fp32 gradient of the log-probabilities "
                              "(batch x seq x vocab x 4 / tp), one micro-batch"))
    logits_grad_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="loss backward: the fp32 gradient of the logits "
                              "(batch x seq x vocab x 4 / tp), one micro-batch"))
    gather_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="zero3/fsdp: one block's unsharded weights (/ tp), twice "
                              "(the next block is prefetched)"))
    gathered_inputs_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="tp > 1: the sequence-parallel all-gathered inputs the "
                              "column-parallel projections save whole, the (tp - 1) / tp of "
                              "them not in activations_bytes (kept blocks, or the recomputed "
                              "one, and the head's input)"))
    loss_parallel_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="tp > 1: loss parallel's backward, one more fp32 tensor of "
                              "batch x seq x vocab x 4 / tp (one-hot + exp(log-probabilities))"))
    reduce_scatter_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="zero3/fsdp: one block's unsharded gradients (/ tp), twice "
                              "(this block's and the previous block's reduce-scatter input)"))
    fit_micro_batch: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="--fit: the largest micro-batch whose peak fits the budget (0: "
                              "not even one sequence)"))


@dataclass
class PlanLayerGroup(Record):
    """Layers of one structure (a dense MLP or a mixture of experts, the same attention),
    measured on one of them."""

    first_layer: int = field(metadata=_COUNT)
    layers: int = field(metadata=_COUNT)
    label: str
    per_layer_bytes: int = field(metadata={
        **_COUNT, "description": "per layer with the report's kernels"})
    per_layer_kept_bytes: int = field(metadata={
        **_COUNT, "description": "per layer after --recompute"})
    attention_scores_bytes: int = field(metadata={
        **_COUNT, "description": "per layer: the seq x seq tensors"})


@dataclass
class PlanActivations(Record):
    """What autograd saves for backward for one micro-batch on one device before pipeline and
    tensor-parallel division: measured (saved-tensor hooks on fake tensors) with the unfused
    kernels, counted from the block's shapes with the fused ones."""

    per_layer_bytes: int = field(metadata={
        **_COUNT, "description": "per layer with the report's kernels"})
    per_layer_kept_bytes: int = field(metadata={
        **_COUNT, "description": "per layer after --recompute (full: the block's input only; "
                                 "op: the block input and the saved matmul/attention outputs)"})
    attention_scores_bytes: int = field(metadata={
        **_COUNT, "description": "per layer: the seq x seq tensors (scores, softmax, dropout)"})
    other_bytes: int = field(metadata={
        **_COUNT, "description": "outside the blocks: embeddings, final norm, head, loss"})
    recompute_working_bytes: int = field(metadata={
        **_COUNT, "description": "one layer's recomputed activations, live during its backward"})
    layers_per_stage: int = field(metadata=_COUNT)
    micro_batches_in_flight: int = field(metadata=_COUNT)
    measured_on: str = "cuda (fake tensors)"
    measured_per_layer_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="per layer as measured (the block's code as written); added "
                              "after 0.1"))
    # added after 0.1: layers of more than one structure (the per-layer fields above are then
    # the heaviest group's)
    groups: list[PlanLayerGroup] = field(default_factory=list, metadata=omit_empty(
        description="one entry per group of identical layers, when there are several"))
    blocks_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="the blocks' kept activations on the stage that holds the most "
                              "(layers x micro-batches in flight), before tensor-parallel "
                              "division"))


@dataclass
class PlanReport(ResultDocument):
    """Per-device training memory of a decoder-only LM under data, tensor and pipeline
    parallelism with mixed-precision Adam, and whether it fits the GPU's memory."""

    model: str
    params_total: int = field(metadata=_COUNT)
    gpus: int = field(metadata=_COUNT)
    tp: int = field(metadata=_COUNT)
    pp: int = field(metadata=_COUNT)
    dp: int = field(metadata=_COUNT)
    micro_batch: int = field(metadata=_COUNT)
    seq_len: int = field(metadata=_COUNT)
    recompute: str
    dtype: str
    gpu_memory_bytes: int = field(metadata=_COUNT)
    activations: PlanActivations
    strategies: list[PlanRow]
    kernels: str | None = field(default=None, metadata=omit_none(
        description="fused or unfused (absent from plans saved before the choice: unfused)"))
    params_active: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="parameters one token uses: a mixture of experts' k/E of the "
                              "expert parameters plus all others, as llm and analyze count "
                              "them (absent from plans saved before it was given)"))
    config: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    fit_budget_bytes: int | None = field(default=None, metadata=omit_none(
        **_COUNT, description="--fit: the budget per GPU each strategy's fit_micro_batch fits"))
    kind: str = "plan"
    schema_version: str = SCHEMA_VERSION

