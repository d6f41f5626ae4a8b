"""Checkpoints written atomically (temporary file in the same directory, fsync, rename) and
loaded with ``weights_only=True``; they hold everything ``--resume`` needs to continue exactly."""
from __future__ import annotations

import os
import random
import re
from typing import Any

import numpy as np
import torch

from layerscope.core.errors import UserError, first_line


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
    from layerscope.core.io import make_dir, write_file

    make_dir(os.path.dirname(os.path.abspath(path)), "checkpoint folder")
    write_file(path, lambda f: torch.save(obj, f), fsync=True)


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


# What --resume needs beyond the weights and config a final model.pt also holds.
RESUME_ENTRIES = ("optimizer", "epoch", "step", "rng")


def load(path: str, *, resume: bool = False) -> dict[str, Any]:
    """A checkpoint or final model file, checked: its weights are a state dict and its config
    has the types TrainConfig gives; with ``resume`` also the training state."""
    path = resolve_checkpoint(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UserError(f"{path} is not a readable layerscope checkpoint: "
                        f"{first_line(exc)}") from exc
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise UserError(f"{path} is not a layerscope checkpoint (no model/config entries)")
    if not is_state_dict(state["model"]):
        raise UserError(f"{path}: its model entry is a {type(state['model']).__name__}, not a "
                        "state dict; the checkpoint is damaged")
    problem = _config_problem(state["config"])
    if problem:
        raise UserError(f"{path}: its config is malformed ({problem}); the checkpoint is damaged")
    missing = [k for k in RESUME_ENTRIES if k not in state]
    if resume and missing == list(RESUME_ENTRIES):
        raise UserError(f"{path} is a run's final model, not a training checkpoint; to resume, "
                        f"give the run directory ({os.path.dirname(path) or '.'}) or its "
                        "checkpoints/last.pt")
    if resume and missing:
        raise UserError(f"{path}: the checkpoint has no {', '.join(missing)}; it is damaged")
    return state


def is_state_dict(obj: Any) -> bool:
    return isinstance(obj, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                         for k, v in obj.items())


def _config_problem(config: Any) -> str | None:
    """Why a saved config cannot be used, or None: entries of TrainConfig must have its types
    (entries it does not know are ignored, as a resumed run ignores them)."""
    import typing

    from layerscope.training.config import TrainConfig

    if not isinstance(config, dict):
        return f"a {type(config).__name__}, not a dict"
    if "recipe" not in config:
        return "no recipe"
    hints = typing.get_type_hints(TrainConfig)
    for name, value in config.items():
        if name in hints and not _fits(value, hints[name]):
            return f"{name} is {value!r}"
    return None


def _fits(value: Any, hint: Any) -> bool:
    import types
    import typing

    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for t in options:
        if t is type(None):
            ok = value is None
        elif typing.get_origin(t) is tuple:  # synthetic_size: saved as a list of ints
            ok = isinstance(value, (list, tuple)) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value)
        elif t is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif t is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, t)
        if ok:
            return True
    return False


def load_weights(model: torch.nn.Module, state: dict[str, Any], path: str) -> None:
    """The checkpoint's weights into ``model``; weights of another model are one line."""
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, ValueError) as exc:
        # PyTorch's message is a header line, then one line per mismatch: show the first
        lines = [ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()]
        detail = (lines[0] if lines else str(exc).strip())[:200]
        raise UserError(f"{path}: its weights do not fit the model of recipe "
                        f"{state['config']['recipe']!r} ({detail})") from exc
