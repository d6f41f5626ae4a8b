"""Results saved by layerscope 0.1 (tests/data/*_0.1.json, never regenerated) still load,
write back byte for byte and render: the guard for every future change of the result records.

analyze_0.1.json and profile_0.1.json were written by `layerscope analyze mnist-cnn` and
`layerscope profile mnist-cnn --runs 5 --backward`; the others are tests/sample_results.py
objects' to_dict() as 0.1 wrote them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerscope.core.results import KINDS, read_result
from layerscope.schema import errors
from tests.helpers import run_cli

DATA = Path(__file__).parent / "data"
FILES = sorted(DATA.glob("*_0.1.json"))


def test_every_kind_has_a_saved_file():
    assert sorted(p.name.split("_")[0] for p in FILES) == sorted(KINDS) and len(FILES) > 0


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_saved_result_loads_validates_and_writes_back_the_same_json(path):
    text = path.read_text(encoding="utf-8")
    d = json.loads(text)
    assert errors(d) == []
    result = read_result(str(path))
    assert result.kind == d["kind"]
    # the typed records write exactly the keys, order and values 0.1 wrote
    assert json.dumps(result.to_dict(), indent=2) == text.rstrip("\n")


@pytest.mark.parametrize("fmt", ["table", "html"])
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_saved_result_renders(path, fmt, tmp_path):
    out = tmp_path / f"out.{fmt}"
    code, _, err = run_cli("render", str(path), "--format", fmt, "-o", str(out))
    assert code == 0, err
    assert out.stat().st_size > 0
