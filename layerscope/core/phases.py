"""The phases of a training step, declared once.

Every consumer reads ``STEP_PHASES``: the phase timer and its totals (``training.phases``), the
watch of anyone's script (``training.watch``), the per-rank table of a data-parallel run
(``training.ranks``), the views' labels, colours and order, and the JSON schema's description
of a breakdown's seconds. A new phase is one line here.

The phases are additive: in a step they sum to the step's wall time (``other`` is the rest).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str  # the key in a breakdown's ``seconds``
    label: str  # what tables and charts call it
    color: str  # its colour in stacked charts
    meaning: str  # one line: what time it holds (the schema's description)
    device: bool = False  # on CUDA, bounded by CUDA events on the stream (else host time)
    when_spent: bool = False  # in a breakdown only when some step spent time in it
    distributed: bool = False  # only in the per-rank breakdown of a data-parallel run


STEP_PHASES = (
    Phase("data", "Data loading", "#4e79a7", "waiting for the next training batch"),
    Phase("h2d", "Host-to-device", "#76b7b2", "copying the batch to the device", device=True),
    Phase("forward", "Forward", "#59a14f", "the model's forward pass", device=True),
    Phase("loss", "Loss", "#edc948", "a loss module's forward", device=True),
    Phase("backward", "Backward", "#e15759", "the backward pass (its compute, in a "
          "data-parallel run)", device=True),
    Phase("exposed_communication", "Exposed communication", "#f28e2b", "the gradient "
          "all-reduce that backward could not hide", distributed=True),
    Phase("optimizer", "Optimizer", "#b07aa1", "optimizer.step() without what ran nested in "
          "it", device=True),
    Phase("trainer", "Trainer", "#ff9da7", "a trainer's own code in optimizer.step(closure)'s "
          "closure, outside forward, loss and backward", device=True, when_spent=True),
    Phase("wait", "Wait (barrier)", "#9c755f", "waiting at the end-of-step barrier for the "
          "other ranks", distributed=True),
    Phase("other", "Other", "#bab0ac", "the step's wall time minus the phases above"),
)
BY_NAME = {p.name: p for p in STEP_PHASES}


def per_step(steps: list[dict[str, float]]) -> dict[str, list[float]]:
    """Each phase's seconds in every step (0 in a step that did not spend it), in step order and
    at most ``core.stats.SAMPLES_KEPT`` of them: a result's ``step_phases``, what
    ``layerscope diff`` ranks phase by phase. A phase no step spent time in is left out."""
    from layerscope.core.stats import kept_samples

    spent = {k for s in steps for k, v in s.items() if v}
    names = [p.name for p in STEP_PHASES if p.name in spent]
    names += sorted(spent - set(names))
    return {n: kept_samples([s.get(n, 0.0) for s in steps]) for n in names}


def shown(seconds: dict[str, float]) -> dict[str, float]:
    """A breakdown's seconds without the phases shown only when spent that no step spent."""
    return {k: v for k, v in seconds.items()
            if v or k not in BY_NAME or not BY_NAME[k].when_spent}
