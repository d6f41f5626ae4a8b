"""Cost of one op or one layer: multiply-accumulates, FLOPs and memory traffic."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Cost:
    """MACs and FLOPs follow docs/definitions.md: FLOPs = 2 x MACs + everything else."""

    macs: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte moved with no on-chip reuse; None when nothing moves."""
        moved = self.bytes_read + self.bytes_written
        return self.flops / moved if moved else None


ZERO = Cost()
