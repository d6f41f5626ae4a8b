"""Cost handlers for PyTorch aten ops, keyed by overload packet ("aten.addmm") or overload.

Conventions (docs/definitions.md; in short docs/design.md, "Counting"):
- MACs count contractions only; FLOPs = 2 x MACs + the op's other arithmetic.
- Elementwise ops cost 1 FLOP per output element unless stated beside their registration.
- Contraction formulas are ``torch.utils.flop_counter``'s (its FLOPs are 2 x MACs and leave bias
  adds out, so MACs = its figure / 2 and bias adds are added here), written out as MACs (in
  ``aten_contract.py`` and ``aten_attention.py``) and tested against it: importing
  ``flop_counter`` imports triton where it is installed, a fifth of a second every analysis
  would pay for four products.
- Fused kernels (SDPA, the MultiheadAttention / TransformerEncoderLayer fast paths, RNN layers)
  cost exactly what the unfused ops they replace cost, so every kernel path agrees on MACs.

Each handler's first comment gives the shapes it reads.

The handlers live in one module per op family, each registering into ``ATEN`` when imported;
this module imports them all (so importing it fills the table) and keeps every public name
importable from here:

- ``aten_base.py``: the table (``ATEN``, ``register``) and the helpers every family uses;
- ``aten_data.py``: zero-cost ops (views, allocation, copies, indexing, random fills) and
  embeddings;
- ``aten_elementwise.py``: elementwise ops;
- ``aten_reduce.py``: reductions, losses, normalisation and softmax;
- ``aten_spatial.py``: pooling, padding gradients, resampling and grid sampling;
- ``aten_contract.py``: matrix products, convolutions and the bilinear contraction;
- ``aten_attention.py``: scaled dot-product attention, its counting mode, the
  MultiheadAttention and TransformerEncoderLayer fast paths;
- ``aten_rnn.py``: recurrent layers.
"""
from __future__ import annotations

from layerscope.ops.aten_attention import (  # noqa: F401 - the old import path
    SDPA_BACKWARD_CAUSAL_ARG,
    SDPA_BACKWARD_MASK_ARG,
    SDPA_CAUSAL_ARG,
    AttentionCounting,
    MaskStructure,
    attention_counting,
    current_attention_counting,
    native_mha,
    sdpa,
    sdpa_backward,
    sdpa_backward_macs,
    transformer_encoder_layer,
)
from layerscope.ops.aten_base import (  # noqa: F401 - the old import path
    ATEN,
    ZERO,
    register,
)
from layerscope.ops.aten_contract import (  # noqa: F401 - the old import path
    addmm,
    baddbmm,
    bmm,
    bmm_macs,
    conv_macs,
    convolution,
    convolution_backward,
    cudnn_convolution,
    dot,
    mkldnn_convolution,
    mm,
    mm_macs,
    slow_conv2d,
    trilinear,
)
from layerscope.ops.aten_data import (  # noqa: F401 - the old import path
    embedding_backward,
    embedding_bag,
    embedding_bag_backward,
    embedding_bag_psw_backward,
    zero,
)
from layerscope.ops.aten_elementwise import (  # noqa: F401 - the old import path
    ONE_FLOP_ELEMENTWISE,
    elementwise,
)
from layerscope.ops.aten_reduce import (  # noqa: F401 - the old import path
    batch_norm,
    batch_norm_legit,
    batch_norm_legit_no_stats,
    batch_norm_no_stats,
    group_norm,
    layer_norm,
    nll_loss,
    nll_loss_backward,
    norm_backward,
    reduce_mean,
    reduce_sum,
    rms_norm,
    softmax,
    softmax_backward,
)
from layerscope.ops.aten_rnn import (  # noqa: F401 - the old import path
    CUDNN_MODES,
    aten_rnn,
    aten_rnn_packed,
    cudnn_rnn,
    fused_cell,
    mkldnn_rnn_layer,
    mkldnn_rnn_layer_backward,
)
from layerscope.ops.aten_spatial import (  # noqa: F401 - the old import path
    GRID_MODES,
    LINEAR,
    NEAREST,
    adaptive_avg_pool,
    adaptive_max_pool,
    affine_grid,
    avg_pool,
    grid_sampler,
    grid_sampler_backward,
    max_pool,
    pad_backward,
    pool_backward,
    upsample,
    upsample_backward,
)
from layerscope.ops.registry import (  # noqa: F401 - the old import path
    ALLOC,
    VIEW,
    HandlerTable,
    OpCost,
    TensorDesc,
)
from layerscope.ops.rules import (  # noqa: F401 - the old import path
    ATTENTION_COUNTS,
    ATTN_PER_SCORE,
    GATE_FLOPS,
    GATES,
    NORM_APPLY,
    NORM_NORMALISE,
    NORM_STATS,
    SOFTMAX,
    TAPS_PER_AXIS,
    blend_flops,
    causal_scores,
    resample_flops,
    resample_taps,
)
