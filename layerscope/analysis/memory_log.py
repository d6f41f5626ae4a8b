"""The storage log of a tracked run (``memory_track``): every tensor storage created, counted
once, with when it was created and freed, the phase and the module that created it, and what it
is (its kind, given by the tracker at the end).

How it is seen:

- A ``TorchDispatchMode`` sees every aten op's outputs; each output's storage (views share their
  base's storage: free) is counted once, by its identity (``untyped_storage()``'s handle, for
  fake and real tensors alike), with a ``StorageWeakRef`` telling when Python freed it. Frees are
  collected before each op, so the live set is exact at op granularity: event ``t`` is the
  ``t``-th op (or phase boundary) and the live bytes after it. A storage an op resized in place
  (``resize_``, an ``out=`` tensor) ends at its old size and starts again at the new one.
- The creating module: the innermost module whose forward is running (global forward hooks,
  ``capture.ModuleTracker``); in backward the module whose forward made the autograd node (the
  node's tag). Gradients and optimizer states are charged to the module owning their
  parameter; ops outside any module to "(loss)", "(optimizer)" or "(zero_grad)" in those
  phases, else to "" (the top level: the root module's own ops, the inputs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.analysis.capture import AUTOGRAD_TAG, ModuleTracker
from layerscope.analysis.capture.tensors import storage_key, tensors

INFERENCE_PHASES = ("forward",)
TRAINING_PHASES = ("zero_grad", "forward", "loss", "backward", "optimizer")
# the kinds, in the order tables list them
KINDS = ("parameters", "buffers", "gradients", "optimizer_state", "activations", "inputs",
         "outputs", "temporaries")
# what ops outside any module are charged to, by phase (elsewhere: "", the top level)
OUTSIDE = {"zero_grad": "(zero_grad)", "loss": "(loss)", "optimizer": "(optimizer)"}


@dataclass
class Storage:
    """One storage: its bytes, lifetime in events (alive at ``t`` when born <= t < died) and
    what created it."""
    nbytes: int
    born: int
    phase: str
    module: str
    ref: Any  # StorageWeakRef
    kind: str | None = None
    died: int | None = None

    def alive_at(self, t: int) -> bool:
        return self.born <= t and (self.died is None or self.died > t)


class StorageLog(TorchDispatchMode):
    """The storages of a run and the live total after every event (see the module's doc)."""

    def __init__(self, modules: ModuleTracker) -> None:
        super().__init__()
        self.modules = modules
        self.live: dict[int, Storage] = {}
        self.storages: list[Storage] = []
        self.timeline: list[tuple[int, str]] = []  # (live bytes, phase) after each event
        self.phase = "start"
        self.total = 0

    @property
    def t(self) -> int:
        return len(self.timeline)

    def _purge(self) -> None:
        dead = [k for k, s in self.live.items() if s.ref.expired()]
        for k in dead:
            s = self.live.pop(k)
            s.died = self.t
            self.total -= s.nbytes

    def add(self, t: torch.Tensor, module: str, kind: str | None = None) -> Storage | None:
        """Count ``t``'s storage if it is new (returns it), else give an unclassified known one
        ``kind`` (returns None)."""
        storage = t.untyped_storage()
        key = storage._cdata
        known = self.live.get(key)
        if known is not None and known.nbytes != storage.nbytes():
            # resized in place (resize_, an op's out= tensor): the old size ends here and the
            # new one starts, so that every event's live set keeps the sizes it had
            known.died = self.t
            self.total -= known.nbytes
            del self.live[key]
            kind, module = known.kind or kind, known.module
            known = None
        if known is not None:
            if kind is not None and known.kind is None:
                known.kind, known.module = kind, module
            return None
        s = Storage(storage.nbytes(), self.t, self.phase, module, StorageWeakRef(storage), kind)
        self.live[key] = s
        self.storages.append(s)
        self.total += s.nbytes
        return s

    def known(self, t: torch.Tensor) -> Storage | None:
        return self.live.get(storage_key(t))

    def event(self) -> None:
        """Close event ``t``: the live total after it, in the current phase."""
        self.timeline.append((self.total, self.phase))

    def enter_phase(self, phase: str) -> None:
        self._purge()
        self.event()
        self.phase = phase

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._purge()
        node = torch._C._current_autograd_node()
        module = node.metadata.get(AUTOGRAD_TAG, "") if node is not None \
            else self.modules.current() or OUTSIDE.get(self.phase, "")
        for t in tensors(out):
            self.add(t, module)
        self.event()
        return out

    def peak(self) -> tuple[int, int]:
        """(event, bytes) of the first event at the highest live total."""
        best_t, best = 0, -1
        for t, (nbytes, _) in enumerate(self.timeline):
            if nbytes > best:
                best_t, best = t, nbytes
        return best_t, max(best, 0)



def live_rows(log: StorageLog, t: int) -> dict[tuple[str, str], int]:
    """(module, kind) -> bytes of the storages alive at event ``t`` (sums to the live total)."""
    rows: dict[tuple[str, str], int] = {}
    for s in log.storages:
        if s.alive_at(t):
            key = (s.module, s.kind or "temporaries")
            rows[key] = rows.get(key, 0) + s.nbytes
    return rows
