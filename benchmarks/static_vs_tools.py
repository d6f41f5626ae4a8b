"""MAC counts and analysis time: layerscope against torchinfo, fvcore, ptflops and FlopCounterMode.

Run from the repository root (the other tools come from the ``bench`` extra,
``.venv/bin/pip install -e ".[bench]"``; a missing one is reported as "not installed"):

    .venv/bin/python benchmarks/static_vs_tools.py
    .venv/bin/python benchmarks/static_vs_tools.py --models resnet50,lstm --repeats 3

Every tool analyses its own copy of the same already-built model in one process (one warm-up
call, then the median of ``--repeats`` timed calls), so the time ratios are meaningful; timings
are only as quiet as the machine (the JSON's ``_meta`` keeps the load average). Counts are
compared with reference MACs; a cell off by more than 0.1% is flagged. Results go to
``benchmarks/results/static_vs_tools.json`` (model -> tool -> {macs, seconds, error, rel_error}).
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import logging
import os
import statistics
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torchvision

from _common import parse_models_and_repeats, versions  # noqa: E402 (sibling module)

RESULTS = Path(__file__).resolve().parent / "results" / "static_vs_tools.json"
TOLERANCE = 1e-3  # flag counts off by more than 0.1%

# ------------------------------------------------------------------ small models and their truth
E, HEADS, L, FFN = 256, 8, 64, 1024  # attention: embed dim, heads, sequence length, FFN width
T, LSTM_IN, LSTM_H, LSTM_LAYERS = 50, 128, 256, 2  # LSTM: steps, input size, hidden, layers


class SelfAttention(nn.Module):
    """nn.MultiheadAttention as a one-input module: every tool wants ``model(x)``. Eval mode under
    no_grad with q is k is v takes PyTorch's fused ``_native_multi_head_attention`` fast path."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(E, HEADS, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def mha_macs(seq: int, dim: int) -> int:
    # in-proj (q, k, v) 3*L*E*E + out-proj L*E*E + attention (Q@K^T and A@V) 2*L*L*E.
    # Heads split E, so they do not change the count; softmax, scaling and biases are not MACs.
    return 3 * seq * dim * dim + seq * dim * dim + 2 * seq * seq * dim


def encoder_layer_macs(seq: int, dim: int, ffn: int) -> int:
    # self-attention as above + FFN (E->F and F->E linears) 2*L*E*F; LayerNorms are not MACs.
    return mha_macs(seq, dim) + 2 * seq * dim * ffn


def lstm_macs(steps: int, batch: int, inp: int, hidden: int, layers: int) -> int:
    # Per step and layer the 4 gates are one (I_layer + H) -> 4H matmul: 4H*(I_layer + H);
    # I_layer is the input size for layer 0 and H above it. Gate nonlinearities are not MACs.
    sizes = [inp] + [hidden] * (layers - 1)
    return steps * batch * sum(4 * hidden * (i + hidden) for i in sizes)


def _googlenet():
    return torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False)


# name -> (builder, input shape, reference MACs)
MODELS = {
    "alexnet": (lambda: torchvision.models.alexnet(weights=None), (1, 3, 224, 224), 714_188_480),
    "resnet50": (lambda: torchvision.models.resnet50(weights=None), (1, 3, 224, 224),
                 4_089_184_256),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(weights=None), (1, 3, 224, 224),
                     300_774_272),
    "googlenet": (_googlenet, (1, 3, 224, 224), 1_498_376_192),
    "vit_b_16": (lambda: torchvision.models.vit_b_16(weights=None), (1, 3, 224, 224),
                 17_563_828_224),
    "mha": (SelfAttention, (1, L, E), mha_macs(L, E)),
    "transformer_encoder_layer": (
        lambda: nn.TransformerEncoderLayer(E, HEADS, FFN, batch_first=True), (1, L, E),
        encoder_layer_macs(L, E, FFN)),
    "lstm": (lambda: nn.LSTM(LSTM_IN, LSTM_H, num_layers=LSTM_LAYERS, batch_first=True),
             (1, T, LSTM_IN), lstm_macs(T, 1, LSTM_IN, LSTM_H, LSTM_LAYERS)),
}


# ------------------------------------------------------------------ tools: (model, x) -> MACs
# Imports stay inside the functions: a missing tool must not stop the others.
def torchinfo_macs(model, x):
    import torchinfo

    return torchinfo.summary(model, input_size=tuple(x.shape), verbose=0).total_mult_adds


def fvcore_macs(model, x):
    from fvcore.nn import FlopCountAnalysis

    flops = FlopCountAnalysis(model, x)
    flops.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    return flops.total()  # fvcore's "flop" is one multiply-add


def _ptflops(backend):
    def count(model, x):
        from ptflops import get_model_complexity_info

        # input_res excludes the batch dimension: ptflops prepends a batch of 1.
        macs, _ = get_model_complexity_info(model, tuple(x.shape[1:]), as_strings=False,
                                            print_per_layer_stat=False, verbose=False,
                                            backend=backend)
        if macs is None:  # ptflops catches the model's exception itself and returns None
            raise RuntimeError("ptflops returned None (it swallowed an exception)")
        return macs
    return count


def flop_counter_macs(model, x):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops() // 2  # it counts 2 FLOPs per multiply-add


def layerscope_macs(model, x):
    import layerscope

    return layerscope.analyze(model, inputs=tuple(x.shape)).totals.macs


def _ptflops_has_aten() -> bool:
    from ptflops.flops_counter import FLOPS_BACKEND

    return any(b.value == "aten" for b in FLOPS_BACKEND)


# name -> (count function, module it needs, extra availability check or None)
TOOLS = {
    "torchinfo": (torchinfo_macs, "torchinfo", None),
    "fvcore": (fvcore_macs, "fvcore", None),
    "ptflops (pytorch)": (_ptflops("pytorch"), "ptflops", None),
    "ptflops (aten)": (_ptflops("aten"), "ptflops", _ptflops_has_aten),
    "FlopCounterMode": (flop_counter_macs, "torch", None),
    "layerscope": (layerscope_macs, "layerscope", None),
}


# ------------------------------------------------------------------ measuring
@contextlib.contextmanager
def quiet_inference():
    """Inference as users run it (no_grad), with the tools' printing, warnings and logs muted."""
    sink = io.StringIO()
    logging.disable(logging.CRITICAL)  # fvcore and iopath log through `logging`
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink), torch.no_grad():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def measure(count, model, x, repeats: int) -> dict:
    """One warm-up call (imports, caches), then the median time of ``repeats`` calls."""
    try:
        with quiet_inference():
            macs = count(model, x)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                count(model, x)
                times.append(time.perf_counter() - start)
        return {"macs": int(macs), "seconds": statistics.median(times), "error": None}
    except Exception as exc:  # a crashing tool is a result too; the run goes on
        first = (str(exc).strip().splitlines() or [""])[0]
        return {"macs": None, "seconds": None, "error": f"{type(exc).__name__}: {first}"[:300]}


def unavailable(module: str, check) -> str | None:
    if importlib.util.find_spec(module) is None:
        return "not installed"
    if check is not None and not check():
        return "not available in this version"
    return None


def run(models: list[str], repeats: int) -> dict:
    results = {}
    for name in models:
        build, shape, truth = MODELS[name]
        torch.manual_seed(0)
        model = build().eval()
        x = torch.randn(shape)
        row = {"truth": {"macs": truth, "seconds": None, "error": None}}
        for tool, (count, module, check) in TOOLS.items():
            missing = unavailable(module, check)
            # A private copy per tool: ptflops' aten backend leaves forward hooks on the children,
            # and hooks switch off TransformerEncoderLayer's fused fast path for every later tool.
            cell = ({"macs": None, "seconds": None, "error": missing} if missing
                    else measure(count, copy.deepcopy(model), x, repeats))
            cell["rel_error"] = None if cell["macs"] is None else (cell["macs"] - truth) / truth
            row[tool] = cell
            print(f"  {name:<26} {tool:<18} {_cell(cell)}", flush=True)
        results[name] = row
    return results


# ------------------------------------------------------------------ reporting
def _cell(cell: dict) -> str:
    if cell["macs"] is None:
        return cell["error"]
    text = f"{cell['macs']:,}"
    if cell["seconds"] is not None:
        s = cell["seconds"]  # sub-10 ms timings (the small models) would all read "0.00 s"
        text += f" ({s:.2f} s)" if s >= 0.01 else f" ({s * 1e3:.1f} ms)"
    if cell.get("rel_error") is not None and abs(cell["rel_error"]) > TOLERANCE:
        text += f" ⚠ {cell['rel_error']:+.2%}"
    return text


def markdown(results: dict) -> str:
    columns = ["truth", *TOOLS]
    lines = ["| model | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, row in results.items():
        lines.append(f"| {name} | " + " | ".join(_cell(row[c]).replace("|", "/")
                                                 for c in columns) + " |")
    return "\n".join(lines)


def resnet50_line(results: dict) -> str | None:
    row = results.get("resnet50")
    if row is None or row["layerscope"]["seconds"] is None:
        return None
    others = {t: c["seconds"] for t, c in row.items()
              if t not in ("truth", "layerscope") and c["seconds"] is not None}
    if not others:
        return None
    fastest = min(others, key=others.get)
    return (f"resnet50: layerscope {row['layerscope']['seconds']:.3f} s vs fastest other tool "
            f"{others[fastest]:.3f} s ({fastest})")


def main(argv=None) -> None:
    models, repeats = parse_models_and_repeats(__doc__, list(MODELS), 5, argv)

    load_before = os.getloadavg()[0]
    results = run(models, repeats)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    # The load average tells a reader whether other work on the machine skewed the timings.
    meta = {"versions": versions(("torch", "torchvision", "torchinfo", "fvcore", "ptflops", "layerscope")), "repeats": repeats, "threads": torch.get_num_threads(),
            "loadavg_1min": [load_before, os.getloadavg()[0]]}
    RESULTS.write_text(json.dumps({"_meta": meta, **results}, indent=2) + "\n")

    print()
    print(markdown(results))
    line = resnet50_line(results)
    if line:
        print()
        print(line)
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
