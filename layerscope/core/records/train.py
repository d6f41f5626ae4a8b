"""The result of ``layerscope train`` and of a watched script (``layerscope run``,
``layerscope.watch()``): kind ``train``, as typed records; their JSON schema is generated from
these fields (layerscope/schema/generate.py). The training loop (training/loop.py) and the
watcher (training/watch.py) build it.

The sections were dicts up to 0.1 and are written the same way: each section record reads like
the dict it replaced (``report.epochs[-1]["val_top1"]``), and a report built by the loop may
hold the dicts themselves (they are written as they are).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import DictRecord, ResultDocument, omit_none, timing_bounds
from layerscope.core.records import ENVIRONMENT
from layerscope.core.records.dataloading import DataLoading
from layerscope.core.records.efficiency import Efficiency
from layerscope.core.records.kernels import KernelBreakdown
from layerscope.core.records.memory import PostMortem
from layerscope.core.records.phases import PhaseBreakdown
from layerscope.core.report import SCHEMA_VERSION

_NONNEG = {"minimum": 0}


@dataclass(eq=False, kw_only=True)
class TrainEpoch(DictRecord):
    """One epoch's metrics row; the validation figures when the epoch was evaluated."""

    epoch: int
    step: int
    train_loss: float
    train_top1: float
    lr: float
    val_loss: float | None = field(default=None, metadata=omit_none())
    val_top1: float | None = field(default=None, metadata=omit_none())
    val_top5: float | None = field(default=None, metadata=omit_none())
    epoch_seconds: float


@dataclass(eq=False, kw_only=True)
class WatchedScript(DictRecord):
    """The watched script: its name and the arguments it was given; under ``layerscope run``
    also the script's path (or module) as given and the working directory it started in, so
    ``advise --verify`` can run it again."""

    name: str
    argv: list[str]
    path: str | None = field(default=None, metadata=omit_none(
        optional=True, description="layerscope run: the script's path as given (or the module "
                                   "of -m)"))
    module: bool | None = field(default=None, metadata=omit_none(
        optional=True, description="layerscope run: path names a module (-m)"))
    cwd: str | None = field(default=None, metadata=omit_none(
        optional=True, description="layerscope run: the working directory it started in"))


@dataclass(eq=False, kw_only=True)
class LayerSeconds(DictRecord):
    """``--layers``: one module's forward seconds (inclusive of the modules inside it), own
    forward seconds (inclusive minus the nearest modules it called) and backward seconds (the
    autograd nodes its own code made), summed over the measured steps."""

    name: str
    type: str
    calls: int
    forward_s: float = field(metadata=timing_bounds())
    forward_s_per_step: float | None = field(default=None, metadata=omit_none(
        **timing_bounds(), optional=True))
    forward_samples_s: list[float] | None = field(default=None, metadata=omit_none(
        **timing_bounds(), optional=True,
        description="its forward seconds in each measured step (at most 100, "
                                   "evenly spaced over the steps), for layerscope diff"))
    own_s: float | None = field(default=None, metadata=omit_none(optional=True))
    backward_s: float | None = field(default=None, metadata=omit_none(optional=True))


@dataclass(eq=False, kw_only=True)
class TransientCost(DictRecord):
    """A one-time cost kept out of the measured steps (their phases, step times, MFU and the
    advice read from them) and shown apart: a step in which torch._dynamo compiled, a first
    step far above the others, the profiler's start or stop (``run --kernels``)."""

    kind: str = field(metadata={
        "schema": {"enum": ["compile", "first step", "profiler start", "profiler stop"]},
        "description": "compile: a step in which torch._dynamo compiled; first step: a first "
                       "step far above the others (training.phases.transient_steps); profiler "
                       "start / stop: torch.profiler's start, and its stop with the processing "
                       "of its events, which no step holds"})
    step: int | None = field(default=None, metadata=omit_none(
        minimum=1, description="the step (from 1, warm-up included) it is, or (profiler) the "
                               "step after which it ran"))
    seconds: float = field(metadata={**_NONNEG, "description": "the wall time left out"})
    compile_s: float | None = field(default=None, metadata=omit_none(
        minimum=0, description="compile: the seconds torch._dynamo counted compiling in it"))
    warmup: bool | None = field(default=None, metadata=omit_none(
        description="a warm-up step (left out as such)"))


@dataclass(eq=False, kw_only=True)
class PhaseMemory(DictRecord):
    """``--memory``: the peak resident memory (and CUDA memory allocated) seen at the end of a
    phase."""

    peak_rss_bytes: int | None = field(default=None, metadata=omit_none(optional=True))
    peak_cuda_bytes: int | None = field(default=None, metadata=omit_none(optional=True))


@dataclass(eq=False, kw_only=True)
class RankEntry(DictRecord):
    """One rank of a distributed run (training.ranks.rank_entry): seconds per step by phase,
    and its samples and measured wall time (for the job's throughput)."""

    rank: int
    steps: int | None = field(default=None, metadata=omit_none(optional=True))
    step_s: float = field(metadata=timing_bounds())
    samples: int | None = field(default=None, metadata=omit_none(optional=True))
    wall_s: float | None = field(default=None, metadata=omit_none(optional=True, minimum=0))
    throughput_per_s: float | None = field(default=None, metadata={"optional": True})
    # its properties are written from core.phases.STEP_PHASES (schema/generate.py)
    phases: dict[str, float]
    mfu: float | None = field(default=None, metadata=omit_none(
        optional=True, minimum=0, maximum=1,
        description="this rank's MFU (its model FLOPs per step over its median step, against "
                    "one device's measured peak); absent when refused or not counted"))


@dataclass(eq=False, kw_only=True)
class Bucket(DictRecord):
    """One gradient bucket of the last step: its collective, its bytes and its median time."""

    op: str | None = field(default=None, metadata=omit_none(optional=True))
    bytes: int
    median_s: float | None = field(default=None, metadata={"optional": True})


@dataclass(eq=False, kw_only=True)
class Communication(DictRecord):
    """The gradient communication per step (training.comm.CommRecorder.summary); see
    training.comm.communication for each figure."""

    strategy: str | None = field(default=None, metadata={"optional": True})
    world_size: int | None = field(default=None, metadata={"optional": True, "minimum": 1})
    steps: int | None = field(default=None, metadata={"optional": True})
    bytes_per_step: int | None = field(default=None, metadata={"optional": True})
    gradient_bytes: int | None = field(default=None, metadata={"optional": True})
    theory_bytes_per_step: float | None = field(default=None, metadata={
        "optional": True, **_NONNEG})
    wire_bytes_per_step: float | None = field(default=None, metadata={"optional": True})
    bucket_cap_mb: float | None = field(default=None, metadata={"optional": True})
    communication_s: float | None = field(default=None, metadata={"optional": True})
    exposed_s: float | None = field(default=None, metadata={"optional": True})
    bus_bandwidth_bytes_per_s: float | None = field(default=None, metadata={"optional": True})
    buckets: list[Bucket] = field(default_factory=list, metadata={"optional": True})
    hints: list[str] = field(default_factory=list, metadata={"optional": True})


@dataclass(eq=False, kw_only=True)
class Straggler(DictRecord):
    """The slowest rank (the most own work per step: step minus wait and exposed
    communication), its excess over the median and the phase it comes from
    (training.ranks.straggler)."""

    rank: int
    step_s: float | None = field(default=None, metadata={"optional": True, **_NONNEG})
    busy_s: float | None = field(default=None, metadata={"optional": True, **_NONNEG})
    median_busy_s: float | None = field(default=None, metadata={"optional": True, **_NONNEG})
    excess_s: float
    excess_pct: float
    phase: str
    phase_excess_s: float | None = field(default=None, metadata={"optional": True})


WHAT_IF_KEYS = ("num_workers", "pin_memory", "threads")  # layerscope run's what-if settings


@dataclass(frozen=True)
class RunConfig:
    """What a train or run result's ``config`` says about how the run ran, typed and read in
    one place (the saved ``config`` stays the dict it always was: ``TrainConfig``'s fields for
    a recipe's run, the watch's settings for ``layerscope run``). A key the result does not
    hold reads as "not set": None, False, or the CPU for ``device``; ``recorded`` names the
    keys it holds (a watched script records ``num_workers`` only when a what-if set it).
    Values other than the switches are kept as saved: an advice's command passes each on as
    one argument."""

    device: str = "cpu"
    num_workers: Any = None
    pin_memory: bool = False
    amp: bool = False
    channels_last: bool = False
    compile: bool = False
    synthetic: bool = False
    batch_size: Any = None
    steps: Any = None
    seed: Any = None
    threads: Any = None
    data_dir: Any = None
    # layerscope run's what-if settings the run was made with ({} when none)
    what_if: dict[str, Any] = field(default_factory=dict)
    recorded: frozenset[str] = frozenset()

    @classmethod
    def of(cls, config: Any) -> RunConfig:
        """The typed view of a result's ``config`` (a dict; anything else: nothing set)."""
        c: dict[str, Any] = config if isinstance(config, dict) else {}
        what_if = {k: c[k] for k in WHAT_IF_KEYS if c.get(k) is not None} \
            if c.get("what_if") else {}
        return cls(device=c.get("device") or "cpu", num_workers=c.get("num_workers"),
                   pin_memory=bool(c.get("pin_memory")), amp=bool(c.get("amp")),
                   channels_last=bool(c.get("channels_last")), compile=bool(c.get("compile")),
                   synthetic=bool(c.get("synthetic")), batch_size=c.get("batch_size"),
                   steps=c.get("steps"), seed=c.get("seed"), threads=c.get("threads"),
                   data_dir=c.get("data_dir"), what_if=what_if, recorded=frozenset(c))


@dataclass(repr=False)  # print() shows its tables (core.display); repr() is one line
class TrainReport(ResultDocument):
    """One training run: per-epoch metrics and the phase breakdown."""

    recipe: str
    config: dict[str, Any]
    run_dir: str
    epochs: list[TrainEpoch]
    breakdown: PhaseBreakdown  # the run's (warm-up excluded)
    epoch_breakdown: list[PhaseBreakdown]
    step_seconds: list[float] = field(metadata=timing_bounds(
        positive=True, description="wall time of every measured step (never 0 s)"))
    cpu_utilisation: float | None
    peak_rss_bytes: int
    peak_cuda_bytes: int | None
    notes: list[str] = field(default_factory=list)
    step_phases: dict[str, list[float]] | None = field(default=None, metadata=omit_none(
        **timing_bounds(signed=True),
        description="each phase's seconds in every measured step, in step order (at most "
                    "core.stats.SAMPLES_KEPT, evenly spaced): what layerscope diff ranks phase "
                    "by phase; absent in results saved before it"))
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    ops: dict[str, Any] | None = field(default=None, metadata={
        "description": "--profile torch: the operator table (OpTable.to_dict()), per step"})
    kernels: KernelBreakdown | None = field(default=None, metadata=omit_none(
        description="train --kernels: three profiled training steps' CPU ops, device kernels "
                    "and launch calls per module and phase, and per step"))
    # a watched script (layerscope run, layerscope.watch()): what ran, which rank of how many,
    # per-layer forward time (--layers) and peak memory per phase (--memory)
    script: WatchedScript | None = field(default=None, metadata=omit_none(
        description="the watched script (layerscope run, layerscope.watch()): its name and the "
                    "arguments it was given"))
    rank: int | None = field(default=None, metadata=omit_none(
        minimum=0, description="torchrun: this process' rank"))
    world_size: int | None = field(default=None, metadata=omit_none(
        minimum=1, description="torchrun: the number of ranks"))
    layers: list[LayerSeconds] | None = field(default=None, metadata=omit_none(
        description="--layers: per module, forward seconds (inclusive of the modules inside "
                    "it), own forward seconds (inclusive minus the nearest modules it called) and "
                    "backward seconds (the autograd nodes its own code made), summed over the "
                    "measured steps (warm-up left out, as in the phases)"))
    phase_memory: dict[str, PhaseMemory] | None = field(default=None, metadata=omit_none(
        description="--memory: peak resident memory (and CUDA memory allocated) seen at the end "
                    "of each phase"))
    # several processes (torchrun/srun): one entry per rank (ranks.rank_entry), the gradient
    # communication (CommRecorder.summary) and the slowest rank (ranks.straggler)
    ranks: list[RankEntry] | None = field(default=None, metadata=omit_none(
        description="distributed runs: one entry per rank (training.ranks.rank_entry); the "
                    "additive phases sum to step_s, communication overlaps backward"))
    communication: Communication | None = field(default=None, metadata=omit_none(
        description="the gradient communication per step (training.comm.CommRecorder.summary)"))
    straggler: Straggler | None = field(default=None, metadata=omit_none(
        description="the slowest rank (the most own work per step: step minus wait and exposed "
                    "communication), its excess over the median and the phase it comes from "
                    "(training.ranks.straggler); absent for one rank"))
    # a watched script: the process group it formed (rank, world_size, backend), if any
    process_group: dict[str, Any] | None = field(default=None, metadata=omit_none())
    # several processes: every process's samples over the job's measured time
    # (ranks.job_throughput)
    job: dict[str, Any] | None = field(default=None, metadata=omit_none())
    data_loading: DataLoading | None = field(default=None, metadata=omit_none(
        description="inside the data loaders: per DataLoader, what the main process waited "
                    "for batches and the work behind them (dataset fetch, collate, pinning) in "
                    "its workers, and the findings with the knob that removes each "
                    "(training.dataloading); absent in results saved before it"))
    efficiency: Efficiency | None = field(default=None, metadata=omit_none(
        description="MFU and HFU of the measured steps against the measured peak (and a GPU's "
                    "datasheet dense peak); absent in results saved before it"))
    transients: list[TransientCost] | None = field(default=None, metadata=omit_none(
        description="one-time costs kept out of the measured steps: compilation steps, a first "
                    "step far above the others, the profiler's start and stop; absent when "
                    "there was none, and in results saved before it"))
    post_mortem: PostMortem | None = field(default=None, metadata=omit_none(
        description="--memory-limit: the out-of-memory failure the run ended with (the live "
                    "set by module and kind, what asked for more, where); absent otherwise"))
    kind: str = "train"
    schema_version: str = SCHEMA_VERSION

    @property
    def final(self) -> Any:
        """The last epoch's metrics row (None before the first epoch ends)."""
        return self.epochs[-1] if self.epochs else None

    @property
    def run_config(self) -> RunConfig:
        """``config`` read through its typed view (``RunConfig``); the saved dict is unchanged."""
        return RunConfig.of(self.config)

    def __repr__(self) -> str:
        b = self.breakdown
        return (f"TrainReport({self.recipe!r}, steps={b.get('steps')}, "
                f"samples={b.get('samples')}, wall_s={b.get('wall_s', 0.0):.3f})")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainReport:
        report = super().from_dict(d)
        if report.ops:  # the view builds an OpTable from it: a malformed one is a
            # malformed saved result (one line on load), not a TypeError while rendering
            from layerscope.core.optable import OpTable

            if not isinstance(report.ops, dict):
                raise ValueError(f"ops must be an object, got {type(report.ops).__name__}")
            OpTable.from_dict(report.ops)
        return report
