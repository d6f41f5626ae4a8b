"""Checkpoints written atomically (temporary file in the same directory, fsync, rename) and
loaded with ``weights_only=True``; they hold everything ``--resume`` needs to continue exactly."""
from __future__ import annotations

import os
import random
import re
from typing import Any

import numpy as np
import torch

from layerscope.errors import UserError


def rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_tuples(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def save_atomic(obj: Any, path: str) -> None:
    """Never leaves a partial file at ``path``: a kill mid-write leaves only a temp file."""
    from layerscope.renderers import write_atomic

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, lambda f: torch.save(obj, f), fsync=True)


def resolve_checkpoint(path: str) -> str:
    """A checkpoint file, or a run directory: its newest epoch (or mid-epoch step) checkpoint.

    The per-epoch file is written before ``last.pt``, so a run killed between the two still
    resumes from its newest finished epoch. ``step-N.pt`` is a run stopped mid-epoch by
    ``--steps``; the newest file of either kind wins."""
    if os.path.isdir(path):
        directory = os.path.join(path, "checkpoints")
        names = [n for n in os.listdir(directory) if re.fullmatch(r"(epoch|step)-\d+\.pt", n)] \
            if os.path.isdir(directory) else []
        if names:
            newest = max(names, key=lambda n: (os.path.getmtime(os.path.join(directory, n)), n))
            return os.path.join(directory, newest)
        if os.path.isfile(os.path.join(directory, "last.pt")):
            return os.path.join(directory, "last.pt")
        raise UserError(f"{path} holds no checkpoints/epoch-*.pt: not a layerscope run directory "
                        "with a finished epoch")
    if not os.path.isfile(path):
        raise UserError(f"checkpoint {path}: no such file")
    return path


def load(path: str) -> dict[str, Any]:
    path = resolve_checkpoint(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path} is not a readable layerscope checkpoint: {first}") from exc
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise UserError(f"{path} is not a layerscope checkpoint (no model/config entries)")
    return state

