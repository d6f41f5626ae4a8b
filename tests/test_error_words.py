"""Errors in the caller's words: the Python API names its own arguments (``gpus must be at
least 1``), the CLI the options that set them (``--gpus must be at least 1``). The API raises
UserError with ``arguments``; cli.main translates each through argparse's dest -> option table."""
from __future__ import annotations

import argparse
import re

import pytest

import layerscope
from layerscope.cli.common import in_flags
from layerscope.core.errors import UserError
from tests.helpers import run_cli

# (id, API call, fragment of the Python message, CLI argv, fragment of the CLI message);
# {tmp} is the test's folder
CASES = [
    ("plan-gpus", lambda t: layerscope.plan("gpt2", gpus=0), "gpus must be at least 1",
     ["plan", "gpt2", "--gpus", "0"], "--gpus must be at least 1"),
    ("plan-gpus-tp-pp", lambda t: layerscope.plan("gpt2", gpus=6, tp=4),
     "gpus 6 is not a multiple of tp x pp = 4",
     ["plan", "gpt2", "--gpus", "6", "--tp", "4"],
     "--gpus 6 is not a multiple of --tp x --pp = 4"),
    ("plan-micro-batch", lambda t: layerscope.plan("gpt2", gpus=1, micro_batch=0),
     "micro_batch must be at least 1",
     ["plan", "gpt2", "--gpus", "1", "--micro-batch", "0"], "--micro-batch must be at least 1"),
    ("plan-gpu-memory", lambda t: layerscope.plan("gpt2", gpus=1, gpu_memory="lots"),
     "gpu_memory must be a size such as 80GB",
     ["plan", "gpt2", "--gpus", "1", "--gpu-memory", "lots"], "--gpu-memory must be a size"),
    ("plan-strategy", lambda t: layerscope.plan("gpt2", gpus=1, strategy="zero9"),
     "unknown strategy 'zero9'", ["plan", "gpt2", "--gpus", "1", "--strategy", "zero9"],
     "--strategy"),
    ("llm-batch-size", lambda t: layerscope.llm("gpt2", batch_size=0),
     "batch_size must be at least 1",
     ["llm", "gpt2", "--batch-size", "0"], "--batch-size must be at least 1"),
    ("llm-seq-len-positions", lambda t: layerscope.llm("gpt2", seq_len=5000),
     "seq_len 5000 needs 5000 positions",
     ["llm", "gpt2", "--seq-len", "5000"], "--seq-len 5000 needs 5000 positions"),
    ("llm-kv-dtype", lambda t: layerscope.llm("gpt2", kv_dtype="int3"),
     "kv_dtype must be one of", ["llm", "gpt2", "--kv-dtype", "int3"], "--kv-dtype"),
    ("profile-runs", lambda t: layerscope.profile("mnist-cnn", runs=0),
     "runs must be at least 1",
     ["profile", "mnist-cnn", "--runs", "0"], "--runs must be at least 1"),
    ("profile-device", lambda t: layerscope.profile("mnist-cnn", device="tpu"),
     "unknown device 'tpu'", ["profile", "mnist-cnn", "--device", "tpu"],
     "unknown --device 'tpu'"),
    ("sweep-batch-sizes", lambda t: layerscope.sweep("mnist-cnn", batch_sizes=[0]),
     "batch_sizes item must be at least 1",
     ["sweep", "mnist-cnn", "--batch-sizes", "0"], "--batch-sizes each item must be at least 1"),
    ("train-batch-size", lambda t: layerscope.train(batch_size=0),
     "batch_size must be at least 1",
     ["train", "--batch-size", "0"], "--batch-size must be at least 1"),
    ("train-device", lambda t: layerscope.train(device="tpu", dry_run=True),
     "unknown device 'tpu'", ["train", "--device", "tpu", "--dry-run"],
     "unknown --device 'tpu'"),
    ("train-out-under-a-file", lambda t: layerscope.train(out=f"{t}/f/run", dry_run=True),
     "cannot create out ", ["train", "--dry-run", "--out", "{tmp}/f/run"], "cannot create --out "),
    ("analyze-inputs", lambda t: layerscope.analyze("mnist-cnn", inputs=["0x3"]),
     "malformed inputs '0x3'", ["analyze", "mnist-cnn", "--input", "0x3"],
     "malformed --input '0x3'"),
    ("analyze-batch-size-overflow", lambda t: layerscope.analyze("mnist-cnn", batch_size=2**62),
     "batch_size 4611686018427387904x1x28x28 has",
     ["analyze", "mnist-cnn", "--batch-size", str(2**62)],
     "--batch-size 4611686018427387904x1x28x28 has"),
    ("activations-layers", lambda t: layerscope.activations("mnist-cnn", layers="("),
     "layers '(' is not a valid regular expression",
     ["activations", "mnist-cnn", "--layers", "("], "--layers '(' is not a valid regular"),
    ("graph-nodes", lambda t: layerscope.graph("mnist-cnn", nodes="zzz"),
     "nodes 'zzz' matches no node", ["graph", "mnist-cnn", "--nodes", "zzz"],
     "--nodes 'zzz' matches no node"),
    ("ablate-warmup-steps", lambda t: layerscope.ablate("digits-cnn", steps=5, warmup_steps=5),
     "warmup_steps (5) must be below steps (5)",
     ["ablate", "digits-cnn", "--steps", "5", "--warmup-steps", "5"],
     "--warmup-steps (5) must be below --steps (5)"),
    ("scaling-device", lambda t: layerscope.scaling("digits-cnn", device="tpu"),
     "unknown device 'tpu'", ["scaling", "digits-cnn", "--device", "tpu"],
     "unknown --device 'tpu'"),
    ("train-data-dir", lambda t: layerscope.train(recipe="mnist-cnn", data_dir=f"{t}/none",
                                                  dry_run=True),
     "not found in data_dir ", ["train", "mnist-cnn", "--data-dir", "{tmp}/none", "--dry-run"],
     "not found in --data-dir "),
    ("llm-gpu", lambda t: layerscope.llm("gpt2", gpu="tpu-v5"), "gpu: unknown GPU 'tpu-v5'",
     ["llm", "gpt2", "--gpu", "tpu-v5"], "--gpu: unknown GPU 'tpu-v5'"),
    ("export-opset", lambda t: layerscope.export_onnx("mnist-cnn", f"{t}/m.onnx", opset=1),
     "opset must be at least", ["export", "mnist-cnn", "-o", "{tmp}/m.onnx", "--opset", "1"],
     "--opset must be at least"),
]
IDS = [c[0] for c in CASES]
FLAG = re.compile(r"(?<![\w-])--[a-z]")


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "f").write_text("a file, not a folder\n")
    return tmp_path


@pytest.mark.parametrize("call, python_words", [c[1:3] for c in CASES], ids=IDS)
def test_the_api_names_its_arguments(folder, call, python_words):
    with pytest.raises(UserError) as caught:
        call(folder)
    message = str(caught.value)
    assert python_words in message and "\n" not in message, message
    assert not FLAG.search(message), f"a CLI option in a Python error: {message}"


@pytest.mark.parametrize("argv, cli_words", [c[3:] for c in CASES], ids=IDS)
def test_the_cli_names_its_options(folder, argv, cli_words):
    code, out, err = run_cli(*(a.replace("{tmp}", str(folder)) for a in argv))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("layerscope: error: "), err
    assert cli_words in lines[0], lines[0]
    assert not re.search(r"(?<![\w-])[a-z]+_[a-z_]+ ", lines[0].split(": ", 2)[-1]), lines[0]


def _namespace(**flags: str) -> argparse.Namespace:
    return argparse.Namespace(option_flags=flags)


TRANSLATIONS = [  # (message, arguments, the command's dest -> option table, expected)
    ("gpus must be at least 1, got 0", ("gpus",), {"gpus": "--gpus"},
     "--gpus must be at least 1, got 0"),
    ("batch_size x seq_len: too many", ("batch_size", "seq_len"),
     {"batch_size": "--batch-size", "seq_len": "--seq-len"}, "--batch-size x --seq-len: too many"),
    ("malformed inputs '0x3': bad", ("inputs",), {"input": "--input"},
     "malformed --input '0x3': bad"),  # an API name that differs from the option's dest
    ("runs must be at least 1, got 'runs'", ("runs",), {"runs": "--runs"},
     "--runs must be at least 1, got 'runs'"),  # a quoted value is the user's, not a name
    ("warmup_steps (5) must be below steps (5)", ("warmup_steps", "steps"),
     {"warmup_steps": "--warmup-steps", "steps": "--steps"},
     "--warmup-steps (5) must be below --steps (5)"),
    ("seed must be 0 or more", ("seed",), {}, "seed must be 0 or more"),  # no such option
    ("device cuda: none here", (), {"device": "--device"}, "device cuda: none here"),
]


@pytest.mark.parametrize("message, arguments, flags, expected", TRANSLATIONS,
                         ids=[t[3][:30] for t in TRANSLATIONS])
def test_one_translation_from_argument_to_option(message, arguments, flags, expected):
    exc = UserError(message, arguments=arguments)
    assert str(in_flags(exc, _namespace(**flags))) == expected
    assert str(exc) == message  # the API's own error is left as it was


def test_the_parser_records_each_commands_options():
    from layerscope.cli.main import build_parser

    args = build_parser().parse_args(["plan", "gpt2", "--gpus", "2"])
    assert args.option_flags["micro_batch"] == "--micro-batch"
    assert args.option_flags["gpu_memory"] == "--gpu-memory"
    assert args.option_flags["output"] == "--output" and args.option_flags["debug"] == "--debug"


def test_a_ranks_error_reaches_the_launcher_in_the_cli_words(tmp_path, monkeypatch):
    """Under --nproc-per-node each rank fails inside the command (torchrun's error file), not
    in cli.main: the rank translates its own message."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("train", "digits-cnn", "--nproc-per-node", "2", "--device", "tpu",
                           "--dry-run", "--synthetic")
    assert code == 2 and "unknown --device 'tpu'" in err, err
