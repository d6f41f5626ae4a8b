"""plan measures activations per group of identical layers (analysis/llm_structure.py), never
assuming every block is alike: DeepSeek-V3's dense first layers and its mixture-of-experts ones,
Qwen2-MoE's mlp_only_layers, Llama-4's interleaved experts, Gemma-3's window and global layers.
The grouped figure (each group's block x its layers + what lies outside the blocks) must equal
what autograd saves for the FULL model built by transformers, byte for byte."""
from __future__ import annotations

import contextlib
import json

import pytest
import torch
from helpers import run_cli
from test_llm_groups import FAMILIES

from layerscope.analysis import llm as llm_mod
from layerscope.analysis.plan import SavedCounter, measure_activations, measure_saved, plan
from layerscope.core.results import load_result

pytest.importorskip("transformers")

V3 = FAMILIES["deepseek-v3"]  # 5 layers: 2 dense (first_k_dense_replace), then 3 MoE


def _spec(tmp_path, data, name="model"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return f"hf:{folder / 'config.json'}"


# family, config changes, the groups as (label, first layer, layers)
CASES = [
    ("deepseek-v3", {}, [("dense", 0, 2), ("MoE", 2, 3)]),
    # the first layer alone in its group: measured against the model of no blocks
    ("deepseek-v3", {"first_k_dense_replace": 1}, [("dense", 0, 1), ("MoE", 1, 4)]),
    ("qwen2-moe", {}, [("MoE", 0, 3), ("dense", 1, 2)]),
    ("qwen2-moe", {"mlp_only_layers": [0]}, [("dense", 0, 1), ("MoE", 1, 4)]),
    ("qwen3-moe", {}, [("dense", 0, 2), ("MoE", 1, 2)]),
    ("llama-4", {}, [("dense, unknown-attention", 0, 2), ("MoE, unknown-attention", 1, 1),
                     ("MoE, causal", 3, 1)]),
    ("gemma-3", {}, [("window-4", 0, 4), ("causal", 2, 1)]),
]


@pytest.mark.integration
@pytest.mark.parametrize("family,changes,groups", CASES,
                         ids=[f"{f}{'-' + '-'.join(c) if c else ''}" for f, c, _ in CASES])
def test_grouped_activations_equal_the_full_model(family, changes, groups, tmp_path):
    source = llm_mod.resolve_llm(_spec(tmp_path, {**FAMILIES[family], **changes}))
    m = measure_activations(source, 1, 24, "bf16")
    assert [(g.label, g.first, g.layers) for g in m.groups] == groups
    # a dense mixture of experts (Llama-4's) counts k/E of its per-(token, expert) tensors in
    # both (analysis/dense_experts.py)
    route = (source.config.experts_per_token, source.config.num_experts)
    full = measure_saved(source.build(source.config), 1, 24, torch.bfloat16, route=route)
    assert sum(g.per_layer * g.layers for g in m.groups) + m.other == full.total


@pytest.mark.integration
def test_dense_first_layers_are_not_counted_at_the_moe_figure(tmp_path):
    # before: every layer at the figure of blocks 1 - 0 (both dense), 5 x dense
    r = plan(_spec(tmp_path, V3), 8, seq_len=24, strategy="zero3")
    a = r.activations
    dense, moe = a.groups
    assert (dense.label, dense.layers, moe.label, moe.layers) == ("dense", 2, "MoE", 3)
    assert moe.per_layer_bytes > dense.per_layer_bytes
    assert a.blocks_bytes == 2 * dense.per_layer_bytes + 3 * moe.per_layer_bytes \
        != 5 * dense.per_layer_bytes
    assert a.per_layer_bytes == moe.per_layer_bytes  # the heaviest group's
    assert r.strategies[0].activations_bytes == a.blocks_bytes + a.other_bytes
    # the gather buffers hold the largest block, the MoE one, by hand (bf16, twice):
    # MLA 64x24 + 24 + 24x96 + 64x24 + 16 + 16x128 + 64x64 = 11,560; 2 norms 128;
    # experts 4 x 64 x 64 + 4 x 64 x 32, router 4 x 64, shared expert 3 x 64 x 32 = 30,976
    # (the dense block's MLP: 3 x 64 x 128 = 24,576, the figure before)
    assert r.strategies[0].gather_bytes == 2 * 2 * (11_560 + 128 + 30_976) == 170_656


@pytest.mark.integration
def test_pipeline_stage_with_the_most_activations(tmp_path):
    # pp 2: stages of 3 layers, [dense, dense, MoE] holding 2 micro-batches, [MoE, MoE] one
    r = plan(_spec(tmp_path, V3), 2, pp=2, seq_len=24, strategy="ddp")
    dense, moe = r.activations.groups
    d, e = dense.per_layer_bytes, moe.per_layer_bytes
    assert r.activations.blocks_bytes == max(2 * (2 * d + e), 2 * e) == 2 * (2 * d + e)


def test_batched_mm_expert_weight_copies_are_not_activations(tmp_path):
    # transformers' batched_mm copies each (token, chosen expert) pair's weights, gate/up
    # (2I x h) and down (h x I), and its bmm saves the copies: 24 tokens x 2 experts x 3 x 32 x
    # 64 x 2 bytes = 589,824 for the one MoE layer of the first 3. Before, they were counted as
    # activations (1.4 TB per DeepSeek-V3 layer at 2,048 tokens); a GPU's grouped GEMM reads the
    # weights in place.
    source = llm_mod.resolve_llm(_spec(tmp_path, V3))
    three, two = (measure_saved(source.build(llm_mod.with_layers(source.config, n)), 1, 24,
                                torch.bfloat16) for n in (3, 2))
    assert three.gathered - two.gathered == 24 * 2 * 3 * 32 * 64 * 2 == 589_824
    assert 0 < three.total - two.total < 589_824


@pytest.mark.integration
def test_expert_width_equal_to_seq_is_not_an_attention_score(tmp_path):
    # seq 32 = the experts' width: the shared expert's (1, 32, 32) gate/up outputs looked like
    # seq x seq scores; the probe length now knows every parameter's dimensions
    m = measure_activations(llm_mod.resolve_llm(_spec(tmp_path, V3)), 1, 32, "bf16")
    assert [g.scores for g in m.groups] == [0, 0]  # latent attention: no seq x seq tensor


@pytest.mark.integration
def test_report_says_the_groups_and_round_trips(tmp_path):
    out = tmp_path / "plan.json"
    code, text, _ = run_cli("plan", _spec(tmp_path, V3), "--gpus", "8", "--seq-len", "24")
    assert code == 0
    assert "Layer groups: 2 dense layers" in text and "3 MoE layers" in text
    assert "2 dense + 3 MoE layers" in text
    code, _, _ = run_cli("plan", _spec(tmp_path, V3, "again"), "--gpus", "8", "--seq-len",
                          "24", "-o", str(out))
    assert code == 0
    saved = load_result(json.loads(out.read_text()))
    assert [(g.label, g.layers) for g in saved.activations.groups] == [("dense", 2), ("MoE", 3)]


class _Lookup(torch.nn.Module):
    """Token rows of a 2-D table, by indexing or by F.embedding, squared, then a tied head."""

    def __init__(self, by_index: bool):
        super().__init__()
        self.by_index = by_index
        self.table = torch.nn.Parameter(torch.empty(64, 16, device="meta"))

    def forward(self, ids):
        x = self.table[ids] if self.by_index else torch.nn.functional.embedding(ids, self.table)
        return (x * x) @ self.table.T


def test_rows_of_a_2d_table_picked_by_index_are_activations():
    # only matrices of a stacked (experts x out x in) parameter are weight copies; the rows an
    # embedding picks are what the next op keeps, whether picked by index or F.embedding
    by_index, by_embedding = (measure_saved(_Lookup(flag), 2, 8, torch.bfloat16)
                              for flag in (True, False))
    assert by_index.total == by_embedding.total and by_index.gathered == 0
    assert by_index.total >= 2 * 8 * 16 * 2  # the looked-up rows (bf16), kept by the product


def _experts_saved(implementation: str, fake: bool):
    """What DeepSeek-V3's experts module saves for 24 tokens, 2 of 8 experts each (h 64, expert
    width 32, bf16): with ``implementation``, on fake CUDA tensors or run for real on the CPU."""
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Experts

    config = transformers.AutoConfig.for_model(**{**V3, "n_routed_experts": 8})
    config._experts_implementation = implementation
    experts = DeepseekV3Experts(config).to(torch.bfloat16)
    for p in experts.parameters():
        torch.nn.init.normal_(p)
    with FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext():
        device = "cuda" if fake else "cpu"
        weights = {n: torch.nn.Parameter(p.detach().to(device)) for n, p in
                   experts.named_parameters()}
        counter = SavedCounter({p.untyped_storage()._cdata for p in weights.values()}, 24)
        x = torch.randn(24, 64, dtype=torch.bfloat16, device=device, requires_grad=True)
        chosen = torch.stack([torch.arange(24) % 8, (torch.arange(24) + 3) % 8], 1).to(device)
        share = torch.rand(24, 2, device=device, requires_grad=True)
        with counter.hooks():
            torch.func.functional_call(experts, weights, (x, chosen, share))
    return counter.saved()


def test_experts_save_what_a_grouped_gemm_saves():
    """Per (token, expert) pair, S = 48 of them: the token's input (e h), gate/up output
    (2 e I), SiLU output (e I), their product (e I, the down projection's input), the output
    (e h), the fp32 routing weight (4) and the int64 expert id (8): S (2 e h + 4 e I + 12) =
    48 x (256 + 256 + 12) = 25,152 bytes. batched_mm measured (fake CUDA, the weight copies left
    out) saves that; grouped_mm run for real on the CPU saves it plus its sort's two int64
    index tensors and int32 offsets per expert: 2 x 8 S + 4 x 8 = 800."""
    pytest.importorskip("torch", minversion="2.9")  # grouped_mm's CPU kernel
    batched = _experts_saved("batched_mm", fake=True)
    grouped = _experts_saved("grouped_mm", fake=False)
    assert batched.total == 48 * (2 * 2 * 64 + 4 * 2 * 32 + 12) == 25_152
    assert batched.gathered == 48 * 3 * 32 * 64 * 2  # the copies, counted apart
    assert grouped.total == batched.total + 2 * 8 * 48 + 4 * 8 and grouped.gathered == 0
