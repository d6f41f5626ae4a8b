"""The commands converted to one settings declaration each (analyze, graph, activations,
compare, export): every field of a command's settings is an option of its parser (or declared
``cli=False``), read back by ``settings_from``, and kept in the saved result's settings (or
declared ``record=False``); each cross-field rule (``check()``) refuses in one line naming the
fields."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from layerscope.analysis.activations import ActivationsSettings
from layerscope.analysis.analyze import AnalyzeSettings
from layerscope.analysis.compare.join import CompareSettings
from layerscope.analysis.graph import GraphSettings
from layerscope.analysis.onnx_export import ExportSettings
from layerscope.cli.main import build_parser
from layerscope.core.errors import UserError
from layerscope.core.settings import spec_of
from layerscope.renderers.view_settings import AnalyzeViewSettings

# (command, its settings classes, a command line that parses)
COMMANDS = [
    ("analyze", (AnalyzeSettings, AnalyzeViewSettings), ["mnist-cnn"]),
    ("graph", (GraphSettings,), ["mnist-cnn"]),
    ("activations", (ActivationsSettings,), ["mnist-cnn"]),
    ("compare", (CompareSettings,), ["mnist-cnn", "resnet20"]),
    ("export", (ExportSettings,), ["mnist-cnn", "-o", "m.onnx"]),
]


def _subparser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


@pytest.mark.parametrize("command,classes,argv", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_setting_is_an_option_of_its_command(command, classes, argv):
    p = _subparser(command)
    dests = {a.dest for a in p._actions}
    args = p.parse_args(argv)
    for cls in classes:
        for f in dataclasses.fields(cls):
            spec = spec_of(f)
            assert spec is not None, f"{cls.__name__}.{f.name} is not declared with option()"
            assert (f.name in dests) == spec.cli, f.name
        from layerscope.cli.common import settings_from

        s = settings_from(cls, args)
        recorded = s.recorded()
        for f in dataclasses.fields(cls):
            assert (f.name in recorded) == spec_of(f).record, f.name


# (id, settings class, arguments, the one line of the refusal, the fields it names)
REFUSALS = [
    ("analyze-view", AnalyzeViewSettings, {"op_type": "Conv"},
     "op_type and skip_trivial select the rows of the views ops, attributes, bandwidth "
     "(view layers shows the whole report)", ("op_type", "skip_trivial", "view")),
]


@pytest.mark.parametrize("cls,kwargs,words,names", [c[1:] for c in REFUSALS],
                         ids=[c[0] for c in REFUSALS])
def test_a_cross_field_rule_refuses_in_one_line_naming_the_fields(cls, kwargs, words, names):
    with pytest.raises(UserError) as e:
        cls(**kwargs)
    assert str(e.value) == words and e.value.arguments == names


def test_analyze_records_its_settings_below_what_the_analysis_found():
    """A report's settings keep every recorded setting (batch_size, seq_len: new), with the
    analysis' own words winning: the dtype's name, no optimizer outside training."""
    import torch.nn as nn

    import layerscope

    r = layerscope.analyze(nn.Linear(4, 3), (2, 4), batch_size=5, dtype="float16")
    assert r.settings == {"batch_size": 5, "depth": None, "dtype": "float16",
                          "mode": "inference", "seq_len": None, "attention": "causal",
                          "optimizer": None}
    s = AnalyzeSettings(model=nn.Linear(4, 3), inputs=(2, 4), mode="training",
                        optimizer="sgd")
    t = layerscope.analyze(settings=s)
    assert (t.settings["mode"], t.settings["optimizer"]) == ("training", "sgd")
    assert layerscope.analyze(settings=s, optimizer="momentum").settings["optimizer"] == \
        "momentum"


def test_analyze_optimizers_are_the_ones_it_counts_state_for():
    from layerscope.analysis.static import OPTIMIZER_STATE_FACTOR

    optimizer = next(f for f in dataclasses.fields(AnalyzeSettings) if f.name == "optimizer")
    assert spec_of(optimizer).choices == tuple(OPTIMIZER_STATE_FACTOR)


@pytest.mark.parametrize("kwargs,words,names", [
    ({"attention": "x"}, "unknown attention 'x': use causal or full", ("attention",)),
    ({"optimizer": "lion"}, "unknown optimizer 'lion': use sgd, momentum, adam or adamw",
     ("optimizer",)),
    ({"depth": -1}, "depth must be 0 or more, got -1", ("depth",)),
    ({"batch_size": 0}, "batch_size must be at least 1, got 0", ("batch_size",)),
])
def test_analyze_refuses_a_bad_setting_before_loading_the_model(kwargs, words, names):
    import layerscope

    with pytest.raises(UserError) as e:
        layerscope.analyze("no-such-model", **kwargs)
    assert str(e.value) == words and e.value.arguments == names


@pytest.mark.parametrize("cls,kwargs,words,names", [
    (GraphSettings, {"metric": "speed"}, "unknown metric 'speed': use one of flops, macs, "
     "params, weight_bytes, bytes_read, bytes_written, activation_bytes, intensity",
     ("metric",)),
    (ActivationsSettings, {"seed": -1}, "seed must be", ("seed",)),
    (ActivationsSettings, {"batch_size": 0}, "batch_size must be at least 1, got 0",
     ("batch_size",)),
])
def test_a_bad_value_is_refused_naming_its_argument(cls, kwargs, words, names):
    with pytest.raises(UserError) as e:
        cls(model="mnist-cnn", **kwargs)
    assert str(e.value).startswith(words) and e.value.arguments == names


@pytest.mark.parametrize("call,words", [
    (lambda ls: ls.graph(), "give the model to draw"),
    (lambda ls: ls.activations(layers="conv.*"), "give the model to capture"),
    (lambda ls: ls.compare("mnist-cnn"), "give both sides to compare: a and b"),
])
def test_an_entry_point_without_its_model_says_so(call, words):
    import layerscope

    with pytest.raises(UserError, match=words):
        call(layerscope)


def test_compare_takes_its_settings_or_its_arguments():
    """Settings and overrides give the same comparison as the positional arguments (two
    saved-free sides: two Reports, so nothing is analysed twice)."""
    import torch.nn as nn

    import layerscope

    ra = layerscope.analyze(nn.Sequential(nn.Linear(4, 3)), (2, 4))
    rb = layerscope.analyze(nn.Sequential(nn.Linear(4, 5)), (2, 4))
    plain = layerscope.compare(ra, rb)
    declared = layerscope.compare(settings=CompareSettings(a=ra, b=rb))
    overridden = layerscope.compare(settings=CompareSettings(a=ra, b=ra), b=rb)
    assert plain.to_dict() == declared.to_dict() == overridden.to_dict()
    assert not plain.identical


def test_export_checks_the_opset_against_the_exporter_it_uses():
    """A cross-field rule: the opsets an exporter writes bound ``opset``; the message names
    the exporter and its range."""
    from layerscope.analysis.onnx_export import opset_range

    for exporter in ("dynamo", "legacy"):
        low, high = opset_range(exporter)
        with pytest.raises(UserError) as e:
            ExportSettings(model="mnist-cnn", exporter=exporter, opset=high + 1)
        assert str(e.value).endswith(f"; the {exporter} exporter writes opsets {low} to {high}")
        assert e.value.arguments == ("opset",)
        assert ExportSettings(model="mnist-cnn", exporter=exporter, opset=str(high)).opset == high


def test_export_flags_keep_their_own_help_and_read_back():
    """--dynamo and --legacy set one field (``consts``), each flag with its own help; the words
    ``flags`` writes parse back to the same settings."""
    p = _subparser("export")
    helps = {a.option_strings[0]: a.help for a in p._actions if a.dest == "exporter"}
    assert helps == {"--dynamo": "torch.export-based exporter (default): nodes keep their "
                                 "module path",
                     "--legacy": "TorchScript-based exporter (folds BatchNorm into Conv)"}
    words = ExportSettings.flags(exporter="legacy", verify=False, opset=13, seed=3)
    assert words == ["--opset", "13", "--legacy", "--seed", "3", "--no-verify"]
    from layerscope.cli.common import settings_from

    s = settings_from(ExportSettings, p.parse_args(["mnist-cnn", "-o", "m.onnx", *words]))
    assert (s.exporter, s.verify, s.opset, s.seed, s.path) == ("legacy", False, 13, 3, None)
    assert settings_from(ExportSettings, p.parse_args(["m", "-o", "m.onnx"])).exporter == "dynamo"


@pytest.mark.parametrize("kwargs,words", [
    ({"path": "m.txt"}, "path 'm.txt': the output file name must end in .onnx"),
    ({}, "give the path to write (a file name ending in .onnx)"),
])
def test_export_refuses_a_path_that_is_not_an_onnx_file(kwargs, words):
    import layerscope

    with pytest.raises(UserError) as e:
        layerscope.export_onnx("mnist-cnn", **kwargs)
    assert str(e.value) == words and e.value.arguments == ("path",)
