"""Inside the data loader (training.dataloading.LoaderProbe): per DataLoader, the seconds its
dataset's fetch, its collate function and pinning took, in the worker processes or the main
process, what the main process waited, and the findings with the knob that removes each; a
section of the ``train`` result (``data_loading``), its JSON schema generated from these fields
(layerscope/schema/generate.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from layerscope.core.document import DictRecord, omit_empty, omit_none

_NONNEG = {"minimum": 0}


@dataclass(eq=False, kw_only=True)
class DataWorker(DictRecord):
    """One DataLoader worker process: the batches it made and where its time went (its own
    clock, summed over its batches)."""

    worker: int = field(metadata={"description": "the loader's worker id"})
    epoch: int = field(metadata={"description": "the pass over the loader that started it "
                                                "(1-based)"})
    batches: int
    samples: int
    fetch_s: float = field(metadata={"description": "the dataset's __getitem__/__getitems__ "
                                                    "(or the iterable's next)", **_NONNEG})
    collate_s: float = field(metadata=_NONNEG)
    cpu_s: float = field(metadata={"description": "the worker process's CPU time", **_NONNEG})
    thread_cpu_s: float | None = field(default=None, metadata=omit_none(
        description="of fetch_s + collate_s: the worker's CPU time in them", **_NONNEG))
    run_wait_s: float | None = field(default=None, metadata=omit_none(
        description="of fetch_s + collate_s: the time it was runnable and waiting for a core "
                    "(run-queue wait, from /proc/thread-self/schedstat); absent where not "
                    "readable", **_NONNEG))
    startup_s: float | None = field(default=None, metadata=omit_none(
        description="from the worker's start (fork) to its first fetch: worker_init_fn "
                    "included"))


@dataclass(eq=False, kw_only=True)
class LoaderStats(DictRecord):
    """One DataLoader (its dataset): its settings, what the main process waited for batches
    (``next()``), and the work behind the batches (in the workers, or in the main process with
    num_workers=0)."""

    dataset: str = field(metadata={"description": "the dataset's class"})
    collate: str = field(metadata={"description": "the collate function's name"})
    training: bool = field(metadata={"description": "an optimizer stepped after its batches "
                                                    "(a training loader, not a validation or "
                                                    "test one); where no torch optimizer "
                                                    "stepped, it gave batches with gradients "
                                                    "on"})
    num_workers: int
    prefetch_factor: int | None = field(default=None, metadata={"optional": True})
    persistent_workers: bool
    pin_memory: bool
    epochs: int = field(metadata={"description": "passes over the loader (iter() calls)"})
    batches: int
    wait_s: float = field(metadata={"description": "the main process's time in iter() and "
                                                   "next()", **_NONNEG})
    first_wait_s: float = field(metadata={
        "description": "of wait_s: the first batch of each pass, iter() included", **_NONNEG})
    span_s: float = field(metadata={"description": "from its first iter() to its last batch: "
                                                   "the loop it fed", **_NONNEG})
    fetch_s: float = field(metadata=_NONNEG)
    collate_s: float = field(metadata=_NONNEG)
    cpu_s: float = field(metadata={"description": "CPU time of the fetch and collate (the "
                                                  "workers' whole CPU time)", **_NONNEG})
    thread_cpu_s: float | None = field(default=None, metadata=omit_none(
        description="of fetch_s + collate_s: the CPU time of the thread that ran each fetch "
                    "and collate, in them (without the process's other threads: cpu_s has "
                    "those in the main process)", **_NONNEG))
    run_wait_s: float | None = field(default=None, metadata=omit_none(
        description="of fetch_s + collate_s: the time the threads that fetched and collated "
                    "were runnable and waiting for a core (run-queue wait, from "
                    "/proc/thread-self/schedstat), in the main process and the workers; absent "
                    "where any fetch's could not be read (not Linux)",
        **_NONNEG))
    loop_cpu_s: float | None = field(default=None, metadata=omit_none(
        description="the CPU time of the thread that ran the loop (the main process's), over "
                    "span_s", **_NONNEG))
    loop_run_wait_s: float | None = field(default=None, metadata=omit_none(
        description="the time the thread that ran the loop was runnable and waiting for a "
                    "core, over span_s (run-queue wait); absent where not readable", **_NONNEG))
    startup_s: float | None = field(default=None, metadata=omit_none(
        description="the main process's wait on worker start-up: from each pass's iter() to "
                    "the first fetch of the workers it started, summed over the passes"))
    ready_mean: float | None = field(default=None, metadata=omit_none(
        description="batches ready in the queue when the main process asked for one (mean)"))
    in_flight_mean: float | None = field(default=None, metadata=omit_none(
        description="batches asked of the workers and not yet taken (mean)"))
    workers: list[DataWorker] = field(default_factory=list, metadata=omit_empty())


@dataclass(eq=False, kw_only=True)
class DataFinding(DictRecord):
    """What holds the data loading back, the knob that removes it and the figures behind it."""

    kind: str = field(metadata={"description": "cpu_bound, io_bound, cpu_oversubscribed, "
                                               "too_few_workers, prefetch, worker_startup, "
                                               "no_pinning, first_batches, fine, cannot_judge"})
    message: str
    knob: str | None = field(default=None, metadata=omit_none(
        description="the DataLoader argument to change (num_workers, prefetch_factor, "
                    "persistent_workers, pin_memory)"))
    value: int | bool | None = field(default=None, metadata=omit_none(
        description="the value suggested for the knob"))
    figures: dict[str, float] = field(default_factory=dict)


@dataclass(eq=False, kw_only=True)
class DataLoading(DictRecord):
    """The data loaders of a run: one entry each, and the findings (the first is the
    verdict)."""

    loaders: list[LoaderStats]
    findings: list[DataFinding] = field(default_factory=list)
    pin_s: float | None = field(default=None, metadata=omit_none(
        description="pin_memory's copies to page-locked memory (all loaders)"))
    notes: list[str] = field(default_factory=list, metadata=omit_empty())
