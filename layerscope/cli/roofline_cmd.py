"""layerscope roofline: measure (or show the cached) peak FLOP/s and memory bandwidth.
Every option but --format is a field of ``analysis.roofline_settings.RooflineSettings``."""
from __future__ import annotations

import json
import sys

from layerscope.analysis.roofline_settings import RooflineSettings
from layerscope.cli.common import add_all_settings, add_format, settings_from


def register(sub) -> None:
    p = sub.add_parser("roofline", help="the machine's measured compute and bandwidth ceilings")
    add_all_settings(p, RooflineSettings)
    add_format(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis import roofline
    from layerscope.analysis.roofline_settings import roofline_ceilings

    c = roofline_ceilings(settings_from(RooflineSettings, args))
    if args.format == "json":
        sys.stdout.write(json.dumps(c.to_dict(), indent=2) + "\n")
    else:
        load = "" if c.loadavg is None else f", load average {c.loadavg:.2f}" + (
            f" on {c.cpus} CPUs" if c.cpus else "")
        print(f"device {c.device}, {c.dtype}, {c.threads} threads\n"
              f"peak compute  {c.peak_flops / 1e9:10.1f} GFLOP/s  ({c.matmul_size}^3 matmul)\n"
              f"bandwidth     {c.bandwidth / 1e9:10.1f} GB/s     ({c.copy_bytes / 2**20:.0f} MiB "
              f"copied)\nridge point   {c.ridge:10.1f} FLOP/byte\n"
              f"measured      {c.measured_at or '-'}{load}\n"
              f"cache: {roofline.cache_path()} (measure again: "
              f"{roofline.remeasure_command(c)})")
    return 0
