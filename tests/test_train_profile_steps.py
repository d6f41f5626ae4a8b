"""``train --profile torch``: the per-step operator table covers the training steps only. The
validation pass after the epoch (and the TensorBoard graph's trace) runs with the profiler
paused, so dividing by the training steps gives each op's calls per step."""
import json

import pytest

import layerscope

# DigitsCNN's forward per batch: conv1, conv2 (mkldnn_convolution on the CPU), fc1, fc2
# (addmm), three F.relu (clamp_min) and one F.max_pool2d. Digits' validation split is one
# batch of 360 (eval_batch_size), which before the fix added 1 forward to the 2 steps':
# 1.5x every forward op's calls per step.
PER_STEP = [
    ("aten::mkldnn_convolution", 2),
    ("aten::addmm", 2),
    ("aten::clamp_min", 3),
    ("aten::max_pool2d_with_indices", 1),
]
STEPS = 2


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    report = layerscope.train(recipe="digits-cnn", steps=STEPS, threads=1, evaluate=True,
                              tensorboard=True, profile="torch", out=str(out))
    trace = json.loads((out / "trace.json").read_text())
    return report, trace


@pytest.mark.parametrize("op,calls", PER_STEP, ids=[op for op, _ in PER_STEP])
def test_the_trace_holds_the_training_steps_ops_only(profiled, op, calls):
    report, trace = profiled
    assert report.epochs[-1]["val_top1"] is not None  # validation did run
    seen = sum(1 for e in trace["traceEvents"] if e.get("name") == op and e.get("ph") == "X")
    assert seen == calls * STEPS


@pytest.mark.parametrize("op,calls", PER_STEP, ids=[op for op, _ in PER_STEP])
def test_the_per_step_table_counts_training_steps_only(profiled, op, calls):
    report, _ = profiled
    rows = {r["name"]: r["calls"] for r in report.ops["rows"]}
    if op in rows:  # the table shows the top operators by time
        assert rows[op] == calls
    assert report.ops["runs"] == STEPS
    assert report.ops["settings"]["includes"].startswith("training steps only")
