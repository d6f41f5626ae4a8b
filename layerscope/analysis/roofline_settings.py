"""``layerscope roofline``'s settings, declared once (``RooflineSettings``), and its entry
point ``roofline_ceilings``: the machine's ceilings for a device, dtype and thread count, from
the cache or measured (``analysis.roofline``). Kept apart from ``analysis.roofline`` so that
the command line declares its options without importing torch."""
from __future__ import annotations

import dataclasses
from typing import Any

from layerscope.core import options
from layerscope.core.settings import Settings, option

DTYPES = ("float32", "float16", "bfloat16")


@dataclasses.dataclass(kw_only=True, eq=False)
class RooflineSettings(Settings):
    """Every setting of ``layerscope roofline``: a new one is a field here (the CLI's option
    and the entry point's argument follow)."""

    device: str = options.device()
    dtype: str = option("float32", choices=DTYPES)
    threads: int | None = options.threads(help=None)
    refresh: bool = option(False, "measure again, ignoring the cache")


def roofline_ceilings(settings: RooflineSettings | None = None, **overrides: Any):
    """The ceilings (``core.records.Ceilings``) of this machine for ``settings`` (a
    ``RooflineSettings``; keyword arguments override its fields): cached, or measured when
    missing, busier than now or ``refresh``."""
    from layerscope.analysis import roofline as ceilings
    from layerscope.analysis.runtime import check_device
    from layerscope.frontends.inputs import parse_dtype

    s = RooflineSettings.of(settings, **overrides)
    check_device(s.device)
    return ceilings.ceilings(s.device, parse_dtype(s.dtype), s.threads, refresh=s.refresh)
