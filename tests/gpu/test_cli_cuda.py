"""The analysis commands on CUDA: analyze, profile, ops, sweep, roofline and llm --gpu."""
from __future__ import annotations

import json

import pytest
from gpu_helpers import DRY_RUN, cli, cli_json, datasheet_key

pytestmark = pytest.mark.cuda
MODEL = "resnet20"  # small convs and a linear: cuDNN and cuBLAS both run


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no stale roofline cache


def test_environment_names_the_cuda_device(figures):
    import torch

    from layerscope.core.environment import environment
    env = environment()
    figures.update(gpu=env.get("gpu"), gpus=env.get("gpus"), cuda=env.get("cuda"),
                   cudnn=env.get("cudnn"), cuda_available=env.get("cuda_available"))
    if DRY_RUN:
        pytest.skip("dry run: no CUDA device to name")
    name = torch.cuda.get_device_name(0)
    figures["torch_device_name"] = name
    assert env["cuda_available"] is True
    assert env["gpus"][0] == name
    assert name in str(env["gpu"]), (env["gpu"], name)
    key = datasheet_key(name, torch.cuda.get_device_properties(0).total_memory)
    figures["datasheet_key"] = key
    assert key is not None, f"layerscope has no datasheet entry for {name!r}"


def test_profile_analyze_ops_on_cuda_count_what_cpu_counts(tmp_path, device, figures):
    """The same MACs on both devices and from the static analysis; measured times nonzero."""
    static = cli_json(tmp_path, "analyze", "analyze", MODEL)
    common = ("profile", MODEL, "--runs", "5", "--warmup", "2", "--no-roofline", "-q")
    cpu = cli_json(tmp_path, "profile-cpu", *common, "--device", "cpu")
    dev = cli_json(tmp_path, "profile-dev", *common, "--device", device)
    assert dev["settings"]["device"] == device
    figures.update(analyze_macs=static["totals"]["macs"], profile_cpu_macs=cpu["totals"]["macs"],
                   profile_device_macs=dev["totals"]["macs"],
                   profile_device_median_s=dev["end_to_end"]["median_s"],
                   profile_cpu_median_s=cpu["end_to_end"]["median_s"],
                   profile_device_coverage=dev.get("coverage"),
                   profile_device_overhead=dev.get("overhead"))
    assert static["totals"]["macs"] == cpu["totals"]["macs"] == dev["totals"]["macs"] > 0
    assert dev["end_to_end"]["median_s"] > 0
    timed = [r for r in dev["layers"] if r.get("time") and r["macs"]]
    assert timed and all(r["time"]["median_s"] > 0 for r in timed)
    figures["profile_device_layer_median_s"] = {r["name"]: r["time"]["median_s"] for r in timed}
    # the layer MACs agree row by row too
    assert ({r["name"]: r["macs"] for r in cpu["layers"]}
            == {r["name"]: r["macs"] for r in dev["layers"]})

    ops = cli_json(tmp_path, "ops", "ops", MODEL, "--device", device, "--runs", "3",
                   "--warmup", "1", "--memory", "--top", "20")
    figures.update(ops_device=ops["device"], ops_total_self_s=ops["total_self_s"],
                   ops_total=ops["ops_total"],
                   ops_rows={r["name"]: r["self_s"] for r in ops["rows"]})
    assert ops["device"] == device
    assert ops["total_self_s"] > 0 and ops["ops_total"] > 0
    assert any(r["self_s"] > 0 for r in ops["rows"])
    if not DRY_RUN:  # kernels ran on the GPU: the convolutions have device time
        assert any("conv" in r["name"] and r["self_s"] > 0 for r in ops["rows"]), ops["rows"]


def test_sweep_over_devices_and_dtypes(tmp_path, device, figures):
    devices = "cpu,cuda" if not DRY_RUN else "cpu"
    d = cli_json(tmp_path, "sweep", "sweep", MODEL, "--devices", devices,
                 "--dtypes", "float32,bfloat16", "--batch-sizes", "4", "--runs", "5",
                 "--warmup", "2", "-q")
    cells = d["cells"]
    figures["cells"] = [{k: c.get(k) for k in ("device", "dtype", "status", "error",
                                               "throughput_per_s", "speedup")}
                        | {"median_s": (c.get("latency") or {}).get("median_s")}
                        for c in cells]
    assert len(cells) == (4 if not DRY_RUN else 2)
    assert {(c["device"], c["dtype"]) for c in cells} == {
        (dv, dt) for dv in devices.split(",") for dt in ("float32", "bfloat16")}
    assert all(c["status"] == "ok" for c in cells), [(c["device"], c["error"]) for c in cells]
    assert all(c["latency"]["median_s"] > 0 for c in cells)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_roofline_within_the_datasheet(tmp_path, device, dtype, figures):
    import torch

    from layerscope.analysis.llm import GPUS
    code, out, err = cli("roofline", "--device", device, "--dtype", dtype, "--refresh",
                         "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    figures.update(peak_flops=d["peak_flops"], bandwidth=d["bandwidth"], ridge=d["ridge"],
                   matmul_size=d["matmul_size"], copy_bytes=d["copy_bytes"])
    assert d["device"] == device and d["peak_flops"] > 0 and d["bandwidth"] > 0
    if DRY_RUN:
        pytest.skip("dry run: no GPU datasheet to compare with")
    name = torch.cuda.get_device_name(0)
    key = datasheet_key(name, torch.cuda.get_device_properties(0).total_memory)
    figures.update(device_name=name, datasheet_key=key,
                   tf32_matmul=torch.backends.cuda.matmul.allow_tf32)
    if key is None:
        pytest.skip(f"layerscope has no datasheet for {name!r}; figures recorded")
    gpu = GPUS[key]
    # fp32 matmuls run without TF32 unless allowed: the plain FP32 figure is the ceiling
    peak = gpu.bf16_flops if dtype == "bfloat16" else gpu.fp32_flops
    figures.update(datasheet_flops=peak, datasheet_bandwidth=gpu.bandwidth,
                   flops_fraction=d["peak_flops"] / peak,
                   bandwidth_fraction=d["bandwidth"] / gpu.bandwidth)
    assert 0.2 < d["peak_flops"] / peak <= 1.05, (d["peak_flops"], peak)
    assert 0.3 < d["bandwidth"] / gpu.bandwidth <= 1.05, (d["bandwidth"], gpu.bandwidth)


def test_llm_with_the_devices_own_gpu(tmp_path, figures):
    import torch

    from layerscope.analysis.llm import GPUS
    if DRY_RUN:
        key = "h100-sxm"
    else:
        name = torch.cuda.get_device_name(0)
        key = datasheet_key(name, torch.cuda.get_device_properties(0).total_memory)
        figures["device_name"] = name
        if key is None:
            pytest.skip(f"layerscope has no datasheet for {name!r}")
    figures["gpu_chosen"] = key
    d = cli_json(tmp_path, "llm", "llm", "gpt2", "--gpu", key, "--format", "json")
    r = d["roofline"]
    figures.update({k: r[k] for k in ("gpu", "peak_flops", "bandwidth_bytes_per_s",
                                      "prefill_tokens_per_s", "decode_tokens_per_s")})
    assert r["gpu"] == key
    assert r["peak_flops"] == GPUS[key].bf16_flops
    assert r["bandwidth_bytes_per_s"] == GPUS[key].bandwidth
    assert r["decode_bound"] == "memory" and r["decode_tokens_per_s"] > 0


def test_profile_loop_on_cuda(tmp_path, device, figures):
    """Inference over a data loader (pinned memory on CUDA): per-phase times, host-to-device
    copies included, summing to the wall time."""
    from gpu_helpers import step_phase_sum
    d = cli_json(tmp_path, "loop", "profile", "mnist-cnn", "--loop", "mnist", "--synthetic",
                 "--device", device, "--runs", "10", "-q", "--no-roofline")
    p = d["phases"]
    figures.update(phases=p, batch_time=d["batch_time"], coverage=d.get("coverage"),
                   device=d["device"])
    assert d["device"] == device and p["steps"] == 10
    assert step_phase_sum(p["seconds"]) == pytest.approx(p["wall_s"], rel=0.1)
    assert p["seconds"]["forward"] > 0
    if device == "cuda":
        assert p["seconds"]["h2d"] > 0
