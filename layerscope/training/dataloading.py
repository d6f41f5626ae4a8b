"""Inside the data loader: where a DataLoader's batches spend their time, in the worker
processes as well as in the main process, and which DataLoader argument would remove the wait.

``LoaderProbe`` installs, for its duration only (each patch undone exactly, as ``Watch`` does):

- the dataset fetchers' ``fetch`` (``torch.utils.data._utils.fetch``: the one function that
  every worker, and the main process with ``num_workers=0``, calls per batch): its time is split
  into the dataset's part (``__getitem__``/``__getitems__``, an iterable's ``next``) and the
  collate function's (the fetcher's ``collate_fn`` is wrapped for the call and put back: the
  user's function runs unchanged, on the same data);
- ``pin_memory`` (``torch.utils.data._utils.pin_memory``: the pinning thread and the
  single-process iterator both call it);
- ``multiprocessing``'s ``Process.start`` for DataLoader workers (target ``_worker_loop``): the
  worker is given a slot in a shared anonymous memory map before it forks, and writes its own
  totals there (fetch, collate, batches, samples, its CPU time, when it started and first
  fetched): no queue, no message, nothing added to the batches;
- ``_BaseDataLoaderIter.__next__`` and ``DataLoader.__iter__``: what the main process waited,
  the batches ready in the queue and in flight when it asked, and when each pass began.

Workers started with the ``spawn`` or ``forkserver`` method do not inherit the map: their
batches are counted from the main process only (a note says so).

Each fetch also reads its thread's run-queue wait (``/proc/thread-self/schedstat``, Linux: the
second field is the time the thread was runnable and waiting for a core, in nanoseconds) before
and after, so that the time the fetch was not on a CPU splits into waiting for a core and
waiting for anything else (I/O, sleeps).

``DataLoading`` (core.records.dataloading) holds the figures; ``findings``
(``dataloading_verdict``, importable from here too) turns them into the verdict and the knob
(``fetch_evidence`` reads where the fetch's time went). The probe's own
cost: per fetch, two clock reads, two of the thread's CPU time, two of its schedstat file (kept
open) and a few additions; per ``next()``, two clock reads (and the loop's thread's CPU time and
run-queue wait at most every ``LOOP_EVERY``).
"""
from __future__ import annotations

import contextlib
import mmap
import multiprocessing.process
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import _utils
from torch.utils.data import dataloader as _dataloader
from torch.utils.data._utils import fetch as _fetch
from torch.utils.data._utils.worker import _worker_loop

from layerscope.core.noise import read_machine
from layerscope.core.records.dataloading import (
    DataLoading,
    DataWorker,
    LoaderStats,
)

# the verdict's rules and thresholds live in dataloading_verdict; importable from here too
from layerscope.training.dataloading_verdict import (  # noqa: F401
    DATA_SHARE,
    IO_CPU,
    MIN_BATCHES,
    OWN_THREADS,
    PIN_SHARE,
    RUNQ_SHARE,
    RUNQ_SLACK,
    STARTUP_SHARE,
    FetchEvidence,
    cap_workers,
    fetch_evidence,
    findings,
    queued_batches,
)

# one slot of float64s per worker process started while a probe runs
(_USED, _LOADER, _WORKER, _EPOCH, _FETCH, _COLLATE, _BATCHES, _SAMPLES, _CPU, _T_FORK, _T_FIRST,
 _PID, _TCPU, _RUNQ, _NO_RUNQ) = range(15)
_FIELDS = 15
SLOTS = 1024  # worker starts timed per probe (a note says when more started)
LOOP_EVERY = 0.01  # seconds between readings of the loop's thread (at the end of a next())
SCHEDSTAT = "/proc/thread-self/schedstat"

_RUNNING: list[LoaderProbe] = []
_pending: int | None = None  # the slot of the worker being started (read in the child)
_slot: int | None = None  # this process's slot: a worker forked while a probe ran
_view: Any = None  # the slots as float64s (shared with the forked workers)


def _after_fork() -> None:
    """In a forked child: a DataLoader worker started by the probe takes its slot."""
    global _slot
    close_schedstat()
    _slot = _pending
    if _slot is not None and _view is not None:
        base = _slot * _FIELDS
        _view[base + _T_FORK] = time.perf_counter()
        _view[base + _PID] = os.getpid()


os.register_at_fork(after_in_child=_after_fork)


_stat = threading.local()  # per thread: .file = (its schedstat file, its fd), None: unreadable


def run_delay() -> float | None:
    """The calling thread's run-queue wait so far, in seconds (the second field of
    ``/proc/thread-self/schedstat``: time runnable but not running); None where the file is not
    readable (not Linux) or the kernel keeps no such figures (it then shows zeros: a running
    thread has been on a CPU at least once, so a zero count of time slices means none kept).
    The file stays open per thread (read again at offset 0): a forked worker opens its own,
    and a thread's closes when the thread ends (or ``close_schedstat``)."""
    held = getattr(_stat, "file", False)
    if held is False:  # the first read in this thread: the kernel keeps the figures?
        held = None  # not tried again in this thread
        try:
            f = open(SCHEDSTAT, "rb", buffering=0)  # noqa: SIM115 - kept open, per thread
            fields = f.read().split()
            if len(fields) >= 3 and int(fields[2]):
                held = (f, f.fileno())
            else:
                f.close()
        except (OSError, ValueError):
            pass
        _stat.file = held
    if held is None:
        return None
    try:
        return int(os.pread(held[1], 128, 0).split(None, 2)[1]) * 1e-9
    except (OSError, ValueError, IndexError):
        return None


def _thread_reading() -> tuple[float, float] | None:
    """The calling thread's CPU time and run-queue wait so far (None: not readable)."""
    r = run_delay()
    return None if r is None else (time.thread_time(), r)


def close_schedstat() -> None:
    """Close the calling thread's schedstat file: at the probe's stop, in the thread that
    stops it, and in a forked child (the file it inherited is its parent thread's)."""
    held = vars(_stat).pop("file", None)
    if held:
        held[0].close()  # the child's copy only, in a child


def patch(owner: Any, attr: str, replacement: Any) -> Callable[[], None]:
    """Set ``owner.attr``; returns its exact restoration (deleted again when it was only
    inherited, so the class dict ends as it began)."""
    had = attr in vars(owner)
    old = vars(owner).get(attr)
    setattr(owner, attr, replacement)

    def undo() -> None:
        if had:
            setattr(owner, attr, old)
        else:
            delattr(owner, attr)
    return undo


@dataclass
class _Loader:
    """Main-process figures of one loader (keyed by its dataset)."""
    index: int
    dataset: str
    collate: str = ""
    num_workers: int = 0
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    pin_memory: bool = False
    training: bool = False  # a batch with gradients on
    steps: int = 0  # optimizer steps taken while its batch was the last one given
    starts: list[float] = field(default_factory=list)  # each pass's iter() time
    first_pending: bool = False
    iter_s: float = 0.0  # the time in the last iter(), until the pass's first batch
    batches: int = 0
    samples: int = 0
    wait_s: float = 0.0
    first_wait_s: float = 0.0
    fetch_s: float = 0.0  # num_workers=0: in the main process
    collate_s: float = 0.0
    cpu_s: float = 0.0
    thread_cpu_s: float = 0.0  # the fetching thread's own CPU time in fetch and collate
    run_wait_s: float = 0.0  # the fetching thread's run-queue wait in fetch and collate
    no_run_wait: int = 0  # fetches whose run-queue wait could not be read
    # the loop's thread (the one that began it): its (CPU time, run-queue wait) at its first
    # iter() and at the end of its last next(); lost when a next() ran in another thread
    loop_thread: int = 0
    loop_t: float = 0.0  # when it was last read
    loop_from: tuple[float, float] | None = None
    loop_to: tuple[float, float] | None = None
    loop_lost: bool = False
    ready: int = 0
    in_flight: int = 0
    asked: int = 0  # next() calls on a multi-process iterator
    last: float = 0.0  # the end of its last next()

    def begin(self, t: float) -> None:
        """The loop begins at ``t`` (its first iter(), in this thread)."""
        self.loop_thread = threading.get_ident()
        self.loop_from = _thread_reading()
        self.loop_t = t

    def end(self, t: float) -> None:
        """A next() ended at ``t``: the loop so far, read at most every ``LOOP_EVERY``."""
        if self.loop_from is None or self.loop_lost or t - self.loop_t < LOOP_EVERY:
            return
        if threading.get_ident() == self.loop_thread:
            self.loop_to = _thread_reading()
            self.loop_t = t
        else:
            self.loop_lost = True

    def loop(self) -> tuple[float | None, float | None]:
        """The loop's thread's CPU time and run-queue wait over the loop (None: not read)."""
        if self.loop_from is None or self.loop_to is None or self.loop_lost:
            return None, None
        return self.loop_to[0] - self.loop_from[0], self.loop_to[1] - self.loop_from[1]


def _name(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return name.replace("<locals>.", "")


class LoaderProbe:
    """Time every DataLoader's batches while it runs (``start``/``stop``, or ``with``);
    ``result(...)`` gives the ``DataLoading`` section. One probe at a time."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self._undo: list[Callable[[], None]] = []
        self._loaders: dict[int, _Loader] = {}
        self._current: _Loader | None = None
        self._starting: _Loader | None = None
        self._pin_s = 0.0
        self._used = 0
        self._dropped = 0
        self._pid = os.getpid()
        self._map: mmap.mmap | None = None
        self._view: Any = None  # the slots (a memoryview of the map) once started
        self._load0: float | None = None  # the 1-minute load average when it started
        self._steps = 0  # optimizer steps seen (any optimizer)
        self._last: _Loader | None = None  # the loader that gave the last batch

    def __enter__(self) -> LoaderProbe:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- install / remove ----------------------------------------------------------------
    def start(self) -> None:
        global _view
        if _RUNNING:
            raise RuntimeError("a data loader probe is already running in this process")
        _RUNNING.append(self)
        load = read_machine().loadavg
        self._load0 = load[0] if load else None
        self._map = mmap.mmap(-1, SLOTS * _FIELDS * 8)  # anonymous, shared with forked workers
        _view = memoryview(self._map).cast("d")
        self._view = _view
        self._patch(_fetch._MapDatasetFetcher, "fetch",
                    self._fetch(_fetch._MapDatasetFetcher.fetch))
        self._patch(_fetch._IterableDatasetFetcher, "fetch",
                    self._fetch(_fetch._IterableDatasetFetcher.fetch))
        self._patch(_utils.pin_memory, "pin_memory", self._pin(_utils.pin_memory.pin_memory))
        process_cls = multiprocessing.process.BaseProcess
        self._patch(process_cls, "start", self._worker_start(process_cls.start))
        iter_cls = _dataloader._BaseDataLoaderIter
        self._patch(iter_cls, "__next__", self._next(iter_cls.__next__))
        loader_cls = _dataloader.DataLoader
        self._patch(loader_cls, "__iter__", self._iter(loader_cls.__iter__))
        self._undo.append(register_optimizer_step_post_hook(self._stepped).remove)

    def _stepped(self, *_: Any) -> None:
        """An optimizer stepped: the loader whose batch it learned from is a training one."""
        self._steps += 1
        if self._last is not None:
            self._last.steps += 1

    def stop(self) -> None:
        """Remove every patch (a forked worker leaves them: they are how it reports)."""
        if os.getpid() != self._pid:
            return
        while self._undo:
            self._undo.pop()()
        close_schedstat()
        if self in _RUNNING:
            _RUNNING.remove(self)

    def _patch(self, owner: Any, attr: str, replacement: Any) -> None:
        self._undo.append(patch(owner, attr, replacement))

    # ---- the wrappers -------------------------------------------------------------------
    def _fetch(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self.clock
        probe = self

        def fetch(fetcher: Any, index: Any) -> Any:
            slot = _slot
            loader = probe._current if slot is None else None
            if slot is None and loader is None:  # not a batch of a loader we follow
                return fn(fetcher, index)
            collate = fetcher.collate_fn
            spent = [0.0, 1]  # collate seconds, samples (those it was given)

            def timed_collate(data: Any) -> Any:
                if fetcher.auto_collation:
                    spent[1] = len(data)
                t = clock()
                try:
                    return collate(data)
                finally:
                    spent[0] += clock() - t
            fetcher.collate_fn = timed_collate
            # the CPU and run-queue readings inside the timed interval: what they measure is
            # part of it (CPU + run-queue wait <= the interval, for the thread)
            t0 = clock()
            c0 = time.process_time() if slot is None else 0.0
            r0 = run_delay()
            tc0 = time.thread_time()
            ok = False
            try:
                out = fn(fetcher, index)
                ok = True
                return out
            finally:
                fetcher.collate_fn = collate
                tc = time.thread_time() - tc0
                r1 = run_delay() if r0 is not None else None
                c1 = time.process_time() if slot is None else 0.0
                t1 = clock()
                n = spent[1]
                if slot is not None:
                    v, base = _view, slot * _FIELDS
                    if not v[base + _T_FIRST]:
                        v[base + _T_FIRST] = t0
                    v[base + _FETCH] += t1 - t0 - spent[0]
                    v[base + _COLLATE] += spent[0]
                    v[base + _BATCHES] += ok
                    v[base + _SAMPLES] += n if ok else 0
                    v[base + _CPU] = time.process_time()
                    v[base + _TCPU] += tc
                    if r0 is None or r1 is None:
                        v[base + _NO_RUNQ] += 1
                    else:
                        v[base + _RUNQ] += r1 - r0
                else:
                    assert loader is not None
                    loader.fetch_s += t1 - t0 - spent[0]
                    loader.collate_s += spent[0]
                    loader.cpu_s += c1 - c0
                    loader.thread_cpu_s += tc
                    if r0 is None or r1 is None:
                        loader.no_run_wait += 1
                    else:
                        loader.run_wait_s += r1 - r0
        fetch.__wrapped__ = fn  # type: ignore[attr-defined]
        return fetch

    def _pin(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def pin_memory(*args: Any, **kwargs: Any) -> Any:
            t0 = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self._pin_s += self.clock() - t0
        pin_memory.__wrapped__ = fn  # type: ignore[attr-defined]
        return pin_memory

    def _worker_start(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def start(process: Any) -> Any:
            global _pending
            if getattr(process, "_target", None) is not _worker_loop:
                return fn(process)
            args = getattr(process, "_args", ())
            loader = self._starting or (self._loaders.get(id(args[1])) if len(args) > 1 else None)
            if loader is None or self._used >= SLOTS:
                self._dropped += loader is not None
                return fn(process)
            slot = self._used
            self._used += 1
            base = slot * _FIELDS
            v = self._view
            v[base + _USED] = 1.0
            v[base + _LOADER] = loader.index
            v[base + _WORKER] = args[10] if len(args) > 10 else -1
            v[base + _EPOCH] = len(loader.starts)
            _pending = slot
            try:
                return fn(process)
            finally:
                _pending = None
        start.__wrapped__ = fn  # type: ignore[attr-defined]
        return start

    def _loader(self, dataset: Any) -> _Loader:
        loader = self._loaders.get(id(dataset))
        if loader is None:
            loader = self._loaders[id(dataset)] = _Loader(len(self._loaders),
                                                          _name(type(dataset)))
        return loader

    def _iter(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def __iter__(dl: Any) -> Any:
            loader = self._loader(dl.dataset)
            t0 = self.clock()
            if not loader.starts:
                loader.begin(t0)
            loader.starts.append(t0)
            loader.first_pending = True
            loader.num_workers = dl.num_workers
            self._starting = loader
            try:
                return fn(dl)
            finally:
                self._starting = None
                loader.iter_s = self.clock() - t0  # waited too (workers start here)
                loader.wait_s += loader.iter_s
        __iter__.__wrapped__ = fn  # type: ignore[attr-defined]
        return __iter__

    def _next(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self.clock

        def __next__(it: Any) -> Any:
            loader = self._loader(it._dataset)
            workers = it._num_workers
            if loader.asked == 0 and loader.batches == 0:
                loader.collate = _name(it._collate_fn)
                loader.num_workers = workers
                loader.prefetch_factor = getattr(it, "_prefetch_factor", None)
                loader.persistent_workers = bool(it._persistent_workers)
                loader.pin_memory = bool(it._pin_memory)
            if not loader.starts:  # an iterator made without DataLoader.__iter__
                loader.starts.append(clock())
                loader.begin(loader.starts[0])
                loader.first_pending = True
            if workers:
                loader.asked += 1
                loader.in_flight += getattr(it, "_tasks_outstanding", 0)
                try:
                    loader.ready += it._data_queue.qsize()
                except (AttributeError, NotImplementedError):
                    pass
            outer, self._current = self._current, loader
            t0 = clock()
            got = False
            try:
                batch = fn(it)
                got = True
                return batch
            finally:
                self._current = outer
                t1 = clock()
                loader.wait_s += t1 - t0
                loader.last = t1
                loader.end(t1)
                if got:
                    loader.batches += 1
                    self._last = loader
                    if torch.is_grad_enabled():
                        loader.training = True
                    if loader.first_pending:
                        loader.first_pending = False
                        loader.first_wait_s += loader.iter_s + t1 - t0
                        loader.iter_s = 0.0
        __next__.__wrapped__ = fn  # type: ignore[attr-defined]
        return __next__

    # ---- the result ----------------------------------------------------------------------
    def _workers(self) -> tuple[dict[int, list[tuple[DataWorker, float]]], int]:
        """loader index -> its workers and each one's first fetch time (0: none); and how
        many workers were not forked (their slot is empty)."""
        out: dict[int, list[tuple[DataWorker, float]]] = {}
        unseen = 0
        v = self._view
        if v is None:  # never started
            return out, unseen
        for slot in range(self._used):
            b = slot * _FIELDS
            if not v[b + _USED]:
                continue
            first = v[b + _T_FIRST]
            fork = v[b + _T_FORK]
            if not fork:  # not forked (spawn, forkserver): it never took its slot
                unseen += 1
                continue
            w = DataWorker(worker=int(v[b + _WORKER]), epoch=int(v[b + _EPOCH]),
                           batches=int(v[b + _BATCHES]), samples=int(v[b + _SAMPLES]),
                           fetch_s=v[b + _FETCH], collate_s=v[b + _COLLATE], cpu_s=v[b + _CPU],
                           thread_cpu_s=v[b + _TCPU],
                           run_wait_s=None if v[b + _NO_RUNQ] else v[b + _RUNQ],
                           startup_s=first - fork if first and fork else None)
            out.setdefault(int(v[b + _LOADER]), []).append((w, first))
        return out, unseen

    def result(self, *, h2d_s: float = 0.0, cuda: bool = False,
               cores: int | None = None) -> DataLoading | None:
        """The loaders followed so far (None when no DataLoader gave a batch). The machine's
        load is the larger 1-minute load average of the probe's start and now; ``cores``
        (default: the CPUs this process may use) the cores it is read against."""
        workers, unseen = self._workers()
        machine = read_machine()
        loads = [x for x in (self._load0, machine.loadavg[0] if machine.loadavg else None)
                 if x is not None]
        loaders = []
        for lo in self._loaders.values():
            if not lo.batches:
                continue
            mine = workers.get(lo.index, [])
            loop_cpu, loop_wait = lo.loop()
            stats = LoaderStats(
                dataset=lo.dataset, collate=lo.collate,
                # the loaders an optimizer stepped after; with no step seen (an optimizer of
                # the script's own), those that gave batches with gradients on
                training=lo.steps > 0 if self._steps else lo.training,
                num_workers=lo.num_workers, prefetch_factor=lo.prefetch_factor,
                persistent_workers=lo.persistent_workers, pin_memory=lo.pin_memory,
                epochs=len(lo.starts), batches=lo.batches, wait_s=lo.wait_s,
                first_wait_s=lo.first_wait_s,
                fetch_s=lo.fetch_s + sum(w.fetch_s for w, _ in mine),
                collate_s=lo.collate_s + sum(w.collate_s for w, _ in mine),
                cpu_s=lo.cpu_s + sum(w.cpu_s for w, _ in mine),
                thread_cpu_s=lo.thread_cpu_s + sum(w.thread_cpu_s or 0.0 for w, _ in mine),
                run_wait_s=_run_wait(lo, [w for w, _ in mine]),
                loop_cpu_s=loop_cpu, loop_run_wait_s=loop_wait,
                startup_s=_startup(lo.starts, mine) if mine else None,
                ready_mean=lo.ready / lo.asked if lo.asked else None,
                in_flight_mean=lo.in_flight / lo.asked if lo.asked else None,
                span_s=lo.last - lo.starts[0] if lo.starts else lo.wait_s,
                workers=[w for w, _ in mine])
            loaders.append(stats)
        if not loaders:
            return None
        notes = []
        if unseen:
            notes.append(f"{unseen} worker process(es) started with spawn/forkserver: "
                         "their fetch and collate times are not seen (fork only)")
        if self._dropped:
            notes.append(f"{self._dropped} worker start(s) after the first {SLOTS} not timed")
        return DataLoading(loaders=loaders,
                           findings=findings(loaders, h2d_s=h2d_s, cuda=cuda,
                                             cores=cores or machine.cpus_available
                                             or os.cpu_count() or 1,
                                             load=max(loads) if loads else None),
                           pin_s=self._pin_s or None, notes=notes)


def _run_wait(lo: _Loader, workers: list[DataWorker]) -> float | None:
    """The run-queue wait of every fetch of the loader (main process and workers); None when
    any fetch's could not be read."""
    if lo.no_run_wait or any(w.run_wait_s is None for w in workers):
        return None
    return lo.run_wait_s + sum(w.run_wait_s or 0.0 for w in workers)


@contextlib.contextmanager
def probing() -> Iterator[LoaderProbe | None]:
    """A probe for the block; None when one runs already (a watched script that calls
    ``layerscope.train``: the watch's probe sees the loaders)."""
    if _RUNNING:
        yield None
        return
    probe = LoaderProbe()
    with probe:
        yield probe


def _startup(starts: list[float], workers: list[tuple[DataWorker, float]]) -> float:
    """The main process's wait on worker start-up: per pass that started workers, from its
    iter() to the first fetch of any of them."""
    total = 0.0
    by_epoch: dict[int, float] = {}
    for w, first in workers:
        if first:
            by_epoch[w.epoch] = min(by_epoch.get(w.epoch, first), first)
    for epoch, first in by_epoch.items():
        if 1 <= epoch <= len(starts):
            total += max(first - starts[epoch - 1], 0.0)
    return total
