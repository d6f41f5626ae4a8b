"""Handler tables and the plain tensor description handlers receive.

A handler is a pure function of shapes and dtypes: it gets ``args``/``kwargs`` with every tensor
replaced by a :class:`TensorDesc` (shape, dtype, itemsize), and ``out`` likewise, and returns an
:class:`OpCost`. Memory traffic is not a handler's job: the engine derives it uniformly from the
tensors an op reads and writes (docs/definitions.md).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TensorDesc:
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
    """``flops`` already includes 2 x ``macs``; ``recompute``: the part of ``flops`` that
    computes again what the forward already computed (a fused attention backward kernel
    rebuilding its scores): hardware FLOPs, not model FLOPs."""

    macs: int = 0
    flops: int = 0
    recompute: int = 0


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


@dataclass(frozen=True)
class VersionedEntry:
    """An ONNX handler plus what its input slots mean for parameter counting.

    ``constants``: input slots that act as attributes (shape, axes, pads, bounds, scales): never
    parameters even when they are initializers. ``buffers``: slots holding state rather than
    parameters (BatchNormalization's running mean and variance), reported as buffer bytes.
    """

    handler: Callable[[list, list, dict], OpCost]
    kind: str = COMPUTE
    constants: tuple[int, ...] = ()
    buffers: tuple[int, ...] = ()


class VersionedHandlerTable:
    """Handlers keyed by (domain, op_type, since_version), like ONNX operator schemas.

    ``lookup`` resolves a node against the model's opset: the entry with the largest
    since_version <= the imported version, as onnx.defs.get_schema does. Duplicates are refused.
    """

    def __init__(self, name: str):
        self.name = name
        self._entries: dict[tuple[str, str], dict[int, VersionedEntry]] = {}

    def register(self, op_type: str, since_version: int, handler, *, domain: str = "",
                 kind: str = COMPUTE, constants: tuple[int, ...] = (),
                 buffers: tuple[int, ...] = ()) -> None:
        versions = self._entries.setdefault((domain, op_type), {})
        if since_version in versions:
            raise ValueError(f"{self.name}: a handler for {(domain, op_type, since_version)!r} "
                             "is already registered")
        versions[since_version] = VersionedEntry(handler, kind, tuple(constants), tuple(buffers))

    def lookup(self, domain: str, op_type: str, version: int) -> VersionedEntry | None:
        versions = self._entries.get((domain, op_type))
        if not versions:
            return None
        usable = [v for v in versions if v <= version]
        return versions[max(usable)] if usable else None

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def keys(self) -> list[tuple[str, str, int]]:
        return sorted((d, op, v) for (d, op), vs in self._entries.items() for v in vs)
