"""Handler tables and the plain tensor description handlers receive.

A handler is a pure function of shapes and dtypes: it gets ``args``/``kwargs`` with every tensor
replaced by a :class:`T` (shape, dtype, itemsize), and ``out`` likewise, and returns an
:class:`OpCost`. Memory traffic is not a handler's job: the engine derives it uniformly from the
tensors an op reads and writes (see README "Definitions").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable


@dataclass(frozen=True)
class T:
    """A tensor as handlers see it."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    itemsize: int = 4

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True)
class OpCost:
    """``flops`` already includes 2 x ``macs``."""

    macs: int = 0
    flops: int = 0


# How an op touches memory, for the engine's byte accounting.
COMPUTE = "compute"  # reads its tensor inputs, writes its outputs
VIEW = "view"  # aliases its input: no traffic, no new tensor
ALLOC = "alloc"  # allocates without writing (empty*): a new tensor, no traffic

Handler = Callable[[tuple, dict, Any], OpCost]


@dataclass(frozen=True)
class Entry:
    handler: Handler
    kind: str = COMPUTE


class HandlerTable:
    """Maps op names to handlers and refuses duplicates (fvcore / flop_counter style)."""

    def __init__(self, name: str):
        self.name = name
        self._entries: dict[str, Entry] = {}

    def register(self, names: str | Iterable[str], handler: Handler, kind: str = COMPUTE) -> None:
        """All or nothing: a duplicate anywhere in ``names`` registers none of them."""
        ops = [names] if isinstance(names, str) else list(names)
        taken = [op for op in ops if op in self._entries] or [
            op for i, op in enumerate(ops) if op in ops[:i]]
        if taken:
            raise ValueError(f"{self.name}: a handler for {taken[0]!r} is already registered")
        for op in ops:
            self._entries[op] = Entry(handler, kind)

    def lookup(self, *names: str) -> Entry | None:
        """First match among ``names`` (e.g. the overload, then its packet)."""
        for op in names:
            entry = self._entries.get(op)
            if entry is not None:
                return entry
        return None

    def __contains__(self, op: str) -> bool:
        return op in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return sorted(self._entries)
