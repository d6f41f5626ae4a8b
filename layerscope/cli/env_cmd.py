"""layerscope env: the machine and software versions every report records in its header."""
from __future__ import annotations

import json
import sys


def register(sub) -> None:
    from layerscope.cli.common import add_format

    p = sub.add_parser("env", help="print the environment: CPU, RAM, OS, Python, torch, CUDA, "
                                   "package versions, GPUs")
    add_format(p, help="table (default) or json (the 'environment' object of every report)")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.core.environment import environment
    from layerscope.renderers.tables import environment_rows

    env = environment()
    if args.format == "json":
        sys.stdout.write(json.dumps(env, indent=2) + "\n")
        return 0
    rows = environment_rows(env)
    width = max(len(k) for k, _ in rows)
    sys.stdout.write("".join(f"{k:<{width}}  {v}\n" for k, v in rows))
    return 0
