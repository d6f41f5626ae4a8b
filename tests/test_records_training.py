"""The training kinds' records (train, ablate, loop, scaling) live in layerscope/core/records/:
their schema definitions are generated from the dataclasses, files written by every earlier
release load into them, the sections the training code writes as dicts are read back as
records that write the same JSON, and the old import paths name the same classes."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from layerscope.core.records.ablate import AblationReport, RepeatBreakdown, VariantResult
from layerscope.core.records.loop import LoopLayer, LoopProfile
from layerscope.core.records.phases import PhaseBreakdown
from layerscope.core.records.scaling import ScalingPoint, ScalingReport
from layerscope.core.records.train import (
    Communication,
    LayerSeconds,
    PhaseMemory,
    RankEntry,
    Straggler,
    TrainEpoch,
    TrainReport,
    WatchedScript,
)
from layerscope.core.results import read_result
from layerscope.schema import errors, load_schema
from layerscope.schema.generate import GENERATED, definitions, generated_schema, record_schema
from layerscope.training import ablation, comm, ranks
from layerscope.training.phases import PhaseTotals
from tests.sample_results import ALL

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
KINDS = {"train": TrainReport, "ablate": AblationReport, "loop": LoopProfile,
         "scaling": ScalingReport}
# every definition these kinds use, and the record it is generated from
DEFS = {"train": TrainReport, "train_epoch": TrainEpoch, "train_script": WatchedScript,
        "train_layer": LayerSeconds, "train_phase_memory": PhaseMemory,
        "train_rank": RankEntry, "train_communication": Communication,
        "train_straggler": Straggler, "phases": PhaseBreakdown, "ablate": AblationReport,
        "ablate_variant": VariantResult, "loop": LoopProfile, "loop_layer": LoopLayer,
        "scaling": ScalingReport, "scaling_point": ScalingPoint}


@pytest.mark.parametrize("name", DEFS)
def test_definition_is_generated_from_its_record(name):
    assert GENERATED[name] is DEFS[name]
    # rebuilt from nothing: the shipped definition owes nothing to a hand-written one
    base = load_schema()
    without = {**base, "$defs": {k: v for k, v in base["$defs"].items() if k != name}}
    assert generated_schema(without)["$defs"][name] == base["$defs"][name]


@pytest.mark.parametrize("kind", KINDS)
def test_kind_definition_describes_its_record(kind):
    schema = record_schema(KINDS[kind])
    assert schema["type"] == "object" and schema["description"].startswith(KINDS[kind].__name__)


SAVED = sorted(p for kind in KINDS for p in DATA.glob(f"{kind}_*.json"))


@pytest.mark.parametrize("path", SAVED, ids=[p.stem for p in SAVED])
def test_file_of_an_earlier_release_loads_into_the_core_record(path):
    result = read_result(str(path))
    assert type(result) is KINDS[path.stem.rsplit("_", 1)[0]]
    assert json.dumps(result.to_dict(), indent=2) == path.read_text(encoding="utf-8").rstrip()


@pytest.mark.parametrize("release", ["0.2", "0.3", "0.4"])
def test_ablate_repeats_keep_their_step_spread(release):
    # ablate writes each repeat's p10/p90 step time since 0.2; a loaded report dropped them,
    # and a variant of one repeat had no range to judge 'beyond noise' by
    path = DATA / f"ablate_{release}.json"
    saved = json.loads(path.read_text(encoding="utf-8"))["variants"][0]["repeats"][0]
    variant = read_result(str(path)).variants[0]
    assert isinstance(variant.repeats[0], RepeatBreakdown)
    assert ablation._range(variant) == (saved["step_p10_s"], saved["step_p90_s"])


def test_ablate_repeat_definition_lists_the_phases_and_the_spread():
    assert definitions()["ablate_variant_repeat"] is RepeatBreakdown
    repeat = load_schema()["$defs"]["ablate_variant_repeat"]
    assert repeat["properties"]["seconds"] == load_schema()["$defs"]["phases"]["properties"][
        "seconds"]
    assert {"step_p10_s", "step_p90_s"} <= set(repeat["properties"])
    assert "step_p10_s" not in repeat["required"]  # 0.1 reports have none
    assert "step_p10_s" not in RepeatBreakdown.from_dict(
        json.loads((DATA / "ablate_0.1.json").read_text())["variants"][0]["repeats"][0])


@pytest.mark.parametrize("module,name", [
    ("layerscope.training.loop", "TrainReport"),
    ("layerscope.training.ablation", "AblationReport"),
    ("layerscope.training.ablation", "VariantResult"),
    ("layerscope.training.inference_loop", "LoopProfile"),
    ("layerscope.training.inference_loop", "LoopLayer"),
    ("layerscope.training.scaling", "ScalingReport"),
    ("layerscope.training.scaling", "ScalingPoint"),
])
def test_old_import_paths_name_the_core_records(module, name):
    import importlib

    assert getattr(importlib.import_module(module), name) is {
        c.__name__: c for c in (*DEFS.values(), *KINDS.values())}[name]


def test_watch_takes_the_record_from_core_not_from_the_training_loop():
    tree = ast.parse((ROOT / "layerscope/training/watch.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "layerscope.core.records.train" in imported
    assert "layerscope.training.loop" not in imported


def _breakdown(seconds, steps, samples, wall, tokens=0):
    totals = PhaseTotals(seconds=dict(seconds), steps=steps, samples=samples, wall=wall,
                         tokens=tokens)
    return totals.to_dict()


def _distributed_report():
    """A train report as the loop writes it for 2 ranks, every section from the code that
    writes it: rank 1 spends 4 ms more in forward (the straggler); two all-reduce buckets."""
    per_rank = [_breakdown({"forward": 0.010 * 20, "backward": 0.020 * 20, "wait": 0.004 * 20},
                           20, 640, 0.7),
                _breakdown({"forward": 0.014 * 20, "backward": 0.020 * 20}, 20, 640, 0.7)]
    entries = [ranks.rank_entry(r, b) for r, b in enumerate(per_rank)]
    steps = [{"buckets": [{"op": "all_reduce", "bytes": 1 << 20, "seconds": 0.002, "start": 0.0},
                          {"op": "all_reduce", "bytes": 4096, "seconds": 0.001, "start": 0.003}],
              "communication_s": 0.003, "exposed_s": 0.001}] * 3
    d = ALL["train"]().to_dict()
    d.update(rank=0, world_size=2, ranks=entries,
             communication=comm.communication(steps, (1 << 20) + 4096, 2),
             straggler=ranks.straggler(entries), job=ranks.job_throughput(entries))
    return d


def _watched_report():
    """A watched script's report with --layers and --memory, a language model's tokens."""
    d = ALL["train"]().to_dict()
    d.update(epochs=[], breakdown=_breakdown({"forward": 0.5}, 10, 80, 1.0, tokens=4096),
             script={"name": "train.py", "argv": ["--epochs", "1"]},
             layers=[{"name": "fc", "type": "Linear", "calls": 10, "forward_s": 0.2,
                      "forward_s_per_step": 0.02, "own_s": 0.2, "backward_s": 0.3}],
             phase_memory={"forward": {"peak_rss_bytes": 1 << 30, "peak_cuda_bytes": 1 << 28},
                           "backward": {"peak_rss_bytes": 1 << 30}},
             process_group={"rank": 0, "world_size": 1, "backend": "gloo"})
    return d


@pytest.mark.parametrize("make", [_distributed_report, _watched_report],
                         ids=["distributed", "watched"])
def test_sections_read_back_as_records_that_write_the_same_json(make):
    d = json.loads(json.dumps(make()))
    assert errors(d) == []
    report = TrainReport.from_dict(d)
    assert json.dumps(report.to_dict()) == json.dumps(d)  # same keys, order and values
    assert all(isinstance(e, TrainEpoch) for e in report.epochs)
    assert isinstance(report.breakdown, PhaseBreakdown)
    if report.ranks:
        assert isinstance(report.ranks[0], RankEntry)
        assert isinstance(report.communication, Communication)
        assert isinstance(report.straggler, Straggler)
        # read like the dicts they were: the straggler is rank 1 (4 ms more forward a step)
        assert report.straggler["rank"] == 1 and report.straggler["phase"] == "forward"
        assert report.communication["buckets"][1]["bytes"] == 4096
    else:
        assert isinstance(report.script, WatchedScript) and report.script["argv"] == ["--epochs",
                                                                                   "1"]
        assert isinstance(report.phase_memory["backward"], PhaseMemory)
        assert "peak_cuda_bytes" not in report.phase_memory["backward"]
        assert report.breakdown["tokens"] == 4096


def test_tokens_per_s_goes_with_tokens():
    # no tokens: neither key; tokens over a zero wall time: tokens_per_s written as null
    assert "tokens_per_s" not in PhaseBreakdown.from_dict(_breakdown({}, 0, 0, 0.0))
    zero_wall = _breakdown({}, 1, 8, 0.0, tokens=64)
    assert zero_wall["tokens_per_s"] is None
    assert PhaseBreakdown.from_dict(zero_wall).to_dict() == zero_wall
