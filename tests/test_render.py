"""`layerscope render` / `report`: saved JSON renders again without the model; golden terminal
tables for every result kind; bad input is one line and exit code 2."""
import csv
import io
import json

import pytest

from layerscope.core.errors import UserError
from layerscope.core.results import KINDS, load_result, read_result
from layerscope.renderers.terminal import to_text
from tests.helpers import check_golden, run_cli
from tests.sample_results import ALL


@pytest.mark.parametrize("kind", KINDS)
def test_terminal_table_golden(kind, update_golden):
    check_golden(f"{kind}_sample.txt", to_text(ALL[kind](), width=150), update_golden)


@pytest.mark.parametrize("kind", list(ALL))
def test_load_result_dispatches_on_kind(kind):
    result = ALL[kind]()
    d = json.loads(json.dumps(result.to_dict()))
    back = load_result(d)
    assert type(back) is type(result) and back.kind == kind
    assert back.to_dict() == d
    assert set(KINDS) == set(ALL)


def _save(tmp_path, result, name="r.json"):
    path = tmp_path / name
    path.write_text(json.dumps(result.to_dict(), indent=2))
    return path


@pytest.mark.parametrize("kind", list(ALL))
def test_render_table_equals_the_original_rendering(kind, tmp_path):
    result = ALL[kind]()
    path = _save(tmp_path, result)
    code, out, err = run_cli("render", str(path), "--width", "150", "--format", "table")
    assert code == 0, err
    from layerscope.renderers import render

    assert out == render(result, "table", width=150)


@pytest.mark.integration
def test_render_profile_numbers_appear_in_table_csv_and_html(tmp_path):
    result = ALL["profile"]()
    path = _save(tmp_path, result)
    code, out, err = run_cli("render", str(path), "--width", "150")
    assert code == 0, err
    for row in result.layers:  # every median (ms, 3 decimals) and share is in the table
        assert f"{row.time['median_s'] * 1e3:.3f}" in out
        assert f"{row.share:.1%}" in out
    code, out, _ = run_cli("render", str(path), "--format", "csv")
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(out))}
    for row in result.layers:
        assert float(rows[row.name]["median_s"]) == pytest.approx(row.time["median_s"])
        assert int(rows[row.name]["macs"]) == row.macs
    html_path = tmp_path / "r.html"
    assert run_cli("render", str(path), "-o", str(html_path))[0] == 0
    page = html_path.read_text()
    for row in result.layers:
        assert f'data-sort="{row.macs}"' in page
        assert f"{row.time['median_s'] * 1e3:.3f}" in page


def test_render_json_round_trips(tmp_path):
    for kind, make in ALL.items():
        result = make()
        path = _save(tmp_path, result, f"{kind}.json")
        code, out, err = run_cli("render", str(path), "--format", "json")
        assert code == 0, err
        assert json.loads(out) == result.to_dict(), kind


def test_render_real_analyze_json_round_trip(tmp_path):
    saved = tmp_path / "a.json"
    assert run_cli("analyze", "resnet20", "--depth", "2", "-o", str(saved))[0] == 0
    d = json.loads(saved.read_text())
    code, out, err = run_cli("render", str(saved), "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["name"] for r in rows] == [r["name"] for r in d["layers"]]
    assert sum(int(r["macs"]) for r in rows) == d["totals"]["macs"]
    code, out, _ = run_cli("render", str(saved), "--width", "150")
    assert f"Total mult-adds (M): {d['totals']['macs'] / 1e6:.2f}" in out


@pytest.mark.integration
def test_render_png_and_plot_size(tmp_path):
    from PIL import Image

    path = _save(tmp_path, ALL["sweep"]())
    png = tmp_path / "s.png"
    code, _, err = run_cli("render", str(path), "-o", str(png), "--plot-size", "640x480")
    assert code == 0, err
    with Image.open(png) as im:
        assert im.size == (640, 480)


def test_report_command_one_page_per_result(tmp_path):
    paths = [str(_save(tmp_path, make(), f"{kind}.json")) for kind, make in ALL.items()]
    out = tmp_path / "report.html"
    code, _, err = run_cli("report", *paths, "-o", str(out), "--title", "All results")
    assert code == 0, err
    page = out.read_text()
    assert page.count('<section class="ls-result"') == len(ALL)
    assert page.count('type="application/json"') == len(ALL)
    assert "<title>All results</title>" in page
    for kind in ALL:
        assert f'data-kind="{kind}"' in page


def _bad_files(tmp_path):
    not_json = tmp_path / "not.json"
    not_json.write_text("{ this is not json")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"schema_version": "1.0", "kind": "horoscope"}))
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(ALL["analyze"]().to_dict() | {"schema_version": "2.0"}))
    broken = tmp_path / "broken.json"
    d = ALL["profile"]().to_dict()
    del d["layers"][0]["name"]
    broken.write_text(json.dumps(d))
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    return {"missing": (str(tmp_path / "nope.json"), "no such file"),
            "not-json": (str(not_json), "not JSON"),
            "unknown-kind": (str(unknown), "unknown kind 'horoscope'"),
            "newer-major": (str(newer), "written by a newer layerscope"),
            "malformed": (str(broken), "layers/0: 'name' is a required property"),
            "not-an-object": (str(array), "not a layerscope result"),
            "directory": (str(tmp_path), "is a directory")}


@pytest.mark.parametrize("case", ["missing", "not-json", "unknown-kind", "newer-major",
                                  "malformed", "not-an-object", "directory"])
@pytest.mark.parametrize("command", ["render", "report"])
def test_bad_input_is_one_line_exit_2(case, command, tmp_path):
    path, message = _bad_files(tmp_path)[case]
    out_file = tmp_path / "out.html"
    code, out, err = run_cli(command, path, "-o", str(out_file))
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert message in err and "Traceback" not in err
    assert not out_file.exists()  # no partial output


def test_older_minor_versions_are_read_and_newer_majors_refused():
    d = ALL["ops"]().to_dict()
    assert load_result(d | {"schema_version": "1.7"}).kind == "ops"
    with pytest.raises(UserError, match="newer layerscope"):
        load_result(d | {"schema_version": "3.1"})


def test_read_result_names_the_file(tmp_path):
    with pytest.raises(UserError, match="nope.json: no such file"):
        read_result(str(tmp_path / "nope.json"))


def test_png_format_needs_an_output_file(tmp_path):
    path = _save(tmp_path, ALL["profile"]())
    code, out, err = run_cli("render", str(path), "--format", "png")
    assert code == 2 and "give -o FILE.png" in err


# the kinds whose sample carries a noise section
NOISY = [kind for kind in KINDS if "noise" in ALL[kind]().to_dict()]


@pytest.mark.parametrize("kind", NOISY)
def test_results_saved_without_noise_render_without_noise_lines(kind, tmp_path):
    d = ALL[kind]().to_dict()
    assert "noise" in d
    del d["noise"]  # a result saved before the noise section existed
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    code, out, err = run_cli("render", str(path), "--width", "150", "--format", "table")
    assert code == 0, err
    assert "Noise:" not in out and "Warning: Noisy" not in out
    if kind == "profile":  # its coverage was computed the old way, and is labelled so
        assert "(sum of row medians / bare median)" in out
    html_path = tmp_path / "old.html"
    assert run_cli("render", str(path), "-o", str(html_path))[0] == 0
    assert '<p class="ls-warning"' not in html_path.read_text()


def test_noise_warning_in_table_and_html(tmp_path):
    result = ALL["sweep"]()  # hand-made: 2 threads + load 7.2 on 8 CPUs
    path = _save(tmp_path, result)
    code, out, _ = run_cli("render", str(path), "--width", "150", "--format", "table")
    assert code == 0 and out.count("Warning: Noisy measurement") == 1
    html_path = tmp_path / "r.html"
    assert run_cli("render", str(path), "-o", str(html_path))[0] == 0
    page = html_path.read_text()
    assert page.count('<p class="ls-warning" role="note">Warning: Noisy measurement') == 1


def test_profile_mean_beside_median_in_table_csv_html_and_chart(tmp_path):
    from layerscope.renderers.charts import charts

    result = ALL["profile"]()
    result.layers[0].time["mean_s"] = 0.000777  # conv1: median 0.250 ms, mean 0.777 ms
    path = _save(tmp_path, result)
    code, out, _ = run_cli("render", str(path), "--width", "150", "--format", "table")
    # 0.777 > 1.5 x 0.250: the mean carries the noisy-row mark (core.noise.ROW_MARK)
    assert code == 0 and "Mean ms" in out and "0.250 │  0.777*" in out
    code, out, _ = run_cli("render", str(path), "--format", "csv")
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(out))}
    assert float(rows["conv1"]["mean_s"]) == pytest.approx(0.000777)
    html_path = tmp_path / "r.html"
    assert run_cli("render", str(path), "-o", str(html_path))[0] == 0
    assert ">Mean ms<" in html_path.read_text() and ">0.777*<" in html_path.read_text()
    latency = charts(result)[0]
    assert any("mean 0.777 ms" in str(getattr(p, "tip", "")) for s in latency.series
               for p in s.points)
