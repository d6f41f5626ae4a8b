"""memory, plan and llm: each command's settings declared once (core.settings). Every field is
an option of the command's parser and recorded in the saved result's settings (or declared
record=False), and each cross-field rule of ``check()`` refuses in one line naming its
fields."""
from __future__ import annotations

import dataclasses

import pytest

from layerscope.analysis.llm_settings import LLMSettings, PlanSettings
from layerscope.analysis.memory_settings import MemorySettings
from layerscope.cli.common import Parser, add_all_settings, settings_from
from layerscope.core.errors import UserError
from layerscope.core.settings import spec_of

# (settings class, the arguments a valid object needs, fields the result keeps elsewhere)
COMMANDS = {
    "memory": (MemorySettings, {"model": "mnist-cnn"}, {"model", "inputs", "optimizer"}),
    "plan": (PlanSettings, {"model": "gpt2", "gpus": 8}, {"model"}),
    "llm": (LLMSettings, {"model": "gpt2"}, {"model"}),
}


def _parser(cls) -> Parser:
    p = Parser(prog="t")
    add_all_settings(p, cls)
    return p


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_field_is_an_option_and_recorded_or_declared_not(command):
    cls, needed, elsewhere = COMMANDS[command]
    dests = {a.dest for a in _parser(cls)._actions}
    recorded = cls(**needed).recorded()
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        assert spec is not None and f.name in dests, f.name
        assert (f.name in recorded) == (f.name not in elsewhere), f.name
        assert spec.record == (f.name not in elsewhere), f.name


# (command, arguments, the one line, the fields it names)
RULES = [
    ("memory", {"model": "mnist-cnn", "device": "cuda"},
     "device cuda is where the measured step runs: add measure", ("device", "measure")),
    ("memory", {"model": "mnist-cnn", "fit_seq": True},
     "fit_seq needs a memory budget: give fit SIZE", ("fit_seq", "fit")),
    ("memory", {"model": "mnist-cnn", "optimizer": 3}, "unknown optimizer 3", ("optimizer",)),
    ("plan", {"model": "gpt2", "gpus": 6, "tp": 4}, "gpus 6 is not a multiple of tp x pp = 4",
     ("gpus", "tp", "pp")),
]


@pytest.mark.parametrize("command,kwargs,words,names", RULES,
                         ids=[f"{r[0]}-{'-'.join(r[3])}" for r in RULES])
def test_check_refuses_what_does_not_go_together(command, kwargs, words, names):
    cls = COMMANDS[command][0]
    with pytest.raises(UserError, match=words) as e:
        cls(**kwargs)
    assert e.value.arguments == names and "\n" not in str(e.value)


def test_memory_parses_its_command_line_and_takes_set_to_none():
    from layerscope.analysis.memory_settings import memory_settings

    s = settings_from(MemorySettings, _parser(MemorySettings).parse_args(
        ["m", "--input", "1x3", "--mode", "training", "--zero-grad", "zeros", "--fit", "1GB",
         "--fit-seq", "--seq-len", "8"]))
    assert (s.inputs, s.mode, s.set_to_none, s.fit, s.fit_seq, s.seq_len) == (
        ["1x3"], "training", False, 10**9, True, 8)
    assert memory_settings(None, "m", None, {"set_to_none": False}).zero_grad == "zeros"
    assert memory_settings(s, None, None, {"set_to_none": True}).zero_grad == "none"


@pytest.mark.integration  # runs a step / counts a model: over 0.5 CPU-s
def test_a_memory_report_records_its_settings():
    import torch.nn as nn

    import layerscope

    r = layerscope.memory(nn.Linear(4, 2), ["2x4"], mode="training", optimizer="sgd",
                          set_to_none=False)
    assert r.settings["mode"] == "training" and r.settings["set_to_none"] is False
    assert r.settings["zero_grad"] == "zeros" and r.settings["fit"] is None
    assert r.settings["device"] == "cpu" and "model" not in r.settings
    s = MemorySettings(model=nn.Linear(4, 2), inputs=["2x4"], mode="training",
                       optimizer="sgd", zero_grad="zeros")
    again = layerscope.memory(settings=s)
    assert again.settings == r.settings and again.peak_bytes == r.peak_bytes


def test_plan_parses_its_command_line():
    p = _parser(PlanSettings)
    s = settings_from(PlanSettings, p.parse_args(
        ["gpt2", "--gpus", "8", "--dtype", "bfloat16", "--gpu-memory", "40GB", "--tp", "2"]))
    assert (s.gpus, s.dtype, s.gpu_memory, s.tp, s.pp) == (8, "bf16", 40 * 10**9, 2, 1)
    with pytest.raises(UserError, match="required: --gpus"):
        p.parse_args(["gpt2"])
    with pytest.raises(UserError, match="--dtype must be one of bf16, fp16, fp32"):
        p.parse_args(["gpt2", "--gpus", "1", "--dtype", "fp8"])
    with pytest.raises(UserError, match="^dtype for training must be one of"):
        PlanSettings(model="gpt2", gpus=1, dtype="int8")


@pytest.mark.integration  # runs a step / counts a model: over 0.5 CPU-s
def test_llm_parses_its_command_line_and_records_its_settings():
    import layerscope

    s = settings_from(LLMSettings, _parser(LLMSettings).parse_args(
        ["gpt2", "--seq-len", "64", "--kv-dtype", "float16", "--attention", "full"]))
    assert (s.seq_len, s.kv_dtype, s.dtype, s.attention) == (64, "fp16", "bf16", "full")
    with pytest.raises(UserError, match="--kv-dtype must be one of fp32"):
        _parser(LLMSettings).parse_args(["gpt2", "--kv-dtype", "int3"])
    r = layerscope.llm(settings=s, context=32)
    assert r.settings == {"seq_len": 64, "context": 32, "batch_size": 1, "dtype": "bf16",
                          "kv_dtype": "fp16", "gpu": None, "tp": 1, "attention": "full"}
    assert layerscope.llm("gpt2", seq_len=64, context=32, kv_dtype="fp16",
                          attention="full").settings == r.settings
