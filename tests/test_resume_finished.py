"""Resuming a run that has nothing left to do: one line saying so, exit code 0, and the finished
run's report left as it was (not overwritten by an all-zero one)."""
import pytest

import layerscope
from layerscope.training.loop import AlreadyFinished
from tests.helpers import run_cli

# digits: 1437 training images / batch 64 = 23 batches an epoch
COMMON = dict(recipe="digits-cnn", threads=1, seed=3, evaluate=False)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run stopped by a step limit (3 steps) and one that finished its epoch (23 steps)."""
    base = tmp_path_factory.mktemp("runs")
    layerscope.train(**COMMON, steps=3, out=str(base / "steps"))
    layerscope.train(**COMMON, epochs=1, out=str(base / "epoch"))
    return base


CASES = [
    # (run, resume options, done, total, unit, the line's tail)
    ("steps", ["--steps", "3"], 3, 3, "steps",
     "already finished 3 of 3 steps; nothing to do (to train more: --resume {d} --steps 4 "
     "or more)"),
    ("steps", ["--steps", "2"], 3, 2, "steps",
     "already finished 3 steps, more than 2; nothing to do (to train more: --resume {d} "
     "--steps 4 or more)"),
    ("epoch", [], 1, 1, "epochs",
     "already finished 1 of 1 epochs; nothing to do (to train more: --resume {d} --epochs 2 "
     "or more)"),
]


@pytest.mark.parametrize("run,extra,done,total,unit,tail", CASES,
                         ids=["steps-equal", "steps-fewer", "epochs"])
def test_resuming_a_finished_run_says_so_and_keeps_its_report(finished, run, extra, done,
                                                                total, unit, tail):
    d = finished / run
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    code, out, err = run_cli("train", "digits-cnn", "--resume", str(d), "--no-eval", *extra)
    assert code == 0, err
    assert out == f"layerscope: {d} {tail.format(d=d)}\n"
    assert "Time per phase" not in out
    after = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    assert after == before  # report.json, metrics and config untouched
    with pytest.raises(AlreadyFinished) as caught:
        layerscope.train(recipe="digits-cnn", resume=str(d), evaluate=False,
                         **({"steps": int(extra[1])} if extra else {}))
    assert (caught.value.done, caught.value.total, caught.value.unit) == (done, total, unit)


def test_json_output_gets_the_line_on_stderr_and_nothing_on_stdout(finished):
    d = finished / "epoch"
    code, out, err = run_cli("train", "digits-cnn", "--resume", str(d), "--format", "json")
    assert code == 0 and out == ""
    assert err.strip().endswith("--epochs 2 or more)") and len(err.strip().splitlines()) == 1


def test_a_run_with_work_left_still_trains(finished, tmp_path):
    # 3 of 23 steps done: resuming with a limit of 5 takes 2 more
    report = layerscope.train(recipe="digits-cnn", resume=str(finished / "steps"), steps=5,
                              evaluate=False, out=str(tmp_path / "more"))
    assert report.epochs[-1]["step"] == 5
