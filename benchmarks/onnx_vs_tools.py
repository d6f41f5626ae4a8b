"""ONNX MAC counts and analysis time: layerscope against onnx-tool on the same exported files.

Run from the repository root (onnx-tool is optional: ``.venv/bin/pip install onnx-tool``; a
missing or crashing tool is recorded, not fatal):

    .venv/bin/python benchmarks/onnx_vs_tools.py
    .venv/bin/python benchmarks/onnx_vs_tools.py --models resnet50 --repeats 5

Each model is exported once (``layerscope export``: dynamo exporter, BatchNorm kept), then every
tool analyses the same file in this process: one warm-up call, then the median of ``--repeats``
timed calls, each from the file path to the counts (loading included). Recorded per tool: its
own total "MACs", the MACs of contractions only (Conv, ConvTranspose, Gemm, MatMul: our
definition, so comparable with the reference), its parameter count, and the time. onnx-tool
counts every op's arithmetic as MACs and bias adds inside Conv/Gemm as MACs, and counts every
initializer (BatchNorm running statistics, Reshape shapes) as parameters. Results go to
``benchmarks/results/onnx_vs_tools.json``.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from _common import parse_models_and_repeats, versions  # noqa: E402 (sibling module)

RESULTS = Path(__file__).resolve().parent / "results" / "onnx_vs_tools.json"
CONTRACTIONS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
# torchvision definitions, input 1x3x224x224 (README "Reference counts")
REFERENCE = {
    "alexnet": {"macs": 714_188_480, "params": 61_100_840},
    "resnet50": {"macs": 4_089_184_256, "params": 25_557_032},
    "mobilenet_v2": {"macs": 300_774_272, "params": 3_504_872},
}


# ------------------------------------------------------------------ tools: path -> counts
def layerscope_counts(path: str) -> dict:
    from layerscope.analysis.static_onnx import analyze_onnx

    t = analyze_onnx(path).totals
    return {"macs": t.macs, "contraction_macs": t.macs, "params": t.params}


def onnx_tool_counts(path: str) -> dict:
    import onnx_tool  # imported lazily: optional

    model = onnx_tool.Model(path, {"verbose": False})
    graph = model.graph
    graph.graph_reorder_nodes()
    graph.shape_infer()
    graph.profile()
    contraction = sum(int(round(n.macs[0])) for n in graph.nodemap.values()
                      if n.op_type in CONTRACTIONS)
    return {"macs": int(round(graph.macs[0])), "contraction_macs": contraction,
            "params": int(graph.params)}


TOOLS = {"layerscope": layerscope_counts, "onnx-tool": onnx_tool_counts}


# ------------------------------------------------------------------ measuring
@contextlib.contextmanager
def quiet():
    sink = io.StringIO()
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def measure(count, path: str, repeats: int) -> dict:
    """One warm-up call, then the median of ``repeats`` timed calls; a crash is a result."""
    try:
        with quiet():
            counts = count(path)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                count(path)
                times.append(time.perf_counter() - start)
        return {**counts, "seconds": statistics.median(times), "error": None}
    except (Exception, SystemExit) as exc:  # onnx-tool calls exit() on files it rejects
        first = (str(exc).strip().splitlines() or [""])[0]
        return {"macs": None, "contraction_macs": None, "params": None, "seconds": None,
                "error": f"{type(exc).__name__}: {first}"[:300]}


def export(name: str, directory: str) -> dict:
    from layerscope.frontends.onnx_export import export_onnx

    path = os.path.join(directory, f"{name}.onnx")
    with quiet():
        result = export_onnx(name, path)
    return {"path": path, "export_seconds": result.seconds, "nodes": result.nodes,
            "opset": result.opset}


def run(models: list[str], repeats: int, directory: str) -> dict:
    results = {}
    for name in models:
        exported = export(name, directory)
        row = {"reference": REFERENCE[name],
               "export": {k: v for k, v in exported.items() if k != "path"}}
        for tool, count in TOOLS.items():
            row[tool] = measure(count, exported["path"], repeats)
            print(f"  {name:<14} {tool:<11} {_cell(row[tool], REFERENCE[name]['macs'])}",
                  flush=True)
        results[name] = row
    return results


# ------------------------------------------------------------------ reporting
def _seconds(s: float | None) -> str:
    if s is None:
        return ""
    return f" ({s:.2f} s)" if s >= 0.01 else f" ({s * 1e3:.1f} ms)"


def _cell(cell: dict, truth: int) -> str:
    if cell["macs"] is None:
        return cell["error"]
    diff = cell["contraction_macs"] - truth
    mark = "" if diff == 0 else f" ({diff:+,}: {diff / truth * 100:+.2g}%)"
    return f"{cell['contraction_macs']:,}{mark}{_seconds(cell['seconds'])}"


def markdown(results: dict) -> str:
    head = ["model", "reference MACs", "layerscope MACs (time)", "onnx-tool MACs, contractions "
            "(time)", "onnx-tool MACs, all ops", "params: reference / layerscope / onnx-tool"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for name, row in results.items():
        ref, ours, theirs = row["reference"], row["layerscope"], row["onnx-tool"]

        def fmt(v):
            return "-" if v is None else f"{v:,}"

        lines.append(" | ".join([
            f"| {name}", f"{ref['macs']:,}", _cell(ours, ref["macs"]),
            _cell(theirs, ref["macs"]), fmt(theirs["macs"]),
            f"{ref['params']:,} / {fmt(ours['params'])} / {fmt(theirs['params'])} |"]))
    return "\n".join(lines)


def main(argv=None) -> None:
    models, repeats = parse_models_and_repeats(__doc__, list(REFERENCE), 3, argv)

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="layerscope-onnx-bench-") as directory:
        results = run(models, repeats, directory)
    meta = {"versions": versions(("torch", "onnx", "onnxruntime", "onnxscript", "onnx-tool", "layerscope")), "repeats": repeats,
            "loadavg_1min": [load_before, os.getloadavg()[0]],
            "macs_definition": "contraction_macs: Conv, ConvTranspose, Gemm, MatMul only"}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"_meta": meta, **results}, indent=2) + "\n")
    print()
    print(markdown(results))
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
