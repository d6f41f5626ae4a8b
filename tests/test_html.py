"""The HTML report, the PNG plot and the notebook tables, from hand-made results (no model run)
plus one real `analyze --html --plot` through the CLI."""
import json
import re
import struct
import zlib

import pytest

from layerscope.renderers.html import render_html
from layerscope.renderers.plot import render_png
from tests.helpers import run_cli
from tests.sample_results import ALL

CHARTS = {"analyze": {"macs", "params"}, "profile": {"latency", "roofline"},
          "ops": {"operators"}, "sweep": {"sweep-latency", "sweep-throughput"},
          "train": {"train-phases", "loss", "accuracy"}, "ablate": {"ablate-phases"},
          "activations": set(), "compare": {"compare-totals"}, "loop": {"loop-phases"},
          "scaling": {"scaling-speedup"}, "llm": {"llm-memory"}, "plan": {"plan-memory"},
          "advice": {"advice-gains"}, "decode": {"decode-tokens"},
          "memory": {"memory-timeline"}, "diff": {"diff-rows"}}


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk (checked against its CRC)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16:29]
    assert struct.unpack(">I", data[29:33])[0] == zlib.crc32(b"IHDR" + body)
    return struct.unpack(">II", body[:8])


def embedded(page: str) -> list[dict]:
    blocks = re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
    return [json.loads(b) for b in blocks]


@pytest.mark.parametrize("kind", list(ALL))
def test_page_is_self_contained_and_self_describing(kind):
    result = ALL[kind]()
    page = render_html(result)
    assert page.startswith("<!DOCTYPE html>")
    # nothing that could make a request: no external src/href, no CSS url()/@import, no fonts
    assert not re.search(r'(src|href)\s*=\s*"(?!#|data:)', page)
    assert not re.search(r"https?://", page.replace('xmlns="http://www.w3.org/2000/svg"', ""))
    assert "@import" not in page and "url(" not in page and "@font-face" not in page
    assert "fetch(" not in page and "XMLHttpRequest" not in page
    # the embedded JSON is the result
    assert embedded(page) == [json.loads(json.dumps(result.to_dict()))]
    # environment and charts
    if kind != "activations":
        assert "Test CPU 3000" in page and "torchvision" in page
    assert set(re.findall(r'data-chart="([^"]+)"', page)) == CHARTS[kind]
    # one sortable, filterable table at least
    assert 'class="ls-table"' in page and 'class="ls-filter"' in page
    assert "data-sort=" in page


def test_profile_chart_marks_carry_layer_tooltips_and_hot_layers():
    result = ALL["profile"]()
    page = render_html(result)
    latency = re.search(r'<svg[^>]*data-chart="latency".*?</svg>', page, re.S).group(0)
    titles = re.findall(r"<title>(.*?)</title>", latency, re.S)
    assert len(titles) == len(result.layers)
    conv = next(t for t in titles if t.startswith("conv1"))
    assert "(Conv2d)" in conv and "in 1x3x32x32 → out 1x16x32x32" in conv
    assert "median 0.250 ms" in conv and "share 59.5%" in conv
    # hot: share >= 10% or top 3 -> conv1, fc, bn1 are outlined; relu is not
    assert latency.count("ls-mark ls-hot") == 3
    assert page.count('<tr class="ls-hot">') == 3
    # roofline: one point per layer with FLOPs, and the ceiling polyline
    roof = re.search(r'<svg[^>]*data-chart="roofline".*?</svg>', page, re.S).group(0)
    assert roof.count("<circle") == 4 and "<polyline" in roof
    assert "20.0 GB/s" in roof and "100.0 GFLOP/s" in roof


def test_chart_colours_follow_layer_type():
    page = render_html(ALL["analyze"]())
    macs = re.search(r'<svg[^>]*data-chart="macs".*?</svg>', page, re.S).group(0)
    fills = dict(re.findall(r'<rect class="ls-mark[^"]*"[^>]*fill="(#[0-9a-f]{6})"[^>]*>'
                            r"<title>[^(]*\((\w+)\)", macs))
    assert len(set(fills)) == 4  # four layer types, four colours


def test_script_content_is_escaped():
    result = ALL["analyze"]()
    result.model = "</script><script>alert(1)</script>"
    result.layers[0].name = "<img src=x onerror=alert(1)>"
    page = render_html(result)
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert embedded(page)[0]["model"] == result.model  # still the exact JSON


def test_nan_becomes_null_in_embedded_json():
    result = ALL["profile"]()
    result.overhead = float("nan")
    (d,) = embedded(render_html(result))
    assert d["overhead"] is None


@pytest.mark.integration
@pytest.mark.parametrize("kind", [k for k in ALL if CHARTS.get(k) != set()])  # it has charts
@pytest.mark.parametrize("size", [(1200, 800), (641, 479)])
def test_png_has_exactly_the_requested_size(kind, size):
    data = render_png(ALL[kind](), size)
    assert png_size(data) == size


@pytest.mark.parametrize("kind", list(ALL))
def test_every_result_has_a_notebook_table(kind):
    result = ALL[kind]()
    table = result._repr_html_()
    assert table.count("<table") >= 1 and "<script" not in table
    first = {"analyze": "conv1", "profile": "conv1", "ops": "aten::addmm",
             "sweep": "onnxruntime", "train": "Backward", "ablate": "channels-last",
             "activations": "conv1", "compare": "bn1", "loop": "conv1",
             "scaling": "oversubscribed", "llm": "bf16", "plan": "zero3",
             "advice": "channels-last", "decode": "bound (measured ceilings)",
             "memory": "optimizer_state", "diff": "conv1"}[kind]
    assert first in table


def test_cli_analyze_writes_html_and_plot_besides_normal_output(tmp_path):
    html, png = tmp_path / "a.html", tmp_path / "a.png"
    code, out, err = run_cli("analyze", "mnist-cnn", "--format", "json", "--html", str(html),
                             "--plot", str(png), "--plot-size", "800x600")
    assert code == 0, err
    assert json.loads(out)["kind"] == "analyze"  # the normal output is still there
    assert embedded(html.read_text())[0] == json.loads(out)
    assert png_size(png.read_bytes()) == (800, 600)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".layerscope-")]


def test_cli_format_html_from_extension(tmp_path):
    out = tmp_path / "r.htm"
    assert run_cli("analyze", "mnist-cnn", "-o", str(out))[0] == 0
    assert 'data-chart="macs"' in out.read_text()


@pytest.mark.parametrize("size", ["12", "0x100", "axb", "20000x10"])
def test_bad_plot_size_stops_before_any_work(size, tmp_path):
    code, out, err = run_cli("analyze", "mnist-cnn", "--plot", str(tmp_path / "p.png"),
                             "--plot-size", size)
    assert code == 2 and "--plot-size" in err and out == ""
    assert not (tmp_path / "p.png").exists()


def test_unwritable_html_is_one_line(tmp_path):
    code, _, err = run_cli("analyze", "mnist-cnn", "--format", "json",
                           "--html", str(tmp_path / "missing-dir" / "r.html"))
    assert code == 2 and "cannot write" in err and len(err.strip().splitlines()) == 1
