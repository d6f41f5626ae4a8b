"""What a command loads at start-up: each case runs in a fresh interpreter and the test reads
``sys.modules`` afterwards (module sets, never times).

- ``layerscope --help`` (and ``--version``, a subcommand's ``--help``) loads none of the heavy
  libraries: parsing the command line needs none of them;
- the ONNX path (``layerscope.analyze("m.onnx")``, ``layerscope analyze m.onnx``) never loads
  torch: it runs where PyTorch is not installed; onnx is loaded only to read an ONNX file (not
  to render or diff a saved result);
- ``layerscope analyze mnist-cnn`` loads torch but none of the optional libraries (plotting,
  ONNX, the trainers, TensorBoard, scikit-learn, torchvision for a built-in CNN);
- no analysis that compiles nothing (``analyze``, ``memory``, ``llm``, ``plan``) loads
  ``torch._dynamo``, inductor or triton (dynamo costs about as much as ``import torch``), nothing
  of the stand-in that keeps them out outlives the analysis, and dynamo works afterwards.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from onnx import helper

from tests import onnx_graphs as g

pytestmark = pytest.mark.integration  # every test here starts a process or runs end to end

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEAVY = ("torch", "torchvision", "numpy", "matplotlib", "onnx", "onnxruntime", "onnxscript",
         "rich", "sklearn", "scipy", "jsonschema", "transformers", "lightning", "tensorboard",
         "grandalf")
OPTIONAL = ("torchvision", "matplotlib", "onnx", "onnxruntime", "onnxscript", "sklearn", "scipy",
            "jsonschema", "transformers", "lightning", "tensorboard", "grandalf")

CLI = ("import contextlib, io, sys\n"
       "from layerscope.cli.main import main\n"
       "with contextlib.redirect_stdout(io.StringIO()):\n"
       "    code = main(ARGV)\n"
       "assert code == 0, code\n")
API = ("import layerscope\n"
       "layerscope.analyze(MODEL)\n")


def loaded(code: str, whole: bool = False, **names) -> set[str]:
    """The top-level packages in ``sys.modules`` (``whole``: every module) after running
    ``code`` in a fresh interpreter (``names`` bound as Python literals first)."""
    prelude = "".join(f"{k} = {v!r}\n" for k, v in names.items())
    key = "m" if whole else "m.split('.')[0]"
    tail = f"import sys, json\nprint(json.dumps(sorted({{{key} for m in sys.modules}})))\n"
    done = subprocess.run([sys.executable, "-c", prelude + code + tail], capture_output=True,
                          text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    m = g.model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                 helper.make_node("Relu", ["h"], ["y"])],
                [g.tensor("x", [1, 8])], [g.tensor("y", [1, 4])], [g.init("w", [8, 4])])
    m.ir_version = 13  # what the installed onnxruntime reads
    return g.save(m, tmp_path_factory.mktemp("startup"))


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["analyze", "--help"],
                                  ["profile", "--help"]],
                         ids=["help", "version", "analyze-help", "profile-help"])
def test_help_loads_no_heavy_library(argv):
    code = CLI.replace("    code = main(ARGV)\n", "    try:\n        code = main(ARGV)\n"
                       "    except SystemExit as exc:\n        code = exc.code or 0\n")
    assert loaded(code, ARGV=argv) & set(HEAVY) == set()


@pytest.mark.parametrize("how", ["api", "cli"])
def test_onnx_analysis_loads_no_torch(onnx_path, how):
    found = (loaded(API, MODEL=onnx_path) if how == "api"
             else loaded(CLI, ARGV=["analyze", onnx_path]))
    assert "onnx" in found  # the ONNX path did run
    assert found & ({"torch"} | set(OPTIONAL) - {"onnx"}) == set()


@pytest.fixture(scope="module")
def onnx_result(onnx_path, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("saved") / "onnx.json")
    loaded(CLI, ARGV=["analyze", onnx_path, "-o", path])
    return path


@pytest.mark.parametrize("argv", [["render", "R"], ["diff", "R", "R"], ["render", "R", "--format",
                                                                         "csv"]],
                         ids=["render", "diff", "csv"])
def test_a_saved_onnx_result_is_read_without_onnx(onnx_result, argv):
    """onnx is imported only to read an ONNX file: its import costs about 0.7 s of CPU (its
    eager import of ml_dtypes), which reading a saved result does not need."""
    found = loaded(CLI, ARGV=[onnx_result if a == "R" else a for a in argv])
    assert found & {"onnx", "ml_dtypes", "onnxruntime", "torch"} == set()


def test_analyze_of_a_builtin_cnn_loads_no_optional_library():
    found = loaded(CLI, ARGV=["analyze", "mnist-cnn"])
    assert "torch" in found
    assert found & set(OPTIONAL) == set()


def test_onnx_report_records_torch_without_loading_it(onnx_path):
    """The ONNX report's environment names the installed torch (read from torch/version.py),
    the same version and CUDA build a loaded torch reports; what only a loaded torch knows
    (threads, GPUs) is None, not a guess."""
    code = ("import sys, json, layerscope\n"
            "env = layerscope.analyze(MODEL).environment\n"
            "assert 'torch' not in sys.modules\n"
            "import torch\n"
            "print(json.dumps([env, torch.__version__, torch.version.cuda]))\n")
    done = subprocess.run([sys.executable, "-c", f"MODEL = {onnx_path!r}\n" + code],
                          capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr
    env, version, cuda = json.loads(done.stdout)
    assert (env["torch"], env["cuda"]) == (version, cuda)
    assert env["torch_threads"] is None and env["cuda_available"] is None
    assert env["gpus"] == [] and env["cores"] == os.cpu_count()


COMPILERS = ("torch._dynamo", "torch._inductor", "triton")


@pytest.mark.parametrize("argv", [["analyze", "mnist-cnn"], ["analyze", "mnist-cnn", "--mode",
                                                             "training"],
                                  ["memory", "mnist-cnn"], ["llm", "gpt2"]],
                         ids=["analyze", "analyze-training", "memory", "llm"])
def test_analysis_loads_no_compiler(argv):
    found = loaded(CLI, whole=True, ARGV=argv)
    assert "torch._subclasses.fake_tensor" in found  # the fake run did run
    assert found & set(COMPILERS) == set()


def test_nothing_of_the_stand_in_outlives_the_analysis():
    """After the analysis: no ``torch._dynamo`` module or attribute, no cached disable wrapper on
    the functions torch wraps; then dynamo imports and compiles as usual, and an analysis with
    it loaded gives the same figures."""
    code = ("import sys, torch, layerscope\n"
            "from torch._subclasses.fake_tensor import FakeTensorMode\n"
            "from layerscope.analysis.capture.dispatch import CountingMode\n"
            "r = layerscope.analyze('mnist-cnn'); first = (r.totals, r.layers)\n"
            "assert 'torch._dynamo' not in sys.modules and '_dynamo' not in vars(torch)\n"
            "for mode in (FakeTensorMode, CountingMode):\n"
            "    raw = mode.__torch_dispatch__.__wrapped__\n"
            "    assert not hasattr(raw, '__dynamo_disable'), mode\n"
            "assert torch.compile(lambda x: x * 2, backend='eager')(torch.ones(2)).tolist() "
            "== [2, 2]\n"
            "import torch._dynamo\n"
            "assert type(torch._dynamo).__name__ == 'module' and torch._dynamo.config\n"
            "r = layerscope.analyze('mnist-cnn'); assert (r.totals, r.layers) == first\n")
    loaded(code)


def test_a_forward_that_reaches_dynamo_gets_the_real_one():
    """A model whose forward asks dynamo something during the analysis gets the real module
    (imported then), and the figures are those of the same model without that call."""
    code = ("import sys, torch, torch.nn as nn, layerscope\n"
            "class M(nn.Module):\n"
            "    def __init__(self, ask):\n"
            "        super().__init__(); self.fc = nn.Linear(8, 4); self.ask = ask\n"
            "    def forward(self, x):\n"
            "        if self.ask:\n"
            "            assert torch._dynamo.is_compiling() is False\n"
            "            assert 'torch._dynamo' in sys.modules\n"
            "        return torch.relu(self.fc(x))\n"
            "plain = layerscope.analyze(M(False), inputs=(2, 8))\n"
            "assert 'torch._dynamo' not in sys.modules\n"
            "asking = layerscope.analyze(M(True), inputs=(2, 8))\n"
            "assert asking.totals == plain.totals, (asking.totals, plain.totals)\n"
            "assert type(sys.modules['torch._dynamo']).__name__ == 'module'\n")
    loaded(code)
