"""Speed at scale, checked by what is done rather than by the clock: a model of
many identical blocks traces one block and replays the others, and naming a factory file does
not import torchvision (seconds of a 405B analysis went there)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from layerscope.analysis import capture
from tests.test_capture_reuse import Block, Stack, assert_same


@pytest.mark.integration
def test_126_identical_blocks_trace_one():
    with torch.device("meta"):
        model = Stack([Block(32) for _ in range(126)]).eval()
    on = capture.capture(model, [torch.zeros(1, 64, 32)])
    off = capture.capture(model, [torch.zeros(1, 64, 32)], reuse_blocks=False)
    assert_same(on, off)
    assert on.replayed_calls == 125


def test_blocks_under_a_wrapper_are_replayed_too():
    # the repeated blocks sit two levels down (model.body.blocks.N), like a causal LM's
    # model.layers.N: the wrapper is called once and traced, the blocks inside it replayed
    outer = nn.Sequential()
    outer.add_module("body", Stack([Block() for _ in range(4)]))
    on = capture.capture(outer.eval(), [torch.zeros(2, 8, 16)])
    assert on.replayed_calls == 3


@pytest.mark.integration
def test_a_factory_spec_does_not_import_torchvision():
    code = ("import sys\nfrom layerscope.frontends.detect import detect\n"
            "print(detect('model_file.py:factory').kind, 'torchvision' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["factory", "False"]
