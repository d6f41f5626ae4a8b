"""``advise --verify``'s verdicts, from step times measured in rounds (each round: the baseline,
then every variant, one fresh process each).

1. **The baseline must reproduce the result first.** The re-run baseline's steps (every round so
   far, pooled) are judged against the result's own steps with ``diff``'s rule
   (analysis/diff/verdict.py: the rank test, the drift of the runs' levels, at least a 3%
   change). Within the noise: the machine measures now what it measured then, and the variants
   can be judged. Otherwise the rounds go on, interleaved (A B A B ..., ``ROUNDS`` in all), and
   the check is made again on every round's baseline. A baseline that still does not reproduce
   makes every rule **unverifiable on this machine now**, with both figures and no causal story:
   a machine that measured 62 ms a step then and 177 ms now would credit a change with the
   difference.
2. **A variant against the baseline**: ``diff``'s rule on the pooled samples of the rounds; with
   several rounds the variant's median must also lie outside the range of the baseline rounds'
   own medians (the drift between rounds, measured directly). Faster beyond the noise is
   confirmed, slower beyond it refuted, else within the noise.

The samples are the means of consecutive blocks of steps (up to ``BLOCKS`` a run, at least two
steps each; a run of fewer than 6 steps gives its steps), the method of batch means: loader
workers deliver batches in bursts (one step waits for a batch, the next finds its batch ready),
and the steps themselves would read that rhythm as noise, their wander between blocks as drift.

Pure functions of the step times: tests feed them samples.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from layerscope.analysis.diff.measures import of_samples
from layerscope.analysis.diff.verdict import judge

ROUNDS = 3  # rounds in all when the first round's baseline did not reproduce the result
BLOCKS = 5  # a run's steps stand for this many samples (their blocks' means)
VERDICTS = {"faster": "confirmed", "slower": "refuted", "within-noise": "within-noise"}


def block_means(steps: Sequence[float], blocks: int = BLOCKS) -> list[float]:
    """The means of up to ``blocks`` consecutive blocks of at least two steps each; fewer than
    6 steps: the steps themselves."""
    if len(steps) < 2 * 3:
        return list(steps)
    k = min(blocks, len(steps) // 2)
    cuts = [round(i * len(steps) / k) for i in range(k + 1)]
    return [sum(steps[a:b]) / (b - a) for a, b in zip(cuts, cuts[1:])]


def _pooled(rounds: Sequence[Sequence[float]]) -> list[float]:
    return [x for r in rounds for x in block_means(r)]


def _all(rounds: Sequence[Sequence[float]]) -> list[float]:
    return [x for r in rounds for x in r]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


@dataclass(frozen=True)
class Reproduction:
    """Whether the re-run baseline measured the result's step: the two medians, each round's
    median and the basis of the judgement."""

    reproduced: bool
    result_s: float
    rerun_s: float
    rounds_s: tuple[float, ...]
    basis: str | None

    def figures(self) -> str:
        rounds = (f" (rounds: {', '.join(_ms(r) for r in self.rounds_s)})"
                  if len(self.rounds_s) > 1 else "")
        return (f"the baseline re-ran at {_ms(self.rerun_s)} a step{rounds} where the result "
                f"measured {_ms(self.result_s)}")


def reproduces(result_steps: Sequence[float],
               baseline_rounds: Sequence[Sequence[float]]) -> Reproduction:
    """The re-run baseline (its rounds' steps) against the result's own steps (module rule 1)."""
    v = judge(of_samples("step", "end_to_end", block_means(result_steps)),
              of_samples("step", "end_to_end", _pooled(baseline_rounds)), None)
    return Reproduction(v.verdict == "within-noise", statistics.median(result_steps),
                        statistics.median(_all(baseline_rounds)),
                        tuple(statistics.median(r) for r in baseline_rounds), v.basis)


@dataclass(frozen=True)
class Judged:
    """A variant's verdict, its measured gain (1 - variant / baseline, medians of the pooled
    steps) and the measured figures in words."""

    verdict: str
    gain: float
    measured: str
    beyond: bool
    basis: str | None = None  # diff's: rank test, p10-p90 overlap


def judge_variant(baseline_rounds: Sequence[Sequence[float]],
                  variant_rounds: Sequence[Sequence[float]]) -> Judged:
    """A variant's rounds against the baseline's (module rule 2)."""
    medians = ([statistics.median(block_means(r)) for r in baseline_rounds]
               if len(baseline_rounds) > 1 else [])
    v = judge(of_samples("step", "end_to_end", _pooled(baseline_rounds)),
              of_samples("step", "end_to_end", _pooled(variant_rounds)), None,
              base_medians=medians)
    old_s = statistics.median(_all(baseline_rounds))
    new_s = statistics.median(_all(variant_rounds))
    rounds = f" ({len(variant_rounds)} interleaved rounds)" if len(variant_rounds) > 1 else ""
    return Judged(VERDICTS[v.verdict], 1 - new_s / old_s,
                  f"step {_ms(new_s)} against the baseline's {_ms(old_s)}{rounds}",
                  v.verdict != "within-noise", v.basis)


def unverifiable(check: Reproduction, load_then: float | None, load_now: float | None) -> str:
    """The note of a rule that cannot be verified because the baseline did not reproduce."""
    loads = ""
    if load_then is not None and load_now is not None:
        loads = f"; load {load_then:.1f} then, {load_now:.1f} now"
    return (f"unverifiable on this machine now: {check.figures()}{loads}; the machine does "
            "not measure what it measured then, so no change can be credited with the "
            "difference (run advise --verify again on a quieter machine)")
