"""The kinds table (core/kinds.py): each result kind is declared once, by its record class, and
loading, display, the schema's dispatch and list of kinds follow from it; a new kind is its
record module, its view module and one registration line."""
from __future__ import annotations

import io
import re
from dataclasses import dataclass

import jsonschema
import pytest
from rich.console import Console

from layerscope.core import kinds, results
from layerscope.core.document import ResultDocument
from layerscope.core.errors import UserError
from layerscope.core.results import KINDS, load_result, record_class

# kind -> the class that reads it, where it lives now (hand-written: the records moved to core
# keep their names)
WHERE = {
    "analyze": "layerscope.core.report.Report",
    "profile": "layerscope.core.report.Report",
    "ops": "layerscope.core.optable.OpTable",
    "sweep": "layerscope.core.sweep_records.SweepReport",
    "compare": "layerscope.core.compare_records.Comparison",
    "activations": "layerscope.core.activation_records.ActivationCapture",
    "llm": "layerscope.core.llm_records.LLMReport",
    "plan": "layerscope.core.llm_records.PlanReport",
    "train": "layerscope.core.records.train.TrainReport",
    "ablate": "layerscope.core.records.ablate.AblationReport",
    "loop": "layerscope.core.records.loop.LoopProfile",
    "scaling": "layerscope.core.records.scaling.ScalingReport",
    "advice": "layerscope.core.records.advice.AdviceReport",
    "decode": "layerscope.core.records.decode.DecodeProfile",
    "memory": "layerscope.core.records.memory.MemoryReport",
    "diff": "layerscope.core.diff_records.DiffReport",
}


def test_the_kinds_are_the_declared_ones():
    assert sorted(WHERE) == list(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_read_by_the_class_that_declares_it(kind):
    cls = record_class(kind)
    assert cls.__module__.removeprefix("layerscope.core.") in kinds.record_modules()
    if kind in WHERE:  # every kind is (test_the_kinds_are_the_declared_ones)
        assert f"{cls.__module__}.{cls.__qualname__}" == WHERE[kind]
    assert kind in (cls.kinds or (cls.kind,))
    assert issubclass(cls, kinds.Result)


@pytest.mark.parametrize("old,new", [
    ("layerscope.analysis.sweep:SweepReport", "layerscope.core.sweep_records:SweepReport"),
    ("layerscope.analysis.sweep:SweepCell", "layerscope.core.sweep_records:SweepCell"),
    ("layerscope.analysis.compare:Comparison", "layerscope.core.compare_records:Comparison"),
    ("layerscope.analysis.compare.result:CompareRow",
     "layerscope.core.compare_records:CompareRow"),
    ("layerscope.analysis.compare.result:TotalRow", "layerscope.core.compare_records:TotalRow"),
    ("layerscope.analysis.compare.result:ROW_METRICS",
     "layerscope.core.compare_records:ROW_METRICS"),
    ("layerscope.analysis.activations:ActivationCapture",
     "layerscope.core.activation_records:ActivationCapture"),
    ("layerscope.analysis.activations:ActivationStat",
     "layerscope.core.activation_records:ActivationStat"),
], ids=lambda s: s.split(":")[-1])
def test_old_import_paths_name_the_records_in_core(old, new):
    import importlib

    def get(path):
        module, name = path.split(":")
        return getattr(importlib.import_module(module), name)

    assert get(old) is get(new)


def test_a_second_class_for_a_kind_is_refused():
    with pytest.raises(ValueError, match="'sweep' is declared by layerscope.core.sweep_records"):
        @dataclass
        class AnotherSweep(ResultDocument):
            kind: str = "sweep"
    assert record_class("sweep").__name__ == "SweepReport"


def test_activations_arrays_are_never_written_nor_read():
    from tests.sample_results import activations_capture

    capture = activations_capture()
    capture.arrays["conv1"] = [1.0, 2.0]
    d = capture.to_dict()
    assert list(d) == ["schema_version", "kind", "model", "pattern", "layers"]
    back = load_result({**d, "arrays": {"conv1": [9]}})
    assert back.arrays == {} and back.stats == back.layers == capture.layers


# ------------------------------------------------------------------ a new kind, end to end
@pytest.fixture
def fresh_table(monkeypatch):
    """The kinds table, the views and the derived caches as they are, restored afterwards."""
    from layerscope import views
    from layerscope.schema import generate

    monkeypatch.setattr(kinds, "_TABLE", dict(kinds._TABLE))
    monkeypatch.setattr(views, "VIEWS", dict(views.VIEWS))
    for cached in (generate.definitions,):
        cached.cache_clear()
    yield
    for cached in (generate.definitions,):
        cached.cache_clear()


# what a new kind's record module holds (written to a file: its type hints are read back)
TOY_RECORDS = '''
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument


@dataclass
class ToyItem(Record):
    """One thing counted."""

    name: str
    count: int


@dataclass
class ToyReport(ResultDocument):
    """Things counted in a model."""

    model: str
    items: list[ToyItem]
    settings: dict[str, Any] = field(default_factory=dict)
    kind: str = "toy"
    schema_version: str = "1.0"
'''


def _toy_kind(folder, monkeypatch):
    """A new kind: its record module (imported, as the kinds table imports core's record
    modules) and its view, registered in one line."""
    import importlib

    from layerscope.views import register
    from layerscope.views.sections import DataTable, Lines, View

    (folder / "toy_records.py").write_text(TOY_RECORDS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(__import__("sys").modules, "toy_records", raising=False)
    module = importlib.import_module("toy_records")
    register("toy", View(heading=lambda r: (f"{r.model} — toy", ""),
                         terminal=lambda r, **_: [Lines([f"{r.model}: {len(r.items)} items"])],
                         csv=lambda r: DataTable(["name", "count"],
                                                 [[i.name, i.count] for i in r.items])))
    return module.ToyReport(model="tinynet", items=[module.ToyItem("conv1", 3)])


def test_a_new_kind_is_loaded_shown_and_in_the_schema_from_its_declaration(
        fresh_table, tmp_path, monkeypatch):
    from layerscope.schema.generate import generated_schema

    toy = _toy_kind(tmp_path, monkeypatch)
    assert "toy" in results.all_kinds()
    back = load_result(toy.to_dict(), validate=False)
    assert type(back) is type(toy) and back == toy
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(back)
    assert "tinynet: 1 items" in out.getvalue() and "tinynet: 1 items" in str(back)
    assert "tinynet — toy" in back._repr_html_()  # its heading (it has no tables)

    schema = generated_schema()
    assert "toy" in schema["$defs"]["header"]["properties"]["kind"]["enum"]
    assert {"if": {"properties": {"kind": {"const": "toy"}}, "required": ["kind"]},
            "then": {"$ref": "#/$defs/toy"}} in schema["allOf"]
    assert schema["$defs"]["toy"]["properties"]["items"] == {
        "type": "array", "items": {"$ref": "#/$defs/toy_item"}}
    check = jsonschema.Draft202012Validator(schema)
    assert not list(check.iter_errors(toy.to_dict()))
    broken = toy.to_dict()
    broken["items"][0]["count"] = -1
    assert list(check.iter_errors(broken))


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(UserError, match=re.escape(
            "(unknown kind 'toy'); layerscope results are ablate, activations, advice, analyze, "
            "compare, decode, diff, "
            "llm, loop, memory, ops, plan, profile, scaling, sweep, train")):
        load_result({"kind": "toy", "schema_version": "1.0"})


def test_the_schema_does_not_depend_on_what_was_imported():
    """Classes of kinds whose records are not in core register themselves once imported; the
    generated schema stays the shipped one."""
    import json

    import layerscope.training.ablation  # noqa: F401 - imported for their registration
    import layerscope.training.inference_loop  # noqa: F401
    import layerscope.training.loop  # noqa: F401
    import layerscope.training.scaling  # noqa: F401
    from layerscope.schema import SCHEMA_PATH
    from layerscope.schema.generate import generated_schema, schema_text

    with open(SCHEMA_PATH, encoding="utf-8") as f:
        shipped = f.read()
    assert schema_text(generated_schema(json.loads(shipped))) == shipped
