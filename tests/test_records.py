"""The one JSON path of the typed records (core.document): fields written in order, None left
out only where the field says so, nested records rebuilt from the type hints, and records that
read like the dicts they replaced."""
from __future__ import annotations

import json

import pytest

from layerscope.core.document import Record
from layerscope.core.records import Achieved, BackwardTiming, Ceilings, EndToEnd, Noise
from layerscope.core.report import LayerRow, Report
from layerscope.core.stats import TimingStats
from tests.sample_results import profile_report

T = TimingStats(median_s=2.0, p10_s=1.0, p90_s=3.0, mean_s=2.0, std_s=0.5, iqr_s=1.0, n=4)


def test_dict_reads_keep_working():
    assert T["median_s"] == 2.0 and T.get("n") == 4 and T.get("nope") is None
    assert "p90_s" in T and "nope" not in T
    assert dict(T) == T.to_dict() and list(T) == ["median_s", "p10_s", "p90_s", "mean_s",
                                                  "std_s", "iqr_s", "n"]
    with pytest.raises(KeyError):
        T["nope"]


def test_a_record_equals_the_dict_it_replaced():
    assert T == T.to_dict() and T.to_dict() == T
    assert T != dict(T.to_dict(), n=5)


@pytest.mark.parametrize("record,keys", [
    # instrumented: omit_none; throughput_per_s: written as null (0.1 did so)
    (EndToEnd(**T.to_dict(), throughput_per_s=None), list(T) + ["throughput_per_s"]),
    (EndToEnd(**T.to_dict(), throughput_per_s=2.0, instrumented=T),
     list(T) + ["throughput_per_s", "instrumented"]),
    # computed properties after the fields: ridge = 100e9 / 20e9 = 5
    (Ceilings("cpu", "float32", 4, 100e9, 20e9, 2048, 1 << 29),
     ["device", "dtype", "threads", "peak_flops", "bandwidth", "matmul_size", "copy_bytes",
      "ridge"]),
], ids=["e2e-without-instrumented", "e2e-full", "ceilings-ridge"])
def test_keys_in_field_order_none_left_out_where_marked(record, keys):
    assert list(record.to_dict()) == keys


def test_ceilings_ridge_is_peak_over_bandwidth():
    # 100 GFLOP/s / 20 GB/s = 5 FLOP/byte
    assert Ceilings("cpu", "float32", 4, 100e9, 20e9, 2048, 1).to_dict()["ridge"] == 5.0


def test_nested_records_are_rebuilt_from_the_type_hints():
    d = {"end_to_end": T.to_dict(), "instrumented": T.to_dict(), "overhead": 0.1,
         "coverage": None, "added_in_1_9": "ignored"}
    back = BackwardTiming.from_dict(d)
    assert isinstance(back.end_to_end, TimingStats) and back.end_to_end.n == 4
    assert back.to_dict() == {k: v for k, v in d.items() if k != "added_in_1_9"}


def test_optional_fields_missing_from_old_results_read_as_none():
    # 'mean_s', 'std_s', 'iqr_s' are optional in the schema; results without them still load
    t = TimingStats.from_dict({"median_s": 1.0, "p10_s": 0.5, "p90_s": 2.0, "n": 3})
    assert t.mean_s is None and t.n == 3


def test_a_required_field_missing_is_an_error():
    with pytest.raises(TypeError):
        Achieved.from_dict({"gmacs_per_s": 1.0})


def test_layer_row_measured_fields_are_left_out_when_none():
    row = LayerRow("fc", "Linear", 1, flops=10, bytes_read=4, bytes_written=1)
    d = row.to_dict()
    assert "time" not in d and "roofline" not in d and d["intensity"] == 2.0  # 10 / (4 + 1)
    row.time = T
    assert LayerRow.from_dict(json.loads(json.dumps(row.to_dict()))).time == T


def test_profile_report_round_trips_into_records():
    d = json.loads(json.dumps(profile_report().to_dict()))
    back = Report.from_dict(d)
    assert isinstance(back.end_to_end, EndToEnd) and isinstance(back.noise, Noise)
    assert isinstance(back.layers[0].time, TimingStats)
    assert back.by_type is not None and isinstance(back.by_type[0].time, TimingStats)
    assert back.to_dict() == d
    assert list(back.to_dict())[:2] == ["schema_version", "kind"]


def test_every_record_is_a_record():
    for cls in (TimingStats, EndToEnd, Achieved, Ceilings, BackwardTiming, Noise, LayerRow,
                Report):
        assert issubclass(cls, Record)
