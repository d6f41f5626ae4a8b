"""Start-up time of the command line and the ONNX API against `python -c "import torch"`.

Run:  .venv/bin/python benchmarks/startup.py [--rounds 7]

Four commands, each a fresh process, timed interleaved (A B C D A B C D ... over ``--rounds``
rounds, after one warm-up round) so that load on the machine hits all of them alike:

- ``import torch``: ``python -c "import torch"``, the floor of any command that runs a model;
- ``--help``: ``layerscope --help`` (loads neither torch nor numpy nor rich);
- ``analyze mnist-cnn``: ``layerscope analyze mnist-cnn``, its table to a pipe that is dropped;
- ``analyze(onnx)``: ``python -c "import layerscope; layerscope.analyze('m.onnx')"`` on a small
  generated ONNX graph (the ONNX path never loads torch).

Each run's wall time (perf_counter around the child) and CPU time (the child's user + system
time from ``os.wait4``) are recorded; printed are the median, min and max of each, and each
command's median per-round ratio and difference against ``import torch`` of the same round.
The load average is taken before and after; above the core count the figures are marked noisy.
The code under test is this checkout's (PYTHONPATH is set to it), or with ``--code DIR``
another checkout's (to time a change: run it once with each).

Writes benchmarks/results/startup.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile

from _common import timed_run, versions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "startup.json")
BASELINE = "import torch"


def write_onnx_model(path: str) -> None:
    """A small ONNX graph (Conv, Relu, Flatten, Gemm; 1x3x32x32 in, 10 out)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w", (8, 3, 3, 3)), ("b", (8,)), ("fc", (10, 8 * 30 * 30)),
                                   ("fc_b", (10,)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, "startup", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 13  # what the installed onnxruntime reads
    onnx.save(model, path)


def layerscope_command() -> list[str]:
    """The installed ``layerscope`` entry point beside this Python, else ``python -m``."""
    script = os.path.join(os.path.dirname(sys.executable), "layerscope")
    if os.access(script, os.X_OK):
        return [script]
    found = shutil.which("layerscope")
    return [found] if found else [sys.executable, "-m", "layerscope"]


def commands(onnx_path: str) -> dict[str, list[str]]:
    cli = layerscope_command()
    return {
        BASELINE: [sys.executable, "-c", "import torch"],
        "layerscope --help": cli + ["--help"],
        "layerscope analyze mnist-cnn": cli + ["analyze", "mnist-cnn"],
        "layerscope.analyze(onnx)": [sys.executable, "-c",
                                     f"import layerscope; layerscope.analyze({onnx_path!r})"],
    }


def measure(cmds: dict[str, list[str]], rounds: int, cwd: str,
            code: str) -> dict[str, list[dict]]:
    env = {**os.environ, "PYTHONPATH": code}
    runs: dict[str, list[dict]] = {name: [] for name in cmds}
    for i in range(rounds + 1):  # round 0 warms the page cache and is not counted
        for name, argv in cmds.items():
            run = timed_run(argv, env=env, cwd=cwd)
            if run["status"] != 0:
                raise SystemExit(f"{name} failed (exit status {run['status']}): "
                                 f"{run['stderr'][-500:]}")
            if i:
                runs[name].append({k: run[k] for k in ("wall_seconds", "cpu_seconds")})
    return runs


def summary(runs: dict[str, list[dict]]) -> dict[str, dict]:
    out = {}
    base = runs[BASELINE]
    for name, rs in runs.items():
        entry = {}
        for clock in ("wall", "cpu"):
            key = f"{clock}_seconds"
            values = [r[key] for r in rs]
            entry[clock] = {"median_s": statistics.median(values), "min_s": min(values),
                            "max_s": max(values),
                            # per round: against the baseline run of the same round
                            "ratio_to_import_torch": statistics.median(
                                r[key] / b[key] for r, b in zip(rs, base)),
                            "minus_import_torch_s": statistics.median(
                                r[key] - b[key] for r, b in zip(rs, base))}
        out[name] = entry
    return out


def table(figures: dict[str, dict]) -> str:
    lines = ["| command | clock | median s | min s | max s | / import torch | "
             "- import torch s |", "|---|---|---|---|---|---|---|"]
    for name, entry in figures.items():
        for clock in ("wall", "cpu"):
            c = entry[clock]
            lines.append(f"| {name} | {clock} | {c['median_s']:.3f} | {c['min_s']:.3f} | "
                         f"{c['max_s']:.3f} | {c['ratio_to_import_torch']:.2f} | "
                         f"{c['minus_import_torch_s']:+.3f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7,
                    help="counted rounds, each running every command once (default 7)")
    ap.add_argument("--code", default=ROOT, metavar="DIR",
                    help="the checkout whose layerscope is timed (default: this one)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    code = os.path.abspath(args.code)
    if not os.path.isfile(os.path.join(code, "layerscope", "__init__.py")):
        ap.error(f"--code {args.code}: no layerscope package in that folder")
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "m.onnx")
        write_onnx_model(onnx_path)
        cmds = commands(onnx_path)
        runs = measure(cmds, args.rounds, tmp, code)
    load_after = os.getloadavg()
    noisy = max(load_before[0], load_after[0]) > cores
    figures = summary(runs)
    result = {"_meta": {"versions": versions(("torch", "onnx", "onnxruntime", "rich",
                                              "layerscope")),
                        "python": sys.version.split()[0], "cores": cores,
                        "rounds": args.rounds, "code": os.path.relpath(code, ROOT),
                        "load_average_before": load_before,
                        "load_average_after": load_after, "noisy": noisy,
                        "commands": {name: shlex.join([os.path.basename(argv[0])] + argv[1:])
                                     .replace(onnx_path, "m.onnx")
                                     for name, argv in cmds.items()}},
              "figures": figures, "runs": runs}
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(table(figures))
    print(f"{args.rounds} rounds, interleaved; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after, {cores} cores"
          + (" -- noisy: load above the core count, the figures are not to be trusted"
             if noisy else ""))
    print(f"wrote {os.path.relpath(RESULTS, ROOT)}")


if __name__ == "__main__":
    main()
