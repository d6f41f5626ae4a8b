"""Hostile inputs to run (scripts, distributed options, watch), llm, plan and analyze --seq-len
(configs, presets, sizes too large for a tensor): each one ends with exactly one stderr line
naming what was wrong, exit code 2, no traceback, and nothing of the script's run (a script that
cannot start has no report either)."""
from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli

BIG = 2**62  # 4611686018427387904: an int64, but 8 bytes per token id overflow torch's size


def _one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("layerscope: error:"), err
    assert "Traceback" not in err and "unexpected" not in err, err


# ---------------------------------------------------------------- layerscope run: cannot start
def _write(name: str, content: bytes):
    def make(tmp_path):
        (tmp_path / name).write_bytes(content)
        return [name]
    return make


def _folder(tmp_path):
    (tmp_path / "scripts").mkdir()
    return ["scripts"]


def _package_without_main(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    return ["-m", "pkg"]


# (id, argv after "run" built in tmp_path, what the line says); before the fix each of these
# printed a traceback (or ran nothing) and then a report of 0 steps, exit 1
CANNOT_START = [
    ("syntax-error", _write("syn.py", b"def f(:\n"), "syn.py line 1: invalid syntax"),
    ("null-bytes", _write("nul.py", b"x = 1\x00\n"), "null bytes"),
    ("not-utf8", _write("enc.py", b"\xff\xfe bad\n"), "enc.py line 1"),
    ("binary-onnx-file", _write("model.onnx", b"\x08\x07\x12\x00\x00\xff"), "model.onnx"),
    ("folder", _folder, "scripts is a folder: give the path of a Python file"),
    ("no-such-module", lambda t: ["-m", "no.such.module"], "no module named 'no.such.module'"),
    ("empty-module-name", lambda t: ["-m", ""], "no module named ''"),
    ("package-without-main", _package_without_main, "package without __main__.py"),
]


@pytest.mark.parametrize("build,expected", [CANNOT_START[0][1:], CANNOT_START[5][1:]],
                         ids=[CANNOT_START[0][0], CANNOT_START[5][0]])
def test_run_of_several_processes_that_cannot_start_is_one_line(tmp_path, monkeypatch, build,
                                                                 expected):
    # before: torchrun started every rank, each printed the error, then "rank 1 failed"
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("run", "--nproc-per-node", "2", *build(tmp_path))
    _one_line_error(code, err)
    assert expected in err, err


def test_run_png_to_standard_output_is_refused(tmp_path, monkeypatch):
    # standard output is the script's own: before, the PNG bytes were mixed into it
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text("print('hello')\n")
    code, out, err = run_cli("run", "-o", "-", "--format", "png", "s.py")
    _one_line_error(code, err)
    assert "give -o FILE.png" in err and out == ""


@pytest.mark.parametrize("build,expected", [c[1:] for c in CANNOT_START],
                         ids=[c[0] for c in CANNOT_START])
def test_run_of_a_script_that_cannot_start_is_one_line(tmp_path, monkeypatch, build, expected):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("run", "-o", "r.json", *build(tmp_path))
    _one_line_error(code, err)
    assert expected in err, err
    assert out == "" and not (tmp_path / "r.json").exists()  # no report of a run that never was


def test_run_of_a_script_that_raises_usererror_keeps_its_traceback(tmp_path, monkeypatch):
    # the script's own failure (here through layerscope's API) stays the script's: traceback
    # and exit 1, as for any exception the script raises; no step was done, so one line says
    # there is no report (not a zero table blaming the loop)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text("from layerscope.errors import UserError\n"
                                   "raise UserError('from the script')\n")
    code, _, err = run_cli("run", "--format", "json", "s.py")
    assert code == 1 and "Traceback" in err and "from the script" in err, err
    assert err.endswith("layerscope: no training step was completed before the script ended "
                        "with UserError: from the script: no report\n"), err
    assert '"steps"' not in err


# ---------------------------------------------------------------- hf: configs
TINY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}

# (id, changes to the tiny llama config, what the line says); before the fix: an
# "unexpected ValueError", a division by zero, a negative dimension naming a scratch file, or
# (0 layers) a report of a model without blocks
BAD_CONFIGS = [
    ("hidden-size-text", {"hidden_size": "abc"}, "hidden_size must be a whole number"),
    ("hidden-size-float", {"hidden_size": 64.5}, "hidden_size must be a whole number"),
    ("hidden-size-negative", {"hidden_size": -64}, "hidden_size must be at least 1"),
    ("hidden-size-bool", {"hidden_size": True}, "hidden_size must be a whole number"),
    ("zero-layers", {"num_hidden_layers": 0}, "num_hidden_layers must be at least 1"),
    ("zero-heads", {"num_attention_heads": 0}, "num_attention_heads must be at least 1"),
    ("heads-not-dividing-hidden", {"num_attention_heads": 3}, "not a multiple of"),
    ("kv-heads-not-grouping", {"num_key_value_heads": 3}, "num_key_value_heads 3"),
    ("vocab-null", {"vocab_size": None}, "vocab_size must be a whole number"),
    ("top-k-over-experts", {"num_local_experts": 2, "num_experts_per_tok": 3},
     "num_experts_per_tok 3 is more than the 2 experts"),
    ("rope-theta-negative", {"rope_theta": -1.0}, "rope_theta must be positive"),
    ("gpt2-zero-layers", {"model_type": "gpt2", "n_embd": 64, "n_layer": 0, "n_head": 4},
     "n_layer must be at least 1"),
]


@pytest.mark.parametrize("command", ["llm", "plan"])
@pytest.mark.parametrize("changes,expected", [b[1:] for b in BAD_CONFIGS],
                         ids=[b[0] for b in BAD_CONFIGS])
def test_bad_hf_config_is_one_line_naming_the_file_and_key(tmp_path, command, changes, expected):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, **changes}))
    extra = ["--gpus", "1"] if command == "plan" else []
    code, out, err = run_cli(command, f"hf:{path}", *extra)
    _one_line_error(code, err)
    assert f"hf:{path}: " in err and expected in err, err


# ---------------------------------------------------------------- sizes too large to trace
# (id, argv, what the line says): int64 values whose (B, S) token batch (or its widest tensor)
# is more bytes than torch can describe; before: "unexpected RuntimeError: Storage size
# calculation overflowed" or "CausalLM rejected input"
TOO_LARGE = [
    ("llm-seq-len", ["llm", "llama-3-8b", "--seq-len", str(BIG)], "--batch-size x --seq-len"),
    ("llm-seq-len-2-52", ["llm", "llama-3-8b", "--seq-len", str(2**52)],
     "--batch-size x --seq-len"),
    ("llm-context", ["llm", "llama-3-8b", "--context", str(BIG)], "--context"),
    ("llm-batch-size", ["llm", "llama-3-8b", "--batch-size", str(BIG)], "--batch-size"),
    ("plan-micro-batch", ["plan", "llama-3-8b", "--gpus", "8", "--micro-batch", str(BIG)],
     "--micro-batch x --seq-len"),
    ("plan-seq-len", ["plan", "llama-3-8b", "--gpus", "8", "--seq-len", str(2**52)],
     "--micro-batch x --seq-len"),
    ("analyze-seq-len", ["analyze", "llama-3-8b", "--seq-len", str(BIG)],
     "--seq-len 1x4611686018427387904 of 8-byte values"),
    ("analyze-input-bytes", ["analyze", "mnist-cnn", "--input", f"{2**61}x1"],
     "of 4-byte values is 9.22e+18 bytes"),
]


@pytest.mark.parametrize("argv,expected", [t[1:] for t in TOO_LARGE], ids=[t[0] for t in TOO_LARGE])
def test_sizes_too_large_for_a_tensor_are_one_line(argv, expected):
    code, out, err = run_cli(*argv)
    _one_line_error(code, err)
    assert expected in err, err
    assert out == ""


@pytest.mark.integration
def test_large_but_traceable_sizes_stay_exact_ints():
    # 1000 sequences x 2**34 tokens: logits of 1000 x 2**34 x 128256 fp32 fit an int64 of bytes
    # (2**34 x 1000 x 128256 x 4 = 8.8e18 < 9.2e18); KV cache = 131072 B/token (2 x 32 layers
    # x 8 kv heads x 128 x 2 bytes) x 1000 x 2**34 tokens, exact
    code, out, err = run_cli("llm", "llama-3-8b", "--seq-len", str(2**34), "--batch-size",
                             "1000", "--format", "json")
    assert code == 0, err
    kv = json.loads(out)["kv_cache"]
    assert kv["bytes_per_token"] == 131072
    assert kv["bytes_total"] == 131072 * 1000 * 2**34


def test_model_that_rejects_the_sequence_is_one_line_in_plan(tmp_path):
    # BERT's learned position table has 512 rows (transformers' default): 2048 tokens do not fit;
    # plan's activation measurement ran outside analyze and said "unexpected RuntimeError"
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bert", "hidden_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 2,
                                "intermediate_size": 128, "vocab_size": 100}))
    code, out, err = run_cli("plan", f"hf:{path}", "--gpus", "1", "--seq-len", "2048")
    _one_line_error(code, err)
    assert "--seq-len 2048 is longer than" in err and "table (512 positions)" in err, err


# ---------------------------------------------------------------- several processes
# (id, argv, what the line says); before: "unexpected ValueError: The port number ..." from
# torchrun, or a node rank beyond the nodes handed to torchrun
DISTRIBUTED = [
    ("port-too-large", ["train", "--nnodes", "2", "--rdzv-endpoint", "node0:99999"],
     "the port must be a whole number from 1 to 65535"),
    ("port-0", ["train", "--nnodes", "2", "--rdzv-endpoint", "node0:0"], "from 1 to 65535"),
    ("port-text", ["train", "--nnodes", "2", "--rdzv-endpoint", "node0:abc"], "from 1 to 65535"),
    ("no-host", ["train", "--nnodes", "2", "--rdzv-endpoint=:29500"], "must be HOST:PORT"),
    ("no-colon", ["train", "--nnodes", "2", "--rdzv-endpoint", "garbage"], "must be HOST:PORT"),
    ("node-rank-beyond-nodes", ["train", "--nnodes", "2", "--node-rank", "5",
                                "--rdzv-endpoint", "node0:29500", "--nproc-per-node", "1"],
     "--node-rank 5 must be below --nnodes 2"),
]


@pytest.mark.parametrize("argv,expected", [d[1:] for d in DISTRIBUTED],
                         ids=[d[0] for d in DISTRIBUTED])
def test_bad_distributed_options_are_one_line(argv, expected):
    code, out, err = run_cli(*argv)
    _one_line_error(code, err)
    assert expected in err, err


@pytest.mark.parametrize("text,expected", [("node0:29500", "node0:29500"),
                                           (" [::1]:29500 ", "[::1]:29500")])
def test_endpoint_parser_accepts_host_and_port(text, expected):
    from layerscope.core.values import endpoint

    assert endpoint(text, "--rdzv-endpoint") == expected


# ---------------------------------------------------------------- saved train results
@pytest.mark.parametrize("ops", ["x", -1, True, {"model": "m"}],
                         ids=["text", "number", "bool", "object-missing-keys"])
def test_saved_train_result_with_malformed_ops_is_one_line(tmp_path, ops):
    # before: render built the OpTable only while drawing: "unexpected TypeError"; the typed
    # train record's schema now refuses most of them before they are read
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "data" / "train_0.1.json").read_text())
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**data, "ops": ops}))
    code, out, err = run_cli("render", str(path))
    _one_line_error(code, err)
    assert "malformed train result" in err or "not a valid train result: ops" in err, err


@pytest.mark.parametrize("command", ["llm", "plan"])
@pytest.mark.parametrize("name,close", [("lama-3-8b", "did you mean llama-3-8b"),
                                        ("gpt-2", "did you mean gpt2?"),
                                        ("mixtral", "did you mean mixtral-8x7b?")])
def test_misspelt_llm_preset_suggests_the_close_ones(command, name, close):
    code, _, err = run_cli(command, name, *(["--gpus", "8"] if command == "plan" else []))
    _one_line_error(code, err)
    assert close in err, err


# ---------------------------------------------------------------- layerscope.watch()
@pytest.mark.parametrize("kwargs,expected", [
    ({"steps": -1}, "steps must be at least 1"),
    ({"steps": 0}, "steps must be at least 1"),
    ({"warmup_steps": "abc"}, "warmup_steps must be a whole number"),
    ({"model": "notamodel"}, "must be a torch.nn.Module, got str"),
    ({"optimizer": 0.1}, "must be a torch.optim.Optimizer, got float"),
], ids=["steps-negative", "steps-0", "warmup-text", "model-str", "optimizer-float"])
def test_watch_refuses_bad_arguments_at_once(kwargs, expected):
    # before: accepted, and the loop ran unwatched or with a limit that never fired
    import layerscope
    from layerscope.errors import UserError

    with pytest.raises(UserError, match=expected):
        layerscope.watch(**kwargs)


# ---------------------------------------------------------------- outputs checked before work
# (id, argv): before, the training run / scaling sweep / analysis ran to the end and only then
# said the folder of -o was missing (train had written its run folder by then)
LATE_OUTPUTS = [
    ("train-o", ["train", "--synthetic", "--steps", "1", "-o", "nodir/r.json"]),
    ("train-html", ["train", "--synthetic", "--steps", "1", "--html", "nodir/r.html"]),
    ("scaling-o", ["scaling", "digits-cnn", "--synthetic", "--nproc", "1", "-o", "nodir/s.json"]),
    ("llm-plot", ["llm", "gpt2", "--plot", "nodir/p.png"]),
    ("plan-o", ["plan", "gpt2", "--gpus", "1", "-o", "nodir/p.json"]),
    ("scaling-png-without-o", ["scaling", "digits-cnn", "--synthetic", "--format", "png"]),
]


@pytest.mark.parametrize("argv", [a[1] for a in LATE_OUTPUTS], ids=[a[0] for a in LATE_OUTPUTS])
def test_outputs_are_checked_before_any_work(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*argv)
    _one_line_error(code, err)
    assert "no such directory" in err or "give -o FILE.png" in err, err
    assert list(tmp_path.iterdir()) == []  # no run folder, nothing written
