"""Several processes under ``layerscope run`` / ``watch()``: what a watched script's report
may claim. A watched script's backward holds DDP's all-reduce (communication is not timed
apart), its ranks' waits are not measured (no straggler), the job's throughput is every rank's
samples over the job's time, a process group formed outside ``--nproc-per-node`` is recorded
with advice, and ``--nproc-per-node`` processes without a process group trained independently.

The first tests are in-process (a faked process group, hand-made rank reports); the ones that
start processes (gloo on the CPU, 4 steps of a linear layer) are marked slow.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from layerscope.cli.run_cmd import _own_processes_advice
from layerscope.renderers import render
from layerscope.training import ranks
from layerscope.training.loop import TrainReport
from layerscope.training.watch import Watch

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- the process group, in-process


def _fake_group(monkeypatch, world: int | None) -> None:
    """torch.distributed answering as a process of a group of ``world`` (None: no group)."""
    monkeypatch.setattr(dist, "is_initialized", lambda: world is not None)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


def _watched(monkeypatch, world: int | None) -> TrainReport:
    _fake_group(monkeypatch, world)
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Watch(name="ddp.py", argv=[]) as w:
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
    return w.report()


# (id, world size of the group the script formed, backward's label, a note about the group)
GROUPS = [
    ("no-group", None, "Backward", False),
    ("group-of-one", 1, "Backward", False),
    ("ddp-group-of-two", 2, "Backward (incl. all-reduce)", True),
]


@pytest.mark.parametrize("world,label,noted", [g[1:] for g in GROUPS], ids=[g[0] for g in GROUPS])
def test_a_watched_backward_says_it_holds_the_all_reduce(monkeypatch, world, label, noted):
    report = _watched(monkeypatch, world)
    if world is None:
        assert report.process_group is None
    else:
        assert report.process_group == {"rank": 0, "world_size": world, "backend": "gloo"}
    # a group a trainer formed (no launcher's RANK/WORLD_SIZE) names this process's rank
    assert (report.rank, report.world_size) == ((0, world) if world else (None, None))
    assert any("communication is not timed separately" in n for n in report.notes) == noted
    back = TrainReport.from_dict(json.loads(render(report, "json")))
    assert back.process_group == report.process_group
    for fmt in ("table", "html"):
        text = render(back, fmt, width=200)
        assert label in text and "(compute)" not in text, fmt
        assert ("Backward (incl. all-reduce)" in text) == noted, fmt


# (id, process group of the run, advice expected)
ADVICE = [
    ("no-group", None, None),
    ("group-of-one", {"rank": 0, "world_size": 1, "backend": "gloo"}, None),
    ("launched-its-own", {"rank": 0, "world_size": 4, "backend": "nccl"},
     "use layerscope run --nproc-per-node 4 SCRIPT"),
]


@pytest.mark.parametrize("group,advice", [a[1:] for a in ADVICE], ids=[a[0] for a in ADVICE])
def test_a_group_formed_outside_nproc_per_node_gets_advice(group, advice):
    notes = _own_processes_advice(group)
    assert (advice in notes[0] and "only this process (rank 0) is measured" in notes[0]
            if advice else notes == [])


# ---------------------------------------------------------------- merging the ranks' reports


def _rank_report(rank: int, wall: float, group: bool) -> dict:
    """A watched rank's saved report: 4 steps of 16 samples; forward 1 ms, other 1 ms per
    step, backward the rest of ``wall``."""
    r = {"recipe": "ddp.py", "config": {"device": "cpu"}, "run_dir": "", "epochs": [],
         "breakdown": {"seconds": {"forward": 0.004, "backward": wall - 0.008, "other": 0.004},
                       "steps": 4, "samples": 64, "wall_s": wall,
                       "throughput_per_s": 64 / wall},
         "epoch_breakdown": [], "step_seconds": [wall / 4] * 4, "cpu_utilisation": None,
         "peak_rss_bytes": 0, "peak_cuda_bytes": None, "notes": [],
         "script": {"name": "ddp.py", "argv": []}, "rank": rank, "world_size": 2}
    if group:
        r["process_group"] = {"rank": rank, "world_size": 2, "backend": "gloo"}
    return r


# (id, formed a process group, backward's label, a line the report has, lines it must not have)
MERGES = [
    ("ddp", True, "Backward (incl. all-reduce)",
     "straggler not measured", ("(not waiting)", "Wait (barrier)", "independently",
                                "Per process")),
    ("independent", False, "Backward",
     "trained independently", ("(not waiting)", "Wait (barrier)", "Straggler", "all-reduce",
                               "Per rank", "rank 1")),
]


@pytest.mark.parametrize("group,label,says,never", [m[1:] for m in MERGES],
                         ids=[m[0] for m in MERGES])
def test_merged_ranks_claim_only_what_was_measured(group, label, says, never):
    merged = ranks.merge_rank_reports([_rank_report(1, 0.044, group),
                                       _rank_report(0, 0.036, group)])
    assert "straggler" not in merged  # no wait measured: the slowest step names no one
    assert [e["rank"] for e in merged["ranks"]] == [0, 1]
    assert merged["config"]["strategy"] == ("process group, gloo" if group else "independent")
    assert ("process_group" in merged) == group
    # job: 64 + 64 samples over the longer rank's 0.044 s = 2909.1 samples/s; rank 0's
    # own 64 / 0.036 = 1777.8; the sum of the ranks' rates (1777.8 + 1454.5) bounds it
    job = merged["job"]
    assert (job["processes"], job["samples"], job["wall_s"]) == (2, 128, 0.044)
    assert job["throughput_per_s"] == pytest.approx(128 / 0.044)
    assert job["throughput_per_s"] <= sum(e["throughput_per_s"] for e in merged["ranks"])
    assert [e["samples"] for e in merged["ranks"]] == [64, 64]
    report = TrainReport.from_dict(json.loads(json.dumps(merged)))
    for fmt in ("table", "html"):
        text = " ".join(render(report, fmt, width=250).split())
        assert label in text and "(compute)" not in text, fmt
        assert "2909.1 samples/s" in text and "0 alone 1777.8" in text, fmt
        assert not [w for w in never if w in text], fmt
    assert says in " ".join(render(report, "table", width=250).split())


def test_merged_ranks_keep_each_ranks_own_mfu():
    # each rank's report carries its own efficiency (per GPU); the merged table shows both
    reports = [_rank_report(1, 0.044, True), _rank_report(0, 0.036, True)]
    reports[0]["efficiency"] = {"mfu": 0.25}
    reports[1]["efficiency"] = {"mfu": 0.31}
    merged = ranks.merge_rank_reports(reports)
    assert [(e["rank"], e.get("mfu")) for e in merged["ranks"]] == [(0, 0.31), (1, 0.25)]
    without = ranks.merge_rank_reports([_rank_report(1, 0.044, True),
                                        _rank_report(0, 0.036, True)])
    assert all("mfu" not in e for e in without["ranks"])  # not measured: not invented


def test_a_train_runs_measured_wait_still_names_its_straggler():
    # train --nproc-per-node measures every rank's barrier wait: the straggler stays
    def entry(rank, backward, wait):
        return {"rank": rank, "steps": 4, "step_s": 0.010 + backward + wait,
                "phases": {"forward": 0.010, "backward": backward, "wait": wait}}
    s = ranks.straggler([entry(0, 0.004, 0.002), entry(1, 0.006, 0.0)])
    assert (s["rank"], s["phase"]) == (1, "backward")
    assert ranks.straggler([{k: v for k, v in entry(r, 0.004, 0.0).items()}
                            | {"phases": {"backward": 0.004}} for r in (0, 1)]) is None


# ---------------------------------------------------------------- real processes (gloo, CPU)

DDP_SCRIPT = """\
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    sampler = DistributedSampler(data)  # 32 samples a rank: 4 batches of 8
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler.set_epoch(0)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

# the same loop with no process group: each process trains a model of its own
ALONE_SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(data, batch_size=8):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""

# a script that starts its own second process and forms the group itself, as Lightning's
# script launcher does (rank 0 is the launching process; the other one runs the plain script)
SELF_LAUNCHING_SCRIPT = """\
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

port = sys.argv[1]
rank = int(os.environ.get("MY_RANK", "0"))
child = None
if rank == 0:
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), port],
                             env={**os.environ, "MY_RANK": "1"})
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=2)
model = DDP(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    opt.zero_grad()
    model(torch.randn(8, 8)).sum().backward()
    opt.step()
dist.destroy_process_group()
if child is not None:
    sys.exit(child.wait())
"""


def _layerscope(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "layerscope", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# (id, script, notes' words, backward's label)
LAUNCHED = [
    ("users-ddp", DDP_SCRIPT, "2 processes in one process group", "Backward (incl. all-reduce)"),
    ("independent", ALONE_SCRIPT, "2 processes trained independently", "Backward"),
]


@pytest.mark.slow
@pytest.mark.parametrize("script,words,label", [c[1:] for c in LAUNCHED],
                         ids=[c[0] for c in LAUNCHED])
def test_nproc_per_node_reports_what_the_processes_did(tmp_path, script, words, label):
    (tmp_path / "train.py").write_text(script)
    p = _layerscope("run", "--nproc-per-node", "2", "-o", "out.json", "train.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads((tmp_path / "out.json").read_text())
    assert [(e["rank"], e["steps"], e["samples"]) for e in d["ranks"]] == [(0, 4, 32), (1, 4, 32)]
    assert "straggler" not in d and any(words in n for n in d["notes"])
    assert d["job"]["samples"] == 64 and d["job"]["throughput_per_s"] > 0
    assert (d.get("process_group") or {}).get("world_size") == (2 if "DDP" in script else None)
    text = render(TrainReport.from_dict(d), "table", width=250)
    assert label in text and "(not waiting)" not in text and "(compute)" not in text


@pytest.mark.slow
def test_a_script_that_launches_its_own_ranks_is_recorded(tmp_path):
    (tmp_path / "spawns.py").write_text(SELF_LAUNCHING_SCRIPT)
    p = _layerscope("run", "-o", "out.json", "spawns.py", str(_free_port()), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads((tmp_path / "out.json").read_text())
    assert d["process_group"] == {"rank": 0, "world_size": 2, "backend": "gloo"}
    assert (d["rank"], d["world_size"], d["breakdown"]["steps"]) == (0, 2, 4)
    assert any("use layerscope run --nproc-per-node 2" in n for n in d["notes"])
    assert "Backward (incl. all-reduce)" in render(TrainReport.from_dict(d), "table", width=250)
