"""One layout for the outputs `train` and `run` share: the same phases give the same TensorBoard
tags and the same Chrome-trace rows, whichever path wrote them (training/sinks.py,
training/chrome_trace.py); and the sinks see every step and epoch in order."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import layerscope
from layerscope.cli.run_cmd import _tensorboard
from layerscope.training.chrome_trace import COMM_TID, PHASE_TID, STEP_TID, merged_trace
from layerscope.training.sinks import CallbackSink, EpochResult, StepResult
from layerscope.training.watch import Watch

# one step starting at t = 100 s: data 1 ms, forward 2 ms, backward 3 ms, end to end
PHASES = {"data": 0.001, "forward": 0.002, "backward": 0.003}
T0 = 100.0


def _watched(phases, t0, warmup=0):
    """What Watch keeps of one traced step (its span and each phase's interval)."""
    intervals, t = [], t0
    for name, dur in phases.items():
        intervals.append((name, t, t + dur))
        t += dur
    return SimpleNamespace(name="train.py", warmup_steps=warmup, step_spans=[(1, t0, t)],
                           intervals=intervals, step_phases=[dict(phases)],
                           step_seconds=[t - t0], measured_steps=[warmup + 1])


def _rows(trace):
    """(pid, tid) -> row name, and the complete events as (tid, cat, name, ts, dur)."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [(e["tid"], e["cat"], e["name"], e["ts"], e["dur"]) for e in trace["traceEvents"]
             if e["ph"] == "X"]
    return names, spans


def test_both_trace_paths_draw_the_same_rows_for_the_same_phases(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    watched = Watch.chrome_trace(_watched(PHASES, T0))
    merged = merged_trace([{"rank": 0, "steps": [{"t0": T0, "phases": PHASES,
                                                   "buckets": []}]}])
    w_names, w_spans = _rows(watched)
    m_names, m_spans = _rows(merged)
    # the same rows; the distributed trace adds the communication row
    assert w_names == {(0, STEP_TID): "steps", (0, PHASE_TID): "phases"}
    assert m_names == {**w_names, (0, COMM_TID): "communication"}
    # phases: same row, category, names and times (us after the first step's start)
    expected = [(PHASE_TID, "phase", "data", 0, 1000), (PHASE_TID, "phase", "forward", 1000, 2000),
                (PHASE_TID, "phase", "backward", 3000, 3000)]
    for spans in (w_spans, m_spans):
        phases = [s for s in spans if s[0] == PHASE_TID]
        assert [s[:3] for s in phases] == [e[:3] for e in expected]
        assert [s[3:] for s in phases] == [pytest.approx(e[3:]) for e in expected]
        steps = [s for s in spans if s[0] == STEP_TID]
        assert [(s[1], s[3], s[4]) for s in steps] == [("step", 0, pytest.approx(6000))]


def _scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_both_tensorboard_paths_write_the_same_step_tags(tmp_path):
    report = layerscope.train(recipe="digits-cnn", steps=2, evaluate=False, tensorboard=True,
                              out=str(tmp_path / "train"))
    trained = _scalars(tmp_path / "train" / "tensorboard")
    timing = {t for t in trained if t.startswith("step/phase_ms/") or t == "step/wall_ms"}
    # run --tensorboard with the same phases: the same timing tags, nothing else
    phases = {t.removeprefix("step/phase_ms/"): 0.001 for t in timing if "phase_ms" in t}
    _tensorboard(_watched(phases, T0), str(tmp_path / "run"))
    ran = _scalars(tmp_path / "run")
    assert set(ran) == timing
    assert {"step/loss", "step/lr", "step/throughput_per_s"} <= set(trained) - timing
    # steps numbered from 1 on both paths; the wall time is the step's, in ms
    assert [s for s, _ in trained["step/wall_ms"]] == [1, 2]
    assert trained["step/wall_ms"][0][1] == pytest.approx(report.step_seconds[0] * 1e3,
                                                          rel=1e-4)
    assert ran["step/wall_ms"] == [(1, pytest.approx(len(phases)))]
    assert ran["step/phase_ms/forward"] == [(1, pytest.approx(1.0))]


def test_callback_sink_passes_progress_and_rows():
    seen = []
    sink = CallbackSink(lambda *a: seen.append(("progress", a)),
                        lambda row: seen.append(("epoch", row)))
    sink.on_step(StepResult({}, 0.1, epoch=0, batch=3, batches=5))
    sink.on_epoch(EpochResult(0, {"epoch": 1}, True, [{"epoch": 1}]))
    sink.close()
    assert seen == [("progress", (0, 3, 5)), ("epoch", {"epoch": 1})]


def test_train_notifies_every_step_and_epoch_in_order(tmp_path):
    # 2 epochs of 3 steps (synthetic data: 80 samples, batch 32): progress after every step,
    # the row after each epoch, in that order
    events = []
    layerscope.train(recipe="digits-cnn", epochs=2, batch_size=32, evaluate=False,
                     synthetic=True, synthetic_size=(80, 16), out=str(tmp_path / "r"),
                     progress=lambda e, b, n: events.append(("step", e, b, n)),
                     on_epoch=lambda row: events.append(("epoch", row["epoch"], row["step"])))
    assert events == [("step", 0, 1, 3), ("step", 0, 2, 3), ("step", 0, 3, 3), ("epoch", 1, 3),
                      ("step", 1, 1, 3), ("step", 1, 2, 3), ("step", 1, 3, 3), ("epoch", 2, 6)]
