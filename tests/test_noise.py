"""The noise section (core/noise.py) and the statistics it and profile's self-measurement use,
all with fixed numbers (no clock is read)."""
import pytest

from layerscope.core.noise import MachineReading, noise_section, read_machine
from layerscope.core.stats import TimingStats, median_of_ratios, middle_runs

QUIET = MachineReading((0.4, 0.3, 0.2), 8, 8)


def _stats(median, p10, p90, mean, n=20, std=0.0):
    return TimingStats(median_s=median, p10_s=p10, p90_s=p90, mean_s=mean, std_s=std,
                       iqr_s=0.0, n=n)


@pytest.mark.parametrize("stats, machine, threads, expected", [
    # p90/p10 = 1.1/1.0; 4 threads + floor(0.4) = 0 busy on 8 CPUs: nothing to say
    pytest.param(_stats(1.05, 1.0, 1.1, 1.05), QUIET, 4,
                 {"p90_over_p10": 1.1, "busy_cpus": 0, "oversubscribed": False,
                  "warnings": []}, id="quiet"),
    # p90/p10 = 2.0/1.0 > 1.5: noisy although the machine looked idle at the start
    pytest.param(_stats(1.2, 1.0, 2.0, 1.3), QUIET, 1,
                 {"p90_over_p10": 2.0, "oversubscribed": False,
                  "warnings": ["Noisy measurement (p90/p10 = 2.00)"]}, id="spread"),
    # oversubscribed: 2 threads + floor(2.3) = 2 busy CPUs > 2 CPUs; p90/p10 = 80/1
    pytest.param(_stats(1.0, 1.0, 80.0, 9.0), MachineReading((2.3, 2.0, 1.0), 2, 2), 2,
                 {"p90_over_p10": 80.0, "busy_cpus": 2, "oversubscribed": True,
                  "mean_over_median": 9.0,
                  "warnings": ["Noisy measurement (p90/p10 = 80.00; 2 thread(s) + load 2.3 on "
                               "2 CPUs): likely the threads compete",
                               "Mean 9.0x the median"]}, id="oversubscribed"),
    # affinity decides, not os.cpu_count(): 2 threads + 0 busy on the 1 CPU we may use
    pytest.param(_stats(1.0, 1.0, 1.2, 1.0), MachineReading((0.1, 0.1, 0.1), 8, 1), 2,
                 {"cpus_available": 1, "oversubscribed": True,
                  "warnings": ["Noisy measurement (2 thread(s) + load 0.1 on 1 CPUs)"]},
                 id="affinity"),
    # mean / median = 1.6 / 1.0 > 1.5 with a tight p10-p90: outliers only
    pytest.param(_stats(1.0, 0.95, 1.1, 1.6), QUIET, 4,
                 {"mean_over_median": 1.6, "warnings": ["Mean 1.6x the median"]},
                 id="mean-far-above-median"),
    # 1.5 exactly is not "above"
    pytest.param(_stats(1.0, 1.0, 1.5, 1.5), QUIET, 4, {"warnings": []}, id="at-the-limits"),
    # no load average on this platform: no oversubscription verdict, the spread still counts
    pytest.param(_stats(1.0, 1.0, 1.2, 1.0), MachineReading(None, 4, 4), 2,
                 {"loadavg": None, "busy_cpus": None, "oversubscribed": None, "warnings": []},
                 id="no-loadavg"),
])
def test_noise_section(stats, machine, threads, expected):
    got = noise_section(stats, machine, threads)
    for key, value in expected.items():
        if key == "warnings":
            assert len(got["warnings"]) == len(value), got["warnings"]
            for line, start in zip(got["warnings"], value):
                assert line.startswith(start), line
        else:
            assert got[key] == pytest.approx(value) if isinstance(value, float) else \
                got[key] == value, key
    assert got["threads"] == threads and got["n"] == stats.n


def test_noise_warning_names_cause_and_remedy():
    # 4 threads, load 1.7 on 2 CPUs: idle cores = 2 - 1 = 1, so the remedy is --threads 1
    got = noise_section(_stats(1.0, 1.0, 3.0, 1.2), MachineReading((1.7, 1.0, 1.0), 2, 2), 4)
    line = got["warnings"][0]
    assert "OpenMP threads wait" in line and "--threads 1" in line
    assert "a quiet machine" in line and "more --runs" in line
    # one thread already: the remedy does not suggest --threads
    line = noise_section(_stats(1.0, 1.0, 3.0, 1.2), MachineReading((3.0, 1.0, 1.0), 2, 2),
                         1)["warnings"][0]
    assert "--threads" not in line and "take turns" in line


def test_rows_with_mean_far_above_median_are_counted():
    rows = [_stats(1.0, 1.0, 1.0, 1.0), _stats(1.0, 1.0, 1.0, 2.0), _stats(1.0, 1.0, 1.0, 1.6)]
    got = noise_section(_stats(1.0, 1.0, 1.1, 1.8), QUIET, 4, rows)
    assert got["rows_mean_far_above_median"] == 2
    assert "2 of 3 layers likewise" in got["warnings"][0]


def test_cv_is_std_over_mean():
    # samples 1, 2, 3, 4: mean 2.5, sample std sqrt(5/3) = 1.2910; p10 1.3, p90 3.7
    got = noise_section(TimingStats.of([1.0, 2.0, 3.0, 4.0]), QUIET, 1)
    assert got["cv"] == pytest.approx(1.2909944 / 2.5)
    assert got["p90_over_p10"] == pytest.approx(3.7 / 1.3)
    assert got["mean_over_median"] == pytest.approx(1.0)


def test_read_machine_reads_this_machine():
    m = read_machine()
    assert m.cpu_count and 1 <= m.cpus_available <= m.cpu_count
    assert m.loadavg is None or len(m.loadavg) == 3


@pytest.mark.parametrize("nums, dens, expected", [
    pytest.param([2.0, 3.0, 9.0], [1.0, 2.0, 3.0], 2.0, id="median-of-2-1.5-3"),
    pytest.param([1.0, 5.0], [1.0, 0.0], 1.0, id="zero-denominator-skipped"),
    pytest.param([1.0], [0.0], None, id="nothing-left"),
    # one spiked pair (100 / 1) does not move the median of the others
    pytest.param([1.1, 1.1, 100.0, 1.1, 1.1], [1.0] * 5, 1.1, id="spike-ignored"),
])
def test_median_of_ratios(nums, dens, expected):
    got = median_of_ratios(nums, dens)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("walls, expected", [
    pytest.param([3.0, 1.0, 2.0], [1, 2, 0], id="fewer-than-10-all-kept"),
    # 10 runs: floor(0.1 * 10) = 1 dropped each side: the fastest (index 9) and slowest (0)
    pytest.param([10.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 1.0], list(range(1, 9)),
                 id="ten-runs-drop-one-each-side"),
    # 20 runs: 2 dropped each side
    pytest.param([float(i) for i in range(20)], list(range(2, 18)), id="twenty-runs"),
])
def test_middle_runs(walls, expected):
    assert sorted(middle_runs(walls)) == sorted(expected)


def test_ablation_noise_comes_from_the_baseline_steps(monkeypatch):
    from layerscope.training import ablation
    from layerscope.training.phases import PHASES

    def fake_run(recipe, settings, workdir, tag):
        # baseline steps 10, 10, 10, 40 ms; the other variant's steps would not be noisy
        steps = [0.010, 0.010, 0.010, 0.040] if tag.startswith("baseline") else [0.005] * 4
        seconds = {p: 0.0 for p in PHASES} | {"forward": sum(steps)}
        return {"breakdown": {"seconds": seconds, "steps": 4, "samples": 4,
                              "wall_s": sum(steps), "throughput_per_s": 1.0},
                "step_seconds": steps}

    monkeypatch.setattr(ablation, "_run_variant", fake_run)
    monkeypatch.setattr(ablation, "read_machine", lambda: QUIET)
    report = ablation.ablate("digits-cnn", steps=5, warmup_steps=1, threads=2,
                             variants=["baseline", "channels-last"])
    # sorted 10, 10, 10, 40 ms: median 10, mean 17.5, p10 10, p90 = 10 + 0.7 * 30 = 31
    assert report.noise["p90_over_p10"] == pytest.approx(3.1)
    assert report.noise["mean_over_median"] == pytest.approx(1.75)
    assert report.noise["threads"] == 2 and report.noise["n"] == 4
    assert [w.split(" ")[0] for w in report.noise["warnings"]] == ["Noisy", "Mean"]
    assert report.to_dict()["noise"] == report.noise


# Each layer is judged on its own samples (hand-made: median and mean in ms), by the same
# mean/median limit (1.5) the end-to-end check uses; the end-to-end runs here are steady
# (mean 1.0x the median), so before, no layer was counted or warned about.
@pytest.mark.parametrize("layers, noisy", [
    pytest.param([(1.0, 1.0), (2.0, 2.1)], 0, id="all-steady"),
    # 1.6 / 1.0 > 1.5; 3.0 / 2.0 = 1.5 is not above
    pytest.param([(1.0, 1.6), (2.0, 3.0)], 1, id="one-of-two"),
    # every layer far above: 61 of 61 (the count the warning names)
    pytest.param([(0.1, 0.5)] * 61, 61, id="61-of-61"),
    # a layer that took no time is not judged (no ratio)
    pytest.param([(0.0, 0.2), (1.0, 1.0)], 0, id="zero-median"),
])
def test_each_layer_is_judged_on_its_own(layers, noisy):
    from layerscope.core.noise import ROW_MARK, mean_far_above_median

    rows = [_stats(med, med, med, mean) for med, mean in layers]
    got = noise_section(_stats(1.0, 1.0, 1.1, 1.0), QUIET, 4, rows)
    assert got["rows_mean_far_above_median"] == noisy
    assert sum(mean_far_above_median(r.median_s, r.mean_s) for r in rows) == noisy
    if noisy:
        assert got["warnings"] == [got["warnings"][0]]
        assert got["warnings"][0].startswith(
            f"{noisy} of {len(rows)} layers (marked {ROW_MARK} beside their mean) have a mean "
            "above 1.5x their median")
    else:
        assert got["warnings"] == []


def test_noisy_layers_are_marked_in_the_profile_tables():
    """The per-layer tables (terminal, HTML) mark exactly the rows the noise section counts."""
    from layerscope.core.noise import ROW_MARK
    from layerscope.core.report import Report
    from layerscope.renderers.terminal import to_text
    from layerscope.views.report import profile_table
    from tests.sample_results import profile_report

    report = profile_report()
    report.layers[1].time = dict(report.layers[1].time) | {"mean_s": 0.040e-3 * 2}  # bn1: 2x
    report = Report.from_dict(report.to_dict())
    table = profile_table(report)
    means = [row[7].text for row in table.rows]
    assert [m.endswith(ROW_MARK) for m in means] == [False, True, False, False], means
    assert "mean above 1.5x the median" in table.title
    text = to_text(report, width=160)
    assert "0.080*" in text and "* mean above 1.5x the median" in text
