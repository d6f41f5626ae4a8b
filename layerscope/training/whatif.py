"""What if the script's loaders and threads were set otherwise: ``layerscope run --num-workers N
--pin-memory --threads T`` (and ``watch(what_if=WhatIf(...))``) run the user's script unchanged
except for these settings, so a suggestion such as "set num_workers=4" can be measured before
the code is edited.

- ``num_workers``: every ``DataLoader`` the script builds while the watch runs gets
  ``num_workers=N`` (``DataLoader.__init__`` is wrapped, and restored exactly afterwards). With
  N > 0 torch's own defaults apply (``prefetch_factor`` 2, workers not persistent) unless the
  script set them; with N = 0 the settings torch accepts only with workers
  (``prefetch_factor``, ``persistent_workers``, ``multiprocessing_context``) are dropped.
- ``pin_memory``: every ``DataLoader`` gets ``pin_memory=True``.
- ``threads``: ``torch.set_num_threads(T)`` before the script starts (a call of the script's
  own afterwards wins), the previous count restored afterwards.

A map-style dataset whose ``__getitem__`` is deterministic gives the same batches in the same
order with any worker count: the sampler runs in the main process and draws the same random
numbers. Random transforms in ``__getitem__`` draw from each worker's own seed instead of the
main process's generator, so their samples differ.

The settings are declared once here (``core.settings.option``, the parsers and limits of
``training.config``'s): ``layerscope run`` builds its options from them.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from layerscope.core import values
from layerscope.core.settings import Settings, option

GROUP = "what if (the script's own settings overridden; the report says so)"
# DataLoader arguments torch refuses without workers (ValueError at construction)
WORKERS_ONLY = {"prefetch_factor": None, "persistent_workers": False,
                "multiprocessing_context": None}


@dataclass(kw_only=True, eq=False)
class WhatIf(Settings):
    num_workers: int | None = option(
        None, "every DataLoader the script builds gets num_workers=N", metavar="N",
        parse=values.non_negative_int, maximum=values.WORKERS_MAX, group=GROUP)
    pin_memory: bool = option(False, "every DataLoader the script builds gets pin_memory=True",
                              group=GROUP)
    threads: int | None = option(None, "torch.set_num_threads(T) before the script starts",
                                 metavar="T", parse=values.thread_count, group=GROUP)
    # what each DataLoader was built with by the script (dataset, num_workers, pin_memory)
    seen: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def install(self, patch: Callable[[Any, str, Any], None],
                undo: Callable[[Callable[[], None]], None]) -> None:
        """Apply the settings through ``patch(owner, attr, replacement)`` (restored by its
        owner) and ``undo(action)`` (run when the watch stops)."""
        import torch
        from torch.utils.data import DataLoader

        if self.num_workers is not None or self.pin_memory:
            patch(DataLoader, "__init__", self._loader_init(DataLoader.__init__))
        if self.threads is not None:
            before = torch.get_num_threads()
            torch.set_num_threads(self.threads)
            undo(lambda: torch.set_num_threads(before))

    def _loader_init(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            try:
                bound = signature.bind(loader, *args, **kwargs)
            except TypeError:  # torch's own error for the script's call
                return fn(loader, *args, **kwargs)
            given = bound.arguments
            self.seen.append({"dataset": type(given.get("dataset")).__name__,
                              "num_workers": given.get("num_workers", 0),
                              "pin_memory": bool(given.get("pin_memory", False))})
            if self.num_workers is not None:
                given["num_workers"] = self.num_workers
                if self.num_workers == 0:
                    for name, default in WORKERS_ONLY.items():
                        if name in given:
                            given[name] = default
            if self.pin_memory:
                given["pin_memory"] = True
            return fn(*bound.args, **bound.kwargs)
        __init__.__wrapped__ = fn  # type: ignore[attr-defined]
        return __init__

    def note(self) -> str:
        """What the report says so that its figures are never taken for the script's own."""
        asked = ", ".join(f"{k}={v}" for k, v in self.given().items())
        own = sorted({(s["num_workers"], s["pin_memory"]) for s in self.seen})
        mine = "; ".join(f"num_workers={w}, pin_memory={p}" for w, p in own)
        flags = " ".join(self.flags(**self.given()))
        return (f"what if: run with {asked} (layerscope run {flags}), not the "
                "script's own settings" + (f" ({mine} in its code)" if mine else ""))
