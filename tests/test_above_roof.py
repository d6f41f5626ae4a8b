"""A layer measured above 100% of its roof cannot be right: the result says the ceilings look
stale (when and under what load they were measured) and gives the command that measures them
again. Hand-made ceilings and samples only: no clock is read and nothing is measured."""
import json

import pytest
import torch

from layerscope.analysis import roofline
from layerscope.core.noise import MachineReading
from layerscope.core.records import Ceilings
from layerscope.core.report import Report
from tests.helpers import run_cli
from tests.sample_results import profile_report

# peak 2 GFLOP/s and 1 TB/s: every sample layer (intensity >= 0.125 FLOP/B) is under the
# compute roof, attainable = min(2e9, 1e12 x intensity) = 2e9 FLOP/s
STALE = Ceilings("cpu", "float32", 2, 2e9, 1e12, 2048, 2**29,
                 measured_at="2026-11-26T15:02:11+00:00", loadavg=4.46, cpus=2)


def _point(share, bound="compute"):
    from layerscope.core.records import RooflinePoint

    return RooflinePoint(intensity=1.0, bound=bound, attainable_flops=1e9,
                         achieved_flops=None if share is None else share * 1e9,
                         pct_of_roof=share)


@pytest.mark.parametrize("points, expected", [
    pytest.param([(0.5,), (0.9,), (None,)], None, id="all-under"),
    pytest.param([(1.0,), (0.3,)], None, id="exactly-at-the-roof"),
    # (layers above, layers placed, memory-bound among those above, highest share)
    pytest.param([(0.5,), (1.12, "memory"), (2.66,), (None,)], (2, 3, 1, 2.66),
                 id="two-of-three-above"),
    pytest.param([], None, id="no-layer-placed"),
])
def test_above_roof_counts_layers_over_100_percent(points, expected):
    got = roofline.above_roof([_point(*p) for p in points], STALE)
    if expected is None:
        assert got is None
        return
    assert (got.layers, got.of_layers, got.memory_bound, got.max_pct_of_roof) == expected
    assert (got.measured_at, got.loadavg, got.cpus) == ("2026-11-26T15:02:11+00:00", 4.46, 2)
    assert got.command == "layerscope roofline --device cpu --dtype float32 --threads 2 --refresh"


def _stale_profile(monkeypatch, ceilings=STALE) -> Report:
    from layerscope.analysis import runtime

    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: ceilings)
    report = profile_report()
    runtime.place_on_roofline(report, "cpu", torch.float32, 2)
    return Report.from_dict(json.loads(json.dumps(report.to_dict())))


def test_profile_result_carries_the_remark_and_every_renderer_shows_it(monkeypatch, tmp_path):
    from layerscope.renderers.terminal import to_text
    from layerscope.views import view_for

    report = _stale_profile(monkeypatch)
    # achieved FLOP/s = flops / median: conv1 901,120 / 0.25 ms = 3.604 G -> 180%;
    # bn1 65,536 / 0.04 ms = 1.638 G -> 82%; relu 16,384 / 0.02 ms -> 41%;
    # fc 327,690 / 0.09 ms = 3.641 G -> 182%: 2 of 4 layers above, at most 182%
    a = report.above_roof
    assert (a["layers"], a["of_layers"]) == (2, 4)
    assert a["max_pct_of_roof"] == pytest.approx(327690 / 0.09e-3 / 2e9)
    text = " ".join(to_text(report, width=200).split())  # the terminal wraps long lines
    assert "Warning: 2 of 4 layers above 100% of their roof (up to 182%)" in text
    assert "measured 2026-11-26T15:02:11+00:00 with load average 4.46 on 2 CPUs" in text
    assert "layerscope roofline --device cpu --dtype float32 --threads 2 --refresh" in text
    warnings = view_for(report).warnings(report)  # the HTML report draws these
    assert any(w.startswith("2 of 4 layers above 100% of their roof") for w in warnings)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report.to_dict()))
    html = tmp_path / "r.html"
    assert run_cli("render", str(path), "-o", str(html))[0] == 0
    assert "2 of 4 layers above 100% of their roof" in html.read_text()


def test_ceilings_cached_before_their_time_was_recorded_say_so(monkeypatch):
    old = Ceilings("cpu", "float32", 2, 2e9, 1e12, 2048, 2**29)
    report = _stale_profile(monkeypatch, old)
    from layerscope.views.report import above_roof_line

    assert "when and under what load they were measured is not recorded" in \
        above_roof_line(report)


def test_no_remark_under_the_roof(monkeypatch):
    fast = Ceilings("cpu", "float32", 2, 1e12, 1e12, 2048, 2**29)
    report = _stale_profile(monkeypatch, fast)
    assert report.above_roof is None and "above_roof" not in report.to_dict()


def test_measured_ceilings_record_when_and_the_load(monkeypatch):
    monkeypatch.setattr(roofline, "read_machine", lambda: MachineReading((4.46, 3.0, 2.0), 2, 2))
    monkeypatch.setattr(roofline, "_matmul_time", lambda n, *a: 2 * n**3 / 5e10)
    monkeypatch.setattr(roofline, "_copy_time", lambda elements, *a: 2 * elements * 4 / 5e9)
    c = roofline.measure("cpu", torch.float32, threads=1, matmul_size=64, copy_mib=1)
    assert c.peak_flops == pytest.approx(5e10) and c.bandwidth == pytest.approx(5e9)
    assert (c.loadavg, c.cpus) == (4.46, 2)
    assert c.measured_at and c.measured_at.endswith("+00:00")
    assert roofline._valid_entry(c.to_dict())  # the cache keeps them


def test_roofline_command_says_when_and_how_to_measure_again(monkeypatch):
    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: STALE)
    code, out, _ = run_cli("roofline")
    assert code == 0
    assert "measured      2026-11-26T15:02:11+00:00, load average 4.46 on 2 CPUs" in out
    assert "layerscope roofline --device cpu --dtype float32 --threads 2 --refresh" in out


def test_memory_bound_layers_above_the_roof_name_the_caches(monkeypatch):
    from layerscope.views.report import above_roof_line

    # 1 GB/s: bn1 (65,536 FLOPs, 131,200 bytes: 0.4995 FLOP/B) may reach 0.4995 GFLOP/s and
    # achieves 1.638 G (328%), memory-bound; conv1 and fc are above the 2 GFLOP/s peak as before
    slow_memory = Ceilings("cpu", "float32", 2, 2e9, 1e9, 2048, 2**29)
    report = _stale_profile(monkeypatch, slow_memory)
    assert report.above_roof["memory_bound"] >= 1
    assert "can also beat the large copy's bandwidth when its data stays in the CPU caches" in \
        above_roof_line(report)


@pytest.mark.parametrize("cached_load, now_load, device, measured_again", [
    pytest.param(4.46, 0.5, "cpu", True, id="busy-then-quiet-now"),
    pytest.param(4.46, 4.0, "cpu", False, id="busy-then-as-busy-now"),
    pytest.param(0.6, 0.0, "cpu", False, id="quiet-then"),
    pytest.param(None, 0.0, "cpu", False, id="load-not-recorded"),
    pytest.param(4.46, 0.5, "cuda", False, id="gpu-ceilings"),
])
def test_ceilings_measured_busy_are_measured_again_once_quieter(monkeypatch, tmp_path,
                                                                 cached_load, now_load, device,
                                                                 measured_again):
    """A cached entry measured at load 4.46 on 2 CPUs (at least half of them busy), read when the
    load is 0.5 (quieter by at least 1): measured again. The new measurement's bandwidth is
    lower (5e11 against 1e12) and its peak higher (5e10 against 2e9): each keeps the higher,
    with the new time and load, and the cache holds them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    old = Ceilings(device, "float32", 2, 2e9, 1e12, 2048, 2**29,
                   measured_at="2026-11-26T15:02:11+00:00", loadavg=cached_load, cpus=2)
    key = roofline._key(device, torch.float32, 2)
    path = roofline.cache_path()
    (tmp_path / "layerscope").mkdir()
    with open(path, "w") as f:
        json.dump({key: old.to_dict()}, f)
    new = Ceilings(device, "float32", 2, 5e10, 5e11, 2048, 2**29,
                   measured_at="2026-11-27T04:00:00+00:00", loadavg=now_load, cpus=2)
    calls = []
    monkeypatch.setattr(roofline, "read_machine",
                        lambda: MachineReading((now_load, 1.0, 1.0), 2, 2))
    monkeypatch.setattr(roofline, "measure", lambda *a, **k: calls.append(a) or new)
    got = roofline.ceilings(device, torch.float32, threads=2)
    assert bool(calls) == measured_again
    if measured_again:
        assert (got.peak_flops, got.bandwidth) == (5e10, 1e12)
        assert (got.measured_at, got.loadavg) == (new.measured_at, now_load)
        with open(path) as f:
            kept = json.load(f)[key]
        assert (kept["peak_flops"], kept["bandwidth"], kept["loadavg"]) == (5e10, 1e12, now_load)
        # read again at the same load: the new entry was measured quiet; not measured again
        calls.clear()
        roofline.ceilings(device, torch.float32, threads=2)
        assert calls == []
    else:
        assert got.peak_flops == 2e9 and got.bandwidth == 1e12
