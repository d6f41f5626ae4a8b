"""Human-readable numbers; only renderers call these."""
from __future__ import annotations

from typing import Any

_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"))


def si(value: float | int | None, digits: int = 2) -> str:
    """12_345_678 -> '12.35M'; None -> '-'."""
    if value is None:
        return "-"
    for scale, suffix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}f}{suffix}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def megabytes(nbytes: int | float) -> str:
    """torchinfo's footer convention: MB = 1e6 bytes."""
    return f"{nbytes / 1e6:.2f}"


def shape_str(shapes: list[Any] | None) -> str:
    """[[1, 3, 224, 224]] -> '1x3x224x224'; several tensors are joined with ', '."""
    if not shapes:
        return "-"
    return ", ".join("x".join(str(d) for d in s) if s else "scalar" for s in shapes)
