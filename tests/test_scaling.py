"""layerscope scaling: the figures per world size from the ranks' measurements (hand numbers), and
one real run at 1 and 2 processes through torch.distributed.run."""
from __future__ import annotations

import json
import subprocess

import pytest

from layerscope.errors import UserError
from layerscope.schema import first_error
from layerscope.training import scaling as sc
from tests.helpers import run_cli


def _report(world, step_seconds, comm, exposed, batch=64):
    """What distributed train reports (the keys scaling reads): rank 0's step times, its
    samples, per-rank mean phases and rank 0's communication summary."""
    ranks = [{"rank": r, "steps": len(step_seconds), "step_s": 0.0,
              "phases": {"forward": 0.004, "backward": 0.012, "communication": comm[r],
                         "exposed_communication": exposed[r]}} for r in range(world)]
    return {"recipe": "digits-cnn", "config": {"batch_size": batch}, "world_size": world,
            "step_seconds": step_seconds, "ranks": ranks,
            "breakdown": {"steps": len(step_seconds), "samples": batch * len(step_seconds),
                          "wall_s": sum(step_seconds)},
            "communication": {"bytes_per_step": 1000, "theory_bytes_per_step": 1000.0,
                              "buckets": [{"bytes": 1000, "median_s": 0.004}]}}


def test_point_from_train_report():
    # Step times 12, 22, 30 ms: median 22 ms; throughput: 2 ranks x 3 x 64 samples over
    # 12 + 22 + 30 = 64 ms = 6,000 samples/s. Communication: mean over ranks (4 + 6) / 2 = 5 ms
    # = 5/22 of the step; exposed (2 + 4) / 2 = 3 ms.
    r = _report(2, [0.012, 0.022, 0.030], comm=[0.004, 0.006], exposed=[0.002, 0.004])
    p = sc.point(r, threads=1, cores=2, device="cpu")
    assert p.world_size == 2 and p.steps == 3 and p.batch_per_rank == 64
    assert p.step_s == pytest.approx(0.022)
    assert p.throughput_per_s == pytest.approx(6000)
    assert p.communication_s == pytest.approx(0.005)
    assert p.communication_share == pytest.approx(5 / 22)
    assert p.exposed_share == pytest.approx(3 / 22)
    assert p.phases["backward"] == pytest.approx(0.012)
    assert p.buckets == 1 and p.bytes_per_step == 1000
    assert not p.oversubscribed


def _simple(world):
    return _report(world, [0.01], comm=[0.001] * world, exposed=[0.0] * world)


@pytest.mark.parametrize("world, threads, cores, device, expected", [
    (2, 1, 2, "cpu", False),
    (4, 1, 2, "cpu", True),   # 4 ranks on 2 cores
    (2, 2, 2, "cpu", True),   # 2 ranks x 2 threads on 2 cores
    (4, 1, 2, "cuda", False),  # a GPU per rank: the host cores are not the measure
], ids=["fits", "ranks-exceed", "threads-exceed", "cuda"])
def test_oversubscribed(world, threads, cores, device, expected):
    assert sc.point(_simple(world), threads, cores, device).oversubscribed is expected


@pytest.mark.parametrize("sizes, throughputs, speedups, efficiencies", [
    # linear: 100, 200, 400 samples/s at 1, 2, 4 -> 1x, 2x, 4x, all 100%.
    ([1, 2, 4], [100, 200, 400], [1, 2, 4], [1, 1, 1]),
    # 8 GPUs giving 5.1x: efficiency 5.1 / 8 = 63.75%.
    ([1, 8], [100, 510], [1, 5.1], [1, 0.6375]),
    # against 2 processes: 4 processes at 1.5x the throughput -> efficiency 1.5 x 2 / 4 = 75%.
    ([2, 4], [200, 300], [1, 1.5], [1, 0.75]),
], ids=["linear", "five-of-eight", "base-two"])
def test_speedup_and_efficiency(sizes, throughputs, speedups, efficiencies):
    points = []
    for n, thr in zip(sizes, throughputs, strict=True):
        p = sc.point(_simple(n), 1, 64, "cpu")
        p.throughput_per_s = thr
        points.append(p)
    sc.relative_to_first(points)
    assert [p.speedup for p in points] == pytest.approx(speedups)
    assert [p.efficiency for p in points] == pytest.approx(efficiencies)


@pytest.mark.parametrize("stderr, expected", [
    ("epoch 1 | step 1\nlayerscope: error: rank 1 failed: killed by SIGKILL\n",
     "rank 1 failed: killed by SIGKILL"),
    ("layerscope: rank 0 failed: RuntimeError: boom\n", "rank 0 failed: RuntimeError: boom"),
    ("", "exit code 1"),
], ids=["rank-killed", "rank-error", "silent"])
def test_failure_line(stderr, expected):
    assert sc._failure(subprocess.CompletedProcess([], 1, "", stderr)) == expected


@pytest.mark.parametrize("kwargs, message", [
    ({"recipe": "no-such-recipe"}, "no-such-recipe"),
    ({"nproc": []}, "^nproc must list at least one world size"),
    ({"nproc": [0]}, "^nproc item must be at least 1"),
    ({"steps": 0}, "^steps must be"),
    ({"device": "tpu"}, "^unknown device 'tpu'"),
    ({"threads": 0}, "^threads must be"),
], ids=["recipe", "no-sizes", "zero", "steps", "device", "threads"])
def test_bad_arguments_before_any_launch(kwargs, message):
    args = {"recipe": "digits-cnn", **kwargs}
    with pytest.raises(UserError, match=message):
        sc.scaling(**args)


@pytest.mark.integration
def test_scaling_digits_cnn_1_2(tmp_path):
    """The acceptance command: a table, a chart, JSON that validates and renders again."""
    out, html, png = tmp_path / "s.json", tmp_path / "s.html", tmp_path / "s.png"
    code, _, err = run_cli("scaling", "digits-cnn", "--nproc", "1,2", "--steps", "3",
                           "--warmup", "1", "--quiet", "-o", str(out), "--html", str(html),
                           "--plot", str(png))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "scaling"
    assert first_error(d) is None
    assert [p["world_size"] for p in d["points"]] == [1, 2]
    for p in d["points"]:
        # digits-cnn: conv1 160 + conv2 4,640 + fc1 32,832 + fc2 650 = 38,282 float32
        # parameters = 153,128 gradient bytes, all-reduced every step at every world size.
        assert p["bytes_per_step"] == 153128
        assert p["communication_s"] > 0 and p["steps"] == 3
        assert 0 <= p["exposed_s"] <= p["communication_s"] + 1e-12
    # ring all-reduce per rank: N=1 moves nothing; N=2: 2 x 1/2 x 153,128.
    assert [p["theory_bytes_per_step"] for p in d["points"]] == [0.0, 153128.0]
    assert d["points"][0]["speedup"] == 1.0
    # MFU per GPU: each rank trains the same per-rank batch, so the same FLOPs per step
    used = [p["utilisation"] for p in d["points"]]
    assert used[0]["model_flops_per_step"] == used[1]["model_flops_per_step"] > 0
    assert all(u["mfu"] is None or 0 < u["mfu"] <= 1 for u in used)
    assert any("per GPU" in n for n in used[1]["notes"])
    page = html.read_text()
    assert 'data-chart="scaling-speedup"' in page and "Throughput per world size" in page
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, text, err = run_cli("render", str(out), "--width", "160")
    assert code == 0, err
    assert "data-parallel scaling" in text and "Speed-up" in text


@pytest.mark.slow
def test_a_failing_rank_is_one_line(tmp_path, monkeypatch):
    # distributed train's fault switch kills rank 1 at its step 1 (training/distributed.py)
    monkeypatch.setenv("LAYERSCOPE_FAULT", "1:1:kill")
    code, out, err = run_cli("scaling", "digits-cnn", "--nproc", "2", "--steps", "3",
                             "--quiet", "-o", str(tmp_path / "s.json"))
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "at 2 processes: " in err and "rank 1" in err
    assert not (tmp_path / "s.json").exists()
