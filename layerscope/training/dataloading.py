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

``DataLoading`` (core.records.dataloading) holds the figures; ``findings`` turns them into the
verdict and the knob. The probe's own cost is two clock reads and a few additions per fetch and
per ``next()``.
"""
from __future__ import annotations

import contextlib
import math
import mmap
import multiprocessing.process
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import _utils
from torch.utils.data import dataloader as _dataloader
from torch.utils.data._utils import fetch as _fetch
from torch.utils.data._utils.worker import _worker_loop

from layerscope.core.records.dataloading import (
    DataFinding,
    DataLoading,
    DataWorker,
    LoaderStats,
)

# one slot of float64s per worker process started while a probe runs
(_USED, _LOADER, _WORKER, _EPOCH, _FETCH, _COLLATE, _BATCHES, _SAMPLES, _CPU, _T_FORK, _T_FIRST,
 _PID) = range(12)
_FIELDS = 12
SLOTS = 1024  # worker starts timed per probe (a note says when more started)
DATA_SHARE = 0.1  # the main process waiting this share of the loop for data is worth a finding
STARTUP_SHARE = 0.2  # start-up this share of the data wait is worth persistent_workers
IO_CPU = 0.5  # fetch+collate using less CPU than this share of their time: waiting (I/O)
PIN_SHARE = 0.05  # host-to-device copies this share of the loop without pinning: pin_memory

_RUNNING: list[LoaderProbe] = []
_pending: int | None = None  # the slot of the worker being started (read in the child)
_slot: int | None = None  # this process's slot: a worker forked while a probe ran
_view: Any = None  # the slots as float64s (shared with the forked workers)


def _after_fork() -> None:
    """In a forked child: a DataLoader worker started by the probe takes its slot."""
    global _slot
    _slot = _pending
    if _slot is not None and _view is not None:
        base = _slot * _FIELDS
        _view[base + _T_FORK] = time.perf_counter()
        _view[base + _PID] = os.getpid()


os.register_at_fork(after_in_child=_after_fork)


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
    training: bool = False
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
    ready: int = 0
    in_flight: int = 0
    asked: int = 0  # next() calls on a multi-process iterator
    last: float = 0.0  # the end of its last next()


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

    def stop(self) -> None:
        """Remove every patch (a forked worker leaves them: they are how it reports)."""
        if os.getpid() != self._pid:
            return
        while self._undo:
            self._undo.pop()()
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
            c0 = time.process_time() if slot is None else 0.0
            t0 = clock()
            ok = False
            try:
                out = fn(fetcher, index)
                ok = True
                return out
            finally:
                fetcher.collate_fn = collate
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
                else:
                    assert loader is not None
                    loader.fetch_s += t1 - t0 - spent[0]
                    loader.collate_s += spent[0]
                    loader.cpu_s += time.process_time() - c0
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
                if got:
                    loader.batches += 1
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
                           startup_s=first - fork if first and fork else None)
            out.setdefault(int(v[b + _LOADER]), []).append((w, first))
        return out, unseen

    def result(self, *, h2d_s: float = 0.0, cuda: bool = False,
               cores: int | None = None) -> DataLoading | None:
        """The loaders followed so far (None when no DataLoader gave a batch)."""
        workers, unseen = self._workers()
        loaders = []
        for lo in self._loaders.values():
            if not lo.batches:
                continue
            mine = workers.get(lo.index, [])
            stats = LoaderStats(
                dataset=lo.dataset, collate=lo.collate, training=lo.training,
                num_workers=lo.num_workers, prefetch_factor=lo.prefetch_factor,
                persistent_workers=lo.persistent_workers, pin_memory=lo.pin_memory,
                epochs=len(lo.starts), batches=lo.batches, wait_s=lo.wait_s,
                first_wait_s=lo.first_wait_s,
                fetch_s=lo.fetch_s + sum(w.fetch_s for w, _ in mine),
                collate_s=lo.collate_s + sum(w.collate_s for w, _ in mine),
                cpu_s=lo.cpu_s + sum(w.cpu_s for w, _ in mine),
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
                                             cores=cores or os.cpu_count() or 1),
                           pin_s=self._pin_s or None, notes=notes)


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


def _cap(n: float, limit: int) -> int:
    return max(1, min(int(math.ceil(n)), limit))


def findings(loaders: list[LoaderStats], *, h2d_s: float = 0.0, cuda: bool = False,
             cores: int = 1) -> list[DataFinding]:
    """What holds the training loaders back, largest first, each with its knob and figures;
    "fine" when the main process hardly waits. Reads only the figures (table-tested)."""
    out: list[tuple[float, DataFinding]] = []
    chosen = [lo for lo in loaders if lo["training"]] or loaders
    for lo in chosen:
        before = len(out)
        span = lo["span_s"] or lo["wait_s"] or 1e-12
        batches = max(lo["batches"], 1)
        wait, first = lo["wait_s"], lo["first_wait_s"]
        work = lo["fetch_s"] + lo["collate_s"]
        per_batch = work / batches
        compute = max(span - wait, 0.0) / batches  # the loop's own time per batch
        cpu_share = lo["cpu_s"] / work if work > 0 else 1.0
        io = cpu_share < IO_CPU
        kind = "io_bound" if io else "cpu_bound"
        need = per_batch / compute if compute > 0 else float("inf")
        limit = 4 * cores if io else cores
        what = (f"mostly waiting, not computing (CPU {cpu_share:.0%} of it: I/O or sleeps)"
                if io else f"CPU-bound transforms (CPU {cpu_share:.0%} of it)")
        figs = {"wait_s": round(wait, 6), "fetch_s": round(lo["fetch_s"], 6),
                "collate_s": round(lo["collate_s"], 6), "span_s": round(span, 6),
                "data_share": round(wait / span, 4), "cpu_share": round(cpu_share, 4),
                "work_per_batch_s": round(per_batch, 6), "compute_per_batch_s": round(compute, 6)}
        name = lo["dataset"]
        if wait / span < DATA_SHARE:
            out.append((0.0, DataFinding(
                kind="fine", figures=figs,
                message=f"{name}: data loading keeps up: the loop waited {wait:.2f} s of "
                        f"{span:.2f} s ({wait / span:.0%}) for batches")))
        elif lo["num_workers"] == 0:
            n = _cap(need, limit)
            out.append((wait, DataFinding(
                kind=kind, knob="num_workers", value=n, figures=figs,
                message=f"{name}: the main process loads every batch itself (num_workers=0): "
                        f"the dataset's fetch took {lo['fetch_s']:.2f} s and collate "
                        f"{lo['collate_s']:.2f} s ({per_batch * 1e3:.1f} ms per batch) of the "
                        f"{wait:.2f} s it waited for data "
                        f"({wait / span:.0%} of the loop), {what}: set num_workers={n}")))
        else:
            startup = lo.get("startup_s") or 0.0
            if (not lo["persistent_workers"] and lo["epochs"] >= 2
                    and startup >= STARTUP_SHARE * wait):
                out.append((startup, DataFinding(
                    kind="worker_startup", knob="persistent_workers", value=True,
                    figures={**figs, "startup_s": round(startup, 6), "epochs": lo["epochs"]},
                    message=f"{name}: the main process waited {startup:.2f} s on worker "
                            f"start-up over {lo['epochs']} passes ({startup / wait:.0%} of its "
                            f"data wait): set persistent_workers=True")))
            steady = max(wait - first, 0.0)
            if steady / span >= DATA_SHARE:
                w = lo["num_workers"]
                if need > w and (io or w < cores):
                    n = _cap(need, limit)
                    if n > w:
                        out.append((steady, DataFinding(
                            kind="too_few_workers", knob="num_workers", value=n, figures=figs,
                            message=f"{name}: {w} worker(s) make a batch in {per_batch:.3f} s "
                                    f"each, the loop uses one every {compute:.3f} s, {what}: "
                                    f"set num_workers={n}")))
                    else:
                        out.append((steady, DataFinding(
                            kind=kind, figures=figs,
                            message=f"{name}: {w} workers on {cores} cores cannot keep up, "
                                    f"{what}: make the dataset's transforms cheaper")))
                elif need > w:
                    out.append((steady, DataFinding(
                        kind="cpu_bound", figures=figs,
                        message=f"{name}: {w} workers on {cores} cores make a batch in "
                                f"{per_batch:.3f} s each and cannot keep up, {what}: make the "
                                f"dataset's transforms cheaper (or move them to the GPU)")))
                else:
                    pf = lo.get("prefetch_factor") or 2
                    out.append((steady, DataFinding(
                        kind="prefetch", knob="prefetch_factor", value=2 * pf, figures=figs,
                        message=f"{name}: the workers keep up on average but the loop still "
                                f"waited {steady:.2f} s ({steady / span:.0%}) with "
                                f"{lo.get('ready_mean') or 0:.1f} batches ready on average: "
                                f"set prefetch_factor={2 * pf}")))
        if len(out) == before:  # waits, but on each pass's first batch only
            out.append((wait, DataFinding(
                kind="first_batches", figures=figs,
                message=f"{name}: the loop waited {wait:.2f} s ({wait / span:.0%} of it), "
                        f"{first:.2f} s of it for each pass's first batch (worker start-up "
                        f"{lo.get('startup_s') or 0:.2f} s): a cost per pass, which longer "
                        "passes spread thinner")))
        if cuda and not lo["pin_memory"] and h2d_s / span >= PIN_SHARE:
            out.append((h2d_s, DataFinding(
                kind="no_pinning", knob="pin_memory", value=True,
                figures={**figs, "h2d_s": round(h2d_s, 6)},
                message=f"{name}: host-to-device copies took {h2d_s:.2f} s ({h2d_s / span:.0%} "
                        "of the loop) from pageable memory: set pin_memory=True (and "
                        ".to(device, non_blocking=True))")))
    out.sort(key=lambda p: -p[0])
    return [f for _, f in out]
