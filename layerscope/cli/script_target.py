"""What ``layerscope run`` and ``layerscope memory SCRIPT.py`` share about the user's script:
which script (or ``-m`` module) the command line names and with which arguments, the output
paths checked before it starts and made absolute (the script may change directory), and the
report written where the script's own output is not (standard error unless ``-o``), also
when the script ends the process without returning (``write_before_end``). Running the script
is ``training.script_runner``'s."""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

from layerscope.cli.common import (
    OUTPUT_FOLDERS,
    OUTPUT_OPTIONS,
    check_outputs,
    emit,
    write_report_files,
)
from layerscope.core.errors import UserError


def script_target(args) -> tuple[str, list[str], bool]:
    """(script path or module name, its arguments, is_module)."""
    if args.module:
        if args.script:
            raise UserError("give a script or -m MODULE, not both")
        return args.module[0], list(args.module[1:]), True
    if args.module is not None:
        raise UserError("-m needs a module name: layerscope run -m package.module [ARGS]")
    if not args.script:
        raise UserError("give the script to run: layerscope run [OPTIONS] SCRIPT.py [ARGS...]")
    if args.script[0] == "--":  # run [OPTIONS] -- SCRIPT.py ARGS: the options end here
        args.script = args.script[1:]
        if not args.script:
            raise UserError("give the script to run after --: layerscope run [OPTIONS] -- "
                            "SCRIPT.py [ARGS...]")
    if is_interpreter(args.script[0]):  # run -- python SCRIPT.py: the script runs in this one
        args.script = args.script[1:]
        if args.script[:1] == ["-m"]:
            if len(args.script) < 2:
                raise UserError("-m needs a module name: layerscope run -m package.module [ARGS]")
            return args.script[1], list(args.script[2:]), True
        if not args.script or args.script[0].startswith("-"):
            raise UserError("give the script after python: layerscope run [OPTIONS] -- python "
                            "SCRIPT.py [ARGS...] (interpreter options such as -u are not taken: "
                            "the script runs in layerscope's own interpreter)")
    script = args.script[0]
    if script.startswith("-"):
        raise UserError(f"unknown option {script}: options go before the script (see --help)")
    if os.path.isdir(script):
        raise UserError(f"{script} is a folder: give the path of a Python file (or -m MODULE)")
    if not os.path.isfile(script):
        raise UserError(f"no such script {script}: give the path of a Python file")
    return script, list(args.script[1:]), False


INTERPRETER = re.compile(r"python(\d+(\.\d+)*)?(\.exe)?")


def is_interpreter(word: str) -> bool:
    """``python``, ``python3``, ``python3.11`` or this interpreter's path, typed before the
    script as one would without layerscope (a Python file of that name is a script)."""
    if os.path.isfile(word) and word.endswith(".py"):
        return False
    return (INTERPRETER.fullmatch(os.path.basename(word)) is not None
            or os.path.realpath(word) == os.path.realpath(sys.executable))


def check_script_outputs(args) -> None:
    """Every output path is checked before the script runs (nothing half-done after)."""
    from layerscope.renderers import pick_format

    if args.output == "-" and pick_format(args.format, args.output) == "png":
        # standard output is the script's: a PNG there would be mixed into its output
        raise UserError("--format png writes a binary file: give -o FILE.png")
    check_outputs(args)


def absolute_outputs(args) -> None:
    """Output paths (every file option and every folder the command creates, as cli.common
    declares them) resolved against the working directory the command started in: a script
    that changes directory (``os.chdir``) must not make ``-o r.json`` overwrite a file of its
    new folder."""
    from layerscope.core.io import current

    tx = current()
    folders = getattr(args, OUTPUT_FOLDERS, None) or ()
    for _, dest in (*OUTPUT_OPTIONS, *folders):
        path = getattr(args, dest, None)
        if path and path != "-":
            setattr(args, dest, os.path.abspath(path))
            if tx is not None:  # "wrote PATH" names it as the user gave it
                tx.shown[os.path.abspath(path)] = path


def show_report(report, args) -> None:
    """The report of a watched script: to ``-o`` (``-o -``: standard output, as asked), else on
    standard error (the script's standard output stays its own) with the report files its
    options ask for."""
    from rich.console import Console

    from layerscope.renderers import pick_format, render
    from layerscope.renderers.terminal import render_table

    if args.output:
        emit(report, args)
        return
    fmt = pick_format(args.format, None)
    if fmt == "table":
        Console(stderr=True, width=args.width or (None if sys.stderr.isatty() else 160),
                highlight=False).print(render_table(report))
    else:
        sys.stderr.write(render(report, fmt, width=args.width or 160))
    write_report_files(report, args)


def write_before_end(write: Callable[[], Any]) -> None:
    """What a command writes after its script, done before the script's ``os._exit`` or
    ``os.exec*`` ends the process: every output put in place now (the command's ``outputs()``
    block will not end), an error as its one line (the process ends as the script asked
    whatever happens here)."""
    from layerscope.core.errors import first_line
    from layerscope.core.io import current

    tx = current()
    try:
        write()
        if tx is not None:
            tx.commit()
    except BaseException as exc:  # noqa: BLE001 - the script's own end must still happen
        if tx is not None:
            tx.rollback()
        why = first_line(exc, with_type=not isinstance(exc, UserError))
        print(f"layerscope: error: {why}", file=sys.stderr)
    if sys.stderr is not None:
        sys.stderr.flush()
