"""What the side-by-side benchmarks share: their command line and the versions they record."""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence


def versions(dists: Sequence[str]) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in dists:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def timed_run(cmd: Sequence[str], *, env: dict | None = None, cwd: str | None = None) -> dict:
    """Run ``cmd`` as a child and account for it: wall seconds (perf_counter around the child),
    CPU seconds (its user + system time from ``os.wait4``: what the wall time would be on an
    idle core), max RSS bytes, exit status, and its stdout and stderr (text)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return {"wall_seconds": wall, "cpu_seconds": usage.ru_utime + usage.ru_stime,
                "max_rss_bytes": usage.ru_maxrss * 1024,  # kilobytes on Linux
                "status": child.returncode, "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace")}


def parse_models_and_repeats(doc: str, models: Sequence[str], repeats: int, argv=None):
    """``--models a,b`` (a subset of ``models``) and ``--repeats N``; returns (models, repeats)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--models", default=",".join(models),
                        help=f"comma-separated subset of: {', '.join(models)}")
    parser.add_argument("--repeats", type=int, default=repeats,
                        help="timed calls per tool (median)")
    args = parser.parse_args(argv)
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in models]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(models)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return chosen, args.repeats
