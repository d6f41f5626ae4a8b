"""layerscope diff joins the static side first: the whole model's FLOPs, parameters, inputs,
batch, dtype, compilation and threads, named in the summary's first clause; no shift, group
shift, typical move or shared drift is taken from rows whose work changed (or, where a result
keeps no static figures per row, from any row once the whole model differs). Verdicts are fed
injected samples; the end-to-end run asserts only what no load can flip."""
import copy
import json
import math

import pytest

from layerscope.analysis.diff import diff_results
from layerscope.analysis.diff.facts import static_changes
from layerscope.analysis.diff.join import expected_from_flops
from layerscope.analysis.diff.measures import Measure, timed
from layerscope.core.records.efficiency import efficiency
from layerscope.core.stats import TimingStats
from tests.helpers import run_cli
from tests.sample_results import ALL, profile_report, train_report

# 20 steps in 4 blocks of 5, each block's median 1.0: no drift of its own
STEADY = [0.98, 1.02, 0.96, 1.0, 1.04] * 4


def _steady(ms: float) -> list[float]:
    return [ms / 1e3 * x for x in STEADY]


def _run(flops: float | None, phases_ms: dict[str, list[float]],
         layers_ms: dict[str, list[float]] | None = None):
    """A ``layerscope run`` result of one script: its model FLOPs per step, each phase's
    seconds per step (step = their sum) and, for ``--layers``, each layer's."""
    r = train_report()
    r.recipe = "wide.py"
    r.config = {"device": "cpu", "warmup_steps": 0, "steps": None, "layers": bool(layers_ms),
                "memory": False, "step_on": "optimizer"}
    r.step_phases = {p: [x / 1e3 for x in xs] for p, xs in phases_ms.items()}
    steps = len(next(iter(phases_ms.values())))
    r.step_seconds = [sum(xs[i] for xs in r.step_phases.values()) for i in range(steps)]
    r.efficiency = None if flops is None else efficiency(flops, r.step_seconds, 50e9)
    r.layers = None if layers_ms is None else [
        {"name": n, "type": "Linear", "calls": steps, "forward_s": sum(xs) / 1e3,
         "forward_s_per_step": sum(xs) / 1e3 / steps, "forward_samples_s": [x / 1e3 for x in xs]}
        for n, xs in layers_ms.items()]
    return r


def _scaled(ms: float, scale: float = 1.0) -> list[float]:
    return [ms * scale * x for x in STEADY]


def no_large_change_within_noise(d) -> list[str]:
    """The rows with p < 1e-6 and a change over 100% that the diff calls within the noise."""
    return [r.name for r in d.all_rows() if r.p_value is not None and r.p_value < 1e-6
            and r.change is not None and abs(r.change) > 1.0 and r.verdict == "within-noise"]


# ------------------------------------------------------------------------ (a) chargpt widened
def test_a_widened_model_is_named_first_and_its_layers_are_not_a_group_shift():
    """minGPT's chargpt widened: 0.67 -> 2.35 GFLOP a step (3.51x). run --layers: ten blocks
    under GPT.* of 1 ms take 1.6, 1.7, ..., 2.5 ms and one small layer 0.01 -> 0.61 ms
    (+6000%), steady runs (every new step above every base step: p = 5.9e-8, the normal
    approximation with the ties of 20 against 20). The group shift of GPT.* was the median of
    those 11 changed rows (2.1x, +110%), and their typical move beyond it +-0.21 ms: every
    block and the small layer (0.61 / 2.1 - 0.01 = 0.28 ms beyond the shift, under 2.447 x
    0.21) read "within-noise, as its group". No row's work is known to be unchanged: no shift, no
    typical move, every layer slower, each saying the model changed; the summary names the
    FLOPs first, and the step (2.1x for 3.51x the FLOPs) is what they explain."""
    layers_base = {f"GPT.h.{i}.mlp": _scaled(1.0) for i in range(10)}
    layers_new = {f"GPT.h.{i}.mlp": _scaled(1.6 + 0.1 * i) for i in range(10)}
    layers_base["GPT.h.0.attn.drop"], layers_new["GPT.h.0.attn.drop"] = _scaled(0.01), \
        _scaled(0.61)
    base = _run(0.67e9, {"forward": _scaled(10.0), "backward": _scaled(20.0),
                         "optimizer": _scaled(1.0)}, layers_base)
    new = _run(2.35e9, {"forward": _scaled(21.0), "backward": _scaled(42.0),
                        "optimizer": _scaled(3.5)}, layers_new)
    d = diff_results([base, new])
    assert d.summary.startswith("the model does 3.51× the FLOPs per step (0.67 → 2.35 GFLOP): "
                                "step 115% slower beyond noise, expected from that alone")
    layers = [r for r in d.rows if r.level == "layer"]
    assert len(layers) == 11 and all(r.verdict == "slower" for r in layers)
    assert all(r.explanation == "the model changed (FLOPs 0.67 → 2.35 GFLOP): no shift across "
                                "rows" for r in layers)
    assert not any("as its group" in r.explanation for r in d.rows)
    assert [n for n in d.notes if "moved together" in n] == []
    assert no_large_change_within_noise(d) == []
    assert [(c.fact, c.base, c.new, c.work) for c in d.static_changes] == [
        ("flops", 0.67e9, 2.35e9, 1)]
    assert d.static_changes[0].ratio == pytest.approx(2.35 / 0.67)


# ------------------------------------------------------------------------- (b) MLP 128 -> 448
def _mlp_flops(width: int, batch: int = 32) -> int:
    """A 784 -> width -> width -> 10 MLP's training step: 6 FLOPs per MAC per sample (2 forward,
    4 backward): 6 x 32 x (784 w + w^2 + 10 w); 128: 22,659,072; 448: 106,831,872 (4.71x)."""
    return 6 * batch * (784 * width + width * width + 10 * width)


def test_a_wider_mlp_whose_new_run_wandered_is_slower_not_within_noise():
    """A 3-layer MLP 128 -> 448 wide, as measured on a loaded 2-core machine: the wide run's
    first quarter of steps took a backward of 9.75 ms against 0.75 ms later: its block medians'
    log standard deviation is ln 13 / 2 = 1.28, and the drift rule allowed a change of
    exp(2.447 x 1.28) = 23.1x. Forward +206%, backward +188%,
    optimizer +259%, p 5.9e-8, read "within-noise" by the backward's and the step's own
    drift. Their work grew 4.71x the way their time moved: the wander of their own blocks is
    not taken for noise (no row's work is known unchanged to measure one), each is slower and
    says its size is uncertain; the data phase, the same in both, stays within the noise."""
    assert (_mlp_flops(128), _mlp_flops(448)) == (22_659_072, 106_831_872)
    warm = [13.0] * 5 + [1.0] * 15  # the first block 13x the rest
    base = _run(_mlp_flops(128), {"data": _scaled(0.05), "forward": _scaled(0.16),
                                  "backward": _scaled(0.26), "optimizer": _scaled(0.094),
                                  "other": _scaled(0.176)})
    new = _run(_mlp_flops(448), {
        "data": _scaled(0.05), "forward": _scaled(0.49),
        "backward": [0.75 * w * x for w, x in zip(warm, STEADY)],
        "optimizer": _scaled(0.337), "other": _scaled(0.282)})
    d = diff_results([base, new])
    assert {r.name: r.verdict for r in d.rows} == {
        "forward": "slower", "backward": "slower", "optimizer": "slower", "other": "slower",
        "data": "within-noise"}
    assert d.end_to_end.verdict == "slower"
    assert d.summary.startswith("the model does 4.71× the FLOPs per step (22.7 → 107 MFLOP): "
                                "step ")
    backward = next(r for r in d.rows if r.name == "backward")
    assert "its own runs' levels wandered up to ×23.1: its work changed" in backward.explanation
    assert no_large_change_within_noise(d) == []


# ---------------------------------------------------------- (c) a group shift from changed rows
def test_a_group_shift_is_never_taken_from_rows_whose_work_changed():
    """run --layers of a model made 2.5x wider: all 8 layers under net.* 2.5x slower in every
    step (p = 5.9e-8, +150%). Taken for the group's shift (their median), it called all 8
    within the noise "as its group: net.* moved by +150.0%", with the whole model's FLOPs 2.5x
    in the results. The same eight with the same FLOPs on both sides are one process moving
    as a whole: within the noise, as before."""
    layers = {f"net.{i}": _scaled(1.0) for i in range(8)}
    wide = {n: _scaled(2.5) for n in layers}
    phases = {"forward": _scaled(8.0), "backward": _scaled(16.0)}
    base = _run(1e9, phases, layers)
    new = _run(2.5e9, {"forward": _scaled(20.0), "backward": _scaled(40.0)}, wide)
    d = diff_results([base, new])
    rows = [r for r in d.rows if r.level == "layer"]
    assert {r.verdict for r in rows} == {"slower"}
    assert not any("as its group" in r.explanation for r in rows)
    assert no_large_change_within_noise(d) == []
    same = _run(1e9, {"forward": _scaled(20.0), "backward": _scaled(40.0)}, wide)
    d = diff_results([base, same])
    assert d.static_changes == []
    assert {r.verdict for r in d.rows if r.level == "layer"} == {"within-noise"}
    assert all("as its group: net.* moved by +150.0%" in r.explanation
               for r in d.rows if r.level == "layer")


# ------------------------------------------------- the drift the rows share, and the settings
def _wide_profile(scale: float, wander: list[float] | None = None):
    """profile_report() with 12 layers l0..l11 of 0.1 ms (steady, or wandering by ``wander``'s
    block levels) x ``scale``."""
    r = profile_report()
    proto = r.layers[0]
    r.layers, r.by_type = [], []
    for i in range(12):
        row = copy.deepcopy(proto)
        row.name = f"l{i}"
        levels = wander if wander is not None and i < 8 else [1.0] * 4
        xs = [lv * f for lv in levels for f in (0.995, 1.0, 1.005, 0.9975, 1.0025)]
        row.time = TimingStats.of([1e-4 * scale * x for x in xs], keep=True).to_dict()
        r.layers.append(row)
    r.end_to_end = r.end_to_end | TimingStats.of([1.2e-3 * x for x in STEADY],
                                                 keep=True).to_dict()
    return r


def test_the_drift_the_rows_share_comes_from_rows_whose_work_did_not_change():
    """8 layers whose input doubled wander by 1.5x between blocks (block medians 1, 1.5, 1,
    1.5: a log standard deviation of ln 1.5 / sqrt(3) = 0.234 a side, tolerance 2.447 x
    sqrt(2) x 0.234 = 0.81) and take 1.8x; 4 steady unchanged layers, l11 of them 1.4x (ln
    1.4 = 0.34) in every run. The median of all 12 tolerances (0.81) cleared l11 as drift shared by
    the rows; of the 4 unchanged rows (0) it does not: l11 is slower, with nothing in its
    static figures to say why (same shapes and work). The 8 that grew are within their own
    drift, exp(0.81) = 2.25x, and say so."""
    base = _wide_profile(1.0, [1.0, 1.5, 1.0, 1.5])
    new = _wide_profile(1.0, [1.8, 2.7, 1.8, 2.7])
    for row in new.layers[:8]:
        row.input_shapes = [[2 * s[0], *s[1:]] for s in row.input_shapes]
        row.macs *= 2
        row.flops *= 2
    l11 = new.layers[11]
    l11.time = TimingStats.of([x * 1.4 for x in l11.time["samples_s"]], keep=True).to_dict()
    d = diff_results([base, new])
    rows = {r.name: r for r in d.rows if r.level == "layer"}
    assert rows["l11"].verdict == "slower"
    assert rows["l11"].explanation == "same shapes and work on both sides"
    # the 8 that grew moved 1.8x, under WORK_MOVED (2x): within their own runs' drift, said
    assert {n for n, r in rows.items() if r.verdict == "within-noise"} == {
        *(f"l{i}" for i in range(8)), "l8", "l9", "l10"}
    assert rows["l0"].explanation.startswith("its input grew from 1x3x32x32 to 2x3x32x32 (2x)")
    assert rows["l0"].explanation.endswith("within the drift of the runs' levels (up to ×2.25)")


def test_other_threads_leave_no_row_comparable():
    """profile at 4 torch threads against 2: every one of 12 layers 1.6x. Their median was taken
    for the whole run's shift and every layer read "as the whole run"; with another thread
    count no row's time is comparable: no shift, every layer slower and saying why, and the
    summary names the threads first."""
    from layerscope.core.noise import MachineReading, noise_section

    base, new = _wide_profile(1.0), _wide_profile(1.6)
    new.settings = dict(new.settings, threads=2)
    new.noise = noise_section(TimingStats.of(STEADY), MachineReading((0.4, 0.3, 0.2), 8, 8), 2)
    new.end_to_end = new.end_to_end | TimingStats.of([1.9e-3 * x for x in STEADY],
                                                     keep=True).to_dict()
    d = diff_results([base, new])
    layers = [r for r in d.rows if r.level == "layer"]
    assert {r.verdict for r in layers} == {"slower"}
    assert all(r.explanation == "the run changed (torch threads 4 → 2): no shift across rows; "
                                "same shapes and work on both sides" for r in layers)
    assert d.summary.startswith("torch threads 4 → 2: forward pass 58% slower beyond noise")
    assert d.summary.endswith("(unfair: torch threads)")


# ------------------------------------------------------------------- what each kind records
def _train(**config):
    r = train_report()
    r.config = {"device": "cpu", **config}
    return r


@pytest.mark.parametrize("base, new, texts", [
    pytest.param(lambda: _run(0.67e9, {"forward": _scaled(1.0)}),
                 lambda: _run(2.35e9, {"forward": _scaled(1.0)}),
                 ["the model does 3.51× the FLOPs per step (0.67 → 2.35 GFLOP)"], id="run-flops"),
    # a 0.5% move of a run's median FLOPs per step (odd batches) is the same model
    pytest.param(lambda: _run(1e9, {"forward": _scaled(1.0)}),
                 lambda: _run(1.005e9, {"forward": _scaled(1.0)}), [], id="run-flops-close"),
    pytest.param(lambda: _run(None, {"forward": _scaled(1.0)}),
                 lambda: _run(2e9, {"forward": _scaled(1.0)}), [], id="one-side-not-counted"),
    pytest.param(lambda: _train(batch_size=32, amp=False, compile=False, threads=2),
                 lambda: _train(batch_size=64, amp=True, compile=True, threads=1),
                 ["batch size 32 → 64", "torch.compile off → on", "autocast off → on",
                  "torch threads 2 → 1"], id="train-settings"),
    pytest.param(lambda: ALL["profile"](), lambda: _bigger_profile(),
                 ["the model does 1.5× the FLOPs per forward pass (1.31 → 1.97 MFLOP)",
                  "parameters 164K → 329K (2×)",
                  "the input grew from 1x3x32x32 to 8x3x32x32 (8x)",
                  "dtype float32 → bfloat16"], id="profile"),
    pytest.param(lambda: ALL["loop"](), lambda: _loop(batch=128, threads=1),
                 ["batch size 64 → 128", "torch threads 2 → 1"], id="loop"),
    pytest.param(lambda: ALL["sweep"](), lambda: _sweep([[1, 3, 64, 64]]),
                 ["the input grew from 1x3x32x32 to 1x3x64x64 (4x)"], id="sweep"),
    pytest.param(lambda: ALL["scaling"](), lambda: _scaling(32),
                 ["batch size 64 → 32"], id="scaling"),
])
def test_static_changes_of_each_kind(base, new, texts):
    a, b = base(), new()
    assert [c.text for c in static_changes(a, b, timed(a), timed(b))] == texts


def _bigger_profile():
    """profile_report() with FLOPs x1.5 (1,310,730 -> 1,966,095), parameters x2 (164,330 ->
    328,660), a batch of 8 and bfloat16 inputs."""
    r = ALL["profile"]()
    r.totals.flops = r.totals.flops * 3 // 2
    r.totals.params *= 2
    r.inputs = [{"shape": [8, 3, 32, 32], "dtype": "bfloat16"}]
    return r


def _loop(batch, threads):
    r = ALL["loop"]()
    r.batch_size, r.settings = batch, dict(r.settings, threads=threads)
    return r


def _sweep(inputs):
    r = ALL["sweep"]()
    r.settings = dict(r.settings, inputs=inputs)
    return r


def _scaling(batch):
    r = ALL["scaling"]()
    for p in r.points:
        p.batch_per_rank = batch
    return r


@pytest.mark.parametrize("ratio, base_ms, new_ms, text", [
    # 3.5x the FLOPs, the step 1.94x: no further than the FLOPs moved
    pytest.param(3.5, 1.0, 1.94, "expected from that alone", id="within-flops"),
    # 2x the FLOPs, the step 5x in steady runs: ln 5 - ln 2 = 0.92 beyond any drift
    pytest.param(2.0, 1.0, 5.0, "more than that alone explains (5× the time for 2× the FLOPs)",
                 id="beyond-flops"),
    # half the FLOPs, the step 0.8x: expected; 0.3x: more than the FLOPs explain
    pytest.param(0.5, 1.0, 0.8, "expected from that alone", id="fewer-flops"),
    pytest.param(0.5, 1.0, 0.3, "more than that alone explains (0.3× the time for 0.5× the "
                 "FLOPs)", id="fewer-flops-faster-still"),
    # 2x the FLOPs, the step 2.5x, the new run's blocks wandering 1x, 3x, 1x, 3x: ln 1.25 =
    # 0.22 further than the FLOPs, within the drift (2.447 x ln 3 / sqrt(3) = 1.55)
    pytest.param(2.0, 1.0, [2.5, 7.5, 2.5, 7.5, 2.5],
                 "within the runs' drift of what that alone explains (2.5× the time for 2× the "
                 "FLOPs)", id="beyond-flops-within-drift"),
    # more FLOPs and faster: nothing said here (the summary says "yet")
    pytest.param(2.0, 1.0, 0.7, "", id="apart"),
])
def test_the_step_read_against_the_flops(ratio, base_ms, new_ms, text):
    from layerscope.core.diff_records import StaticChange

    changes = [StaticChange("flops", 1e9, ratio * 1e9, "", ratio, 1 if ratio > 1 else -1)]
    def side(ms):  # steady runs of a median ms, or blocks of 5 runs at these levels
        if isinstance(ms, float):
            return Measure("end_to_end", "end_to_end", ms / 1e3, samples=_steady(ms))
        xs = [lv / 1e3 * f for lv in ms[:4] for f in STEADY[:5]]
        return Measure("end_to_end", "end_to_end", ms[4] / 1e3, samples=xs)

    sides = (side(base_ms), side(new_ms))
    assert expected_from_flops(changes, sides) == text


def test_more_work_and_faster_says_yet():
    base = _run(1e9, {"forward": _scaled(10.0)})
    new = _run(2e9, {"forward": _scaled(5.0)})
    d = diff_results([base, new])
    assert d.summary.startswith("the model does 2× the FLOPs per step (1 → 2 GFLOP), yet step "
                                "50% faster beyond noise")


def test_static_changes_round_trip_and_stay_out_of_an_unchanged_diffs_json():
    from layerscope.core.results import load_result

    d = diff_results([_run(1e9, {"forward": _scaled(1.0)}), _run(2e9, {"forward": _scaled(2.0)})])
    back = load_result(json.loads(json.dumps(d.to_dict())))
    assert back.static_changes == d.static_changes
    assert "static_changes" not in diff_results([train_report(), train_report()]).to_dict()


# -------------------------------------------------------- a real script at two widths (load-proof)
SCRIPT = """
import sys, torch, torch.nn as nn
width = int(sys.argv[1])
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
for _ in range(12):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_two_runs_of_one_script_at_two_widths(tmp_path):
    """``layerscope run`` of one script at widths 16 and 256, then diff: what no load can flip
    -- the FLOPs change named first with both results' own counts, every row saying the model
    changed, no row with p < 1e-6 and a change over 100% within the noise."""
    script = tmp_path / "wide.py"
    script.write_text(SCRIPT)
    paths = []
    for width in (16, 256):
        path = tmp_path / f"w{width}.json"
        code, _, err = run_cli("run", "-o", str(path), "--", str(script), str(width))
        assert code == 0, err
        paths.append(path)
    flops = [json.loads(p.read_text())["efficiency"]["model_flops_per_step"] for p in paths]
    code, out, err = run_cli("diff", *map(str, paths), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    ratio = flops[1] / flops[0]
    assert ratio > 10
    assert d["summary"].startswith(f"the model does {ratio:.3g}× the FLOPs per step (")
    assert [c["fact"] for c in d["static_changes"]] == ["flops"]
    assert all(r["explanation"].startswith("the model changed (FLOPs ") for r in d["rows"])
    assert [r["name"] for r in d["rows"] + [d["end_to_end"]]
            if r.get("p_value") is not None and r["p_value"] < 1e-6
            and r["change"] is not None and abs(r["change"]) > 1.0
            and r["verdict"] == "within-noise"] == []
    assert math.isfinite(ratio)
