"""Every value a user gives (CLI option or public-API argument) is checked here, one parser per
kind: whole numbers within int64, tensor shapes, finite floats, thread counts, seeds, lists.

Each parser takes the raw value (text from the command line, or a number from Python) and an
optional ``name``, the public API's argument (``"batch_size"``), used to start the message of
the ``UserError`` it raises and recorded as its ``arguments``: a Python caller reads
"batch_size must be at least 1, got 0", and the CLI, which translates the name into the option
that sets it, "--batch-size must be at least 1, got 0". ``arg(parser, ...)`` adapts a parser to
argparse's ``type=``: argparse then prefixes the option itself ("argument --batch-size: must
be ...").

Why int64: every size ends up in a torch/numpy/onnx int64 field; a larger Python int raises an
OverflowError deep inside a library (a traceback), so it is refused at the door. A shape's
element count must fit too (numel is an int64 in every runtime).
"""
from __future__ import annotations

import argparse
import math
import operator
import re
import warnings
from collections.abc import Callable
from typing import Any

from layerscope.core.errors import LayerscopeWarning, UserError

INT64_MAX = 2**63 - 1
SEED_MAX = 2**63 - 1
THREADS_MAX = 1024  # more intra-op threads than any machine we know of has cores
WORKERS_MAX = 1024  # data-loader processes
NPROC_MAX = 1024  # processes per machine of a distributed run
NODES_MAX = 65_536  # machines of a distributed run
COMM_TIMEOUT_S = 600.0  # seconds a collective may wait before a distributed run ends
COMM_TIMEOUT_MAX = 86_400.0
WIDTH_RANGE = (40, 10_000)  # narrower tables cannot show a name and a number per column
LR_MAX = 10.0  # larger learning rates diverge (NaN loss) with every recipe and optimizer here
MIN_TIME_MAX = 3600.0  # seconds: a --min-time of an hour is already more than any estimate needs

_INT_TEXT = re.compile(r"[+-]?\d+")
_SHAPE_TEXT = re.compile(r"\d+(x\d+)*")
SCALAR = "scalar"  # the shape text of a 0-d tensor


def _argument(name: str | None) -> tuple[str, ...]:
    """The API argument a ``name`` such as "inputs" or "inputs dimensions" starts with."""
    first = (name or "").split(" ")[0]
    return (first,) if first.isidentifier() else ()


def _fail(name: str | None, message: str) -> UserError:
    return UserError(f"{name} {message}" if name else message, arguments=_argument(name))


def _bound(number: int) -> str:
    return "2**63-1" if number == INT64_MAX else str(number)


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------- whole numbers
def _range_words(minimum: int, maximum: int) -> str:
    low = "0 or more" if minimum == 0 else f"at least {minimum}"
    return low if maximum == INT64_MAX else f"{low} (and at most {maximum})"


def whole_number(value: Any, name: str | None = None, *, minimum: int = 0,
                 maximum: int = INT64_MAX) -> int:
    """An int from ``minimum`` to ``maximum`` (text such as '42', or a Python/numpy int)."""
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        if not _INT_TEXT.fullmatch(text) or len(text) > 40:  # 40: no 4300-digit int() error
            raise _fail(name, f"must be a whole number {_range_words(minimum, maximum)}, got "
                              f"{_shown(value)}")
        number = int(text)
    elif isinstance(value, bool):
        raise _fail(name, f"must be a whole number, got {value!r}")
    else:
        try:
            number = operator.index(value)
        except TypeError:
            raise _fail(name, f"must be a whole number {_range_words(minimum, maximum)}, got "
                              f"{_shown(value)}") from None
    if number < minimum:
        raise _fail(name, f"must be {_range_words(minimum, maximum)}, got {_shown(number)}")
    if number > maximum:
        raise _fail(name, f"must be at most {_bound(maximum)}, got {_shown(number)}")
    return number


def positive_int(value: Any, name: str | None = None, *, maximum: int = INT64_MAX) -> int:
    """1 .. int64 max (sizes, counts of runs, steps, epochs, tiles, rows)."""
    return whole_number(value, name, minimum=1, maximum=maximum)


def non_negative_int(value: Any, name: str | None = None, *, maximum: int = INT64_MAX) -> int:
    """0 .. int64 max (warm-up runs, depths, indices, worker counts)."""
    return whole_number(value, name, minimum=0, maximum=maximum)


def seed(value: Any, name: str | None = None) -> int:
    """0 .. 2**63-1: every RNG we seed (torch, numpy's default_rng, random) takes it."""
    return whole_number(value, name, minimum=0, maximum=SEED_MAX)


def derived_seed(seed_value: int, *parts: int, factor: int = 1000) -> int:
    """``seed * factor + part`` (per epoch, per sample ...) folded into 0 .. 2**63-1, so a
    valid seed never overflows a generator; unchanged for the usual small seeds."""
    s = seed_value
    for part in parts:
        s = s * factor + part
    return s % (SEED_MAX + 1)


def thread_count(value: Any, name: str | None = "threads") -> int:
    """1 .. THREADS_MAX intra-op threads; more than the machine's CPUs is allowed (a sweep may
    want it) but warned about, since the timings are then oversubscribed."""
    import os

    n = whole_number(value, name, minimum=1, maximum=THREADS_MAX)
    cpus = os.cpu_count() or 1
    if n > cpus:
        warnings.warn(f"{n} threads is more than this machine's {cpus} CPUs: threads will "
                      "share cores", LayerscopeWarning, stacklevel=2)
    return n


def width(value: Any, name: str | None = "width") -> int:
    """Table width in characters."""
    return whole_number(value, name, minimum=WIDTH_RANGE[0], maximum=WIDTH_RANGE[1])


# ---------------------------------------------------------------- words
DEVICES = ("cpu", "cuda")
DEVICE_HELP = "cpu (default) or cuda"


def device(value: Any, name: str | None = "device") -> str:
    """Where torch runs: cpu or cuda (whether a GPU is there is the caller's check)."""
    if value not in DEVICES:
        raise UserError(f"unknown {name or 'device'} {_shown(value)}: use cpu or cuda",
                        arguments=_argument(name))
    return str(value)


# onnxruntime's graph optimisation levels, one vocabulary for every command and API function
# that creates a session (profile's optimization, verify's and rewrite's ort-optimization);
# "disable", verify's spelling before the vocabulary was shared, is still accepted
ORT_LEVELS = ("disabled", "basic", "extended", "all")
ORT_LEVEL_ALIASES = {"disable": "disabled"}
ORT_LEVEL_HELP = ("onnxruntime's graph optimisation level: disabled (default: run the graph as "
                  "written), basic, extended or all (disable: the same as disabled)")


def ort_level(value: Any, name: str | None = None) -> str:
    """One of ``ORT_LEVELS`` (an alias becomes its level)."""
    level = ORT_LEVEL_ALIASES.get(value, value) if isinstance(value, str) else value
    if level not in ORT_LEVELS:
        raise _fail(name, f"must be one of {', '.join(ORT_LEVELS)} (disable: the same as "
                          f"disabled), got {_shown(value)}")
    return level


# ---------------------------------------------------------------- floats
def finite_float(value: Any, name: str | None = None, *, minimum: float | None = None,
                 exclusive_minimum: float | None = None, maximum: float | None = None) -> float:
    """A finite float within the bounds (nan and +-inf are refused: they poison JSON/loops)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise _fail(name, f"must be a number, got {_shown(value)}") from None
    if not math.isfinite(number):
        raise _fail(name, f"must be a finite number, got {_shown(value)}")
    if exclusive_minimum is not None and number <= exclusive_minimum:
        low = "positive" if exclusive_minimum == 0 else f"above {exclusive_minimum:g}"
        raise _fail(name, f"must be {low}, got {_shown(value)}")
    if minimum is not None and number < minimum:
        raise _fail(name, f"must be a number of {minimum:g} or more, got {_shown(value)}")
    if maximum is not None and number > maximum:
        raise _fail(name, f"must be at most {maximum:g}, got {_shown(value)}")
    return number


def finite_positive_float(value: Any, name: str | None = None, *,
                          maximum: float | None = None) -> float:
    """> 0 and finite (learning rates, seconds)."""
    return finite_float(value, name, exclusive_minimum=0.0, maximum=maximum)


def finite_non_negative_float(value: Any, name: str | None = None) -> float:
    """>= 0 and finite (tolerances)."""
    return finite_float(value, name, minimum=0.0)


# ---------------------------------------------------------------- byte sizes
_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BYTE_TEXT = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def byte_size(value: Any, name: str | None = None) -> int:
    """A memory size in bytes: '80GB' (10**9, as GPU datasheets count), '80GiB' (2**30),
    '512MiB', a plain number of bytes; positive and within int64."""
    if isinstance(value, bool):
        raise _fail(name, f"must be a size such as 80GB or 80GiB, got {_shown(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = repr(value)
    else:
        text = str(value)
    found = _BYTE_TEXT.fullmatch(text.strip().lower())
    if found is None or found.group(2) not in _BYTE_UNITS or len(found.group(1)) > 40:
        raise _fail(name, f"must be a size such as 80GB, 80GiB or 512MiB (units B, KB, MB, GB, "
                          f"TB, KiB, MiB, GiB, TiB), got {_shown(value)}")
    number = round(float(found.group(1)) * _BYTE_UNITS[found.group(2)])
    if not 1 <= number <= INT64_MAX:
        raise _fail(name, f"must be from 1 byte to 2**63-1 bytes, got {_shown(value)}")
    return number


# ---------------------------------------------------------------- shapes
def check_shape(dims: Any, name: str | None = "inputs", *, itemsize: int = 1
                ) -> tuple[int, ...]:
    """Every dimension 1 .. int64 max and the element count within int64 too; with the
    dtype's ``itemsize``, the bytes as well (torch keeps a tensor's byte size in an int64, even
    on the meta device: a 1 x 2**62 int64 tensor is refused there with an overflow)."""
    try:
        dims = tuple(dims)
    except TypeError:
        raise _fail(name, f"must be a shape (a sequence of dimensions), got {_shown(dims)}") \
            from None
    out = tuple(whole_number(d, f"{name} dimensions" if name else "dimensions", minimum=1)
                for d in dims)
    numel = math.prod(out)
    if numel > INT64_MAX:
        raise _fail(name, f"{'x'.join(map(str, out))} has {numel:.3g} elements, more than "
                          "a tensor can hold (2**63-1)")
    if numel * itemsize > INT64_MAX:
        raise _fail(name, f"{'x'.join(map(str, out))} of {itemsize}-byte values is "
                          f"{numel * itemsize:.3g} bytes, more than a tensor can hold (2**63-1)")
    return out


def _malformed(name: str | None, text: str, why: str) -> UserError:
    return UserError(f"malformed {name} {_shown(text)}: {why}" if name else
                     f"{_shown(text)}: {why}", arguments=_argument(name))


def _parse_dims(shape_text: str) -> tuple[int, ...]:
    """'1x3x224x224' -> (1, 3, 224, 224), 'scalar' -> () (a 0-d tensor); the message says what is
    wrong, not where."""
    shape_text = shape_text.strip()
    if shape_text.lower() == SCALAR:
        return ()
    if not _SHAPE_TEXT.fullmatch(shape_text):
        raise UserError("write dimensions joined by 'x', optionally with a dtype, e.g. "
                        "1x3x224x224 or 1x128:int64, or scalar for a 0-d tensor")
    if any(len(d) > 40 for d in shape_text.split("x")):
        raise UserError("each dimension must be from 1 to 2**63-1")
    return check_shape((int(d) for d in shape_text.split("x")), None)


def shape(text: str, name: str | None = "inputs") -> tuple[tuple[int, ...], str | None]:
    """'1x3x224x224' or '1x128:int64' -> ((1, 3, 224, 224), None) / ((1, 128), 'int64').
    The dtype is returned as written (lower case); the frontend knows which it supports."""
    shape_text, _, dtype = str(text).partition(":")
    try:
        dims = _parse_dims(shape_text)
    except UserError as exc:
        raise _malformed(name, text, str(exc)) from None
    return dims, (dtype.strip().lower() or None)


def named_shape(text: str, name: str | None = "inputs"
                ) -> tuple[str | None, tuple[int, ...], str | None]:
    """ONNX inputs: 'x=1x3x224x224[:dtype]' or an unnamed '1x3x224x224' -> (name, dims, dtype)."""
    text = str(text)
    input_name, eq, rest = text.rpartition("=") if "=" in text else (None, "", text)
    if eq and not (input_name or "").strip():
        raise _malformed(name, text, "the name before '=' is empty")
    shape_text, _, dtype = rest.partition(":")
    try:
        dims = _parse_dims(shape_text)
    except UserError as exc:
        raise _malformed(name, text, f"{exc} (NAME= may be left out for the first input, e.g. "
                                     "x=1x3x224x224)") from None
    return (input_name.strip() if input_name else None), dims, (dtype.strip().lower() or None)


def size_pair(text: str, name: str | None = None, *, low: int = 1,
              high: int = INT64_MAX) -> tuple[int, int]:
    """'1200x800' -> (1200, 800), each from ``low`` to ``high``."""
    parts = str(text).lower().split("x")
    if len(parts) != 2:
        raise _fail(name, f"{_shown(text)}: write WIDTHxHEIGHT, e.g. 1200x800")
    try:
        w, h = (whole_number(p, None, minimum=low, maximum=high) for p in parts)
    except UserError:
        raise _fail(name, f"{_shown(text)}: write WIDTHxHEIGHT, each from {low} to {high}, "
                          "e.g. 1200x800") from None
    return w, h


# ---------------------------------------------------------------- network addresses
def endpoint(value: Any, name: str | None = None) -> str:
    """'HOST:PORT' (a rendezvous endpoint), the port a whole number from 1 to 65535; returned
    stripped, as given otherwise (IPv6 hosts keep their brackets)."""
    text = str(value).strip()
    host, colon, port = text.rpartition(":")
    if not colon or not host.strip() or not port.strip():
        raise _fail(name, f"must be HOST:PORT, e.g. node0:29500, got {_shown(value)}")
    try:
        whole_number(port, None, minimum=1, maximum=65_535)
    except UserError:
        raise _fail(name, f"{_shown(value)}: the port must be a whole number from 1 to 65535, "
                          "e.g. node0:29500") from None
    return text


# ---------------------------------------------------------------- lists
def comma_list(text: str, name: str | None = None, *, item: Callable[..., Any]) -> list[Any]:
    """'1,16,64' -> [item('1'), ...]; empty items are refused, each item says which it was."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items) or not all(items):
        raise _fail(name, f"must be a comma-separated list without empty items, got "
                          f"{_shown(text)}")
    out = []
    for t in items:
        try:
            out.append(item(t, None))
        except UserError as exc:
            raise _fail(name, f"each item {exc}") from None
    return out


# ---------------------------------------------------------------- argparse adapter
def arg(parser: Callable[..., Any], **kwargs: Any) -> Callable[[str], Any]:
    """``type=`` for argparse: the parser's UserError becomes argparse's own one-line error,
    which names the option ("argument --runs: must be a whole number from 1 to ...")."""
    def parse(text: str) -> Any:
        try:
            return parser(text, None, **kwargs)
        except UserError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = parser.__name__
    return parse


def list_arg(item: Callable[..., Any]) -> Callable[[str], list[Any]]:
    """``type=`` for a comma-separated option (--batch-sizes 1,16,64)."""
    return arg(comma_list, item=item)


# A user's regular expression is matched against every layer or node name; a pattern with
# nested repetition such as (a+)+$ backtracks for minutes on a long name. All matches of one
# pattern share this budget (regex's timeout=), then the command stops and says so.
PATTERN_SECONDS = 1.0


class Pattern:
    """A user's regular expression (Python ``re`` syntax, matched by the ``regex`` package with
    a time budget): ``search`` and ``fullmatch`` answer True or False, or raise a one-line
    UserError naming the option once the budget is spent."""

    def __init__(self, text: str, name: str | None = None) -> None:
        import regex

        self.text, self.name = text, name
        try:
            self._rx = regex.compile(text)
        except (regex.error, ValueError, OverflowError, RecursionError) as exc:
            raise _fail(name, f"{_shown(text)} is not a valid regular expression: "
                              f"{exc}") from None
        self._left = PATTERN_SECONDS

    def _match(self, method: str, subject: str) -> bool:
        import time

        start = time.monotonic()
        try:
            return getattr(self._rx, method)(subject, timeout=max(self._left, 0.001)) is not None
        except TimeoutError:
            raise _fail(self.name, f"{_shown(self.text)} takes too long to match (over "
                                   f"{PATTERN_SECONDS:g} s: it backtracks, e.g. nested "
                                   "repetition such as (a+)+); simplify the pattern") from None
        finally:
            self._left -= time.monotonic() - start

    def search(self, subject: str) -> bool:
        return self._match("search", subject)

    def fullmatch(self, subject: str) -> bool:
        return self._match("fullmatch", subject)


def pattern(text: str, name: str | None = None) -> Pattern:
    """A user's regular expression, compiled: an invalid one is a one-line UserError."""
    return Pattern(text, name)
