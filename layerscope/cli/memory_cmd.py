"""layerscope memory MODEL | SCRIPT.py [ARGS]: where the memory of one inference pass or training
step goes; for a script, the script's own second training step (``training.memory_step``), run
as ``layerscope run`` runs it."""
from __future__ import annotations

import os
import sys
from types import SimpleNamespace

from layerscope.cli.common import (
    OPTIMIZER_NAMES,
    add_device,
    add_mode,
    add_model_inputs,
    add_optimizer,
    add_output,
    add_seq_len,
    check_outputs,
    emit,
)
from layerscope.core.errors import UserError
from layerscope.core.values import arg, byte_size


def register(sub) -> None:
    p = sub.add_parser("memory", help="the live memory of one inference pass or training step, "
                                      "by module and kind at its peak, and over time")
    add_model_inputs(p)
    add_mode(p)
    add_optimizer(p, "optimizer whose states --mode training tracks: sgd (none), momentum "
                     "(SGD with momentum 0.9), adam, adamw or adadelta (default: a train "
                     "recipe's own for its name, else adam)",
                  names=OPTIMIZER_NAMES + ("adadelta",), default=None)
    p.add_argument("--zero-grad", choices=["none", "zeros"], default="none",
                   help="what optimizer.zero_grad() does between steps: none frees the gradients "
                        "(set_to_none=True, torch's default), zeros keeps them, zeroed")
    p.add_argument("--measure", action="store_true",
                   help="also run the step for real on the CPU (random weights, zero inputs) "
                        "and reconcile its peak with the static one")
    add_device(p)  # where --measure runs the step (cuda: the allocator's figures too)
    p.add_argument("--fit", type=arg(byte_size), default=None, metavar="SIZE",
                   help="also the largest batch size whose peak fits this budget: 24GB (10^9 "
                        "bytes), 24GiB (2^30), ...")
    p.add_argument("--fit-seq", action="store_true",
                   help="with --fit, for a language model: also the longest --seq-len that "
                        "fits at --batch-size")
    add_seq_len(p)
    add_output(p)
    p.add_argument("script_args", nargs="*", metavar="ARGS",
                   help="with a script (MODEL is SCRIPT.py, or python SCRIPT.py): its "
                        "arguments, every word after the script (memory's own options go "
                        "before it: layerscope memory --mode training train.py --epochs 1)")
    p.script_after("script_args", names_script)
    p.set_defaults(run=run)


# options that describe a model's inputs or a static search: a script brings its own
_NOT_FOR_SCRIPTS = (("input", "--input"), ("batch_size", "--batch-size"),
                    ("seq_len", "--seq-len"), ("fit", "--fit"), ("fit_seq", "--fit-seq"))


def names_script(model: str) -> bool:
    """MODEL names a script to run: a .py file (a model file needs file.py:factory) or an
    interpreter (``python SCRIPT.py``)."""
    from layerscope.cli.script_target import is_interpreter

    return (model.endswith(".py") and os.path.isfile(model)) or is_interpreter(model)


def _is_script(args) -> bool:
    return names_script(args.model)


def run(args) -> int:
    from layerscope.training.recipe_memory import memory

    if _is_script(args):
        return _run_script(args)
    if args.script_args:
        raise UserError(f"unexpected arguments {' '.join(args.script_args)}: arguments after "
                        "MODEL are a script's (give SCRIPT.py to track a script's step)")
    check_outputs(args)
    report = memory(args.model, args.input, batch_size=args.batch_size, mode=args.mode,
                    optimizer=args.optimizer, set_to_none=args.zero_grad == "none",
                    measure=args.measure, seq_len=args.seq_len, fit=args.fit,
                    fit_seq=args.fit_seq, device=args.device)
    emit(report, args)
    return 0


def _run_script(args) -> int:
    """Run the script as ``layerscope run`` does (its output and exit code its own), track its
    second training step, stop it there, and write the report (standard error unless -o)."""
    from layerscope.cli.script_target import (
        absolute_outputs,
        check_script_outputs,
        script_target,
        write_before_end,
    )
    from layerscope.training.memory_step import StepMemory
    from layerscope.training.script_runner import execute

    for dest, flag in _NOT_FOR_SCRIPTS:
        if getattr(args, dest, None):
            raise UserError(f"{flag} is for a model given by name: a script's step uses the "
                            "script's own model, batch and optimizer; leave it out")
    target, script_args, is_module = script_target(
        SimpleNamespace(module=None, script=[args.model, *args.script_args]))
    check_script_outputs(args)
    absolute_outputs(args)
    name = target if is_module else os.path.basename(target)
    tracker = StepMemory(name)
    failure: list[str] = []
    reported: list[bool] = []

    def ended(code: int | None) -> None:  # os._exit or os.exec* before the second step ended
        reported.append(True)
        write_before_end(lambda: _after(tracker, args, code or 0,
                                  [f"exit code {code}"] if code else []))

    code = execute(target, script_args, is_module, tracker, failure, ended)
    return code if reported else _after(tracker, args, code, failure)


def _after(tracker, args, code: int, failure: list[str]) -> int:
    """The report of the tracked step once the script has stopped, or why there is none."""
    from layerscope.cli.script_target import show_report

    if not tracker.tracked() and tracker.why is not None:
        print(f"layerscope: {tracker.why}; no report", file=sys.stderr)
        return code or 2
    if not tracker.tracked():
        ended = f"ended with {failure[0]}" if failure else "ended"
        print(f"layerscope: the script {ended} after {tracker.steps} optimizer step(s): memory "
              "tracks the second training step (the first is the warm-up); no report",
              file=sys.stderr)
        return code or 2
    show_report(tracker.report(), args)
    return code
