"""profile: statistics and attribution with a fake clock (never real wall-clock assertions)."""
import json

import pytest
import torch
import torch.nn as nn

import layerscope
from layerscope.analysis.roofline import Ceilings, place
from tests.helpers import FakeClock, run_cli


class Sleep(nn.Module):
    """Takes ``schedule[i % len]`` fake seconds on its i-th call."""

    def __init__(self, clock, schedule, features=4):
        super().__init__()
        self.clock, self.schedule, self.calls = clock, schedule, 0
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        self.clock.advance(self.schedule[self.calls % len(self.schedule)])
        self.calls += 1
        return self.fc(x) + 1.0


class Net(nn.Module):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.a = Sleep(clock, [0.001])
        self.b = Sleep(clock, [0.002])

    def forward(self, x):
        self.clock.advance(0.0005)  # the container's own code (an op, so it gets a row)
        return self.b(self.a(x * 2.0))


def test_forward_attribution_with_fake_clock():
    clock = FakeClock()
    report = layerscope.profile(Net(clock), inputs=(1, 4), runs=7, warmup=2, roofline=False,
                                clock=clock, depth=1)
    rows = {r.name: r for r in report.layers}
    # depth 1: a and b whole, the root's own code as its own row
    assert rows["a"].time["median_s"] == pytest.approx(0.001)
    assert rows["b"].time["median_s"] == pytest.approx(0.002)
    assert rows["(root)"].self_only and rows["(root)"].time["median_s"] == pytest.approx(0.0005)
    assert report.end_to_end["median_s"] == pytest.approx(0.0035)
    assert report.end_to_end["n"] == 7 and rows["a"].time["n"] == 7
    assert report.overhead == pytest.approx(0.0)
    assert report.coverage == pytest.approx(1.0)
    assert rows["b"].share == pytest.approx(0.002 / 0.0035)
    assert [rows[n].rank for n in ("b", "a", "(root)")] == [1, 2, 3]
    assert report.end_to_end["throughput_per_s"] == pytest.approx(1 / 0.0035)


B_SCHEDULE = [i / 1000 for i in [*range(2, 11), 1]]


def test_leaf_rows_and_percentiles_with_fake_clock():
    clock = FakeClock()
    net = Net(clock)
    # b's i-th call (0-based) takes ((i + 1) % 10) + 1 ms (B_SCHEDULE). The static analysis'
    # fake pass leaves the model as it was, its call counter too, so calls 0-3 are the warm-up;
    # then each round runs bare and instrumented, the first of the two alternating: bare, inst |
    # inst, bare | bare, inst | inst, bare | bare, inst. So calls 5, 6, 9, 10, 13 are
    # instrumented (b takes 7, 8, 1, 2, 5 ms) and 4, 7, 8, 11, 12 bare (6, 9, 10, 3, 4 ms).
    net.b.schedule = B_SCHEDULE
    report = layerscope.profile(net, inputs=(1, 4), runs=5, warmup=4, roofline=False, clock=clock)
    rows = {r.name: r for r in report.layers}
    b = rows["b.fc"]  # leaves: the Linear inside b takes no fake time; b's own code is a row
    assert b.time["median_s"] == 0.0
    own = rows["b"]
    assert own.self_only
    assert own.time["median_s"] == pytest.approx(0.005)
    assert own.time["p10_s"] == pytest.approx(0.001 + 0.4 * 0.001)  # sorted 1,2,5,7,8: rank 0.4
    assert own.time["p90_s"] == pytest.approx(0.007 + 0.6 * 0.001)  # rank 3.6
    bare = report.end_to_end  # median of 3,4,6,9,10 ms is 6 ms, + 1 ms (a) + 0.5 ms (root)
    assert bare["median_s"] == pytest.approx(0.006 + 0.0015)
    assert net.b.calls == 0  # the caller's model is as it was


class SlowGrad(torch.autograd.Function):
    """Identity whose backward takes ``seconds`` of fake time."""

    @staticmethod
    def forward(ctx, x, clock, seconds):
        ctx.clock, ctx.seconds = clock, seconds
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.clock.advance(ctx.seconds)
        return grad, None, None


class GradLayer(nn.Module):
    def __init__(self, clock, seconds):
        super().__init__()
        self.clock, self.seconds = clock, seconds
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return SlowGrad.apply(self.fc(x), self.clock, self.seconds)


def test_backward_attributed_to_the_module_whose_forward_made_it():
    clock = FakeClock()
    model = nn.Sequential(GradLayer(clock, 0.003), GradLayer(clock, 0.001))
    report = layerscope.profile(model, inputs=(2, 4), runs=3, warmup=1, roofline=False,
                                clock=clock, backward=True, depth=1)
    rows = {r.name: r for r in report.layers}
    assert rows["0"].backward_time["median_s"] == pytest.approx(0.003)
    assert rows["1"].backward_time["median_s"] == pytest.approx(0.001)
    assert report.backward["coverage"] == pytest.approx(1.0)
    assert report.backward["overhead"] == pytest.approx(0.0)
    assert all(p.grad is None for p in model.parameters())  # autograd.grad: .grad untouched


@pytest.mark.integration
def test_profile_leaves_the_model_unchanged():
    from layerscope.frontends import zoo

    net = zoo.lookup("resnet20").build().train()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    layerscope.profile(net, inputs=(1, 3, 32, 32), runs=2, warmup=1, roofline=False,
                       backward=True)
    assert net.training and all(m.training for m in net.modules())
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in state.items())
    assert all("forward" not in m.__dict__ for m in net.modules())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in net.modules())
    assert all(p.grad is None for p in net.parameters())


def test_roofline_placement_is_hand_computed():
    c = Ceilings("cpu", "float32", 2, peak_flops=100e9, bandwidth=20e9, matmul_size=1,
                 copy_bytes=1)
    assert c.ridge == 5.0
    mem = place(flops=2_000_000, bytes_moved=1_000_000, seconds=0.001, ceilings=c)
    assert mem["bound"] == "memory" and mem["intensity"] == 2.0
    assert mem["attainable_flops"] == pytest.approx(40e9)  # 20 GB/s * 2 FLOP/B
    assert mem["pct_of_roof"] == pytest.approx(2e9 / 40e9)
    comp = place(flops=10_000_000, bytes_moved=1_000_000, seconds=0.001, ceilings=c)
    assert comp["bound"] == "compute" and comp["attainable_flops"] == 100e9
    assert place(0, 0, 0.001, c) is None


def test_profile_cli_json_keys(tmp_path):
    out = tmp_path / "p.json"
    code, _, err = run_cli("profile", "mnist-cnn", "--runs", "3", "--warmup", "1",
                           "--no-roofline", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "profile"
    assert {"median_s", "p10_s", "p90_s", "mean_s", "n"} <= set(d["end_to_end"])
    assert isinstance(d["overhead"], float) and isinstance(d["coverage"], float)
    for row in d["layers"]:
        assert {"median_s", "p10_s", "p90_s", "mean_s", "n"} <= set(row["time"])
        assert "share" in row and "macs" in row
    assert sum(r["macs"] for r in d["layers"]) == d["totals"]["macs"]


@pytest.mark.parametrize("argv,expected", [
    (["--device", "cuda"], "no CUDA GPU is available"),
    (["--device", "tpu"], "unknown --device"),
    (["--runs", "0"], "--runs must be at least 1"),
    (["--warmup", "-1"], "--warmup must be 0 or more"),
    (["--min-time", "0"], "--min-time must be positive"),
    (["--threads", "0"], "--threads must be at least 1"),
], ids=["cuda-missing", "unknown-device", "zero-runs", "negative-warmup", "zero-min-time",
        "zero-threads"])
def test_profile_bad_input(argv, expected):
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = run_cli("profile", "mnist-cnn", *argv)
    assert code == 2 and expected in err and err.count("\n") == 1, err


def _b_schedule_report(monkeypatch=None, **kw):
    """The schedule of test_leaf_rows_and_percentiles_with_fake_clock: instrumented runs see b
    take 7, 8, 1, 2, 5 ms, the bare runs 6, 9, 10, 3, 4 ms (pairs by round: (6, 7), (9, 8),
    (10, 1), (3, 2), (4, 5)); a takes 1 ms and the root's own code 0.5 ms in every run."""
    clock = FakeClock()
    net = Net(clock)
    net.b.schedule = B_SCHEDULE
    return layerscope.profile(net, inputs=(1, 4), runs=5, warmup=4, roofline=False,
                              clock=clock, **kw)


B_INST = [7, 8, 1, 2, 5]  # ms, instrumented runs in order
WALLS = [b + 1.5 for b in B_INST]  # 8.5, 9.5, 2.5, 3.5, 6.5 ms


def test_coverage_and_shares_come_from_the_same_instrumented_runs():
    report = _b_schedule_report()
    rows = {r.name: r for r in report.layers}
    # Every run's rows ((root) 0.5 + a 1 + b + the Linears' 0) fill that run's wall time: 100%.
    # The old ratio, sum of row medians / bare median = (0.5 + 1 + 5) / 7.5 = 86.7%, mixed
    # samples from different runs.
    assert report.coverage == pytest.approx(1.0)
    # n = 5 < 10: no run trimmed; share = mean over runs of row time / that run's wall
    assert rows["b"].share == pytest.approx(sum(b / w for b, w in zip(B_INST, WALLS)) / 5)
    assert rows["a"].share == pytest.approx(sum(1 / w for w in WALLS) / 5)
    assert rows["(root)"].share == pytest.approx(sum(0.5 / w for w in WALLS) / 5)
    assert rows["b.fc"].share == 0.0
    assert sum(r.share for r in report.layers) == pytest.approx(1.0)


def test_overhead_is_the_median_ratio_over_interleaved_pairs():
    report = _b_schedule_report()
    # pairs (bare, instrumented) in ms with 1.5 ms of a + root: (7.5, 8.5), (10.5, 9.5),
    # (11.5, 2.5), (4.5, 3.5), (5.5, 6.5); ratios 1.133, 0.905, 0.217, 0.778, 1.182:
    # median 9.5 / 10.5
    assert report.overhead == pytest.approx(9.5 / 10.5 - 1)
    assert report.end_to_end["instrumented"]["median_s"] == pytest.approx(0.0065)


def test_by_type_shares_are_sums_of_the_row_shares():
    report = _b_schedule_report()
    rows = {r.name: r for r in report.layers}
    types = {d["type"]: d for d in report.by_type}
    # rows never overlap: Sleep appears as its own ops (a and b), never on top of its Linears
    assert set(types) == {"Net (own ops)", "Sleep (own ops)", "Linear"}
    assert types["Sleep (own ops)"]["layers"] == 2
    assert types["Sleep (own ops)"]["share"] == pytest.approx(rows["a"].share + rows["b"].share)
    # per-run sums (1 + b ms): 8, 9, 2, 3, 6 -> median 6 ms, mean 5.6 ms
    assert types["Sleep (own ops)"]["time"]["median_s"] == pytest.approx(0.006)
    assert types["Sleep (own ops)"]["time"]["mean_s"] == pytest.approx(0.0056)
    assert sum(d["share"] for d in report.by_type) == pytest.approx(
        sum(r.share for r in report.layers))


def test_noise_section_with_a_fixed_machine_reading(monkeypatch):
    from layerscope.analysis import runtime
    from layerscope.core.noise import MachineReading

    monkeypatch.setattr(runtime, "read_machine", lambda: MachineReading((3.0, 2.0, 1.0), 2, 2))
    report = _b_schedule_report(threads=2)
    noise = report.noise
    # bare runs 7.5, 10.5, 11.5, 4.5, 5.5 ms: sorted 4.5 5.5 7.5 10.5 11.5, p10 = 4.5 + 0.4 =
    # 4.9, p90 = 10.5 + 0.6 = 11.1, mean 39.5 / 5 = 7.9, median 7.5
    assert noise["p90_over_p10"] == pytest.approx(11.1 / 4.9)
    assert noise["mean_over_median"] == pytest.approx(7.9 / 7.5)
    assert noise["threads"] == 2 and noise["busy_cpus"] == 3 and noise["oversubscribed"]
    assert noise["rows_mean_far_above_median"] == 0  # b: median 5, mean 4.6 ms
    # one line for spread and oversubscription; idle cores = max(1, 2 - 3): --threads 1
    assert len(noise["warnings"]) == 1 and "--threads 1" in noise["warnings"][0]


@pytest.mark.integration
def test_resnet_type_shares_equal_row_shares_and_never_exceed_the_runs():
    """Invariants on a real run (no time asserted): a type's share is the sum of its rows'
    shares; the rows lie inside the run, so all shares add to at most 100%."""
    report = layerscope.profile("resnet20", runs=3, warmup=1, roofline=False)
    by_rows: dict[str, float] = {}
    for r in report.layers:
        key = r.type + (" (own ops)" if r.self_only else "")
        by_rows[key] = by_rows.get(key, 0.0) + r.share
    assert {d["type"]: d["share"] for d in report.by_type} == pytest.approx(by_rows, abs=1e-12)
    assert "BasicBlock (own ops)" in by_rows and "BasicBlock" not in by_rows
    assert sum(by_rows.values()) <= 1.0 + 1e-9
    assert 0.0 < report.coverage <= 1.0 + 1e-9
    assert set(report.noise) >= {"p90_over_p10", "cv", "loadavg", "cpu_count", "cpus_available",
                                 "threads", "warnings"}


@pytest.mark.parametrize("runs, min_time, run_s, filler", [
    # 8 runs of 1/64 s (125 ms in all) spread over SPAN_S = 1 s: measured run i starts at
    # i/8 s; after each of the first 7, 7 unmeasured runs fill the 7/64 s to the next
    pytest.param(8, None, 1 / 64, 7 * 7, id="8-runs-spread"),
    # 7 runs: fewer than two a block (4 blocks), no drift to estimate, back to back
    pytest.param(7, None, 1 / 64, 0, id="7-runs-back-to-back"),
    # 8 runs of 1/4 s take 2 s, longer than the span: nothing to fill
    pytest.param(8, None, 1 / 4, 0, id="8-long-runs"),
    # a time budget sets its own span
    pytest.param(None, 0.5, 1 / 64, 0, id="min-time"),
])
def test_fixed_runs_are_spread_over_the_span(runs, min_time, run_s, filler):
    from layerscope.analysis.runtime import SPAN_S, _Runs

    t = [100.0]
    plan = _Runs(runs, min_time, now=lambda: t[0])
    plan.start()
    starts, done = [], 0
    while plan.more(done):
        while plan.early(done):
            t[0] += run_s  # an unmeasured run
        starts.append(t[0] - 100.0)
        t[0] += run_s  # the measured run
        done += 1
    assert plan.filler == filler
    if filler:
        assert SPAN_S == 1.0
        assert starts == [i / runs for i in range(runs)]


@pytest.mark.integration
def test_a_profile_of_eight_runs_says_it_spread_them():
    r = layerscope.profile("mnist-cnn", runs=8, warmup=1, threads=1, roofline=False)
    assert r.settings["spread_s"] == 1.0 and r.end_to_end["n"] == 8
    r = layerscope.profile("mnist-cnn", runs=2, warmup=1, threads=1, roofline=False)
    assert "spread_s" not in r.settings
