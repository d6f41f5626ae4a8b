"""layerscope diff: the rank test on fixed samples, verdicts from the runs' own samples (never a
fixed percentage), static explanations through compare, --fail-if exit codes, several base
files, kinds that differ, and old results without samples."""
import copy
import json
import math

import pytest

from layerscope.analysis.diff import diff_results, failed_checks, parse_check
from layerscope.analysis.diff.join import SAME_WORK, pattern
from layerscope.analysis.diff.measures import TIMED_KINDS, Measure
from layerscope.analysis.diff.verdict import judge
from layerscope.core.errors import UserError
from layerscope.core.results import load_result
from layerscope.core.stats import (
    TimingStats,
    block_drift,
    holm_adjusted,
    mann_whitney_u,
    t_quantile,
)
from layerscope.renderers.markdown_out import to_markdown
from layerscope.views import VIEWS
from tests.helpers import run_cli
from tests.sample_results import (
    ALL,
    analyze_report,
    diff_profiles,
    profile_report,
    train_report,
)


# --------------------------------------------------------------------------- the statistic
@pytest.mark.parametrize("a, b, u, p", [
    # b above every a: U = 5 x 5 = 25; exact: 2 of the C(10, 5) = 252 orders are as extreme
    pytest.param([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], 25, 2 / 252, id="separated-5v5"),
    # pairs with b > a: 1 + 2 + 3 = 6 = mu + 1.5; P(U <= 3) = (1 + 1 + 2 + 3) / C(6, 3) = 7/20
    pytest.param([1, 2, 3], [1.5, 2.5, 3.5], 6, 0.7, id="interleaved-3v3"),
    # ties (2 x3, 3 x3): U = 24, mu = 15, var = 30/12 (12 - 48/110) = 28.909,
    # z = (9 - 0.5) / 5.3768 = 1.5809, p = erfc(z / sqrt 2) = 0.1139
    pytest.param([1, 2, 2, 3, 4], [2, 3, 3, 5, 6, 7], 24,
                 math.erfc((9 - 0.5) / math.sqrt(2.5 * (12 - 48 / 110)) / math.sqrt(2)),
                 id="ties-normal-approximation"),
    pytest.param([1, 1, 1], [1, 1, 1], 4.5, 1.0, id="all-equal"),
    # b below every a: U = 0, the same two-sided p as separated-5v5
    pytest.param([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], 0, 2 / 252, id="reversed"),
])
def test_mann_whitney_u(a, b, u, p):
    got_u, got_p = mann_whitney_u(a, b)
    assert got_u == u
    assert got_p == pytest.approx(p, rel=1e-9)


def test_mann_whitney_u_needs_both_sides():
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])


def _m(samples=None, median=None, p10=None, p90=None):
    if samples is not None:
        s = TimingStats.of(samples)
        return Measure("x", "layer", s.median_s, s.p10_s, s.p90_s, list(samples))
    return Measure("x", "layer", median, p10, p90)


@pytest.mark.parametrize("base, new, spread, verdict, basis", [
    pytest.param(_m([1, 2, 3, 4, 5]), _m([6, 7, 8, 9, 10]), None, "slower", "rank test",
                 id="rank-test-slower"),
    pytest.param(_m([6, 7, 8, 9, 10]), _m([1, 2, 3, 4, 5]), None, "faster", "rank test",
                 id="rank-test-faster"),
    pytest.param(_m([1, 3, 5, 7, 9]), _m([2, 4, 6, 8, 10]), None, "within-noise", "rank test",
                 id="rank-test-overlapping"),
    # 1000 runs each, new 1% slower in every run: p is tiny, but under the 3% minimum effect
    pytest.param(_m([1 + i / 100_000 for i in range(1000)]),
                 _m([1.01 * (1 + i / 100_000) for i in range(1000)]), None, "within-noise",
                 "rank test", id="significant-but-tiny"),
    pytest.param(_m(median=1.0, p10=0.9, p90=1.1), _m(median=1.3, p10=1.2, p90=1.4), None,
                 "slower", "p10-p90 overlap", id="old-result-no-overlap"),
    pytest.param(_m(median=1.0, p10=0.9, p90=1.1), _m(median=1.15, p10=1.05, p90=1.25), None,
                 "within-noise", "p10-p90 overlap", id="old-result-overlap"),
    pytest.param(_m(median=1.0), _m(median=1.2), 0.1, "slower", "end-to-end spread",
                 id="mean-only-beyond-spread"),
    pytest.param(_m(median=1.0), _m(median=1.05), 0.1, "within-noise", "end-to-end spread",
                 id="mean-only-within-spread"),
])
def test_judge(base, new, spread, verdict, basis):
    v = judge(base, new, spread)
    assert (v.verdict, v.basis) == (verdict, basis)


def test_significant_but_tiny_has_a_small_p():
    """The minimum effect, not the test, keeps the 1% change within the noise."""
    _, p = mann_whitney_u([1 + i / 100_000 for i in range(1000)],
                          [1.01 * (1 + i / 100_000) for i in range(1000)])
    assert p < 0.05


# --------------------------------------------------------------- the hand-made profile pair
def test_sample_diff_names_the_layer_and_its_shape_change():
    """diff_profiles: conv1's input grew 4x and it took twice as long in every run; the forward
    pass 0.4158 -> 0.6633 ms (+59.5%), all of it conv1's 0.2475 ms."""
    d = ALL["diff"]()
    assert d.end_to_end.verdict == "slower" and d.end_to_end.basis == "rank test"
    assert d.end_to_end.change == pytest.approx(0.2475 / 0.4158)
    assert d.end_to_end.p_value == pytest.approx(2 / math.comb(20, 10))
    flagged = {(r.level, r.name) for r in d.rows if r.beyond_noise}
    assert flagged == {("layer", "conv1"), ("type", "Conv2d")}
    conv1 = next(r for r in d.rows if r.name == "conv1")
    assert conv1.change == pytest.approx(1.0)
    assert conv1.explanation.startswith("its input grew from 1x3x32x32 to 1x3x64x64 (4x)")
    assert "MACs +300%" in conv1.explanation
    # the static side first: the model's input grew (conv1's, said once)
    assert d.summary == ("the input grew from 1x3x32x32 to 1x3x64x64 (4x): forward pass 60% "
                         "slower beyond noise; 60 of the 60 points from conv1")
    assert d.unfair == []


def test_sample_diff_as_markdown_and_json():
    d = ALL["diff"]()
    md = to_markdown(d)
    assert "| Level | Name |" in md and "**end to end**" in md
    back = load_result(json.loads(json.dumps(d.to_dict())))
    assert back.summary == d.summary and back.rows[0].to_dict() == d.rows[0].to_dict()


def test_old_results_without_samples_use_the_p10_p90_overlap():
    """profile_report() keeps no samples (as results saved before them): every row is judged
    on its p10-p90 range (timing(): median +-10%)."""
    base, new = profile_report(), profile_report()
    for row in new.layers:
        if row.name == "fc":
            row.time = dict(row.time, median_s=row.time["median_s"] * 2,
                            p10_s=row.time["p10_s"] * 2, p90_s=row.time["p90_s"] * 2)
    d = diff_results([base, new])
    assert {r.basis for r in d.all_rows()} == {"p10-p90 overlap"}
    assert [r.name for r in d.rows if r.beyond_noise] == ["fc"]
    fc = next(r for r in d.rows if r.name == "fc")
    assert fc.verdict == "slower" and fc.explanation == SAME_WORK
    assert d.end_to_end.verdict == "within-noise"  # its figures are unchanged


def test_more_than_two_files_pool_the_baseline():
    base, new = diff_profiles()
    base2 = copy.deepcopy(base)
    d = diff_results([base, base2, new], names=["a.json", "b.json", "c.json"])
    assert [(f.path, f.role) for f in d.files] == [("a.json", "base"), ("b.json", "base"),
                                                   ("c.json", "new")]
    assert d.end_to_end.base_n == 20 and d.end_to_end.new_n == 10
    # 20 base runs (10 values, each twice: ties) all below 10 new runs: U = 200, mu = 100,
    # var = 200/12 (31 - 10 x 6 / (30 x 29)), the normal approximation
    z = (200 - 100 - 0.5) / math.sqrt(200 / 12 * (31 - 60 / 870))
    assert d.end_to_end.p_value == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert d.end_to_end.verdict == "slower"


def test_same_results_are_within_noise_everywhere():
    for kind in TIMED_KINDS:
        d = diff_results([ALL[kind](), ALL[kind]()])
        assert all(r.verdict == "within-noise" for r in d.all_rows()), kind
        assert d.all_rows(), kind


def test_analyze_is_static_only():
    base, new = diff_profiles()
    for r in (base, new):
        r.kind = "analyze"
        r.end_to_end = r.by_type = None
        for row in r.layers:
            row.time = None
    d = diff_results([base, new])
    assert d.end_to_end is None
    assert [(r.name, r.verdict, r.basis) for r in d.rows] == [("conv1", "changed", "static")]
    assert d.rows[0].static == {"macs": 3 * 442_368}
    assert d.summary.startswith("static only (no timing): the input grew from 1x3x32x32 to "
                                "1x3x64x64 (4x)")
    # no verdict of a rank test to describe: the heading says what was compared
    assert VIEWS["diff"].heading(d)[1] == ("base result 1 · new result 2 · static figures "
                                           "joined by module path (nothing timed)")


def test_analyze_names_a_wider_layers_output_and_a_figure_from_zero():
    """fc made twice as wide (10 -> 20 outputs, as an LLM config's intermediate_size): the
    same input, so its output's change is what names it; params 16384 x 20 + 20 = 327,700
    against 163,850 (+100%), 80 bytes written instead of 40. relu in place in the base (no new
    tensor: activation bytes 0) and out of place in the new (65,536 bytes): a change from 0,
    which no percentage can say."""
    base, new = analyze_report(), analyze_report()
    fc = new.layers[-1]
    fc.output_shapes, fc.params, fc.macs = [[1, 20]], 327_700, 327_680
    fc.activation_bytes = fc.bytes_written = 80
    base.layers[2].activation_bytes = 0
    d = diff_results([base, new])
    rows = {r.name: r.explanation for r in d.rows}
    assert rows["fc"] == ("its output grew from 1x10 to 1x20 (2x); MACs +100%, parameters "
                          "+100%, activation bytes +100%")
    assert rows["relu"] == "activation bytes from 0 to 65.54K; in-place in A"


def test_train_step_attributed_to_the_phase():
    """Every step's backward 11 -> 16.5 ms (x1.5) over 20 steps with a 2% spread."""
    base, new = train_report(), train_report()
    for r, scale in ((base, 1.0), (new, 1.5)):
        steps = [{"forward": 0.006 * (1 + 0.001 * i), "backward": 0.011 * scale * (1 + 0.001 * i),
                  "other": 0.0045} for i in range(20)]
        r.step_phases = {p: [s[p] for s in steps] for p in ("forward", "backward", "other")}
        r.step_seconds = [sum(s.values()) for s in steps]
    d = diff_results([base, new])
    assert d.end_to_end.verdict == "slower"
    flagged = [r.name for r in d.rows if r.beyond_noise]
    assert flagged == ["backward"]
    assert d.summary.startswith("step 26% slower beyond noise; 26 of the 26 points from "
                                "backward")


def test_pattern():
    assert pattern("layer3.0.conv2") == "layer3.*.conv2"
    assert pattern("fc") == "fc"
    # the last part names the layer: an nn.Sequential's children are not one group
    assert pattern("3") == "3" and pattern("features.3") == "features.3"
    assert pattern("layer1.0.shortcut.0") == "layer1.*.shortcut.0"


# -------------------------------------------------------------------------------- --fail-if
@pytest.mark.parametrize("expr, failed", [
    ("step>+5%", 1), ("end_to_end>+5%", 1), ("step>+80%", 0), ("step<-5%", 0),
    ("layer:conv*>+10%", 1), ("layer:fc>+1%", 0), ("type:Conv2d>+50%", 1),
    ("phase:backward>+10%", 0), ("step > 5 %", 1),
])
@pytest.mark.filterwarnings("ignore::layerscope.core.errors.LayerscopeWarning")  # phase: none
def test_failed_checks(expr, failed):
    assert len(failed_checks(ALL["diff"](), [expr])) == failed


@pytest.mark.parametrize("kind, expr, warning", [
    ("sweep", "step>+5%", "'step>+5%' can never fail: a sweep diff has no end-to-end row (its "
                          "rows: cell)"),
    ("profile", "phase:data>+5%", "'phase:data>+5%' can never fail: a profile diff has no "
                                  "phase rows (its rows: end_to_end, type, layer)"),
    ("analyze", "layer:*>+5%", "'layer:*>+5%' can never fail: an analyze diff is static "
                               "(nothing in it is slower or faster)"),
    ("train", "phase:data>+5%", None), ("scaling", "point:*>+5%", None),
])
def test_a_check_that_can_never_fail_warns(kind, expr, warning):
    """A CI gate that cannot fail looks like one that passed: an expression whose level the
    diffed kind has no rows of says so (a pattern matching no row of a level it has does
    not)."""
    import warnings

    from layerscope.core.errors import LayerscopeWarning

    d = diff_results([ALL[kind](), ALL[kind]()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert failed_checks(d, [expr]) == []
    said = [str(w.message) for w in caught if issubclass(w.category, LayerscopeWarning)]
    assert said == ([warning] if warning else [])


@pytest.mark.parametrize("expr", ["bogus", "step>5", "layer>+5%", "gpu:0>+5%", "step=5%",
                                  "layer:>+5%"])
def test_malformed_expression_is_one_line(expr):
    with pytest.raises(UserError) as e:
        parse_check(expr)
    assert "\n" not in str(e.value) and expr in str(e.value)


def _save(tmp_path, result, name):
    path = tmp_path / name
    path.write_text(json.dumps(result.to_dict()))
    return str(path)


@pytest.fixture
def pair(tmp_path):
    base, new = diff_profiles()
    return _save(tmp_path, base, "base.json"), _save(tmp_path, new, "new.json")


@pytest.mark.parametrize("flags, code", [
    ([], 0), (["--fail-if", "step>+80%"], 0), (["--fail-if", "step>+5%"], 1),
    (["--fail-if", "step>+80%", "--fail-if", "layer:conv1>+50%"], 1),
    (["--fail-if", "step>>5%"], 2),
])
def test_cli_exit_codes(pair, flags, code):
    got, out, err = run_cli("diff", *pair, *flags)
    assert got == code, err
    if code == 1:
        assert "layerscope: diff failed:" in err and "slower beyond noise" in err
    if code == 2:
        assert err.count("\n") == 1 and out == ""
    if code == 0:
        assert err == ""


def test_cli_formats(pair, tmp_path):
    for fmt, needle in (("json", '"kind": "diff"'), ("csv", "level,name,type,base_s"),
                        ("md", "| Level | Name |"), ("html", "diff-rows"),
                        ("table", "60 of the 60 points")):
        code, out, err = run_cli("diff", *pair, "--format", fmt)
        assert code == 0 and needle in out, (fmt, err)
    target = tmp_path / "d.md"
    code, _, err = run_cli("diff", *pair, "-o", str(target))
    assert code == 0 and target.read_text().startswith("### tinynet — diff (profile)")


def test_cli_different_kinds_and_too_few(pair, tmp_path):
    train = _save(tmp_path, train_report(), "train.json")
    code, out, err = run_cli("diff", pair[0], train)
    assert code == 2 and out == ""
    assert err.strip() == ("layerscope: error: diff compares results of one kind, got "
                           f"{pair[0]} is profile, {train} is train: diff two results of "
                           "the same command")
    code, out, err = run_cli("diff", pair[0])
    assert code == 2 and err.count("\n") == 1
    compare = _save(tmp_path, ALL["compare"](), "c.json")
    code, out, err = run_cli("diff", compare, compare)
    assert code == 2 and "diff reads analyze, profile" in err


# ------------------------------------------------------------------- a real profile, perturbed
@pytest.fixture(scope="module")
def real_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("diff") / "p.json"
    code, _, err = run_cli("profile", "mnist-cnn", "--runs", "10", "--warmup", "1", "-o",
                           str(path))
    assert code == 0, err
    return json.loads(path.read_text())


@pytest.mark.integration
def test_real_profile_keeps_samples(real_profile):
    assert len(real_profile["end_to_end"]["samples_s"]) == 10
    assert all(len(r["time"]["samples_s"]) == 10 for r in real_profile["layers"])
    assert all(len(t["time"]["samples_s"]) == 10 for t in real_profile["by_type"])


def test_real_profile_against_itself_is_within_noise(real_profile):
    d = diff_results([load_result(real_profile), load_result(real_profile)])
    assert {r.verdict for r in d.all_rows()} == {"within-noise"}
    assert {r.basis for r in d.all_rows()} == {"rank test"}


def test_real_profile_one_layer_slower(real_profile):
    """fc1, its type and the forward pass made slower in every run: each run multiplied by
    3 R^2, R the largest max / min of any timed figure's own runs in the profile, so each new
    run is above every base run and the log change, 2 ln R + ln 3, is beyond the drift
    tolerance whatever the machine's noise. A figure's tolerance is t(0.975, 6) sqrt(2) times
    the standard deviation of the logs of its 4 block medians, which lie within [min, max], so
    at most 2.447 sqrt(2) ln(max / min) / sqrt(3) < 2 ln(max / min) <= 2 ln R; and a row's
    tolerance is at least the median of the rows' (the drift floor), each of them under 2 ln R
    as well. (Taking fc1's own max / min instead of R failed 1 run in 9 on a loaded machine:
    the floor, from rows that wandered more than fc1, was above fc1's change.)
    Those are flagged (10 against 10 runs all above: p = 2/C(20, 10); Holm over the rows
    multiplies a row's p by at most the number of rows, still far under 0.05, where 5 runs a
    side, whose smallest p is 2/252, could not pass it), nothing else."""
    new = copy.deepcopy(real_profile)
    row = next(r for r in new["layers"] if r["name"] == "fc1")
    timed = [new["end_to_end"], *(r["time"] for r in new["layers"]),
             *(t["time"] for t in new["by_type"])]
    spread = max(max(t["samples_s"]) / min(t["samples_s"]) for t in timed)

    def slower(t):
        xs = t["samples_s"]
        factor = 3 * spread ** 2
        t.update(TimingStats.of([x * factor for x in xs], keep=True).to_dict())

    slower(row["time"])
    slower(next(t for t in new["by_type"] if t["type"] == row["type"])["time"])
    slower(new["end_to_end"])
    d = diff_results([load_result(real_profile), load_result(new)])
    assert d.end_to_end.verdict == "slower"
    assert d.end_to_end.p_value == pytest.approx(2 / math.comb(20, 10))
    flagged = {(r.level, r.name) for r in d.rows if r.beyond_noise}
    assert flagged == {("layer", "fc1"), ("type", "Linear")}
    fc1 = next(r for r in d.rows if r.name == "fc1")
    assert fc1.explanation == SAME_WORK
    assert " points from fc1" in d.summary


# ------------------------------------------------------------------ real results, static change
def test_real_analyze_pair_names_the_shape_change(tmp_path):
    """resnet20 at 32x32 and at 64x64: every convolution's input and MACs grow 4x."""
    paths = []
    for size in (32, 64):
        path = tmp_path / f"r{size}.json"
        code, _, err = run_cli("analyze", "resnet20", "--input", f"1x3x{size}x{size}",
                               "--format", "json", "-o", str(path))
        assert code == 0, err
        paths.append(str(path))
    code, out, err = run_cli("diff", *paths, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["end_to_end"] is None and d["compared"] == "analyze"
    rows = {r["name"]: r for r in d["rows"]}
    conv = rows["layer3.0.conv2"]
    assert conv["verdict"] == "changed" and conv["basis"] == "static"
    assert conv["explanation"].startswith("its input grew from 1x64x8x8 to 1x64x16x16 (4x)")
    assert "MACs +300%" in conv["explanation"]
    assert d["summary"].startswith("static only (no timing): the input grew from 1x3x32x32 to "
                                   "1x3x64x64 (4x); MACs +300%")


def test_loop_and_train_keep_their_samples(tmp_path):
    loop = tmp_path / "loop.json"
    code, _, err = run_cli("profile", "mnist-cnn", "--loop", "mnist", "--synthetic", "--runs",
                           "3", "--batch-size", "4", "-o", str(loop))
    assert code == 0, err
    d = json.loads(loop.read_text())
    assert set(d["step_phases"]) == {"data", "h2d", "forward", "other"}
    assert all(len(xs) == 3 for xs in d["step_phases"].values())
    assert len(d["batch_time"]["samples_s"]) == 3
    train = tmp_path / "train.json"
    code, _, err = run_cli("train", "digits-cnn", "--steps", "3", "--synthetic", "--no-eval",
                           "--out", str(tmp_path / "run"), "--format", "json", "-o", str(train),
                           "--quiet")
    assert code == 0, err
    d = json.loads(train.read_text())
    assert {"forward", "backward", "optimizer"} <= set(d["step_phases"])
    assert all(len(xs) == len(d["step_seconds"]) for xs in d["step_phases"].values())
    code, out, err = run_cli("diff", str(train), str(train), "--format", "json")
    assert code == 0, err
    assert {r["verdict"] for r in json.loads(out)["rows"]} == {"within-noise"}


def test_markdown_is_generic_over_views():
    md = to_markdown(ALL["compare"]())
    assert md.startswith("### ") and "| Module |" in md and "|---|" in md


def test_unfair_differences_are_named_at_the_top():
    """Another CPU, 2 torch threads instead of 4, a machine 3.0 busier (load 0.4 -> 3.4) and a
    batch of 8: each is one line, and the summary names them."""
    from layerscope.core.noise import MachineReading, noise_section

    base, new = diff_profiles()
    new.environment = dict(new.environment, cpu="Other CPU 2000", torch_threads=2)
    e2e = {k: new.end_to_end[k] for k in ("median_s", "p10_s", "p90_s", "mean_s", "std_s",
                                          "iqr_s", "n")}
    new.noise = noise_section(TimingStats(**e2e), MachineReading((3.4, 1.0, 1.0), 8, 8), 2)
    new.inputs = [{"shape": [8, 3, 64, 64], "dtype": "float32"}]
    d = diff_results([base, new])
    assert d.unfair == ["CPU: Test CPU 3000 vs Other CPU 2000", "torch threads: 4 vs 2",
                        "batch size: 1 vs 8", "1-minute load average: 0.4 vs 3.4"]
    assert d.summary.endswith("(unfair: CPU, torch threads, batch size, 1-minute load average)")
    from layerscope.renderers import render

    out = render(d, "table", width=150)  # the terminal lists them under the summary
    assert out.index("Unfair comparison:") < out.index("Base against new")


@pytest.mark.parametrize("base_cfg, new_cfg, samples, unfair", [
    # layerscope run: the script's loader, no batch_size in the settings: samples per step
    pytest.param({}, {}, (64, 128), ["batch size: 64 vs 128"], id="run-batch-doubled"),
    # an epoch's last partial batch: 1000 samples of 64 a batch, 16 steps: 62.5 a step
    pytest.param({}, {}, (64, 62.5), [], id="run-partial-last-batch"),
    # run --threads 1 against a run with torch's default (2 here): the settings say 1
    pytest.param({"threads": 1}, {}, (64, 64), ["torch threads: 1 vs 2"], id="run-threads"),
    pytest.param({"batch_size": 32}, {"batch_size": 32}, (32, 32), [], id="train-same-batch"),
])
def test_unfair_batch_and_threads_of_runs(base_cfg, new_cfg, samples, unfair):
    """A ``layerscope run`` result names no batch size (the script's loader chose it) and
    --threads is undone before its environment is read: its samples per step and its settings'
    threads are what the unfair list compares."""
    base, new = train_report(), train_report()
    for r, cfg, per_step in ((base, base_cfg, samples[0]), (new, new_cfg, samples[1])):
        r.config = {"device": "cpu", "warmup_steps": 0, "steps": 16, **cfg}
        r.environment = dict(r.environment, torch_threads=2)
        r.breakdown = dict(r.breakdown, steps=16, samples=int(16 * per_step))
    d = diff_results([base, new])
    assert d.unfair == unfair


def test_unfair_batch_and_threads_of_scaling():
    """A scaling result's batch and threads are per rank, on its points: they were never
    compared (scaling --batch-size 32 against the recipe's 64 said nothing)."""
    base, new = ALL["scaling"](), ALL["scaling"]()
    for p in new.points:
        p.batch_per_rank, p.threads_per_rank = 32, 2
    assert diff_results([base, new]).unfair == ["torch threads: 1 vs 2", "batch size: 64 vs 32"]
    assert diff_results([base, ALL["scaling"]()]).unfair == []


@pytest.mark.parametrize("models, heading", [
    pytest.param(["main.py", "main.py"], "main.py", id="same"),
    # a script copied and made wider: the heading names both, not the new one alone
    pytest.param(["main.py", "wide.py"], "main.py → wide.py", id="changed"),
    pytest.param(["main.py", "main.py", "wide.py"], "main.py → wide.py", id="two-baselines"),
    pytest.param(["a.py", "b.py", "c.py"], "a.py, b.py → c.py", id="every-file-its-own"),
])
def test_heading_names_both_models(models, heading):
    runs = [train_report() for _ in models]
    for r, m in zip(runs, models):
        r.recipe = m
    d = diff_results(runs)
    assert d.model == heading
    assert VIEWS["diff"].heading(d)[0] == f"{heading} — diff (train)"


def test_hidden_layers_claim_the_same_work_only_where_it_was_compared():
    """profile results keep each layer's shapes and MACs (compared: "the same work"); a train
    result's layers keep only their time, so nothing says their work was the same."""
    from layerscope.renderers import render

    assert "layer(s) within noise and with the same work not shown" in render(
        diff_results([profile_report(), profile_report()]), "table", width=150)
    base, new = train_report(), train_report()
    for r in (base, new):
        r.layers = [{"name": n, "type": "Linear", "calls": 75, "forward_s": 0.075,
                     "forward_s_per_step": 0.001} for n in ("fc1", "fc2")]
    out = render(diff_results([base, new]), "table", width=150)
    assert "2 layer(s) within noise not shown (--all shows every row)" in out


def test_run_layers_are_ranked_by_their_steps():
    """run --layers keeps each step's forward seconds per layer: one step of 20 preempted
    (20 ms instead of about 1 ms) doubles the layer's mean per step (1.095 -> 2.045 ms), not its
    steps' ranks: within the noise by the rank test (an older result's means alone were judged
    against the end-to-end spread, here 0: "slower")."""
    base, new = train_report(), train_report()
    steps = [0.001 * (1 + 0.01 * i) for i in range(20)]
    for r, xs in ((base, steps), (new, steps[:-1] + [0.020])):
        r.layers = [{"name": "fc", "type": "Linear", "calls": 20, "forward_s": sum(xs),
                     "forward_s_per_step": sum(xs) / 20, "forward_samples_s": xs}]
    fc = diff_results([base, new]).rows[-1]
    assert (fc.name, fc.verdict, fc.basis) == ("fc", "within-noise", "rank test")
    assert (fc.base_n, fc.new_n) == (20, 20)
    for r in (base, new):  # an older result: the mean per step only
        del r.layers[0]["forward_samples_s"]
    fc = diff_results([base, new]).rows[-1]
    assert (fc.verdict, fc.basis) == ("slower", "end-to-end spread")
    assert fc.change == pytest.approx((sum(steps[:-1]) + 0.020) / sum(steps) - 1)


@pytest.mark.parametrize("first, warmup, noted", [
    # 20 steps of 10 ms, the first 5 (the first drift block) at 13 ms: 30% longer, measured
    pytest.param(0.013, 0, True, id="warm-up-measured"),
    pytest.param(0.012, 0, False, id="under-25%"),
    pytest.param(0.013, 5, False, id="warm-up-left-out"),  # the run left 5 out before these
])
def test_a_measured_warm_up_is_noted(first, warmup, noted):
    """A run without --warmup-steps whose first steps were slow: the drift rule reads the
    warm-up as wander of the run's level (an MNIST script's 58% slower step was within the
    noise so), and the note says so and what to pass."""
    base, new = train_report(), train_report()
    base.config = {"warmup_steps": warmup}
    base.step_seconds = [first] * 5 + [0.010] * 15
    d = diff_results([base, new])
    note = ("a result's first 5 of 20 steps took 30% longer than the rest: its warm-up was "
            "measured (no --warmup-steps), and the drift it makes widens what is within the "
            "noise; run with --warmup-steps 5")
    assert (note in d.notes) == noted


def test_renamed_layer_and_ranks():
    """fc renamed head (same position, same type): added and removed, each naming the other.
    A distributed run: each rank's median step is a row."""
    base, new = diff_profiles()
    new.layers[-1].name = "head"
    d = diff_results([base, new])
    rows = {r.name: r for r in d.rows if r.level == "layer"}
    assert rows["head"].verdict == "added" and rows["fc"].verdict == "removed"
    assert rows["head"].explanation == ("only in the new result; renamed from fc? (same position "
                                        "and type: Linear)")
    assert rows["fc"].explanation.startswith("only in the base result; renamed to head?")
    base, new = train_report(), train_report()
    for r, slow in ((base, 1.0), (new, 1.5)):
        r.ranks = [{"rank": 0, "step_s": 0.02, "phases": {}},
                   {"rank": 1, "step_s": 0.02 * slow, "phases": {}}]
        r.step_seconds = [0.02 * (1 + 0.01 * i) for i in range(10)]  # +-4%: the spread
    d = diff_results([base, new])
    ranks = {r.name: r for r in d.rows if r.level == "rank"}
    assert ranks["rank 0"].verdict == "within-noise"
    assert (ranks["rank 1"].verdict, ranks["rank 1"].basis) == ("slower", "end-to-end spread")
    assert failed_checks(d, ["rank:*>+40%"]) == [
        "rank:*>+40%: rank 1 +50.0% (slower beyond noise, end-to-end spread)"]


def test_several_baselines_hold_the_drift_between_runs():
    """Baseline runs of 50 samples at 1.0 and 5 at 1.4 (each tight: +-1%), a new run of 50 at
    1.3: the new run is above 2500 of the 2750 pairs (p far under 0.05), but 1.3 lies between
    the baseline runs' own medians, so within the noise; at 1.5 it is beyond them."""
    def m(median, n):
        return Measure("x", "layer", median, samples=[median * (0.99 + 0.02 * i / n)
                                                      for i in range(n)])

    from layerscope.analysis.diff.measures import pooled

    base = pooled([m(1.0, 50), m(1.4, 5)])
    assert mann_whitney_u(base.samples, m(1.3, 50).samples)[1] < 1e-6
    assert judge(base, m(1.3, 50), None).verdict == "slower"
    assert judge(base, m(1.3, 50), None, base_medians=[1.0, 1.4]).verdict == "within-noise"
    assert judge(base, m(1.5, 50), None, base_medians=[1.0, 1.4]).verdict == "slower"


# ------------------------------------------------- family-wise control and drift between runs
@pytest.mark.parametrize("ps, adjusted", [
    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): 4 x 0.005 = 0.02, 3 x 0.01 = 0.03,
    # 2 x 0.03 = 0.06, 1 x 0.04 = 0.04 -> the running maximum 0.06; back in the order given
    pytest.param([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02], id="step-down"),
    pytest.param([0.2], [0.2], id="one"),
    # 2 x 0.5 = 1.0 (capped at 1), then max(1.0, 0.6)
    pytest.param([0.5, 0.6], [1.0, 1.0], id="capped"),
    pytest.param([], [], id="none"),
])
def test_holm_adjusted(ps, adjusted):
    assert holm_adjusted(ps) == pytest.approx(adjusted)


@pytest.mark.parametrize("q, dof, t", [
    # dof 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2)) = 0.975 -> t^2 = 0.9025 (2 + t^2),
    # t = sqrt(1.805 / 0.0975) = 4.3027
    pytest.param(0.975, 2, math.sqrt(1.805 / 0.0975), id="dof-2"),
    pytest.param(0.975, 6, 2.4469, id="dof-6-table"),
    pytest.param(0.95, 10, 1.8125, id="dof-10-table"),
])
def test_t_quantile(q, dof, t):
    assert t_quantile(q, dof) == pytest.approx(t, abs=1e-4)


def _blocks(levels, n=5):
    """Samples in run order: one block of n per level, each level x (0.995, 1.0, 1.005,
    0.9975, 1.0025) -- within a block the median is the level itself."""
    pattern = [0.995, 1.0, 1.005, 0.9975, 1.0025][:n]
    return [level * f for level in levels for f in pattern]


@pytest.mark.parametrize("samples, drift", [
    pytest.param(_blocks([1.0] * 4), 0.0, id="stationary"),
    # ln 1, ln 1.1, ln 0.9, ln 1.05 = 0, 0.09531, -0.10536, 0.04879: mean 0.009685, squared
    # deviations summing to 0.022190, / 3 -> sd 0.08600
    pytest.param(_blocks([1.0, 1.1, 0.9, 1.05]), 0.08600, id="wandering"),
    # ln 0.97, 0, ln 1.03, 0 = -0.030459, 0, 0.029559, 0: mean -0.000225, sd 0.02450
    pytest.param(_blocks([0.97, 1.0, 1.03, 1.0]), 0.02450, id="wandering-3%"),
    pytest.param([1.0] * 7, None, id="too-few"),
])
def test_block_drift(samples, drift):
    got = block_drift(samples)
    assert got == (None if drift is None else pytest.approx(drift, abs=1e-5))


WANDER = [0.97, 1.0, 1.03, 1.0]  # each run's level wanders by about 2.5% (block_drift 0.0245)


@pytest.mark.parametrize("base, new, verdict", [
    # the same 6% with steady runs: no drift, the rank test decides
    pytest.param([1.0] * 4, [1.06] * 4, "slower", id="6%-stationary"),
    # 6% with runs whose levels wander: tolerance t(0.975; 6) x sqrt(2) x 0.0245
    # = 2.447 x 0.0347 = 0.0848 > ln 1.06 = 0.0583, within the noise though the rank test
    # alone says slower (p < 0.05)
    pytest.param(WANDER, [1.06 * w for w in WANDER], "within-noise", id="6%-wandering"),
    # twice as slow: ln 2 = 0.69, far beyond the same tolerance
    pytest.param(WANDER, [2 * w for w in WANDER], "slower", id="2x-wandering"),
    pytest.param([2 * w for w in WANDER], WANDER, "faster", id="half-wandering"),
])
def test_drift_between_runs(base, new, verdict):
    b, n = _m(_blocks(base)), _m(_blocks(new))
    assert mann_whitney_u(b.samples, n.samples)[1] < 0.05  # the rank test alone: beyond
    v = judge(b, n, None)
    assert v.verdict == verdict and v.basis == "rank test"


STEADY = [0.98, 1.02, 0.96, 1.0, 1.04, 0.98, 1.02, 0.94, 1.0, 1.06]  # 4 blocks, each median 1.0


def test_rows_are_one_family():
    """diff_profiles with steady runs (STEADY: no drift between the blocks) and fc 5% slower in
    every run: U = 84 of 100 (ties within each side: the normal approximation), its own
    p = 0.0111, under 0.05 -- beyond the noise on its own. The family has 8 rows (4 layers, 4
    types); conv1 and Conv2d (p = 2 / C(20, 10)) come first, then fc and Linear: fc's against
    0.05 / 6 = 0.0083 under Holm (adjusted 6 x 0.0111 = 0.067): within the noise, and so is
    Linear. The forward pass (0.42 -> 0.66 ms) is judged at 0.05 by itself: slower."""
    base, new = diff_profiles()
    for r, scale, e2e in ((base, 1.0, 4.2e-4), (new, 1.05, 6.6e-4)):
        fc = next(row for row in r.layers if row.name == "fc")
        fc.time = TimingStats.of([9e-5 * scale * x for x in STEADY], keep=True).to_dict()
        next(t for t in r.by_type if t["type"] == "Linear")["time"] = fc.time
        r.end_to_end = r.end_to_end | TimingStats.of([e2e * x for x in STEADY],
                                                     keep=True).to_dict()
    d = diff_results([base, new])
    rows = {r.name: r for r in d.rows}
    assert rows["fc"].change == pytest.approx(0.05)
    u, p = mann_whitney_u(base.layers[-1].time["samples_s"], new.layers[-1].time["samples_s"])
    assert u == 84 and rows["fc"].p_value == pytest.approx(p)
    assert 0.05 / 6 < p < 0.05 / 4
    assert rows["fc"].verdict == rows["Linear"].verdict == "within-noise"
    assert judge(_m(base.layers[-1].time["samples_s"]),
                 _m(new.layers[-1].time["samples_s"]), None).verdict == "slower"
    assert {r.name for r in d.rows if r.beyond_noise} == {"conv1", "Conv2d"}
    assert d.end_to_end.verdict == "slower"


def test_rows_share_the_drift_of_most_rows():
    """Every row's runs wander (block medians 0.97, 1.0, 1.03, 1.0 on both sides: drift
    tolerance 2.447 x sqrt(2) x 0.0245 = 0.085) but conv1's and fc's, which are steady
    (STEADY, no drift of their own). The 8 rows' tolerances: 0 for conv1 and fc, 0.085 for the
    6 others, median 0.085. conv1 6% slower in every run: its own rank test and Holm say beyond
    (p x 8 rows far under 0.05), but ln 1.06 = 0.058 is within the tolerance the rows share:
    within the noise. fc 2x: ln 2 = 0.69, slower. The forward pass's runs jump between two
    levels 3x apart (preemptions): its own tolerance (1.3) does not reach the rows."""
    base, new = diff_profiles()
    for r in (base, new):
        r.end_to_end = r.end_to_end | TimingStats.of(_blocks([1.0, 3.0, 1.0, 3.0]),
                                                     keep=True).to_dict()
        for row in r.layers:
            factor = {"conv1": 1.06, "fc": 2.0}.get(row.name, 1.0) if r is new else 1.0
            xs = STEADY * 2 if row.name in ("conv1", "fc") else _blocks(WANDER)
            row.time = TimingStats.of([1e-4 * factor * x for x in xs], keep=True).to_dict()
        for t in r.by_type:
            t["time"] = TimingStats.of([2e-4 * x for x in _blocks(WANDER)], keep=True).to_dict()
    d = diff_results([base, new])
    rows = {r.name: r for r in d.rows}
    assert rows["fc"].verdict == "slower"
    assert rows["conv1"].change == pytest.approx(0.06)
    assert rows["conv1"].p_value * 8 < 0.05
    assert rows["conv1"].verdict == "within-noise"
    assert {r.name for r in d.rows if r.beyond_noise} == {"fc"}


def _wide(scales: dict[str, float], e2e_scale: float):
    """profile_report() with 10 layers (conv1 copied as l0..l9, steady runs: STEADY) whose runs
    take 0.1 ms x scales[name] each, and the end to end 1 ms x e2e_scale."""
    r = profile_report()
    proto = r.layers[0]
    r.layers = []
    for i in range(10):
        row = copy.deepcopy(proto)
        row.name = f"l{i}"
        row.time = TimingStats.of([1e-4 * scales.get(row.name, 1.0) * x for x in STEADY],
                                  keep=True).to_dict()
        r.layers.append(row)
    r.by_type = []
    r.end_to_end = r.end_to_end | TimingStats.of([1e-3 * e2e_scale * x for x in STEADY],
                                                 keep=True).to_dict()
    return r


def test_common_shift_is_the_median_of_a_levels_rows():
    """9 layers 10% slower and one 2x: the level's shift is ln 1.1 (the median of 10 log
    ratios, 9 of them ln 1.1), and the one type takes the layers' shift; fewer than
    MIN_LEVEL_ROWS rows at a level: no shift."""
    from layerscope.analysis.diff.join import MIN_LEVEL_ROWS, common_shifts

    sides = {("layer", f"l{i}"): (_m(median=1.0), _m(median=2.0 if i == 0 else 1.1))
             for i in range(10)}
    sides[("type", "Conv2d")] = (_m(median=1.0), _m(median=1.5))
    sides[("end_to_end", "end_to_end")] = (_m(median=1.0), _m(median=3.0))
    assert common_shifts(sides) == {"layer": pytest.approx(math.log(1.1)),
                                    "type": pytest.approx(math.log(1.1))}
    assert MIN_LEVEL_ROWS == 5
    few = {k: v for k, v in sides.items() if k[1] in ("l0", "l1", "l2")}
    assert common_shifts(few) == {}


def test_a_whole_run_shifted_is_the_end_to_end_rows_change_not_every_layers():
    """Every layer 10% slower in every run (steady runs: no block drift to hide it) and the
    end to end 10% slower: the rank test calls each layer slower on its own (p of 10 against
    10 fully apart), but the run as a whole moved: the layers are within the noise, each
    saying so, and the end to end carries the change."""
    base = _wide({}, 1.0)
    new = _wide({f"l{i}": 1.1 for i in range(10)}, 1.1)
    d = diff_results([base, new])
    layers = [r for r in d.rows if r.level == "layer"]
    assert len(layers) == 10 and all(r.verdict == "within-noise" for r in layers)
    assert all("as the whole run: every layer moved by +10.0%" in r.explanation
               for r in layers)
    assert d.end_to_end.verdict == "slower"


def test_a_layer_beyond_the_whole_runs_shift_is_still_slower():
    """The same 10% shift of the whole run, and l3 2x (2.2x the base): l3 is slower, its
    explanation naming the shift it is beyond; the 9 others are within the noise."""
    base = _wide({}, 1.0)
    new = _wide({**{f"l{i}": 1.1 for i in range(10)}, "l3": 2.2}, 1.22)
    d = diff_results([base, new])
    rows = {r.name: r for r in d.rows if r.level == "layer"}
    assert rows["l3"].verdict == "slower" and rows["l3"].change == pytest.approx(1.2)
    assert "beyond the +10.0% every layer moved by" in rows["l3"].explanation
    assert [n for n, r in rows.items() if r.verdict != "within-noise"] == ["l3"]


def test_common_shift_leaves_out_rows_whose_work_changed():
    """16 layers: 8 whose input grew, 1.5x slower, and 8 unchanged, 2% slower. The median of
    all 16 log ratios lies halfway between ln 1.02 and ln 1.5; without the 8 that changed it is
    ln 1.02. With fewer than MIN_LEVEL_ROWS (5) unchanged rows, no shift."""
    from layerscope.analysis.diff.join import common_shifts

    sides = {("layer", f"l{i}"): (_m(median=1.0), _m(median=1.5 if i < 8 else 1.02))
             for i in range(16)}
    changed = {("layer", f"l{i}") for i in range(8)}
    assert common_shifts(sides) == {
        "layer": pytest.approx((math.log(1.02) + math.log(1.5)) / 2)}
    assert common_shifts(sides, changed) == {"layer": pytest.approx(math.log(1.02))}
    assert common_shifts(sides, changed | {("layer", f"l{i}") for i in range(8, 12)}) == {}


def test_layers_after_a_grown_input_are_not_the_whole_runs_shift():
    """Half the layers get twice the input (and twice the MACs) and take 1.6x the time, the
    other half are unchanged: the median of all ten would take ln 1.6 / 2 for a shift of the
    whole run and call the five unchanged layers 21% faster. Only the unchanged rows may show
    a shift (here none: the five unchanged did not move), so the five grown layers are
    slower, each explained by its input, and the five others within the noise."""
    base = _wide({}, 1.0)
    new = _wide({f"l{i}": 1.6 for i in range(5)}, 1.3)
    for row in new.layers[:5]:
        row.input_shapes = [[2 * d if j == 0 else d for j, d in enumerate(s)]
                            for s in row.input_shapes]
        row.macs *= 2
    d = diff_results([base, new])
    rows = {r.name: r for r in d.rows if r.level == "layer"}
    assert {n for n, r in rows.items() if r.verdict == "slower"} == {f"l{i}" for i in range(5)}
    assert {n for n, r in rows.items() if r.verdict == "within-noise"} == {
        f"l{i}" for i in range(5, 10)}
    assert all("its input grew" in rows[f"l{i}"].explanation for i in range(5))
    assert d.end_to_end.verdict == "slower"


@pytest.mark.parametrize("deltas_us, changed, move_us", [
    # |new - base| of 7 unchanged layers: 1, 1, 2, 3, 4, 20, 60 us -> median 3 us x 1.4826
    pytest.param([1, 1, 2, 3, 4, 20, 60], (), 3 * 1.4826, id="median-of-7"),
    # the two that moved most changed their work: the median of the other 5 (2 us)
    pytest.param([1, 1, 2, 3, 4, 20, 60], ("l5", "l6"), 2 * 1.4826, id="changed-left-out"),
    # fewer than MIN_LEVEL_ROWS (5) unchanged: not measured
    pytest.param([1, 1, 2, 3], (), None, id="too-few"),
])
def test_typical_move_of_the_unchanged_rows(deltas_us, changed, move_us):
    from layerscope.analysis.diff.join import MIN_LEVEL_ROWS, typical_moves

    judged = {("layer", f"l{i}"): (_m(median=1e-3), _m(median=1e-3 + d * 1e-6))
              for i, d in enumerate(deltas_us)}
    judged[("end_to_end", "end_to_end")] = (_m(median=1.0), _m(median=2.0))
    judged[("type", "Conv2d")] = (_m(median=1e-3), _m(median=5e-3))  # one type: the layers'
    moves = typical_moves(judged, {("layer", n) for n in changed})
    assert MIN_LEVEL_ROWS == 5
    if move_us is None:
        assert moves == {}
    else:
        assert moves == {"layer": pytest.approx(move_us * 1e-6),
                         "type": pytest.approx(move_us * 1e-6)}


@pytest.mark.parametrize("new_us, typical_us, verdict", [
    # 100 -> 130 us in steady runs (beyond the test and the drift): 30 us against a typical
    # move of 10 us (MOVE_T x 10 = 24.5 us) is beyond it; against 15 us (36.7 us) it is not
    pytest.param(130, 10, "slower", id="beyond-the-move"),
    pytest.param(130, 15, "within-noise", id="within-the-move"),
    pytest.param(130, None, "slower", id="no-move-measured"),
])
def test_a_row_must_stand_out_from_how_the_unchanged_rows_moved(new_us, typical_us, verdict):
    from layerscope.analysis.diff.verdict import MOVE_T

    assert MOVE_T == pytest.approx(2.447, abs=1e-3)
    base = _m([1e-4 * x for x in STEADY])
    new = _m([new_us * 1e-6 * x for x in STEADY])
    v = judge(base, new, None, typical_move=None if typical_us is None else typical_us * 1e-6)
    assert v.verdict == verdict
    assert v.within_move == (verdict == "within-noise")


def test_a_tiny_layer_that_moved_like_the_others_is_within_the_noise():
    """Ten steady layers: l0..l8 of 100 us move by -5..+5 us between the processes, l9 of 8 us
    moves to 11 us (+37%, every run apart: the rank test and the drift call it slower). The
    unchanged rows' typical move is 1.4826 x the median |change| (3 us); 3 us is within
    MOVE_T x that, so l9 is within the noise and says why."""
    moves = [-5, -4, -3, -2, 0, 2, 3, 4, 5]
    base = _wide({"l9": 0.08}, 1.0)
    new = _wide({**{f"l{i}": 1 + m / 100 for i, m in enumerate(moves)}, "l9": 0.11}, 1.0)
    d = diff_results([base, new])
    l9 = next(r for r in d.rows if r.name == "l9")
    assert l9.change == pytest.approx(0.375)
    assert l9.verdict == "within-noise"
    assert "moved no further than the layers whose work did not change" in l9.explanation
    assert not any(r.beyond_noise for r in d.all_rows())


def test_a_row_slower_than_before_is_never_called_faster():
    """The whole run 50% slower (nine layers 1.5x) and l3 only 1.2x: beyond the shift l3 went
    the other way (1.2 / 1.5 = 0.8), but it is slower than before, not faster: within the
    noise."""
    base = _wide({}, 1.0)
    new = _wide({**{f"l{i}": 1.5 for i in range(10)}, "l3": 1.2}, 1.5)
    d = diff_results([base, new])
    l3 = next(r for r in d.rows if r.name == "l3")
    assert l3.change == pytest.approx(0.2)
    assert l3.verdict == "within-noise"


def test_a_row_that_stayed_while_the_run_moved_is_not_slower():
    """The whole run 10% faster (nine layers 0.9x) and l3 +2%: beyond the shift l3 is 13%
    slower, but its own change is under the 3% minimum: within the noise (a "+0.2% slower"
    row once read so)."""
    base = _wide({}, 1.0)
    new = _wide({**{f"l{i}": 0.9 for i in range(10)}, "l3": 1.02}, 0.9)
    d = diff_results([base, new])
    l3 = next(r for r in d.rows if r.name == "l3")
    assert l3.change == pytest.approx(0.02)
    assert l3.verdict == "within-noise"
    assert [r.name for r in d.rows if r.beyond_noise] == []


def test_a_level_timed_on_one_side_only_is_left_out_with_a_note():
    """The new result timed no layers (``run`` without ``--layers`` against a run with it):
    its layers and layer types are not "removed", they were not timed; each level says so
    once, and the end to end is still compared."""
    base, new = profile_report(), profile_report()
    new.layers, new.by_type = [], []
    d = diff_results([base, new])
    assert [r for r in d.rows if r.level in ("layer", "type")] == []
    assert "layer types timed in the base result only: not compared (time both alike to " \
        "compare them)" in d.notes
    assert any(n.startswith("layers timed in the base result only") for n in d.notes)
    assert d.end_to_end is not None


def test_phases_that_grew_together_are_not_taken_for_the_whole_runs_shift():
    """A train result knows no static work per phase: forward, backward and optimizer all 1.3x
    (a wider layer), data and other unchanged. Their median (1.3) is no shift of the whole run:
    with fewer than MIN_BLIND_ROWS phases none is taken, and the three are slower."""
    from layerscope.analysis.diff.join import MIN_BLIND_ROWS

    assert MIN_BLIND_ROWS == 8
    phases = ("data", "forward", "backward", "optimizer", "other")
    base, new = train_report(), train_report()
    for r, scale in ((base, 1.0), (new, 1.3)):
        steps = [{p: 0.005 * (scale if p in ("forward", "backward", "optimizer") else 1.0)
                  * (1 + 0.001 * i) for p in phases} for i in range(20)]
        r.step_phases = {p: [s[p] for s in steps] for p in phases}
        r.step_seconds = [sum(s.values()) for s in steps]
    d = diff_results([base, new])
    assert {r.name for r in d.rows if r.beyond_noise} == {"forward", "backward", "optimizer"}


def test_each_results_noise_warning_is_a_note():
    """A profile measured on an oversubscribed machine carries its noise warning; the diff
    names it, by file, so "within the noise" on a large change says why."""
    base, new = profile_report(), profile_report()
    warning = "Noisy measurement (p90/p10 = 70.68; 2 thread(s) + load 4.5 on 2 CPUs): ..."
    new.noise = load_result(profile_report().to_dict() | {
        "noise": {**profile_report().to_dict()["noise"], "warnings": [warning, "second"]}}).noise
    d = diff_results([base, new], names=["a.json", "b.json"])
    assert f"b.json: {warning}" in d.notes
    assert not any(n.startswith("a.json:") or n.endswith("second") for n in d.notes)


def test_different_models_are_named_in_a_note(tmp_path):
    """mnist-cnn (7 rows) against resnet20 (61 rows) share 2 layer paths, `(root)` and `conv1`,
    of 66: a note says so; a second result of the same model gets none."""
    paths = {}
    for model in ("mnist-cnn", "resnet20"):
        paths[model] = tmp_path / f"{model}.json"
        code, _, err = run_cli("analyze", model, "--format", "json", "-o", str(paths[model]))
        assert code == 0, err
    d = diff_results([load_result(json.loads(paths[m].read_text()))
                      for m in ("mnist-cnn", "resnet20")])
    notes = [n for n in d.notes if n.startswith("different models:")]
    assert notes == ["different models: mnist-cnn against resnet20 share 2 of 66 layer paths, "
                     "so the rows compare little alike (diff runs of one model)"]
    same = diff_results([load_result(json.loads(paths["mnist-cnn"].read_text()))] * 2)
    assert not any(n.startswith("different models:") for n in same.notes)


@pytest.mark.integration
def test_profile_backward_is_a_phase(tmp_path):
    """profile --backward keeps the backward pass's runs; diff has a forward and a backward
    phase row. The backward runs made slower by 3 (max / min)^2 of their own (every new run
    above every base run, beyond any drift: see test_real_profile_one_layer_slower): the
    backward phase is slower, the forward phase and the end to end are within the noise."""
    path = tmp_path / "p.json"
    code, _, err = run_cli("profile", "mnist-cnn", "--backward", "--runs", "8", "--warmup", "1",
                           "--threads", "1", "--no-roofline", "-o", str(path))
    assert code == 0, err
    base = json.loads(path.read_text())
    assert len(base["backward"]["end_to_end"]["samples_s"]) == 8
    new = copy.deepcopy(base)
    t = new["backward"]["end_to_end"]
    factor = 3 * (max(t["samples_s"]) / min(t["samples_s"])) ** 2
    t.update(TimingStats.of([x * factor for x in t["samples_s"]], keep=True).to_dict())
    d = diff_results([load_result(base), load_result(new)])
    phases = {r.name: r for r in d.rows if r.level == "phase"}
    assert set(phases) == {"forward", "backward"}
    assert phases["backward"].verdict == "slower" and phases["forward"].verdict == "within-noise"
    assert d.end_to_end.verdict == "within-noise"


def test_a_stage_that_moved_together_is_one_note_not_six_slower_layers():
    """Two stages of 6 layers each (s1.0..s1.5, s2.0..s2.5, steady runs): all of s1 1.15x in
    the new process, s2 unchanged. Beyond the level's shift (the median of all 12, halfway)
    each s1 layer is still 7% slower in every run; judged beyond its own group's move (ln
    1.15) none is, and one note says the stage moved together by +15.0%."""
    def staged(scale_s1):
        r = _wide({}, 1.0)
        for i, row in enumerate(r.layers[:10]):
            row.name = f"s{1 + i // 5}.{i % 5}"
        extra = [copy.deepcopy(r.layers[0]), copy.deepcopy(r.layers[5])]
        extra[0].name, extra[1].name = "s1.5", "s2.5"
        r.layers += extra
        for row in r.layers:
            f = scale_s1 if row.name.startswith("s1.") else 1.0
            row.time = TimingStats.of([1e-4 * f * x for x in STEADY], keep=True).to_dict()
        return r

    d = diff_results([staged(1.0), staged(1.15)])
    assert [r.name for r in d.rows if r.beyond_noise] == []
    assert [n for n in d.notes if n.startswith("s1.* moved together by +15.0%")]
    s10 = next(r for r in d.rows if r.name == "s1.0")
    assert "as its group: s1.* moved by +15.0%" in s10.explanation


@pytest.mark.parametrize("loads, unfair_line", [
    # a train or run result's environment keeps the load averages read when it started
    pytest.param(([0.5, 0.4, 0.3], [2.6, 1.0, 0.5]), "1-minute load average: 0.5 vs 2.6",
                 id="apart"),
    pytest.param(([0.5, 0.4, 0.3], [1.2, 1.0, 0.5]), None, id="close"),
    pytest.param((None, [2.6, 1.0, 0.5]), None, id="one-unknown"),
])
def test_train_results_name_their_machines_load_apart(loads, unfair_line):
    base, new = train_report(), train_report()
    for r, load in zip((base, new), loads):
        r.environment = {**(r.environment or {}), "loadavg": load}
    d = diff_results([base, new])
    lines = [u for u in d.unfair if u.startswith("1-minute load average")]
    assert lines == ([unfair_line] if unfair_line else [])


# ---------------------------------------------------------------- large results: linear
class _Name(str):
    """A layer name that counts the comparisons made with it: the join's work, whatever the
    machine's load (list.index and list.insert compare in C, where no Python call shows)."""

    compared = 0

    def __eq__(self, other):
        _Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _layers(n: int, renamed: bool = False, scale: float = 1.0):
    """A profile of ``n`` layers with 10 samples each (names in groups of 10, as a network's
    blocks), every name a distinct _Name object; ``renamed``: half of them named apart;
    ``scale``: every sample times it."""
    from layerscope.core.report import LayerRow
    from tests.sample_results import profile_report, with_samples

    r = profile_report()
    proto = r.layers[0]
    rows = []
    for i in range(n):
        name = f"blocks.{i // 10}.{'renamed' if renamed and i % 2 else 'layer'}{i % 10}"
        row = LayerRow(**{**proto.__dict__, "name": _Name(name), "rank": i + 1})
        row.time = with_samples(0.01 + 1e-5 * i, scale)
        rows.append(row)
    r.layers = rows
    return r


@pytest.mark.parametrize("renamed", [False, True], ids=["same-layers", "half-renamed"])
def test_diffing_large_results_is_linear_in_their_layers(renamed):
    """Four times the layers, four times the work (name comparisons, Python calls): the join
    placed each layer of one side by a search of the other's list (quadratic: 4,000 layers
    took 35 s, 20,000 did not finish in minutes), and looked back from each layer only one
    side has for the one before it."""
    import sys

    def work(n):
        base, new = _layers(n), _layers(n, renamed, 1.001)
        calls = [0]

        def counter(frame, event, arg):
            if event == "call":
                calls[0] += 1
        _Name.compared = 0
        sys.setprofile(counter)
        try:
            diff_results([base, new])
        finally:
            sys.setprofile(None)
        return _Name.compared, calls[0]

    work(20)  # first calls compile and cache what every diff shares
    (small_cmp, small_calls), (large_cmp, large_calls) = work(100), work(400)
    assert large_cmp <= 5 * small_cmp, (small_cmp, large_cmp)  # quadratic: 16 times
    assert large_calls <= 5 * small_calls, (small_calls, large_calls)


def test_the_exact_rank_test_distribution_is_counted_once_per_sample_sizes():
    """The Mann-Whitney U distribution of 10 against 10 samples was recounted for every row."""
    from layerscope.core import stats

    stats._u_cumulative.cache_clear()
    diff_results([_layers(50), _layers(50, scale=1.001)])  # no ties: the exact test
    info = stats._u_cumulative.cache_info()
    assert info.misses == 1 and info.hits >= 50
