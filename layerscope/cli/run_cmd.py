"""layerscope run [OPTIONS] SCRIPT.py [ARGS...] | -m MODULE [ARGS...]: the phase breakdown of
the user's own, unmodified training script.

The script runs as ``python SCRIPT.py ARGS`` would: ``__main__``, the same ``sys.argv``,
``sys.path[0]`` its folder (the working directory for ``-m``), the working directory unchanged,
its standard output and error untouched, its exit code kept (an exception prints its traceback
and exits 1, as Python does). The report goes to standard error, or to ``-o`` (``-o -`` asks for
standard output): the script's own output stays byte-identical. A failing script still gets
the report of the steps it finished. Under torchrun each rank measures its own steps and rank 0
writes the outputs (``rank_report`` is the seam the multi-rank merge will use). Running the
script is ``training.script_runner.execute``'s; this module parses the flags and writes what
the run measured.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from layerscope.cli.common import (
    add_output,
    add_settings,
    write_output,
)
from layerscope.cli.script_target import (
    absolute_outputs,
    check_script_outputs,
    script_target,
    show_report,
    write_before_end,
)
from layerscope.core.phases import STEP_PHASES

# set by the parent of ``run --nproc-per-node``: the folder where each rank leaves its report
RANK_REPORTS_ENV = "LAYERSCOPE_RANK_REPORTS"


def register(sub) -> None:
    from layerscope.training.script_runner import SCRIPT, RunSettings
    from layerscope.training.whatif import GROUP, WhatIf

    p = sub.add_parser(
        "run", help="run your own training script and break its steps into phases",
        description="Run SCRIPT.py (or -m MODULE) unmodified, as python would, and measure "
                    "every training step through torch's global hooks: "
                    f"{', '.join(p.name for p in STEP_PHASES if not p.distributed)}. "
                    "Options go before the script; "
                    "everything after it is the script's.")
    add_settings(p, RunSettings)  # every option: training/script_runner.py
    add_settings(p, WhatIf, GROUP)
    add_output(p)
    add_settings(p, RunSettings, SCRIPT)  # -m MODULE ... or SCRIPT.py ...: the rest is its
    p.set_defaults(run=run)


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
    from layerscope.training.script_runner import RunSettings, check_startable, execute
    from layerscope.training.watch import Watch
    from layerscope.training.whatif import WhatIf

    target, script_args, is_module = script_target(args)
    s = settings_from(RunSettings, args)
    what_if = settings_from(WhatIf, args)
    check_script_outputs(args)  # in the words the user typed
    absolute_outputs(args)  # (the output paths the files are written to: args')
    if s.nproc_per_node and distributed.detect() is None:
        check_startable(target, is_module)  # once here, not one error line per rank
        return _launch(args)
    name = target if is_module else os.path.basename(target)
    watch = Watch(steps=s.steps, warmup_steps=s.warmup_steps, layers=s.layers,
                  functions=s.functions, memory=s.memory, name=name, argv=script_args,
                  trace=bool(s.trace), step_on=s.step_on, what_if=what_if, script_path=target,
                  module=is_module, memory_limit=s.memory_limit, kernels=s.kernels,
                  nvtx=s.nvtx)
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
    from layerscope.analysis.memory_oom import dump_cuda_snapshot
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
