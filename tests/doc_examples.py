"""Finding and running the examples in the documentation (README.md and docs/**/*.md).

The convention, shared with whoever writes the docs:

- A fence whose info string starts with ``sh`` is run. Each line is one command, run on its own
  with ``bash -c`` (``set -o pipefail`` first): a trailing ``\\`` continues the command on the
  next line; blank lines and lines starting with ``#`` are skipped; a trailing ``# comment``
  stays (bash ignores it). As every command is its own bash, ``cd`` and ``export`` do not carry
  over to the next line.
- A fence whose info string starts with ``python`` is a complete script: it is written to a file
  in the page's folder and run with the test's Python.
- Every other fence (``text``, ``json``, ``toml``, none) is shown, not run.
- The line right before an opening fence being ``<!-- example: skip REASON -->`` skips that
  block; the reason is required and is reported.
- A ``text`` fence right after a block that runs (only blank lines between them) is that block's
  output as the page quotes it: every figure in it (each number, ``2,312,208``, ``0.47``,
  ``1x28x28`` as ``1``, ``28``, ``28``) must be among the figures the block prints (its commands'
  stdout and stderr), so a quote that no longer matches fails the page. The quote may leave lines
  out; ``<!-- output: unchecked REASON -->`` right above the ``text`` fence exempts a quote that
  cannot match (a timing), with its reason reported.
- Output is quoted in such a ``text`` block, never in a comment: a ``python`` block whose
  ``print(...)`` line carries a ``# comment`` with a figure in it is refused, as that comment
  would not be checked.
- An ``sh`` block made only of ``make`` commands is skipped with the reason ``MAKE_REASON``: the
  Makefile's targets bootstrap a virtual environment of their own in the checkout, and .ci/run
  runs the README's two (``make demo``, then ``make test``) on a clean clone. So the README can
  open with its two commands and nothing above them.
- All blocks of one page run in page order in one fresh folder; the commands find this
  checkout's ``layerscope`` and ``python`` first on ``PATH``. A ``python`` block runs in the
  warm start's ``python`` when the environment names a server (tests/warm_start.py).

Fences are found line by line, at any indentation (as mkdocs' superfences finds them inside list
items, admonitions and tabs, where a CommonMark parser sees an indented paragraph): an opening
fence is three or more backticks or tildes, its content loses up to the fence's own indentation,
and it closes at a run of the same character at least as long with nothing after it.

Environment variables: ``LAYERSCOPE_DOCS_ROOT`` (the folder holding README.md and docs/;
default: this checkout), ``LAYERSCOPE_EXAMPLE_TIMEOUT`` (seconds per command, default 300),
``LAYERSCOPE_DOCS_KEEP_GOING=1`` (run a page's remaining commands after a failure, to list every
failing one), ``LAYERSCOPE_DOCS_LOG=FILE`` (append one JSON line per command run: page, line,
command, exit code, seconds).
"""
from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.warm_start import python_for

REPO = Path(__file__).resolve().parent.parent
RUN_LANGS = ("sh", "python")
DEFAULT_TIMEOUT_S = 300.0
HEAD_LINES = 3
TAIL_LINES = 12

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_SKIP = re.compile(r"^<!--\s*example:\s*skip(?P<reason>.*?)-->$")
_UNCHECKED = re.compile(r"^<!--\s*output:\s*unchecked(?P<reason>.*?)-->$")
# a figure: digits, with thousands separators or decimals; never glued to a longer number
_FIGURE = re.compile(r"(?<![\d.,])\d+(?:[.,]\d+)*")
MAKE_REASON = "make targets bootstrap their own .venv: .ci/run runs them on a clean clone"


class DocParseError(ValueError):
    """A page's fences or markers are malformed; the message names the file and line."""


@dataclass(frozen=True)
class Command:
    line: int  # 1-based line of the command's first line in the page
    text: str  # what bash runs (continuation lines joined by backslash-newline, as written)


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str  # the info string's first word ("" for none)
    body: str  # the content, without the fence's indentation
    skip_reason: str | None = None
    end: int = 0  # 1-based line of the closing fence
    output: str | None = None  # the text block right after, quoting what this block prints
    output_line: int | None = None  # its opening fence
    output_unchecked: str | None = None  # why that quote is not checked

    @property
    def runs(self) -> bool:
        return self.lang in RUN_LANGS

    def commands(self) -> list[Command]:
        """The commands of an ``sh`` block; a ``python`` block is one command (its script)."""
        if self.lang == "python":
            return [Command(self.line + 1, self.body)]
        return sh_commands(self.body, self.line + 1)


def _info_word(info: str) -> str:
    word = info.strip().split(maxsplit=1)
    return word[0].lstrip("{.").rstrip("}") if word else ""


def _strip_indent(line: str, indent: int) -> str:
    n = 0
    while n < indent and n < len(line) and line[n] in " \t":
        n += 1
    return line[n:]


def parse_blocks(text: str, where: str = "<text>") -> list[Block]:
    """Every fenced block of a markdown page, in order, with its skip marker.

    Raises DocParseError for an unclosed fence, a skip marker without a reason, and a skip
    marker that is not right above a block that would run."""
    lines = text.splitlines()
    blocks: list[Block] = []
    markers: dict[int, str] = {}  # 0-based line -> reason
    unchecked: dict[int, str] = {}  # 0-based line -> reason
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        marker, found, form = next(((m, found, form) for pattern, found, form in (
            (_SKIP, markers, "a skip marker needs a reason: <!-- example: skip REASON -->"),
            (_UNCHECKED, unchecked, "an unchecked-output marker needs a reason: "
                                    "<!-- output: unchecked REASON -->"))
            if (m := pattern.match(stripped))), (None, markers, ""))
        if marker is not None:
            reason = marker.group("reason").strip()
            if not reason:
                raise DocParseError(f"{where}:{i + 1}: {form}")
            found[i] = reason
            i += 1
            continue
        opening = _OPEN.match(lines[i])
        if not opening or (opening.group("fence")[0] == "`" and "`" in opening.group("info")):
            i += 1
            continue
        indent = len(opening.group("indent"))
        fence = opening.group("fence")
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise DocParseError(f"{where}:{i + 1}: the fence opened here is never closed")
        body = "".join(_strip_indent(line, indent) + "\n" for line in lines[i + 1:end])
        reason = markers.pop(i - 1, None)
        block = Block(i + 1, _info_word(opening.group("info")), body, reason, end + 1)
        if reason is None and block.lang == "sh" and _only_make(block):
            block = replace(block, skip_reason=MAKE_REASON)
        if reason is not None and not block.runs:
            raise DocParseError(f"{where}:{i}: a skip marker above a '{block.lang}' block, "
                                "which is never run")
        previous = blocks[-1] if blocks else None
        if block.lang == "text" and previous is not None and previous.runs and all(
                not lines[k].strip() or k in unchecked for k in range(previous.end, i)):
            blocks[-1] = replace(previous, output=body, output_line=block.line,
                                 output_unchecked=unchecked.pop(i - 1, None))
        if block.lang == "python":
            _refuse_quoted_prints(block, where)
        blocks.append(block)
        i = end + 1
    if markers:
        line = min(markers) + 1
        raise DocParseError(f"{where}:{line}: a skip marker must be the line right above the "
                            "opening fence of an sh or python block")
    if unchecked:
        line = min(unchecked) + 1
        raise DocParseError(f"{where}:{line}: an unchecked-output marker must be the line right "
                            "above a text block that quotes the output of the block before it")
    return blocks


def _refuse_quoted_prints(block: Block, where: str) -> None:
    """A ``print(...)`` line whose comment holds a figure quotes output where nothing checks
    it."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(block.body).readline))
    except (tokenize.TokenError, SyntaxError):
        return  # not Python the tokenizer reads: running it will say so
    for tok in tokens:
        if tok.type == tokenize.COMMENT and re.match(r"\s*print\(", tok.line) and \
                figures(tok.string):
            raise DocParseError(
                f"{where}:{block.line + tok.start[0]}: a comment on a print() line quotes "
                "output that nothing checks: quote it in a text block right after this block, "
                "whose figures the runner checks")


def figures(text: str) -> list[str]:
    """The figures of ``text``, in order: every number as written (``2,312,208``, ``0.47``)."""
    return _FIGURE.findall(text)


def _only_make(block: Block) -> bool:
    commands = block.commands()
    return bool(commands) and all(c.text.split()[0] == "make" for c in commands)


def sh_commands(body: str, first_line: int = 1) -> list[Command]:
    """The commands of an ``sh`` block: one per line, ``\\`` continuing a line, blank lines and
    ``#`` lines left out."""
    commands: list[Command] = []
    pending: list[str] = []
    start = first_line
    for offset, line in enumerate(body.splitlines()):
        if not pending:
            start = first_line + offset
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        pending.append(line)
        if line.rstrip().endswith("\\"):
            continue
        commands.append(Command(start, "\n".join(pending)))
        pending = []
    if pending:
        commands.append(Command(start, "\n".join(pending).rstrip().rstrip("\\").rstrip()))
    return commands


def docs_root() -> Path:
    return Path(os.environ.get("LAYERSCOPE_DOCS_ROOT") or REPO).resolve()


def pages(root: Path) -> list[Path]:
    """README.md and every docs/**/*.md under ``root``, as paths relative to it, sorted."""
    found = [Path("README.md")] if (root / "README.md").is_file() else []
    found += sorted(p.relative_to(root) for p in (root / "docs").rglob("*.md") if p.is_file())
    return found


def example_env(home: Path) -> dict[str, str]:
    """The environment examples run in: this checkout's layerscope and the test's Python first,
    a headless matplotlib, and ``home`` as HOME and cache folder (the roofline cache, data
    downloads and matplotlib's font cache never touch the real home)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH")] if p)
    env["MPLBACKEND"] = "Agg"
    env["HOME"] = str(home)
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    return env


@dataclass
class Outcome:
    page: str
    fence_line: int
    command: Command
    shown: str  # the command as reported ("python example_L65.py" for a script)
    code: int | None  # None: timed out
    seconds: float
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def describe(self, timeout_s: float) -> str:
        status = (f"timed out: killed at the {timeout_s:g} s limit (LAYERSCOPE_EXAMPLE_TIMEOUT)"
                  if self.code is None else f"exit code {self.code} after {self.seconds:.1f} s")
        lines = [f"{self.page}:{self.command.line} (block at line {self.fence_line}): "
                 f"{self.shown}", f"  -> {status}"]
        for name, text in (("stderr", self.stderr), ("stdout", self.stdout)):
            shown = excerpt(text)
            if shown:
                lines += [f"  {name}:", *(f"    {t}" for t in shown)]
        return "\n".join(lines)


def excerpt(text: str) -> list[str]:
    """The output's first and last lines (the first often say what went wrong before a long
    trace does)."""
    out = text.rstrip().splitlines()
    if len(out) > HEAD_LINES + TAIL_LINES:
        out = [*out[:HEAD_LINES], f"[... {len(out) - HEAD_LINES - TAIL_LINES} lines ...]",
               *out[-TAIL_LINES:]]
    return out


def _run(argv: list[str], cwd: Path, env: dict[str, str],
         timeout_s: float) -> tuple[int | None, str, str]:
    """Runs argv in its own session, killing the whole group when the time is up."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return code, out.decode(errors="replace"), err.decode(errors="replace")


@dataclass
class Misquote:
    """A block's quoted output with figures the block did not print."""

    page: str
    block: Block
    missing: list[str]
    printed: str  # what the block printed

    def describe(self) -> str:
        lines = [f"{self.page}:{self.block.output_line}: the output quoted here has figures the "
                 f"block at line {self.block.line} does not print: {', '.join(self.missing)}",
                 "  printed:", *(f"    {t}" for t in excerpt(self.printed))]
        return "\n".join(lines)


@dataclass
class PageRun:
    outcomes: list[Outcome] = field(default_factory=list)
    misquotes: list[Misquote] = field(default_factory=list)
    quotes_checked: int = 0

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]


def check_quote(page: str, block: Block, outcomes: list[Outcome]) -> Misquote | None:
    """The block's quoted output against what its commands printed (see the module's doc)."""
    printed = "".join(o.stdout + o.stderr for o in outcomes)
    have = set(figures(printed))
    missing = [f for f in dict.fromkeys(figures(block.output or "")) if f not in have]
    return Misquote(page, block, missing, printed) if missing else None


def run_page(page: str, blocks: list[Block], workdir: Path, env: dict[str, str],
             timeout_s: float, keep_going: bool = False, log: Path | None = None) -> PageRun:
    """Runs the page's blocks that are not skipped, in order, in ``workdir``; stops at the first
    failing command unless ``keep_going``."""
    run = PageRun()
    for block in blocks:
        if not block.runs or block.skip_reason is not None:
            continue
        first = len(run.outcomes)
        for command in block.commands():
            if block.lang == "python":
                script = workdir / f"example_L{block.line}.py"
                script.write_text(command.text, encoding="utf-8")
                argv, shown = [python_for(env), script.name], f"python {script.name}"
            else:
                argv = ["bash", "-c", "set -o pipefail\n" + command.text]
                shown = command.text
            start = time.perf_counter()
            code, out, err = _run(argv, workdir, env, timeout_s)
            outcome = Outcome(page, block.line, command, shown, code,
                              time.perf_counter() - start, out, err)
            run.outcomes.append(outcome)
            if log is not None:
                with log.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"page": page, "line": command.line, "command": shown,
                                        "code": code, "seconds": round(outcome.seconds, 2)})
                            + "\n")
            if not outcome.ok and not keep_going:
                return run
        ran = run.outcomes[first:]
        if block.output is not None and block.output_unchecked is None and \
                all(o.ok for o in ran):
            run.quotes_checked += 1
            misquote = check_quote(page, block, ran)
            if misquote is not None:
                run.misquotes.append(misquote)
                if not keep_going:
                    return run
    return run
