"""A bound on the input tensors a command allocates from the shapes a model file declares.

A model file can declare any shape (an input of 1x3x100000x100000 floats is 120 GB): the static
analysis only multiplies the dimensions, but ``profile`` and ``verify`` create real arrays of
that size. They check the total first and refuse above ``LAYERSCOPE_MAX_INPUT_BYTES`` (bytes,
default 4 GiB) rather than exhaust the machine's memory.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

from layerscope.core.errors import UserError

ENV_MAX_INPUT_BYTES = "LAYERSCOPE_MAX_INPUT_BYTES"
DEFAULT_MAX_INPUT_BYTES = 4 * 2**30


def max_input_bytes() -> int:
    text = os.environ.get(ENV_MAX_INPUT_BYTES, "").strip()
    if not text:
        return DEFAULT_MAX_INPUT_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise UserError(f"{ENV_MAX_INPUT_BYTES}={text!r}: give a whole number of bytes, at "
                        "least 1")
    return value


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes:,} bytes"


def check_input_bytes(what: str, tensors: Iterable[tuple[Sequence[int], int]],
                      smaller: str = "", noun: str = "its inputs",
                      arguments: tuple[str, ...] = ()) -> None:
    """Refuse before allocating: ``tensors`` are (shape, bytes per element) of one input set;
    ``smaller`` names the options (or API ``arguments``) that give smaller shapes, if any."""
    need = sum(math.prod(shape) * itemsize for shape, itemsize in tensors)
    limit = max_input_bytes()
    if need > limit:
        fix = f"give smaller shapes ({smaller}) or raise" if smaller else "raise"
        raise UserError(f"{what}: {noun} would need {_gib(need)}, over the {_gib(limit)} "
                        f"limit; {fix} the limit with {ENV_MAX_INPUT_BYTES}=BYTES",
                        arguments=arguments)
