"""A validator compiled from ``report.schema.json``: the schema's keywords become Python
closures once, so checking a result is one pass over it, linear in its size (jsonschema's
general validator spent about 5 ms on each layer row: 20,000 rows took minutes).

It covers the keywords the generated schema uses (``type``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``enum``, ``const``, ``pattern``, ``minimum``,
``exclusiveMinimum``, ``maximum``, ``anyOf``, ``allOf``, ``if``/``then``, ``$ref`` to
``#/$defs/...``; annotations such as ``description`` are ignored) with jsonschema's meaning
and messages, so ``errors()`` reads as before; a keyword it does not know raises at compile
time (a schema change must come here too). One difference, on purpose: a bounded number
(``minimum``, ``exclusiveMinimum`` or ``maximum``) must be finite. JSON has no NaN or
infinity; Python's ``json`` reads ``NaN`` and ``Infinity`` anyway, and jsonschema lets NaN
through every bound (NaN < 0 is false), so a result whose timings hold NaN was read as valid
and failed later as "a bug in layerscope".

An error is (path, message, context): ``path`` the keys from the checked value down, ``context``
the errors of each branch of a failed ``anyOf`` (jsonschema's ``error.context``).
"""
from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable
from typing import Any

Error = tuple[list[Any], str, list[Any] | None]
Check = Callable[[Any], list[Error] | None]  # None when valid

IGNORED = ("description", "title", "$schema", "$id", "$defs", "$comment", "examples", "default")


def _is_number(x: Any) -> bool:
    t = type(x)
    return t is float or t is int or (t is not bool and isinstance(x, numbers.Number))


def _is_integer(x: Any) -> bool:
    t = type(x)
    if t is int:
        return True
    if t is bool:
        return False
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


EXACT = {"object": dict, "array": list, "string": str, "null": type(None), "boolean": bool,
         "number": float, "integer": int}
# what each JSON type is in Python, as jsonschema reads it (bool is not a number; 1.0 is an
# integer); the exact types json.load makes are tested first
TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda x: type(x) is dict or isinstance(x, dict),
    "array": lambda x: type(x) is list or isinstance(x, list),
    "string": lambda x: type(x) is str or isinstance(x, str),
    "boolean": lambda x: x is True or x is False,
    "null": lambda x: x is None,
    "number": _is_number,
    "integer": _is_integer,
}


def _equal(a: Any, b: Any) -> bool:
    """jsonschema's equality: True is not 1, False is not 0, inside lists and dicts too."""
    if a is b:
        return True
    if isinstance(a, str) or isinstance(b, str):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _under(key: Any, errors: list[Error]) -> list[Error]:
    for path, _, _ in errors:
        path.insert(0, key)
    return errors


BOUNDS = ("minimum", "exclusiveMinimum", "maximum")


def _outside(x: Any, low: Any, high: Any, above: Any) -> list[Error]:
    """The bound a finite number ``x`` breaks, with jsonschema's message ([] when none)."""
    if low is not None and x < low:
        return [([], f"{x!r} is less than the minimum of {low!r}", None)]
    if above is not None and x <= above:
        return [([], f"{x!r} is less than or equal to the minimum of {above!r}", None)]
    if high is not None and x > high:
        return [([], f"{x!r} is greater than the maximum of {high!r}", None)]
    return []


def _all(checks: list[Check]) -> Check:
    """Every check in turn, their errors together (None when all pass)."""
    def check(x: Any) -> list[Error] | None:
        out = None
        for c in checks:
            found = c(x)
            if found:
                out = found if out is None else out + found
        return out
    return check


def _each(entries: Any, check_of: Callable[[Any], Check | None]) -> list[Error] | None:
    """Each (key, value) checked by ``check_of(key)`` (None: not checked), its errors under
    its key."""
    out = None
    for key, value in entries:
        c = check_of(key)
        if c is not None:
            found = c(value)
            if found:
                found = _under(key, found)
                out = found if out is None else out + found
    return out


class Compiler:
    """The schema's checks, each definition compiled once (``$ref`` cycles go through a
    lookup at check time)."""

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        self.defs: dict[str, Check] = {}
        self.busy: set[str] = set()  # definitions being compiled
        self.root = self.compile(schema)

    def ref(self, ref: str) -> Check:
        prefix = "#/$defs/"
        if not ref.startswith(prefix):
            raise ValueError(f"schema check: only {prefix}... references are compiled, not {ref}")
        name = ref[len(prefix):]
        if name not in self.schema.get("$defs", {}):
            raise ValueError(f"schema check: no definition {name!r}")
        defs, busy = self.defs, self.busy
        if name in busy:  # a reference inside its own definition: looked up when checked
            return lambda x: defs[name](x)
        if name not in defs:
            busy.add(name)
            defs[name] = self.compile(self.schema["$defs"][name])
            busy.discard(name)
        return defs[name]

    def compile(self, s: Any) -> Check:
        if s is True or s == {}:
            return lambda x: None
        if s is False:
            return lambda x: [([], f"False schema does not allow {x!r}", None)]
        unknown = set(s) - set(IGNORED) - set(self.KEYWORDS) - set(BOUNDS) - {"then"}
        if unknown:
            raise ValueError(f"schema check: keyword(s) {sorted(unknown)} are not compiled")
        fused = self._number(s) or self._record(s)
        if fused is not None:
            return fused
        checks: list[Check] = []
        bounded = False
        for key, value in s.items():  # jsonschema's order: the schema's own
            if key in BOUNDS:
                if not bounded:
                    checks.append(self._bounds(s.get("minimum"), s.get("maximum"),
                                               s.get("exclusiveMinimum")))
                    bounded = True
            elif key == "then" or key in IGNORED:
                continue
            else:
                checks.append(self.KEYWORDS[key](self, value, s))
        if len(checks) == 1:
            return checks[0]
        if len(checks) == 2:
            first, second = checks

            def both(x: Any) -> list[Error] | None:
                a, b = first(x), second(x)
                if a is None and b is None:
                    return None
                return (a or []) + (b or [])
            return both

        return _all(checks)

    def _number(self, s: dict[str, Any]) -> Check | None:
        """One closure for the commonest node, a number or integer, maybe null, maybe bounded
        (``{"type": "integer", "minimum": 0}``, a timing's ``{"type": "number", "minimum":
        0, "maximum": ...}``): its type, finiteness and bounds in one call, with the messages
        the separate keywords give."""
        keys = set(s) - set(IGNORED)
        types = s.get("type")
        names = [types] if isinstance(types, str) else list(types or [])
        if not keys <= {"type", *BOUNDS} or "type" not in keys \
                or not set(names) <= {"number", "integer", "null"} \
                or not {"number", "integer"} & set(names):
            return None
        nullable, number = "null" in names, "number" in names
        text = ", ".join(repr(t) for t in names)
        low, high, above = s.get("minimum"), s.get("maximum"), s.get("exclusiveMinimum")
        bounded = low is not None or high is not None or above is not None
        finite = math.isfinite

        def bounds(x: Any) -> list[Error]:
            if not finite(x):
                return [([], f"{x!r} is not a finite number", None)] if bounded else []
            return _outside(x, low, high, above)

        def check(x: Any) -> list[Error] | None:
            t = type(x)
            if t is int or (t is float and (number or x.is_integer())):
                if t is float and not finite(x):
                    return bounds(x) or None
                if (low is not None and x < low) or (high is not None and x > high) \
                        or (above is not None and x <= above):
                    return bounds(x)
                return None
            if x is None and nullable:
                return None
            if number and _is_number(x) or not number and _is_integer(x):
                return bounds(x) or None
            wrong: list[Error] = [([], f"{x!r} is not of type {text}", None)]
            # a number of the wrong kind (2.5 for an integer) is still held to the bounds
            return wrong + bounds(x) if _is_number(x) else wrong
        return check

    def _record(self, s: dict[str, Any]) -> Check | None:
        """One closure for an object node (a record): ``{"type": "object", "required": [...],
        "properties": {...}, "additionalProperties": ...}``, each keyword optional but the
        type; the errors at the object itself in the schema's order of its keywords."""
        keys = [k for k in s if k not in IGNORED]
        if s.get("type") != "object" or \
                not set(keys) <= {"type", "required", "properties", "additionalProperties"}:
            return None
        required = list(s.get("required") or [])
        props = {name: self.compile(sub) for name, sub in (s.get("properties") or {}).items()}
        extra = s.get("additionalProperties", True)
        rest = self.compile(extra) if isinstance(extra, dict) else None
        closed = extra is False
        required_first = "required" not in keys or "additionalProperties" not in keys or \
            keys.index("required") < keys.index("additionalProperties")
        get = props.get

        def check(x: Any) -> list[Error] | None:
            if type(x) is not dict and not isinstance(x, dict):
                return [([], f"{x!r} is not of type 'object'", None)]
            out = None
            for name, value in x.items():  # errors under different keys: errors() sorts
                c = get(name)
                if c is None:
                    if rest is None:
                        continue
                    c = rest
                found = c(value)
                if found:
                    found = _under(name, found)
                    out = found if out is None else out + found
            own: list[Error] = []
            if required:
                own += [([], f"{n!r} is a required property", None)
                        for n in required if n not in x]
            if closed:
                unknown = sorted((k for k in x if k not in props), key=str)
                if unknown:
                    verb = "was" if len(unknown) == 1 else "were"
                    listed = ", ".join(repr(k) for k in unknown)
                    message = f"Additional properties are not allowed ({listed} {verb} unexpected)"
                    own = own + [([], message, None)] if required_first else \
                        [([], message, None)] + own
            if own:
                out = own if out is None else own + out
            return out
        return check

    # ---- keywords -----------------------------------------------------------------------
    def _type(self, types: Any, s: dict[str, Any]) -> Check:
        names = [types] if isinstance(types, str) else list(types)
        tests = [TYPES[t] for t in names]
        text = ", ".join(repr(t) for t in names)
        # the exact Python types json.load makes for them: one set lookup in the common case
        exact = frozenset(EXACT[t] for t in names if t in EXACT)
        if len(tests) == 1:
            test = tests[0]
            return lambda x: None if type(x) in exact or test(x) else [
                ([], f"{x!r} is not of type {text}", None)]
        return lambda x: None if type(x) in exact or any(t(x) for t in tests) else [
            ([], f"{x!r} is not of type {text}", None)]

    def _bounds(self, low: Any, high: Any, above: Any = None) -> Check:
        def check(x: Any) -> list[Error] | None:
            if not _is_number(x):
                return None
            if isinstance(x, float) and not math.isfinite(x):
                return [([], f"{x!r} is not a finite number", None)]
            return _outside(x, low, high, above) or None
        return check

    def _properties(self, props: dict[str, Any], s: dict[str, Any]) -> Check:
        # the instance's keys are walked (a row holds fewer than its schema names); errors
        # under different keys have different paths, which errors() sorts
        compiled = {name: self.compile(sub) for name, sub in props.items()}
        get = compiled.get

        def check(x: Any) -> list[Error] | None:
            return _each(x.items(), get) if isinstance(x, dict) else None
        return check

    def _required(self, names: list[str], s: dict[str, Any]) -> Check:
        def check(x: Any) -> list[Error] | None:
            if not isinstance(x, dict):
                return None
            missing: list[Error] = [([], f"{n!r} is a required property", None)
                                    for n in names if n not in x]
            return missing or None
        return check

    def _additionalProperties(self, extra: Any, s: dict[str, Any]) -> Check:
        known = set(s.get("properties") or {})
        if isinstance(extra, dict):
            c = self.compile(extra)

            def check(x: Any) -> list[Error] | None:
                if not isinstance(x, dict):
                    return None
                return _each(x.items(), lambda k: None if k in known else c)
            return check
        if extra:
            return lambda x: None

        def closed(x: Any) -> list[Error] | None:
            if not isinstance(x, dict):
                return None
            extras = sorted((k for k in x if k not in known), key=str)
            if not extras:
                return None
            verb = "was" if len(extras) == 1 else "were"
            listed = ", ".join(repr(k) for k in extras)
            return [([], f"Additional properties are not allowed ({listed} {verb} unexpected)",
                     None)]
        return closed

    def _items(self, items: Any, s: dict[str, Any]) -> Check:
        c = self.compile(items)

        def check(x: Any) -> list[Error] | None:
            return _each(enumerate(x), lambda _: c) if isinstance(x, list) else None
        return check

    def _enum(self, values: list[Any], s: dict[str, Any]) -> Check:
        return lambda x: None if any(_equal(v, x) for v in values) else [
            ([], f"{x!r} is not one of {values!r}", None)]

    def _const(self, value: Any, s: dict[str, Any]) -> Check:
        return lambda x: None if _equal(x, value) else [([], f"{value!r} was expected", None)]

    def _pattern(self, pattern: str, s: dict[str, Any]) -> Check:
        rx = re.compile(pattern)
        return lambda x: None if not isinstance(x, str) or rx.search(x) else [
            ([], f"{x!r} does not match {pattern!r}", None)]

    def _anyOf(self, subs: list[Any], s: dict[str, Any]) -> Check:
        compiled = [self.compile(sub) for sub in subs]
        # ``X | None`` (anyOf [X, {"type": "null"}]): None is valid at once
        nullable = any(sub == {"type": "null"} for sub in subs)

        def check(x: Any) -> list[Error] | None:
            if x is None and nullable:
                return None
            context: list[Error] = []
            for c in compiled:
                found = c(x)
                if not found:
                    return None
                context += found
            return [([], f"{x!r} is not valid under any of the given schemas", context)]
        return check

    def _allOf(self, subs: list[Any], s: dict[str, Any]) -> Check:
        return _all([self.compile(sub) for sub in subs])

    def _if_(self, condition: Any, s: dict[str, Any]) -> Check:
        test = self.compile(condition)
        then = self.compile(s["then"]) if "then" in s else (lambda x: None)
        return lambda x: then(x) if not test(x) else None

    def _ref(self, ref: str, s: dict[str, Any]) -> Check:
        return self.ref(ref)

    KEYWORDS: dict[str, Callable[[Compiler, Any, dict[str, Any]], Check]] = {
        "type": _type, "properties": _properties, "required": _required,
        "additionalProperties": _additionalProperties, "items": _items, "enum": _enum,
        "const": _const, "pattern": _pattern, "anyOf": _anyOf, "allOf": _allOf, "if": _if_,
        "$ref": _ref}
