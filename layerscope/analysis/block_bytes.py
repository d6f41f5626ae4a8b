"""Saved-activation bytes of one dense decoder block, counted by hand from its shapes: the block
as fused kernels run it, and what torchtitan's op-level selective checkpointing keeps of it.

``plan`` measures the block as its PyTorch code is written (the ``unfused`` kernels: a Hugging
Face-style RMSNorm upcasts to fp32 and keeps that copy, SiLU keeps its output for the product,
GQA's K/V are expanded to the query heads before attention). Training stacks that fuse those ops
save less; these functions count what they save. Notation: T = batch x seq tokens, h hidden,
a query heads, q = a x head_dim (= h for the presets), kv = kv_heads x head_dim, I the MLP's
inner width, e the bytes of the training dtype (2 for bf16/fp16, 4 for fp32). Nothing here
imports torch.
"""
from __future__ import annotations

from layerscope.frontends.llm_configs import LLMConfig

FP32 = 4


def fused_layer_bytes(config: LLMConfig, batch: int, seq: int, elem: int) -> int:
    """Bytes one dense pre-norm block saves for backward with fused kernels.

    What each op saves (its backward's inputs), tensor by tensor:
    - fused RMSNorm (LayerNorm) x2: its input (e T h) and the fp32 reciprocal RMS per token
      (4 T; LayerNorm: mean and rstd, 8 T); its output (e T h) is saved once, as the input the
      following linears (q, k, v; gate, up or fc) share;
    - q, k, v projections: their input is that norm output (above); RoPE's backward needs only
      cos and sin (shared by every block, counted outside the blocks);
    - flash (or memory-efficient) attention: q after RoPE (e T q), k and v as the projections
      made them, not expanded to the query heads (e T kv each; the kernel takes GQA natively),
      its output (e T q, also the output projection's input) and the fp32 log-sum-exp per row
      and head (4 T a); no seq x seq tensor;
    - residual adds: nothing;
    - gated MLP with a fused SwiGLU: gate and up outputs (e T I each, the fused op's inputs) and
      its product (e T I, the down projection's input); GeLU MLP with a fused bias-GeLU: the fc
      output (e T I) and the GeLU output (e T I, the projection's input).
    Sum: e T (4h + 2q + 2kv + 3I) + 8 T (LayerNorm: 16 T) + 4 T a for a gated MLP, 2I instead of
    3I for GeLU. Llama-3-8B (q = h, kv = h/4, I = 3.5h, bf16): 34 T h + 8 T + 4 T a,
    against 52 T h measured for the unfused block.
    """
    _require_dense(config)
    t, h = batch * seq, config.hidden_size
    q = config.num_heads * config.head_dim
    kv = config.num_kv_heads * config.head_dim
    mlp = 3 if config.mlp == "gated_silu" else 2
    stats = 2 * (FP32 if config.norm == "rmsnorm" else 2 * FP32)
    return (elem * t * (4 * h + 2 * q + 2 * kv + mlp * config.intermediate_size)
            + stats * t + FP32 * t * config.num_heads)


def op_checkpoint_bytes(config: LLMConfig, batch: int, seq: int, elem: int) -> int:
    """Bytes one block keeps under torchtitan's op-level selective activation checkpointing
    (``SelectiveAC``: the block runs under ``create_selective_checkpoint_contexts``; ops in its
    save list, matmuls and the SDPA kernels among them, are MUST_SAVE, every other op is
    recomputed, and of the matmuls only the odd ones, counting from 1 within the block, are
    saved: the even ones are recomputed too).

    The block's matmuls in execution order and what is kept:
    q_proj (1, kept: e T q), k_proj (2, recomputed), v_proj (3, kept: e T kv), then attention
    (kept: output e T q and fp32 log-sum-exp 4 T a), o_proj (4, recomputed); gated MLP: gate
    (5, kept: e T I), up (6, recomputed), down (7, kept: e T h); GeLU MLP: fc (5, kept: e T I),
    proj (6, recomputed). Plus the checkpoint's input, the block input (e T h).
    The kept tensors are outputs of matmuls and attention, which fused and unfused kernels
    produce alike, so the figure does not depend on ``--kernels``.
    """
    _require_dense(config)
    t, h = batch * seq, config.hidden_size
    q = config.num_heads * config.head_dim
    kv = config.num_kv_heads * config.head_dim
    down = h if config.mlp == "gated_silu" else 0
    return (elem * t * (h + q + kv + q + config.intermediate_size + down)
            + FP32 * t * config.num_heads)


def gathered_input_bytes(config: LLMConfig, batch: int, seq: int, elem: int) -> int:
    """Bytes of one block's inputs that PyTorch's tensor parallelism with sequence parallelism
    (``SequenceParallel`` norms, ``ColwiseParallel`` projections: torchtitan's plan) all-gathers
    to the whole sequence and saves so: the attention's and the MLP's normalised inputs, which
    the norms produce sharded over the sequence (e T h / tp) and the column-parallel
    projections (q, k, v; gate, up or fc; a mixture's router and experts) save after the
    all-gather, e T h each: 2 e T h per pre-norm block. The per-block counts above hold each of
    them once, as every other saved tensor, so dividing them by tp leaves (tp - 1) / tp of this
    out. Megatron-LM saves the sharded copy and all-gathers it again in backward (Korthikanti et
    al. 2022, section 4.2.2); PyTorch's autograd keeps what the linear was given."""
    return 2 * elem * batch * seq * config.hidden_size


def _require_dense(config: LLMConfig) -> None:
    if config.is_moe:
        raise ValueError("the fused-kernel and op-checkpointing cost models count dense blocks")
