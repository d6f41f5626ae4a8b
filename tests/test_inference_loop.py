"""profile --loop: inference over a data loader, per phase and per layer."""
import json

import pytest
import torch

from layerscope.core.errors import UserError
from layerscope.training.inference_loop import LOOP_PHASES, profile_loop
from layerscope.training.recipes import DigitsCNN
from tests.helpers import run_cli


@pytest.mark.integration
def test_loop_over_digits_phases_sum_and_layers_cover_the_forward():
    model = DigitsCNN()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # digits validation split: 360 images; batch 64 -> 5 full batches (the last 40 images are
    # left out: every timed batch is full) = 1 warm-up + 4 measured
    result = profile_loop(model, "digits", batch_size=64, batches=4, warmup=1)
    assert result.batches == 4 and result.phases["steps"] == 4
    assert result.phases["samples"] == 4 * 64
    assert set(result.phases["seconds"]) == set(LOOP_PHASES)
    assert sum(result.phases["seconds"].values()) == pytest.approx(result.phases["wall_s"])
    assert {r.name for r in result.layers} == {"conv1", "conv2", "fc1", "fc2"}
    assert all(r.time["n"] == 4 for r in result.layers)
    assert 0 < result.coverage <= 1.0 + 1e-6
    # the caller's model is unchanged: same flag, same values
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_loop_cli_synthetic_json(tmp_path):
    out = tmp_path / "loop.json"
    code, _, err = run_cli("profile", "mnist-cnn", "--loop", "mnist", "--synthetic", "--runs", "2",
                           "--batch-size", "8", "--format", "json", "-o", str(out), "--quiet")
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "loop" and d["batches"] == 2 and d["warmup"] == 1
    assert d["dataset"] == "mnist (synthetic)" and d["layers"]


@pytest.mark.parametrize("argv,expected", [
    (["profile", "mnist-cnn", "--loop", "imagenet", "--synthetic"], "unknown --loop 'imagenet'"),
    (["profile", "mnist-cnn", "--loop", "digits", "--runs", "0"], "--runs must be at least 1"),
    (["profile", "mnist-cnn", "--loop", "digits", "--batch-size", "0"],
     "--batch-size must be at least 1"),
    (["profile", "mnist-cnn", "--loop", "mnist", "--synthetic", "--backward"],
     "--backward does not apply"),
], ids=["unknown-dataset", "zero-runs", "zero-batch-size", "backward"])
def test_loop_bad_input(argv, expected):
    code, _, err = run_cli(*argv)
    assert code == 2 and err.count("\n") == 1 and expected in err, err


@pytest.mark.integration
def test_readme_loop_more_runs_than_one_pass_iterates_the_loader_again():
    """The README's command: synthetic MNIST's 10,000 validation images are 10 batches of 1000,
    one fewer than 1 warm-up + 10 timed; the loader starts a new pass for the last one."""
    code, out, err = run_cli("profile", "mnist-cnn", "--loop", "mnist", "--synthetic",
                             "--batch-size", "1000", "--runs", "10", "--format", "json", "--quiet")
    assert code == 0, err
    d = json.loads(out)
    assert d["batches"] == 10 and d["warmup"] == 1 and d["batch_size"] == 1000
    assert d["phases"]["steps"] == 10 and d["phases"]["samples"] == 10 * 1000
    assert all(layer["time"]["n"] == 10 for layer in d["layers"])
    assert any("2 passes over the data set's 10 batches of 1000" in n for n in d["notes"])
    from layerscope.schema import first_error

    assert first_error(d) is None


class _Tiny(torch.utils.data.Dataset):
    """n images of 1x8x8 (digits' shape), label i % 10."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((1, 8, 8), float(i)), i % 10


def _with_val_set(monkeypatch, n):
    import layerscope.training.inference_loop as loop

    monkeypatch.setattr(loop, "datasets", lambda *a, **k: (None, _Tiny(n), []))


# (samples, --batch-size, --warmup, --runs) -> (batch size used, passes over the data, samples
# left out of each pass): hand-derived from full batches only, warm-up first
LOOP_CASES = [
    ("fits-one-pass", 40, 10, 1, 3, 10, 1, 0),
    ("runs-beyond-one-pass", 40, 10, 1, 10, 10, 3, 0),      # 11 batches of a 4-batch pass
    ("ragged-last-batch", 45, 10, 2, 8, 10, 3, 5),          # 4 full batches a pass, 5 left out
    ("smaller-than-a-batch", 6, 10, 1, 4, 6, 5, 0),         # one batch of all 6 per pass
    ("no-warmup", 40, 10, 0, 4, 10, 1, 0),
]


@pytest.mark.parametrize("samples,wanted,warmup,runs,batch,passes,left",
                         [c[1:] for c in LOOP_CASES], ids=[c[0] for c in LOOP_CASES])
def test_loop_draws_warmup_and_runs_from_repeated_passes(monkeypatch, samples, wanted, warmup,
                                                         runs, batch, passes, left):
    _with_val_set(monkeypatch, samples)
    result = profile_loop(DigitsCNN(), "digits", batch_size=wanted, batches=runs, warmup=warmup)
    assert result.batches == runs and result.warmup == warmup and result.batch_size == batch
    assert result.phases["steps"] == runs and result.phases["samples"] == runs * batch
    assert all(r.time["n"] == runs for r in result.layers)
    text = " ".join(result.notes)
    assert (f"need {passes} passes" in text) == (passes > 1), result.notes
    assert (f"leaves out the last {left} " in text) == (left > 0), result.notes
    assert (f"fewer than --batch-size {wanted}" in text) == (samples < wanted), result.notes


@pytest.mark.parametrize("kwargs,expected", [
    ({"batches": 0}, "^batches must be at least 1, got 0"),
    ({"batch_size": 0}, "^batch_size must be at least 1, got 0"),
    ({"warmup": -1}, "^warmup must be 0 or more, got -1"),
], ids=["zero-runs", "zero-batch", "negative-warmup"])
def test_loop_api_refuses_bad_counts_before_any_work(monkeypatch, kwargs, expected):
    def no_data(*a, **k):
        raise AssertionError("the data set was loaded before the counts were checked")

    import layerscope.training.inference_loop as loop

    monkeypatch.setattr(loop, "datasets", no_data)
    with pytest.raises(UserError, match=expected):
        profile_loop(DigitsCNN(), "digits", **kwargs)


def test_loop_empty_data_set_is_refused(monkeypatch):
    _with_val_set(monkeypatch, 0)
    with pytest.raises(UserError, match="no samples"):
        profile_loop(DigitsCNN(), "digits")


def test_loop_result_carries_the_noise_section(monkeypatch):
    from layerscope.core.noise import MachineReading
    from layerscope.training import inference_loop

    monkeypatch.setattr(inference_loop, "read_machine",
                        lambda: MachineReading((0.2, 0.2, 0.2), 8, 8))
    ticks = iter(range(10**6))  # every reading one second later: every batch takes as long
    result = profile_loop(DigitsCNN(), "digits", batch_size=64, batches=4, warmup=1, threads=1,
                          clock=lambda: float(next(ticks)))
    noise = result.noise
    assert noise["n"] == 4 and noise["threads"] == 1
    assert noise["p90_over_p10"] == pytest.approx(1.0) and noise["warnings"] == []
    assert noise["rows_mean_far_above_median"] == 0  # 4 layers, steady
    assert result.to_dict()["noise"] == noise


def test_loop_view_marks_noisy_layers_and_shows_the_noise_lines():
    from layerscope.core.noise import MachineReading, noise_section
    from layerscope.core.stats import TimingStats
    from layerscope.renderers.terminal import to_text
    from layerscope.training.inference_loop import LoopProfile
    from layerscope.views.training import loop_tables
    from tests.sample_results import loop_profile

    result = loop_profile()
    # conv1: median 4.0 ms, mean 7.0 ms > 1.5 x 4.0: one layer of two marked
    result.layers[0].time = dict(result.layers[0].time) | {"mean_s": 0.007}
    rows = [TimingStats(**{k: r.time[k] for k in ("median_s", "p10_s", "p90_s", "mean_s",
                                                  "std_s", "iqr_s", "n")})
            for r in result.layers]
    result.noise = noise_section(TimingStats(**{k: result.batch_time[k] for k in (
        "median_s", "p10_s", "p90_s", "mean_s", "std_s", "iqr_s", "n")}),
        MachineReading((0.2, 0.2, 0.2), 8, 8), 2, rows)
    result = LoopProfile.from_dict(json.loads(json.dumps(result.to_dict())))
    assert result.noise["rows_mean_far_above_median"] == 1
    table = loop_tables(result)[-1]
    means = [row[3].text for row in table.rows if row[0].text in ("conv1", "fc")]
    assert means == ["7.000*", "1.500"]
    text = to_text(result, width=150)
    assert "7.000*" in text and "Noise: p90/p10" in text
    assert "Warning: 1 of 2 layers (marked * beside their mean)" in text
