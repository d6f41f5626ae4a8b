"""Every result kind of the kinds table shows everywhere: the terminal (rich), Jupyter
(_repr_html_), every text format, PNG where its view has charts, and `layerscope render`; and
layerscope.load reads a saved result of any kind back."""
from __future__ import annotations

import csv
import html as html_lib
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

import layerscope
from layerscope.core.display import Displayed
from layerscope.core.errors import UserError
from layerscope.core.results import KINDS, read_result
from layerscope.renderers import FORMATS, render
from layerscope.views import view_for
from tests.helpers import run_cli

DATA = Path(__file__).parent / "data"
SAVED = {kind: sorted(DATA.glob(f"{kind}_*.json")) for kind in KINDS}


def test_every_kind_has_a_saved_result():
    assert [k for k, files in SAVED.items() if not files] == []


def _result(kind: str):
    return layerscope.load(SAVED[kind][-1])


def _name(result) -> str:
    """The model's name, which every view shows."""
    return view_for(result).name(result)


def _has_png(result) -> bool:
    return bool(view_for(result).charts(result))


@pytest.mark.parametrize("kind", KINDS)
def test_shows_in_the_terminal_through_rich(kind):
    result = _result(kind)
    assert isinstance(result, Displayed)
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(result)
    text = out.getvalue()
    assert _name(result) in text, text[:300]
    assert not text.lstrip().startswith(type(result).__name__ + "(")  # a table, not a repr


@pytest.mark.parametrize("kind", KINDS)
def test_shows_in_jupyter(kind):
    result = _result(kind)
    page = result._repr_html_()
    assert "<table" in page and html_lib.escape(_name(result)) in page


@pytest.mark.integration
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_renders_in_every_format(kind, fmt, tmp_path):
    result = _result(kind)
    out = tmp_path / f"out.{fmt}"
    code, _, err = run_cli("render", str(SAVED[kind][-1]), "--format", fmt, "-o", str(out))
    if fmt == "png" and not _has_png(result):  # a view without charts: one line, exit 2
        assert code == 2 and err.count("\n") == 1 and "no chart to plot" in err, err
        assert not out.exists()
        return
    assert code == 0, err
    data = out.read_bytes()
    if fmt == "png":
        from layerscope.renderers.plot import render_png

        assert data.startswith(b"\x89PNG") and render_png(result)[:8] == data[:8]
        return
    text = data.decode()
    assert text == render(result, fmt, width=160)  # the API and the CLI draw the same
    if fmt == "json":
        assert json.loads(text)["kind"] == result.kind
    elif fmt == "html":
        assert text.lstrip().lower().startswith("<!doctype html")
    elif fmt == "csv":  # a real CSV: the view's columns, then its rows (never JSON instead)
        rows = list(csv.reader(io.StringIO(text)))
        table = view_for(result).csv(result)
        assert rows[0] == table.columns and len(rows) == len(table.rows) + 1 > 1, text[:300]
        assert {len(r) for r in rows} == {len(table.columns)}
    else:
        assert text.strip()


@pytest.mark.parametrize("kind", KINDS)
def test_print_shows_the_terminal_tables_not_a_repr(kind):
    result = _result(kind)
    text = str(result)
    out = io.StringIO()
    Console(file=out, width=160, color_system=None, highlight=False).print(result)
    assert _name(result) in text and text == out.getvalue().rstrip("\n")


@pytest.mark.parametrize("kind", KINDS)
def test_load_reads_every_kind_back(kind, tmp_path):
    path = SAVED[kind][-1]
    result = layerscope.load(path)  # a Path ...
    assert type(result) is type(read_result(str(path)))
    assert layerscope.load(str(path)).to_dict() == result.to_dict()  # ... or a str
    resaved = tmp_path / "r.json"
    resaved.write_text(json.dumps(result.to_dict()))
    assert layerscope.load(resaved).to_dict() == result.to_dict()


BAD = [  # (id, file content or None for a missing file, fragment of the one-line message)
    ("missing", None, "no such file"),
    ("not-json", "not json at all\n", "not JSON"),
    ("not-utf8", b"\xff\xfe\x00", "not JSON"),
    ("json-list", "[1, 2]", "not a layerscope result"),
    ("json-without-kind", '{"a": 1}', "not a layerscope result (no 'kind' key)"),
    ("unknown-kind", '{"kind": "horoscope", "schema_version": "1.0"}', "unknown kind"),
    ("newer-layerscope", '{"kind": "sweep", "schema_version": "99.0"}', "newer layerscope"),
]


@pytest.mark.parametrize("content, fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_load_refuses_what_is_not_a_result_in_one_line_naming_the_path(tmp_path, content,
                                                                       fragment):
    path = tmp_path / "saved.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(UserError) as caught:
        layerscope.load(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and fragment in message, message


def test_load_refuses_a_folder_and_a_non_path(tmp_path):
    with pytest.raises(UserError, match="is a directory"):
        layerscope.load(tmp_path)
    with pytest.raises(UserError, match="path must be a file path"):
        layerscope.load(42)
    assert layerscope.load.__doc__ and "load" in layerscope.__all__
