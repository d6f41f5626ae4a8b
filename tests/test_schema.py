"""The published JSON schema (layerscope/schema/report.schema.json) accepts the JSON output of
every command and rejects what a reader could not use."""
import json
from importlib import resources

import jsonschema
import pytest

from layerscope.core.results import KINDS
from tests.helpers import run_cli
from tests.sample_results import ALL


@pytest.fixture(scope="module")
def validator():
    text = resources.files("layerscope.schema").joinpath("report.schema.json").read_text()
    schema = json.loads(text)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _problems(validator, d):
    # an "X | None" record field is anyOf [record, null]: the record branch says what is wrong
    found = [max(e.context, key=lambda c: len(c.path)) if e.context else e
             for e in validator.iter_errors(d)]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


COMMANDS = [
    ("analyze", ["analyze", "resnet20", "--depth", "2"]),
    ("analyze-training", ["analyze", "mnist-cnn", "--mode", "training"]),
    ("profile", ["profile", "resnet20", "--runs", "2", "--warmup", "1"]),
    ("profile-backward", ["profile", "mnist-cnn", "--runs", "2", "--warmup", "1", "--backward",
                          "--no-roofline"]),
    ("profile-kernels", ["profile", "mnist-cnn", "--runs", "2", "--warmup", "1", "--backward",
                         "--kernels", "--no-roofline"]),
    ("ops", ["ops", "mnist-cnn", "--runs", "2", "--warmup", "1"]),
    ("sweep", ["sweep", "mnist-cnn", "--batch-sizes", "1,2", "--runs", "2", "--warmup", "1"]),
    ("train", ["train", "--steps", "2", "--no-eval", "--synthetic"]),
    ("train-kernels", ["train", "--steps", "3", "--no-eval", "--synthetic", "--kernels"]),
    ("ablate", ["ablate", "digits-cnn", "--steps", "3", "--warmup-steps", "1", "--synthetic",
                "--variants", "baseline,pin-memory"]),
    ("loop", ["profile", "mnist-cnn", "--loop", "mnist", "--synthetic", "--runs", "2",
              "--batch-size", "4"]),
]


@pytest.mark.integration
@pytest.mark.parametrize("name,argv", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_command_json_output_validates(name, argv, validator, tmp_path):
    out = tmp_path / "r.json"
    extra = ["--out", str(tmp_path / "run")] if argv[0] == "train" else []
    code, _, err = run_cli(*argv, *extra, "--format", "json", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == (name if name == "loop" else argv[0])
    assert d["schema_version"].startswith("1.")
    assert _problems(validator, d) == []


def test_activations_json_validates(validator, tmp_path):
    code, out, err = run_cli("activations", "mnist-cnn", "--layers", "Conv2d",
                             "-o", str(tmp_path / "a.npz"), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["kind"] == "activations"
    assert _problems(validator, d) == []


@pytest.mark.parametrize("kind", list(ALL))
def test_sample_results_validate(kind, validator):
    assert _problems(validator, json.loads(json.dumps(ALL[kind]().to_dict()))) == []


def test_kinds_in_schema_are_the_kinds_layerscope_reads(validator):
    assert validator.schema["$defs"]["header"]["properties"]["kind"]["enum"] == list(KINDS)


BROKEN = [
    ("no-kind", lambda d: d.pop("kind"), "'kind' is a required property"),
    ("unknown-kind", lambda d: d.update(kind="horoscope"), "is not one of"),
    ("no-version", lambda d: d.pop("schema_version"), "'schema_version' is a required"),
    ("newer-major", lambda d: d.update(schema_version="2.0"), "does not match"),
    ("row-without-name", lambda d: d["layers"][0].pop("name"), "'name' is a required"),
    ("macs-as-text", lambda d: d["layers"][0].update(macs="many"), "is not of type 'integer'"),
    ("profile-without-timing", lambda d: d.pop("end_to_end"), "'end_to_end' is a required"),
    ("bad-bound", lambda d: d["layers"][0]["roofline"].update(bound="cpu"), "is not one of"),
]


@pytest.mark.parametrize("name,breaks,message", BROKEN, ids=[b[0] for b in BROKEN])
def test_schema_rejects_broken_results(name, breaks, message, validator):
    d = json.loads(json.dumps(ALL["profile"]().to_dict()))
    breaks(d)
    problems = _problems(validator, d)
    assert problems and any(message in p for p in problems), problems


def test_schema_checks_each_kind_by_its_own_definition(validator):
    d = ALL["ablate"]().to_dict()
    d["variants"][0]["status"] = "maybe"
    assert any("is not one of" in p for p in _problems(validator, d))
    d = ALL["train"]().to_dict()
    del d["breakdown"]["wall_s"]
    assert any("'wall_s' is a required" in p for p in _problems(validator, d))
    d = ALL["sweep"]().to_dict()
    d["cells"][0]["batch_size"] = -1
    assert _problems(validator, d)


# what the definitions generated from Report, OpTable and compare's sides and row numbers
# reject that the hand-written ones let through: the record's types (an analyze report's
# measured sections), counts, and the sections a profile must have (null is never written for
# them)
STRICTER = [
    ("analyze", lambda d: d.update(overhead="high"), "is not of type"),
    ("analyze", lambda d: d.update(by_type={}), "is not of type"),
    ("analyze", lambda d: d.update(noise=[]), "is not of type 'object'"),
    ("ops", lambda d: d["rows"][0].update(calls=-1), "less than the minimum of 0"),
    ("ops", lambda d: d["rows"][0].update(calls=1.5), "is not of type 'integer'"),
    ("profile", lambda d: d["layers"][0].update(time=None), "is not of type 'object'"),
    ("profile", lambda d: d.update(overhead=None), "is not of type 'number'"),
    ("compare", lambda d: d["rows"][0]["a"].update(macs=-1), "less than the minimum of 0"),
]


@pytest.mark.parametrize("kind,breaks,message", STRICTER,
                         ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(STRICTER)])
def test_generated_definitions_check_the_records_types(kind, breaks, message, validator):
    d = json.loads(json.dumps(ALL[kind]().to_dict()))
    assert not _problems(validator, d)
    breaks(d)
    problems = _problems(validator, d)
    assert problems and any(message in p for p in problems), problems


def test_every_kinds_definitions_are_generated():
    """The dispatch on ``kind`` refers to generated definitions only: no kind is written by
    hand, only the header and the open values (environment, shapes) are."""
    from layerscope.core.kinds import schema_refs
    from layerscope.core.results import all_kinds, record_class
    from layerscope.schema import load_schema
    from layerscope.schema.generate import definitions, kind_definitions

    generated = set(definitions()) | set(kind_definitions())
    for kind in all_kinds():
        refs = schema_refs(record_class(kind), kind)
        assert set(refs) <= generated, (kind, refs)
    assert set(load_schema()["$defs"]) - generated == {"header", "environment", "shapes"}


def test_a_comparisons_sides_and_row_numbers_are_records():
    """What the compare_side and compare_numbers definitions are generated from, written and
    read back as the dicts they were."""
    from layerscope.core.compare_records import CompareSide, RowNumbers
    from layerscope.core.results import load_result

    c = ALL["compare"]()
    d = c.to_dict()
    assert d["a"] == {"source": "tinynet", "model": "tinynet", "frontend": "torch",
                      "inputs": [{"shape": [1, 3, 32, 32], "dtype": "float32"}],
                      "exporter": None, "layers": 4, "kind": "analyze"}
    for result in (c, load_result(json.loads(json.dumps(d)))):
        assert isinstance(result.a, CompareSide) and isinstance(result.b, CompareSide)
        assert result.a.get("layers") == 4 and result.model == "tinynet vs tinynet.onnx"
        row = result.rows[0]
        assert isinstance(row.a, RowNumbers) and row.a["params"] == 448
        assert row.a == d["rows"][0]["a"]  # reads like the dict it was


def test_a_profile_must_have_the_fields_marked_required_in_profile():
    from layerscope.core.report import Report
    from layerscope.schema.generate import kind_definitions, required_in

    schema = required_in(Report, "profile")
    assert schema["required"] == ["end_to_end", "overhead", "coverage", "by_type"]
    layer = schema["properties"]["layers"]["items"]
    assert layer["required"] == ["time", "share", "rank"]
    assert layer["properties"]["time"] == {"$ref": "#/$defs/timing"}  # not null
    assert required_in(Report, "analyze") is None
    assert kind_definitions()["profile"]["required"] == schema["required"]


def test_shipped_schema_equals_the_generated_one():
    """The record definitions are generated from the dataclasses; regenerate with
    `python -m layerscope.schema.generate` after changing a record."""
    from layerscope.schema import SCHEMA_PATH
    from layerscope.schema.generate import generated_schema, main, schema_text

    with open(SCHEMA_PATH, encoding="utf-8") as f:
        shipped = f.read()
    assert schema_text(generated_schema(json.loads(shipped))) == shipped
    assert main(["--check"]) == 0


# definitions a shipped schema may still hold after what produced them went away
STALE = [
    ("removed-kind", {"toy": {"type": "object", "required": ["model"],
                              "properties": {"model": {"type": "string"}}}}),
    ("removed-kind-and-its-records", {
        "toy": {"type": "object", "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/toy_item"}}}},
        "toy_item": {"type": "object", "properties": {"count": {"type": "integer"}}}}),
    # a train report's post-mortem rows before they were shared as post_mortem
    ("record-renamed", {"train_post_mortem": {"type": "object", "properties": {}},
                        "train_post_mortem_by_module_kind": {"type": "object"}}),
    ("refers-to-a-live-one", {"old_timing": {"$ref": "#/$defs/timing"}}),
]


@pytest.mark.parametrize("name,stale", STALE, ids=[s[0] for s in STALE])
def test_a_definition_no_kind_produces_fails_the_check_and_is_dropped(
        name, stale, tmp_path, monkeypatch, capsys):
    from layerscope.schema import SCHEMA_PATH, generate

    with open(SCHEMA_PATH, encoding="utf-8") as f:
        shipped = f.read()
    schema = json.loads(shipped)
    defs = list(schema["$defs"].items())
    middle = len(defs) // 2  # where the kind's definitions once were, not only at the end
    schema["$defs"] = dict(defs[:middle] + list(stale.items()) + defs[middle:])
    path = tmp_path / "report.schema.json"
    path.write_text(generate.schema_text(schema), encoding="utf-8")
    monkeypatch.setattr(generate, "SCHEMA_PATH", str(path))

    assert generate.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert f"holds definitions no result kind produces ({', '.join(sorted(stale))})" in err
    assert generate.main([]) == 0  # the generator drops them
    assert path.read_text(encoding="utf-8") == shipped
    assert generate.main(["--check"]) == 0


@pytest.mark.parametrize("hint,expected", [
    (int, {"type": "integer"}),
    ("float | None", {"type": ["number", "null"]}),
    ("list[str]", {"type": "array", "items": {"type": "string"}}),
    ("TimingStats | None", {"anyOf": [{"$ref": "#/$defs/timing"}, {"type": "null"}]}),
    ("dict[str, Any]", {"type": "object"}),
    ("dict[str, float]", {"type": "object", "additionalProperties": {"type": "number"}}),
    ("dict[str, TimingStats]", {"type": "object",
                                "additionalProperties": {"$ref": "#/$defs/timing"}}),
], ids=["int", "optional-float", "list-of-str", "optional-record", "open-dict", "dict-of-float",
        "dict-of-record"])
def test_type_hints_map_to_json_schema(hint, expected):
    from typing import Any  # noqa: F401 - named by the hints evaluated below

    from layerscope.core.stats import TimingStats  # noqa: F401
    from layerscope.schema.generate import type_schema

    assert type_schema(eval(hint) if isinstance(hint, str) else hint) == expected


# ---------------------------------------------------------------- the compiled checker
def _mutations(d, rng, count):
    """``count`` copies of ``d``, each with one to three values replaced, deleted or joined by
    an unknown key (the ways a hand-edited or damaged result breaks)."""
    import copy

    values = [None, True, False, 0, -1, 1.5, -2.5, "x", "", [], {}, [1], {"a": 1}, 10**12,
              "profile", 0.0]

    def paths(x, prefix=()):
        yield prefix
        if isinstance(x, dict):
            for k, v in x.items():
                yield from paths(v, prefix + (k,))
        elif isinstance(x, list):
            for i, v in enumerate(x[:3]):
                yield from paths(v, prefix + (i,))

    found = [p for p in paths(d) if p]
    for _ in range(count):
        m = copy.deepcopy(d)
        for _ in range(rng.choice([1, 1, 2, 3])):
            p = rng.choice(found)
            parent = m
            try:
                for k in p[:-1]:
                    parent = parent[k]
                op = rng.random()
                if op < 0.6:
                    parent[p[-1]] = rng.choice(values)
                elif op < 0.8 and isinstance(parent, dict):
                    del parent[p[-1]]
                elif isinstance(parent, dict):
                    parent["zz_extra"] = 1
            except (KeyError, IndexError, TypeError):
                pass
        yield m


def _jsonschema_lines(validator, d):
    """What schema.errors() said when it was jsonschema's: sorted by path, an anyOf's deepest
    branch, messages cut to 160 characters."""
    out = []
    for e in sorted(validator.iter_errors(d), key=lambda e: list(map(str, e.absolute_path))):
        if e.context:
            e = max(e.context, key=lambda c: len(c.path))
        path = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        out.append(f"{path}: {e.message if len(e.message) < 160 else e.message[:157] + '...'}")
    return out


@pytest.mark.integration
def test_the_compiled_checker_says_what_jsonschema_says(validator):
    """Every saved result of every release (valid alike) and 15 damaged copies of each: the
    same lines, in the same order (the checker replaced jsonschema at run time: 5 ms a layer
    row, minutes for 20,000 rows)."""
    import pathlib
    import random

    from layerscope.schema import errors

    rng = random.Random(0)
    files = sorted(pathlib.Path(__file__).parent.joinpath("data").glob("*.json"))
    assert len(files) > 40
    for path in files:
        d = json.loads(path.read_text())
        assert errors(d) == _jsonschema_lines(validator, d) == [], path.name
        for m in _mutations(d, rng, 15):
            assert errors(m) == _jsonschema_lines(validator, m), path.name


@pytest.mark.parametrize("value,bounded_says", [
    (float("nan"), "nan is not a finite number"),
    (float("inf"), "inf is not a finite number"),
    (float("-inf"), "-inf is not a finite number"),
], ids=["nan", "inf", "-inf"])
def test_a_bounded_number_must_be_finite_and_an_open_one_need_not(value, bounded_says):
    """JSON has no NaN or infinity (Python's json reads them anyway): a timing (bounded) is
    refused naming the field, where jsonschema let NaN through every bound; a number the
    schema does not bound is read as jsonschema reads it."""
    from layerscope.schema import errors
    from tests.sample_results import profile_report

    d = json.loads(json.dumps(profile_report().to_dict()))
    d["layers"][0]["time"]["median_s"] = value
    # (checked by the report definition and again by the profile one, as jsonschema does)
    assert set(errors(d)) == {f"layers/0/time/median_s: {bounded_says}"}
    d = json.loads(json.dumps(profile_report().to_dict()))
    d["layers"][0]["roofline"]["intensity"] = value  # not a timing: no bounds
    assert errors(d) == []


def _profile_dict(n: int) -> dict:
    """profile_report() with ``n`` layer rows, each with 10 samples, as JSON."""
    from layerscope.core.report import LayerRow
    from tests.sample_results import profile_report, with_samples

    r = profile_report()
    proto = r.layers[0]
    rows = []
    for i in range(n):
        row = LayerRow(**{**proto.__dict__, "name": f"blocks.{i // 10}.layer{i % 10}",
                          "rank": i + 1})
        row.time = with_samples(0.01 + 1e-5 * i)
        rows.append(row)
    r.layers = rows
    return json.loads(json.dumps(r.to_dict()))


def _python_calls(fn) -> int:
    """How many Python functions ``fn()`` calls (sys.setprofile): an operation count, which a
    loaded machine cannot change."""
    import sys

    count = [0]

    def counter(frame, event, arg):
        if event == "call":
            count[0] += 1
    sys.setprofile(counter)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def test_checking_a_result_costs_a_fixed_number_of_calls_per_layer_row():
    """Linear, and cheap: each layer row (about 60 values) costs the same number of Python
    calls, at most 150 (jsonschema's general validator made about 2,000 per row)."""
    from layerscope.schema import errors

    errors(_profile_dict(1))  # the checker is compiled once
    small, large = _profile_dict(100), _profile_dict(300)
    per_row = (_python_calls(lambda: errors(large)) - _python_calls(lambda: errors(small))) / 200
    assert per_row <= 150, per_row
    assert _python_calls(lambda: errors(large)) <= 3.1 * _python_calls(lambda: errors(small))
