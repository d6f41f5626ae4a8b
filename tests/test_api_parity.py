"""Every API function accepts exactly what its CLI command accepts (both ask frontends.detect).

For each subcommand and each model form, the CLI and the API either both succeed with the same
key figures (parameters, MACs, number of rows) or both fail with the same one-line message.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings

import models
import onnx
import onnx_graphs as g
import pytest
import torch
from helpers import run_cli

import layerscope
from layerscope.core.errors import UserError
from layerscope.renderers import graph_out
from layerscope.rewrite.verify import verify as verify_api

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    """name -> (model reference, --input arguments, the API's inputs)."""
    d = tmp_path_factory.mktemp("forms")
    gemm = g.single("Gemm", [g.tensor("x", [2, 4]), "w", "b"], [2, 3],
                    [g.init("w", [3, 4]), g.init("b", [3])], transB=1)
    script = str(d / "tiny.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated, still supported
        torch.jit.save(torch.jit.script(models.TinyNet()), script)
    run = d / "run"
    code, _, err = run_cli("train", "digits-cnn", "--steps", "1", "--threads", "1", "--out",
                           str(run))
    assert code == 0, err
    return {
        "builtin": ("mnist-cnn", [], None),
        "factory": (f"{TESTS}/models.py:tiny_with_example", [], None),
        "torchscript": (script, ["--input", "1x3x8x8"], (1, 3, 8, 8)),
        "onnx": (g.save(gemm, d), [], None),
        "run-folder": (str(run), [], None),
    }


def _report(d):  # analyze, profile
    return d["totals"]["params"], d["totals"]["macs"], len(d["layers"])


def _graph_cli(text):  # graph prints "MODEL: N nodes, M edges; ..." first
    return tuple(map(int, re.search(r"(\d+) nodes, (\d+) edges", text).groups()))


def _nodes(path):
    return len(onnx.load(path).graph.node)


# command -> (extra CLI arguments, the API call, key figures of the CLI's JSON, of the API's result)
COMMANDS = {
    "analyze": ([], lambda m, x, tmp: layerscope.analyze(m, x), _report, None),
    "profile": (["--runs", "2", "--warmup", "0", "--no-roofline"],
                lambda m, x, tmp: layerscope.profile(m, x, runs=2, warmup=0, roofline=False),
                _report, None),
    "ops": (["--runs", "2", "--warmup", "0"],
            lambda m, x, tmp: layerscope.ops(m, x, runs=2, warmup=0),
            lambda d: len(d["rows"]) > 0, None),
    "sweep": (["--batch-sizes", "1,2", "--runs", "2", "--warmup", "0"],
              lambda m, x, tmp: layerscope.sweep(m, x, batch_sizes=[1, 2], runs=2, warmup=0),
              lambda d: (len(d["cells"]), [c.get("error") is None for c in d["cells"]]), None),
    "activations": ([], lambda m, x, tmp: layerscope.activations(m, x),
                    lambda d: len(d["layers"]), None),
    "compare": ([], None, lambda d: len(d["rows"]), None),
    "graph": ([], lambda m, x, tmp: layerscope.graph(m, x), _graph_cli,
              lambda r: _graph_cli(graph_out.to_text(r))),
    "export": ([], lambda m, x, tmp: layerscope.export_onnx(m, str(tmp / "api.onnx"), inputs=x),
               None, lambda r: _nodes(r.path)),
    "verify": ([], None, lambda d: d["ok"], None),
}
NO_JSON = {"graph", "export"}  # they print text; their key figures come from it or the file


def _api_call(command, ref, inputs, tmp, onnx_path):
    if command == "compare":
        return layerscope.compare(ref, ref, inputs)
    if command == "verify":
        return verify_api(ref, onnx_path, runs=2)
    return COMMANDS[command][1](ref, inputs, tmp)


def _cli_argv(command, ref, input_args, tmp, onnx_path):
    extra = COMMANDS[command][0]
    if command == "compare":
        return ["compare", ref, ref, *input_args, "--format", "json"]
    if command == "verify":
        return ["verify", ref, onnx_path, "--runs", "2", "--format", "json"]
    if command == "export":
        return ["export", ref, *input_args, "-o", str(tmp / "cli.onnx")]
    return [command, ref, *input_args, *extra] + ([] if command in NO_JSON else
                                                  ["--format", "json"])


def _cli_key(command, out, tmp):
    if command == "export":
        return _nodes(str(tmp / "cli.onnx"))
    if command == "graph":
        return _graph_cli(out)
    return COMMANDS[command][2](json.loads(out))


def _api_key(command, result):
    own = COMMANDS[command][3]
    if own is not None:
        return own(result)
    d = result.to_dict() if hasattr(result, "to_dict") else dataclasses.asdict(result)
    return COMMANDS[command][2](json.loads(json.dumps(d, default=str)))


@pytest.mark.integration
@pytest.mark.parametrize("form", ["builtin", "factory", "torchscript", "onnx", "run-folder"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_cli_and_api_accept_the_same_models(forms, tmp_path, command, form):
    ref, input_args, inputs = forms[form]
    onnx_path = forms["onnx"][0]
    code, out, err = run_cli(*_cli_argv(command, ref, input_args, tmp_path, onnx_path))
    try:
        result, message = _api_call(command, ref, inputs, tmp_path, onnx_path), None
    except UserError as exc:
        result, message = None, str(exc)
    if code == 0:
        assert message is None, f"the CLI succeeds, the API fails: {message}"
        assert _cli_key(command, out, tmp_path) == _api_key(command, result)
    else:
        assert code == 2 and err.count("\n") == 1, err
        assert message is not None, f"the CLI fails ({err.strip()}), the API succeeds"
        assert err.strip() == f"layerscope: error: {message}"


@pytest.mark.integration
def test_onnx_analyze_and_graph_run_without_torch(forms):
    """The ONNX path of the CLI never imports torch (``torch`` made unimportable here)."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from layerscope.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    for argv in (["analyze", forms["onnx"][0]], ["graph", forms["onnx"][0]]):
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                              text=True, env=env)
        assert done.returncode == 0, done.stderr


# analyze of an ONNX file through both doors, with options: (id, CLI flags, API arguments, and
# when both refuse: the phrases of the API's message that the CLI's names by its flags)
ONNX_OPTIONS = [
    ("named-input", ["--input", "x=3x8"], {"inputs": "x=3x8"}, None),
    ("batch-size", ["--batch-size", "5"], {"batch_size": 5}, None),
    ("input-and-batch-size", ["--input", "x=3x8", "--batch-size", "2"],
     {"inputs": "x=3x8", "batch_size": 2}, None),
    ("functions", ["--functions"], {"functions": True}, [(": functions", ": --functions")]),
    ("depth", ["--depth", "1"], {"depth": 1}, [(": depth", ": --depth")]),
    ("training", ["--mode", "training"], {"mode": "training"}, [("(no mode", "(no --mode")]),
    ("dtype", ["--dtype", "float16"], {"dtype": "float16"}, [(": dtype", ": --dtype")]),
    ("seq-len", ["--seq-len", "8"], {"seq_len": 8}, [("seq_len:", "--seq-len:"),
                                                     ("with inputs", "with --input")]),
]


@pytest.mark.parametrize("argv,kwargs,flags", [c[1:] for c in ONNX_OPTIONS],
                         ids=[c[0] for c in ONNX_OPTIONS])
def test_onnx_analyze_gives_the_cli_and_the_api_the_same_report(tmp_path, argv, kwargs, flags):
    """One router (``analysis/analyze.py``) for both: the same report for the same inputs, or the
    same refusal in each one's words."""
    m = g.single("MatMul", [g.tensor("x", ["batch", 8]), "w"], ["batch", 4], [g.init("w", [8, 4])])
    path = g.save(m, tmp_path)
    code, out, err = run_cli("analyze", path, *argv, "--format", "json")
    if flags is None:
        assert code == 0, err
        cli = json.loads(out)
        api = json.loads(json.dumps(layerscope.analyze(path, **kwargs).to_dict(), default=str))
        cli.pop("environment"), api.pop("environment")  # read at each call
        assert cli == api
        return
    with pytest.raises(UserError) as raised:
        layerscope.analyze(path, **kwargs)
    message = str(raised.value)
    for api_words, cli_words in flags:
        assert api_words in message
        message = message.replace(api_words, cli_words, 1)
    assert (code, err) == (2, f"layerscope: error: {message}\n")


def test_onnx_analyze_refuses_kwargs(tmp_path):
    """Keyword inputs mean nothing to an ONNX graph (its inputs are bound by name with inputs=);
    they used to be ignored without a word."""
    m = g.single("Relu", [g.tensor("x", [1, 4])], [1, 4])
    with pytest.raises(UserError, match=r"kwargs: an ONNX model's inputs are named in the graph"):
        layerscope.analyze(g.save(m, tmp_path), kwargs={"x": (1, 4)})


# the LLM commands take presets and hf: configs only (not the model forms above)
LLM_COMMANDS = {
    "llm": (["--seq-len", "64", "--gpu", "l4"],
            lambda: layerscope.llm("gpt2", seq_len=64, gpu="l4")),
    "plan": (["--gpus", "8", "--seq-len", "64", "--recompute", "selective"],
             lambda: layerscope.plan("gpt2", 8, seq_len=64, recompute="selective")),
}


@pytest.mark.parametrize("command", list(LLM_COMMANDS))
def test_llm_commands_match_the_api(command):
    extra, call = LLM_COMMANDS[command]
    code, out, err = run_cli(command, "gpt2", *extra, "--format", "json")
    assert code == 0, err
    assert json.loads(out) == json.loads(json.dumps(call().to_dict()))
