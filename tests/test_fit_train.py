"""``memory RECIPE --mode training --fit SIZE`` chained with ``train RECIPE --memory-limit SIZE``:
the batch --fit gives trains within the limit, one more is refused with the post-mortem. The
static step --fit traces and the step train runs are one definition (``train_step.step``: the
same zero_grad, loss against int64 labels, optimizer), so the two agree to the byte: budgets
are taken at the edges, exactly the static peak at the answer and one byte below the next
size's."""
from __future__ import annotations

import json

import pytest
import torch

import layerscope
from layerscope.analysis.train_step import classifier_loss
from layerscope.training.recipes import RECIPES
from tests.helpers import run_cli

# recipe, a budget to start from: three shapes of model, three optimizers, two losses
CHAINED = [
    ("digits-cnn", 4_000_000),  # a CNN on 8x8 digits, Adam, cross-entropy
    ("mnist-cnn", 40_000_000),  # PyTorch's MNIST example: dropout, Adadelta, log_softmax + nll
    ("cifar10-resnet20", 20_000_000),  # ResNet-20 (batch norm, residuals), Adam
]


def _fit(recipe: str, budget: int, tmp_path) -> dict:
    out = tmp_path / f"fit-{budget}.json"
    code, _, err = run_cli("memory", recipe, "--mode", "training", "--fit", str(budget),
                           "-o", str(out))
    assert code == 0, err
    return json.loads(out.read_text())["fit"]


def _train(recipe: str, batch: int, budget: int, tmp_path) -> tuple[int, str, object]:
    """Two steps (the second is the steady state: the optimizer's state exists), no
    validation."""
    run_dir = tmp_path / f"run-{batch}-{budget}"
    code, _, err = run_cli("train", recipe, "--synthetic", "--steps", "2", "--no-eval",
                           "--quiet", "--batch-size", str(batch), "--memory-limit", str(budget),
                           "--out", str(run_dir))
    return code, err, run_dir


@pytest.mark.integration
@pytest.mark.parametrize("recipe,start", CHAINED, ids=[c[0] for c in CHAINED])
def test_fit_answer_trains_within_the_budget_and_one_more_does_not(recipe, start, tmp_path):
    first = _fit(recipe, start, tmp_path)
    k = first["max_batch_size"]
    at_max, at_next = first["bytes_at_max"], first["bytes_at_next"]
    assert k > 1 and at_max <= start < at_next
    for budget in (at_max, at_next - 1):  # the edges: the same answer
        fit = _fit(recipe, budget, tmp_path)
        assert (fit["max_batch_size"], fit["bytes_at_max"], fit["bytes_at_next"]) == \
            (k, at_max, at_next), budget
        code, err, _ = _train(recipe, k, budget, tmp_path)
        assert code == 0, err
        code, err, run_dir = _train(recipe, k + 1, budget, tmp_path)
        assert code == 1, err
        assert err.startswith("layerscope: out of memory in "), err
        pm = json.loads((run_dir / "report.json").read_text())["post_mortem"]
        assert pm["limit_bytes"] == budget
        assert pm["live_bytes"] <= budget < pm["live_bytes"] + pm["asked_bytes"] <= at_next
        assert sum(r["bytes"] for r in pm["by_module_kind"]) == pm["live_bytes"]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_the_step_loss_is_each_recipes_own(name):
    """memory's step picks the loss by the outputs (nll after log_softmax, else cross-entropy):
    the loss every recipe names."""
    recipe = RECIPES[name]
    with torch.device("meta"):
        model = recipe.build()
    from layerscope.training.data import DATASETS

    shape = DATASETS[recipe.data].shape
    if recipe.image_size:
        shape = (shape[0], recipe.image_size, recipe.image_size)
    out = model(torch.zeros(2, *shape, device="meta"))
    assert classifier_loss(out) == recipe.loss


def test_a_recipe_name_is_the_step_train_runs():
    report = layerscope.memory("digits-cnn", mode="training", batch_size=8)
    assert report.model == "digits-cnn" and report.optimizer == "adam (the recipe's)"
    assert report.inputs == ["8x1x8x8"]
    assert any("as layerscope train steps it" in n for n in report.notes)
    other = layerscope.memory("digits-cnn", mode="training", batch_size=8, optimizer="sgd")
    assert other.optimizer == "sgd" and other.peak_bytes < report.peak_bytes


def test_a_recipe_name_with_inputs_and_in_inference():
    given = layerscope.memory("digits-cnn", ["2x1x8x8"], mode="training")
    assert given.model == "digits-cnn" and given.inputs == ["2x1x8x8"]
    inference = layerscope.memory("digits-cnn", batch_size=360)  # validation's batch
    assert inference.model == "digits-cnn" and inference.optimizer is None
    assert inference.notes[-1] == "digits-cnn: the recipe's model"
