"""layerscope memory MODEL | SCRIPT.py [ARGS]: where the memory of one inference pass or training
step goes; for a script, the script's own second training step (``training.memory_step``), run
as ``layerscope run`` runs it."""
from __future__ import annotations

import dataclasses
import os
import sys
from types import SimpleNamespace

from layerscope.analysis.memory_settings import MemorySettings
from layerscope.cli.common import add_all_settings, add_output, check_outputs, emit, settings_from
from layerscope.core.errors import UserError
from layerscope.core.settings import flag_of


def register(sub) -> None:
    p = sub.add_parser("memory", help="the live memory of one inference pass or training step, "
                                      "by module and kind at its peak, and over time")
    add_all_settings(p, MemorySettings)
    add_output(p)
    p.add_argument("script_args", nargs="*", metavar="ARGS",
                   help="with a script (MODEL is SCRIPT.py, or python SCRIPT.py): its "
                        "arguments, every word after the script (memory's own options go "
                        "before it: layerscope memory --mode training train.py --epochs 1)")
    p.script_after("script_args", names_script)
    p.set_defaults(run=run)


# options that describe a model's inputs or a static search: a script brings its own
_NOT_FOR_SCRIPTS = ("inputs", "batch_size", "seq_len", "fit", "fit_seq")


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
    s = settings_from(MemorySettings, args)
    check_outputs(args)
    emit(memory(settings=s), args)
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

    s = settings_from(MemorySettings, args)
    fields = {f.name: f for f in dataclasses.fields(MemorySettings)}
    for name in _NOT_FOR_SCRIPTS:
        if getattr(s, name):
            raise UserError(f"{flag_of(fields[name])} is for a model given by name: a script's "
                            "step uses the script's own model, batch and optimizer; leave it "
                            "out")
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
