"""The phase table that train and loop share: each phase's label (a distributed step's phases,
communication apart), the phases in step order, the table's title, its rows, and the CSV's rows
per scope."""
from __future__ import annotations

from layerscope.core.phases import STEP_PHASES
from layerscope.views.common import (
    PHASE_LABELS,
    pct,
)
from layerscope.views.sections import (
    Cell,
    RowTable,
)

# the phases of a distributed step (core.phases, all of them; the overlapping one is apart)
RANK_PHASE_LABELS = {p.name: p.label for p in STEP_PHASES} | {"backward": "Backward (compute)"}


COMMUNICATION_LABEL = "Communication (overlaps backward; not in the total)"


def phase_label(phase: str, labels: dict[str, str] | None = None) -> str:
    if labels and phase in labels:
        return labels[phase]
    if phase == "communication":
        return COMMUNICATION_LABEL
    return PHASE_LABELS.get(phase) or RANK_PHASE_LABELS.get(phase, phase)


def ordered(seconds: dict[str, float]) -> list[tuple[str, float]]:
    """A breakdown's phases in step order (a distributed run appends its own phases)."""
    order = list(RANK_PHASE_LABELS) + ["communication"]
    return sorted(seconds.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order
                  else len(order))


def phase_title(warmup_steps: int, left_out: int = 0) -> str:
    """Say warm-up steps and one-time costs were left out only when some were."""
    parts = []
    if warmup_steps:
        parts.append(f"{warmup_steps} warm-up step{'s' if warmup_steps != 1 else ''} excluded")
    if left_out:
        parts.append(f"{left_out} one-time cost{'s' if left_out != 1 else ''} left out")
    return f"Time per phase ({'; '.join(parts)})" if parts else "Time per phase"


def phase_table(b: dict, warmup_steps: int = 0,
                 labels: dict[str, str] | None = None, left_out: int = 0) -> RowTable:
    cols = [("Phase", False), ("Seconds", True), ("Share", True), ("ms / step", True)]
    wall = b["wall_s"] or 0.0
    steps = b["steps"] or 1
    rows = [[Cell(phase_label(p, labels), p), Cell(f"{s:.3f}", s),
             Cell(pct(s / wall) if wall else "-", s / wall if wall else None),
             Cell(f"{s / steps * 1e3:.2f}", s / steps * 1e3)] for p, s in ordered(b["seconds"])]
    return RowTable("phases", phase_title(warmup_steps, left_out), cols, rows,
                    ["Total", f"{wall:.3f}", "100.0%" if wall else "-",
                     f"{wall / steps * 1e3:.2f}"])


# ---- CSV --------------------------------------------------------------------------------
# train and loop: one row per phase of each scope (the run's measured steps, each epoch, each
# rank), then the scope's total; the scope's steps, samples and tokens on each of its rows
PHASE_CSV = ["scope", "phase", "seconds", "share", "ms_per_step", "steps", "samples", "tokens"]


def phase_csv_rows(scope: str, b: dict) -> list[list]:
    wall, steps = b.get("wall_s") or 0.0, b.get("steps") or 0
    counts = [steps, b.get("samples"), b.get("tokens")]
    return [[scope, phase, s, s / wall if wall else None, s / steps * 1e3 if steps else None,
             *counts] for phase, s in [*ordered(b["seconds"]), ("total", wall)]]
