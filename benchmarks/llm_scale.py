"""Large language models on the meta device: layerscope's analysis time against FlopCounterMode.

Run from the repository root:

    .venv/bin/python benchmarks/llm_scale.py
    .venv/bin/python benchmarks/llm_scale.py --models llama-3-8b,llama-3-70b --repeats 3

Per model (the Llama configurations of ``layerscope/frontends/llm_configs.py``, built on the meta
device: the built-in preset when layerscope has it, otherwise this file's own Llama module, which
has the same parameters), in one process and interleaved (model by model, tool by tool, each
repeat a new round, so that a burst of load hits every column alike):

- ``layerscope``: ``layerscope.analyze(model, ids)`` (capture, rows and totals; repeated blocks
  replayed, the default; causal attention counted as the lower triangle, so its MACs are below
  FlopCounterMode's, which counts the whole matrix: the JSON also keeps layerscope's MACs with
  ``attention="full"``, equal to FlopCounterMode's);
- ``layerscope_traced``: the capture alone with ``reuse_blocks=False`` (every block traced, what
  the analysis did before blocks were reused);
- ``flop_counter``: ``torch.utils.flop_counter.FlopCounterMode`` around ``model(ids)`` on meta;
- ``accelerate``: ``accelerate.utils.calculate_maximum_sizes`` (weights only: no MACs), when
  installed; DeepSpeed's ``estimate_zero3_model_states_mem_needs_all_live`` (model states
  only: no MACs) when deepspeed is importable. It is in no extra; its estimators need no CUDA
  build: ``pip install --no-deps --target DIR deepspeed hjson py-cpuinfo msgpack ninja einops``
  and ``PYTHONPATH=DIR`` is enough.

Then the command line, one child process per run: ``layerscope analyze llama-3.1-405b`` (or
the factory ``benchmarks/llm_scale.py:llama_3_1_405b``), its wall time, CPU time (user + system:
the wall time an idle machine would give) and maximum resident set size (``os.wait4``'s rusage
of that child). Timings are the median of ``--repeats``; the JSON's
``_meta`` keeps the 1-minute load average before and after (the machine is shared). Results go to
``benchmarks/results/llm_scale.json``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "llm_scale.json"
MODELS = ("llama-3-8b", "llama-3-70b", "llama-3.1-405b")
CLI_MODEL = "llama-3.1-405b"
SEQ = 2048


# ------------------------------------------------------------------ a Llama built from the config
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) \
            * self.weight


def _rotate(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat((-x2, x1), -1) * sin


class Attention(nn.Module):
    """Grouped-query attention with rotary positions and causal SDPA."""

    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.head_dim, self.theta = c.head_dim, c.rope_theta
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device).float()
        inv = self.theta ** -(torch.arange(0, self.head_dim, 2, device=ids.device).float()
                              / self.head_dim)
        angles = torch.outer(pos, inv).repeat(1, 2)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def own_llama(name: str) -> nn.Module:
    from layerscope.frontends.llm_configs import PRESETS

    with torch.device("meta"):
        return Llama(PRESETS[name])


def llama_3_1_405b():
    """``benchmarks/llm_scale.py:llama_3_1_405b`` for the CLI when there is no such preset."""
    return own_llama("llama-3.1-405b"), [torch.zeros(1, SEQ, dtype=torch.int64)]


def has_preset(name: str) -> bool:
    from layerscope.frontends import zoo

    return zoo.lookup(name) is not None


def build(name: str) -> tuple[nn.Module, str]:
    """The model on meta, and where it came from."""
    if has_preset(name):
        from layerscope.frontends.torch_module import resolve

        return resolve(name, meta=True).module, "layerscope preset"
    return own_llama(name), "benchmarks/llm_scale.py Llama"


# ------------------------------------------------------------------ the tools
def layerscope_analyze(model, ids, **options):
    import layerscope

    return layerscope.analyze(model, ids, **options).totals.macs


def layerscope_traced(model, ids):
    from layerscope.analysis import capture, static

    cap = capture.capture(model, [ids], reuse_blocks=False)
    return static.totals(cap, model).macs


def flop_counter(model, ids):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids.to("meta"))
    return counter.get_total_flops() // 2


def accelerate_sizes(model, ids):
    from accelerate.utils import calculate_maximum_sizes

    calculate_maximum_sizes(model)
    return None  # weights only: no MACs


def deepspeed_states(model, ids):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs_all_live

    with contextlib.redirect_stdout(io.StringIO()):
        estimate_zero3_model_states_mem_needs_all_live(model, num_gpus_per_node=8, num_nodes=8)
    return None


TOOLS = {"layerscope": layerscope_analyze, "layerscope_traced": layerscope_traced,
         "flop_counter": flop_counter, "accelerate": accelerate_sizes,
         "deepspeed": deepspeed_states}
NEEDS = {"accelerate": "accelerate", "deepspeed": "deepspeed"}


def available(tool: str) -> bool:
    import importlib.util

    return tool not in NEEDS or importlib.util.find_spec(NEEDS[tool]) is not None


def in_process(models: list[str], repeats: int) -> dict:
    ids = torch.zeros(1, SEQ, dtype=torch.int64)
    built = {name: build(name) for name in models}
    tools = [t for t in TOOLS if available(t)]
    times: dict = {m: {t: [] for t in tools} for m in models}
    macs: dict = {m: {} for m in models}
    full = {}  # layerscope counting causal attention whole, as FlopCounterMode does
    for name in models:  # warm-up: imports and first-call caches off the clock
        for tool in tools:
            macs[name][tool] = TOOLS[tool](built[name][0], ids)
        full[name] = layerscope_analyze(built[name][0], ids, attention="full")
    for _ in range(repeats):
        for name in models:
            for tool in tools:
                start = time.perf_counter()
                TOOLS[tool](built[name][0], ids)
                times[name][tool].append(time.perf_counter() - start)
    out = {}
    for name in models:
        model = built[name][0]
        out[name] = {"source": built[name][1],
                     "params": sum(p.numel() for p in model.parameters()),
                     "layerscope_macs_attention_full": full[name],
                     **{t: {"seconds": statistics.median(times[name][t]),
                            "all_seconds": times[name][t], "macs": macs[name][t]}
                        for t in tools},
                     **{t: {"error": f"{NEEDS[t]} is not installed"}
                        for t in TOOLS if t not in tools}}
    return out


def cli_run(repeats: int) -> dict:
    """Wall time and max RSS of ``layerscope analyze`` of the 405B model, one child per run."""
    spec = CLI_MODEL if has_preset(CLI_MODEL) else "benchmarks/llm_scale.py:llama_3_1_405b"
    cmd = [sys.executable, "-m", "layerscope", "analyze", spec]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = []
    from _common import timed_run

    for _ in range(repeats):
        run = timed_run(cmd, env=env, cwd=str(ROOT))
        if run["status"] != 0:
            return {"command": " ".join(cmd[1:]), "error": run["stderr"][-500:]}
        runs.append({"wall_seconds": run["wall_seconds"], "max_rss_bytes": run["max_rss_bytes"],
                     "cpu_seconds": run["cpu_seconds"],
                     "output_lines": run["stdout"].count("\n"),
                     "loadavg_1min": os.getloadavg()[0]})
    return {"command": "layerscope analyze " + spec,
            "wall_seconds": statistics.median(r["wall_seconds"] for r in runs),
            "cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs),
            "max_rss_bytes": max(r["max_rss_bytes"] for r in runs), "runs": runs}


def markdown(results: dict) -> str:
    tools = [t for t in TOOLS if any("seconds" in results[m].get(t, {}) for m in results)]
    lines = ["| model | params | " + " | ".join(f"{t} s" for t in tools) + " | MACs (layerscope,"
             " causal) | MACs (layerscope, --attention full) | MACs (FlopCounterMode) |",
             "|---" * (len(tools) + 5) + "|"]
    for name, r in results.items():
        cells = [f"{r[t]['seconds']:.2f}" for t in tools]
        lines.append(f"| {name} | {r['params']:,} | " + " | ".join(cells)
                     + f" | {r['layerscope']['macs']:,} | {r['layerscope_macs_attention_full']:,}"
                     f" | {r['flop_counter']['macs']:,} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    # a sibling module: imported here, so that the CLI can load this file as a factory
    from _common import parse_models_and_repeats, versions

    models, repeats = parse_models_and_repeats(__doc__, list(MODELS), 3, argv)
    load_before = os.getloadavg()[0]
    results = in_process(models, repeats)
    cli = cli_run(repeats)
    meta = {"versions": versions(("torch", "accelerate", "deepspeed", "layerscope")),
            "repeats": repeats, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "seq_len": SEQ, "loadavg_1min": [load_before, os.getloadavg()[0]]}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"_meta": meta, "cli": cli, **results}, indent=2) + "\n")
    print(markdown(results))
    if "error" in cli:
        print(f"\nCLI failed: {cli['error']}")
    else:
        print(f"\n{cli['command']}: {cli['wall_seconds']:.1f} s wall, {cli['cpu_seconds']:.1f} s "
              f"CPU (medians), max RSS {cli['max_rss_bytes'] / 2**30:.2f} GiB")
    print(f"load average {meta['loadavg_1min']}\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
