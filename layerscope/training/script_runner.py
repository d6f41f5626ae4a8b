"""Run a user's script as ``python SCRIPT.py ARGS`` (or ``python -m MODULE ARGS``) would, inside
a context manager that measures it (``training.watch.Watch`` for ``layerscope run``,
``training.memory_step.StepMemory`` for ``layerscope memory SCRIPT.py``).

What python does, this does: ``__main__`` a fresh module, the same ``sys.argv``, ``sys.path[0]``
the script's folder (the working directory for ``-m``), the working directory unchanged, the
script's standard output and error untouched (a script that closes or drops them gets them
back afterwards, for the command's own output), its exit code kept. An exception prints the
traceback python would print (without layerscope's frames) and is exit code 1 (130 for an
interrupt); ``sys.exit``'s message goes to standard error. A script that cannot start (not
Python, an unknown ``-m`` module) is the command's input error (``UserError``), raised before
anything runs. A script that ends the process without returning (``os._exit``, ``os.exec*``)
first stops the watch and lets the command write what it writes after the script
(``execute``'s ``abrupt_end``).

The commands that run scripts (cli/run_cmd.py, cli/memory_cmd.py) parse their flags, call
``execute`` and render its outcome. ``layerscope run``'s settings are declared here once
(``RunSettings``; its what-if settings are ``training.whatif.WhatIf``'s).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from layerscope.core import options, values
from layerscope.core.errors import UserError
from layerscope.core.settings import Settings, option

# what ends a step (``Watch(step_on=...)``): "auto" (the default) is optimizer steps, or
# backward passes when no optimizer ever steps; "optimizer" and "backward" are those alone
STEP_ON = ("auto", "optimizer", "backward")
SCRIPT = "the script (everything after it is the script's)"  # the options' group


@dataclasses.dataclass(kw_only=True, eq=False)
class RunSettings(Settings):
    """Every setting of ``layerscope run`` but its what-if ones (``WhatIf``): a new one is a
    field here. ``module`` and ``script`` take the rest of the command line
    (``argparse.REMAINDER``): ``cli.script_target`` reads which script runs with which
    arguments from them."""

    steps: int | None = option(None, "stop the script cleanly after this many steps",
                               parse=values.positive_int)
    step_on: str = option(
        "auto", "what ends a step: auto (default): optimizer.step(), and each backward() in a "
                "script that never steps an optimizer; optimizer: optimizer.step() only; "
                "backward: each backward() (manual updates)", choices=STEP_ON)
    warmup_steps: int = option(0, "steps left out of the phase breakdown",
                               parse=values.non_negative_int)
    layers: bool = option(False, "forward time per layer")
    functions: bool = option(False, "with --layers: also one row per torch function a "
                                    "container's own code calls (F.relu, the residual add, "
                                    "torch.cat), as analyze --functions counts them; forward "
                                    "only")
    memory: bool = option(False, "peak RSS (and CUDA memory allocated) per phase")
    memory_limit: int | None = options.memory_limit()
    kernels: bool = options.kernels(
        "profile 3 training steps after the warm-up (after the first when there is none) with "
        "torch.profiler: CPU ops, device kernels and launch time per module of the model, "
        "forward and backward")
    nvtx: bool = options.nvtx(
        "NVTX ranges named after the steps, their phases and the model's modules, for Nsight "
        "Systems (nsys profile layerscope run --nvtx ...); a no-op, with a note, without CUDA")
    tensorboard: str | None = option(None, "per-step phase scalars for TensorBoard",
                                     folder=True)
    trace: str | None = option(None, "a Chrome trace (chrome://tracing, Perfetto) of the phases "
                                     "per step", metavar="FILE.json")
    nproc_per_node: int | None = option(
        None, "run the script in N processes through torchrun (its own DDP/FSDP code runs as "
              "under torchrun) and merge every rank's phases into one report",
        parse=values.positive_int, maximum=values.NPROC_MAX, metavar="N")
    module: list[str] | None = option(None, "run a module as python -m does (the rest goes to "
                                            "it)", flag="-m", nargs=argparse.REMAINDER,
                                      metavar="MODULE ...", group=SCRIPT)
    script: list[str] = option(
        [], "the script and its arguments (after -- when an argument of the script could be "
            "taken for an option)", positional=True, nargs=argparse.REMAINDER,
        metavar="SCRIPT.py ...", group=SCRIPT)

    def check(self) -> None:
        if self.functions and not self.layers:
            raise UserError("functions needs layers: it splits the per-layer rows",
                            arguments=("functions", "layers"))
        if self.kernels and self.nproc_per_node:
            raise UserError("kernels profiles the steps of one process: leave out "
                            "nproc_per_node (the window is not merged across ranks)",
                            arguments=("kernels", "nproc_per_node"))


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter makes of ``sys.exit(code)``: None is 0, an int itself, anything
    else is printed to stderr and exits 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# torch's frames around a call into a dispatch mode (torch.compiler.disable's wrappers)
_DISPATCH_WRAPPERS = (os.path.join("torch", "_compile.py"),
                      os.path.join("torch", "_dynamo", "eval_frame.py"))


def _print_script_traceback(exc: BaseException) -> None:
    """The traceback Python would print: from the script's first frame on, runpy's and
    layerscope's frames left out (also those in the middle: the hooks layerscope wraps around
    backward), in every exception of the chain. An error raised under one of layerscope's
    dispatch modes (``--memory-limit``'s refusal, or the allocator failing in the op the mode
    runs) loses everything from the mode's ``__torch_dispatch__`` inward and torch's wrappers
    just outside it: the innermost frame is then where the op was called, as without
    layerscope."""
    import runpy

    ours = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
            "<frozen runpy>", getattr(runpy, "__file__", None) or "<frozen runpy>")
    shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    todo, seen = [shown], set()
    while todo:
        te = todo.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        frames = _without_interception(list(te.stack), ours)
        te.stack = traceback.StackSummary.from_list(
            [f for f in frames if not f.filename.startswith(ours)])
        todo += [t for t in (te.__cause__, te.__context__) if t is not None]
    print("".join(shown.format()), end="", file=sys.stderr)


def _without_interception(frames: list, ours: tuple[str, ...]) -> list:
    """``frames`` (outermost first) cut at layerscope's interception of an op: from the
    outermost ``__torch_dispatch__`` of layerscope's on (or, an error raised in other code of
    layerscope's that torch called, its innermost frames), with torch's dispatch wrappers just
    outside it."""
    cut = next((i for i, f in enumerate(frames)
                if f.filename.startswith(ours) and f.name == "__torch_dispatch__"), None)
    if cut is not None:
        frames = frames[:cut]
    elif not (frames and frames[-1].filename.startswith(ours)):
        return frames
    while frames and (frames[-1].filename.startswith(ours)
                      or frames[-1].filename.endswith(_DISPATCH_WRAPPERS)):
        frames.pop()
    return frames


def _compiled(path: str) -> Any:
    """The script's code, compiled before anything runs: a file that is not Python (a syntax
    error, null bytes, an undecodable byte, unreadable) is the user's input error, one line and
    no report of a run that never started."""
    full = os.path.abspath(path)
    try:
        with open(full, "rb") as f:
            return compile(f.read(), full, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f" line {exc.lineno}" if exc.lineno else ""
        raise UserError(f"{path}{where}: {exc.msg}: not a Python script python can run (fix "
                        "it, or give the right file)") from None
    except (ValueError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(f"cannot run {path}: {why}") from None


def _check_module(name: str) -> None:
    """``-m NAME`` must name a module python can run, found as ``python -m`` finds it (from the
    working directory): checked before the script starts, as python does."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            if importlib.util.find_spec(name + ".__main__") is None:
                raise UserError(f"-m {name} is a package without __main__.py: name the module "
                                "to run (-m package.module)")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise UserError(f"-m: no module named {name!r}: check the name, and run from the folder "
                        "that holds it (or add that folder to PYTHONPATH)")


def check_startable(target: str, is_module: bool) -> None:
    """The checks ``execute`` makes before the script starts, made by the parent of a
    ``--nproc-per-node`` run (the module is looked up from the working directory, as the ranks
    will)."""
    if not is_module:
        _compiled(target)
        return
    saved = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        _check_module(target)
    finally:
        sys.path[:] = saved


def _run_script(path: str, code: Any) -> None:
    """Run ``path`` as ``python path`` does: a fresh ``__main__`` module in ``sys.modules``
    (pickling the script's classes works), ``__file__`` and the code's file name absolute (so
    warnings and tracebacks name it as python does; ``runpy.run_path`` would keep the relative
    name and also rewrite ``sys.argv[0]``), ``sys.argv[0]`` as given."""
    import builtins
    import types
    from importlib.machinery import SourceFileLoader

    full = os.path.abspath(path)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=full, __cached__=None, __builtins__=builtins,
                         __loader__=SourceFileLoader("__main__", full))
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _ended_with(exc: BaseException) -> str:
    """``Type: first line of the message`` (or the type alone)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class _Streams:
    """The command's own standard output and error, kept from before the script runs: a
    script may close them (``sys.stdout.close()``) or drop them (``sys.stderr = None``), as
    python allows; the report and the command's messages then go to the file descriptors the
    command started with (duplicated at the start), and the script's exit code stays its own."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[Any, int | None, str]] = {}
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            try:
                fd: int | None = os.dup(stream.fileno())
            except (AttributeError, OSError, ValueError):  # no descriptor (a StringIO)
                fd = None
            self.kept[name] = (stream, fd, getattr(stream, "encoding", None) or "utf-8")

    def restore(self) -> None:
        """Make ``sys.stdout`` and ``sys.stderr`` writable again where the script closed or
        dropped them; a stream the script replaced with a working one stays."""
        import io

        for name, (stream, fd, encoding) in self.kept.items():
            if not _usable(getattr(sys, name)):
                if _usable(stream):
                    setattr(sys, name, stream)
                elif fd is not None:
                    setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w"), encoding=encoding,
                                                        errors="backslashreplace",
                                                        line_buffering=True))
                    continue
            if fd is not None:
                os.close(fd)
        self.kept = {}


def _quiet_children() -> None:
    """Once the script has ended, a child it started that exits (a DataLoader worker that
    called sys.exit) is no longer the script's error: torch's SIGCHLD handler would raise it
    in the middle of writing the report. A script still running raises it as its own."""
    import signal
    import threading

    if hasattr(signal, "SIGCHLD") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def _usable(stream: Any) -> bool:
    return stream is not None and hasattr(stream, "write") and not getattr(stream, "closed", True)


# the os functions that end the process (or replace its program) without unwinding the stack:
# os.execl, execle, execlp, execlpe, execvp and execvpe all call execv or execve
_ABRUPT = ("_exit", "execv", "execve")


def _replaces_the_process(path: Any) -> bool:
    """Whether ``os.execv(path, ...)`` will replace the process: an executable file (or a file
    descriptor, ``os.execve(fd, ...)``). ``os.execvp`` tries each folder of PATH in turn: the
    candidates that are not there fail and the search goes on."""
    if isinstance(path, int):
        return True
    try:
        name = os.fspath(path)
    except TypeError:
        return False
    return os.path.isfile(name) and os.access(name, os.X_OK)


class _Watching:
    """``with watch:`` around the script, and the ends that skip it: ``os._exit(n)`` ends the
    process at once, and an ``os.exec*`` that succeeds replaces it, so neither returns to the
    command to write its report. While the script runs, those functions first stop the watch and
    call ``ended(code)`` (``code``: ``os._exit``'s, None for an exec), then do what the script
    asked. Only in the process that runs the script (a forked child's exit is its own), once."""

    def __init__(self, watch: Any, ended: Callable[[int | None], None] | None):
        self.watch, self.ended = watch, ended
        self.stopped = False
        self.pid = os.getpid()
        self.real: dict[str, Callable[..., Any]] = {}
        self.ours: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> _Watching:
        self.watch.__enter__()
        if self.ended is not None:
            for name in _ABRUPT:
                self.real[name] = getattr(os, name)
                self.ours[name] = self._ending(name, self.real[name])
                setattr(os, name, self.ours[name])
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        self._restore()
        if self.stopped:
            return False
        self.stopped = True
        return bool(self.watch.__exit__(kind, exc, tb))

    def _restore(self) -> None:
        for name, real in self.real.items():
            if getattr(os, name) is self.ours[name]:  # unless the script replaced it itself
                setattr(os, name, real)
        self.real, self.ours = {}, {}

    def _ending(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def end(*args: Any, **kwargs: Any) -> Any:
            if (os.getpid() == self.pid and not self.stopped and args
                    and (name == "_exit" or _replaces_the_process(args[0]))):
                self._end(args[0] if name == "_exit" else None)
            return real(*args, **kwargs)
        end.__name__ = end.__qualname__ = name
        return end

    def _end(self, code: int | None) -> None:
        """Stop the watch and write what the command writes; whatever fails here, the process
        then ends (or execs) as the script asked."""
        from layerscope.core.errors import first_line

        self._restore()
        self.stopped = True
        try:
            self.watch.__exit__(None, None, None)
            assert self.ended is not None
            self.ended(code)
        except BaseException as exc:  # noqa: BLE001 - the script's own end comes next
            print(f"layerscope: error: {first_line(exc, with_type=True)}", file=sys.stderr)


def execute(target: str, script_args: list[str], is_module: bool, watch: Any,
            failure: list[str] | None = None,
            abrupt_end: Callable[[int | None], None] | None = None) -> int:
    """Run the script under ``watch`` as python would; returns its exit code. How a failed
    script ended (its exception, or its exit code) is appended to ``failure``.
    ``abrupt_end(code)`` is called instead when the script ends the process without returning
    here (``os._exit``, ``os.exec*``: ``_Watching``), with the watch stopped, before the
    process ends: the command writes then what it would have written after the script."""
    import runpy

    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [target, *script_args]
    # python puts the script's folder first, symbolic links resolved; -m the working directory
    path0 = os.getcwd() if is_module else os.path.dirname(os.path.realpath(target))
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    ended: BaseException | None = None
    streams = None
    try:
        if is_module:  # before the watch: a script that cannot start has no report
            _check_module(target)
        else:
            compiled = _compiled(target)
        streams = kept = _Streams()

        def abrupt(code: int | None) -> None:  # the script's os._exit or os.exec*
            _quiet_children()
            kept.restore()
            if abrupt_end is not None:
                abrupt_end(code)

        with _Watching(watch, abrupt if abrupt_end is not None else None):
            if is_module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                _run_script(target, compiled)
    except BaseException as exc:  # noqa: BLE001 - the script's own end, handled below
        if streams is None:  # it never started: the command's own error
            raise
        ended = exc
    finally:
        _quiet_children()
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
        if streams is not None:
            streams.restore()
        for stream in (sys.stdout, sys.stderr):
            if _usable(stream):
                stream.flush()
    code = _script_code(ended)
    if code and ended is not None and failure is not None:
        failure.append(f"exit code {code}" if isinstance(ended, SystemExit) else
                       _ended_with(ended))
    return code


def _script_code(failure: BaseException | None) -> int:
    """The exit code python gives a script that ended with ``failure`` (None: it returned),
    with the traceback python prints."""
    from layerscope.training.watch_steps import StepLimit

    if failure is None or isinstance(failure, StepLimit):
        return 0
    if isinstance(failure, SystemExit):
        return _exit_code(failure)
    _print_script_traceback(failure)  # a UserError too: the script's own (it uses our API)
    return 130 if isinstance(failure, KeyboardInterrupt) else 1
