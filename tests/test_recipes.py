"""Training recipes are data: the optimizer, scheduler, loss and transfer-learning step each
recipe uses come from its fields (training/recipes.py), and the loop never branches on a recipe's
name."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from layerscope.core.errors import UserError
from layerscope.training import loop
from layerscope.training.recipes import (
    RECIPES,
    Recipe,
    loss_function,
    make_optimizer,
    make_scheduler,
)

# (recipe, optimizer class, scheduler class or None, loss, starts from pretrained weights)
CASES = [
    ("digits-cnn", torch.optim.Adam, None, F.cross_entropy, False),
    ("mnist-cnn", torch.optim.Adadelta, torch.optim.lr_scheduler.StepLR, F.nll_loss, False),
    ("cifar10-resnet20", torch.optim.Adam, None, F.cross_entropy, False),
    ("cifar100-resnet50", torch.optim.Adam, None, F.cross_entropy, True),
]


@pytest.mark.parametrize("name,opt_cls,sched_cls,loss,pretrained", CASES,
                         ids=[c[0] for c in CASES])
def test_recipe_fields_choose_the_training_parts(name, opt_cls, sched_cls, loss, pretrained):
    r = RECIPES[name]
    params = [nn.Parameter(torch.zeros(2))]
    opt = make_optimizer(r.optimizer, params, r.lr)
    assert type(opt) is opt_cls and opt.param_groups[0]["lr"] == r.lr
    sched = make_scheduler(r, opt)
    assert (sched is None) if sched_cls is None else type(sched) is sched_cls
    if sched is not None:  # StepLR(step_size=1, gamma): lr * gamma after one epoch
        opt.step()
        sched.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(r.lr * r.gamma)
    assert loss_function(r) is loss
    assert (r.init_weights is not None) is pretrained


def test_every_recipe_is_covered_above():
    assert sorted(RECIPES) == sorted(c[0] for c in CASES)


@pytest.mark.parametrize("field,value", [("scheduler", "cosine"), ("loss", "hinge"),
                                         ("optimizer", "lion")])
def test_a_recipe_naming_an_unknown_choice_is_refused(field, value):
    kwargs = dict(name="x", data="digits", build=nn.Identity, optimizer="adam", lr=1e-3,
                  batch_size=8, epochs=1)
    kwargs[field] = value
    with pytest.raises(ValueError, match=f"unknown {field} '{value}'"):
        Recipe(**kwargs)


def test_transfer_learning_recipe_reports_a_missing_weights_file(tmp_path):
    r = RECIPES["cifar100-resnet50"]
    with pytest.raises(UserError, match="no such file"):
        r.init_weights(r.build(), str(tmp_path / "missing.pth"))


def test_unknown_optimizer_is_a_user_error():
    with pytest.raises(UserError, match="use one of sgd, adam, adamw, adadelta"):
        make_optimizer("lion", [nn.Parameter(torch.zeros(1))], 0.1)


def test_the_loop_has_no_recipe_name_branches():
    # the loop and every module it is split into (loop_run, loop_steps, ...)
    folder = Path(inspect.getfile(loop)).parent
    source = "\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.glob("loop*.py")))
    assert len(list(folder.glob("loop*.py"))) > 1
    assert not re.search(r"\b(r|recipe)\.name\s*(==|!=|in)\b", source)
    lines = [line for line in source.splitlines() if any(n in line for n in RECIPES)]
    assert lines == []  # not even the default: TrainConfig lives in training/config.py
