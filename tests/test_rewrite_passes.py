"""The rewrite pass registry and protocol (layerscope/rewrite/base.py, rewrite/__init__.py),
and the small passes registered beside tile-linear, checked numerically with onnxruntime."""
from __future__ import annotations

import subprocess
import sys

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from layerscope.errors import UserError  # noqa: E402
from layerscope.rewrite import PASSES, get_pass, register_pass  # noqa: E402
from layerscope.rewrite.base import PassInfo, PassResult  # noqa: E402
from layerscope.rewrite.linear import linear_model  # noqa: E402
from tests.helpers import run_cli  # noqa: E402


def test_registry_refuses_a_second_pass_under_a_taken_name():
    with pytest.raises(ValueError, match="already registered"):
        register_pass(PassInfo("tile-linear", "somewhere:else", "a second tile-linear"))
    assert PASSES["tile-linear"].target == "layerscope.rewrite.tile_linear:tile_linear"


def test_unknown_pass_is_a_user_error():
    with pytest.raises(UserError, match="unknown rewrite pass 'fuse-everything'"):
        get_pass("fuse-everything")


@pytest.mark.parametrize("name", sorted(PASSES))
def test_every_pass_follows_the_protocol(name):
    """Returns a PassResult that unpacks as (model, modified), never edits its input, and every
    pass has a subcommand."""
    model = linear_model(2, 130, 100)
    before = model.SerializeToString()
    result = PASSES[name](model)
    assert isinstance(result, PassResult)
    new, modified = result
    assert new is result.model and modified is result.changed is result.modified
    assert model.SerializeToString() == before
    code, _, err = run_cli("rewrite", name, "in.onnx")  # the subcommand exists, wants -o
    assert code == 2 and "-o/--output" in err, err


def test_public_tile_linear_works_whichever_import_came_first():
    # Importing the submodule rebinds layerscope.rewrite.tile_linear to the module; the call
    # used to recurse forever.
    code = ("import layerscope.rewrite.tile_linear, layerscope.rewrite as r\n"
            "from layerscope.rewrite.linear import linear_model\n"
            "m = linear_model(2, 130, 100)\n"
            "assert r.tile_linear(m, 64).changed and r.tile_linear(m, 64).nodes_after == 11\n"
            "import layerscope.rewrite as r2\n"
            "assert r2.PassResult.__name__ == 'PassResult'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
