"""layerscope run [OPTIONS] SCRIPT.py [ARGS...] | -m MODULE [ARGS...]: the phase breakdown of
the user's own, unmodified training script.

The script runs as ``python SCRIPT.py ARGS`` would: ``__main__``, the same ``sys.argv``,
``sys.path[0]`` its folder (the working directory for ``-m``), the working directory unchanged,
its standard output and error untouched, its exit code kept (an exception prints its traceback
and exits 1, as Python does). The report goes to standard error, or to ``-o`` (``-o -`` asks for
standard output): the script's own output stays byte-identical. A failing script still gets
the report of the steps it finished. Under torchrun each rank measures its own steps and rank 0
writes the outputs (``rank_report`` is the seam the multi-rank merge will use).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from layerscope.cli.common import (
    SHARED_OPTIONS,
    add_output,
    add_output_folder,
    add_profiler_flags,
    add_settings,
    write_output,
)
from layerscope.cli.script_target import (
    absolute_outputs,
    check_script_outputs,
    script_target,
    show_report,
)
from layerscope.core.errors import UserError
from layerscope.core.phases import STEP_PHASES
from layerscope.core.values import NPROC_MAX, arg, non_negative_int, positive_int

# set by the parent of ``run --nproc-per-node``: the folder where each rank leaves its report
RANK_REPORTS_ENV = "LAYERSCOPE_RANK_REPORTS"


def register(sub) -> None:
    from layerscope.training.whatif import GROUP, WhatIf

    p = sub.add_parser(
        "run", help="run your own training script and break its steps into phases",
        description="Run SCRIPT.py (or -m MODULE) unmodified, as python would, and measure "
                    "every training step through torch's global hooks: "
                    f"{', '.join(p.name for p in STEP_PHASES if not p.distributed)}. "
                    "Options go before the script; "
                    "everything after it is the script's.")
    p.add_argument("--steps", type=arg(positive_int),
                   help="stop the script cleanly after this many steps")
    p.add_argument("--step-on", choices=("auto", "optimizer", "backward"), default="auto",
                   help="what ends a step: auto (default): optimizer.step(), and each "
                        "backward() in a script that never steps an optimizer; optimizer: "
                        "optimizer.step() only; backward: each backward() (manual updates)")
    p.add_argument("--warmup-steps", type=arg(non_negative_int), default=0,
                   help="steps left out of the phase breakdown")
    p.add_argument("--layers", action="store_true", help="forward time per layer")
    p.add_argument("--functions", action="store_true",
                   help="with --layers: also one row per torch function a container's own "
                        "code calls (F.relu, the residual add, torch.cat), as analyze "
                        "--functions counts them; forward only")
    p.add_argument("--memory", action="store_true",
                   help="peak RSS (and CUDA memory allocated) per phase")
    SHARED_OPTIONS["memory_limit"](p)
    add_profiler_flags(
        p, kernels="profile 3 training steps after the warm-up (after the first when there is "
                   "none) with torch.profiler: CPU ops, device kernels and launch time per "
                   "module of the model, forward and backward",
        nvtx="NVTX ranges named after the steps, their phases and the model's modules, for "
             "Nsight Systems (nsys profile layerscope run --nvtx ...); a no-op, with a note, "
             "without CUDA")
    add_output_folder(p, "--tensorboard", help="per-step phase scalars for TensorBoard")
    p.add_argument("--trace", metavar="FILE.json",
                   help="a Chrome trace (chrome://tracing, Perfetto) of the phases per step")
    p.add_argument("--nproc-per-node", type=arg(positive_int, maximum=NPROC_MAX), metavar="N",
                   help="run the script in N processes through torchrun (its own DDP/FSDP code "
                        "runs as under torchrun) and merge every rank's phases into one report")
    add_settings(p, WhatIf, GROUP)
    add_output(p)
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a module as python -m does (the rest goes to it)")
    p.add_argument("script", nargs=argparse.REMAINDER, metavar="SCRIPT.py ...",
                   help="the script and its arguments (after -- when an argument of the "
                        "script could be taken for an option)")
    p.set_defaults(run=run)


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


def _check_startable(target: str, is_module: bool) -> None:
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
    from layerscope.training.watch import StepLimit

    if failure is None or isinstance(failure, StepLimit):
        return 0
    if isinstance(failure, SystemExit):
        return _exit_code(failure)
    _print_script_traceback(failure)  # a UserError too: the script's own (it uses our API)
    return 130 if isinstance(failure, KeyboardInterrupt) else 1


def rank_report(watch: Any):
    """This rank's report (the distributed merge will gather these before writing)."""
    return watch.report()


def _is_writer() -> bool:
    """Rank 0 writes the report. RANK is trusted only with the rest of a launcher's
    environment (WORLD_SIZE above 1 and LOCAL_RANK, as torchrun sets them): a RANK left over
    in a shell must not silently suppress the report."""
    rank = os.environ.get("RANK", "0")
    if rank in ("", "0"):
        return True
    world = os.environ.get("WORLD_SIZE", "")
    if world.isdigit() and int(world) > 1 and "LOCAL_RANK" in os.environ:
        return False
    print(f"layerscope: RANK={rank} in the environment but no launcher's WORLD_SIZE and "
          "LOCAL_RANK: writing the report anyway", file=sys.stderr)
    return True


def _launch(args) -> int:
    """The parent of ``run --nproc-per-node N``: torchrun starts the ranks (each runs this same
    command line), each leaves its report in a temporary folder, and this process merges them."""
    import glob
    import json

    from layerscope.core.io import temp_dir
    from layerscope.core.records.train import TrainReport
    from layerscope.training import distributed
    from layerscope.training.ranks import merge_rank_reports

    code = 0
    with temp_dir() as folder:
        os.environ[RANK_REPORTS_ENV] = folder
        try:
            code = distributed.launch(args.argv, args.nproc_per_node)
        except distributed.RankFailed as exc:
            print(f"layerscope: error: {exc}", file=sys.stderr)
            code = exc.code
        except distributed.Stopped as exc:  # the report of the ranks that finished follows
            print(f"layerscope: {exc}", file=sys.stderr)
            code = exc.code
        finally:
            del os.environ[RANK_REPORTS_ENV]
        reports = []
        for path in sorted(glob.glob(os.path.join(folder, "rank-*.json"))):
            with open(path) as f:
                reports.append(json.load(f))
    if reports:
        _write(TrainReport.from_dict(merge_rank_reports(reports)), None, args)
    return code


def run(args) -> int:
    from layerscope.cli.common import settings_from
    from layerscope.training import distributed
    from layerscope.training.watch import Watch
    from layerscope.training.whatif import WhatIf

    target, script_args, is_module = script_target(args)
    if args.functions and not args.layers:
        raise UserError("--functions splits the --layers rows: add --layers")
    if args.kernels and args.nproc_per_node:
        raise UserError("--kernels profiles the steps of one process: leave out "
                        "--nproc-per-node (the window is not merged across ranks)")
    check_script_outputs(args)  # in the words the user typed
    absolute_outputs(args)
    if args.nproc_per_node and distributed.detect() is None:
        _check_startable(target, is_module)  # once here, not one error line per rank
        return _launch(args)
    name = target if is_module else os.path.basename(target)
    watch = Watch(steps=args.steps, warmup_steps=args.warmup_steps, layers=args.layers,
                  functions=args.functions,
                  memory=args.memory, name=name, argv=script_args, trace=bool(args.trace),
                  step_on=args.step_on, what_if=settings_from(WhatIf, args),
                  script_path=target, module=is_module, memory_limit=args.memory_limit,
                  kernels=args.kernels, nvtx=args.nvtx)
    failure: list[str] = []
    starter = os.getpid()
    reported: list[bool] = []

    def ended(code: int | None) -> None:  # os._exit or os.exec* after (or between) steps
        reported.append(True)
        write_before_end(lambda: _after(watch, args, code or 0,
                                  [f"exit code {code}"] if code else []))

    code = execute(target, script_args, is_module, watch, failure, ended)
    if os.getpid() != starter or reported:
        # a child the script forked (os.fork) and that returned here: the report is the
        # starting process's; the child ends with its code and writes nothing. A report
        # written before an os.exec* that failed is not written again.
        return code
    return _after(watch, args, code, failure)


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


def _after(watch: Any, args: Any, code: int, failure: list[str]) -> int:
    """What ``run`` writes once the script has ended: the report (or why there is none), the
    trace and TensorBoard files; returns the script's exit code."""
    folder = os.environ.get(RANK_REPORTS_ENV)
    if watch.post_mortem is not None:  # after the script's traceback
        _post_mortem_line(watch, args.output)
    if failure and not watch.steps and not folder and watch.post_mortem is None:
        # a zero table would blame the loop for the script's own failure
        print(f"layerscope: no training step was completed before the script ended with "
              f"{failure[0]}: no report", file=sys.stderr)
        return code
    if folder:  # a rank of run --nproc-per-node: the parent merges and writes the report
        import json

        from layerscope.core.io import write_file

        report = rank_report(watch)
        write_file(os.path.join(folder, f"rank-{report.rank or 0}.json"),
                   json.dumps(report.to_dict()))
        if _is_writer():
            _write_files(watch, args)
    elif _is_writer():
        report = rank_report(watch)
        report.notes.extend(_own_processes_advice(report.process_group))
        _write(report, watch, args)
    return code


def _post_mortem_line(watch, output: str | None) -> None:
    """The out-of-memory summary on standard error, and on CUDA the allocator's snapshot
    beside the report (``-o``'s folder, else the working directory; a no-op on a machine
    without CUDA)."""
    from layerscope.analysis.memory_track import dump_cuda_snapshot
    from layerscope.core.records.memory import PostMortem
    from layerscope.views.memory import post_mortem_line

    print(post_mortem_line(PostMortem.from_dict(watch.post_mortem)), file=sys.stderr)
    folder = os.path.dirname(output) if output and output != "-" else os.getcwd()
    path = os.path.join(folder, "memory_snapshot.pickle")
    if dump_cuda_snapshot(path):
        print(f"layerscope: CUDA memory snapshot in {path} (open it at "
              "https://pytorch.org/memory_viz)", file=sys.stderr)


def _own_processes_advice(group: dict | None) -> list[str]:
    """A process group of several that formed without ``--nproc-per-node`` (the script's own
    launcher: torchrun, a trainer that starts its own processes) leaves the other ranks out of
    the report: say so, and how to measure them all."""
    if not group or group["world_size"] < 2:
        return []
    n = group["world_size"]
    return [f"the script's {n} processes were launched outside layerscope (by torchrun, or by "
            f"the script or its trainer): only this process (rank {group['rank']}) is measured; "
            f"use layerscope run --nproc-per-node {n} SCRIPT so layerscope launches and merges "
            "every rank"]


def _write(report, watch, args) -> None:
    """The report (``show_report``), then the watched rank's own files."""
    show_report(report, args)
    if watch is not None:
        _write_files(watch, args, getattr(report, "efficiency", None))


def _write_files(watch, args, efficiency=None) -> None:
    """The watched rank's own files: its trace and TensorBoard scalars."""
    import json

    if args.trace:
        write_output(args.trace, json.dumps(watch.chrome_trace()) + "\n")
    if args.tensorboard:
        _tensorboard(watch, args.tensorboard, efficiency)


def _tensorboard(watch, folder: str, efficiency=None) -> None:
    """Per-step phase times (ms) under ``step/phase_ms/``, the step's wall time and its MFU
    (``efficiency``: this rank's), through the TensorBoard sink ``layerscope train`` writes
    with."""
    from layerscope.training.sinks import StepResult, TensorBoardSink, summary_writer

    sink = TensorBoardSink(summary_writer(folder, "--tensorboard", "--tensorboard"))
    steps = watch.measured_steps  # (warm-up and one-time-cost steps are not measured)
    for step, phases, wall in zip(steps, watch.step_phases, watch.step_seconds):
        sink.on_step(StepResult(phases, wall, step=step))
    if efficiency is not None:
        sink.on_efficiency(list(steps), efficiency.mfu_per_step or [efficiency.mfu])
    sink.close()
