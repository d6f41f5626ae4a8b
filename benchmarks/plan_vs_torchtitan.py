"""``layerscope plan`` against the peak memory torchtitan published for Llama 3.1 8B and 70B.

Run from the repository root:

    .venv/bin/python benchmarks/plan_vs_torchtitan.py

The measured figures are those of ``benchmarks/llama3_h100_202412_torchtitan.md`` in
github.com/pytorch/torchtitan (added in commit 820504e2; the runs used torchtitan 9dec370 of
2024-12-26, torch 1963fc8, on H100s with 96 GB of HBM2e). Settings not in the tables come from
that commit's ``train_configs/llama3_8b.toml`` and ``llama3_70b.toml``: sequence length 8192,
bf16 mixed precision (fp32 master weights, AdamW), FSDP (``data_parallel_shard_degree = -1``)
with the last block not resharded after forward; "selective" activation checkpointing there is
``selective_ac_option = 'op'`` (the per-op policy of ``parallelize_llama.py``'s ``_save_list``:
``mm``, the flash/efficient SDPA kernels, ``reduce_scatter``, ``abs``/``max`` for float8, every
second ``mm`` recomputed), which is ``plan --recompute op``. The figure torchtitan logs is
``torch.cuda`` ``reserved_bytes.all.peak`` in GiB (``memory: ... GiB``): the caching allocator's
reserved memory, so fragmentation and every temporary are in it.

Each case is planned with the kernels its run used: eager PyTorch runs RMSNorm, SiLU x up and
GQA's expanded K/V as written (``--kernels unfused``); torch.compile fuses the norms and the
SwiGLU (``--kernels fused``; flash attention both ways). Float8 linears (torchao) are not
modelled: they save fp8 copies of some inputs and gather fp8 weights, which lowers memory
slightly (76.8 against 77.0 GiB in Table 1). The Llama-3 presets have the shapes of Llama 3.1
(only the RoPE scaling differs). ``before`` is the plan as it was before the kernels, op
checkpointing, loss-backward and gather lines (unfused; op planned as ``selective``, which
drops nothing under flash attention). ``previous`` is the plan before the tensor-parallel and
reduce-scatter lines (the peak less ``gathered_inputs``, ``loss_parallel`` and
``reduce_scatter``). Results go to ``benchmarks/results/plan_vs_torchtitan.json`` and a table to
stdout.

The 70B run (Table 4, row "2D": no async TP), as torchtitan 9dec370 builds it
(``parallelize_llama.py``, ``train.py``, ``config_manager.py``): 256 GPUs as FSDP 32 x TP 8,
local batch 16 per data-parallel rank (so each TP group of 8 GPUs runs 16 x 8192 tokens),
``activation_checkpoint.mode = 'full'`` (``checkpoint_wrapper`` around every block: the block
input is saved, sequence-sharded), ``torch.compile`` per block, Float8 linears (torchao, dynamic
scaling; ``Float8ColwiseParallel``/``PrepareFloat8ModuleInput`` cast the input to float8 before
the all-gather). Tensor parallelism: ``SequenceParallel`` norms, the attention and MLP inputs
all-gathered (``PrepareModuleInput`` to ``Replicate``) for the column-parallel wq/wk/wv and
w1/w3, row-parallel wo/w2 reduce-scattered back to the sequence shard; the embedding
row-parallel, the head column-parallel with loss parallel (the fp32 log-softmax and its
backward sharded over the vocabulary). FSDP2 mixed precision: bf16 parameters, fp32 gradient
reduction (``mixed_precision_reduce = 'float32'``), every block but the last resharded after
forward; AdamW with ``foreach``; ``del pred`` before ``loss.backward()``. Under full
checkpointing the all-gathers are redone in the recompute, so plan counts the gathered inputs
of one block and the head's input.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layerscope.analysis.plan import plan  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "plan_vs_torchtitan.json"
SOURCE = ("github.com/pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md "
          "(runs at torchtitan 9dec370, 2024-12-26)")
GIB = 2**30

# (case, table row, preset, GPUs, tp, local batch, seq, recompute, kernels, measured GiB)
CASES = [
    ("8b-fsdp8-sac", "Table 1, FSDP (8 GPUs, eager)", "llama-3-8b", 8, 1, 2, 8192, "op",
     "unfused", 82.4),
    ("8b-fsdp8-sac-compile", "Table 1, FSDP + torch.compile", "llama-3-8b", 8, 1, 2, 8192,
     "op", "fused", 77.0),
    ("8b-fsdp128-sac", "Table 3, FSDP (128 GPUs, eager)", "llama-3-8b", 128, 1, 2, 8192, "op",
     "unfused", 67.0),
    ("8b-fsdp128-sac-compile", "Table 3, FSDP + torch.compile", "llama-3-8b", 128, 1, 2, 8192,
     "op", "fused", 62.0),
    ("8b-fsdp8-full-32k", "Table 2, FSDP 8 CP 1, seq 32768 (compile + float8)", "llama-3-8b",
     8, 1, 1, 32768, "full", "fused", 83.9),
    ("70b-fsdp32-tp8-full", "Table 4, 2D FSDP 32 x TP 8 (compile + float8)", "llama-3-70b",
     256, 8, 16, 8192, "full", "fused", 71.9),
]


def run_case(preset: str, gpus: int, tp: int, batch: int, seq: int, recompute: str,
             kernels: str) -> dict:
    r = plan(preset, gpus, tp=tp, micro_batch=batch, seq_len=seq, recompute=recompute,
             kernels=kernels, strategy="fsdp", gpu_memory="96GB")
    row, a = r.strategies[0], r.activations
    old = plan(preset, gpus, tp=tp, micro_batch=batch, seq_len=seq, kernels="unfused",
               recompute="selective" if recompute == "op" else recompute, strategy="fsdp")
    o = old.strategies[0]
    before = (o.peak_bytes - (o.logprobs_grad_bytes or 0) - (o.logits_grad_bytes or 0)
              - o.gather_bytes - o.gathered_inputs_bytes - o.loss_parallel_bytes
              - o.reduce_scatter_bytes)
    added = row.gathered_inputs_bytes + row.loss_parallel_bytes + row.reduce_scatter_bytes
    return {"peak_bytes": row.peak_bytes, "before_bytes": before,
            "previous_bytes": row.peak_bytes - added,
            "parts_bytes": {"model_states": row.weights_bytes + row.grads_bytes
                            + row.optimizer_bytes, "activations": row.activations_bytes,
                            "recompute_working": a.recompute_working_bytes // tp,
                            "loss_backward": (row.logprobs_grad_bytes or 0)
                            + (row.logits_grad_bytes or 0),
                            "gather": row.gather_bytes or 0,
                            "gathered_inputs": row.gathered_inputs_bytes,
                            "loss_parallel": row.loss_parallel_bytes,
                            "reduce_scatter": row.reduce_scatter_bytes}}


def main() -> int:
    out = {"_meta": {"source": SOURCE, "measured": "max reserved GiB (torch.cuda)",
                     "load_1min": os.getloadavg()[0]}, "cases": {}}
    print(f"{'case':26} {'measured':>9} {'plan':>8} {'ratio':>6} {'previous':>8} {'ratio':>6} "
          f"{'before':>8} {'ratio':>6}")
    for case, where, preset, gpus, tp, batch, seq, recompute, kernels, measured in CASES:
        got = run_case(preset, gpus, tp, batch, seq, recompute, kernels)
        plan_gib, before_gib = got["peak_bytes"] / GIB, got["before_bytes"] / GIB
        previous_gib = got["previous_bytes"] / GIB
        out["cases"][case] = {
            "where": where, "model": preset, "gpus": gpus, "tp": tp, "local_batch": batch,
            "seq_len": seq, "recompute": recompute, "kernels": kernels,
            "measured_gib": measured, "plan_gib": round(plan_gib, 2),
            "ratio_measured_to_plan": round(measured / plan_gib, 3),
            "previous_gib": round(previous_gib, 2),
            "ratio_measured_to_previous": round(measured / previous_gib, 3),
            "before_gib": round(before_gib, 2),
            "ratio_measured_to_before": round(measured / before_gib, 3),
            "plan_parts_gib": {k: round(v / GIB, 2) for k, v in got["parts_bytes"].items()}}
        print(f"{case:26} {measured:9.1f} {plan_gib:8.1f} {measured / plan_gib:6.2f} "
              f"{previous_gib:8.1f} {measured / previous_gib:6.2f} "
              f"{before_gib:8.1f} {measured / before_gib:6.2f}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
