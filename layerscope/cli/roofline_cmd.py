"""layerscope roofline: measure (or show the cached) peak FLOP/s and memory bandwidth."""
from __future__ import annotations

import json
import sys

from layerscope.cli.common import add_device
from layerscope.core.values import arg, thread_count


def register(sub) -> None:
    p = sub.add_parser("roofline", help="the machine's measured compute and bandwidth ceilings")
    add_device(p)
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    p.add_argument("--threads", type=arg(thread_count), default=None)
    p.add_argument("--refresh", action="store_true", help="measure again, ignoring the cache")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis import roofline
    from layerscope.analysis.runtime import check_device
    from layerscope.frontends.inputs import parse_dtype

    check_device(args.device)
    c = roofline.ceilings(args.device, parse_dtype(args.dtype), args.threads, refresh=args.refresh)
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
