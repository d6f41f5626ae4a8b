"""Pieces every subcommand shares: the parser, output writing and input options."""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Callable

from layerscope.core.errors import UserError
from layerscope.core.io import STDOUT, outputs
from layerscope.core.settings import REQUIRED, default_of, flag_of, spec_of
from layerscope.core.values import (
    WIDTH_RANGE,
    arg,
    width,
)
from layerscope.renderers import FORMATS, format_of, pick_format, render

OPTION_FLAGS = "option_flags"  # the attribute holding the command's dest -> option table
INPUT_FILES = "input_files"  # the attribute listing the dests that name files the command reads


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one line and exit code 2, and leaves the
    command's dest -> option table on the namespace (``in_flags`` reads it). A command that
    runs a script names the positional after which everything is the script's
    (``script_after``)."""

    script_rest: tuple[str, Callable[[str], bool]] | None = None

    def script_after(self, rest: str, is_script: Callable[[str], bool]) -> None:
        """When the command's first positional argument names a script (``is_script``), every
        word after it is the script's, options included (``memory train.py --batch-size 64``
        gives ``--batch-size 64`` to the script, as ``python train.py`` would), stored in
        ``rest``; the command's own options go before it."""
        self.script_rest = (rest, is_script)

    def parse_known_args(self, args=None, namespace=None):  # noqa: D401 - argparse API
        args = list(sys.argv[1:] if args is None else args)
        self._argv = args  # error() quotes a value
        script_args = None
        if self.script_rest is not None:
            at = first_positional(self, args)
            if at is not None and self.script_rest[1](args[at]):
                args, script_args = args[:at + 1], args[at + 1:]
        namespace, extras = super().parse_known_args(args, namespace)
        if script_args is not None and self.script_rest is not None:
            setattr(namespace, self.script_rest[0], script_args)
        flags = dict(getattr(namespace, OPTION_FLAGS, None) or {})
        for action in self._actions:  # a subcommand's own options were added first: they win
            if action.option_strings and action.dest != argparse.SUPPRESS:
                longest = max(action.option_strings, key=len)
                flags.setdefault(action.dest, longest)
        setattr(namespace, OPTION_FLAGS, flags)
        # every positional argument names something the command reads (a model, a saved
        # result, a script); options that do are declared with ``input_options``
        inputs = set(getattr(namespace, INPUT_FILES, None) or ())
        inputs.update(a.dest for a in self._actions if not a.option_strings
                      and not isinstance(a, argparse._SubParsersAction))
        setattr(namespace, INPUT_FILES, tuple(sorted(inputs)))
        return namespace, extras

    def error(self, message):  # noqa: D401 - argparse API
        # a core.values parser's message reads as a sentence about the option:
        # "argument --runs: must be at least 1, got 0" -> "--runs must be at least 1, got 0"
        option, sep, rest = message.partition(": ")
        flag = option.removeprefix("argument ").split("/")[-1]
        if option.startswith("argument -") and rest.startswith(("must ", "each item ")):
            message = f"{flag} {rest}"
        elif option.startswith("argument -") and rest.startswith("unknown "):
            # "argument --device: unknown device 'tpu': ..." -> "unknown --device 'tpu': ..."
            word = rest.split()[1]
            message = f"unknown {flag}{rest[len('unknown ') + len(word):]}"
        elif option.startswith("argument -") and rest.startswith("expected one argument"):
            # argparse reads a value such as -1GB as an option: say how to give it
            flags = option.removeprefix("argument ").split("/")
            argv = getattr(self, "_argv", [])
            after = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in flags]
            if after and after[0].startswith("-"):
                message = (f"{flags[-1]} expected a value, and {after[0]} reads as an option: "
                           f"give it as {flags[-1]}={after[0]}")
        raise UserError(f"{self.prog}: {message} (see --help)")


def first_positional(parser: argparse.ArgumentParser, args: list[str]) -> int | None:
    """The index in ``args`` of the first positional word as ``parser`` reads them: options
    and the values they take are skipped (``--mode training``, ``--mode=training``, ``-oFILE``,
    a unique prefix such as ``--batch 8``); ``--`` ends the options. None when there is none."""
    options = parser._option_string_actions
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return i + 1 if i + 1 < len(args) else None
        if not word.startswith("-") or word == "-":
            return i
        name, attached = word.partition("=")[0], "=" in word
        action = options.get(name)
        if action is None and name.startswith("--"):
            matches = {options[o] for o in options if o.startswith(name)}
            action = matches.pop() if len(matches) == 1 else None
        elif action is None and len(word) > 2:  # -oFILE: a short option with its value
            action, attached = options.get(word[:2]), True
        i += 1
        if action is not None and not attached:
            takes = action.nargs
            if takes is None:
                i += 1
            elif isinstance(takes, int):
                i += takes
            elif takes == "?" and i < len(args) and not args[i].startswith("-"):
                i += 1
            elif takes in ("*", "+"):
                while i < len(args) and not args[i].startswith("-"):
                    i += 1
    return None


# the public API's argument names that differ from the dest of the option setting them
API_NAMES = {"inputs": "input", "batches": "runs", "path": "output", "dataset": "loop",
             "optimization": "ort_optimization"}


def in_flags(exc: UserError, args: argparse.Namespace) -> UserError:
    """The CLI's words for an error the public API raised in its own: each argument the
    message names (``UserError.arguments``; its first whole-word occurrence) becomes the
    option that sets it (batch_size -> --batch-size), found in argparse's dest -> option table
    of the command that ran. Arguments the command has no option for stay as they are."""
    flags = getattr(args, OPTION_FLAGS, None) or {}
    message = str(exc)
    changed = False
    for name in exc.arguments:
        flag = flags.get(name) or flags.get(API_NAMES.get(name, ""))
        if flag:
            word = re.compile(rf"(?<![\w.'\"-]){re.escape(name)}(?![\w'\"-])")
            message, n = word.subn(flag, message, count=1)
            changed = changed or n > 0
    return UserError(message) if changed else exc


def input_options(p: argparse.ArgumentParser, *dests: str) -> None:
    """Declare options naming files the command reads (``predict --image``): no output of the
    command may be one of them (see ``declare_inputs``)."""
    p.set_defaults(**{INPUT_FILES: (*(p.get_default(INPUT_FILES) or ()), *dests)})


OUTPUT_KIND = "output_kind"  # (what, suffixes) of a command whose -o is one kind of file


def add_file_output(p: argparse.ArgumentParser, what: str, suffixes: tuple[str, ...],
                    **kwargs) -> None:
    """-o/--output of a command that writes one kind of file (arrays, an ONNX graph, an HTML
    page), not a result in a chosen format: a name whose extension says a format
    (``-o acts.csv``) is refused before any work, since -o FILE.csv means CSV on every
    command (``check_output_kind``)."""
    p.add_argument("-o", "--output", **kwargs)
    p.set_defaults(**{OUTPUT_KIND: (what, suffixes)})


def check_output_kind(args) -> None:
    kind = getattr(args, OUTPUT_KIND, None)
    path = getattr(args, "output", None)
    if not kind or not isinstance(path, str) or path == STDOUT:
        return
    what, suffixes = kind
    ext = os.path.splitext(path)[1].lower()
    if format_of(path) is not None and ext not in suffixes:
        raise UserError(f"-o {path}: {args.command} writes {what} ({', '.join(suffixes)}), and "
                        f"{ext} names another format; give a name ending in {suffixes[0]}")


OUTPUT_OPTIONS = (("-o", "output"), ("--html", "html"), ("--plot", "plot"), ("--trace", "trace"))


def _paths(value) -> list[str]:
    """The file names a model spec or an input value may stand for: ``hf:DIR/config.json``,
    ``file.py:factory`` and lists (``report A.json B.json``, ``run SCRIPT ARGS``)."""
    if isinstance(value, (list, tuple)):
        return [p for item in value for p in _paths(item)]
    if not isinstance(value, str) or not value:
        return []
    names = [value, value.removeprefix("hf:")]
    if ":" in value:
        names.append(value.rpartition(":")[0])
    return names


def declare_inputs(args) -> None:
    """Tell the output transaction which files the command reads, then refuse at once an -o,
    --html, --plot or --trace that is one of them (``report A.json -o A.json`` would replace
    its own input): before any work, and again when any output is written. An -o whose
    extension names a format the command does not write is refused too
    (``check_output_kind``)."""
    from layerscope.core.io import check_not_input, current

    tx = current()
    if tx is not None:
        for dest in getattr(args, INPUT_FILES, None) or ():
            tx.reads(*_paths(getattr(args, dest, None)))
        for option, attr in OUTPUT_OPTIONS:
            path = getattr(args, attr, None)
            if isinstance(path, str):
                check_not_input(path, option)
    check_output_kind(args)


def add_settings(p: argparse.ArgumentParser, cls, group=None) -> None:
    """The options of a settings dataclass (``core.settings``), in field order: those of
    ``group`` (its title, None: the fields in no group) added to ``group``'s argparse group
    when given one, else to ``p``. Each option's dest is the field's name; a field without a
    default is a required positional argument."""
    into = p
    if group is not None:
        into = next((g for g in p._action_groups if g.title == group), None) \
            or p.add_argument_group(group)
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        if spec is None or not spec.cli or spec.group != group:
            continue
        where = _exclusive(p, into, spec.exclusive) if spec.exclusive else into
        _add_field(p, where, f, spec)
        if spec.reads:
            input_options(p, f.name)


def add_all_settings(p: argparse.ArgumentParser, cls) -> None:
    """Every option of a settings dataclass: those in no group, then each group's, in the
    order the groups first appear among the fields."""
    groups = [None]
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        if spec is not None and spec.group not in groups:
            groups.append(spec.group)
    for group in groups:
        add_settings(p, cls, group)


def _exclusive(p, into, name: str):
    """The mutually exclusive group ``name`` of parser ``p`` (made in ``into`` on first use)."""
    groups = p.__dict__.setdefault("_exclusive_groups", {})
    if name not in groups:
        groups[name] = into.add_mutually_exclusive_group()
    return groups[name]


def _add_field(p, into, f, spec) -> None:
    default = default_of(f)
    kwargs: dict = {"help": spec.help}
    if default is not REQUIRED:
        kwargs["default"] = default
    elif not spec.positional:
        kwargs["required"] = True  # an option without a default (plan --gpus)
    if spec.consts:
        which = into if spec.exclusive else p.add_mutually_exclusive_group()
        for flag, value, *help in spec.consts:  # a flag's own help, if it has one
            which.add_argument(flag, dest=f.name, action="store_const", const=value,
                               **{**kwargs, "help": help[0] if help else spec.help})
        return
    if isinstance(default, bool):
        kwargs["action"] = (argparse.BooleanOptionalAction if spec.negatable
                            else "store_false" if default else "store_true")
    else:
        if spec.parse is not None:
            kwargs["type"] = arg(spec.parse, **spec.bounds())
        if spec.choices is not None:
            kwargs["choices"] = spec.choices
        if spec.metavar:
            kwargs["metavar"] = spec.metavar
        if spec.append:
            kwargs["action"] = "append"
        if spec.nargs is not None:
            kwargs["nargs"] = spec.nargs
    if spec.positional:
        if default is not REQUIRED:
            kwargs.setdefault("nargs", "?")
        into.add_argument(f.name, **kwargs)
    elif spec.folder:
        add_output_folder(p, flag_of(f), dest=f.name, **kwargs)
    else:
        into.add_argument(flag_of(f), dest=f.name, **kwargs)


def settings_from(cls, args: argparse.Namespace):
    """The settings dataclass ``cls`` made from the options ``add_settings`` declared (it
    validates itself: a UserError names the field, which cli.main shows as the flag)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                  if (spec := spec_of(f)) is not None and spec.cli})


def add_output(p: argparse.ArgumentParser) -> None:
    add_format_options(p, FORMATS, "table (default), json, csv, html or png (needs -o); default "
                                   "from -o's extension",
                       width_help=f"table width in characters ({WIDTH_RANGE[0]} to "
                                  f"{WIDTH_RANGE[1]})")
    add_report_files(p)


def add_format_options(p: argparse.ArgumentParser, formats: tuple[str, ...], help: str,
                       width_help: str = "table width in characters") -> None:
    """--format (one of ``formats``; default: -o's extension), -o FILE and --width: how a
    command's result is written. ``add_output`` adds the report files to them; a command
    that writes only some formats (diff, compare) checks the one picked with
    ``result_format``."""
    add_format(p, formats, None, help)
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write here (atomically) instead of standard output")
    add_width(p, width_help)


def add_format(p: argparse.ArgumentParser, formats: tuple[str, ...] = ("table", "json"),
               default: str | None = "table", help: str | None = None) -> None:
    """--format, one of ``formats``: how a command writes its result (the one declaration
    of the option; ``add_format_options`` adds -o and --width to it)."""
    p.add_argument("--format", choices=formats, default=default, help=help)


def add_width(p: argparse.ArgumentParser, help: str = "table width in characters") -> None:
    """--width: a table's width in characters."""
    p.add_argument("--width", type=arg(width), default=None, help=help)


def add_result_output(p: argparse.ArgumentParser, formats: tuple[str, ...], help: str,
                      all_help: str) -> None:
    """--all (``all_help``: which rows a table shows) and ``add_format_options`` of a command
    that checks its format with ``result_format`` and writes with ``output_result`` (diff,
    compare)."""
    p.add_argument("--all", action="store_true", help=all_help)
    add_format_options(p, formats, help)


def result_format(args, formats: tuple[str, ...], command: str) -> str:
    """The format a command declared with ``add_format_options`` writes: --format, else
    -o's extension, else a table; one ``formats`` leaves out (diff -o r.png) is refused
    before any work."""
    fmt = pick_format(args.format, args.output)
    if fmt not in formats:
        raise UserError(f"{command} writes {', '.join(formats)}; not {fmt}")
    return fmt


def output_result(result, fmt: str, args) -> None:
    """A result in ``fmt`` to -o or standard output; a table 160 characters wide unless
    --width says otherwise, with every row under --all."""
    options = {"show_all": args.all} if fmt == "table" else {}
    output(render(result, fmt, width=args.width or 160, **options), args.output)


def add_report_files(p: argparse.ArgumentParser) -> None:
    """--html / --plot: extra files written besides the normal output."""
    p.add_argument("--html", default=None, metavar="FILE",
                   help="also write a self-contained HTML report (charts, sortable tables)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also write the charts as one PNG figure (matplotlib)")
    p.add_argument("--plot-size", type=_plot_size, default=(1200, 800), metavar="WxH",
                   help="PNG size in pixels (default 1200x800)")


def add_output_folder(p: argparse.ArgumentParser, *flags: str, **kwargs) -> argparse.Action:
    """An option naming a folder the command creates and writes into (``train --out DIR``,
    ``run --tensorboard DIR``). Declared here, once, so that ``check_outputs`` checks that the
    folder can be created and accepts the command's other outputs inside it
    (``--out runs/demo --html runs/demo/report.html``) before the folder exists."""
    kwargs.setdefault("metavar", "DIR")
    action = p.add_argument(*flags, **kwargs)
    declared = p.get_default(OUTPUT_FOLDERS) or ()
    p.set_defaults(**{OUTPUT_FOLDERS: (*declared, (action.option_strings[0], action.dest))})
    return action


OUTPUT_FOLDERS = "output_folders"  # the attribute listing (option, dest) of such folders


def add_highlight(p: argparse.ArgumentParser) -> None:
    p.add_argument("--highlight", type=_highlight, default=None, metavar="SECONDS|top-N|SHARE%",
                   help="which layers the tables and charts highlight: a median at or above "
                        "SECONDS (0.00036, 3.6e-4s, 0.36ms), the N slowest (top-5) or a share "
                        "of the run at or above it (10%%); default: share ≥ 10%% or top 3")


def _highlight(text: str) -> dict:
    from layerscope.views.highlight import parse_highlight

    return parse_highlight(text)  # a UserError here stops the command before any work


def _plot_size(text: str) -> tuple[int, int]:
    from layerscope.renderers.plot import parse_size

    return parse_size(text)  # a UserError here stops the command before any work


def _size(args) -> tuple[int, int]:
    size = getattr(args, "plot_size", None)
    return _plot_size(size) if isinstance(size, str) or size is None else size


def write_output(path: str, data, detail: str = "") -> None:
    """One of the command's outputs, through core.io: put in place with the command's other
    outputs when it finishes (all or none; see cli.main), then "wrote PATH" on stderr."""
    with outputs() as tx:
        tx.write(path, data)
        if path != STDOUT:
            shown = tx.shown.get(path, path)  # as the user gave it
            tx.after_commit(lambda: print(f"wrote {shown}{detail}", file=sys.stderr))


def output(text: str, path: str | None, detail: str = "") -> None:
    """The command's main output: to ``path`` (``-``: standard output) or stdout."""
    if path:
        write_output(path, text, detail)
    else:
        sys.stdout.write(text)


def write_report_files(report, args) -> None:
    """Write --html and --plot if given (with the command's other outputs: all or none)."""
    if getattr(args, "html", None):
        from layerscope.renderers.html import render_html

        write_output(args.html, render_html(report))
    if getattr(args, "plot", None):
        from layerscope.renderers.plot import render_png

        write_output(args.plot, render_png(report, _size(args)))


def _png_needs_a_file(fmt: str, output: str | None) -> None:
    """PNG is binary: it goes to a file, never to the terminal's standard output."""
    if fmt == "png" and not output:
        raise UserError("--format png writes a binary file: give -o FILE.png")


def check_outputs(args) -> None:
    """Every output of the command checked before any work (a missing folder found after a
    training run or a scaling sweep wastes it): the folders it creates (``add_output_folder``)
    can be created, and the -o, --html, --plot and --trace files can be written, in an existing
    folder or in one of those; --format png needs -o."""
    from layerscope.core.io import check_dir, check_output, current

    folders = tuple(getattr(args, OUTPUT_FOLDERS, None) or ())
    created = [check_dir(getattr(args, dest), option)
               for option, dest in folders if getattr(args, dest, None)]
    tx = current()
    for folder in created if tx is not None else ():
        tx.creates(folder)  # the writer then makes an output's folders inside it
    fmt = getattr(args, "format", None)
    if fmt is not None:
        output = getattr(args, "output", None)
        _png_needs_a_file(pick_format(fmt, output), output)
    skip = {dest for _, dest in folders}
    for option, attr in OUTPUT_OPTIONS:
        path = getattr(args, attr, None)
        if path and attr not in skip:
            check_output(path, option, within=created)


def emit(report, args) -> None:
    fmt = pick_format(args.format, args.output)
    if getattr(args, "highlight", None) is not None:
        from layerscope.views.highlight import apply_highlight

        apply_highlight(report, args.highlight)  # kept in the settings: JSON renders the same
    if fmt == "png":
        from layerscope.renderers.plot import render_png

        _png_needs_a_file(fmt, args.output)
        write_output(args.output, render_png(report, _size(args)))
    elif fmt == "table" and not args.output:
        from rich.console import Console

        from layerscope.renderers.terminal import render_table

        width = args.width or (None if sys.stdout.isatty() else 160)
        Console(width=width, highlight=False).print(render_table(report))
    else:
        output(render(report, fmt, width=args.width or 160), args.output)
    write_report_files(report, args)
