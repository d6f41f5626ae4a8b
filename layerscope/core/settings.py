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
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from layerscope.core.errors import UserError

OPTION = "option"  # the metadata key holding a field's option spec


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """How one setting is given and checked (see the module docstring).

    ``shared``: the name of an option every command declares the same way
    (``cli.common.SHARED_OPTIONS``, e.g. ``device``); the CLI uses that declaration.
    ``reads``: the value names a file the command reads (no output may replace it).
    ``folder``: the value names a folder the command creates (its outputs may go inside it).
    ``cli``: False for a setting the Python API offers and the command line does not.
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
    shared: str | None = None
    cli: bool = True

    def bounds(self) -> dict[str, Any]:
        return {} if self.maximum is None else {"maximum": self.maximum}


def option(default: Any = None, help: str | None = None, **spec: Any) -> Any:
    """A settings field with ``default`` and its ``OptionSpec`` (keyword arguments)."""
    return dataclasses.field(default=default, metadata={OPTION: OptionSpec(help=help, **spec)})


def spec_of(f: dataclasses.Field[Any]) -> OptionSpec | None:
    return f.metadata.get(OPTION)


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
        if spec is None or (value is None and f.default is None):
            continue
        if spec.choices is not None and value not in spec.choices:
            raise UserError(f"unknown {f.name} {value!r}: use {one_of(spec.choices)}",
                            arguments=f.name)
        if spec.parse is not None:
            setattr(settings, f.name, spec.parse(value, f.name, **spec.bounds()))
