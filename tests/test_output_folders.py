"""Outputs placed inside a folder the command creates itself (train --out, run --tensorboard,
rewrite linear-subgraph -o) are valid before that folder exists; the folder itself must be
creatable (its nearest existing part a folder), else one line and exit 2, nothing written."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.test_run_cmd import SCRIPT

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ("train", "digits-cnn", "--dry-run", "--quiet")
LINEAR = ("rewrite", "linear-subgraph", "--m", "2", "--k", "2", "--n", "2")

# (id, files and folders made first, argv, exit code, paths that exist afterwards,
#  fragment of the one error line)
CASES = [
    ("readme-demo", [], (*TRAIN, "--out", "runs/demo", "--html", "runs/demo/report.html"),
     0, ["runs/demo/report.html", "runs/demo/report.json"], None),
    ("nested-in-out", [], (*TRAIN, "--out", "runs/x", "--html", "runs/x/y/report.html",
                           "-o", "runs/x/z/r.json"),
     0, ["runs/x/y/report.html", "runs/x/z/r.json"], None),
    ("existing-out", ["runs/e/"], (*TRAIN, "--out", "runs/e", "--html", "runs/e/r.html"),
     0, ["runs/e/r.html"], None),
    ("outside-the-out-folder", [], (*TRAIN, "--out", "runs/q", "--html", "elsewhere/r.html"),
     2, [], "cannot write --html elsewhere/r.html: no such directory"),
    ("out-under-a-file", ["f"], (*TRAIN, "--out", "f/x", "--html", "f/x/r.html"),
     2, [], "cannot create --out f/x: "),
    ("out-deep-under-a-file", ["f"], (*TRAIN, "--out", "f/x/y", "--html", "f/x/y/z/r.html"),
     2, [], "is not a folder"),
    ("out-is-a-file", ["f"], (*TRAIN, "--out", "f", "--html", "f/r.html"),
     2, [], "--out f exists and is not a folder"),
    ("html-under-a-file-in-out", ["runs/e/", "runs/e/f"],
     (*TRAIN, "--out", "runs/e", "--html", "runs/e/f/r.html"),
     2, [], "runs/e/f is not a directory"),
    ("run-tensorboard", ["train_me.py"], ("run", "--tensorboard", "tb", "--html",
                                          "tb/report.html", "train_me.py"),
     0, ["tb/report.html"], None),
    ("run-tensorboard-under-a-file", ["f", "train_me.py"],
     ("run", "--tensorboard", "f/tb", "train_me.py"), 2, [], "cannot create --tensorboard f/tb"),
    ("linear-subgraph-new-folder", [], (*LINEAR, "-o", "new/d"),
     0, ["new/d/linear.onnx", "new/d/linear_tiled.onnx"], None),
    ("linear-subgraph-under-a-file", ["f"], (*LINEAR, "-o", "f/d"),
     2, [], "cannot create -o f/d: "),
]


@pytest.mark.parametrize("made, argv, code, exist, error",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_outputs_inside_folders_the_command_creates(tmp_path, monkeypatch, made, argv, code,
                                                    exist, error):
    monkeypatch.chdir(tmp_path)
    for name in made:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("/"):
            path.mkdir()
        else:
            path.write_text(SCRIPT if name.endswith(".py") else "a file\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    got, _, err = run_cli(*argv)
    assert got == code, err
    for name in exist:
        assert (tmp_path / name).is_file(), name
    if error is not None:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("layerscope: error: "), err
        assert error in lines[0], lines[0]
        assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written


def test_the_writer_removes_the_folders_it_made_when_the_command_fails(tmp_path):
    from layerscope.core.errors import UserError
    from layerscope.core.io import outputs

    with pytest.raises(UserError), outputs() as tx:
        tx.creates(str(tmp_path / "out"))
        tx.write(str(tmp_path / "out" / "a" / "b" / "r.html"), "<html>")
        raise UserError("the command failed after preparing its outputs")
    assert os.listdir(tmp_path) == []


def demo_commands(makefile: Path = ROOT / "Makefile") -> list[list[str]]:
    """The ``demo:`` recipe's command lines, as written in the Makefile (one per line)."""
    text = makefile.read_text()
    recipe = re.search(r"^demo:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert recipe, "the Makefile has no demo: recipe"
    return [shlex.split(ln.strip()) for ln in recipe.group(1).splitlines() if ln.strip()]


@pytest.mark.integration
def test_readme_demo_command_runs_from_a_fresh_folder(tmp_path):
    """make demo's two commands as written: train writes the report that advise reads, and
    advise ends with the answer (here without --verify, whose ablations take a minute;
    tests/test_advice.py runs it)."""
    train, advise = demo_commands()
    assert train[0] == advise[0] == "$(VENV)/bin/layerscope", (train, advise)
    out = train[train.index("--out") + 1]
    html = train[train.index("--html") + 1]
    assert advise[1:3] == ["advise", f"{out}/report.json"] and "--verify" in advise, advise
    layerscope = Path(sys.executable).parent / "layerscope"  # the venv's entry point
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([str(layerscope), *train[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / html).is_file() and "<html" in (tmp_path / html).read_text().lower()
    done = subprocess.run([str(layerscope), *[a for a in advise[1:] if a != "--verify"]],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "Answer: step " in done.stdout


@pytest.mark.slow
def test_make_demo_on_a_fresh_clone(tmp_path):
    """The README's first command, exactly as a reader runs it: clone, make demo (it builds
    its own .venv; minutes)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(["make", "demo"], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=3600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert (clone / "runs" / "demo" / "report.html").is_file()
