"""layerscope memory MODEL: where the memory of one inference pass or training step goes."""
from __future__ import annotations

from layerscope.cli.common import (
    add_mode,
    add_model_inputs,
    add_optimizer,
    add_output,
    add_seq_len,
    check_outputs,
    emit,
)
from layerscope.core.values import arg, byte_size


def register(sub) -> None:
    p = sub.add_parser("memory", help="the live memory of one inference pass or training step, "
                                      "by module and kind at its peak, and over time")
    add_model_inputs(p)
    add_mode(p)
    add_optimizer(p, "optimizer whose states --mode training tracks: sgd (none), momentum "
                     "(SGD with momentum 0.9), adam or adamw (default adam)")
    p.add_argument("--zero-grad", choices=["none", "zeros"], default="none",
                   help="what optimizer.zero_grad() does between steps: none frees the gradients "
                        "(set_to_none=True, torch's default), zeros keeps them, zeroed")
    p.add_argument("--measure", action="store_true",
                   help="also run the step for real on the CPU (random weights, zero inputs) "
                        "and reconcile its peak with the static one")
    p.add_argument("--fit", type=arg(byte_size), default=None, metavar="SIZE",
                   help="also the largest batch size whose peak fits this budget: 24GB (10^9 "
                        "bytes), 24GiB (2^30), ...")
    p.add_argument("--fit-seq", action="store_true",
                   help="with --fit, for a language model: also the longest --seq-len that "
                        "fits at --batch-size")
    add_seq_len(p)
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.memory_usage import memory

    check_outputs(args)
    report = memory(args.model, args.input, batch_size=args.batch_size, mode=args.mode,
                    optimizer=args.optimizer, set_to_none=args.zero_grad == "none",
                    measure=args.measure, seq_len=args.seq_len, fit=args.fit,
                    fit_seq=args.fit_seq)
    emit(report, args)
    return 0
