"""The diff's notes about its inputs: each result's own noise warning, and results of
different models."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def noise_notes(results: Sequence[Any], names: Sequence[str]) -> list[str]:
    """Each result's own first noise warning (its ``noise`` section: a noisy or oversubscribed
    machine, runs far apart), named by its file: a verdict of "within the noise" on a change of
    +500% says why only with it."""
    out = []
    for name, r in zip(names, results):
        warnings = (getattr(r, "noise", None) or {}).get("warnings")  # a dict or a Noise
        if warnings:
            out.append(f"{name}: {warnings[0]}")
    return out


def different_models(base: Any, new: Any) -> list[str]:
    """A note when the two results are of different models that share few layer paths (under
    a quarter): their rows compare nothing alike. Two versions of one model (a wider layer, a
    script renamed) share most paths and get none."""
    def names(r: Any) -> set[str]:  # a report's LayerRows, a run's layer dicts
        return {x["name"] if isinstance(x, dict) else x.name
                for x in getattr(r, "layers", None) or []}

    a, b = model_name(base), model_name(new)
    names_a, names_b = names(base), names(new)
    union = names_a | names_b
    if a == b or not union or 4 * len(names_a & names_b) >= len(union):
        return []
    return [f"different models: {a} against {b} share {len(names_a & names_b)} of "
            f"{len(union)} layer paths, so the rows compare little alike (diff runs of one "
            f"model)"]


def model_name(r: Any) -> str | None:
    return getattr(r, "model", None) or getattr(r, "recipe", None)
