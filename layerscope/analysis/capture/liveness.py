"""Tensor lifetimes from storage weak references: a storage is live from the op that created it
until Python frees it, exactly as in eager execution; the peak is taken after every op."""
from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from layerscope.analysis.capture.tensors import storage_key


class Liveness:
    """Live non-parameter storages, their running total and its peak (bytes)."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, StorageWeakRef]] = {}
        self.resident: set[int] = set()  # parameters and buffers: never activations
        self.total = 0
        self.peak = 0

    def purge(self) -> None:
        """Forget the storages Python has freed since the last call."""
        dead = [k for k, (_, ref) in self.live.items() if ref.expired()]
        for k in dead:
            self.total -= self.live.pop(k)[0]

    def known(self, t: torch.Tensor) -> bool:
        key = storage_key(t)
        return key in self.live or key in self.resident

    def add_resident(self, t: torch.Tensor) -> None:
        """Mark ``t``'s storage as a parameter or buffer: never counted as an activation."""
        self.resident.add(storage_key(t))

    def add(self, t: torch.Tensor) -> int:
        """Count ``t``'s storage as live if it is new; returns the bytes it added."""
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.live or key in self.resident:
            return 0
        nbytes = storage.nbytes()
        self.live[key] = (nbytes, StorageWeakRef(storage))
        self.total += nbytes
        self.peak = max(self.peak, self.total)
        return nbytes
