"""The data loader's verdict: where a loader's fetch and collate time went, read against the
machine's cores (``fetch_evidence``), and what holds the training loaders back, with the
DataLoader argument that would remove the wait (``findings``). Reads only the figures the probe
(``training.dataloading``) gathered, in ``LoaderStats`` records: plain Python, table-tested.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from layerscope.core.records.dataloading import DataFinding, LoaderStats

DATA_SHARE = 0.1  # the main process waiting this share of the loop for data is worth a finding
STARTUP_SHARE = 0.2  # start-up this share of the data wait is worth persistent_workers
IO_CPU = 0.5  # fetch+collate on a CPU less than this share of their own time (on a CPU +
# blocked, the run-queue wait left out; all of it without the run-queue wait): waiting (I/O)
RUNQ_SHARE = 0.2  # of the time the fetch wanted a core (on a CPU + waiting for one), waiting
# this share or more: the machine had no free core
RUNQ_SLACK = 0.05  # the fetching thread's CPU time + run-queue wait above the fetch's own time
# by more than this share: the readings disagree
OWN_THREADS = 0.1  # the process's other threads on a CPU this share of the fetch: said
PIN_SHARE = 0.05  # host-to-device copies this share of the loop without pinning: pin_memory
MIN_BATCHES = 5  # a training loader that gave fewer batches than this is not judged


def cap_workers(n: float, limit: int) -> int:
    """Workers to suggest: ``n`` rounded up, between 1 and ``limit``; a loop that did nothing
    but wait (its own time per batch 0, so ``n`` infinite) gets the limit."""
    return limit if not math.isfinite(n) else max(1, min(int(math.ceil(n)), limit))


@dataclass(frozen=True)
class FetchEvidence:
    """Where a loader's fetch and collate time went, read against the machine's cores.

    ``kind``: ``io`` (the fetching thread blocked longer than it was on a CPU: I/O, sleeps),
    ``cpu`` (it computed at least as long, and a core was free when it wanted one),
    ``oversubscribed`` (it computed at least as long, and the cores were taken: more workers
    would wait for a core as well), ``unknown`` (the evidence is missing or disagrees: ``what``
    says why). ``what``: the words for the finding's message; ``figures``: the shares and
    readings used."""

    kind: str
    what: str
    figures: dict[str, float]


def queued_batches(cpu_s: float, run_wait_s: float) -> float:
    """Of the time a thread wanted a core (on a CPU + waiting for one), the share it waited."""
    return run_wait_s / (cpu_s + run_wait_s) if cpu_s + run_wait_s > 0 else 0.0


def fetch_evidence(lo: LoaderStats, *, load: float | None, cores: int) -> FetchEvidence:
    """Waiting for a core is not waiting for I/O. The fetch's time (fetch and collate) splits,
    in the thread that ran it, into its CPU time (``thread_cpu_s``), its run-queue wait
    (``run_wait_s``: runnable, no core free) and the rest (blocked: I/O, sleeps). The CPU and
    blocked seconds belong to the work, the run-queue wait to the machine (it grows with the
    load, they do not): the fetch waits for I/O when it is blocked longer than it computes
    (CPU under ``IO_CPU`` of the two), unless that turns round when the main process's other
    threads, on a CPU meanwhile, are counted as the fetch's own parallel threads (their CPU
    the fetch's, the blocked time that long waiting for them): other work or the fetch's, not
    told apart, so not judged. Otherwise it is CPU-bound, and the machine is oversubscribed
    when, of the time a thread wanted a core, it waited ``RUNQ_SHARE`` or more: the fetching
    threads in the fetch, or the loop's thread over the whole loop (the wait falls wherever
    the scheduler took the core away, inside the fetch or between fetches). Without the
    run-queue wait (not Linux) the 1-minute load average stands in: a fetch on a CPU under
    ``IO_CPU`` of its time is called waiting for I/O only when the load left a core free, else
    it is not judged."""
    work_s = lo["fetch_s"] + lo["collate_s"]
    cpu_s, run_wait_s = lo["cpu_s"], lo.get("run_wait_s")
    thread_cpu_s = lo.get("thread_cpu_s")
    loop_cpu_s, loop_wait_s = lo.get("loop_cpu_s"), lo.get("loop_run_wait_s")
    figs: dict[str, float] = {"cores": cores}
    if load is not None:
        figs["load"] = load
    on = f"{cores} core{'' if cores == 1 else 's'}"
    machine = (f"load {load:.1f} on {on}" if load is not None
               else f"{on}, load average not readable")
    if work_s <= 0:
        return FetchEvidence("unknown", "no fetch or collate time was seen (workers started "
                                        "with spawn or forkserver report none)", figs)
    cp = cpu_s / work_s
    figs["cpu_share"] = round(cp, 4)
    if run_wait_s is None:
        return _without_run_queue(cp, load=load, cores=cores, machine=machine, figs=figs)
    c = (cpu_s if thread_cpu_s is None else thread_cpu_s) / work_s
    r = run_wait_s / work_s
    figs.update(thread_cpu_share=round(c, 4), run_wait_s=round(run_wait_s, 6),
                run_wait_share=round(r, 4))
    if thread_cpu_s is not None and c + r > 1 + RUNQ_SLACK:
        return FetchEvidence(
            "unknown", f"the fetching thread's CPU time and run-queue wait ({c:.0%} and {r:.0%} "
                       "of the fetch and collate's time) add up to more than that time: the "
                       "readings disagree", figs)
    blocked = max(1.0 - c - r, 0.0)
    figs["blocked_share"] = round(blocked, 4)
    loop = ""
    queued = queued_batches(c, r)
    if loop_cpu_s is not None and loop_wait_s is not None:
        in_loop = queued_batches(loop_cpu_s, loop_wait_s)
        figs["loop_queued_share"] = round(in_loop, 4)
        loop = f"; over the loop its thread waited for a core {in_loop:.0%} of its demand"
        queued = max(queued, in_loop)
    split = f"CPU {c:.0%} of it, waiting for a core {r:.0%}, blocked {blocked:.0%}"
    # the main process's other threads, on a CPU while it fetched: other work, or the fetch's
    # own parallel threads (then the fetching thread was blocked waiting for them)
    other = max(cp - c, 0.0) if thread_cpu_s is not None and not lo["num_workers"] else 0.0
    if c < IO_CPU * (c + blocked):
        return _mostly_blocked(c, blocked, other, split=split, machine=machine, figs=figs)
    if queued >= RUNQ_SHARE:
        own = (f"; the process's other threads (torch's among them) were on a CPU {other:.0%} "
               "of it" if other >= OWN_THREADS else "")
        return FetchEvidence(
            "oversubscribed", f"CPU-bound on an oversubscribed machine ({split}: "
                              f"{run_wait_s:.2f} s of its {work_s:.2f} s waiting for a core"
                              f"{loop}{own}; {machine})", figs)
    return FetchEvidence("cpu", f"CPU-bound transforms ({split}{loop}; {machine})", figs)


def _without_run_queue(cp: float, *, load: float | None, cores: int, machine: str,
                       figs: dict[str, float]) -> FetchEvidence:
    """``fetch_evidence`` where the run-queue wait is not readable (not Linux): the process's
    CPU share ``cp`` of the fetch, read against the 1-minute load average."""
    missing = "run-queue wait not readable (no /proc/thread-self/schedstat)"
    busy = load is not None and load >= cores
    if cp >= IO_CPU:
        if busy:
            return FetchEvidence(
                "oversubscribed", f"CPU-bound on an oversubscribed machine (CPU {cp:.0%} of "
                                  f"it; {machine}; {missing})", figs)
        return FetchEvidence("cpu", f"CPU-bound transforms (CPU {cp:.0%} of it; {machine}; "
                                    f"{missing})", figs)
    if load is not None and not busy:
        return FetchEvidence(
            "io", f"mostly waiting, not computing (CPU {cp:.0%} of it; {missing}, but the "
                  f"{machine} left a core free: I/O or sleeps)", figs)
    return FetchEvidence(
        "unknown", f"the fetch was on a CPU {cp:.0%} of its time and the rest may be "
                   f"waiting for a core as well as for I/O: {missing}, and "
                   + ("the load average neither" if load is None
                      else f"the {machine} leaves no core free"), figs)


def _mostly_blocked(c: float, blocked: float, other: float, *, split: str, machine: str,
                    figs: dict[str, float]) -> FetchEvidence:
    """``fetch_evidence`` where the fetching thread was blocked longer than it computed (shares
    ``c`` and ``blocked`` of the fetch): waiting for I/O, unless the process's other threads
    (on a CPU ``other`` of it), counted as the fetch's own, would make it CPU-bound."""
    mine = c + other  # the fetch's CPU if the other threads worked for it
    if mine >= IO_CPU * (mine + max(blocked - other, 0.0)):
        return FetchEvidence(
            "unknown", f"the fetching thread was blocked longer than it computed ({split}), "
                       f"yet the process's other threads were on a CPU {other:.0%} of its "
                       "time: CPU-bound if they were the fetch's own parallel threads, "
                       "waiting if they were other work, not told apart", figs)
    return FetchEvidence(
        "io", f"mostly waiting, not computing ({split}: I/O or sleeps; {machine})", figs)


@dataclass(frozen=True)
class _Case:
    """One loader's figures as the finding rules read them: the loop's wait and span, the work
    per batch (fetch and collate) against the loop's own time per batch, the workers it would
    take to keep up (``need``; at most ``limit``), and where the fetch's time went (``ev``)."""

    lo: LoaderStats
    ev: FetchEvidence
    cores: int
    span: float
    wait: float
    first: float
    work: float
    per_batch: float
    compute: float
    need: float
    limit: int
    figs: dict[str, float]

    @property
    def name(self) -> str:
        return self.lo["dataset"]

    @property
    def nb(self) -> str:
        return f"{self.lo['batches']} batch{'' if self.lo['batches'] == 1 else 'es'}"

    @property
    def io(self) -> bool:
        return self.ev.kind == "io"

    @property
    def kind(self) -> str:
        return "io_bound" if self.io else "cpu_bound"

    @property
    def workers(self) -> int:
        return self.lo["num_workers"]

    @property
    def steady(self) -> float:
        """The wait after each pass's first batch."""
        return max(self.wait - self.first, 0.0)

    @property
    def supply(self) -> str:
        return (f"{self.workers} worker(s) make a batch in {self.per_batch:.3f} s each, the "
                f"loop uses one every {self.compute:.3f} s ({self.nb})")


def _case(lo: LoaderStats, *, load: float | None, cores: int) -> _Case:
    span = lo["span_s"] or lo["wait_s"] or 1e-12
    batches = max(lo["batches"], 1)
    wait = lo["wait_s"]
    work = lo["fetch_s"] + lo["collate_s"]
    per_batch = work / batches
    compute = max(span - wait, 0.0) / batches  # the loop's own time per batch
    ev = fetch_evidence(lo, load=load, cores=cores)
    figs = {"wait_s": round(wait, 6), "fetch_s": round(lo["fetch_s"], 6),
            "collate_s": round(lo["collate_s"], 6), "span_s": round(span, 6),
            "data_share": round(wait / span, 4), "batches": lo["batches"], **ev.figures,
            "work_per_batch_s": round(per_batch, 6), "compute_per_batch_s": round(compute, 6)}
    return _Case(lo=lo, ev=ev, cores=cores, span=span, wait=wait, first=lo["first_wait_s"],
                 work=work, per_batch=per_batch, compute=compute,
                 need=per_batch / compute if compute > 0 else float("inf"),
                 limit=4 * cores if ev.kind == "io" else cores, figs=figs)


_Ranked = tuple[float, DataFinding]  # a finding and the seconds it ranks by (largest first)


def _few_batches(k: _Case) -> _Ranked:
    wait, span = k.wait, k.span
    return wait, DataFinding(
        kind="cannot_judge", figures=k.figs,
        message=f"{k.name}: cannot judge the data loading from {k.nb} (fewer than "
                f"{MIN_BATCHES}): the loop waited {wait:.2f} s of {span:.2f} s "
                f"({wait / span:.0%}) for them, a cost of its first batches (start-up, "
                "a first read) more than of the loop's")


def _fine(k: _Case) -> _Ranked:
    return 0.0, DataFinding(
        kind="fine", figures=k.figs,
        message=f"{k.name}: data loading keeps up: the loop waited {k.wait:.2f} s of "
                f"{k.span:.2f} s ({k.wait / k.span:.0%}) for {k.nb}")


def _main_process(k: _Case) -> _Ranked:
    """``num_workers=0``: the main process fetches; more workers unless the evidence is
    missing or the cores are taken."""
    lo, wait, what = k.lo, k.wait, k.ev.what
    head = (f"{k.name}: the main process loads every batch itself (num_workers=0): "
            f"the dataset's fetch took {lo['fetch_s']:.2f} s and collate "
            f"{lo['collate_s']:.2f} s over {k.nb} ({k.per_batch * 1e3:.1f} ms per batch) "
            f"of the {wait:.2f} s it waited for data ({wait / k.span:.0%} of the loop)")
    if k.ev.kind == "unknown":
        return wait, DataFinding(
            kind="cannot_judge", figures=k.figs,
            message=f"{head}; cannot judge whether it waits for I/O or for a core: {what}")
    if k.ev.kind == "oversubscribed":
        return wait, DataFinding(
            kind="cpu_oversubscribed", figures=k.figs,
            message=f"{head}, {what}: a worker would wait for a core as well; free "
                    "cores (fewer other processes or threads) or cheaper transforms "
                    "remove the wait")
    n = cap_workers(k.need, k.limit)
    return wait, DataFinding(kind=k.kind, knob="num_workers", value=n, figures=k.figs,
                             message=f"{head}, {what}: set num_workers={n}")


def _worker_startup(k: _Case) -> _Ranked | None:
    """Workers started again each pass, their start-up a large part of the wait."""
    lo, startup = k.lo, k.lo.get("startup_s") or 0.0
    if lo["persistent_workers"] or lo["epochs"] < 2 or startup < STARTUP_SHARE * k.wait:
        return None
    return startup, DataFinding(
        kind="worker_startup", knob="persistent_workers", value=True,
        figures={**k.figs, "startup_s": round(startup, 6), "epochs": lo["epochs"]},
        message=f"{k.name}: the main process waited {startup:.2f} s on worker "
                f"start-up over {lo['epochs']} passes ({startup / k.wait:.0%} of its "
                f"data wait): set persistent_workers=True")


# the steady wait with workers: (verdict, knob, value, text) of the first rule that holds
_Verdict = tuple[str, str | None, int | None, str]


def _no_work(k: _Case) -> _Verdict:
    return "cannot_judge", None, None, (
        f"the loop waited {k.steady:.2f} s ({k.steady / k.span:.0%}) for the {k.nb} "
        f"of {k.workers} worker(s); cannot judge whether more workers or prefetching "
        f"would help: {k.ev.what}")


def _prefetch(k: _Case) -> _Verdict:
    value = 2 * (k.lo.get("prefetch_factor") or 2)
    return "prefetch", "prefetch_factor", value, (
        f"the workers keep up on average but the loop still waited "
        f"{k.steady:.2f} s ({k.steady / k.span:.0%}) for {k.nb} with "
        f"{k.lo.get('ready_mean') or 0:.1f} batches ready on average: "
        f"set prefetch_factor={value}")


def _unknown_workers(k: _Case) -> _Verdict:
    return "cannot_judge", None, None, (
        f"{k.supply}; cannot judge whether more workers would help: {k.ev.what}")


def _oversubscribed_workers(k: _Case) -> _Verdict:
    return "cpu_oversubscribed", None, None, (
        f"{k.supply}, on {k.cores} cores, {k.ev.what}: more workers would wait for a "
        "core as well; free cores or cheaper transforms remove the wait")


def _too_few_workers(k: _Case) -> _Verdict:
    value = cap_workers(k.need, k.limit)
    return "too_few_workers", "num_workers", value, (
        f"{k.supply}, {k.ev.what}: set num_workers={value}")


def _cannot_keep_up(k: _Case) -> _Verdict:
    return k.kind, None, None, (f"{k.workers} workers on {k.cores} cores cannot keep up "
                                f"({k.nb}), {k.ev.what}: make the dataset's transforms "
                                "cheaper")


def _cpu_bound_workers(k: _Case) -> _Verdict:
    return "cpu_bound", None, None, (
        f"{k.workers} workers on {k.cores} cores make a batch in {k.per_batch:.3f} s each "
        f"and cannot keep up ({k.nb}), {k.ev.what}: make the dataset's transforms cheaper "
        "(or move them to the GPU)")


def _may_add(k: _Case) -> bool:
    """More workers can help: the fetch waits (I/O), or there are cores the workers leave."""
    return k.io or k.workers < k.cores


_WORKER_RULES: tuple[tuple[Callable[[_Case], bool], Callable[[_Case], _Verdict]], ...] = (
    (lambda k: k.work <= 0, _no_work),
    (lambda k: k.need <= k.workers, _prefetch),
    (lambda k: k.ev.kind == "unknown", _unknown_workers),
    (lambda k: k.ev.kind == "oversubscribed", _oversubscribed_workers),
    (lambda k: _may_add(k) and cap_workers(k.need, k.limit) > k.workers, _too_few_workers),
    (_may_add, _cannot_keep_up),
    (lambda k: True, _cpu_bound_workers),
)


def _steady_wait(k: _Case) -> _Ranked | None:
    """Workers, and the loop waits after each pass's first batch: the first rule that holds."""
    if k.steady / k.span < DATA_SHARE:
        return None
    verdict = next(rule(k) for holds, rule in _WORKER_RULES if holds(k))
    kind, knob, value, text = verdict
    return k.steady, DataFinding(kind=kind, knob=knob, value=value, figures=k.figs,
                                 message=f"{k.name}: {text}")


def _first_batches(k: _Case) -> _Ranked:
    """The loop waits, but on each pass's first batch only."""
    return k.wait, DataFinding(
        kind="first_batches", figures=k.figs,
        message=f"{k.name}: the loop waited {k.wait:.2f} s ({k.wait / k.span:.0%} of it), "
                f"{k.first:.2f} s of it for each pass's first batch (worker start-up "
                f"{k.lo.get('startup_s') or 0:.2f} s): a cost per pass, which longer "
                "passes spread thinner")


def _loader_findings(k: _Case) -> list[_Ranked]:
    """One loader's findings on its wait (without pinning), in the order of the rules: too
    few batches to judge, fine, the main process fetching, then the workers' start-up and
    their steady supply; the first batches' wait when none of those holds."""
    if k.lo["batches"] < MIN_BATCHES:
        return [_few_batches(k)]
    if k.wait / k.span < DATA_SHARE:
        return [_fine(k)]
    if k.workers == 0:
        return [_main_process(k)]
    found = [f for f in (_worker_startup(k), _steady_wait(k)) if f is not None]
    return found or [_first_batches(k)]


def _no_pinning(k: _Case, h2d_s: float) -> _Ranked:
    return h2d_s, DataFinding(
        kind="no_pinning", knob="pin_memory", value=True,
        figures={**k.figs, "h2d_s": round(h2d_s, 6)},
        message=f"{k.name}: host-to-device copies took {h2d_s:.2f} s ({h2d_s / k.span:.0%} "
                "of the loop) from pageable memory: set pin_memory=True (and "
                ".to(device, non_blocking=True))")


def findings(loaders: list[LoaderStats], *, h2d_s: float = 0.0, cuda: bool = False,
             cores: int = 1, load: float | None = None) -> list[DataFinding]:
    """What holds the training loaders back, largest first, each with its knob and figures;
    "fine" when the main process hardly waits. Reads only the figures (table-tested): the
    loaders', the 1-minute ``load`` average and the ``cores`` it is read against. More workers
    are suggested only where the fetch waits for I/O, or computes with a core free. A loader
    that gave fewer than ``MIN_BATCHES`` batches is left out when another gave enough (a batch
    taken to see the shapes), else it gets ``cannot_judge``: a wait over a few batches is its
    first batches' (start-up, a first read), not the loop's steady state."""
    out: list[_Ranked] = []
    chosen = [lo for lo in loaders if lo["training"]] or loaders
    chosen = [lo for lo in chosen if lo["batches"] >= MIN_BATCHES] or chosen
    for lo in chosen:
        k = _case(lo, load=load, cores=cores)
        out.extend(_loader_findings(k))
        if cuda and not lo["pin_memory"] and h2d_s / k.span >= PIN_SHARE:
            out.append(_no_pinning(k, h2d_s))
    out.sort(key=lambda p: -p[0])
    return [f for _, f in out]
