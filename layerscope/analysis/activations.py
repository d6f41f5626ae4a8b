"""Activation capture: forward hooks save the outputs of matching layers (real run). Its
settings (``ActivationsSettings``) are declared here too; torch is imported when a capture
runs, so the command line builds its parser without it."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from layerscope.analysis import modes
from layerscope.core import options, values
from layerscope.core.activation_records import ActivationCapture, ActivationStat
from layerscope.core.errors import UserError, first_line
from layerscope.core.settings import Settings, of_call, option

if TYPE_CHECKING:
    import torch
    import torch.nn as nn


def select_modules(model: nn.Module, pattern: str) -> list[tuple[str, nn.Module]]:
    """Modules whose name or type name matches ``pattern`` (a regular expression, re.fullmatch)."""
    rx = values.pattern(pattern, "layers")
    return [(name, m) for name, m in model.named_modules()
            if name and (rx.fullmatch(name) or rx.fullmatch(type(m).__name__))]


@dataclasses.dataclass(kw_only=True, eq=False)
class ActivationsSettings(Settings):
    """Every setting of ``layerscope activations`` and ``layerscope.activations`` (where the
    arrays go and how the statistics are shown are the command line's output options)."""

    model: Any = options.model()
    inputs: Any = options.inputs()
    batch_size: int | None = options.batch_size()
    layers: str = option(".*", "regular expression matched (fully) against layer names and "
                               "types, e.g. 'Conv2d|features.*'")
    seed: int = option(0, "seed of the random input and of a built-in model's random weights "
                          "(default 0, as in every command)", parse=values.seed)


def activations(model: str | nn.Module | None = None, inputs: Any = None, *,
                settings: ActivationsSettings | None = None,
                **overrides: Any) -> ActivationCapture:
    """Run the model once on seeded random inputs and keep the outputs of matching layers
    (``layers``: a regular expression on layer names and types; ``batch_size``).

    ``seed`` seeds both the input and the weights of built-in models (the same as in export and
    verify), so two runs give the same arrays. ``settings``: an ``ActivationsSettings``;
    keyword arguments override its fields."""
    import torch

    from layerscope.analysis.analyze_torch import normalize_inputs
    from layerscope.frontends.inputs import real_inputs
    from layerscope.frontends.torch_module import resolve, with_batch_size

    s = of_call(ActivationsSettings, settings, overrides, "capture", model=model, inputs=inputs)
    model, inputs, layers, batch_size, seed = s.model, s.inputs, s.layers, s.batch_size, s.seed
    loaded = resolve(model, seed=seed)
    if loaded.frontend == "torchscript":  # forward hooks are how layer outputs are kept
        raise UserError(f"{loaded.name}: activations need forward hooks, which TorchScript "
                        "modules do not support; pass the eager model (file.py:factory)")
    given = normalize_inputs(inputs)
    if given:
        loaded.inputs = given
    if not loaded.inputs:
        raise UserError(f"{loaded.name}: no default input is known; give one with inputs",
                        arguments="inputs")
    if batch_size is not None:
        loaded.inputs = with_batch_size(loaded.inputs, batch_size)
    module = loaded.module
    chosen = select_modules(module, layers)
    if not chosen:
        raise UserError(f"layers {layers!r} matches no layer name or type of {loaded.name}",
                        arguments="layers")
    captured: dict[str, torch.Tensor] = {}
    types: dict[str, str] = {}

    def hook_for(name: str):
        def hook(mod, args, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            if isinstance(out, torch.Tensor):
                seen = sum(k.startswith(name + "#") for k in captured)
                key = name if name not in captured else f"{name}#{seen + 2}"
                captured[key] = out.detach().to("cpu", copy=True)
                types[key] = type(mod).__name__
        return hook

    flags = modes.flags(module)
    handles = [m.register_forward_hook(hook_for(name)) for name, m in chosen]
    try:
        modes.set_mode(module, False)
        with torch.no_grad():
            module(*real_inputs(loaded.inputs, seed=seed))
    except Exception as exc:
        raise UserError(f"{loaded.name} rejected the input: "
                        f"{first_line(exc, with_type=True)}") from exc
    finally:
        for h in handles:
            h.remove()
        modes.restore(flags)
    stats = []
    arrays = {}
    for key, t in captured.items():
        f = t.float()
        stats.append(ActivationStat(key, types[key], list(t.shape), float(f.mean()),
                                    float(f.std()) if f.numel() > 1 else 0.0,
                                    float((f == 0).sum()) / max(f.numel(), 1)))
        arrays[key] = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
    return ActivationCapture(loaded.name, layers, stats, arrays)
