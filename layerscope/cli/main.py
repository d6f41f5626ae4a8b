"""Entry point: parse, call the public API, render; errors become one line and exit code 2."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
import warnings

from layerscope.cli import (
    ablate_cmd,
    activations_cmd,
    advise_cmd,
    analyze_cmd,
    compare_cmd,
    diff_cmd,
    env_cmd,
    export_cmd,
    graph_cmd,
    llm_cmd,
    memory_cmd,
    models_cmd,
    ops_cmd,
    plan_cmd,
    predict_cmd,
    profile_cmd,
    render_cmd,
    report_cmd,
    rewrite_cmd,
    roofline_cmd,
    run_cmd,
    scaling_cmd,
    sweep_cmd,
    train_cmd,
    verify_cmd,
)
from layerscope.cli.common import Parser, declare_inputs, in_flags
from layerscope.core.errors import LayerscopeWarning, UserError, first_line
from layerscope.core.io import Terminated, outputs

COMMANDS = [analyze_cmd, profile_cmd, ops_cmd, sweep_cmd, roofline_cmd, train_cmd, ablate_cmd,
            predict_cmd, activations_cmd, models_cmd, rewrite_cmd, verify_cmd, render_cmd,
            report_cmd, export_cmd, compare_cmd, diff_cmd, env_cmd, graph_cmd, run_cmd, scaling_cmd,
            llm_cmd, plan_cmd, advise_cmd, memory_cmd]


def build_parser() -> Parser:
    from layerscope.core.version import __version__

    parser = Parser(prog="layerscope",
                    description="Where a model's compute, memory and time go.")
    parser.add_argument("--version", action="version", version=f"layerscope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def _command_names(parser: Parser) -> list[str]:
    sub = next(a for a in parser._actions if a.dest == "command")
    return list(sub.choices)


def _exit_origin(exc: SystemExit) -> str:
    """Where sys.exit was called: the innermost frame of the traceback, 'file.py:LINE'."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "the model's code"
    last = frames[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno}"


def warning_line(message, category, filename, lineno) -> str:
    """One line for a Python warning. Layerscope's own (``LayerscopeWarning``) carry the
    ``layerscope: warning:`` label; any other is the model's, torch's or a library's, and reads
    as Python prints it (``FILE:LINE: Category: message``), its first line only."""
    text = first_line(str(message)) or category.__name__
    if issubclass(category, LayerscopeWarning):
        return f"layerscope: warning: {text}"
    return f"{filename}:{lineno}: {category.__name__}: {text}"


def log_line(record: logging.LogRecord) -> str:
    """One line for a log record, as ``logging.basicConfig`` prints it (``LEVEL:logger:message``):
    layerscope logs nothing, so a record is the model's or a library's, never labelled ours."""
    text = first_line(record.getMessage()) or record.levelname.lower()
    return f"{record.levelname}:{record.name}:{text}"


class _Warnings:
    """Python warnings and library log records (from the model, torch, layerscope) as one line
    each (``warning_line``, ``log_line``), printed once the command has succeeded: a failed
    command prints its one error line only (torch logs a multi-line traceback at ERROR level
    when a shape check fails under fake tensors, then raises the error the CLI reports
    anyway)."""

    def __init__(self):
        self.lines: list[str] = []

    def add(self, text: str) -> None:
        if text not in self.lines:
            self.lines.append(text)

    def show(self, message, category, filename, lineno, file=None, line=None) -> None:
        self.add(warning_line(message, category, filename, lineno))

    def flush(self) -> None:
        for text in self.lines:
            print(text, file=sys.stderr)


def _labelled_if_ours(show):
    """``warnings.showwarning`` for ``layerscope run``: the script's warnings and those of the
    libraries it calls are printed as Python prints them (category, file:line), by ``show``;
    only layerscope's own (``LayerscopeWarning``) carry the ``layerscope: warning:`` label."""
    def showwarning(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, LayerscopeWarning):
            print(warning_line(message, category, filename, lineno), file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return showwarning


@contextlib.contextmanager
def _one_line_logs(collected: _Warnings):
    """Log records of any logger (torch gives its loggers stderr handlers of their own, some
    created only when a module is first imported during the command) go through ``collected``
    for the command: WARNING and above as one line each, the rest dropped."""
    call_handlers = logging.Logger.callHandlers

    def one_line(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            collected.add(log_line(record))

    logging.Logger.callHandlers = one_line
    try:
        yield
    finally:
        logging.Logger.callHandlers = call_handlers


def entry() -> None:
    """The ``layerscope`` program: ``main``, then the process ends as ``cli.ending`` says."""
    from layerscope.cli.ending import end

    end(main())


def _debug(argv: list[str]) -> bool:
    """``--debug``, layerscope's own option, goes before the command: a ``--debug`` after it is
    the command's (or the script's: ``layerscope run train.py --debug``)."""
    command = next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))
    return "--debug" in argv[:command]


def _runs_a_script(args) -> bool:
    """``run SCRIPT`` and ``memory SCRIPT.py``: the script's warnings and log records are its
    own output."""
    return args.command == "run" or (args.command == "memory" and
                                     memory_cmd.names_script(args.model))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = _debug(argv)
    collected = _Warnings()
    try:
        with warnings.catch_warnings():
            shown = warnings.showwarning
            warnings.showwarning = collected.show  # until the command is known
            code = _run(argv, debug, collected, shown)
        collected.flush()
        return code
    except UserError as exc:
        if debug:
            traceback.print_exc()
        print(f"layerscope: error: {first_line(str(exc)) or type(exc).__name__}",
              file=sys.stderr)
        return 2
    except Terminated:
        print("layerscope: terminated", file=sys.stderr)
        raise
    except KeyboardInterrupt:
        print("layerscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - one line instead of a traceback; --debug shows it
        if debug:
            raise
        print(f"layerscope: error: unexpected {first_line(exc, with_type=True)} (a bug in "
              "layerscope or in the model's code; --debug shows the traceback)", file=sys.stderr)
        return 2


def _run(argv: list[str], debug: bool, collected: _Warnings, shown) -> int:
    """Parse and run the command; warnings and log records go to ``collected`` (``shown``:
    Python's own warning printer, for a script's warnings and with ``--debug``)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's own exit: --help or --version printed, code 0
        return exc.code if isinstance(exc.code, int) else 0
    args.argv = list(argv)  # a command that relaunches itself (train --nproc-per-node) reuses it
    if not getattr(args, "run", None):
        raise UserError(f"give a command: {', '.join(_command_names(parser))} "
                        "(see layerscope --help)")
    passthrough = debug or _runs_a_script(args)
    if passthrough:
        warnings.showwarning = shown if debug else _labelled_if_ours(shown)
    try:
        with (contextlib.nullcontext() if passthrough else _one_line_logs(collected)), \
                outputs():  # every file the command writes through cli.common: all or none
            declare_inputs(args)  # no output may replace one of them
            return args.run(args)
    except UserError as exc:  # the API's argument names become the command's options
        translated = in_flags(exc, args)
        if translated is exc:
            raise
        raise translated from exc
    except Terminated:  # SIGTERM while a temporary existed: main reports it
        raise
    except SystemExit as exc:  # raised by user code (a factory, forward, an imported module)
        if debug:
            traceback.print_exc()
        raise UserError(f"the model's code called sys.exit({exc.code!r}) in "
                        f"{_exit_origin(exc)}; layerscope stopped") from None
