"""Figures the docs quote are the figures the code and the benchmarks produce.

Each test reads the figure out of the markdown page itself, so the page and the test cannot
drift apart: a changed page fails here until its figure is produced again.

- A ``text`` fence right after an ``sh`` block of one command is that command's output: it is
  run again and compared line by line (trailing spaces aside).
- The table of other counters' figures on the definitions page is recomputed from the tools
  (torchinfo, ptflops and fvcore come from the ``bench`` extra; a column whose tool is not
  installed is skipped, FlopCounterMode's and layerscope's always run).
- Timings are never asserted: the figures a page quotes from a benchmark's result file
  (benchmarks/results/*.json) must be that file's, rounded as written.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import subprocess
import warnings

import pytest
import torch
import torch.nn as nn

import layerscope
from tests.doc_examples import REPO, docs_root, example_env, pages, parse_blocks

ROOT = docs_root()
RESULTS = REPO / "benchmarks" / "results"


def _page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _prose(name: str) -> str:
    """The page with every run of whitespace made one space (prose wraps anywhere)."""
    return " ".join(_page(name).split())


def _number(text: str) -> float:
    return float(text.replace(",", ""))


# ------------------------------------------------------------------ pasted command output
def _pasted_outputs() -> list[tuple[str, int, str, str]]:
    """(page, line, command, pasted text) for every one-command sh block followed by text."""
    found = []
    for page in map(str, pages(ROOT)):  # relative to ROOT
        blocks = parse_blocks(_page(page), page)
        for block, after in zip(blocks, blocks[1:]):
            if block.lang != "sh" or block.skip_reason is not None or after.lang != "text":
                continue
            commands = block.commands()
            if len(commands) == 1:
                found.append((page, block.line, commands[0].text, after.body))
    return found


PASTED = _pasted_outputs()


def test_the_docs_paste_command_output():
    pasted = {(page, command) for page, _, command, _ in PASTED}
    # the README's screenful, the same on the home page, and the large-models worked example
    assert ("README.md", "layerscope analyze mnist-cnn --width 150") in pasted
    assert ("docs/large-models.md", "layerscope llm llama-3-70b --context 32768 --gpu h100-sxm "
            "--width 100") in pasted


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


@pytest.mark.integration
@pytest.mark.parametrize("page,line,command,pasted", PASTED,
                         ids=[f"{p}:{n}" for p, n, _, _ in PASTED])
def test_pasted_output_is_the_commands_output(page, line, command, pasted, tmp_path):
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=example_env(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert _lines(pasted) == _lines(proc.stdout), (
        f"{page}:{line}: the text after `{command}` is not what it prints today; paste its "
        f"output again:\n{proc.stdout}")


# ------------------------------------------------------------------ other counters' figures
class _Causal(nn.Module):
    def forward(self, q):
        return nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)


def _module(code: str) -> nn.Module:
    """The module a table row names in its first cell."""
    if code.startswith("causal "):
        return _Causal()
    module = eval(code, {"nn": nn})  # the docs' own table: nn.X(...) constructors only
    return module.eval()


def _count(tool: str, module: nn.Module, shape: tuple[int, ...]) -> int:
    x = torch.randn(shape)
    with torch.no_grad(), warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if tool == "torchinfo":
            import torchinfo

            return torchinfo.summary(module, input_size=shape, verbose=0).total_mult_adds
        if tool == "ptflops":
            from ptflops import get_model_complexity_info

            return get_model_complexity_info(module, shape[1:], as_strings=False, backend="pytorch",
                                             print_per_layer_stat=False, verbose=False)[0]
        if tool == "fvcore":
            from fvcore.nn import FlopCountAnalysis

            counted = FlopCountAnalysis(module, x)
            counted.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
            return counted.tracer_warnings("none").total()
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            module(x)
        return counter.get_total_flops()


def _counter_table() -> tuple[list[str], list[list[str]]]:
    text = _page("docs/definitions.md")
    section = text[text.index("## Where our counts differ from other counters"):]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first:]:  # the section's first table, up to its first other line
        if not line.startswith("|"):
            break
        rows.append(line)
    split = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    header, body = split[0], split[2:]  # split[1] is the |---| line
    return header, body


HEADER, TABLE = _counter_table()
TOOLS = ("torchinfo", "ptflops", "fvcore", "FlopCounterMode")
CELLS = [(row[0].strip("`"), row[1], tool, row[HEADER.index(tool)])
         for row in TABLE for tool in TOOLS]


def test_counter_table_has_every_tool_and_row():
    assert HEADER == ["module", "input", "layerscope", *TOOLS]
    assert len(TABLE) == 8


def _shape(cell: str) -> tuple[int, ...]:
    return tuple(int(n) for n in cell.split("×"))


@pytest.mark.parametrize("code,shape,tool,quoted", CELLS,
                         ids=[f"{tool}-{code.split('(')[0]}-{i}"
                              for i, (code, _, tool, _) in enumerate(CELLS)])
def test_other_counters_figure(code, shape, tool, quoted):
    module_name = "torch" if tool == "FlopCounterMode" else tool
    if importlib.util.find_spec(module_name) is None:
        pytest.skip(f"{tool} is not installed (pip install -e .[bench])")
    assert _count(tool, _module(code), _shape(shape)) == _number(quoted)


@pytest.mark.parametrize("row", TABLE, ids=[row[0].split("(")[0].strip("`") for row in TABLE])
def test_layerscope_column(row):
    code, shape, cell = row[0].strip("`"), _shape(row[1]), row[2]
    totals = layerscope.analyze(_module(code), inputs=[shape]).totals
    quoted = dict((unit, _number(n)) for n, unit in re.findall(r"([\d,]+) (MACs|FLOPs)", cell))
    assert quoted, cell
    assert {unit: {"MACs": totals.macs, "FLOPs": totals.flops}[unit] for unit in quoted} == quoted


# ------------------------------------------------------------------ figures from benchmark files
def _run_overhead() -> dict[str, str]:
    """The your-script page's run-overhead figures, as the JSON gives them rounded as written."""
    d = json.loads((RESULTS / "run_overhead.json").read_text())
    processes, in_process = d["processes"], d["in_process"]
    step_s = processes["wall"]["bare_median_s"]
    hooks_us = d["hook_cost"]["hooks_us_per_step"]
    return {
        "step": f"~{step_s * 1e3:.0f} ms a step",
        "batch": f"batch {d['batch_size']}",
        "load": (f"load average {d['load_average_before'][0]:.1f}-"
                 f"{d['load_average_after'][0]:.1f}"),
        "hooks": f"the hooks cost {hooks_us:.0f} µs of CPU per step",
        "share": f"{hooks_us * 1e-6 / step_s:.2%} of the step",
        "pairs": f"{d['pairs']} interleaved pairs of processes",
        "processes": (f"{processes['wall']['overhead']:+.1%} wall / "
                      f"{processes['cpu']['overhead']:+.1%} CPU time per step"),
        "in_process": (f"{in_process['wall']['overhead']:+.1%} / "
                       f"{abs(in_process['cpu']['overhead']):+.1%}"),
    }


@pytest.mark.parametrize("name,phrase", sorted(_run_overhead().items()))
def test_run_overhead_figures_are_the_benchmarks(name, phrase):
    # the page writes a minus sign as "-"; a -0.0% rounds to the "+0.0%" it prints
    assert phrase in _prose("docs/your-script.md"), (
        f"docs/your-script.md should quote {phrase!r} from benchmarks/results/run_overhead.json")


def test_llm_analysis_time_is_the_benchmarks():
    d = json.loads((RESULTS / "llm_scale.json").read_text())
    seconds = d["llama-3.1-405b"]["layerscope"]["seconds"]
    assert f"takes {seconds:.2f} s in-process" in _prose("docs/large-models.md")
    assert d["_meta"]["seq_len"] == 2048 and d["_meta"]["repeats"] == 3


def test_startup_figure_is_the_benchmarks():
    d = json.loads((RESULTS / "startup.json").read_text())
    cpu = d["figures"]["layerscope analyze mnist-cnn"]["cpu"]["minus_import_torch_s"]
    assert d["_meta"]["rounds"] == 7 and d["_meta"]["cores"] == 2
    assert (f"`layerscope analyze mnist-cnn` costs {cpu:.1f} s of CPU more than `import torch`"
            in _prose("docs/development.md"))


# ------------------------------------------------------------------ the GPU runs kept
GPU = REPO / "benchmarks" / "gpu"


def _gpu_phrases(path) -> dict[str, str]:
    """The phrases benchmarks/gpu/README.md writes from a kept gpu-check run, built from the
    run's own figures, rounded as the page writes them."""
    tests = json.loads(path.read_text())["tests"]

    def figures(name: str) -> dict:
        return next(t["figures"] for key, t in tests.items() if key.endswith("::" + name))

    ms = "{:.2f} ms".format
    phrases = {}
    ablate = figures("test_ablate_every_variant")["variants"]
    phrases["ablate"] = ", ".join(f"{name} {ms(v['step_median_s'] * 1e3)}"
                                  for name, v in ablate.items())
    cells = figures("test_sweep_over_devices_and_dtypes")["cells"]
    phrases["sweep"] = ", ".join(f"{c['device']}/{c['dtype']} {ms(c['median_s'] * 1e3)}"
                                 for c in cells)
    amp = figures("test_amp_is_faster_than_float32_on_a_matmul_bound_step")
    step = {k: v * 1e3 for k, v in amp["step_median_s"].items()}
    phrases["autocast"] = (f"float32 {ms(step['float32'])}, bfloat16 {ms(step['bfloat16'])} "
                           f"({amp['speedup_bf16']:.1f}x), float16 {ms(step['float16'])} "
                           f"({amp['speedup_fp16']:.1f}x)")
    f32 = figures("test_roofline_within_the_datasheet[float32]")
    bf16 = figures("test_roofline_within_the_datasheet[bfloat16]")
    phrases["roofline"] = (f"float32 {f32['peak_flops'] / 1e12:.1f} TFLOP/s "
                           f"({f32['flops_fraction']:.0%} of the datasheet's "
                           f"{f32['datasheet_flops'] / 1e12:g}; TF32 off), bfloat16 "
                           f"{bf16['peak_flops'] / 1e12:.0f} TFLOP/s ({bf16['flops_fraction']:.0%}"
                           f" of {bf16['datasheet_flops'] / 1e12:g}), bandwidth "
                           f"{f32['bandwidth'] / 1e12:.2f} TB/s ({f32['bandwidth_fraction']:.0%} "
                           f"of {f32['datasheet_bandwidth'] / 1e12:g})")
    memory = {mode: figures(f"test_memory_measured_on_cuda_matches_the_static_peak[{mode}]")
              for mode in ("inference", "training")}
    inference, training = (memory[m]["reconciliation"] for m in ("inference", "training"))
    phrases["memory"] = (f"inference {memory['inference']['peak_bytes']:,} B in "
                         f"{memory['inference']['peak_phase']}; training with Adam "
                         f"{memory['training']['peak_bytes']:,} B in "
                         f"{memory['training']['peak_phase']}")
    phrases["allocator"] = (f"{inference['allocated_peak_bytes']:,} B allocated / "
                            f"{inference['reserved_peak_bytes']:,} B reserved (inference) and "
                            f"{training['allocated_peak_bytes']:,} / "
                            f"{training['reserved_peak_bytes']:,} B (training)")
    kernels = figures("test_profile_kernels_attributes_every_kernel")
    phrases["kernels"] = (f"{sum(s['kernels'] for s in kernels['per_step'])} device kernels "
                          f"({kernels['per_step'][0]['kernels']} a step)")
    ddp = figures("test_train_data_parallel_one_process")["communication"]
    phrases["ddp"] = (f"{ddp['bytes_per_step']:,} gradient bytes per step in "
                      f"{'one' if len(ddp['buckets']) == 1 else len(ddp['buckets'])} all-reduce "
                      f"bucket, {ddp['communication_s'] * 1e3:.2f} ms")
    return phrases


GPU_RUNS = {"gpu-check-h200-2026-11-27.json": "## NVIDIA H200, driver 580.159.04, torch "
            "2.11.0+cu130, CUDA 13.0, cuDNN 9.19.0 (2026-11-27)"}
GPU_PHRASES = [(run, name, phrase) for run in GPU_RUNS
               for name, phrase in _gpu_phrases(GPU / run).items()]


@pytest.mark.parametrize("run,name,phrase", GPU_PHRASES,
                         ids=[f"{r}:{n}" for r, n, _ in GPU_PHRASES])
def test_gpu_figures_are_the_kept_runs(run, name, phrase):
    """The section of benchmarks/gpu/README.md on a kept run quotes that run's figures (a
    section may add an earlier run's after them, named as such)."""
    text = (GPU / "README.md").read_text(encoding="utf-8")
    section = text[text.index(GPU_RUNS[run]):]
    section = " ".join(section[:section.find("\n## ", 1)].split())
    assert phrase in section, f"benchmarks/gpu/README.md should quote {phrase!r} from {run}"


# ------------------------------------------------------------------ figures computed by the API
@pytest.mark.integration
def test_tensor_parallel_activations_per_gpu():
    plan = layerscope.plan("llama-3-70b", gpus=64, seq_len=8192, tp=8)
    activations = {s.strategy: s.activations_bytes for s in plan.strategies}
    assert len(set(activations.values())) == 1
    quoted = re.search(r"With `--tp 8` instead: ([\d.]+) GB of activations per GPU",
                       _prose("docs/large-models.md"))
    assert quoted and f"{activations['zero3'] / 1e9:.1f}" == quoted.group(1)
    gathered = re.search(r"plus ([\d.]+) GB of the inputs that PyTorch's sequence parallelism",
                         _prose("docs/large-models.md"))
    assert gathered and f"{plan.strategies[0].gathered_inputs_bytes / 1e9:.1f}" \
        == gathered.group(1)
    fits = sorted(s.strategy for s in plan.strategies if s.fits)
    assert fits == ["fsdp", "zero2", "zero3"]
    assert "zero2, zero3 and fsdp fit without recomputation" in _prose("docs/large-models.md")


def test_activations_without_recomputation():
    plan = layerscope.plan("llama-3-70b", gpus=64, seq_len=8192)
    a = plan.activations
    held = {s.activations_bytes for s in plan.strategies}
    assert held == {a.layers_per_stage * a.per_layer_bytes + a.other_bytes}
    quoted = (f"Without recomputation no strategy fits: {a.layers_per_stage} blocks × "
              f"{a.per_layer_bytes / 1e9:.2f} GB of saved activations (one 8192-token sequence, "
              f"{plan.kernels} kernels) "
              f"and {a.other_bytes / 1e9:.2f} GB outside the blocks are {held.pop() / 1e9:.0f} "
              "GB per GPU.")
    assert quoted in _prose("docs/large-models.md")
    assert not any(s.fits for s in plan.strategies)


# ------------------------------------------------------------------ a pasted profile
def _table_rows(text: str) -> list[list[str]]:
    """The cells of every body row (│...│) of the first rich table in ``text``."""
    rows = []
    for line in text.splitlines():
        if line.startswith("└"):
            break
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


def test_pasted_profile_counts_are_the_analysis_counts():
    """The profiling page pastes one noisy run of `profile mnist-cnn`: its timings are that run's,
    its layers, types and MACs are the counts, the same as the README's checked `analyze`."""
    profile = parse_blocks(_page("docs/profiling.md"), "docs/profiling.md")
    pasted = next(b.body for b in profile if b.lang == "text" and "per-layer latency" in b.body)
    analyzed = next(body for page, _, command, body in PASTED
                    if page == "README.md" and command.startswith("layerscope analyze mnist-cnn"))
    def columns(text: str, names: list[str]) -> list[list[str]]:
        header = next(line for line in text.splitlines() if line.startswith("┃"))
        labels = [label.strip() for label in header.strip("┃").split("┃")]
        at = [labels.index(n) for n in names]
        return [[row[i] for i in at] for row in _table_rows(text)
                if row[0] not in ("Total", "End-to-end (bare)") and set(row[0]) != {"─"}]

    names = ["Layer", "Type", "MACs"]
    assert columns(pasted, names) == columns(analyzed, names)
