"""Hostile command lines: every bad value ends with exactly one stderr line, exit code 2, no
traceback; user code that calls sys.exit or warns is reported in one line each."""
from __future__ import annotations

import argparse
import textwrap

import pytest

from layerscope.cli.main import build_parser
from tests.helpers import run_cli
from tests.onnx_graphs import memory_graph, model, save, tensor

BIG = "99999999999999999999"  # > 2**63-1: OverflowError deep in torch before the fix
SEED_2_70 = str(2**70)  # 1180591620717411303424


def _one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("layerscope: error:"), err
    assert "Traceback" not in err


def _two_inputs(tmp_path) -> str:
    from onnx import helper

    m = model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
              [tensor("a", [1, 4]), tensor("b", [1, 4])], [tensor("y", [1, 4])])
    return save(m, tmp_path)


# (id, argv builder(tmp_path) -> argv, text the message must contain)
HOSTILE = [
    ("batch-size-int64", lambda t: ["analyze", "mnist-cnn", "--batch-size", BIG],
     "--batch-size must be at most 2**63-1"),
    ("input-dim-int64", lambda t: ["analyze", "mnist-cnn", "--input", f"{BIG}x1x28x28"],
     "at most 2**63-1"),
    ("input-numel-int64", lambda t: ["analyze", "mnist-cnn", "--input",
                                     "9999999999x999999999x28x28"],
     "elements, more than a tensor can hold"),
    ("input-5000-digits", lambda t: ["analyze", "mnist-cnn", "--input", "9" * 5000 + "x1"],
     "malformed --input"),
    ("onnx-named-dim-int64", lambda t: ["analyze", save(memory_graph(), t), "--input",
                                        f"X={BIG}x8"], "at most 2**63-1"),
    ("onnx-batch-int64", lambda t: ["analyze", save(memory_graph(), t), "--batch-size", BIG],
     "--batch-size must be at most"),
    ("onnx-extra-unnamed-input", lambda t: ["analyze", save(memory_graph(), t), "--input",
                                            "X=1x8", "--input", "1x8"],
     "already has a shape (its inputs: X)"),
    ("onnx-input-twice", lambda t: ["analyze", _two_inputs(t), "--input", "a=1x4",
                                    "--input", "a=1x4"], "given twice"),
    ("seed-2-70", lambda t: ["activations", "mnist-cnn", "--seed", SEED_2_70],
     "--seed must be at most 2**63-1"),
    ("verify-seed-2-70", lambda t: ["verify", "a.onnx", "b.onnx", "--seed", SEED_2_70],
     "--seed must be at most"),
    ("threads-negative-roofline", lambda t: ["roofline", "--threads", "-1"],
     "--threads must be at least 1"),
    ("threads-negative-train", lambda t: ["train", "--threads", "-1"],
     "--threads must be at least 1"),
    ("threads-list", lambda t: ["sweep", "mnist-cnn", "--threads", "1,-2"],
     "--threads each item must be at least 1"),
    ("batch-sizes-list", lambda t: ["sweep", "mnist-cnn", "--batch-sizes", "1,0,x"],
     "--batch-sizes each item must be at least 1"),
    ("batch-sizes-empty-item", lambda t: ["sweep", "mnist-cnn", "--batch-sizes", "1,,2"],
     "without empty items"),
    ("lr-nan", lambda t: ["train", "--lr", "nan"], "--lr must be a finite number"),
    ("lr-negative", lambda t: ["train", "--lr", "-1"], "--lr must be positive"),
    ("lr-huge", lambda t: ["train", "--lr", "1e20"], "--lr must be at most 10"),
    ("min-time-nan", lambda t: ["profile", "mnist-cnn", "--min-time", "nan"],
     "--min-time must be a finite number"),
    ("min-time-inf", lambda t: ["profile", "mnist-cnn", "--min-time", "inf"],
     "--min-time must be a finite number"),
    ("min-time-huge", lambda t: ["profile", "mnist-cnn", "--min-time", "1e9"],
     "--min-time must be at most 3600"),
    ("warmup-steps-negative", lambda t: ["train", "--warmup-steps", "-5"],
     "--warmup-steps must be 0 or more"),
    ("opset-999", lambda t: ["export", "mnist-cnn", "-o", str(t / "m.onnx"), "--opset", "999"],
     "exporter writes opsets 7 to"),
    ("width-negative", lambda t: ["analyze", "mnist-cnn", "--width", "-5"],
     "--width must be at least 40"),
    ("runs-0", lambda t: ["ops", "mnist-cnn", "--runs", "0"], "--runs must be at least 1"),
    ("top-0", lambda t: ["ops", "mnist-cnn", "--top", "0"], "--top must be at least 1"),
    ("depth-negative", lambda t: ["analyze", "mnist-cnn", "--depth", "-1"],
     "--depth must be 0 or more"),
    ("tile-0", lambda t: ["rewrite", "tile-linear", "a.onnx", "-o", "b.onnx", "--tile", "0"],
     "--tile must be at least 1"),
    ("linear-too-large", lambda t: ["rewrite", "linear-subgraph", "--m", "1", "--k", BIG[:12],
                                    "--n", "100000", "-o", str(t / "d")], "too large"),
    ("epochs-0", lambda t: ["train", "--epochs", "0"], "--epochs must be at least 1"),
    ("steps-negative", lambda t: ["train", "--steps", "-1"], "--steps must be at least 1"),
    ("index-negative", lambda t: ["predict", "run", "--index", "-1"], "--index must be 0 or more"),
    ("plot-size-0x5", lambda t: ["analyze", "mnist-cnn", "--plot-size", "0x5"], "--plot-size"),
    ("ablate-workers-negative", lambda t: ["ablate", "digits-cnn", "--variants", "workers=-1"],
     "N of workers=N must be 0 or more"),
    ("ablate-workers-int64", lambda t: ["ablate", "digits-cnn", "--variants", f"workers={BIG}"],
     "N of workers=N must be at most 1024"),
    ("empty-module-name", lambda t: ["analyze", ":factory"], "cannot import module ''"),
    ("no-command", lambda t: [], "give a command"),
    ("rewrite-no-pass", lambda t: ["rewrite"], "rewrite needs a pass"),
    ("gpu-memory-negative-looking", lambda t: ["plan", "llama-3-8b", "--gpu-memory", "-1GB"],
     "--gpu-memory expected a value, and -1GB reads as an option: give it as "
     "--gpu-memory=-1GB"),
    ("gpu-memory-attached-negative", lambda t: ["plan", "llama-3-8b", "--gpu-memory=-1GB"],
     "--gpu-memory must be a size such as 80GB"),
    ("loop-empty", lambda t: ["profile", "mnist-cnn", "--loop", ""], "unknown --loop ''"),
    ("profile-meta-parameters", lambda t: ["profile", _meta_model(t), "--runs", "1"],
     "weight is on the meta device (a shape without values), so the model cannot run"),
    ("ops-meta-parameters", lambda t: ["ops", _meta_model(t), "--runs", "1"],
     "weight is on the meta device"),
    ("factory-error-in-colour", lambda t: ["analyze", _coloured_error(t)],
     "the factory raised RuntimeError: Error: the exporter failed"),
]


def _meta_model(t) -> str:
    """A factory building its model on the meta device, as large-model code does."""
    (t / "meta.py").write_text("import torch\n\ndef build():\n"
                               "    with torch.device('meta'):\n"
                               "        return torch.nn.Linear(4, 4), (torch.zeros(1, 4),)\n")
    return f"{t / 'meta.py'}:build"


def test_api_profile_of_a_meta_model_is_a_user_error():
    import torch

    import layerscope
    from layerscope.core.errors import UserError

    with torch.device("meta"):
        m = torch.nn.Linear(4, 4)
    for call in (layerscope.profile, layerscope.ops):
        with pytest.raises(UserError, match="weight is on the meta device"):
            call(m, (1, 4), runs=1)
    assert m.weight.is_meta  # the caller's module is as it was


def _coloured_error(t) -> str:
    """A factory raising an error coloured like torch.onnx's exporter colours its own."""
    (t / "colour.py").write_text("def build():\n    raise RuntimeError("
                                 "'\\x1b[1m\\x1b[31mError:\\x1b[0m the exporter failed')\n")
    return f"{t / 'colour.py'}:build"


@pytest.mark.parametrize("build,expected", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_value_is_one_line_exit_2(tmp_path, build, expected):
    code, out, err = run_cli(*build(tmp_path))
    _one_line_error(code, err)
    assert expected in err, err
    assert "\x1b" not in err  # plain text, no terminal escape sequences
    assert out == ""


# ---------------------------------------------------------------- saved results
def _deep(path):
    path.write_text("[" * 100_000 + "]" * 100_000)


def _huge_int(path):
    path.write_text('{"kind": "analyze", "schema_version": "1.0", "x": ' + "9" * 5000 + "}")


def _wrong_kind(path):
    path.write_text('{"kind": "analyze", "schema_version": "1.0", "layers": 5}')


def _list(path):
    path.write_text("[1, 2]")


RESULTS = [("deeply-nested", _deep, "nested too deeply"),
           ("int-5000-digits", _huge_int, "an integer of 5000 digits"),
           ("wrong-kind", _wrong_kind, "not a valid analyze result"),
           ("not-an-object", _list, "not a layerscope result")]


@pytest.mark.parametrize("command", ["render", "report"])
@pytest.mark.parametrize("write,expected", [r[1:] for r in RESULTS], ids=[r[0] for r in RESULTS])
def test_hostile_saved_result_is_one_line(tmp_path, command, write, expected):
    path = tmp_path / "r.json"
    write(path)
    code, out, err = run_cli(command, str(path))
    _one_line_error(code, err)
    assert expected in err, err


# ---------------------------------------------------------------- user code
USER_CODE = textwrap.dedent('''
    import logging
    import sys
    import warnings

    import torch
    import torch.nn as nn


    class M(nn.Module):
        def __init__(self, where):
            super().__init__()
            self.fc = nn.Linear(4, 2)
            self.where = where

        def forward(self, x):
            if self.where == "forward":
                sys.exit(3)
            if self.where == "warn":
                warnings.warn("first line of the warning\\nsecond line\\nthird line")
            return self.fc(x)


    def factory_exit():
        sys.exit(5)


    def factory_exit_0():
        sys.exit(0)


    def factory_raise():
        raise SystemExit


    def forward_exit():
        return M("forward"), (torch.randn(1, 4),)


    def warns():
        logging.getLogger("usermodel").warning("built %s\\nsecond line", "M")
        return M("warn"), (torch.randn(1, 4),)


    def interrupt():
        raise KeyboardInterrupt
''')


@pytest.fixture()
def user_file(tmp_path):
    path = tmp_path / "usermodel.py"
    path.write_text(USER_CODE)
    return str(path)


@pytest.mark.parametrize("command,factory,expected", [
    ("analyze", "factory_exit", "sys.exit(5) in usermodel.py:"),
    ("analyze", "factory_exit_0", "sys.exit(0) in usermodel.py:"),
    ("analyze", "factory_raise", "sys.exit(None) in usermodel.py:"),
    ("analyze", "forward_exit", "sys.exit(3) in usermodel.py:"),
    ("activations", "forward_exit", "sys.exit(3) in usermodel.py:"),
], ids=["factory-exit-5", "factory-exit-0", "raise-SystemExit", "forward-exit", "activations"])
def test_sys_exit_in_user_code_is_one_line_exit_2(user_file, command, factory, expected):
    code, out, err = run_cli(command, f"{user_file}:{factory}")
    _one_line_error(code, err)
    assert "the model's code called " + expected in err, err


def test_keyboard_interrupt_in_user_code_stays_130(user_file):
    code, _, err = run_cli("analyze", f"{user_file}:interrupt")
    assert code == 130 and err == "layerscope: interrupted\n"


def test_warning_from_the_model_is_one_line_and_the_models(user_file):
    """The model's warning and log record, one line each, as Python prints them (where they
    come from), never labelled as layerscope's: only a ``LayerscopeWarning`` is."""
    code, out, err = run_cli("analyze", f"{user_file}:warns")
    assert code == 0 and out
    line = next(i for i, text in enumerate(USER_CODE.splitlines(), 1) if "warnings.warn(" in text)
    assert err == ("WARNING:usermodel:built M\n"
                   f"{user_file}:{line}: UserWarning: first line of the warning\n"), err


def test_help_is_stdout_exit_0_and_bare_command_is_stderr_exit_2():
    code, out, err = run_cli("--help")
    assert code == 0 and "usage:" in out and err == ""
    code, out, err = run_cli()
    _one_line_error(code, err)
    assert out == ""


# ---------------------------------------------------------------- every numeric option
HOSTILE_VALUES = ["-5", "0", "nan", "inf", BIG, "abc"]
# (option, value) pairs a command legitimately accepts: zero where zero means something
ACCEPTED = {("--seed", "0"), ("--weight-seed", "0"), ("--depth", "0"), ("--warmup", "0"),
            ("--warmup-steps", "0"), ("--index", "0"), ("--num-workers", "0"),
            ("--node-rank", "0"),
            ("--rtol", "0"), ("--atol", "0"),
            ("--rtol", BIG), ("--atol", BIG)}  # a huge tolerance accepts any difference
# the smallest valid command line of each (sub)command, so the option under test is the
# only thing wrong
BASE = {
    "analyze": ["mnist-cnn"], "profile": ["mnist-cnn"], "ops": ["mnist-cnn"],
    "sweep": ["mnist-cnn"], "roofline": [], "train": [], "ablate": ["digits-cnn"],
    "predict": ["run"], "activations": ["mnist-cnn"], "models": [], "verify": ["a", "b"],
    "render": ["r.json"], "report": ["r.json"], "export": ["mnist-cnn", "-o", "m.onnx"],
    "compare": ["a", "b"], "diff": ["a.json", "b.json"],
    "rewrite tile-linear": ["a.onnx", "-o", "b.onnx"],
    "rewrite linear-subgraph": ["--m", "1", "--k", "1", "--n", "1", "-o", "d"],
    "env": [], "graph": ["mnist-cnn"], "rewrite fold-identity": ["a.onnx", "-o", "b.onnx"],
    "run": [],  # options only: everything after the script would be the script's
    "scaling": ["digits-cnn"],
    "llm": ["gpt2"], "plan": ["gpt2", "--gpus", "8"], "advise": ["r.json"],
    "memory": ["mnist-cnn"],
}


def _subparsers(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}".strip()
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield from _subparsers(sub, path)
                else:
                    yield path, sub


def _typed_options():
    for command, sub in _subparsers(build_parser()):
        for action in sub._actions:
            if action.type is not None and action.option_strings:
                yield command, action.option_strings[-1]


TYPED = sorted(_typed_options())


def test_every_command_has_a_base_command_line():
    assert {c for c, _ in _subparsers(build_parser())} == set(BASE)
    assert len(TYPED) > 40  # every numeric option of every command is typed


@pytest.mark.integration
@pytest.mark.parametrize("value", HOSTILE_VALUES)
@pytest.mark.parametrize("command,option", TYPED, ids=[f"{c}{o}" for c, o in TYPED])
def test_numeric_option_refuses_hostile_value(tmp_path, monkeypatch, command, option, value):
    monkeypatch.chdir(tmp_path)  # nothing the command might write lands in the worktree
    argv = command.split() + BASE[command] + [option, value]
    if (option, value) in ACCEPTED:
        build_parser().parse_args(argv)  # parses; running it is other tests' business
        return
    code, out, err = run_cli(*argv)
    _one_line_error(code, err)
    assert option in err, err


def test_unexpected_exception_is_one_line_and_debug_shows_it(monkeypatch):
    from layerscope.cli import models_cmd

    def broken(args):
        raise RuntimeError("first\nsecond")

    monkeypatch.setattr(models_cmd, "run", broken)
    code, out, err = run_cli("models")
    _one_line_error(code, err)
    assert "unexpected RuntimeError: first" in err
    with pytest.raises(RuntimeError):
        run_cli("--debug", "models")


def test_a_failed_command_prints_its_error_line_only(user_file, tmp_path):
    # the model warns, then the run fails: the warning is not shown, the error is the one line
    code, out, err = run_cli("analyze", f"{user_file}:warns", "--input", "1x5")
    _one_line_error(code, err)


# ------------------------------------------------------------------ patterns that backtrack

LONG = "a" * 5000 + "b"  # what (a+)+$ backtracks on for minutes with Python's re


def _long_named_onnx(t) -> str:
    from onnx import helper

    m = model([helper.make_node("Relu", ["x"], ["y"], name=LONG)], [tensor("x", [1, 4])],
              [tensor("y", [1, 4])])
    return save(m, t)


def _long_named_module(t) -> str:
    (t / "long.py").write_text(textwrap.dedent(f'''
        import torch.nn as nn

        def build():
            m = nn.Sequential()
            m.add_module("{LONG}", nn.Linear(4, 4))
            return m, (nn.init.zeros_(__import__("torch").empty(1, 4)),)
    '''))
    return f"{t / 'long.py'}:build"


PATTERNS = [
    ("graph-nodes", lambda t: ["graph", _long_named_onnx(t), "--nodes", "(a+)+$",
                               "-o", str(t / "g.json")], "--nodes '(a+)+$' takes too long"),
    ("activations-layers", lambda t: ["activations", _long_named_module(t), "--layers",
                                      "(a|aa)+"], "--layers '(a|aa)+' takes too long"),
    ("op-type-invalid", lambda t: ["analyze", _long_named_onnx(t), "--view", "ops",
                                   "--op-type", "("], "--op-type '(' is not a valid regular"),
]


@pytest.mark.integration
@pytest.mark.parametrize("build,expected", [p[1:] for p in PATTERNS], ids=[p[0] for p in PATTERNS])
def test_pattern_that_backtracks_is_one_line(tmp_path, build, expected):
    """In a subprocess with a time limit (the pattern ran for minutes before): one line that
    names the option and says to simplify the pattern; nothing written."""
    import os
    import subprocess
    import sys

    argv = build(tmp_path)
    before = sorted(os.listdir(tmp_path))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-m", "layerscope", *argv], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": root})
    _one_line_error(run.returncode, run.stderr)
    assert expected in run.stderr, run.stderr
    assert "simplify the pattern" in run.stderr or "not a valid" in run.stderr
    assert sorted(os.listdir(tmp_path)) == before


def test_a_huge_layer_name_is_cut_in_the_terminal_table(tmp_path):
    """A layer named with a megabyte took the table's whole width (every other column cut to
    '…') and grew with the name; the terminal table cuts it, JSON keeps it whole."""
    import json

    from onnx import helper

    from layerscope.views.report import NAME_CHARS

    name = "n" * 1_000_000
    graph = save(model([helper.make_node("Relu", ["x"], ["y"], name=name)],
                       [tensor("x", [1, 4])], [tensor("y", [1, 4])]), tmp_path)
    code, out, err = run_cli("analyze", graph, "--width", "160")
    assert code == 0, err
    row = next(line for line in out.splitlines() if "Relu" in line)
    assert "n" * (NAME_CHARS - 1) + "…" in row and "n" * NAME_CHARS not in row
    assert max(len(line) for line in out.splitlines()) <= 160
    code, out, err = run_cli("analyze", graph, "--format", "json")
    assert [r["name"] for r in json.loads(out)["layers"]] == [name]


# ---------------------------------------------------------------- --fail-if, parsed linearly
SPACES = " " * 3000
# (id, the expression, the exit code, what stderr says)
FAIL_IF = [
    ("3000-spaces", SPACES, 2, "--fail-if '     "),
    ("spaces-before-the-operator", "step" + SPACES + ">", 2, "(3005 characters): expected"),
    ("unicode-spaces", "\u2003" * 3000 + "x", 2, "expected WHAT>+N%"),
    ("spaces-around-a-good-one", SPACES + "end_to_end >" + SPACES + "+5%" + SPACES, 0, ""),
    ("long-pattern", "layer:" + "a" * 100_000 + ">+5%", 0, ""),
]


@pytest.mark.integration
@pytest.mark.parametrize("text,code,expected", [c[1:] for c in FAIL_IF],
                         ids=[c[0] for c in FAIL_IF])
def test_fail_if_of_any_length_is_answered(tmp_path, text, code, expected):
    """In a subprocess with a time limit: the regular expression backtracked cubically over
    whitespace (3,000 spaces: no answer in 30 s); a malformed one is one line, exit 2."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = os.path.join(root, "tests", "data", "profile_0.4.json")
    run = subprocess.run([sys.executable, "-m", "layerscope", "diff", result, result,
                          "--fail-if", text], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": root})
    if code:
        _one_line_error(run.returncode, run.stderr)
        assert expected in run.stderr and len(run.stderr) < 400, run.stderr
    else:
        assert run.returncode == 0, run.stderr


def test_fail_if_runs_its_one_pattern_on_the_number_alone(monkeypatch):
    """The parse is string operations, linear in the expression; the only regular expression
    it runs sees the number (a few characters), never the whitespace around it."""
    from layerscope.analysis.diff import gate
    from layerscope.core.errors import UserError

    seen = []
    number = gate._NUMBER

    class Spy:
        def fullmatch(self, text):
            seen.append(text)
            return number.fullmatch(text)

    monkeypatch.setattr(gate, "_NUMBER", Spy())
    check = gate.parse_check(SPACES + "layer:*.attn" + SPACES + ">" + SPACES + "+20" + SPACES
                             + "%" + SPACES)
    assert (check.level, check.glob, check.op, check.threshold) == ("layer", "*.attn", ">", 0.2)
    assert seen == ["+20"]
    with pytest.raises(UserError, match="expected WHAT"):
        gate.parse_check(SPACES * 10)
    assert seen == ["+20"]
