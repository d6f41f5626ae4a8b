"""Aten cost handlers: zero-cost ops (views, allocation, copies, indexing) and embeddings.

Conventions (formulas, what a FLOP is): ``layerscope/ops/aten.py``.
"""
from __future__ import annotations

from layerscope.ops.aten_base import ZERO, first_out, register
from layerscope.ops.registry import ALLOC, VIEW, OpCost, TensorDesc


# ---------------------------------------------------------------- zero-cost and data movement
def zero(args, kwargs, out) -> OpCost:
    # any shapes: no arithmetic (views, allocation, copies, indexing)
    return ZERO


register(
    [
        "aten.view", "aten._unsafe_view", "aten.t", "aten.transpose", "aten.permute",
        "aten.expand", "aten.squeeze", "aten.unsqueeze", "aten.select", "aten.slice",
        "aten.split", "aten.split_with_sizes", "aten.unsafe_split", "aten.unsafe_split_with_sizes",
        "aten.unbind", "aten.chunk", "aten.detach", "aten.alias", "aten.as_strided",
        "aten.narrow", "aten.diagonal", "aten._reshape_alias", "aten.view_as", "aten.unfold",
        "aten.transpose_", "aten.t_", "aten.squeeze_", "aten.unsqueeze_", "aten.lift_fresh",
        "aten._nested_tensor_from_mask", "prim.device", "aten.sym_size", "aten.sym_stride",
        "aten.sym_numel", "aten.sym_storage_offset", "aten.is_same_size",
        "aten._local_scalar_dense",
        "aten.set_", "aten.resize_", "aten._has_compatible_shallow_copy_type", "aten.is_nonzero",
        "aten.as_strided_",
    ],
    zero,
    kind=VIEW,
)
register(
    ["aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
     "aten.new_empty_strided"],
    zero,
    kind=ALLOC,
)
register(
    [
        "aten.clone", "aten.copy_", "aten._to_copy", "aten.copy", "aten.cat", "aten.stack",
        "aten.constant_pad_nd", "aten.reflection_pad1d", "aten.reflection_pad2d",
        "aten.reflection_pad3d", "aten.replication_pad1d", "aten.replication_pad2d",
        "aten.replication_pad3d",
        "aten.index", "aten.index_select", "aten.gather", "aten.embedding",
        "aten.zeros", "aten.ones", "aten.full", "aten.zeros_like", "aten.ones_like",
        "aten.linspace", "aten.logspace",
        "aten.full_like", "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.arange",
        "aten.fill_", "aten.zero_", "aten.fill", "aten.scalar_tensor", "aten.tril", "aten.triu",
        "aten.slice_backward", "aten.select_backward", "aten.roll", "aten.flip", "aten.repeat",
        "aten.masked_select", "aten.index_put_", "aten.index_put", "aten.scatter",
        "aten.scatter_", "aten.select_scatter", "aten.slice_scatter", "aten.as_strided_scatter",
        "aten.pixel_shuffle", "aten.pixel_unshuffle", "aten.channel_shuffle",
        "aten.native_channel_shuffle",
        "aten.bernoulli_", "aten.bernoulli", "aten.uniform_", "aten.normal_", "aten.rand",
        "aten.randn", "aten.rand_like", "aten.randn_like", "aten.randperm",
        "aten.im2col", "aten.col2im",
        "aten.argmax", "aten.argmin", "aten.topk", "aten.sort",
        # max_unpool scatters each input to its recorded index; packing a padded batch into a
        # PackedSequence (and back) gathers rows: data movement only
        "aten.max_unpool2d", "aten.max_unpool3d", "aten._pack_padded_sequence",
        "aten._pad_packed_sequence",
    ],
    zero,
)


# ---------------------------------------------------------------- embeddings
# EmbeddingBag reduces the n looked-up rows of D into `bags` bags (mode 0 sum, 1 mean, 2 max):
# (n - bags) * D adds (max: comparisons); mean divides: + bags * D; per_sample_weights scale
# every row first: + n * D multiplies. The lookup itself is a gather: 0.
BAG_SUM, BAG_MEAN, BAG_MAX = 0, 1, 2


def embedding_bag(args, kwargs, out) -> OpCost:
    # _embedding_bag[_forward_only](weight: (V, D), indices: (n,), offsets: (B,), scale_grad,
    # mode, sparse, per_sample_weights?: (n,), include_last_offset, padding_idx)
    # -> (out: (bags, D), offset2bag, bag_size, max_indices)
    d, n = args[0].shape[1], args[1].numel
    y = first_out(out)
    mode = int(args[4]) if len(args) > 4 else BAG_SUM
    flops = max(n - y.shape[0], 0) * d + (y.numel if mode == BAG_MEAN else 0)
    psw = args[6] if len(args) > 6 else kwargs.get("per_sample_weights")
    return OpCost(flops=flops + (n * d if isinstance(psw, TensorDesc) else 0))


def embedding_bag_backward(mode_at: int, psw_at: int):
    def handler(args, kwargs, out) -> OpCost:
        # _embedding_bag[_dense]_backward(grad: (bags, D), indices: (n,), ...) -> (V, D):
        # sum: each looked-up row accumulates its bag's gradient, n * D adds; mean also scales
        # by 1/bag_size, + n * D; max: only each bag's maxima receive it, bags * D adds;
        # per_sample_weights: + n * D multiplies
        grad, n = args[0], args[1].numel
        d = grad.shape[-1]
        mode = int(args[mode_at]) if len(args) > mode_at else BAG_SUM
        flops = {BAG_SUM: n * d, BAG_MEAN: 2 * n * d}.get(mode, grad.numel)
        psw = args[psw_at] if len(args) > psw_at else None
        return OpCost(flops=flops + (n * d if isinstance(psw, TensorDesc) else 0))

    handler.__name__ = "embedding_bag_backward"
    return handler


def embedding_bag_psw_backward(args, kwargs, out) -> OpCost:
    # _embedding_bag_per_sample_weights_backward(grad: (bags, D), weight: (V, D), indices: (n,),
    # ...) -> (n,): each sample's gradient is the dot product of its row and its bag's gradient
    macs = args[2].numel * args[1].shape[1]
    return OpCost(macs=macs, flops=2 * macs)


def embedding_backward(args, kwargs, out) -> OpCost:
    # embedding_dense_backward(grad_out: (..., D), indices, num_weights, padding_idx, scale):
    # every gradient row is added into its weight row: 1 add per grad_out element
    return OpCost(flops=args[0].numel)


register(["aten._embedding_bag", "aten._embedding_bag_forward_only"], embedding_bag)
register("aten._embedding_bag_backward", embedding_bag_backward(8, 10))
register("aten._embedding_bag_dense_backward", embedding_bag_backward(7, 8))
register("aten._embedding_bag_per_sample_weights_backward", embedding_bag_psw_backward)
register("aten.embedding_dense_backward", embedding_backward)
