"""layerscope plan MODEL --gpus N: per-device training memory (weights, gradients, Adam states,
measured activations) for each sharding strategy, and whether it fits the GPU."""
from __future__ import annotations

from layerscope.cli.common import add_output, check_outputs, emit
from layerscope.core.llm_records import KERNELS, RECOMPUTE, STRATEGIES, TRAIN_DTYPES
from layerscope.core.values import arg, byte_size, positive_int


def register(sub) -> None:
    p = sub.add_parser("plan", help="LLM training memory per GPU under DDP / ZeRO / FSDP, "
                                    "tensor and pipeline parallelism")
    p.add_argument("model", help="an LLM preset (llama-3-70b, ...) or hf:PATH/config.json")
    p.add_argument("--gpus", type=arg(positive_int), required=True, help="devices in all")
    p.add_argument("--strategy", choices=list(STRATEGIES), default=None,
                   help="one strategy (default: a table of all)")
    p.add_argument("--tp", type=arg(positive_int), default=1, help="tensor-parallel degree")
    p.add_argument("--pp", type=arg(positive_int), default=1, help="pipeline stages")
    p.add_argument("--micro-batch", type=arg(positive_int), default=1,
                   help="sequences per micro-batch")
    p.add_argument("--seq-len", type=arg(positive_int), default=None,
                   help="tokens per sequence (default: the preset's)")
    p.add_argument("--recompute", choices=list(RECOMPUTE), default="none",
                   help="activation recomputation (selective: attention scores; op: torchtitan's "
                        "per-op checkpointing, keeping every other matmul's output; full: "
                        "blocks)")
    p.add_argument("--kernels", choices=list(KERNELS), default=None,
                   help="fused: fused norms, SwiGLU and flash attention on un-expanded K/V, "
                        "counted from the shapes; unfused: the block's code as measured "
                        "(default: fused for a dense preset, unfused otherwise)")
    p.add_argument("--dtype", choices=list(TRAIN_DTYPES), default="bf16",
                   help="training precision (bf16/fp16: mixed-precision Adam, 16 bytes/param)")
    p.add_argument("--gpu-memory", type=arg(byte_size), default="80GB", metavar="SIZE",
                   help="memory per GPU: 80GB (10^9 bytes), 80GiB (2^30), ... (default 80GB)")
    p.add_argument("--fit", type=arg(byte_size), default=None, metavar="SIZE",
                   help="also each strategy's largest micro-batch whose peak fits this budget "
                        "per GPU (80GB, 80GiB, ...)")
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.plan import plan

    check_outputs(args)
    report = plan(args.model, args.gpus, strategy=args.strategy, tp=args.tp, pp=args.pp,
                  micro_batch=args.micro_batch, seq_len=args.seq_len, recompute=args.recompute,
                  dtype=args.dtype, gpu_memory=args.gpu_memory, kernels=args.kernels,
                  fit=args.fit)
    emit(report, args)
    return 0
