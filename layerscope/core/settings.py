"""A command's settings declared once, as the fields of one dataclass.

Each field's metadata (``option(...)``) says what the command line needs to offer it and what a
value must be: its help, a parser from ``core.values`` (with its ``maximum``), its choices, a
flag when it is not the field's name (``evaluate`` is ``--no-eval``), its argparse group. From
that one declaration:

- the settings class validates itself (``check_settings`` in its ``__post_init__``): the Python
  API refuses a bad value in one line naming the argument ("batch_size must be at least 1"),
  the CLI the same line naming the flag (``UserError.arguments``, translated by ``cli.main``);
- the CLI builds the argparse options and reads them back into the class
  (``cli.common.add_settings``, ``cli.common.settings_from``).

So a new setting is one field; nothing else repeats its name, default or rules.

A command's settings class derives from ``Settings`` (a ``kw_only`` dataclass): its
``__post_init__`` checks every field, then ``check()``, the rules between fields (``--loop``
leaves out ``--input``); ``Settings.of(settings, **overrides)`` is how an entry point takes
both a settings object and keyword arguments; ``recorded()`` is what the saved result keeps
under ``settings`` (every field but those marked ``record=False``: the model object, input
tensors), so a new option is saved with no more code; ``flags(**overrides)`` turns overrides
back into the command line's words (an ablation variant, an advice's command), from the same
declarations. Options shared by several commands are declared once in ``core.options``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from layerscope.core.errors import UserError

OPTION = "option"  # the metadata key holding a field's option spec


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """How one setting is given and checked (see the module docstring).

    ``reads``: the value names a file the command reads (no output may replace it).
    ``folder``: the value names a folder the command creates (its outputs may go inside it).
    ``cli``: False for a setting the Python API offers and the command line does not.
    ``nargs``: argparse's nargs ("+", "*", argparse.REMAINDER); ``append``: the option may be
    repeated, each value appended to a list. ``exclusive``: the name of a group of options of
    which one at most may be given (``--runs`` or ``--min-time``). ``consts``: (flag, value)
    pairs, each a flag that sets the field to its value (``--dynamo`` / ``--legacy`` set
    ``exporter``), offered instead of a flag of the field's own; a third item is that flag's
    help (default: the field's). ``negatable``: a bool offered
    as ``--x`` and ``--no-x``. ``record``: False for a field the saved result leaves out of its
    settings (a live object: the model, input tensors; or one the result records elsewhere).
    """
    help: str | None = None
    parse: Callable[..., Any] | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    flag: str | None = None
    metavar: str | None = None
    group: str | None = None
    positional: bool = False
    reads: bool = False
    folder: bool = False
    cli: bool = True
    nargs: Any = None
    append: bool = False
    exclusive: str | None = None
    consts: tuple[tuple[Any, ...], ...] = ()
    negatable: bool = False
    record: bool = True

    def bounds(self) -> dict[str, Any]:
        return {} if self.maximum is None else {"maximum": self.maximum}


REQUIRED = dataclasses.MISSING  # ``option(REQUIRED)``: a field without a default


def option(default: Any = None, help: str | None = None, **spec: Any) -> Any:
    """A settings field with ``default`` (``REQUIRED``: none) and its ``OptionSpec`` (keyword
    arguments). A list default is copied for each object."""
    metadata = {OPTION: OptionSpec(help=help, **spec)}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def spec_of(f: dataclasses.Field[Any]) -> OptionSpec | None:
    return f.metadata.get(OPTION)


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default (a fresh list for a list default; ``REQUIRED`` when it has none)."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def flag_of(f: dataclasses.Field[Any]) -> str:
    """The option that sets a field on the command line (``batch_size``: ``--batch-size``)."""
    spec = spec_of(f)
    return (spec.flag if spec is not None and spec.flag else None) \
        or "--" + f.name.replace("_", "-")


def one_of(choices: Sequence[str]) -> str:
    """'a, b or c'."""
    words = [str(c) for c in choices]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def check_settings(settings: Any) -> None:
    """Validate every field of a settings dataclass by its spec, in declaration order; parsed
    values replace the given ones (``"3"`` becomes 3). None is "not set" for a field whose
    default is None. Raises a one-line UserError naming the field (its ``arguments``)."""
    for f in dataclasses.fields(settings):
        spec = spec_of(f)
        value = getattr(settings, f.name)
        if spec is None or (value is None and default_of(f) is None):
            continue
        if spec.parse is not None and (spec.append or spec.nargs in ("+", "*")) \
                and isinstance(value, (list, tuple)):
            setattr(settings, f.name, [_one(spec, f.name, v) for v in value])
        else:
            setattr(settings, f.name, _one(spec, f.name, value))


def _one(spec: OptionSpec, name: str, value: Any) -> Any:
    """One value parsed and checked against its choices (the parser may map an alias onto a
    choice: ``disable`` is ``disabled``). Choices bound values given as text; an object the
    API takes in their place (a torch.dtype for ``float16``) is the entry point's to check."""
    if spec.parse is not None:
        value = spec.parse(value, name, **spec.bounds())
    if spec.choices is not None and isinstance(value, str) and value not in spec.choices:
        raise UserError(f"unknown {name} {value!r}: use {one_of(spec.choices)}",
                        arguments=name)
    return value


S = TypeVar("S", bound="Settings")


class Settings:
    """Base of a command's settings dataclass (declare it ``@dataclasses.dataclass(kw_only=True)``;
    see the module docstring). Construction checks every value, then ``check()``."""

    def __post_init__(self) -> None:
        check_settings(self)
        self.check()

    def check(self) -> None:
        """The rules between fields (one UserError naming the fields); none by default."""

    @classmethod
    def of(cls: type[S], settings: S | None = None, **overrides: Any) -> S:
        """``settings`` (default: the defaults) with ``overrides`` applied, checked again."""
        if settings is None:
            return cls(**overrides)
        if not isinstance(settings, cls):
            raise UserError(f"settings must be a {cls.__name__}, not "
                            f"{type(settings).__name__}", arguments="settings")
        return dataclasses.replace(settings, **overrides) if overrides else settings  # type: ignore[type-var]

    def recorded(self) -> dict[str, Any]:
        """What the saved result keeps under ``settings``: every field but those declared
        ``record=False``, by name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if (spec := spec_of(f)) is None or spec.record}

    def given(self) -> dict[str, Any]:
        """The settings asked for: each option field whose value is not its default (nor
        None, nor an empty list), by name, in declaration order. ``cls.flags(**s.given())``
        are the command-line words that ask for them."""
        return {f.name: value for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if spec_of(f) is not None and (value := getattr(self, f.name)) is not None
                and value != [] and value != default_of(f)}

    @classmethod
    def flags(cls, **overrides: Any) -> list[str]:
        """The command-line words that set ``overrides`` (``num_workers=2`` ->
        ``--num-workers 2``; a bool its flag; a list one flag per item when the option is
        repeated), in declaration order: an ablation variant or an advice's command written
        from the same declarations as the parser."""
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(overrides) - set(fields))
        if unknown:
            raise UserError(f"{cls.__name__} has no setting {', '.join(unknown)}",
                            arguments=tuple(unknown))
        words: list[str] = []
        for name, f in fields.items():
            if name not in overrides:
                continue
            words += _words(f, overrides[name])
        return words


def _words(f: dataclasses.Field[Any], value: Any) -> list[str]:
    spec = spec_of(f) or OptionSpec()
    for flag, const, *_ in spec.consts:
        if value == const:
            return [flag]
    flag = flag_of(f)
    if isinstance(default_of(f), bool):
        if bool(value) == default_of(f):
            return []
        if spec.negatable and not value:
            return ["--no-" + flag.removeprefix("--")]
        return [flag]
    if value is None:
        return []
    if isinstance(value, (list, tuple)) and (spec.append or spec.nargs):
        if spec.append:
            return [w for v in value for w in _valued(flag, v)]
        return [flag, *map(str, value)]
    if isinstance(value, (list, tuple)):  # one option taking a list: comma-separated (1,16,64)
        return _valued(flag, ",".join(map(str, value)))
    return _valued(flag, value)


def _valued(flag: str, value: Any) -> list[str]:
    """``flag value``; ``flag=value`` when the value begins with '-', which the parser would
    otherwise take for an option of its own (a data folder named --download)."""
    text = str(value)
    return [f"{flag}={text}"] if text.startswith("-") else [flag, text]


def of_call(cls: type[S], settings: S | None, overrides: dict[str, Any], what: str,
            **given: Any) -> S:
    """The settings of an entry point's call, ``f(model, inputs, settings=None, **overrides)``:
    ``settings`` (a ``cls``; None: the defaults) with the positional arguments ``given`` that
    are not None (``model=model, inputs=inputs``) and the keyword ``overrides``. Without
    ``settings``, the first of ``given`` is required: "give the model to WHAT"."""
    overrides = {**overrides, **{k: v for k, v in given.items() if v is not None}}
    first = next(iter(given), None)
    if settings is None and first is not None and first not in overrides:
        raise UserError(f"give the {first} to {what}", arguments=first)
    return cls.of(settings, **overrides)
