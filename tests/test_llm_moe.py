"""Mixtures of experts read by structure, not by one key name: routed and shared experts, top-k
and the expert width under every key transformers uses (frontends/llm_moe.py), the active
parameters those of the ``experts`` modules the built model has, and ``analyze hf:``, ``llm``
and ``plan`` agreeing on them."""
from __future__ import annotations

import json

import pytest
from test_llm_attention import DSV2
from test_llm_groups import FAMILIES

from layerscope.analysis import llm as llm_mod
from layerscope.analysis.analyze import analyze
from layerscope.analysis.llm import llm
from layerscope.analysis.plan import plan
from layerscope.core.errors import UserError
from layerscope.frontends import llm_models
from layerscope.frontends.llm_moe import MoEShape, moe_from_hf


@pytest.mark.parametrize("data,shape", [
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 14336},
     MoEShape(8, 2, 0, 14336)),  # Mixtral
    ({"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
      "shared_expert_intermediate_size": 5632}, MoEShape(60, 4, 1, 1408)),  # Qwen2-MoE
    ({"n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
      "moe_intermediate_size": 2048, "first_k_dense_replace": 3},
     MoEShape(256, 8, 1, 2048)),  # DeepSeek-V3
    ({"moe_num_experts": 16, "moe_k": 4}, MoEShape(16, 4)),
    ({"num_experts": 64, "num_experts_per_token": 8, "num_shared_experts": 2},
     MoEShape(64, 8, 2)),
    ({"n_routed_experts": 8, "moe_topk": 2}, MoEShape(8, 2)),
    ({"num_experts": 0, "num_experts_per_tok": 2}, MoEShape()),  # a dense config with the keys
    ({"num_local_experts": 1}, MoEShape()),
    ({"intermediate_size": 128}, MoEShape()),
])
def test_moe_key_names(data, shape):
    assert moe_from_hf(data) == shape


def test_moe_refusals():
    with pytest.raises(UserError, match="hf:x: num_experts_per_tok 9 is more than the 8 experts"):
        moe_from_hf({"n_routed_experts": 8, "num_experts_per_tok": 9}, "hf:x")


def test_llm_config_reads_deepseek_routing():
    data = {**FAMILIES["deepseek-v3"]}
    config = llm_models.llm_config_from_hf(data, "ds")
    assert (config.num_experts, config.experts_per_token) == (4, 2)


# Each family's MoE layers hold 4 routed experts of 3 x 64 x 32 = 6,144 parameters (gate, up,
# down at hidden 64, expert width 32): DeepSeek-V3 layers 2-4 (two dense first), k = 2; Qwen2-MoE
# layers 0, 2, 4 (mlp_only_layers 1, 3), k = 2; Llama-4 layers 1, 3 (every second), k = 1.
# Active = total - (layers x 4 x 6,144) x (1 - k/4): 36,864 fewer in each.
@pytest.mark.integration
@pytest.mark.parametrize("family,inactive", [
    ("deepseek-v3", 3 * 4 * 6144 // 2), ("qwen2-moe", 3 * 4 * 6144 // 2),
    ("llama-4", 2 * 4 * 6144 * 3 // 4)])
def test_analyze_llm_and_plan_agree_on_parameters(family, inactive, tmp_path):
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(FAMILIES[family]))
    spec = f"hf:{path}"
    a = analyze(spec, seq_len=8).totals
    r = llm(spec, seq_len=8)
    assert a.params - a.params_active == inactive
    assert (r.params_total, r.params_active) == (a.params, a.params_active)
    # plan's parameter count (param_count: no trace); plan itself measures activations with
    # real-shaped fake tensors, which transformers' DeepSeek-V3 code does not run under
    assert llm_mod.param_count(llm_mod.resolve_llm(spec)) == a.params
    if family != "deepseek-v3":
        assert plan(spec, 8, seq_len=8).params_total == a.params
    assert any("of 4 experts per token" in n for n in r.notes)


# DeepSeek-V2-shaped (test_llm_attention's multi-head latent attention config): 4 routed
# experts of 3 x 64 x 32 = 6,144 parameters and one shared expert, k = 2, the first of 3 layers
# dense: layers 1 and 2 route
DSV2_MOE = {**DSV2, "num_hidden_layers": 3, "first_k_dense_replace": 1}


@pytest.mark.integration
@pytest.mark.parametrize("data,inactive", [
    (DSV2_MOE, 2 * 4 * 6144 // 2), (FAMILIES["qwen2-moe"], 3 * 4 * 6144 // 2)],
    ids=["deepseek-v2", "qwen2-moe"])
def test_plan_reports_the_active_parameters_llm_and_analyze_report(data, inactive, tmp_path):
    pytest.importorskip("transformers")
    from layerscope.views.common import exact
    from layerscope.views.llm import plan_facts

    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    spec = f"hf:{path}"
    a = analyze(spec, seq_len=8).totals
    r = llm(spec, seq_len=8)
    p = plan(spec, 8, seq_len=8)
    assert a.params - a.params_active == inactive
    assert (p.params_total, p.params_active) == (r.params_total, r.params_active) == (
        a.params, a.params_active)
    # the plan view shows it beside the total, as llm's does
    assert [value for name, value in plan_facts(p) if name == "Active per token"] == [
        exact(a.params_active)]
    assert p.to_dict()["params_active"] == a.params_active
