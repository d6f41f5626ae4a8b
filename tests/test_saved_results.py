"""Results saved by every earlier release (tests/data/<kind>_<release>.json, never regenerated)
still load, validate against the current schema, write back byte for byte and render: the guard
for every future change of the result records.

The 0.1 files: analyze_0.1.json and profile_0.1.json were written by `layerscope analyze
mnist-cnn` and `layerscope profile mnist-cnn --runs 5 --backward`; the others are
tests/sample_results.py objects' to_dict() as 0.1 wrote them; llm, plan and scaling (kinds 0.1
did not have) are sample objects saved under the same name by the release that added them (0.3).

The 0.2, 0.3 and 0.4 files were written by the code of each release (0.2.0: ba9dc90, 0.3.0:
81fd7ca, 0.4.0: a95baf2) on CPU, each kind the release could write, by these commands
(`compare` joins analyze_<R>.json with a bfloat16 analysis; activations is the JSON printed
beside the .npz):

    analyze mnist-cnn --format json
    profile mnist-cnn --runs 3 --warmup 1 --no-roofline --format json
    ops mnist-cnn --runs 2 --warmup 1 --format json
    sweep mnist-cnn --batch-sizes 1,2 --threads 1 --runs 2 --warmup 1 --format json
    train digits-cnn --steps 3 --synthetic --no-eval --out run --format json
    ablate digits-cnn --steps 2 --repeats 1 --warmup-steps 1 --variants baseline --synthetic
    profile mnist-cnn --loop mnist --synthetic --runs 2 --warmup 1 --no-roofline --format json
    activations mnist-cnn --seed 0 --format json -o act.npz
    compare analyze_<R>.json analyze_bf16.json --format json
    llm llama-3-8b --format json                               (0.3 on)
    plan llama-3-8b --gpus 8 --format json                     (0.3 on)
    scaling digits-cnn --nproc 1 --steps 3 --synthetic --format json   (0.3 on)
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import layerscope
from layerscope.core.results import KINDS, read_result
from layerscope.schema import errors
from tests.helpers import run_cli

DATA = Path(__file__).parent / "data"
FILES = sorted(DATA.glob("*_*.json"))
# release -> the kinds it could write (0.2 had no llm, plan or scaling)
# (0.5 added advice; its file was written by `advise train_0.4.json --verify --steps 2`; and
# decode, tests/sample_results.py's decode_profile() saved as 0.5 writes it; and memory, by
# `memory mnist-cnn --mode training --measure --format json`; and diff, by
# `diff profile_0.3.json profile_0.4.json -o diff_0.5.json` in tests/data)
BEFORE_05 = set(KINDS) - {"advice", "decode", "memory", "diff"}
RELEASES = {"0.1": BEFORE_05, "0.2": BEFORE_05 - {"llm", "plan", "scaling"},
            "0.3": BEFORE_05, "0.4": BEFORE_05, "0.5": {"advice", "decode", "memory", "diff"}}


def _kind_release(path: Path) -> tuple[str, str]:
    kind, release = path.stem.rsplit("_", 1)
    return kind, release


def test_every_release_keeps_one_file_per_kind_it_could_write():
    found = {}
    for path in FILES:
        kind, release = _kind_release(path)
        found.setdefault(release, set()).add(kind)
    assert found == RELEASES


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_saved_result_loads_validates_and_writes_back_the_same_json(path):
    text = path.read_text(encoding="utf-8")
    d = json.loads(text)
    assert errors(d) == []
    result = read_result(str(path))
    assert result.kind == d["kind"] == _kind_release(path)[0]
    assert type(layerscope.load(path)) is type(result)
    # the typed records write exactly the keys, order and values the release wrote
    assert json.dumps(result.to_dict(), indent=2) == text.rstrip("\n")


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["table", "html"])
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_saved_result_renders(path, fmt, tmp_path):
    out = tmp_path / f"out.{fmt}"
    code, _, err = run_cli("render", str(path), "--format", fmt, "-o", str(out))
    assert code == 0, err
    assert out.stat().st_size > 0
