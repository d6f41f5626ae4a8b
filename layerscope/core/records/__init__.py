"""The measured sections of a result, as typed records (they were dicts up to 0.1; the JSON is
the same). Each reads like the dict it replaced (core.document.DictRecord), and the JSON schema
of each is generated from its fields (layerscope/schema/generate.py)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from layerscope.core.document import DictRecord, omit_none, timing_bounds
from layerscope.core.stats import TimingStats

_COUNT = {"minimum": 0}
# field metadata of a result's ``environment`` (core.environment.environment()): the schema's
# hand-written definition
ENVIRONMENT = {"schema": {"$ref": "#/$defs/environment"}}


@dataclass(frozen=True, eq=False)
class EndToEnd(TimingStats):
    """A profile's end-to-end timing: bare runs, and the instrumented runs beside them."""

    # a whole forward pass timed by a nanosecond clock: never 0 s (a result saying so is
    # damaged, and a diff against it would read "100% faster")
    median_s: float = field(metadata=timing_bounds(positive=True))
    p10_s: float = field(metadata=timing_bounds(positive=True))
    p90_s: float = field(metadata=timing_bounds(positive=True))
    samples_s: list[float] | None = field(default=None, metadata=omit_none(
        **timing_bounds(positive=True),
        description="the bare runs' seconds, in run order (at most SAMPLES_KEPT, evenly spaced "
                    "over the runs when there were more): what layerscope diff ranks; absent "
                    "in results saved before it"))
    throughput_per_s: float | None = field(
        default=None, metadata={"optional": True, "description": "batch / median_s"})
    instrumented: TimingStats | None = field(
        default=None, metadata=omit_none(description="the runs with per-layer timing on"))

    @classmethod
    def of_runs(cls, bare: TimingStats, batch: int, instrumented: TimingStats) -> EndToEnd:
        fields = {f.name: getattr(bare, f.name) for f in dataclasses.fields(TimingStats)}
        return cls(**fields, throughput_per_s=batch / bare.median_s if bare.median_s else None,
                   instrumented=instrumented)


@dataclass(eq=False)
class Achieved(DictRecord):
    """A layer's rates at its median time."""

    gmacs_per_s: float
    gflops_per_s: float
    gbytes_per_s: float

    @classmethod
    def at(cls, macs: int, flops: int, bytes_moved: int, seconds: float) -> Achieved | None:
        """The rates at ``seconds`` per call (None for a layer that took no time)."""
        if seconds <= 0:
            return None
        return cls(gmacs_per_s=macs / seconds / 1e9, gflops_per_s=flops / seconds / 1e9,
                   gbytes_per_s=bytes_moved / seconds / 1e9)


@dataclass(eq=False)
class RooflinePoint(DictRecord):
    """A layer's place under the roof (Williams et al. 2009)."""

    intensity: float = field(metadata={"description": "FLOP per byte moved"})
    bound: str = field(metadata={"schema": {"enum": ["memory", "compute"]}})
    attainable_flops: float = field(metadata={"optional": True,
                                              "description": "min(peak, bandwidth x intensity)"})
    achieved_flops: float = field(metadata={"optional": True})
    pct_of_roof: float | None = field(default=None,
                                      metadata={"description": "achieved / attainable"})


@dataclass(frozen=True, eq=False)
class Ceilings(DictRecord):
    """The machine's measured ceilings: peak FLOP/s (a large matmul) and memory bandwidth (a
    large copy)."""

    device: str = field(metadata={"optional": True})
    dtype: str = field(metadata={"optional": True})
    threads: int | None = field(metadata={"optional": True, **_COUNT})
    peak_flops: float = field(metadata={"description": "FLOP/s"})
    bandwidth: float = field(metadata={"description": "bytes/s"})
    matmul_size: int = field(metadata={"optional": True, **_COUNT})
    copy_bytes: int = field(metadata={"optional": True, **_COUNT})
    measured_at: str | None = field(default=None, metadata=omit_none(
        optional=True, description="when they were measured (UTC, ISO 8601); absent in "
                                   "ceilings cached before it was recorded"))
    loadavg: float | None = field(default=None, metadata=omit_none(
        optional=True,
        description="1-minute load average when they were measured (os.getloadavg)"))
    cpus: int | None = field(default=None, metadata=omit_none(
        optional=True, **_COUNT, description="the CPUs the measuring process could use"))

    _computed = ("ridge",)

    @property
    def ridge(self) -> float:
        """Intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak_flops / self.bandwidth


@dataclass(eq=False)
class AboveRoof(DictRecord):
    """Layers measured faster than their roof allows (achieved above 100% of attainable): the
    ceilings they were placed under look stale (measured on a busier machine), so their "% of
    roof" figures are not to be trusted until the ceilings are measured again."""

    layers: int = field(metadata={**_COUNT, "description": "rows above 100% of their roof"})
    of_layers: int = field(metadata={**_COUNT, "description": "rows placed on the roofline"})
    memory_bound: int = field(metadata={
        **_COUNT, "description": "of the rows above, those under the memory roof: data that "
                                 "stays in the CPU caches also moves faster than the large copy "
                                 "that measured the bandwidth"})
    max_pct_of_roof: float = field(metadata={"description": "the highest achieved / attainable"})
    measured_at: str | None = field(metadata={"description": "when the ceilings were measured"})
    loadavg: float | None = field(metadata={
        "description": "1-minute load average when they were measured"})
    cpus: int | None = field(metadata={**_COUNT, "description": "CPUs usable then"})
    command: str = field(metadata={"description": "the command that measures them again"})


@dataclass(eq=False)
class BackwardTiming(DictRecord):
    """``profile --backward``: the backward pass end to end, instrumented, and how much of it
    the rows explain."""

    end_to_end: TimingStats
    instrumented: TimingStats
    overhead: float | None = field(metadata={"description": "median of instrumented / bare - 1"})
    coverage: float | None = field(metadata={"description": "rows' summed time / wall time"})


@dataclass(eq=False)
class TypeTiming(DictRecord):
    """One layer type's time (``by_type``): the sum of its rows' per-run times."""

    type: str
    layers: int = field(metadata=_COUNT)
    macs: int = field(metadata={"optional": True, **_COUNT})
    time: TimingStats
    share: float | None


@dataclass(eq=False)
class Noise(DictRecord):
    """core.noise.noise_section: spread of the end-to-end samples (profile: bare runs; sweep: its
    noisiest cell; ablate: the baseline's steps; ops: the profiled runs; profile --loop: the
    batches) and the machine at the start; absent in results saved before it."""

    n: int = field(metadata=_COUNT)
    p90_over_p10: float | None
    cv: float | None
    mean_over_median: float | None
    loadavg: list[float] | None = field(metadata={
        "optional": True,
        "description": "1, 5 and 15 minute load averages at the start (os.getloadavg)"})
    cpu_count: int | None = field(metadata={"optional": True, **_COUNT})
    cpus_available: int | None = field(metadata={
        "optional": True, **_COUNT,
        "description": "len(os.sched_getaffinity(0)): the CPUs this process may use"})
    threads: int | None = field(metadata={
        **_COUNT, "description": "torch threads used (the most any cell used, for a sweep)"})
    busy_cpus: int | None = field(metadata={
        "optional": True, **_COUNT, "description": "floor of the 1-minute load average"})
    oversubscribed: bool | None = field(metadata={
        "optional": True, "description": "threads + busy_cpus > cpus_available"})
    rows_mean_far_above_median: int | None = field(metadata={"optional": True, **_COUNT})
    warnings: list[str] = field(metadata={"description": "one line per problem: cause and remedy"})
