"""Measure a data-parallel run's communication: every gradient bucket's bytes and time, the part
of it not hidden behind backward, and the volume against the ring all-reduce theory.

The seam is torch's own: DDP's communication hook (``register_comm_hook``) and FSDP2's custom
collectives (``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``). Nothing in torch
is patched. The hook does what the default ``allreduce_hook`` does (divide the bucket by the world
size, all-reduce it asynchronously; torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py)
and notes the launch and the completion of the collective's future.

Timing. CPU (gloo): the host clock at launch and in the future's ``then`` callback, which runs
when the collective has finished. CUDA (NCCL): a future's callback runs when the work is enqueued
rather than done, so each bucket records a CUDA event at launch and one inside its ``then``
callback (which torch runs on a stream that waits for the collective), and all are read after one
synchronisation in ``step_end``; bucket start/end are relative to an event recorded in
``step_begin``. (Not measured here: the machine that built this had no GPU.)

Exposed communication (the part backward does not hide). DDP launches bucket ``i`` as soon as its
last gradient is ready and in bucket order, so the last bucket is launched when backward's last
gradient is written: the backward compute ends there. What follows, up to the last bucket's
completion, is communication nothing overlaps::

    exposed = min(last completion, backward_end) - last launch,  clipped to [0, communication]

(``loss.backward()`` itself returns only after DDP has waited for every bucket, so timing
backward alone cannot separate the two.)

Per step, ``step_end`` returns ``{"t0", "communication_s", "exposed_s", "buckets": [{"bytes",
"seconds", "start", "op"}]}``: ``t0`` is the wall clock (``time.time()``) at ``step_begin``, each
bucket's ``start`` is seconds after ``step_begin``; ``communication_s`` is the sum of the buckets'
times (time inside collectives, overlapped or not).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist

# DDP's bucket caps: torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25) and its first
# bucket of dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB), so the first all-reduce starts early.
DDP_BUCKET_CAP_MB = 25.0
DDP_FIRST_BUCKET_BYTES = 1 << 20
# Below this size an all-reduce is latency-bound: NCCL's ring reaches a useful fraction of its bus
# bandwidth only from around a megabyte per message (nccl-tests all_reduce_perf curves), and each
# collective pays a fixed launch and synchronisation cost. Many buckets this small waste it.
SMALL_BUCKET_BYTES = 256 * 1024
MANY_SMALL_BUCKETS = 4
# Hidden-share threshold for the "no overlap" hint.
EXPOSED_SHARE_HINT = 0.5


def ring_allreduce_bytes(payload_bytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) to all-reduce ``payload_bytes`` with the ring
    algorithm: a reduce-scatter then an all-gather, each moving (N-1)/N of the payload
    (Patarasuk & Yuan 2009; NCCL's "bus bandwidth" uses the same 2(N-1)/N factor)."""
    n = world_size
    return 2 * (n - 1) / n * payload_bytes


def fsdp_bytes(param_bytes: float, grad_bytes: float, world_size: int,
               reshard_after_forward: bool = True) -> dict[str, float]:
    """Bytes each rank sends per step under FSDP (ZeRO-3), ring collectives: an all-gather of the
    parameters before forward and, when they were resharded after forward, again before backward,
    each (N-1)/N x parameter bytes; a reduce-scatter of the gradients, (N-1)/N x gradient bytes
    (Rajbhandari et al. 2020, ZeRO, section 7: stage 3 moves 1.5x the all-reduce's volume,
    3(N-1)/N against 2(N-1)/N when parameters and gradients have the same bytes)."""
    share = (world_size - 1) / world_size
    gathers = 2 if reshard_after_forward else 1
    out = {"all_gather": gathers * share * param_bytes, "reduce_scatter": share * grad_bytes}
    out["total"] = out["all_gather"] + out["reduce_scatter"]
    return out


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of the gradients of the trainable parameters (each shared parameter once): what DDP's
    buckets hold in total."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


@dataclass
class _Bucket:
    op: str
    nbytes: int
    start: float = 0.0  # host seconds (CPU) at launch
    end: float | None = None
    start_event: Any = None  # CUDA events
    end_event: Any = None


def _timed_allreduce(state, bucket):
    # No annotations: DDP compares them with dist.GradBucket / Future[Tensor] objects, and this
    # module's postponed annotations would be strings.
    buffer = bucket.buffer()
    record = state._launch("all_reduce", buffer)
    buffer.div_(state.world_size)
    fut = dist.all_reduce(buffer, group=state.group, async_op=True).get_future()

    def done(f):
        state._complete(record)
        return f.value()[0]

    return fut.then(done)


class CommRecorder:
    """Times every collective of a DDP or FSDP2 model, step by step (see the module docstring)."""

    def __init__(self, world_size: int, process_group=None):
        self.group = process_group
        self.world_size = process_group.size() if process_group is not None else world_size
        self.cuda = False
        self.device: torch.device | None = None
        self.strategy = "ddp"
        self._current: list[_Bucket] = []
        self._t0 = 0.0
        self._wall0 = 0.0
        self._ref_event: Any = None
        self._backward_end: float | None = None
        self._backward_event: Any = None
        self.steps: list[dict[str, Any]] = []

    # -- seams ---------------------------------------------------------------------------------
    def attach(self, ddp_model) -> None:
        """Register the timing all-reduce as ``ddp_model``'s communication hook (once; DDP refuses
        a second hook)."""
        self.cuda, self.device = _on_cuda(ddp_model)
        self.strategy = "ddp"
        ddp_model.register_comm_hook(self, _timed_allreduce)

    def attach_fsdp(self, fsdp_module) -> None:
        """Time FSDP2's all-gathers and reduce-scatters through its custom-collective seam, for
        every ``FSDPModule`` inside ``fsdp_module`` (best effort: a module with several parameter
        groups refuses a custom collective and is left untimed)."""
        from torch.distributed.fsdp import FSDPModule

        self.cuda, self.device = _on_cuda(fsdp_module)
        self.strategy = "fsdp"
        for module in fsdp_module.modules():
            if isinstance(module, FSDPModule):
                try:
                    # Duck-typed: the AllGather / ReduceScatter base classes are private to torch.
                    module.set_custom_all_gather(cast(Any, _TimedAllGather(self)))
                    module.set_custom_reduce_scatter(cast(Any, _TimedReduceScatter(self)))
                except ValueError:
                    continue

    # -- per step ------------------------------------------------------------------------------
    def step_begin(self) -> None:
        self._current = []
        self._backward_end = None
        self._backward_event = None
        self._wall0 = time.time()
        self._t0 = time.perf_counter()
        if self.cuda:
            self._ref_event = _event(self.device)

    def backward_end(self) -> None:
        """Call right after ``loss.backward()`` returns."""
        self._backward_end = time.perf_counter() - self._t0
        if self.cuda:
            self._backward_event = _event(self.device)

    def step_end(self) -> dict[str, Any]:
        if self.cuda:
            torch.cuda.synchronize()
        buckets: list[dict[str, Any]] = []
        for b in self._current:
            start, end = self._interval(b)
            buckets.append({"op": b.op, "bytes": b.nbytes, "start": start,
                            "seconds": max(0.0, end - start)})
        backward_end = self._backward_end
        if self.cuda and self._backward_event is not None:
            backward_end = self._ref_event.elapsed_time(self._backward_event) / 1e3
        communication = sum(b["seconds"] for b in buckets)
        step = {"t0": self._wall0, "communication_s": communication,
                "exposed_s": exposed_seconds(buckets, backward_end), "buckets": buckets}
        self.steps.append(step)
        return step

    def _interval(self, b: _Bucket) -> tuple[float, float]:
        if self.cuda and b.start_event is not None:
            start = self._ref_event.elapsed_time(b.start_event) / 1e3
            end = self._ref_event.elapsed_time(b.end_event) / 1e3 if b.end_event else start
            return start, end
        end = b.end if b.end is not None else b.start
        return b.start - self._t0, end - self._t0

    def _launch(self, op: str, tensor: torch.Tensor) -> _Bucket:
        b = _Bucket(op, tensor.numel() * tensor.element_size(), start=time.perf_counter())
        if self.cuda:
            b.start_event = _event(self.device)
        self._current.append(b)
        return b

    def _complete(self, b: _Bucket) -> None:
        b.end = time.perf_counter()
        if self.cuda:
            b.end_event = _event(self.device)

    # -- the run -------------------------------------------------------------------------------
    def summary(self, gradient_bytes: int, bucket_cap_mb: float = DDP_BUCKET_CAP_MB,
                param_bytes: int | None = None) -> dict[str, Any]:
        """The JSON ``communication`` section over the recorded steps (see ``communication``)."""
        return communication(self.steps, gradient_bytes, self.world_size, strategy=self.strategy,
                             bucket_cap_mb=bucket_cap_mb, param_bytes=param_bytes)


def exposed_seconds(buckets: list[dict[str, Any]], backward_end: float | None) -> float:
    """Communication after the last bucket's launch (= backward's last gradient), up to the last
    completion or ``backward_end``, whichever is first; within [0, sum of the buckets' times]."""
    if not buckets:
        return 0.0
    last_launch = max(b["start"] for b in buckets)
    last_done = max(b["start"] + b["seconds"] for b in buckets)
    if backward_end is not None:
        last_done = min(last_done, backward_end)
    return min(max(0.0, last_done - last_launch), sum(b["seconds"] for b in buckets))


# Fraction of a collective's full tensor each rank sends with the ring algorithm (NCCL's
# "bus bandwidth" factors, nccl-tests doc/PERFORMANCE.md): all-reduce 2(N-1)/N, all-gather and
# reduce-scatter (N-1)/N of the full (gathered / unreduced) tensor.
_RING_SHARE = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}


def communication(steps: list[dict[str, Any]], gradient_bytes: int, world_size: int,
                  strategy: str = "ddp", bucket_cap_mb: float = DDP_BUCKET_CAP_MB,
                  param_bytes: int | None = None) -> dict[str, Any]:
    """Summarise ``step_end`` records: the bucket layout of the last step (DDP rebuilds its buckets
    after the first iteration, so earlier steps with another layout are left out of the per-bucket
    medians), bytes per step, the theory, medians of the times, and hints.

    ``bytes_per_step``: bytes of the tensors the collectives ran over (for DDP, the buckets: equal
    to the gradient bytes); ``wire_bytes_per_step``: what each rank sent for them with ring
    collectives; ``theory_bytes_per_step``: the same from the model alone (2(N-1)/N x gradient
    bytes for DDP; ``fsdp_bytes`` for FSDP), so the two agree when nothing extra is sent."""
    layout = [(b["op"], b["bytes"]) for b in steps[-1]["buckets"]] if steps else []
    same = [s for s in steps if [(b["op"], b["bytes"]) for b in s["buckets"]] == layout]
    buckets = [{"op": op, "bytes": nbytes,
                "median_s": statistics.median(s["buckets"][i]["seconds"] for s in same)}
               for i, (op, nbytes) in enumerate(layout)]
    bytes_per_step = sum(nbytes for _, nbytes in layout)
    if strategy == "fsdp":
        theory = fsdp_bytes(param_bytes if param_bytes is not None else gradient_bytes,
                            gradient_bytes, world_size)["total"]
    else:
        theory = ring_allreduce_bytes(gradient_bytes, world_size)
    wire = sum(nbytes * _RING_SHARE[op](world_size) for op, nbytes in layout)
    comm_s = statistics.median(s["communication_s"] for s in same) if same else 0.0
    exposed_s = statistics.median(s["exposed_s"] for s in same) if same else 0.0
    out: dict[str, Any] = {
        "strategy": strategy, "world_size": world_size, "steps": len(same),
        "bytes_per_step": bytes_per_step, "gradient_bytes": gradient_bytes,
        "theory_bytes_per_step": theory, "wire_bytes_per_step": wire,
        "bucket_cap_mb": bucket_cap_mb,
        "communication_s": comm_s, "exposed_s": exposed_s,
        # NCCL-tests' bus bandwidth: the bytes each rank actually moves per second of collective.
        "bus_bandwidth_bytes_per_s": wire / comm_s if comm_s > 0 else None,
        "buckets": buckets,
    }
    out["hints"] = bucket_hints(out) if strategy == "ddp" else []
    return out


def bucket_hints(comm: dict[str, Any]) -> list[str]:
    """One line per problem with the bucket layout; empty when it looks right."""
    hints = []
    buckets = comm["buckets"]
    sizes = [b["bytes"] for b in buckets]
    small = [s for s in sizes if s < SMALL_BUCKET_BYTES]
    cap = comm["bucket_cap_mb"]
    mib = 1 << 20
    if len(small) >= MANY_SMALL_BUCKETS:
        hints.append(
            f"{len(small)} of {len(sizes)} gradient buckets are under "
            f"{SMALL_BUCKET_BYTES // 1024} KiB: each all-reduce is latency-bound; raise "
            f"bucket_cap_mb (now {cap:g}) so fewer, larger buckets carry the same bytes")
    total = sum(sizes)
    # DDP's first bucket is capped at 1 MiB, so more gradient than that in one bucket means
    # bucket_cap_mb was raised to hold them all.
    if len(sizes) == 1 and total > DDP_FIRST_BUCKET_BYTES:
        hints.append(
            f"all {total / mib:.1f} MiB of gradients are in one bucket: its all-reduce starts "
            f"only when backward has finished, so none of it overlaps; lower bucket_cap_mb "
            f"(now {cap:g}) to about {max(1.0, total / mib / 4):.0f}")
    comm_s, exposed = comm["communication_s"], comm["exposed_s"]
    if len(sizes) > 1 and comm_s > 0 and exposed / comm_s > EXPOSED_SHARE_HINT:
        hints.append(
            f"{exposed / comm_s:.0%} of the communication is exposed (after backward's last "
            f"gradient): the last bucket ({sizes[-1] / mib:.2f} MiB) is large or the link slow; "
            f"a smaller bucket_cap_mb overlaps more of it")
    return hints


class _TimedCollective:
    """FSDP2's custom collective interface (``allocate`` and ``__call__``): the default
    all-gather / reduce-scatter, launched asynchronously so its future can be timed."""

    op = ""

    def __init__(self, recorder: CommRecorder):
        self.recorder = recorder

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)


class _TimedAllGather(_TimedCollective):
    op = "all_gather"

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        record = self.recorder._launch(self.op, output_tensor)
        work = dist.all_gather_single(output_tensor, input_tensor, group=group, async_op=True)
        return _finish(self.recorder, record, work, async_op)


class _TimedReduceScatter(_TimedCollective):
    op = "reduce_scatter"

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        record = self.recorder._launch(self.op, input_tensor)
        work = dist.reduce_scatter_single(output=output_tensor, input=input_tensor, group=group,
                                          op=op, async_op=True)
        return _finish(self.recorder, record, work, async_op)


def _finish(recorder: CommRecorder, record: _Bucket, work, async_op: bool):
    try:
        fut = work.get_future()
    except RuntimeError:  # gloo's reduce-scatter work has no future: time it by waiting here
        fut = None
    if fut is None:
        work.wait()
        recorder._complete(record)
        return None if not async_op else work
    fut.then(lambda f: recorder._complete(record))
    if async_op:
        return work
    work.wait()
    return None


def _on_cuda(model: torch.nn.Module) -> tuple[bool, torch.device | None]:
    p = next(model.parameters(), None)
    cuda = p is not None and p.device.type == "cuda"
    return cuda, (p.device if cuda and p is not None else None)


def _event(device):
    # On the current stream of the model's device: a future's callback may run on another
    # thread, whose current device is not necessarily the rank's; torch sets that device's
    # current stream to one that waits for the collective.
    e = torch.cuda.Event(enable_timing=True)
    e.record(torch.cuda.current_stream(device))
    return e
