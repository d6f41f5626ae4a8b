"""Data-parallel training on torch.distributed: who this process is, starting and ending the
process group, launching through ``torch.distributed.run`` and naming a rank that died.

The engine is PyTorch's own: ``torchrun`` (``torch.distributed.run``) starts the processes and
runs the rendezvous (one machine, several machines, or under SLURM's ``srun``), gloo carries the
collectives on the CPU and NCCL on CUDA. Nothing here starts a process itself.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import signal
import time
from dataclasses import dataclass
from typing import Any

import torch

from layerscope.core import values
from layerscope.core.errors import UserError, first_line

# Fault injection for tests and drills: LAYERSCOPE_FAULT=RANK:STEP:KIND makes rank RANK, when it
# starts its optimizer step STEP (1-based, counted over the whole run), die by SIGKILL (``kill``)
# or SIGABRT (``abort``), raise a RuntimeError (``raise``) or stop answering collectives
# (``hang``). STEP ``end``: once every rank has passed the final barrier (``leave``).
FAULT_ENV = "LAYERSCOPE_FAULT"
FAULT_KINDS = ("kill", "abort", "raise", "hang")
FAULT_AT_END = "end"
# The launcher's mark that the training finished on every rank: ``launch`` names a file here, and
# rank 0 writes the run's report path into it once every rank has reached the final barrier. A
# rank that dies after that (while its process ends) did so with the results complete.
FINISHED_ENV = "LAYERSCOPE_RANKS_FINISHED"


@dataclass(frozen=True)
class DistEnv:
    """This process's place in a distributed run, read from its launcher's environment."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str  # "torchrun" or "slurm"


def detect(environ: dict[str, str] | None = None) -> DistEnv | None:
    """The distributed run this process belongs to, or None for a single process.

    torchrun (and ``layerscope train --nproc-per-node``) sets RANK, WORLD_SIZE and LOCAL_RANK;
    ``srun`` sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID (a job step of one task is a
    single process). torchrun's variables win: ``srun torchrun ...`` runs torchrun per node."""
    env = os.environ if environ is None else environ
    try:
        if "RANK" in env and "WORLD_SIZE" in env:
            return DistEnv(int(env["RANK"]), int(env["WORLD_SIZE"]),
                           int(env.get("LOCAL_RANK", "0")), "torchrun")
        if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
            return DistEnv(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]),
                           int(env.get("SLURM_LOCALID", "0")), "slurm")
    except ValueError as exc:
        raise UserError(f"the launcher's environment is malformed ({first_line(exc)}): "
                        "RANK, WORLD_SIZE, LOCAL_RANK (or SLURM_PROCID, SLURM_NTASKS) must be "
                        "whole numbers") from exc
    return None


def join(env: DistEnv, device: str, timeout_s: float) -> str:
    """Check what joining needs (a CUDA device when asked for one, a timeout in range), then
    join the process group; returns this rank's device."""
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda: no CUDA GPU is available here; use cpu", arguments="device")
    values.finite_positive_float(timeout_s, "comm_timeout", maximum=values.COMM_TIMEOUT_MAX)
    return init(env, device, timeout_s)


def init(env: DistEnv, device: str, timeout_s: float) -> str:
    """Join the process group (gloo on the CPU, NCCL on CUDA); returns this rank's device."""
    import torch.distributed as dist

    if env.launcher == "slurm":
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if name not in os.environ:
                raise UserError(f"under srun, set {name} (e.g. export MASTER_ADDR=$(scontrol "
                                "show hostnames $SLURM_JOB_NODELIST | head -n1) "
                                "MASTER_PORT=29500)")
    if device == "cuda":
        torch.cuda.set_device(env.local_rank)
        device = f"cuda:{env.local_rank}"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                                init_method="env://", rank=env.rank, world_size=env.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return device


def process_group() -> dict[str, Any] | None:
    """The default process group this process belongs to now (its rank, world size and
    backend), or None when none is formed (``torch.distributed``'s own state: a group the
    script, its trainer or layerscope formed)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(),
            "backend": str(dist.get_backend())}


def shutdown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def leave(finished: bool, report_path: str | None = None) -> None:
    """Leave the process group this run formed. After a finished run the ranks leave together:
    a final barrier (within the group's timeout, --comm-timeout), so no rank ends its process
    while another still writes or waits for it; then rank 0 marks the run finished for the
    launcher (FINISHED_ENV) and the group is destroyed. After a failure the group is only
    destroyed: the other ranks may never reach a barrier."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    rank = dist.get_rank()
    try:
        if finished:
            if dist.get_backend() == "nccl":
                dist.barrier(device_ids=[torch.cuda.current_device()])
            else:
                dist.barrier()
            if rank == 0:
                _mark_finished(report_path)
    finally:
        dist.destroy_process_group()
    if finished:
        maybe_fault(rank, FAULT_AT_END)


def _mark_finished(report_path: str | None) -> None:
    path = os.environ.get(FINISHED_ENV)
    if not path:  # not started by ``launch`` (the user's own torchrun or srun)
        return
    from layerscope.core.io import write_file

    try:
        write_file(path, json.dumps({"report": report_path}))
    except (OSError, UserError):  # the launcher then reports a later failure as a failure
        pass


def finished_report(path: str) -> tuple[bool, str | None]:
    """Whether rank 0 marked the run finished in the launcher's file ``path``, and the report
    it named."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return False, None
    report = data.get("report") if isinstance(data, dict) else None
    return True, report if isinstance(report, str) else None


def maybe_fault(rank: int, step: int | str) -> None:
    """The LAYERSCOPE_FAULT switch (see FAULT_ENV); does nothing when it is not set."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    try:
        r, s, kind = spec.split(":")
        if (int(r), s) != (rank, str(step)) or kind not in FAULT_KINDS:
            return
    except ValueError:
        return
    if kind in ("kill", "abort"):
        os.kill(os.getpid(), signal.SIGKILL if kind == "kill" else signal.SIGABRT)
        return
    if kind == "raise":
        raise RuntimeError(f"fault injected by {FAULT_ENV}={spec}")
    while True:  # hang: the other ranks wait in their next collective until --comm-timeout
        time.sleep(3600)


def sum_across(values: list[float], device: str) -> list[float]:
    """Element-wise sum of ``values`` over all ranks (float64)."""
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return [float(v) for v in t.cpu()]


def gather(obj: Any, rank: int, world_size: int) -> list[Any] | None:
    """Every rank's ``obj`` on rank 0 (None on the others)."""
    import torch.distributed as dist

    out: list[Any] | None = [None] * world_size if rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def barrier_seconds() -> float:
    """Time this rank waits at a barrier: how far it is ahead of the slowest rank."""
    import torch.distributed as dist

    t0 = time.perf_counter()
    dist.barrier()
    return time.perf_counter() - t0


# ---------------------------------------------------------------- failures


def failure_message(exc: BaseException, timeout_s: float | None) -> str:
    """One line for an exception that ended this rank."""
    text = first_line(exc, with_type=True)
    timed_out = re.search(r"timed out[^\n]*", str(exc), re.IGNORECASE)
    if timeout_s is not None and timed_out:
        return (f"a collective timed out after {timeout_s:g} s (--comm-timeout): another rank "
                f"hung or died ({timed_out.group(0).strip()[:120]})")
    if isinstance(exc, torch.OutOfMemoryError):
        return f"out of memory ({text[:160]})"
    return text if not isinstance(exc, UserError) else first_line(str(exc))


def record_failure(env: DistEnv, exc: BaseException, timeout_s: float | None) -> int:
    """Write this rank's failure where torchrun reads it (TORCHELASTIC_ERROR_FILE); without
    torchrun (srun), print the one line here. Returns the exit status (2: bad input)."""
    message = failure_message(exc, timeout_s)
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        # the format of torch.distributed.elastic's ErrorHandler, with our one line as message
        data = {"message": {"message": message,
                            "extraInfo": {"py_callstack": "", "timestamp": str(int(time.time()))}}}
        from layerscope.core.io import write_file

        try:  # torchrun's own per-rank file in its temporary log folder
            write_file(path, json.dumps(data))
        except (OSError, UserError):
            path = None
    if not path:
        import sys

        print(f"layerscope: error: rank {env.rank}: {message}", file=sys.stderr)
    return 2 if isinstance(exc, UserError) else 1


SIGNAL_CAUSES = {"SIGKILL": "killed by SIGKILL (from outside: kill -9, or the kernel's "
                            "out-of-memory killer)",
                 "SIGTERM": "terminated by SIGTERM", "SIGSEGV": "crashed (SIGSEGV)",
                 "SIGABRT": "aborted (SIGABRT)", "SIGINT": "interrupted (SIGINT)",
                 "SIGBUS": "crashed (SIGBUS)"}


# A rank's error that only says a peer went away: a consequence of another rank's failure.
PEER_LOST = re.compile(r"connection (reset|closed) by peer|broken pipe|timed out|"
                       r"communicator was aborted", re.IGNORECASE)


def first_cause(failures: dict[int, Any]) -> tuple[int, Any]:
    """The failed rank to name, out of torchrun's failures by rank: the earliest whose failure
    is its own (a signal, an error of its own) before any whose error only says that a peer
    went away, then by time, then by rank. torchrun's own choice (the smallest timestamp, in
    whole seconds) named rank 0's "Connection reset by peer" for rank 1's SIGKILL when both
    were seen in the same second."""
    def key(rank: int) -> tuple[bool, int, int]:
        failure = failures[rank]
        message = failure.message
        if isinstance(message, dict):
            message = message.get("message", "")
        lost = failure.exitcode > 0 and bool(PEER_LOST.search(str(message or "")))
        return lost, failure.timestamp, rank

    rank = min(failures, key=key)
    return rank, failures[rank]


def describe_failure(failure: Any) -> str:
    """One line for torchrun's ProcessFailure: the signal by name, or the rank's own line."""
    if failure.exitcode < 0:
        name = failure.signal_name()
        return SIGNAL_CAUSES.get(name, f"killed by signal {name}")
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    text = first_line(str(message)) if message else ""
    if not text or "To enable traceback" in text:
        return f"exited with status {failure.exitcode}"
    return text


def launch(argv: list[str], nproc: int, nnodes: int = 1, node_rank: int = 0,
           rdzv_endpoint: str | None = None) -> int:
    """Run ``layerscope ARGV`` in ``nproc`` processes per node through torchrun; a rank that
    fails ends the run with one line naming it and its cause."""
    import logging

    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = ["--nproc-per-node", str(nproc), "--nnodes", str(nnodes), "--max-restarts", "0"]
    if nnodes == 1 and not rdzv_endpoint:
        args.append("--standalone")
    else:
        if not rdzv_endpoint:
            raise UserError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT (the machine of "
                            "node rank 0)")
        host, _, port = values.endpoint(rdzv_endpoint, "--rdzv-endpoint").rpartition(":")
        if not node_rank < nnodes:
            raise UserError(f"--node-rank {node_rank} must be below --nnodes {nnodes} (node ranks "
                            f"are 0 .. {nnodes - 1})")
        args += ["--node-rank", str(node_rank), "--master-addr", host, "--master-port", port]
    if "OMP_NUM_THREADS" not in os.environ:  # torchrun would set 1 and print a warning
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    elastic = logging.getLogger("torch.distributed.elastic")
    level = elastic.level
    elastic.setLevel(logging.CRITICAL)  # its failure summary is replaced by our one line
    import tempfile

    marks = tempfile.mkdtemp(prefix="layerscope-ranks-")
    mark = os.path.join(marks, "finished.json")
    previous = os.environ.get(FINISHED_ENV)
    os.environ[FINISHED_ENV] = mark  # the ranks inherit the launcher's environment
    try:
        torchrun.run(torchrun.parse_args(args + ["-m", "layerscope", *argv]))
    except ChildFailedError as exc:
        rank, failure = first_cause(exc.failures)
        finished, report = finished_report(mark)
        if finished:
            raise FailedAfterFinishing(rank, describe_failure(failure), report) from None
        raise RankFailed(rank, describe_failure(failure),
                         2 if failure.exitcode == 2 else 1) from None
    except SignalException as exc:  # torchrun stopped the ranks on SIGINT / SIGTERM
        raise Stopped(exc.sigval) from None
    finally:
        elastic.setLevel(level)
        if previous is None:
            os.environ.pop(FINISHED_ENV, None)
        else:
            os.environ[FINISHED_ENV] = previous
        import shutil

        shutil.rmtree(marks, ignore_errors=True)
    return 0


class Stopped(Exception):
    """The launcher got SIGINT or SIGTERM and stopped the ranks: the CLI prints ``message``
    and exits with ``code`` as a shell does for a process a signal ended (128 + the signal:
    130, 143)."""

    def __init__(self, sigval: int):
        import signal

        name = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}.get(
            sigval, f"stopped by signal {int(sigval)}")
        super().__init__(f"{name}: the ranks were stopped")
        self.code = 128 + int(sigval)


class FailedAfterFinishing(Exception):
    """A rank's process failed after every rank had reached the final barrier: the training
    finished and rank 0 had written its report. The CLI prints ``message`` as a warning and
    exits 0 (the rule in docs/distributed.md): the run's results are complete."""

    def __init__(self, rank: int, cause: str, report: str | None):
        where = f"; {report} is complete" if report else ""
        super().__init__(f"rank {rank} {cause} while its process ended, after every rank had "
                         f"finished training{where}")
        self.rank, self.cause, self.report = rank, cause, report


class RankFailed(Exception):
    """A rank of a launched run failed: the CLI prints ``message`` and exits with ``code``."""

    def __init__(self, rank: int, cause: str, code: int):
        super().__init__(f"rank {rank} failed: {cause}")
        self.rank, self.cause, self.code = rank, cause, code
