"""What a command loads at start-up: each case runs in a fresh interpreter and the test reads
``sys.modules`` afterwards (module sets, never times).

- ``layerscope --help`` (and ``--version``, a subcommand's ``--help``) loads none of the heavy
  libraries: parsing the command line needs none of them;
- the ONNX path (``layerscope.analyze("m.onnx")``, ``layerscope analyze m.onnx``) never loads
  torch: it runs where PyTorch is not installed;
- ``layerscope analyze mnist-cnn`` loads torch but none of the optional libraries (plotting,
  ONNX, the trainers, TensorBoard, scikit-learn, torchvision for a built-in CNN).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from onnx import helper

from tests import onnx_graphs as g

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


def loaded(code: str, **names) -> set[str]:
    """The top-level packages in ``sys.modules`` after running ``code`` in a fresh
    interpreter (``names`` bound as Python literals first)."""
    prelude = "".join(f"{k} = {v!r}\n" for k, v in names.items())
    tail = "import sys, json\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
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
