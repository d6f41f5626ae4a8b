"""Causal attention is counted as the kernels execute it: is_causal=True on every SDPA kernel
path computes min(i + 1, Lk) scores for query i (the lower triangle incl. the diagonal,
s(s+1)/2 for a square matrix); --attention full counts the whole matrix."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from layerscope.ops import aten
from layerscope.ops.registry import TensorDesc
from layerscope.ops.rules import cached_causal_scores, causal_scores

KERNELS = sorted(aten.SDPA_CAUSAL_ARG.items()) + sorted(aten.SDPA_BACKWARD_CAUSAL_ARG.items())


@pytest.mark.parametrize("op,at", KERNELS, ids=[k for k, _ in KERNELS])
def test_the_is_causal_index_of_every_kernel_matches_its_schema(op, at):
    schema = getattr(torch.ops.aten, op).default._schema
    assert [a.name for a in schema.arguments].index("is_causal") == at


@pytest.mark.parametrize("op,at", sorted(aten.SDPA_BACKWARD_MASK_ARG.items()),
                         ids=sorted(aten.SDPA_BACKWARD_MASK_ARG))
def test_the_mask_of_every_backward_kernel_matches_its_schema(op, at):
    # the forward's mask (attn_bias / attn_mask) where the backward kernel takes it, if it does
    arguments = getattr(torch.ops.aten, op).default._schema.arguments
    masks = [(i, a) for i, a in enumerate(arguments) if a.name in ("attn_bias", "attn_mask")]
    if at is None:
        assert masks == []
    else:
        ((i, a),) = masks
        assert (a.name if a.kwarg_only else i) == at


@pytest.mark.parametrize("lq,lk", [(1, 1), (5, 5), (3, 7), (7, 3), (128, 128)],
                         ids=["1x1", "square", "fewer-queries", "more-queries", "128"])
def test_causal_scores_are_the_nonzero_weights_of_the_math_kernel(lq, lk):
    # the reference: torch's math kernel returns its attention weights; masked scores are 0
    q, k = torch.randn(1, 1, lq, 4), torch.randn(1, 1, lk, 4)
    _, weights = torch.ops.aten._scaled_dot_product_attention_math(q, k, k, is_causal=True)
    assert causal_scores(lq, lk) == int((weights != 0).sum())
    if lq == lk:
        assert causal_scores(lq, lk) == lq * (lq + 1) // 2


@pytest.mark.parametrize("lq,lk", [(1, 9), (4, 9), (9, 9)], ids=["decode", "chunk", "square"])
def test_cached_causal_scores_are_the_lower_right_mask(lq, lk):
    # query i of a step over a cache of lk keys sees lk - lq + i + 1 keys (lower-right mask)
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(lq, lk)._materialize(torch.device("cpu"))
    assert cached_causal_scores(lq, lk) == int(mask.sum())
    assert cached_causal_scores(lq, lk) == sum(lk - lq + i + 1 for i in range(lq))


def _handler(op):
    return aten.ATEN.lookup(f"aten.{op}").handler


def _args(op, at, causal, q, k):
    args = [q, k, k] + [None] * (at - 3) + [causal]
    if "backward" in op:
        args = [q, q, k, k] + [None] * (at - 4) + [causal]
    return tuple(args)


@pytest.mark.parametrize("op,at", KERNELS, ids=[k for k, _ in KERNELS])
@pytest.mark.parametrize("mode", ["causal", "full"])
def test_every_kernel_counts_causal_scores_unless_full_is_asked(op, at, mode):
    # q: (B=2, H=8, 16, 32); k, v: 2 kv heads (grouped-query): every query head computes
    # scores: causal 16 x 17 / 2 = 136, full 256 per head; forward MACs 2 x 8 x scores x 64,
    # backward (recompute + 4 gradient products) 5 x 2 x 8 x scores x 32
    q, k = TensorDesc((2, 8, 16, 32)), TensorDesc((2, 2, 16, 32))
    scores = 136 if mode == "causal" else 256
    per = 5 * 32 if "backward" in op else 64
    with aten.attention_counting(mode) as counting:
        cost = _handler(op)(_args(op, at, True, q, k), {}, None)
        plain = _handler(op)(_args(op, at, False, q, k), {}, None)
    assert cost.macs == 2 * 8 * scores * per
    assert plain.macs == 2 * 8 * 256 * per  # no is_causal: the whole matrix
    assert counting.causal_kernels == 1


def test_is_causal_given_by_keyword():
    q = TensorDesc((1, 1, 4, 8))
    cost = _handler("_scaled_dot_product_flash_attention_for_cpu")((q, q, q), {"is_causal": True},
                                                                    None)
    assert cost.macs == 10 * 16  # 4 x 5 / 2 scores x (8 + 8)


def test_flops_count_the_softmax_of_visible_scores_only():
    q = TensorDesc((1, 1, 4, 8))
    cost = _handler("_scaled_dot_product_flash_attention_for_cpu")((q, q, q, 0.0, True), {}, None)
    assert cost.flops == 2 * 160 + aten.ATTN_PER_SCORE * 10


def test_a_masked_call_counts_the_whole_matrix_on_the_cpu_kernel():
    # an attn_mask has no values under the fake trace: every score is computed, then masked
    from torch._subclasses.fake_tensor import FakeTensorMode

    from layerscope.analysis.capture import CountingMode, Liveness, module_table

    module = torch.nn.Identity()
    stats, _ = module_table(module)

    class Root:
        def current(self):
            return ""

    with FakeTensorMode():
        q = torch.empty(1, 2, 8, 4)
        mask = torch.ones(8, 8, dtype=torch.bool).tril()
        with CountingMode(Root(), stats, Liveness()):
            F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    assert stats[""].forward.macs == 2 * 64 * 8


def test_unknown_counting_mode_is_refused():
    with pytest.raises(ValueError, match="causal, full"):
        with aten.attention_counting("half"):
            pass
