"""Options declared once: every ``TrainConfig`` field is a ``layerscope train`` option built from
its metadata, read back into the same value, and validated by the config itself (the Python API
names the argument, the CLI the flag); ``--device`` and onnxruntime's optimisation level are one
declaration each; ``-o FILE.csv`` writes CSV on every command that writes a result."""
from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import textwrap

import pytest

from layerscope.cli import train_cmd
from layerscope.cli.main import build_parser
from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.training.config import TrainConfig
from tests.helpers import run_cli

# every TrainConfig field the command line offers: (command-line words, the value they give);
# a new field needs a row here (test_every_field_has_a_row)
FIELDS = {
    "recipe": (["mnist-cnn"], "mnist-cnn"),
    "epochs": (["--epochs", "3"], 3),
    "steps": (["--steps", "7"], 7),
    "batch_size": (["--batch-size", "16"], 16),
    "lr": (["--lr", "0.05"], 0.05),
    "optimizer": (["--optimizer", "adamw"], "adamw"),
    "data_dir": (["--data-dir", "data"], "data"),
    "download": (["--download"], True),
    "synthetic": (["--synthetic"], True),
    "device": (["--device", "cuda"], "cuda"),
    "memory_limit": (["--memory-limit", "2GiB"], 2 * 2**30),
    "num_workers": (["--num-workers", "2"], 2),
    "pin_memory": (["--pin-memory"], True),
    "compile": (["--compile"], True),
    "torchscript": (["--torchscript"], True),
    "cudnn_benchmark": (["--cudnn-benchmark"], True),
    "amp": (["--amp"], True),
    "channels_last": (["--channels-last"], True),
    "profile": (["--profile", "pyinstrument"], "pyinstrument"),  # (torch: not with --kernels)
    "kernels": (["--kernels"], True),
    "nvtx": (["--nvtx"], True),
    "dry_run": (["--dry-run"], True),
    "resume": (["--resume", "runs/a"], "runs/a"),
    "out": (["--out", "runs/b"], "runs/b"),
    "tensorboard": (["--tensorboard"], True),
    "seed": (["--seed", "9"], 9),
    "weights": (["--weights", "w.pth"], "w.pth"),
    "threads": (["--threads", "1"], 1),
    "warmup_steps": (["--warmup-steps", "2"], 2),
    "evaluate": (["--no-eval"], False),
    "checkpoint_every": (["--checkpoint-every", "5"], 5),
    "strategy": (["--strategy", "fsdp"], "fsdp"),
    "comm_timeout": (["--comm-timeout", "30"], 30.0),
}
API_ONLY = {"synthetic_size"}  # settings the Python API offers and the command line does not


def _parse(*words: str):
    return build_parser().parse_args(["train", *words])


def test_every_field_has_a_row():
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert names - API_ONLY == set(FIELDS)


@pytest.mark.parametrize("name", list(FIELDS))
def test_a_flag_sets_its_field_and_nothing_else(name):
    words, value = FIELDS[name]
    config = train_cmd.config_from(_parse(*words))
    default = TrainConfig()
    assert value != getattr(default, name)  # the row really changes something
    assert getattr(config, name) == value
    assert dataclasses.replace(config, **{name: getattr(default, name)}) == default


def test_the_flags_defaults_are_the_config_defaults():
    assert train_cmd.config_from(_parse()) == TrainConfig()


def test_namespace_to_config_and_back_round_trips():
    words = [w for _, (ws, _) in FIELDS.items() for w in ws]
    args = _parse(*words)
    config = train_cmd.config_from(args)
    for name in FIELDS:
        assert getattr(config, name) == getattr(args, name) == FIELDS[name][1], name


# (id, config arguments, the Python message): one line naming the argument
BAD_CONFIGS = [
    ("epochs", {"epochs": 0}, "epochs must be at least 1, got 0"),
    ("batch-size", {"batch_size": -1}, "batch_size must be at least 1, got -1"),
    ("lr-nan", {"lr": float("nan")}, "lr must be a finite number"),
    ("lr-huge", {"lr": 1e3}, "lr must be at most 10"),
    ("num-workers", {"num_workers": 5000}, "num_workers must be"),
    ("seed", {"seed": -1}, "seed must be"),
    ("seed-none", {"seed": None}, "seed must be a whole number"),
    ("checkpoint-every", {"checkpoint_every": 0}, "checkpoint_every must be at least 1"),
    ("comm-timeout", {"comm_timeout": 0}, "comm_timeout must be positive"),
    ("device", {"device": "tpu"}, "unknown device 'tpu': use cpu or cuda"),
    ("optimizer", {"optimizer": "lion"}, "unknown optimizer 'lion': use sgd, adam, adamw or "
                                         "adadelta"),
    ("profile", {"profile": "perf"}, "unknown profile 'perf': use cprofile, torch or "
                                     "pyinstrument"),
    ("strategy", {"strategy": "zero"}, "unknown strategy 'zero': use ddp or fsdp"),
]


@pytest.mark.parametrize("kwargs,message", [c[1:] for c in BAD_CONFIGS],
                         ids=[c[0] for c in BAD_CONFIGS])
def test_the_config_refuses_a_bad_value_naming_the_argument(kwargs, message):
    with pytest.raises(UserError, match="^" + message) as info:
        TrainConfig(**kwargs)
    assert "\n" not in str(info.value)
    assert info.value.arguments == tuple(kwargs)
    with pytest.raises(UserError, match="^" + message):  # replace() (train(**overrides)) too
        dataclasses.replace(TrainConfig(), **kwargs)


def test_values_given_as_text_are_parsed():
    config = TrainConfig(epochs="3", lr="0.5")
    assert (config.epochs, config.lr) == (3, 0.5)


def test_training_optimizers_are_the_configs_choices():
    from layerscope.training.config import OPTIMIZERS
    from layerscope.training.recipes import OPTIMIZERS as BUILT

    assert OPTIMIZERS == BUILT


# (id, command line, the one line on stderr): exit code 2, the flag named, nothing written
BAD_FLAGS = [
    ("train-epochs", ["train", "--epochs", "0"], "--epochs must be at least 1"),
    ("train-lr", ["train", "--lr", "inf"], "--lr must be a finite number"),
    ("train-device", ["train", "--device", "tpu"], "unknown --device 'tpu': use cpu or cuda"),
    ("train-optimizer", ["train", "--optimizer", "lion"], "--optimizer: invalid choice"),
    ("train-comm-timeout", ["train", "--comm-timeout", "-1"], "--comm-timeout must be positive"),
    ("train-num-workers", ["train", "--num-workers", "x"], "--num-workers must be a whole"),
    ("ablate-device", ["ablate", "digits-cnn", "--device", "tpu"], "unknown --device 'tpu'"),
    ("scaling-device", ["scaling", "digits-cnn", "--device", "tpu"], "unknown --device 'tpu'"),
    ("profile-device", ["profile", "mnist-cnn", "--device", "tpu"], "unknown --device 'tpu'"),
    ("ops-device", ["ops", "mnist-cnn", "--device", "tpu"], "unknown --device 'tpu'"),
    ("roofline-device", ["roofline", "--device", "tpu"], "unknown --device 'tpu'"),
    ("profile-optimization", ["profile", "mnist-cnn", "--optimization", "fast"],
     "--optimization must be one of disabled, basic, extended, all"),
    ("verify-optimization", ["verify", "a.onnx", "b.onnx", "--ort-optimization", "fast"],
     "--ort-optimization must be one of disabled, basic, extended, all"),
    # a command whose -o is one kind of file refuses a name whose extension says a format
    # (-o FILE.csv means CSV on every command)
    ("activations-o-csv", ["activations", "mnist-cnn", "-o", "a.csv"],
     "-o a.csv: activations writes arrays (.npz), and .csv names another format"),
    ("report-o-json", ["report", "saved.json", "-o", "page.json"],
     "-o page.json: report writes an HTML page (.html, .htm), and .json names"),
    ("rewrite-o-txt", ["rewrite", "tile-linear", "m.onnx", "-o", "out.txt"],
     "-o out.txt: rewrite writes an ONNX graph (.onnx), and .txt names another format"),
    # a command that writes only some formats refuses another before reading anything
    ("diff-o-png", ["diff", "base.json", "new.json", "-o", "d.png"],
     "diff writes table, json, csv, html, md; not png"),
    ("compare-o-png", ["compare", "mnist-cnn", "mnist-cnn", "-o", "c.png"],
     "compare writes table, json, csv, html; not png"),
]


@pytest.mark.parametrize("argv,message", [c[1:] for c in BAD_FLAGS],
                         ids=[c[0] for c in BAD_FLAGS])
def test_a_bad_value_is_one_line_naming_the_flag(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*argv)
    assert code == 2
    assert err.count("\n") == 1 and message in err, err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_device_is_declared_once():
    helps = set()
    for sub in _subparsers().values():
        for action in sub._actions:
            if "--device" in action.option_strings:
                helps.add((action.help, action.default))
    assert helps == {(values.DEVICE_HELP, "cpu")}


# (command, its --format choices): --format, -o and --width declared by one helper
FORMAT_CHOICES = [("diff", ("table", "json", "csv", "html", "md")),
                  ("compare", ("table", "json", "csv", "html")),
                  ("analyze", ("table", "json", "csv", "html", "png")),
                  ("run", ("table", "json", "csv", "html", "png"))]


@pytest.mark.parametrize("command,formats", FORMAT_CHOICES, ids=[c[0] for c in FORMAT_CHOICES])
def test_format_output_and_width_are_declared_once(command, formats):
    actions = {a.dest: a for a in _subparsers()[command]._actions}
    assert tuple(actions["format"].choices) == formats and actions["format"].default is None
    assert actions["output"].option_strings == ["-o", "--output"]
    assert actions["output"].help == "write here (atomically) instead of standard output"
    assert actions["width"].help.startswith("table width in characters")
    with pytest.raises(argparse.ArgumentTypeError, match="must be at least 40"):
        actions["width"].type("1")


def test_kernels_and_nvtx_are_declared_once():
    subs = _subparsers()
    for command in ("profile", "run"):
        actions = {a.dest: a for a in subs[command]._actions}
        assert actions["kernels"].option_strings == ["--kernels"]
        assert actions["nvtx"].option_strings == ["--nvtx"]
        assert actions["kernels"].default is False and actions["nvtx"].default is False
        assert subs[command].parse_known_args(["--kernels", "--nvtx", "m"])[0].nvtx is True


def _subparsers():
    parser = build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices


# (id, API call or command line, the level it means): one vocabulary, old spellings kept
@pytest.mark.parametrize("word,level", [("disabled", "disabled"), ("disable", "disabled"),
                                        ("basic", "basic"), ("extended", "extended"),
                                        ("all", "all")])
def test_ort_levels_one_vocabulary_with_aliases(word, level):
    assert values.ort_level(word, "optimization") == level
    subs = _subparsers()
    assert subs["profile"].parse_args(["m.onnx", "--optimization", word]).optimization == level
    verify = subs["verify"].parse_args(["a.onnx", "b.onnx", "--ort-optimization", word])
    assert verify.optimization == level  # the dest is VerifySettings.optimization


def test_ort_levels_map_to_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    from layerscope.analysis.ort_profile import graph_level

    G = ort.GraphOptimizationLevel
    assert [graph_level(w) for w in ("disable", *values.ORT_LEVELS)] == [
        G.ORT_DISABLE_ALL, G.ORT_DISABLE_ALL, G.ORT_ENABLE_BASIC, G.ORT_ENABLE_EXTENDED,
        G.ORT_ENABLE_ALL]


SCRIPT = textwrap.dedent("""\
    import torch
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
    """)


def _saved(tmp):
    path = tmp / "saved.json"
    assert run_cli("analyze", "mnist-cnn", "-o", str(path))[0] == 0
    return [str(path)]


def _script(tmp):
    (tmp / "s.py").write_text(SCRIPT)
    return [str(tmp / "s.py")]


# (command, its words before -o, extra words after -o); every command that writes a result
# (-o of activations, export, report and rewrite is an arrays, ONNX or HTML file)
WRITES_A_RESULT = [
    ("analyze", lambda t: ["analyze", "mnist-cnn"], []),
    ("profile", lambda t: ["profile", "mnist-cnn", "--runs", "2", "--warmup", "0",
                           "--no-roofline", "-q"], []),
    ("ops", lambda t: ["ops", "mnist-cnn", "--runs", "1", "--warmup", "0"], []),
    ("sweep", lambda t: ["sweep", "mnist-cnn", "--runs", "2", "--warmup", "0"], []),
    ("llm", lambda t: ["llm", "gpt2"], []),
    ("plan", lambda t: ["plan", "gpt2", "--gpus", "1"], []),
    ("graph", lambda t: ["graph", "mnist-cnn"], []),
    ("compare", lambda t: ["compare", "mnist-cnn", "mnist-cnn"], []),
    ("render", lambda t: ["render", *_saved(t)], []),
    ("train", lambda t: ["train", "--synthetic", "--dry-run", "-q", "--out", str(t / "run")], []),
    ("ablate", lambda t: ["ablate", "digits-cnn", "--variants", "baseline", "--steps", "2",
                          "--warmup-steps", "0", "-q"], []),
    ("run", lambda t: ["run"], _script),
]


@pytest.mark.integration
@pytest.mark.parametrize("before,after", [c[1:] for c in WRITES_A_RESULT],
                         ids=[c[0] for c in WRITES_A_RESULT])
def test_o_csv_writes_csv(tmp_path, monkeypatch, before, after):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "result.csv"
    tail = after(tmp_path) if callable(after) else after
    code, _, err = run_cli(*before(tmp_path), "-o", str(out), *tail)
    assert code == 0, err
    text = out.read_text()
    assert not text.lstrip().startswith(("{", "[")), text[:80]
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) >= 2 and len(rows[0]) >= 2
    assert all(len(r) == len(rows[0]) for r in rows if r), text[:200]


def test_train_format_json_still_wins_over_the_extension(tmp_path):
    out = tmp_path / "r.csv"
    code, _, err = run_cli("train", "--synthetic", "--dry-run", "-q", "--out",
                           str(tmp_path / "run"), "--format", "json", "-o", str(out))
    assert code == 0, err
    assert json.loads(out.read_text())["kind"] == "train"


def test_o_of_its_own_kind_is_written(tmp_path):
    out = tmp_path / "a.npz"
    code, _, err = run_cli("activations", "mnist-cnn", "-o", str(out), "--format", "json")
    assert code == 0, err
    assert out.read_bytes()[:2] == b"PK"  # a zip archive: numpy's .npz
