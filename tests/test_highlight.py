"""--highlight: one parser, one rule for the terminal table, the HTML table, the SVG charts and the
PNG, kept in the result's settings so that ``render`` of a saved JSON highlights the same rows."""
from __future__ import annotations

import json

import pytest

from layerscope.core.errors import UserError
from layerscope.core.results import read_result
from layerscope.renderers import render
from layerscope.renderers.charts import charts
from layerscope.renderers.terminal import to_text
from layerscope.views import view_for
from layerscope.views.highlight import (
    apply_highlight,
    describe,
    hot_predicate,
    parse_highlight,
    rule_of,
)
from tests.helpers import run_cli
from tests.sample_results import analyze_report, profile_report


@pytest.mark.parametrize("text, expected", [
    ("0.00036", {"rule": "seconds", "value": 0.00036}),
    ("3.6e-4s", {"rule": "seconds", "value": 3.6e-4}),
    ("3.6E-4S", {"rule": "seconds", "value": 3.6e-4}),
    ("0.36ms", {"rule": "seconds", "value": 0.36e-3}),
    (" 2 ", {"rule": "seconds", "value": 2.0}),
    ("top-5", {"rule": "top", "value": 5}),
    ("TOP5", {"rule": "top", "value": 5}),
    ("10%", {"rule": "share", "value": 0.10}),
    ("2.5%", {"rule": "share", "value": 0.025}),
    ("100%", {"rule": "share", "value": 1.0}),
    ("default", {"rule": "default"}),
], ids=["seconds", "seconds-exp-s", "upper-case", "milliseconds", "spaces", "top-5", "top5",
        "share", "share-fraction", "share-all", "default"])
def test_parse_highlight(text, expected):
    got = parse_highlight(text)
    assert got["rule"] == expected["rule"]
    assert got.get("value") == pytest.approx(expected.get("value"))


@pytest.mark.parametrize("text, words", [
    ("", "write seconds"), ("banana", "write seconds"),
    ("top-0", "N of top-N must be at least 1"), ("1e20s", "at most 3600"),
    ("top--3", "write seconds"), ("0", "more than 0 seconds"), ("0s", "more than 0 seconds"),
    ("-1", "write seconds"), ("0%", "more than 0%"), ("150%", "at most 100%"),
    ("1e999", "more than 0 seconds"), ("5 us", "write seconds"), ("nan", "write seconds"),
], ids=["empty", "word", "top-0", "huge-seconds", "top-negative", "zero", "zero-s", "negative",
        "share-0",
        "share-over", "infinite", "unit-us", "nan"])
def test_parse_highlight_rejects(text, words):
    with pytest.raises(UserError, match=words):
        parse_highlight(text)


# profile_report medians: conv1 0.250, bn1 0.040, relu 0.020, fc 0.090 ms of 0.420 ms end to end
# -> shares 59.5%, 9.5%, 4.8%, 21.4%; ranks 1, 3, 4, 2.
@pytest.mark.parametrize("text, hot", [
    ("default", ["conv1", "bn1", "fc"]),  # share ≥ 10% (conv1, fc) or rank ≤ 3 (+ bn1)
    ("0.00009", ["conv1", "fc"]),  # median ≥ 0.09 ms: fc exactly at the threshold counts
    ("0.041ms", ["conv1", "fc"]),
    ("top-1", ["conv1"]),
    ("top-4", ["conv1", "bn1", "relu", "fc"]),
    ("20%", ["conv1", "fc"]),
    ("60%", []),
], ids=["default", "seconds-at-threshold", "ms", "top-1", "top-all", "share", "none"])
def test_one_rule_everywhere(text, hot):
    r = profile_report()
    apply_highlight(r, text)
    is_hot = hot_predicate(rule_of(r))
    assert [row.name for row in r.layers if is_hot(row)] == hot
    # HTML table rows, and the bars and roofline points of the charts: the same layers
    table = next(t for t in view_for(r).tables(r) if t.id == "layers")
    assert [row[0].sort for row, h in zip(table.rows, table.hot) if h] == hot
    bars, roof = charts(r)
    assert sorted(r.layers[int(p.x)].name for s in bars.series for p in s.points if p.hot) \
        == sorted(hot)
    assert sorted(p.label for s in roof.series for p in s.points if p.hot) == sorted(hot)
    assert bars.note.startswith(describe(rule_of(r)))


@pytest.mark.parametrize("text, words", [
    (None, "hot layers (share ≥ 10% or top 3)"), ("3.6e-4s", "layers with median ≥ 0.36 ms"),
    ("top-5", "the 5 slowest layers"), ("top-1", "the 1 slowest layer"),
    ("10%", "layers with share ≥ 10%"),
], ids=["default", "seconds", "top", "top-1", "share"])
def test_describe(text, words):
    assert describe(parse_highlight(text) if text else None) == words


def test_terminal_table_says_which_rule_and_marks_those_rows():
    r = profile_report()
    apply_highlight(r, "top-1")
    text = to_text(r, width=150)
    assert "red rows: the 1 slowest layer" in text


def test_highlight_only_for_profile_results():
    with pytest.raises(UserError, match="applies to profile results"):
        apply_highlight(analyze_report(), "top-3")


def test_render_of_saved_json_keeps_the_rule(tmp_path):
    src = tmp_path / "p.json"
    src.write_text(render(profile_report(), "json"), encoding="utf-8")
    saved = tmp_path / "p2.json"
    code, _, err = run_cli("render", str(src), "--highlight", "0.09ms", "-o", str(saved),
                           "--format", "json")
    assert code == 0, err
    assert json.loads(saved.read_text())["settings"]["highlight"] == \
        {"rule": "seconds", "value": pytest.approx(9e-5)}
    again = read_result(str(saved))
    assert rule_of(again) == {"rule": "seconds", "value": pytest.approx(9e-5)}
    code, out, _ = run_cli("render", str(saved), "--width", "150")
    assert code == 0 and "red rows: layers with median ≥ 0.09 ms" in out
    html = tmp_path / "p.html"
    assert run_cli("render", str(saved), "-o", str(html))[0] == 0
    assert "layers with median ≥ 0.09 ms are outlined and named" in html.read_text()


@pytest.mark.parametrize("value", ["banana", "top-0", "0%", "-3"],
                         ids=["word", "top-0", "share-0", "negative"])
def test_cli_bad_highlight_is_one_line_exit_2(tmp_path, value):
    src = tmp_path / "p.json"
    src.write_text(render(profile_report(), "json"), encoding="utf-8")
    code, out, err = run_cli("render", str(src), f"--highlight={value}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--highlight" in err and "Traceback" not in err


def test_cli_highlight_on_a_result_without_layers_times(tmp_path):
    src = tmp_path / "a.json"
    src.write_text(render(analyze_report(), "json"), encoding="utf-8")
    code, _, err = run_cli("render", str(src), "--highlight", "top-3")
    assert code == 2 and "applies to profile results" in err
