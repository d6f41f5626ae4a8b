"""profile --loop: inference over a data loader, per phase and per layer."""
import json

import pytest
import torch

from layerscope.training.inference_loop import LOOP_PHASES, profile_loop
from layerscope.training.recipes import DigitsCNN
from tests.helpers import run_cli


def test_loop_over_digits_phases_sum_and_layers_cover_the_forward():
    model = DigitsCNN()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # digits validation split: 360 images; batch 64 -> 6 batches = 1 warm-up + 4 measured + 1 left
    result = profile_loop(model, "digits", batch_size=64, batches=4, warmup=1)
    assert result.batches == 4 and result.phases["steps"] == 4
    assert result.phases["samples"] == 4 * 64
    assert set(result.phases["seconds"]) == set(LOOP_PHASES)
    assert sum(result.phases["seconds"].values()) == pytest.approx(result.phases["wall_s"])
    assert {r.name for r in result.layers} == {"conv1", "conv2", "fc1", "fc2"}
    assert all(r.time["n"] == 4 for r in result.layers)
    assert 0 < result.coverage <= 1.0 + 1e-6
    # the caller's model is unchanged: same flag, same values
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_loop_cli_synthetic_json(tmp_path):
    out = tmp_path / "loop.json"
    code, _, err = run_cli("profile", "mnist-cnn", "--loop", "mnist", "--synthetic", "--runs", "2",
                           "--batch-size", "8", "--format", "json", "-o", str(out), "--quiet")
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "loop" and d["batches"] == 2 and d["warmup"] == 1
    assert d["dataset"] == "mnist (synthetic)" and d["layers"]


@pytest.mark.parametrize("argv,expected", [
    (["profile", "mnist-cnn", "--loop", "imagenet", "--synthetic"], "unknown --loop 'imagenet'"),
    (["profile", "mnist-cnn", "--loop", "digits", "--runs", "100"], "fewer than --warmup"),
    (["profile", "mnist-cnn", "--loop", "mnist", "--synthetic", "--backward"], "do not apply"),
], ids=["unknown-dataset", "too-many-batches", "backward"])
def test_loop_bad_input(argv, expected):
    code, _, err = run_cli(*argv)
    assert code == 2 and err.count("\n") == 1 and expected in err, err
