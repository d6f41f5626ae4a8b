"""The machine's measured ceilings (peak FLOP/s from a large matmul, memory bandwidth from a
large copy), cached per machine, and each layer's place under the roof (Williams et al. 2009:
attainable = min(peak, bandwidth x intensity)).

The ceilings are cached with when they were measured and the load then. A layer measured above
100% of its roof cannot be right (nothing beats the ceilings); the usual cause is ceilings
measured while other work shared the machine, kept in the cache for every later run. Such a
result carries ``above_roof`` (``above_roof``): how many layers, the highest share, when and
under what load the ceilings were measured, and the command that measures them again.
Ceilings measured while the machine was busy are measured again, once it is quieter, by the
first run that reads them (``measured_busier``); each ceiling keeps the higher measurement.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import warnings
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import torch

from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import LayerscopeWarning, UserError
from layerscope.core.noise import MachineReading, read_machine
from layerscope.core.records import AboveRoof, Ceilings, RooflinePoint

# 2: entries record when and under what load they were measured (measured_at, loadavg, cpus);
# entries of version 1 are not used (they are measured again, once)
CACHE_VERSION = 2


def place(flops: int, bytes_moved: int, seconds: float,
          ceilings: Ceilings) -> RooflinePoint | None:
    """Intensity, the bound, the attainable FLOP/s and the achieved share of it."""
    if not bytes_moved or not seconds or seconds <= 0:
        return None
    intensity = flops / bytes_moved
    attainable = min(ceilings.peak_flops, ceilings.bandwidth * intensity)
    achieved = flops / seconds
    return RooflinePoint(
        intensity=intensity,
        bound="memory" if intensity < ceilings.ridge else "compute",
        attainable_flops=attainable,
        achieved_flops=achieved,
        pct_of_roof=achieved / attainable if attainable else None,
    )


def remeasure_command(c: Ceilings) -> str:
    """The command that measures ``c`` again (same device, dtype and threads) into the cache."""
    threads = f" --threads {c.threads}" if c.threads else ""
    return (f"layerscope roofline --device {c.device or 'cpu'} --dtype {c.dtype or 'float32'}"
            f"{threads} --refresh")


def above_roof(points: Iterable[RooflinePoint], ceilings: Ceilings) -> AboveRoof | None:
    """The remark for layers whose achieved share of their roof (``pct_of_roof``) is above 1,
    or None when every placed layer is at or under its roof."""
    placed = [p for p in points if p.pct_of_roof is not None]
    over = [p for p in placed if p.pct_of_roof > 1.0]
    if not over:
        return None
    return AboveRoof(layers=len(over), of_layers=len(placed),
                     memory_bound=sum(p.bound == "memory" for p in over),
                     max_pct_of_roof=max(p.pct_of_roof for p in over),
                     measured_at=ceilings.measured_at, loadavg=ceilings.loadavg,
                     cpus=ceilings.cpus, command=remeasure_command(ceilings))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _best_time(fn, device: str, repeats: int) -> float:
    fn()
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def _matmul_time(n: int, device: str, dtype: torch.dtype, repeats: int) -> float:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return _best_time(lambda: torch.mm(a, b), device, repeats)


def _copy_time(elements: int, device: str, repeats: int) -> float:
    src = torch.empty(elements, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    return _best_time(lambda: dst.copy_(src), device, repeats)


def measure(device: str = "cpu", dtype: torch.dtype = torch.float32, threads: int | None = None,
            matmul_size: int | None = None, copy_mib: int | None = None,
            repeats: int = 5) -> Ceilings:
    """Best of ``repeats`` for an n x n matmul (2 n^3 FLOPs) and a copy (reads + writes)."""
    n = matmul_size or (8192 if device == "cuda" else 2048)
    mib = copy_mib or (2048 if device == "cuda" else 256)
    machine = read_machine()  # before our own work adds to the load average
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        t_mm = _matmul_time(n, device, dtype, repeats)
        nbytes = 2 * (mib * 2**20 // 4) * 4  # read src + write dst, fp32
        t_copy = _copy_time(mib * 2**20 // 4, device, repeats)
        return Ceilings(device, str(dtype).removeprefix("torch."), torch.get_num_threads(),
                        2 * n**3 / t_mm, nbytes / t_copy, n, nbytes, measured_at=at,
                        loadavg=machine.loadavg[0] if machine.loadavg else None,
                        cpus=machine.cpus_available or machine.cpu_count)
    finally:
        torch.set_num_threads(old)


def cache_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "layerscope", "roofline.json")


def _key(device: str, dtype: torch.dtype, threads: int) -> str:
    env = environment()
    machine = env["gpu"] if device == "cuda" else env["cpu"]
    return f"v{CACHE_VERSION}|{device}|{machine}|{env['cores']}|{threads}|{dtype}|{env['torch']}"


def _valid_entry(d: Any) -> bool:
    """A cached entry is used only when it is exactly what ``Ceilings.to_dict`` wrote, with
    positive finite ceilings: a hand-edited or damaged one would give wrong roofline numbers."""
    fields = {f.name for f in dataclasses.fields(Ceilings)}
    optional = {"measured_at", "loadavg", "cpus"}  # None is left out of the JSON
    if not isinstance(d, dict) or not fields - optional <= set(d) - {"ridge"} <= fields:
        return False
    numbers = [d[k] for k in ("threads", "peak_flops", "bandwidth", "matmul_size", "copy_bytes")]
    return (isinstance(d["device"], str) and isinstance(d["dtype"], str)
            and isinstance(d.get("measured_at", ""), str)
            and all(_number(x) and x > 0 for x in numbers)
            and all(_number(d[k]) and d[k] >= 0 for k in ("loadavg", "cpus") if k in d))


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _read_cache(path: str, key: str) -> tuple[dict[str, Any], str | None]:
    """The cache's entries and, when the file or this key's entry is damaged, why it is
    ignored. A missing file is no problem."""
    try:
        with open(path, encoding="utf-8") as f:
            cache = json.load(f)
    except FileNotFoundError:
        return {}, None
    except IsADirectoryError:
        return {}, "it is a directory"
    except OSError as exc:
        return {}, f"it cannot be read ({exc.strerror or exc})"
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return {}, f"it is not valid JSON ({str(exc).splitlines()[0]})"
    if not isinstance(cache, dict):
        return {}, f"it holds a JSON {type(cache).__name__}, not an object"
    if key in cache and not _valid_entry(cache[key]):
        del cache[key]
        return cache, "this machine's entry is malformed or holds non-positive ceilings"
    return cache, None


def measured_busier(c: Ceilings, now: MachineReading) -> bool:
    """Whether CPU ceilings were measured while the machine was busy (a 1-minute load of at
    least half its CPUs) and it is now quieter by at least one CPU's worth of load: then they
    are measured again (``ceilings``). Ceilings without their load recorded, GPU ceilings (the
    load is the host's) and a machine whose load cannot be read are left as they are."""
    if c.device not in (None, "cpu") or c.loadavg is None or not c.cpus or not now.loadavg:
        return False
    return c.loadavg >= c.cpus / 2 and now.loadavg[0] <= c.loadavg - 1


def higher(old: Ceilings, new: Ceilings) -> Ceilings:
    """``new`` (its time and load) with each ceiling the higher of the two measurements."""
    return dataclasses.replace(new, peak_flops=max(old.peak_flops, new.peak_flops),
                               bandwidth=max(old.bandwidth, new.bandwidth))


def ceilings(device: str = "cpu", dtype: torch.dtype = torch.float32, threads: int | None = None,
             refresh: bool = False) -> Ceilings:
    """Cached ceilings for this machine, device, dtype and thread count; measured if missing.
    A damaged cache is ignored with one ``LayerscopeWarning`` and the ceilings are measured."""
    threads = torch.get_num_threads() if threads is None else values.thread_count(threads)
    key = _key(device, dtype, threads)
    path = cache_path()
    cache, damaged = _read_cache(path, key)
    if damaged:
        warnings.warn(f"ignoring the roofline cache {path}: {damaged}; measuring the ceilings "
                      "again", LayerscopeWarning, stacklevel=2)
    if not refresh and key in cache:
        d = dict(cache[key])
        d.pop("ridge", None)
        cached = Ceilings(**d)
        if not measured_busier(cached, read_machine()):
            return cached
        # a ceiling is what the machine reached at least once: measured again on a quieter
        # machine, each ceiling keeps the higher of the two measurements
        result = higher(cached, measure(device, dtype, threads))
    else:
        result = measure(device, dtype, threads)
    cache[key] = result.to_dict()
    from layerscope.core.io import make_dir, write_file

    try:
        make_dir(os.path.dirname(path), "cache folder")
        write_file(path, json.dumps(cache, indent=1))
    except (OSError, UserError):
        pass  # a read-only home (or a directory in the file's place) costs a re-measurement
    return result
