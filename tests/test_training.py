"""Training: accuracy, artefacts, exact resume after SIGKILL, profiles, phases, ablation."""
import json
import os
import pstats
import signal
import subprocess
import sys
import time

import pytest
import torch

import layerscope
from layerscope.training.phases import ALWAYS, PhaseTimer
from tests.helpers import run_cli

CLI = [sys.executable, "-m", "layerscope"]


@pytest.mark.integration
def test_digits_cnn_run_writes_its_artefacts_per_epoch(tmp_path):
    # two epochs: every artefact is written per epoch, so two show the pattern
    out = tmp_path / "run"
    code, stdout, err = run_cli("train", "digits-cnn", "--epochs", "2", "--out", str(out),
                                "--tensorboard")
    assert code == 0, err
    assert "Data loading" in stdout and "Backward" in stdout and "Optimizer" in stdout
    rows = (out / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,step,train_loss,train_top1,lr,val_loss,val_top1,val_top5")
    assert len(rows) == 1 + 2
    final = json.loads((out / "metrics.json").read_text())[-1]
    assert sorted(os.listdir(out / "checkpoints"))[-1] == "last.pt"
    assert len([f for f in os.listdir(out / "checkpoints") if f.startswith("epoch-")]) == 2
    assert (out / "model.pt").exists() and (out / "config.json").exists()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert {"train_loss", "val_top1", "lr"} <= set(acc.Tags()["scalars"])
    assert len(acc.Scalars("val_top1")) == 2
    assert acc.Scalars("val_top1")[-1].value == pytest.approx(final["val_top1"])
    assert acc.Tags()["graph"]
    # predict from the run directory
    code, stdout, _ = run_cli("predict", str(out), "--index", "3", "--format", "json")
    top = json.loads(stdout)["top"]
    assert len(top) == 5 and sum(t["probability"] for t in top) <= 1.0 + 1e-6


@pytest.mark.slow
def test_digits_cnn_default_run_reaches_95_percent(tmp_path):
    # the recipe's default 15 epochs, as docs/training.md promises (minutes: the slow tier)
    out = tmp_path / "run"
    code, _, err = run_cli("train", "digits-cnn", "--out", str(out), "--format", "json", "-q")
    assert code == 0, err
    rows = json.loads((out / "metrics.json").read_text())
    assert len(rows) == 15 and rows[-1]["val_top1"] >= 0.95


def _final(run_dir):
    rows = json.loads((run_dir / "metrics.json").read_text())
    return [{k: v for k, v in r.items() if k != "epoch_seconds"} for r in rows]


@pytest.mark.integration
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tmp_path):
    args = ["train", "digits-cnn", "--epochs", "4", "--threads", "1", "--seed", "3",
            "--format", "json", "-o"]
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    subprocess.run(CLI + args + [str(tmp_path / "ref.json"), "--out", str(ref)], check=True,
                   capture_output=True)
    proc = subprocess.Popen(CLI + args + [str(tmp_path / "k.json"), "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = killed / "checkpoints" / "epoch-001.pt"
    deadline = time.time() + 120
    while not first.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)  # epoch 2 has just started
    proc.wait()
    assert first.exists()
    assert not (killed / "checkpoints" / "epoch-004.pt").exists()
    # every checkpoint that exists is whole: it loads
    for name in os.listdir(killed / "checkpoints"):
        if name.endswith(".pt") and not name.startswith("."):
            torch.load(killed / "checkpoints" / name, weights_only=True)
    subprocess.run(CLI + ["train", "digits-cnn", "--threads", "1", "--epochs", "4",
                          "--resume", str(killed), "--format", "json", "-o",
                          str(tmp_path / "r.json")], check=True, capture_output=True)
    assert _final(killed) == _final(ref)


@pytest.mark.parametrize("kind,artefact", [("cprofile", "profile.prof"), ("torch", "trace.json")])
def test_profile_outputs_load(tmp_path, kind, artefact):
    out = tmp_path / "run"
    code, _, err = run_cli("train", "digits-cnn", "--steps", "3", "--no-eval", "--profile", kind,
                           "--out", str(out), "--format", "json", "-o", str(tmp_path / "r.json"))
    assert code == 0, err
    path = out / artefact
    if kind == "cprofile":
        stats = pstats.Stats(str(path))
        assert stats.total_calls > 0
    else:
        trace = json.loads(path.read_text())
        assert any(e.get("ph") == "X" for e in trace["traceEvents"])


def test_phases_sum_to_step_time(tmp_path):
    report = layerscope.train(recipe="digits-cnn", steps=8, evaluate=False, out=str(tmp_path))
    b = report.breakdown
    assert b["steps"] == 8 and set(b["seconds"]) == set(ALWAYS)
    assert sum(b["seconds"].values()) == pytest.approx(b["wall_s"], rel=1e-9)
    assert sum(report.step_seconds) == pytest.approx(b["wall_s"])


class FakeClock:
    def __init__(self, ticks):
        self.ticks = iter(ticks)

    def __call__(self):
        return next(self.ticks)


def test_phase_timer_with_fake_clock():
    # start 0; data ends 2; h2d 3; forward 7; loss 8; backward 14; optimizer 15; stop 16
    timer = PhaseTimer(clock=FakeClock([0, 2, 3, 7, 8, 14, 15, 16]))
    timer.start()
    for phase in ("data", "h2d", "forward", "loss", "backward", "optimizer"):
        timer.mark(phase)
    phases, wall = timer.stop()
    assert wall == 16
    assert phases == {"data": 2, "h2d": 1, "forward": 4, "loss": 1, "backward": 6,
                      "optimizer": 1, "other": 1}


def test_warmup_steps_are_excluded(tmp_path):
    report = layerscope.train(recipe="digits-cnn", steps=6, warmup_steps=2, evaluate=False,
                              out=str(tmp_path))
    assert report.breakdown["steps"] == 4 and len(report.step_seconds) == 4


@pytest.mark.integration
def test_dry_run_one_batch_through_everything(tmp_path):
    code, _, err = run_cli("train", "cifar10-resnet20", "--synthetic", "--dry-run", "--out",
                           str(tmp_path / "d"), "--format", "json", "-o", str(tmp_path / "r.json"))
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["breakdown"]["steps"] == 1
    assert "val_top5" in report["epochs"][0]
    assert (tmp_path / "d" / "checkpoints" / "last.pt").exists()


def test_synthetic_data_is_deterministic():
    from layerscope.training.data import datasets

    a, _, _ = datasets("cifar10", synthetic=True, data_dir=None, download=False, augment=False,
                       seed=7)
    b, _, _ = datasets("cifar10", synthetic=True, data_dir=None, download=False, augment=False,
                       seed=7)
    assert len(a) == 50000 and a[123][0].shape == (3, 32, 32)
    assert torch.equal(a[123][0], b[123][0]) and a[123][1] == b[123][1] == 123 % 10


@pytest.mark.parametrize("argv,expected", [
    (["train", "mnist-cnn", "--data-dir", "/nonexistent/data"],
     ["--data-dir", "--download", "--synthetic"]),
    (["train", "imagenet-vit"], ["unknown recipe"]),
    (["train", "digits-cnn", "--device", "cuda"], ["no CUDA GPU"]),
    (["train", "digits-cnn", "--epochs", "0"], ["--epochs must be at least 1"]),
    (["train", "digits-cnn", "--resume", "/nonexistent.pt"], ["no such file"]),
    (["predict", "/nonexistent"], ["no such file"]),
    (["ablate", "digits-cnn", "--variants", "baseline,turbo"], ["unknown variant 'turbo'"]),
], ids=["missing-dataset", "unknown-recipe", "cuda-missing", "zero-epochs", "missing-ckpt",
        "predict-missing", "unknown-variant"])
def test_training_bad_input(argv, expected):
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = run_cli(*argv)
    assert code == 2 and err.count("\n") == 1, err
    for text in expected:
        assert text in err


@pytest.mark.integration
def test_ablate_marks_cuda_only_variants_na_on_cpu():
    report = layerscope.ablate("digits-cnn", steps=4, warmup_steps=1,
                               variants=["baseline", "pin-memory", "channels-last"])
    by = {v.variant: v for v in report.variants}
    assert by["pin-memory"].status == "n/a"
    assert by["pin-memory"].reason == "n/a on cpu: pin-memory needs a CUDA device"
    assert by["baseline"].status == "ok" and by["baseline"].speedup == 1.0
    assert by["channels-last"].status == "ok" and by["channels-last"].phases_ms["forward"] > 0
    assert set(by["baseline"].phases_ms) == set(ALWAYS)


@pytest.mark.parametrize("name,device,cores,flags,parts", [
    ("torchscript+channels-last", "cpu", 2, ["--torchscript", "--channels-last"],
     ["torchscript", "channels-last"]),
    ("workers=3+amp", "cpu", 2, ["--num-workers", "3", "--amp"], ["workers=3", "amp"]),
    ("pin-memory+amp", "cpu", 2, None, ["pin-memory", "amp"]),
    # all on 2 cores: workers=min(4, 2); the CUDA-only switches left out; compile, not torchscript
    ("all", "cpu", 2, ["--num-workers", "2", "--compile", "--amp", "--channels-last"],
     ["workers=2", "compile", "amp", "channels-last"]),
    ("all", "cpu", 1, ["--compile", "--amp", "--channels-last"],
     ["compile", "amp", "channels-last"]),
    ("all", "cuda", 16, ["--num-workers", "4", "--pin-memory", "--compile", "--cudnn-benchmark",
                         "--amp", "--channels-last"],
     ["workers=4", "pin-memory", "compile", "cudnn-benchmark", "amp", "channels-last"]),
], ids=["torchscript+channels-last", "workers+amp", "cuda-only-part-on-cpu", "all-2-cores",
        "all-1-core", "all-cuda-16-cores"])
def test_ablation_variants_combine_and_expand(name, device, cores, flags, parts):
    from layerscope.training.ablation import parse_variant

    assert parse_variant(name, device, cores) == (flags, parts)


@pytest.mark.parametrize("name,message", [
    ("compile+torchscript", "exclude each other"),
    ("all+amp", "use it alone"),
    ("amp+", "empty part"),
    ("workers=2+workers=3", "workers=N once"),
    ("amp+amp", "repeated"),
    ("workers=x", "whole number"),
    ("amp+turbo", "unknown variant 'turbo'"),
], ids=["exclusive", "all-plus", "empty", "two-workers", "repeated", "bad-workers", "unknown"])
def test_ablation_bad_variants(name, message):
    from layerscope.core.errors import UserError
    from layerscope.training.ablation import parse_variant

    with pytest.raises(UserError, match=message):
        parse_variant(name, "cpu", 2)


@pytest.mark.integration
def test_ablate_combined_variant_runs_from_the_cli(tmp_path):
    out = tmp_path / "a.json"
    code, _, err = run_cli("ablate", "digits-cnn", "--variants", "torchscript+channels-last",
                           "--steps", "5", "--format", "json", "-o", str(out))
    assert code == 0, err
    report = json.loads(out.read_text())
    assert report["warmup_steps"] == 2  # default 5, at most half of 5 steps
    by = {v["variant"]: v for v in report["variants"]}
    assert by["torchscript+channels-last"]["status"] == "ok", by
    assert by["torchscript+channels-last"]["flags"] == ["--torchscript", "--channels-last"]


@pytest.mark.parametrize("warmup,title", [
    (0, "Time per phase"),
    (1, "Time per phase (1 warm-up step excluded)"),
    (3, "Time per phase (3 warm-up steps excluded)"),
], ids=["none", "one", "three"])
def test_phase_title_says_warmup_only_when_excluded(warmup, title):
    from layerscope.views.training import phase_title

    assert phase_title(warmup) == title


@pytest.mark.integration
@pytest.mark.parametrize("stop_at", [5, 30], ids=["mid-epoch-1", "mid-epoch-2"])
def test_steps_stopping_mid_epoch_checkpoints_and_resumes_exactly(tmp_path, stop_at):
    # digits: 1437 training images / batch 64 = 23 batches an epoch, so both stops are mid-epoch
    common = dict(recipe="digits-cnn", epochs=2, threads=1, seed=5)
    ref = tmp_path / "ref"
    layerscope.train(**common, out=str(ref))
    stopped = tmp_path / "stopped"
    first = layerscope.train(**common, steps=stop_at, out=str(stopped))
    assert first.epochs[-1]["step"] == stop_at
    assert (stopped / "checkpoints" / f"step-{stop_at:06d}.pt").exists()
    assert (stopped / "checkpoints" / "last.pt").exists()
    assert len([n for n in os.listdir(stopped / "checkpoints") if n.startswith("epoch-")]) \
        == stop_at // 23
    layerscope.train(**common, resume=str(stopped))
    assert _final(stopped) == _final(ref)


def test_tensorboard_has_per_step_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    report = layerscope.train(recipe="digits-cnn", steps=7, evaluate=False, tensorboard=True,
                              out=str(out))
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"step/loss", "step/lr", "step/throughput_per_s"} <= tags
    assert {f"step/phase_ms/{p}" for p in ALWAYS} <= tags
    losses = acc.Scalars("step/loss")
    assert [e.step for e in losses] == list(range(1, 8))
    # the per-epoch scalars are still there, one point for the (partial) epoch
    assert len(acc.Scalars("train_loss")) == 1
    assert acc.Scalars("train_loss")[0].value == pytest.approx(report.epochs[0]["train_loss"])
    # per-step phase times add up to the step (ms), within the float32 of event files
    step1 = sum(acc.Scalars(f"step/phase_ms/{p}")[0].value for p in ALWAYS)
    assert step1 == pytest.approx(report.step_seconds[0] * 1e3, rel=1e-4)


@pytest.mark.integration
def test_train_profile_torch_prints_operator_table_and_no_kineto_lines(tmp_path):
    out = tmp_path / "run"
    # a subprocess: kineto writes to file descriptor 2, which an in-process capture misses
    proc = subprocess.run(CLI + ["train", "digits-cnn", "--steps", "2", "--no-eval",
                                 "--profile", "torch", "--out", str(out), "--quiet"],
                          capture_output=True, text=True)
    stdout, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, err
    # the title may wrap: compare with the whitespace normalised
    assert "operators by self time (cpu, per step, 2 steps)" in " ".join(stdout.split())
    assert "aten::" in stdout
    assert "ERROR" not in err and "gpuGetDeviceCount" not in err and "profiler_start" not in err
    report = json.loads((out / "report.json").read_text())
    assert report["ops"]["runs"] == 2 and report["ops"]["rows"]


# What a run records of the CUDA-only settings (pinned memory, cudnn.benchmark) and of amp,
# by device: off and named in a note without a CUDA device; as asked with one.
@pytest.mark.parametrize("asked, device, recorded, notes", [
    pytest.param({"pin_memory": True}, "cpu", {"pin_memory": False},
                 ["pin_memory (--pin-memory) not applied: no CUDA device (device cpu)"],
                 id="pin-memory-cpu"),
    pytest.param({"pin_memory": True, "cudnn_benchmark": True}, "cpu",
                 {"pin_memory": False, "cudnn_benchmark": False},
                 ["pin_memory (--pin-memory) and cudnn_benchmark (--cudnn-benchmark) not "
                  "applied: no CUDA device"], id="both-cpu"),
    pytest.param({"amp": True, "channels_last": True}, "cpu",
                 {"amp": True, "channels_last": True},
                 ["amp on cpu: autocast to bfloat16"], id="amp-applies-on-cpu"),
    pytest.param({"pin_memory": True, "cudnn_benchmark": True, "amp": True}, "cuda:0",
                 {"pin_memory": True, "cudnn_benchmark": True, "amp": True}, [],
                 id="cuda-applies-all"),
    pytest.param({}, "cpu", {"pin_memory": False, "cudnn_benchmark": False}, [],
                 id="nothing-asked"),
])
def test_settings_that_do_not_apply_are_recorded_off_and_named(asked, device, recorded, notes):
    from layerscope.training.config import TrainConfig
    from layerscope.training.loop import not_applied

    config, got = not_applied(TrainConfig(**asked), device)
    assert {k: getattr(config, k) for k in recorded} == recorded
    assert len(got) == len(notes) and all(g.startswith(n) for g, n in zip(got, notes)), got


def test_train_pin_memory_on_cpu_is_not_recorded_as_applied(tmp_path):
    before = torch.backends.cudnn.benchmark
    code, _, err = run_cli("train", "digits-cnn", "--synthetic", "--dry-run", "--pin-memory",
                           "--cudnn-benchmark", "--out", str(tmp_path / "d"), "--format", "json",
                           "-o", str(tmp_path / "r.json"))
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["config"]["pin_memory"] is False
    assert report["config"]["cudnn_benchmark"] is False
    assert any("not applied: no CUDA device" in n for n in report["notes"])
    saved = json.loads((tmp_path / "d" / "config.json").read_text())
    assert saved["pin_memory"] is False and saved["cudnn_benchmark"] is False
    assert torch.backends.cudnn.benchmark == before
