"""Every fenced sh and python example in README.md and docs/**/*.md runs (the convention is in
tests/doc_examples.py); the fence parser itself is checked on tables of small pages."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt  # rich's own dependency, so always installed

from tests.doc_examples import (
    DEFAULT_TIMEOUT_S,
    MAKE_REASON,
    REPO,
    Block,
    Command,
    DocParseError,
    Outcome,
    check_quote,
    docs_root,
    example_env,
    excerpt,
    figures,
    pages,
    parse_blocks,
    run_page,
    sh_commands,
)
from tests.warm_start import Server

ROOT = docs_root()
PAGES = [str(p) for p in pages(ROOT)]
# Info strings that are another name for a language whose examples run: they would be shown
# but never run, so the docs say sh or python.
ALIASES = {"bash", "shell", "zsh", "py", "py3", "python3"}
MAX_SKIPPED_SHARE = 0.2


def _blocks(page: str) -> list[Block]:
    return parse_blocks((ROOT / page).read_text(encoding="utf-8"), page)


def _all_blocks() -> list[tuple[str, Block]]:
    found = []
    for page in PAGES:
        try:
            found += [(page, b) for b in _blocks(page) if b.runs]
        except DocParseError:
            pass  # test_page_examples reports it
    return found


RUNNABLE = _all_blocks()
SKIPPED = [(page, b) for page, b in RUNNABLE if b.skip_reason is not None]


@pytest.fixture(scope="session")
def example_home(tmp_path_factory):
    """One HOME and cache folder per test process, shared by its pages (the roofline cache is
    measured once, matplotlib's font cache built once)."""
    return tmp_path_factory.mktemp("example-home")


@pytest.fixture(scope="session")
def page_env(tmp_path_factory, example_home):
    """The environment the pages run in: the examples' own, with the warm start of
    tests/warm_start.py (one server per test process) unless LAYERSCOPE_DOCS_COLD=1."""
    env = example_env(example_home)
    if os.environ.get("LAYERSCOPE_DOCS_COLD") == "1":
        yield env
        return
    server = Server(tmp_path_factory.mktemp("warm-start"), env)
    try:
        yield server.env(env)
    finally:
        server.close()


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES)
def test_page_examples(page, tmp_path, page_env):
    blocks = _blocks(page)
    timeout_s = float(os.environ.get("LAYERSCOPE_EXAMPLE_TIMEOUT") or DEFAULT_TIMEOUT_S)
    keep_going = os.environ.get("LAYERSCOPE_DOCS_KEEP_GOING") == "1"
    log = os.environ.get("LAYERSCOPE_DOCS_LOG")
    run = run_page(page, blocks, tmp_path, page_env, timeout_s, keep_going,
                   log=Path(log) if log else None)
    for o in run.outcomes:
        print(f"{o.seconds:7.1f} s  {'ok  ' if o.ok else 'FAIL'}  {page}:{o.command.line}  "
              f"{o.shown.splitlines()[0]}")
    if run.misquotes:
        pytest.fail(f"{len(run.misquotes)} quoted output(s) in {page} do not match what the "
                    "example prints today:\n\n"
                    + "\n\n".join(m.describe() for m in run.misquotes), pytrace=False)
    if run.failures:
        ran = len(run.outcomes)
        total = sum(len(b.commands()) for b in blocks if b.runs and b.skip_reason is None)
        stopped = "" if keep_going else (
            f"; stopped at the first failure ({ran} of {total} commands run; "
            "LAYERSCOPE_DOCS_KEEP_GOING=1 runs the rest)")
        pytest.fail(f"{len(run.failures)} example command(s) failed in {page}{stopped}:\n\n"
                    + "\n\n".join(o.describe(timeout_s) for o in run.failures), pytrace=False)


@pytest.mark.parametrize("skipped", [f"{page}:{b.line}" for page, b in SKIPPED] or ["none"])
def test_skipped_example(skipped):
    """One skipped test per block marked ``<!-- example: skip REASON -->``, with its reason."""
    reasons = {f"{page}:{b.line}": b.skip_reason for page, b in SKIPPED}
    if skipped in reasons:
        pytest.skip(f"example {skipped}: {reasons[skipped]}")


def test_fewer_than_one_in_five_examples_are_skipped():
    listing = "\n".join(f"  {page}:{b.line} ({b.lang}): {b.skip_reason}" for page, b in SKIPPED)
    assert RUNNABLE, f"no sh or python example found under {ROOT}"
    assert len(SKIPPED) < MAX_SKIPPED_SHARE * len(RUNNABLE), (
        f"{len(SKIPPED)} of {len(RUNNABLE)} examples are skipped:\n{listing}")


@pytest.mark.parametrize("page", PAGES)
def test_fences_say_sh_or_python(page):
    aliased = [f"{page}:{b.line} ({b.lang})" for b in _blocks(page) if b.lang in ALIASES]
    assert not aliased, f"write sh or python so that these examples run: {', '.join(aliased)}"


@pytest.mark.parametrize("page", PAGES)
def test_parser_finds_every_fence_commonmark_finds(page):
    """Every fence a CommonMark parser sees is found, at the same line with the same language
    (the scanner also finds fences inside mkdocs admonitions, which CommonMark does not)."""
    ours = {(b.line, b.lang) for b in _blocks(page)}
    text = (ROOT / page).read_text(encoding="utf-8")
    theirs = {(t.map[0] + 1, t.info.split()[0] if t.info.split() else "")
              for t in MarkdownIt("commonmark").parse(text) if t.type == "fence" and t.map}
    assert theirs <= ours, f"missed: {sorted(theirs - ours)}"


# --- the parser, on small pages; nothing is run ---

SKIP = "<!-- example: skip needs a GPU -->"

PARSE_CASES = {
    "sh and python run, others do not": (
        "```sh\nls\n```\n```python\nprint(1)\n```\n```text\nx\n```\n```\ny\n```\n"
        "```json\n{}\n```\n",
        [(1, "sh", None, "ls\n"), (4, "python", None, "print(1)\n"), (7, "text", None, "x\n"),
         (10, "", None, "y\n"), (13, "json", None, "{}\n")]),
    "skip marker right above": (
        f"text\n{SKIP}\n```sh\nnvidia-smi\n```\n",
        [(3, "sh", "needs a GPU", "nvidia-smi\n")]),
    "a marker applies to the next block only": (
        f"{SKIP}\n```sh\na\n```\n```sh\nb\n```\n",
        [(2, "sh", "needs a GPU", "a\n"), (5, "sh", None, "b\n")]),
    "indented fence in a list item loses its indentation": (
        "1. Export:\n\n    ```sh\n    layerscope export alexnet -o a.onnx\n      x\n    ```\n",
        [(3, "sh", None, "layerscope export alexnet -o a.onnx\n  x\n")]),
    "marker indented in a list item": (
        f"- item\n\n  {SKIP}\n  ```python\n  import torch\n  ```\n",
        [(4, "python", "needs a GPU", "import torch\n")]),
    "fence inside an admonition": (
        "!!! note\n    ```sh\n    layerscope models\n    ```\n",
        [(2, "sh", None, "layerscope models\n")]),
    "info string attributes": (
        '```python title="net.py" linenums="1"\nx = 1\n```\n```{.sh}\nls\n```\n',
        [(1, "python", None, "x = 1\n"), (4, "sh", None, "ls\n")]),
    "longer fence holds a shorter one": (
        "````markdown\n```sh\nls\n```\n````\n",
        [(1, "markdown", None, "```sh\nls\n```\n")]),
    "tilde fence, closed only by tildes": (
        "~~~sh\nls\n```\n~~~\n",
        [(1, "sh", None, "ls\n```\n")]),
    "closing fence with trailing text is content": (
        "```sh\nls\n``` not a close\n```\n",
        [(1, "sh", None, "ls\n``` not a close\n")]),
    "inline code is no fence": (
        "Run ```sh``` here and `ls`.\n```sh\nls\n```\n",
        [(2, "sh", None, "ls\n")]),
    "a block of make commands is run by .ci/run": (
        "```sh\nmake demo   # the demo\nmake test\n```\n```sh\nmake demo\nls\n```\n",
        [(1, "sh", MAKE_REASON, "make demo   # the demo\nmake test\n"),
         (5, "sh", None, "make demo\nls\n")]),
    "marker inside a fence is content": (
        f"```text\n{SKIP}\n```\n```sh\nls\n```\n",
        [(1, "text", None, f"{SKIP}\n"), (4, "sh", None, "ls\n")]),
}


UNCHECKED = "<!-- output: unchecked timings differ run to run -->"

OUTPUT_CASES = {
    "text right after sh": ("```sh\nls\n```\n\n```text\na 1\n```\n", [("a 1\n", 5, None)]),
    "text right after python": ("```python\nprint(2)\n```\n```text\n2\n```\n",
                                [("2\n", 4, None)]),
    "prose between: not its output": ("```sh\nls\n```\nThe file:\n```text\nx\n```\n",
                                      [(None, None, None)]),
    "text after text: not an output": ("```text\na\n```\n```text\nb\n```\n", []),
    "unchecked marker": (f"```sh\nls\n```\n{UNCHECKED}\n```text\n0.3 s\n```\n",
                         [("0.3 s\n", 5, "timings differ run to run")]),
    "skipped block keeps its quote": (f"{SKIP}\n```sh\nnvidia-smi\n```\n```text\nGPU 0\n```\n",
                                      [("GPU 0\n", 5, None)]),
}


@pytest.mark.parametrize("text, expected", OUTPUT_CASES.values(), ids=OUTPUT_CASES.keys())
def test_a_text_block_right_after_a_runnable_one_is_its_output(text, expected):
    got = [(b.output, b.output_line, b.output_unchecked) for b in parse_blocks(text) if b.runs]
    assert got == expected


FIGURE_CASES = {
    "integers and the dims of a shape": ("2312208 backward 1x28x28", ["2312208", "1", "28", "28"]),
    "separators and decimals": ("1,199,882 params, 0.47 MB, 11.99M.", ["1,199,882", "0.47",
                                                                       "11.99"]),
    "names with digits": ("layer1.0 conv2 fc1", ["1.0", "2", "1"]),
    "none": ("backward", []),
}


@pytest.mark.parametrize("text, expected", FIGURE_CASES.values(), ids=FIGURE_CASES.keys())
def test_figures(text, expected):
    assert figures(text) == expected


def test_a_quote_must_hold_only_printed_figures():
    """The page's old quote of memory's peak (2326536) against what the example printed."""
    block = parse_blocks("```python\nprint(1)\n```\n```text\n2326536 backward\n...\n```\n")[0]
    printed = Outcome("p.md", 1, Command(2, ""), "python example_L1.py", 0, 0.1,
                      "2312208 backward\n{'activations': 1}\n", "")
    misquote = check_quote("p.md", block, [printed])
    assert misquote is not None and misquote.missing == ["2326536"]
    assert misquote.describe().startswith("p.md:4: the output quoted here has figures the block "
                                          "at line 1 does not print: 2326536")
    right = parse_blocks("```python\nprint(1)\n```\n```text\n2312208 backward\n```\n")[0]
    assert check_quote("p.md", right, [printed]) is None


@pytest.mark.integration
def test_runner_checks_the_quoted_output(tmp_path):
    page = ("```sh\necho 'peak 42 at step 3'\n```\n```text\npeak 42 at step 3\n```\n"
            "```python\nprint(7 * 6)\n```\n```text\n41\n```\n"
            f"```sh\ndate +%N\n```\n{UNCHECKED}\n```text\n123\n```\n")
    run = run_page("p.md", parse_blocks(page), tmp_path, example_env(tmp_path), 60,
                   keep_going=True)
    assert not run.failures and run.quotes_checked == 2
    assert [(m.block.line, m.missing) for m in run.misquotes] == [(7, ["41"])]


@pytest.mark.parametrize("text, expected", PARSE_CASES.values(), ids=PARSE_CASES.keys())
def test_parse_blocks(text, expected):
    got = [(b.line, b.lang, b.skip_reason, b.body) for b in parse_blocks(text)]
    assert got == expected


PARSE_ERRORS = {
    "unclosed fence": ("a\n```sh\nls\n", "x.md:2: the fence opened here is never closed"),
    "marker without reason": ("<!-- example: skip -->\n```sh\nls\n```\n",
                              "x.md:1: a skip marker needs a reason"),
    "marker above a text block": (f"{SKIP}\n```text\nls\n```\n",
                                  "x.md:1: a skip marker above a 'text' block"),
    "marker with a blank line before the fence": (f"{SKIP}\n\n```sh\nls\n```\n",
                                                  "x.md:1: a skip marker must be the line"),
    "marker above no fence": (f"{SKIP}\ntext\n", "x.md:1: a skip marker must be the line"),
    "unchecked marker without reason": ("```sh\nls\n```\n<!-- output: unchecked -->\n"
                                        "```text\nx\n```\n",
                                        "x.md:4: an unchecked-output marker needs a reason"),
    "unchecked marker above no output": ("Text.\n<!-- output: unchecked slow -->\n```text\nx\n"
                                         "```\n", "x.md:2: an unchecked-output marker must be"),
    "output quoted in a print comment": ("```python\nx = 1\nprint(x)  # 1\n```\n",
                                         "x.md:3: a comment on a print() line quotes output"),
}


@pytest.mark.parametrize("text, message", PARSE_ERRORS.values(), ids=PARSE_ERRORS.keys())
def test_parse_errors_name_file_and_line(text, message):
    with pytest.raises(DocParseError) as caught:
        parse_blocks(text, "x.md")
    assert str(caught.value).startswith(message)


SH_CASES = {
    "one per line": ("a\nb\n", [(10, "a"), (11, "b")]),
    "blank lines and comment lines skipped": ("\n# note\n  # indented note\na\n\nb\n",
                                              [(13, "a"), (15, "b")]),
    "trailing comment stays": ("layerscope models   # the names\n",
                               [(10, "layerscope models   # the names")]),
    "continuation joins lines": ("train x \\\n    --out r \\\n    --epochs 1\nls\n",
                                 [(10, "train x \\\n    --out r \\\n    --epochs 1"), (13, "ls")]),
    "continuation keeps a comment-like next line": ("a \\\n# b\n", [(10, "a \\\n# b")]),
    "dangling continuation at the end": ("a \\\n", [(10, "a")]),
    "empty block": ("\n\n", []),
}


@pytest.mark.parametrize("body, expected", SH_CASES.values(), ids=SH_CASES.keys())
def test_sh_commands(body, expected):
    assert [(c.line, c.text) for c in sh_commands(body, 10)] == expected


def test_python_block_is_one_script():
    block = Block(5, "python", "import os\n\nprint(os.sep)\n")
    assert block.commands() == [Command(6, "import os\n\nprint(os.sep)\n")]


def test_pages_are_readme_and_docs_sorted(tmp_path):
    for name in ["README.md", "docs/b.md", "docs/a.md", "docs/sub/c.md", "docs/x.txt",
                 "other.md"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    assert [str(p) for p in pages(tmp_path)] == ["README.md", "docs/a.md", "docs/b.md",
                                                 "docs/sub/c.md"]


@pytest.mark.integration
def test_runner_stops_at_the_first_failure_and_reports_it(tmp_path):
    page = ("```sh\necho one > f.txt\ncat f.txt missing.txt\necho never\n```\n"
            "```python\nprint('never')\n```\n")
    run = run_page("p.md", parse_blocks(page), tmp_path, example_env(tmp_path), 60)
    assert [o.code for o in run.outcomes] == [0, 1]
    text = run.failures[0].describe(60)
    assert text.startswith("p.md:3 (block at line 1): cat f.txt missing.txt\n  -> exit code 1")
    assert "missing.txt: No such file or directory" in text and "one" in text


def test_long_output_keeps_its_first_and_last_lines():
    lines = [f"l{i}" for i in range(1, 21)]
    assert excerpt("\n".join(lines) + "\n\n") == [
        "l1", "l2", "l3", "[... 5 lines ...]", *lines[-12:]]
    assert excerpt("a\n\nb\n") == ["a", "", "b"]
    assert excerpt("") == []


@pytest.mark.integration
def test_runner_keeps_going_pipefail_python_and_timeout(tmp_path):
    page = ("```sh\nfalse | true\nsleep 30\n```\n"
            "```python\nimport os, sys\nprint(os.path.basename(sys.executable))\n```\n"
            f"{SKIP}\n```sh\nfalse\n```\n")
    run = run_page("p.md", parse_blocks(page), tmp_path, example_env(tmp_path), 3.0,
                   keep_going=True)
    assert [o.code for o in run.outcomes] == [1, None, 0]
    assert run.outcomes[2].shown == "python example_L5.py"
    assert "timed out: killed at the 3 s limit" in run.outcomes[1].describe(3.0)


@pytest.mark.integration
def test_examples_see_this_checkout_and_a_private_home(tmp_path):
    home = tmp_path / "home"
    page = ("```sh\ncommand -v python layerscope\necho \"$HOME $XDG_CACHE_HOME $MPLBACKEND\"\n"
            "python -c 'import layerscope; print(layerscope.__file__)'\n```\n")
    run = run_page("p.md", parse_blocks(page), tmp_path, example_env(home), 60)
    assert all(o.ok for o in run.outcomes), [o.describe(60) for o in run.failures]
    bindir = os.path.dirname(sys.executable)
    assert run.outcomes[0].stdout.splitlines()[0] == os.path.join(bindir, "python")
    assert run.outcomes[1].stdout.split() == [str(home), str(home / ".cache"), "Agg"]
    assert Path(run.outcomes[2].stdout.strip()).is_relative_to(REPO / "layerscope")
