"""One settings declaration per command (core.settings), for sweep, ops, roofline, predict,
verify, rewrite and scaling: every field of a command's settings class is an option of its
parser and kept in the saved result's settings (or declared record=False), and each rule
between fields (``check()``) refuses in one line naming the fields."""
from __future__ import annotations

import argparse
import dataclasses
import importlib

import pytest

from layerscope.cli.common import Parser
from layerscope.core.errors import UserError
from layerscope.core.settings import spec_of

# (command, its CLI module, the module and name of its settings class)
COMMANDS = [
    ("sweep", "layerscope.cli.sweep_cmd", "layerscope.analysis.sweep", "SweepSettings"),
    ("ops", "layerscope.cli.ops_cmd", "layerscope.analysis.op_profile", "OpsSettings"),
    ("roofline", "layerscope.cli.roofline_cmd", "layerscope.analysis.roofline_settings",
     "RooflineSettings"),
    ("predict", "layerscope.cli.predict_cmd", "layerscope.training.predict", "PredictSettings"),
    ("verify", "layerscope.cli.verify_cmd", "layerscope.rewrite.settings",
     "VerifySettings"),
    ("rewrite tile-linear", "layerscope.cli.rewrite_cmd", "layerscope.rewrite.settings",
     "PassCheck"),
    ("rewrite linear-subgraph", "layerscope.cli.rewrite_cmd", "layerscope.rewrite.settings",
     "LinearSubgraphSettings"),
    ("rewrite linear-subgraph", "layerscope.cli.rewrite_cmd", "layerscope.rewrite.settings",
     "SubgraphCheck"),
    ("scaling", "layerscope.cli.scaling_cmd", "layerscope.training.scaling", "ScalingSettings"),
]


def _settings_class(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def _parser(cli_module: str, command: str) -> argparse.ArgumentParser:
    """The parser of ``command`` ("rewrite linear-subgraph": a subcommand's subcommand)."""
    top = Parser(prog="layerscope")
    sub = top.add_subparsers(dest="command")
    importlib.import_module(cli_module).register(sub)
    words = command.split()
    parser = sub.choices[words[0]]
    for word in words[1:]:
        inner = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = inner.choices[word]
    return parser


@pytest.mark.parametrize("command,cli_module,module,name", COMMANDS,
                         ids=[c[0] for c in COMMANDS])
def test_every_setting_is_an_option_and_recorded(command, cli_module, module, name):
    cls = _settings_class(module, name)
    dests = {a.dest for a in _parser(cli_module, command)._actions}
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        assert spec is not None, f"{name}.{f.name} is not declared with option()"
        if spec.cli:
            assert f.name in dests, f"{command} has no option for {f.name}"
    required = {f.name: "1" for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    kept = cls(**required).recorded()
    assert set(kept) == {f.name for f in dataclasses.fields(cls) if spec_of(f).record}


# (settings class, its arguments, words of the one-line refusal, the fields it names)
REFUSED = [
    ("layerscope.analysis.sweep", "SweepSettings", {"model": "m", "batch_sizes": [1, 0]},
     "batch_sizes item must be at least 1", ("batch_sizes",)),
    ("layerscope.analysis.sweep", "SweepSettings", {"model": "m", "devices": "cpu,tpu"},
     "unknown device 'tpu' in devices: use cpu or cuda", ("devices",)),
    ("layerscope.analysis.sweep", "SweepSettings", {"model": "m", "backends": []},
     "backends must list at least one backend", ("backends",)),
    ("layerscope.analysis.op_profile", "OpsSettings", {"model": "m", "sort": "calls"},
     "unknown sort 'calls': use self or total", ("sort",)),
    ("layerscope.analysis.op_profile", "OpsSettings", {"model": "m", "top": 0},
     "top must be at least 1", ("top",)),
    ("layerscope.analysis.roofline_settings", "RooflineSettings", {"dtype": "int8"},
     "unknown dtype 'int8': use float32, float16 or bfloat16", ("dtype",)),
    ("layerscope.training.predict", "PredictSettings", {"source": "r", "index": 2, "image": "x"},
     "index and image each pick the sample: give one of them", ("index", "image")),
    ("layerscope.training.predict", "PredictSettings", {"source": "r", "k": 0},
     "k must be at least 1", ("k",)),
    ("layerscope.rewrite.settings", "VerifySettings", {"a": "x", "b": "y", "runs": 0},
     "runs must be at least 1", ("runs",)),
    ("layerscope.rewrite.settings", "LinearSubgraphSettings", {"m": 0, "k": 1, "n": 1},
     "m must be at least 1", ("m",)),
    ("layerscope.training.scaling", "ScalingSettings", {"recipe": "r", "nproc": "1,2000"},
     "nproc each item must be at most 1024", ("nproc",)),
]


@pytest.mark.parametrize("module,name,kwargs,words,arguments", REFUSED,
                         ids=[f"{r[1]}-{'-'.join(r[4])}" for r in REFUSED])
def test_a_bad_setting_is_refused_naming_its_fields(module, name, kwargs, words, arguments):
    with pytest.raises(UserError, match=words) as e:
        _settings_class(module, name)(**kwargs)
    assert e.value.arguments == arguments and "\n" not in str(e.value)


def test_sweep_lists_take_text_or_sequences_and_are_recorded():
    import torch.nn as nn

    import layerscope
    from layerscope.analysis.sweep import SweepSettings

    s = SweepSettings(model="m", batch_sizes="1,16", threads=[None], devices=("cpu",))
    assert (s.batch_sizes, s.threads, s.devices) == ([1, 16], [None], ["cpu"])
    r = layerscope.sweep(nn.Linear(4, 2), inputs=(1, 4), runs=2, warmup=0,
                         backends=["torchscript"])
    assert {k: r.settings[k] for k in ("batch_sizes", "backends", "devices", "runs")} == {
        "batch_sizes": [1], "backends": ["torchscript"], "devices": ["cpu"], "runs": 2}
    assert "model" not in r.settings and r.settings["inputs"] == [[1, 4]]


def test_ops_records_its_settings_and_the_threads_it_used():
    import torch.nn as nn

    import layerscope

    r = layerscope.ops(nn.Linear(4, 2), inputs=["1x4"], runs=1, warmup=0, top=3, threads=1)
    assert {k: r.settings[k] for k in ("top", "runs", "warmup", "sort", "threads")} == {
        "top": 3, "runs": 1, "warmup": 0, "sort": "self", "threads": 1}
    assert "trace" not in r.settings and r.settings["inputs"] == [[1, 4]]


def test_verify_needs_both_models_and_takes_settings():
    from layerscope.rewrite.settings import VerifySettings
    from layerscope.rewrite.verify import verify

    with pytest.raises(UserError, match="verify compares two models: give a and b"):
        verify("a.onnx")
    s = VerifySettings(a="a.onnx", b="b.onnx", optimization="disable")
    assert s.optimization == "disabled" and s.tolerances()["runs"] == 5


@pytest.mark.parametrize("argv,expected", [
    ([], {"m": 2, "k": 3, "n": 4, "tile": 64, "bias": True, "weight_seed": 0}),
    (["--no-bias", "--tile", "8"], {"bias": False, "tile": 8}),
    (["--bias"], {"bias": True}),
])
def test_linear_subgraph_options_parse_into_its_settings(argv, expected):
    from layerscope.cli.common import settings_from
    from layerscope.rewrite.settings import LinearSubgraphSettings, SubgraphCheck

    p = _parser("layerscope.cli.rewrite_cmd", "rewrite linear-subgraph")
    args = p.parse_args(["--m", "2", "--k", "3", "--n", "4", "-o", "d", *argv])
    s = settings_from(LinearSubgraphSettings, args)
    assert {k: getattr(s, k) for k in expected} == expected
    assert settings_from(SubgraphCheck, args).tolerances()["runs"] == 5


def test_linear_subgraph_needs_m_k_and_n():
    p = _parser("layerscope.cli.rewrite_cmd", "rewrite linear-subgraph")
    with pytest.raises(UserError, match="required: --m"):
        p.parse_args(["--k", "3", "--n", "4", "-o", "d"])
