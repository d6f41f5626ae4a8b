"""layerscope llm MODEL: parameters, weight bytes, prefill/decode cost, KV cache and a roofline
bound of a decoder-only language model (a preset or hf:config.json), without its weights."""
from __future__ import annotations

from layerscope.cli.common import add_output, check_outputs, emit, input_options
from layerscope.core.llm_records import ATTENTION, DTYPE_BYTES
from layerscope.core.values import arg, positive_int


def register(sub) -> None:
    p = sub.add_parser("llm", help="LLM inference cost: parameters, prefill/decode FLOPs, KV "
                                   "cache, tokens/s bound on a GPU")
    p.add_argument("model", help="an LLM preset (gpt2, llama-3-8b, llama-3-70b, llama-3.1-405b, "
                                 "mixtral-8x7b, qwen2.5-7b) or hf:PATH/config.json")
    p.add_argument("--seq-len", type=arg(positive_int), default=None,
                   help="prompt length S (default: the preset's, 2048 for most)")
    p.add_argument("--context", type=arg(positive_int), default=None,
                   help="tokens in the KV cache for decode and the cache size (default: S)")
    p.add_argument("--batch-size", type=arg(positive_int), default=1, help="sequences B")
    p.add_argument("--dtype", choices=list(DTYPE_BYTES), default="bf16",
                   help="weight dtype for the roofline bound (default bf16)")
    p.add_argument("--kv-dtype", choices=list(DTYPE_BYTES), default=None,
                   help="KV-cache dtype (default: --dtype)")
    p.add_argument("--gpu", default=None, metavar="NAME|FILE.json",
                   help="h100-sxm, h100-pcie, h200, a100-40gb, a100-80gb, l4, rtx-4090 or a "
                        "JSON file (name, bf16_flops, bandwidth_bytes_per_s, memory_bytes)")
    p.add_argument("--tp", type=arg(positive_int), default=1,
                   help="GPUs the weights and KV cache are split across for the --gpu bound "
                        "(tensor parallel; default 1)")
    p.add_argument("--attention", choices=list(ATTENTION), default="causal",
                   help="count causal attention's lower triangle (default) or the full matrix")
    add_output(p)
    input_options(p, "gpu")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.llm import gpu_spec, llm

    check_outputs(args)
    gpu = gpu_spec(args.gpu) if args.gpu is not None else None  # a bad --gpu fails first
    report = llm(args.model, seq_len=args.seq_len, context=args.context,
                 batch_size=args.batch_size, dtype=args.dtype, kv_dtype=args.kv_dtype, gpu=gpu,
                 attention=args.attention, tp=args.tp)
    emit(report, args)
    return 0
