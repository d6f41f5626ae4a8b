"""``train``'s ``--profile``: a context that profiles the training and writes its result into the
run directory (cProfile's profile.prof, torch.profiler's trace.json and per-step operator table,
pyinstrument's profile.html)."""
from __future__ import annotations

import marshal
import os
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from layerscope.core.errors import UserError
from layerscope.core.io import place, temp_dir, write_file
from layerscope.core.records.train import TrainReport

OP_TABLE_TOP = 10  # operators in the --profile torch table


class _CProfile:
    """cProfile over the training: RUN_DIR/profile.prof (what ``dump_stats`` writes)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def __enter__(self):
        import cProfile

        self.p = cProfile.Profile()
        self.p.enable()

    def __exit__(self, *exc):
        self.p.disable()
        self.p.create_stats()  # what dump_stats writes, through core.io
        write_file(os.path.join(self.run_dir, "profile.prof"),
                   lambda f: marshal.dump(self.p.stats, f))
        return False


def _activities(cuda: bool) -> list[Any]:
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])


class _TorchProfile:
    """torch.profiler over the training: RUN_DIR/trace.json, and the per-step operator table."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def __enter__(self):
        from torch.profiler import profile

        from layerscope.analysis.profiler_ranges import quiet_native_stderr

        # CUDA activities only where CUDA is: on the CPU kineto would print
        # "gpuGetDeviceCount failed"; its start/stop banners go to fd 2 as well
        self.cuda = torch.cuda.is_available()
        self.p = profile(activities=_activities(self.cuda))
        with quiet_native_stderr():
            self.p.__enter__()
        return self

    def __exit__(self, *exc):
        from layerscope.analysis.profiler_ranges import quiet_native_stderr

        with quiet_native_stderr():
            self.p.__exit__(*exc)
            with temp_dir(near=os.path.join(self.run_dir, "trace.json")) as tmpdir:
                raw = os.path.join(tmpdir, "trace.json")
                self.p.export_chrome_trace(raw)
                place(raw, os.path.join(self.run_dir, "trace.json"))
        return False

    @contextmanager
    def paused(self):
        """Work that is no training step (validation, the TensorBoard graph's trace)
        runs unrecorded, so the per-step table divides training steps' ops only."""
        from layerscope.analysis.profiler_ranges import quiet_native_stderr

        acts = _activities(self.cuda)
        with quiet_native_stderr():
            self.p.toggle_collection_dynamic(False, acts)
        try:
            yield
        finally:
            with quiet_native_stderr():
                self.p.toggle_collection_dynamic(True, acts)

    def table(self, report: TrainReport, steps: int) -> dict[str, Any]:
        """The top operators per training step (torch.profiler's key averages)."""
        from layerscope.analysis.op_profile import op_rows
        from layerscope.core.optable import OpTable

        rows, total, n = op_rows(self.p, cuda=self.cuda, runs=max(steps, 1),
                                 top=OP_TABLE_TOP)
        return OpTable(model=f"{report.recipe} training", device=report.config["device"],
                       sort="self", runs=steps, rows=rows, total_self_s=total,
                       ops_total=n, trace=os.path.join(self.run_dir, "trace.json"),
                       settings={"unit": "step", "top": OP_TABLE_TOP,
                                 "includes": "training steps only (validation and "
                                             "the TensorBoard graph left out)"}
                       ).to_dict()


class _Pyinstrument:
    """pyinstrument over the training: RUN_DIR/profile.html."""

    def __init__(self, run_dir: str, profiler: Any):
        self.run_dir, self.profiler = run_dir, profiler

    def __enter__(self):
        self.p = self.profiler()
        self.p.start()

    def __exit__(self, *exc):
        self.p.stop()
        write_file(os.path.join(self.run_dir, "profile.html"), self.p.output_html())
        return False


def run_profiler(kind: str | None, run_dir: str):
    """A context that profiles the training and writes its result into the run directory."""
    if kind is None:
        return nullcontext()
    if kind == "cprofile":
        return _CProfile(run_dir)
    if kind == "torch":
        return _TorchProfile(run_dir)
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise UserError("profile pyinstrument needs pyinstrument: "
                        "pip install pyinstrument", arguments="profile") from None
    return _Pyinstrument(run_dir, Profiler)
