"""The merged Chrome/Perfetto trace of a distributed run (training/chrome_trace.py)."""
from __future__ import annotations

import json

import pytest

from layerscope.errors import UserError
from layerscope.training.chrome_trace import (
    COMM_TID,
    PHASE_TID,
    STEP_TID,
    merged_trace,
    write_trace,
)


def _rank(rank, t0, phases, buckets):
    return {"rank": rank, "steps": [{"t0": t0, "phases": phases, "buckets": buckets}]}


RANKS = [
    # rank 1 starts 1 ms after rank 0; its phases given as durations, laid end to end.
    _rank(1, 100.001, {"forward": 0.002, "backward": 0.003, "optimizer": 0.001},
          [{"start": 0.004, "seconds": 0.0015, "bytes": 784, "op": "all_reduce"}]),
    _rank(0, 100.000, {"forward": [0.0, 0.002], "backward": [0.002, 0.004]},
          [{"start": 0.003, "dur": 0.001, "bytes": 512},
           {"start": 0.005, "seconds": 0.002, "bytes": 272}]),
]


def _x(trace, pid, tid):
    return [e for e in trace["traceEvents"]
            if e["ph"] == "X" and e["pid"] == pid and e["tid"] == tid]


def test_one_named_process_per_rank():
    trace = merged_trace(RANKS)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}


@pytest.mark.parametrize("pid, expected", [
    # rank 1: t0 1 ms after the earliest; forward 0-2 ms, backward 2-5, optimizer 5-6 (in us).
    (1, [("step 0", 1000, 6000), ("forward", 1000, 2000), ("backward", 3000, 3000),
         ("optimizer", 6000, 1000)]),
    (0, [("step 0", 0, 6000), ("forward", 0, 2000), ("backward", 2000, 4000)]),
], ids=["durations", "start-dur"])
def test_phases_are_ranges(pid, expected):
    trace = merged_trace(RANKS)
    got = [(e["name"], e["ts"], e["dur"]) for tid in (STEP_TID, PHASE_TID)
           for e in _x(trace, pid, tid)]
    assert [n for n, _, _ in got] == [n for n, _, _ in expected]
    for (_, ts, dur), (_, ets, edur) in zip(got, expected, strict=True):
        assert ts == pytest.approx(ets)
        assert dur == pytest.approx(edur)


def test_buckets_on_their_own_row_overlap_backward():
    trace = merged_trace(RANKS)
    buckets = _x(trace, 0, COMM_TID)
    assert [e["args"]["bytes"] for e in buckets] == [512, 272]
    assert [e["ts"] for e in buckets] == pytest.approx([3000, 5000])
    assert [e["dur"] for e in buckets] == pytest.approx([1000, 2000])
    backward = next(e for e in _x(trace, 0, PHASE_TID) if e["name"] == "backward")
    # bucket 0 (3-4 ms) lies inside backward (2-6 ms): the overlap the trace is for.
    assert backward["ts"] <= buckets[0]["ts"] < backward["ts"] + backward["dur"]


def test_written_file_is_valid_chrome_trace(tmp_path):
    path = tmp_path / "trace.json"
    write_trace(str(path), RANKS)
    trace = json.loads(path.read_text())
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "M")
        assert isinstance(e["pid"], int)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and e["tid"] in (STEP_TID, PHASE_TID, COMM_TID)


def test_nothing_to_trace_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="nothing to trace"):
        write_trace(str(tmp_path / "t.json"), [])
    assert not (tmp_path / "t.json").exists()
