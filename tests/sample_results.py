"""Small hand-made results of every kind with fixed numbers: deterministic input for golden
tables, HTML, PNG and schema tests (no model is run)."""
from __future__ import annotations

from pathlib import Path

from layerscope.core.noise import MachineReading, noise_section
from layerscope.core.optable import OpRow, OpTable
from layerscope.core.report import LayerRow, Report, Totals, UncountedOp
from layerscope.core.results import KINDS
from layerscope.core.stats import TimingStats

DATA = Path(__file__).parent / "data"
ENV = {"cpu": "Test CPU 3000", "cores": 8, "torch_threads": 4, "os": "Linux-test",
       "python": "3.11.7", "torch": "2.14.1", "torchvision": "0.29.1", "cuda": None,
       "cuda_available": False, "gpu": None, "executable": "/usr/bin/python3"}


def timing(median_ms: float, spread: float = 0.1, n: int = 10) -> dict:
    m = median_ms / 1e3
    return {"median_s": m, "p10_s": m * (1 - spread), "p90_s": m * (1 + spread), "mean_s": m,
            "std_s": m * spread / 2, "iqr_s": m * spread, "n": n}


def _rows() -> list[LayerRow]:
    return [
        LayerRow("conv1", "Conv2d", 1, 1, [[1, 3, 32, 32]], [[1, 16, 32, 32]], params=448,
                 weight_bytes=1792, macs=442_368, flops=901_120, bytes_read=14_080,
                 bytes_written=65_536, activation_bytes=65_536),
        LayerRow("bn1", "BatchNorm2d", 1, 1, [[1, 16, 32, 32]], [[1, 16, 32, 32]], params=32,
                 weight_bytes=128, buffer_bytes=136, flops=65_536, bytes_read=65_664,
                 bytes_written=65_536, activation_bytes=65_536),
        LayerRow("relu", "ReLU", 1, 1, [[1, 16, 32, 32]], [[1, 16, 32, 32]], flops=16_384,
                 bytes_read=65_536, bytes_written=65_536, activation_bytes=65_536),
        LayerRow("fc", "Linear", 1, 1, [[1, 16384]], [[1, 10]], params=163_850,
                 weight_bytes=655_400, macs=163_840, flops=327_690, bytes_read=720_936,
                 bytes_written=40, activation_bytes=40),
    ]


def _totals(rows) -> Totals:
    return Totals(params=sum(r.params for r in rows), trainable_params=sum(r.params for r in rows),
                  weight_bytes=sum(r.weight_bytes for r in rows), buffer_bytes=136,
                  macs=sum(r.macs for r in rows), flops=sum(r.flops for r in rows),
                  bytes_read=sum(r.bytes_read for r in rows),
                  bytes_written=sum(r.bytes_written for r in rows),
                  activation_bytes=sum(r.activation_bytes for r in rows),
                  peak_activation_bytes=143_360, input_bytes=12_288, output_bytes=40)


def analyze_report() -> Report:
    rows = _rows()
    return Report("tinynet", "torch", [{"shape": [1, 3, 32, 32], "dtype": "float32"}],
                  _totals(rows), rows, [UncountedOp("aten::weird_op", 2)], op_coverage=0.96,
                  settings={"mode": "inference", "depth": None}, environment=dict(ENV),
                  notes=["a hand-made report"])


def profile_report() -> Report:
    rows = _rows()
    medians = {"conv1": 0.250, "bn1": 0.040, "relu": 0.020, "fc": 0.090}  # ms
    e2e = 0.420  # ms
    order = sorted(medians, key=lambda k: -medians[k])
    peak, bw = 100e9, 20e9
    for row in rows:
        sec = medians[row.name] / 1e3
        row.time = timing(medians[row.name])
        row.share = medians[row.name] / e2e
        row.rank = order.index(row.name) + 1
        moved = row.bytes_read + row.bytes_written
        row.achieved = {"gmacs_per_s": row.macs / sec / 1e9, "gflops_per_s": row.flops / sec / 1e9,
                        "gbytes_per_s": moved / sec / 1e9}
        intensity = row.flops / moved
        attainable = min(peak, bw * intensity)
        row.roofline = {"intensity": intensity,
                        "bound": "memory" if intensity < peak / bw else "compute",
                        "attainable_flops": attainable, "achieved_flops": row.flops / sec,
                        "pct_of_roof": row.flops / sec / attainable}
    r = Report("tinynet", "torch", [{"shape": [1, 3, 32, 32], "dtype": "float32"}],
               _totals(rows), rows, op_coverage=1.0,
               settings={"mode": "inference", "depth": None, "device": "cpu", "threads": 4,
                         "warmup": 5, "runs": 10, "batch_size": 1, "backward": False},
               environment=dict(ENV), kind="profile")
    r.end_to_end = timing(e2e) | {"throughput_per_s": 1 / (e2e / 1e3),
                                  "instrumented": timing(0.441)}
    r.overhead = 0.441 / e2e - 1
    r.coverage = sum(medians.values()) / e2e
    r.by_type = [{"type": row.type, "layers": 1, "macs": row.macs,
                  "time": timing(medians[row.name]), "share": medians[row.name] / e2e}
                 for row in sorted(rows, key=lambda x: -medians[x.name])]
    r.roofline = {"device": "cpu", "dtype": "float32", "threads": 4, "peak_flops": peak,
                  "bandwidth": bw, "matmul_size": 2048, "copy_bytes": 1 << 29, "ridge": peak / bw}
    # a quiet machine: p90/p10 = 1.1/0.9, 4 threads + 0 busy CPUs on 8: no warning
    r.noise = noise_section(TimingStats(**timing(e2e)), MachineReading((0.4, 0.3, 0.2), 8, 8), 4)
    return r


def ops_table() -> OpTable:
    rows = [OpRow("aten::mkldnn_convolution", 1, 2.5e-4, 2.6e-4, 2.6e-4, 0.625, "[[1, 3, 32, 32]]"),
            OpRow("aten::addmm", 1, 9.0e-5, 9.5e-5, 9.5e-5, 0.225),
            OpRow("aten::native_batch_norm", 1, 4.0e-5, 4.2e-5, 4.2e-5, 0.1),
            OpRow("aten::relu", 1, 2.0e-5, 2.1e-5, 2.1e-5, 0.05)]
    return OpTable("tinynet", "cpu", "self", 5, rows, total_self_s=4.0e-4, ops_total=9,
                   settings={"memory": False, "group_by_shape": False}, environment=dict(ENV))


def sweep_report():
    from layerscope.analysis.sweep import SweepCell, SweepReport

    cells = []
    base = None
    for threads in (1, 2):
        for batch in (1, 4, 16):
            median = (0.5 + 0.1 * batch) / (1.6 if threads == 2 else 1.0)  # ms
            c = SweepCell("cpu", "eager", "float32", threads, batch, latency=timing(median),
                          throughput_per_s=batch / (median / 1e3),
                          by_type=[{"type": "Conv2d", "share": 0.6},
                                   {"type": "Linear", "share": 0.25}])
            base = base or c
            c.speedup = c.throughput_per_s / base.throughput_per_s
            c.within_noise = c is base
            cells.append(c)
    cells.append(SweepCell("cpu", "onnxruntime", "float32", 1, 1, status="error",
                           error="ModuleNotFoundError: No module named 'onnxruntime'"))
    # a loaded machine: 2 threads + floor(7.2) = 7 busy CPUs > 8, so a warning line
    noise = noise_section(TimingStats(**timing(0.6)), MachineReading((7.2, 6.0, 3.1), 8, 8), 2)
    return SweepReport("tinynet", cells, settings={"runs": 20, "warmup": 3,
                                                   "inputs": [[1, 3, 32, 32]]},
                       environment=dict(ENV), noise=noise)


def _breakdown(ms: dict, steps: int, samples_per_step: int = 64) -> dict:
    seconds = {p: v / 1e3 * steps for p, v in ms.items()}
    wall = sum(seconds.values())
    return {"seconds": seconds, "steps": steps, "samples": steps * samples_per_step,
            "wall_s": wall, "throughput_per_s": steps * samples_per_step / wall}


PHASE_MS = {"data": 1.5, "h2d": 0.1, "forward": 6.0, "loss": 0.3, "backward": 11.0,
            "optimizer": 2.0, "other": 0.6}


def train_report():
    from layerscope.training.loop import TrainReport

    epochs = [{"epoch": e, "step": 25 * e, "train_loss": 1.8 / e, "train_top1": 0.5 + 0.1 * e,
               "lr": 0.001, "val_loss": 1.6 / e, "val_top1": 0.55 + 0.1 * e,
               "val_top5": 0.9 + 0.02 * e, "epoch_seconds": 1.25} for e in (1, 2, 3)]
    per_epoch = [_breakdown({p: v * (1.0 + 0.05 * i) for p, v in PHASE_MS.items()}, 25)
                 for i in range(3)]
    total = _breakdown(PHASE_MS, 75)
    return TrainReport("digits-cnn", {"recipe": "digits-cnn", "device": "cpu", "seed": 0},
                       "runs/digits-cnn-test", epochs, total, per_epoch,
                       [0.0215] * 75, cpu_utilisation=1.85, peak_rss_bytes=512_000_000,
                       peak_cuda_bytes=None, notes=["hand-made"], environment=dict(ENV))


def ablation_report():
    from layerscope.training.ablation import AblationReport, VariantResult

    def ok(name, flags, scale, speedup, beyond):
        ms = {p: v * scale for p, v in PHASE_MS.items()}
        step = sum(ms.values()) / 1e3
        return VariantResult(name, flags, repeats=[_breakdown(ms, 20)], step=timing(step * 1e3),
                             phases_ms=ms, speedup=speedup, beyond_noise=beyond)

    variants = [ok("baseline", [], 1.0, 1.0, None),
                VariantResult("pin-memory", [], status="n/a", reason="n/a on cpu"),
                ok("channels-last", ["--channels-last"], 0.8, 1.25, True),
                ok("workers=2", ["--num-workers", "2"], 0.97, 1 / 0.97, False)]
    # outliers: mean 2x the median (a hand-made spread, 4 threads on a quiet machine)
    steps = TimingStats(**(timing(21.5) | {"mean_s": 0.043}))
    noise = noise_section(steps, MachineReading((0.4, 0.3, 0.2), 8, 8), 4)
    return AblationReport("digits-cnn", "cpu", 30, 5, 1, variants, environment=dict(ENV),
                          noise=noise)


def activations_capture():
    from layerscope.analysis.activations import ActivationCapture, ActivationStat

    return ActivationCapture("tinynet", "Conv2d|fc", [
        ActivationStat("conv1", "Conv2d", [1, 16, 32, 32], 0.0123, 0.456, 0.0),
        ActivationStat("fc", "Linear", [1, 10], -0.5, 1.25, 0.1)])


def compare_result():
    """analyze_report() against the same net as a legacy ONNX export: bn1 folded into conv1
    (which already has a bias), relu and fc unchanged; the peak from a static plan."""
    from layerscope.analysis.compare import compare

    rows = [
        LayerRow("/conv1/Conv", "Conv", 1, 1, [[1, 3, 32, 32], [16, 3, 3, 3], [16]],
                 [[1, 16, 32, 32]], params=448, weight_bytes=1792, macs=442_368,
                 flops=901_120, bytes_read=14_080, bytes_written=65_536, activation_bytes=65_536),
        LayerRow("/relu/Relu", "Relu", 1, 1, [[1, 16, 32, 32]], [[1, 16, 32, 32]], flops=16_384,
                 bytes_read=65_536, bytes_written=65_536, activation_bytes=65_536),
        LayerRow("/fc/Gemm", "Gemm", 1, 1, [[1, 16384], [10, 16384], [10]], [[1, 10]],
                 params=163_850, weight_bytes=655_400, macs=163_840, flops=327_690,
                 bytes_read=720_936, bytes_written=40, activation_bytes=40),
    ]
    totals = _totals(rows)
    totals.buffer_bytes, totals.peak_activation_bytes = 0, 131_072
    onnx = Report("tinynet.onnx", "onnx", [{"name": "x", "shape": [1, 3, 32, 32],
                                            "dtype": "float32"}], totals, rows,
                  settings={"mode": "inference", "depth": None}, environment=dict(ENV))
    return compare(analyze_report(), onnx)


def loop_profile():
    """profile --loop: 10 batches of 64; 1.5 + 0.2 + 6.0 + 0.3 = 8.0 ms a batch."""
    from layerscope.training.inference_loop import LoopLayer, LoopProfile

    ms = {"data": 1.5, "h2d": 0.2, "forward": 6.0, "other": 0.3}
    layers = [LoopLayer("conv1", "Conv2d", timing(4.0), 4.0 / 6.0),
              LoopLayer("fc", "Linear", timing(1.5), 1.5 / 6.0)]
    return LoopProfile("tinynet", "digits", "cpu", 64, 10, 1, _breakdown(ms, 10),
                       timing(8.0), layers, coverage=5.5 / 6.0,
                       settings={"threads": 2, "num_workers": 0, "synthetic": False},
                       environment=dict(ENV))


def memory_report():
    """layerscope memory (the saved toy result, tests/data), with the test environment."""
    return _saved("memory", "0.5")


def decode_profile():
    """profile hf:tiny-llama/config.json --decode 10 --context 32 (tests/test_decode.py's
    model): 378,368 bytes and 201,512 FLOPs a step (layerscope llm's), a 1 ms median step:
    1,000 tokens/s; against 50 GFLOP/s and 5 GB/s: MBU 378,368 / 1e-3 / 5e9 = 7.57%, MFU
    201,512 / 1e-3 / 50e9 = 0.40%; llm's bound 1 / max(201,512 / 50e9, 378,368 / 5e9) =
    13,214.6 tokens/s, memory-bound."""
    from layerscope.core.records.decode import DecodeBound, DecodeProfile
    from layerscope.core.records.efficiency import efficiency

    machine = MachineReading((0.5, 0.4, 0.3), 8, 8)
    step = TimingStats(1e-3, 0.9e-3, 1.2e-3, 1.05e-3, 0.1e-3, 0.15e-3, 10)
    return DecodeProfile(
        model="tiny-llama", device="cpu", dtype="float32", batch_size=1, context=32, steps=10,
        warmup=3, step_time=step, prefill_s=4e-3, tokens_per_s=1000.0, flops_per_step=201_512,
        bytes_per_step=378_368, weight_bytes=361_984, kv_bytes=16_384,
        bounds=[DecodeBound(source="measured", peak_flops_per_s=50e9,
                            bandwidth_bytes_per_s=5e9, tokens_per_s=5e9 / 378_368,
                            bound="memory")],
        efficiency=efficiency(201_512, 1e-3, 50e9, bytes_per_step=378_368,
                              peak_bytes_per_s=5e9, training=False),
        settings={"threads": 4, "llm_attention": "causal"}, environment=dict(ENV),
        noise=noise_section(step, machine, 4))


def scaling_report():
    """scaling digits-cnn --nproc 1,2,4 on 2 cores, batch 64 per rank:
    N=1: 20 ms a step -> 64 / 0.020 = 3,200 samples/s;
    N=2: 25 ms -> 128 / 0.025 = 5,120/s, speed-up 1.6, efficiency 1.6 / 2 = 80%;
    N=4: 50 ms -> 256 / 0.050 = 5,120/s, speed-up 1.6, efficiency 40% (4 ranks on 2 cores)."""
    from layerscope.training.scaling import ScalingPoint, ScalingReport

    def pt(n, step_ms, comm_ms, exposed_ms, speedup, efficiency):
        step = step_ms / 1e3
        return ScalingPoint(
            world_size=n, threads_per_rank=1, batch_per_rank=64, steps=20, step_s=step,
            step_p10_s=step * 0.9, step_p90_s=step * 1.2, throughput_per_s=n * 64 / step,
            speedup=speedup, efficiency=efficiency, communication_s=comm_ms / 1e3,
            communication_share=comm_ms / step_ms, exposed_s=exposed_ms / 1e3,
            exposed_share=exposed_ms / step_ms, buckets=1, bytes_per_step=153128,
            # ring all-reduce: 2(N-1)/N x 153,128 bytes
            theory_bytes_per_step=2 * (n - 1) / n * 153128, oversubscribed=n > 2,
            phases={"forward": step * 0.3, "backward": step * 0.6, "optimizer": step * 0.1})

    points = [pt(1, 20.0, 1.0, 1.0, 1.0, 1.0), pt(2, 25.0, 6.0, 4.0, 1.6, 0.8),
              pt(4, 50.0, 20.0, 12.0, 1.6, 0.4)]
    return ScalingReport("digits-cnn", "cpu", points,
                         settings={"nproc": [1, 2, 4], "steps": 20, "warmup": 3,
                                   "batch_size": None, "synthetic": False, "seed": 0,
                                   "cores": 2, "threads_per_rank": 1, "backend": "gloo",
                                   "launcher": "torch.distributed.run --standalone"},
                         notes=["4 processes exceed the 2 CPU cores here: those figures measure "
                                "oversubscription (ranks sharing cores), not scaling"],
                         environment=dict(ENV))


def _saved(kind: str, release: str = "0.1"):
    """llm / plan / advice: the saved toy results (tests/data), with the test environment."""
    import json
    from pathlib import Path

    from layerscope.core.results import load_result

    d = json.loads((Path(__file__).parent / "data" / f"{kind}_{release}.json").read_text())
    result = load_result(d)
    result.environment = dict(ENV)
    return result


def llm_report():
    return _saved("llm")


def plan_report():
    return _saved("plan")


def advice_report():
    return _saved("advice", "0.5")


def kernels_profile() -> Report:
    """profile --kernels on CUDA, by hand: one step of 100 µs; conv1 launched a 5 µs kernel
    (3 µs launch call), fc a 12 µs one; 10 µs of copies no op claimed."""
    from layerscope.core.records.kernels import KernelBreakdown, KernelRow, KernelStep

    r = profile_report()
    r.settings["device"] = "cuda"
    r.settings["kernels"] = True
    rows = [KernelRow("conv1", "Conv2d", "forward", 4, 20e-6, 1, 5e-6, 3e-6, 1),
            KernelRow("fc", "Linear", "forward", 6, 15e-6, 1, 12e-6, 3e-6, 0),
            KernelRow("(outside modules)", "", "other", 1, 2e-6, 0, 0.0, 0.0, 0),
            KernelRow("(unattributed)", "", "other", 0, 0.0, None, 10e-6, 0.0, None)]
    step = KernelStep(step=0, wall_s=100e-6, cpu_ops=11, cpu_self_s=37e-6, kernels=3,
                      kernel_s=27e-6, busy_s=27e-6, idle_host_s=38e-6, idle_other_s=35e-6)
    r.kernels = KernelBreakdown(steps=1, device="cuda", backward=False, short_kernel_us=10.0,
                                rows=rows, per_step=[step])
    return r


def with_samples(median_ms: float, scale: float = 1.0, n: int = 10) -> dict:
    """A timing whose runs took median_ms x (0.90, 0.92, ..., 1.08) x scale: median
    median_ms x 0.99 x scale, the samples kept."""
    xs = [median_ms / 1e3 * (0.9 + 0.02 * i) * scale for i in range(n)]
    return TimingStats.of(xs, keep=True).to_dict()


def diff_profiles() -> tuple[Report, Report]:
    """profile_report() with 10 runs' samples (base), and the same net whose conv1 input grew
    from 1x3x32x32 to 1x3x64x64 (MACs x4) and took twice as long in every run (new): conv1
    0.2475 -> 0.495 ms, the forward pass 0.4158 -> 0.6633 ms (+59.5%)."""
    base, new = profile_report(), profile_report()
    medians = {"conv1": 0.250, "bn1": 0.040, "relu": 0.020, "fc": 0.090}
    for r in (base, new):
        for row in r.layers:
            row.time = with_samples(medians[row.name], 2.0 if r is new and row.name == "conv1"
                                    else 1.0)
        for t in r.by_type:
            t["time"] = next(row.time for row in r.layers if row.type == t["type"])
    e2e_base = with_samples(0.420)
    # every run of new: base's run plus conv1's extra time in that run (0.250 x (0.9 + 0.02 i))
    extra = [s1 - s0 for s0, s1 in zip(base.layers[0].time["samples_s"],
                                       new.layers[0].time["samples_s"])]
    base.end_to_end = base.end_to_end | e2e_base
    new.end_to_end = new.end_to_end | TimingStats.of(
        [a + b for a, b in zip(e2e_base["samples_s"], extra)], keep=True).to_dict()
    conv1 = new.layers[0]
    conv1.input_shapes = [[1, 3, 64, 64]]
    conv1.macs *= 4
    new.inputs = [{"shape": [1, 3, 64, 64], "dtype": "float32"}]
    new.totals.macs += 3 * base.layers[0].macs
    return base, new


def diff_report():
    """diff of diff_profiles(): the forward pass 59.5% slower, all of it from conv1."""
    from layerscope.analysis.diff import diff_results

    return diff_results(diff_profiles(), names=["base.json", "new.json"])


# kind -> its hand-made sample
BUILDERS = {"analyze": analyze_report, "profile": profile_report, "ops": ops_table,
            "sweep": sweep_report, "train": train_report, "ablate": ablation_report,
            "activations": activations_capture, "compare": compare_result, "loop": loop_profile,
            "scaling": scaling_report, "llm": llm_report, "plan": plan_report,
            "advice": advice_report, "decode": decode_profile, "memory": memory_report,
            "diff": diff_report}


def saved_example(kind: str):
    """A builder that reads the newest saved example of ``kind`` (tests/data/KIND_VERSION.json,
    which every kind has), for a kind with no hand-made sample."""
    def build():
        from layerscope.core.results import read_result

        files = sorted(DATA.glob(f"{kind}_*.json"),
                       key=lambda f: [int(n) for n in f.stem.rsplit("_", 1)[1].split(".")])
        assert files, (f"no sample of kind {kind!r}: add a builder to tests/sample_results.py "
                       f"or a saved example tests/data/{kind}_VERSION.json")
        return read_result(str(files[-1]))
    return build


# one sample of every kind in the kinds table, so that a new kind is in every test that goes
# through ALL without a line here
ALL = {kind: BUILDERS.get(kind) or saved_example(kind) for kind in KINDS}


def resnet20_names() -> list[str]:
    """60 leaf names in ResNet-20's execution order (conv1 … layer3.2.bn2, avgpool, fc)."""
    names = ["conv1", "bn1", "relu"]
    for stage in (1, 2, 3):
        for block in range(3):
            p = f"layer{stage}.{block}"
            names += [f"{p}.conv1", f"{p}.bn1", f"{p}.relu", f"{p}.conv2", f"{p}.bn2"]
            if stage > 1 and block == 0:
                names.append(f"{p}.shortcut.0")
            names.append(f"{p}.relu2")
    return names[:58] + ["avgpool", "fc"]


def many_layer_profile(highlight: dict | None = None) -> Report:
    """profile_report with 60 ResNet-20-named rows; the convolutions take 0.30-0.41 ms and sit
    close together on the roofline (their names would print over each other if placed naively)."""
    r = profile_report()
    proto = {row.type: row for row in r.layers}
    rows = []
    for i, name in enumerate(resnet20_names()):
        leaf = name.rsplit(".", 1)[-1]
        kind = ("Conv2d" if leaf.startswith(("conv", "shortcut")) else "BatchNorm2d"
                if leaf.startswith("bn") else "Linear" if name == "fc" else "ReLU")
        row = LayerRow(**{**proto[kind].__dict__, "name": name})
        conv = kind == "Conv2d"
        median = 0.30 + 0.005 * i if conv else 0.02 + 0.0005 * i  # ms
        row.time = timing(median)
        row.roofline = dict(proto[kind].roofline)
        if conv:  # clustered: 2% apart in intensity and FLOP/s
            row.roofline["intensity"] *= 1 + 0.02 * (i % 5)
            row.roofline["achieved_flops"] *= 1 + 0.02 * (i % 7)
        rows.append(row)
    total = sum(x.time["median_s"] for x in rows) * 1.05
    for rank, row in enumerate(sorted(rows, key=lambda x: -x.time["median_s"]), 1):
        row.rank, row.share = rank, row.time["median_s"] / total
    r.layers = rows
    r.end_to_end = timing(total * 1e3) | {"throughput_per_s": 1 / total,
                                          "instrumented": timing(total * 1.05e3)}
    if highlight:
        r.settings["highlight"] = highlight
    return r
