"""Data-parallel training (train --nproc-per-node): 2-process gloo on the CPU.

The end-to-end tests start real processes through torchrun; the one that is not marked slow
(one epoch of digits-cnn on 2 processes, ~25 s on 2 cores) keeps the path covered in CI.
Fault injection: LAYERSCOPE_FAULT=RANK:STEP:KIND (training.distributed.FAULT_ENV).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from layerscope.core.errors import UserError
from layerscope.training import distributed, ranks
from layerscope.training.chrome_trace import COMM_TID, PHASE_TID, STEP_TID
from layerscope.training.recipes import DigitsCNN

ROOT = Path(__file__).resolve().parent.parent
# DigitsCNN's trainable parameters, float32: conv1 16*1*3*3+16 = 160, conv2 32*16*3*3+32 = 4,640,
# fc1 512*64+64 = 32,832, fc2 64*10+10 = 650; 38,282 parameters * 4 bytes
DIGITS_GRADIENT_BYTES = 153_128


def _cli(*argv: str, env: dict[str, str] | None = None, cwd: Path,
         module: tuple[str, ...] = ("-m", "layerscope")) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS", "SLURM_PROCID")}
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, *module, *argv], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=600)


def _train2(tmp_path: Path, out: str, *extra: str, env: dict[str, str] | None = None):
    return _cli("train", "digits-cnn", "--nproc-per-node", "2", "--format", "json", "-q",
                "--out", str(tmp_path / out), *extra, env=env, cwd=tmp_path)


# ---------------------------------------------------------------- the environment


@pytest.mark.parametrize("environ,expected", [
    ({}, None),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"},
     distributed.DistEnv(1, 2, 1, "torchrun")),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"},
     distributed.DistEnv(3, 4, 1, "slurm")),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, None),  # a one-task job step: one process
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "SLURM_PROCID": "5",
      "SLURM_NTASKS": "8"}, distributed.DistEnv(0, 2, 0, "torchrun")),  # srun torchrun ...
], ids=["single", "torchrun", "srun", "srun-one-task", "torchrun-under-srun"])
def test_detect_reads_the_launchers_environment(environ, expected):
    assert distributed.detect(environ) == expected


def test_detect_refuses_a_malformed_environment():
    with pytest.raises(UserError, match="RANK, WORLD_SIZE"):
        distributed.detect({"RANK": "x", "WORLD_SIZE": "2"})


# ---------------------------------------------------------------- phases and straggler


def test_split_step_moves_exposed_communication_out_of_backward():
    phases = {"data": 1.0, "h2d": 0.0, "forward": 2.0, "loss": 0.5, "backward": 4.0,
              "optimizer": 1.0, "other": 0.5}
    out, wall = ranks.split_step(phases, wait_s=0.25, communication_s=3.0, exposed_s=1.5)
    # backward 4.0 = 2.5 compute + 1.5 exposed; the step: 9.0 measured + 0.25 barrier wait
    assert out["backward"] == 2.5 and out["exposed_communication"] == 1.5
    assert out["wait"] == 0.25 and out["communication"] == 3.0
    assert wall == pytest.approx(9.25)
    assert sum(out[p] for p in ranks.ADDITIVE) == pytest.approx(wall)


def test_split_step_never_exposes_more_than_backward():
    out, _ = ranks.split_step({"backward": 1.0}, 0.0, 5.0, exposed_s=2.0)
    assert out["backward"] == 0.0 and out["exposed_communication"] == 1.0


def _rank(rank: int, step: float, **phases: float) -> dict:
    return {"rank": rank, "step_s": step, "phases": phases}


@pytest.mark.parametrize("entries,expected", [
    # own work (step - wait - exposed): 7, 7, 13 ms; median 7; rank 2 is 6 ms (85.7%) over it,
    # 2.5 ms of it in its data phase
    ([_rank(0, 0.010, data=0.001, forward=0.004, wait=0.003),
      _rank(1, 0.010, data=0.001, forward=0.004, wait=0.003),
      _rank(2, 0.013, data=0.0035, forward=0.0045, wait=0.0)],
     {"rank": 2, "busy_s": 0.013, "excess_s": 0.006, "excess_pct": 600 / 7, "phase": "data",
      "phase_excess_s": 0.0025}),
    # equal step times (they meet in the all-reduce): rank 0 waits 4 ms in exposed
    # communication for rank 1's slower forward; own work 6 and 10 ms, median 8
    ([_rank(0, 0.010, forward=0.004, exposed_communication=0.004),
      _rank(1, 0.010, forward=0.008, exposed_communication=0.0)],
     {"rank": 1, "busy_s": 0.010, "excess_s": 0.002, "excess_pct": 25.0, "phase": "forward",
      "phase_excess_s": 0.002}),
], ids=["slow-data", "waited-for"])
def test_straggler_is_the_rank_with_the_most_own_work(entries, expected):
    s = ranks.straggler(entries)
    for key, value in expected.items():
        assert s[key] == pytest.approx(value), key


def test_one_rank_has_no_straggler():
    assert ranks.straggler([_rank(0, 0.01)]) is None


# ---------------------------------------------------------------- failure lines


@pytest.mark.parametrize("exitcode,message,expected", [
    (-9, "", "killed by SIGKILL"),
    (-15, "", "terminated by SIGTERM"),
    (1, {"message": "RuntimeError: boom\n  File ...", "extraInfo": {"timestamp": "0"}},
     "RuntimeError: boom"),
    (1, "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
     "exited with status 1"),
], ids=["sigkill", "sigterm", "exception", "no-error-file"])
def test_a_failed_rank_is_described_in_one_line(exitcode, message, expected):
    import signal

    failure = SimpleNamespace(exitcode=exitcode, message=message,
                              signal_name=lambda: signal.Signals(-exitcode).name)
    line = distributed.describe_failure(failure)
    assert expected in line and "\n" not in line


def test_a_collective_timeout_is_named_with_the_chosen_timeout():
    exc = RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms "
                       "for recv operation to complete")
    line = distributed.failure_message(exc, 5.0)
    assert line.startswith("a collective timed out after 5 s (--comm-timeout)")
    assert "Timed out waiting 5000ms" in line


def test_fault_switch_raises_only_on_its_rank_and_step(monkeypatch):
    monkeypatch.setenv(distributed.FAULT_ENV, "1:3:raise")
    distributed.maybe_fault(0, 3)
    distributed.maybe_fault(1, 2)
    with pytest.raises(RuntimeError, match="fault injected"):
        distributed.maybe_fault(1, 3)


def test_fault_switch_at_the_end_aborts_only_there(monkeypatch):
    monkeypatch.setenv(distributed.FAULT_ENV, "1:end:abort")
    sent = []
    monkeypatch.setattr(distributed.os, "kill", lambda pid, sig: sent.append(sig))
    distributed.maybe_fault(1, 3)
    distributed.maybe_fault(0, distributed.FAULT_AT_END)
    assert sent == []
    distributed.maybe_fault(1, distributed.FAULT_AT_END)
    assert sent == [distributed.signal.SIGABRT]


def _child_failed(exitcode: int):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failure = ProcessFailure(local_rank=1, pid=4242, exitcode=exitcode, error_file="/nonexistent")
    return ChildFailedError("layerscope", {1: failure})


@pytest.mark.parametrize("finished", [True, False], ids=["after-the-final-barrier", "during"])
def test_a_rank_dying_after_every_rank_finished_is_told_apart(monkeypatch, tmp_path, finished):
    """A rank that dies once rank 0 marked the run finished (every rank past the final barrier,
    report.json written) is a failure while its process ended: the launcher says so and the
    command exits 0; before that mark it is the run's failure, as always."""
    from torch.distributed import run as torchrun

    marks = []

    def fake_run(args):
        mark = os.environ[distributed.FINISHED_ENV]
        marks.append(Path(mark))
        if finished:
            Path(mark).write_text(json.dumps({"report": "runs/f2/report.json"}))
        raise _child_failed(-6)  # SIGABRT, as "terminate called ..." ends a process

    monkeypatch.setattr(torchrun, "run", fake_run)
    monkeypatch.delenv(distributed.FINISHED_ENV, raising=False)
    if finished:
        with pytest.raises(distributed.FailedAfterFinishing) as caught:
            distributed.launch(["train", "digits-cnn"], 2)
        assert str(caught.value) == (
            "rank 1 aborted (SIGABRT) while its process ended, after every rank had finished "
            "training; runs/f2/report.json is complete")
    else:
        with pytest.raises(distributed.RankFailed, match="rank 1 failed: aborted"):
            distributed.launch(["train", "digits-cnn"], 2)
    # the mark's folder is the launcher's own and goes with it; the variable is restored
    assert distributed.FINISHED_ENV not in os.environ
    assert len(marks) == 1 and not marks[0].parent.exists()


def _failure(exitcode: int, message: str, timestamp: int):
    return SimpleNamespace(exitcode=exitcode, message=message, timestamp=timestamp)


@pytest.mark.parametrize("failures,expected", [
    # rank 1 killed; rank 0's collective then lost its peer in the same second
    ({0: _failure(1, "RuntimeError: [pair.cc:545] Read error: Connection reset by peer", 7),
      1: _failure(-9, "", 7)}, 1),
    # the same even when the consequence was seen a second earlier
    ({0: _failure(1, "RuntimeError: Connection closed by peer", 6), 1: _failure(-9, "", 7)}, 1),
    # a rank that raised its own error comes before the one that lost it
    ({0: _failure(1, "RuntimeError: fault injected", 5),
      1: _failure(1, "RuntimeError: Connection reset by peer", 5)}, 0),
    # only consequences: the earliest, then the lowest rank
    ({2: _failure(1, "a collective timed out", 9), 1: _failure(1, "timed out", 9)}, 1),
    ({0: _failure(1, "RuntimeError: boom", 9), 1: _failure(1, "ValueError: bad", 8)}, 1),
], ids=["kill-and-reset", "reset-seen-first", "raise-and-reset", "timeouts", "earliest"])
def test_the_rank_named_is_the_cause_not_its_consequence(failures, expected):
    assert distributed.first_cause(failures)[0] == expected


def test_the_cli_warns_and_exits_0_when_a_rank_dies_after_finishing(monkeypatch, capsys):
    from layerscope.cli.main import main

    def launch(*args, **kwargs):
        raise distributed.FailedAfterFinishing(1, "aborted (SIGABRT)", "r/report.json")

    monkeypatch.setattr(distributed, "launch", launch)
    assert main(["train", "digits-cnn", "--nproc-per-node", "2"]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "layerscope: warning: rank 1 aborted (SIGABRT) while its process ended, after every "
        "rank had finished training; r/report.json is complete"]


def test_a_rank_process_ends_without_finalizing(monkeypatch):
    """A rank of train ends with os._exit after flushing (cli/ending.py: torch's gloo threads
    may still release tensors while a finalizing interpreter would abort them); every other
    command ends through sys.exit."""
    from layerscope.cli import ending

    exits = []

    def fake_exit(code):
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(ending.os, "_exit", fake_exit)
    monkeypatch.setattr(ending, "_without_finalizing", False)
    with pytest.raises(SystemExit):
        ending.end(3)
    assert exits == []
    ending.without_finalizing()
    with pytest.raises(SystemExit):
        ending.end(0)
    assert exits == [0]


def test_multi_node_needs_an_endpoint():
    with pytest.raises(UserError, match="--rdzv-endpoint"):
        distributed.launch(["train"], 2, nnodes=2)


# ---------------------------------------------------------------- end to end (2 processes)


def _check_ranks(report: dict) -> None:
    assert report["world_size"] == 2
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for r in report["ranks"]:
        assert "trainer" not in r["phases"]  # no closure in train's loop: shown only when spent
        additive = sum(r["phases"].get(p, 0.0) for p in ranks.ADDITIVE)
        assert additive == pytest.approx(r["step_s"], rel=0.03), r
        assert r["phases"]["communication"] > 0, r
    comm = report["communication"]
    assert sum(b["bytes"] for b in comm["buckets"]) == DIGITS_GRADIENT_BYTES
    assert comm["bytes_per_step"] == comm["gradient_bytes"] == DIGITS_GRADIENT_BYTES
    # ring all-reduce: 2 (N - 1) / N x the gradient bytes; N = 2 gives the gradient bytes
    assert comm["theory_bytes_per_step"] == pytest.approx(DIGITS_GRADIENT_BYTES)
    assert report["straggler"]["rank"] in (0, 1)


@pytest.mark.integration
def test_two_processes_one_epoch(tmp_path):
    p = _train2(tmp_path, "run", "--epochs", "1")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)  # one report: rank 0's, for every rank
    _check_ranks(report)
    assert report["breakdown"]["samples"] == 719  # ceil(1437 / 2) training images on rank 0
    # the job's samples: every rank's (DistributedSampler pads rank 1 to 719 too)
    job = report["job"]
    assert (job["processes"], job["samples"]) == (2, 2 * 719)
    assert job["throughput_per_s"] <= sum(e["throughput_per_s"] for e in report["ranks"])
    assert "per process" in " ".join(report["notes"])
    # MFU per GPU: each rank's own, beside rank 0's in the report's efficiency
    assert report["ranks"][0].get("mfu") == report["efficiency"]["mfu"]
    assert all(0 < e["mfu"] <= 1 for e in report["ranks"] if "mfu" in e)
    assert "per GPU" in " ".join(report["efficiency"]["notes"])
    run = tmp_path / "run"
    assert sorted(os.listdir(run / "checkpoints")) == ["epoch-001.pt", "last.pt"]
    assert {"config.json", "report.json", "model.pt", "metrics.csv"} <= set(os.listdir(run))
    # the merged trace: per rank a row of steps, one of their phases, one of collectives
    trace = json.loads((run / "ranks_trace.json").read_text())["traceEvents"]
    rows = {(e["pid"], e["args"]["name"]) for e in trace if e["name"] == "thread_name"}
    assert rows == {(r, row) for r in (0, 1) for row in ("steps", "phases", "communication")}
    assert {(e["pid"], e["tid"], e["cat"]) for e in trace if e["ph"] == "X"} == {
        (r, tid, cat) for r in (0, 1)
        for tid, cat in ((STEP_TID, "step"), (PHASE_TID, "phase"), (COMM_TID, "communication"))}
    # consolidated: the plain model's state dict, loadable by a single process
    state = torch.load(run / "model.pt", weights_only=True)
    DigitsCNN().load_state_dict(state["model"])
    # the saved report re-renders, per-rank table and straggler included
    from layerscope.cli.main import main

    assert main(["render", str(run / "report.json")]) == 0


@pytest.mark.integration
def test_a_rank_aborting_after_the_final_barrier_keeps_the_run(tmp_path):
    """Every rank finished and left together; rank 1 then dies by SIGABRT as its process ends
    (the way torch's gloo threads once ended it): the run's results stay, one warning names
    the rank, the signal and the complete report, and the command exits 0."""
    p = _train2(tmp_path, "run", "--epochs", "1", "-o", str(tmp_path / "out.json"),
                env={distributed.FAULT_ENV: "1:end:abort"})
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if line.startswith("layerscope:")]
    report = tmp_path / "run" / "report.json"
    assert warnings == [f"layerscope: warning: rank 1 aborted (SIGABRT) while its process ended, "
                        f"after every rank had finished training; {report} is complete"]
    _check_ranks(json.loads(report.read_text()))


@pytest.mark.slow
def test_the_fsdp_example_passes_every_run_beside_a_busy_neighbour(tmp_path):
    """The stress loop's FSDP case (tests/stress.py --fsdp): docs/distributed.md's FSDP command,
    again and again beside a busy process. A rank once aborted as its process ended ("terminate
    called without an active exception", about 1 run in 15 under load): torch's gloo thread
    released the last collective's tensors while the interpreter finalized."""
    sys.path.insert(0, str(ROOT / "tests"))
    import stress

    runs = int(os.environ.get("LAYERSCOPE_STRESS_RUNS", "20"))
    failed = []
    with stress.busy(1):
        for i in range(runs):
            folder = tmp_path / f"r{i}"
            folder.mkdir()
            outcome = stress.fsdp_round(folder)
            if outcome["returncode"] != 0:
                failed.append((i, outcome))
    assert failed == []


@pytest.mark.slow
def test_killed_rank_is_named_and_resume_matches_an_uninterrupted_run(tmp_path):
    args = ("--epochs", "2", "--checkpoint-every", "3")
    whole = _train2(tmp_path, "whole", *args)
    assert whole.returncode == 0, whole.stderr
    killed = _train2(tmp_path, "killed", *args, env={distributed.FAULT_ENV: "1:5:kill"})
    assert killed.returncode != 0
    lines = killed.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 1" in lines[0] and "SIGKILL" in lines[0], killed.stderr
    # the last checkpoint is intact: step 3's, before the kill at step 5
    assert sorted(os.listdir(tmp_path / "killed" / "checkpoints")) == ["last.pt",
                                                                        "step-000003.pt"]
    resumed = _cli("train", "--nproc-per-node", "2", "--resume", str(tmp_path / "killed"),
                   "--format", "json", "-q", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    a, b = json.loads(whole.stdout)["epochs"], json.loads(resumed.stdout)["epochs"]
    assert [e["val_top1"] for e in b] == [e["val_top1"] for e in a]
    assert [e["train_loss"] for e in b] == [e["train_loss"] for e in a]


@pytest.mark.slow
def test_a_rank_raising_is_one_line(tmp_path):
    p = _train2(tmp_path, "run", "--epochs", "1", env={distributed.FAULT_ENV: "0:2:raise"})
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        "layerscope: error: rank 0 failed: RuntimeError: fault injected by "
        "LAYERSCOPE_FAULT=0:2:raise"]


@pytest.mark.slow
def test_a_hung_rank_ends_after_the_comm_timeout(tmp_path):
    p = _train2(tmp_path, "run", "--epochs", "1", "--comm-timeout", "5",
                env={distributed.FAULT_ENV: "1:3:hang"})
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 0" in lines[0], p.stderr
    assert "timed out after 5 s (--comm-timeout)" in lines[0]


@pytest.mark.slow
def test_under_an_existing_torchrun_and_resumed_by_one_process(tmp_path):
    p = _cli("--standalone", "--nproc-per-node", "2", "-m", "layerscope", "train",
             "digits-cnn", "--epochs", "1", "--format", "json", "-q", "--out",
             str(tmp_path / "run"), cwd=tmp_path, module=("-m", "torch.distributed.run"),
             env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr
    _check_ranks(json.loads(p.stdout))  # only rank 0 wrote to standard output
    # another world size: one process goes on from the 2-process epoch checkpoint
    one = _cli("train", "--resume", str(tmp_path / "run"), "--epochs", "2", "--format", "json",
               "-q", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    report = json.loads(one.stdout)
    assert [e["epoch"] for e in report["epochs"]] == [1, 2] and "world_size" not in report


@pytest.mark.slow
def test_fsdp_matches_ddp_and_its_checkpoint_resumes_anywhere(tmp_path):
    fsdp = _train2(tmp_path, "fsdp", "--epochs", "1", "--strategy", "fsdp")
    assert fsdp.returncode == 0, fsdp.stderr
    report = json.loads(fsdp.stdout)
    assert report["communication"]["strategy"] == "fsdp"
    assert {b["op"] for b in report["communication"]["buckets"]} == {"all_gather",
                                                                     "reduce_scatter"}
    ddp = _train2(tmp_path, "ddp", "--epochs", "1")
    assert json.loads(ddp.stdout)["epochs"] == [
        {**e, "epoch_seconds": json.loads(ddp.stdout)["epochs"][0]["epoch_seconds"]}
        for e in report["epochs"]]
    # consolidated checkpoint, optimizer state by parameter index: one process goes on
    one = _cli("train", "--resume", str(tmp_path / "fsdp"), "--epochs", "2", "--format", "json",
               "-q", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert [e["epoch"] for e in json.loads(one.stdout)["epochs"]] == [1, 2]


# ---------------------------------------------------------------- layerscope run --nproc-per-node


def test_rank_reports_merge_into_rank_0s_with_every_rank():
    def report(rank: int, backward: float) -> dict:
        # 4 steps: forward 4 ms, backward as given, other 1 ms per step
        return {"rank": rank, "world_size": 2, "notes": [], "breakdown": {
            "seconds": {"forward": 0.016, "backward": 4 * backward, "other": 0.004},
            "steps": 4, "samples": 64, "wall_s": 0.020 + 4 * backward}}

    merged = ranks.merge_rank_reports([report(1, 0.006), report(0, 0.004)])
    assert merged["rank"] == 0 and merged["world_size"] == 2
    assert [e["rank"] for e in merged["ranks"]] == [0, 1]
    # only the phases a watched script measures: no wait, no communication
    assert set(merged["ranks"][0]["phases"]) == {"forward", "backward", "other"}
    # rank 1's steps are 2 ms longer, but its waits for rank 0 were not measured: the slower
    # step names no straggler
    assert "straggler" not in merged
    # the job: 64 + 64 samples over the longer rank's 4 * 11 ms
    assert merged["job"]["throughput_per_s"] == pytest.approx(128 / 0.044)


DDP_SCRIPT = """\
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done", dist.get_rank())
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_run_merges_the_ranks_of_the_users_own_ddp_script(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP_SCRIPT)
    p = _cli("run", "--nproc-per-node", "2", "-o", "out.json", "ddp.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.split("\n")[:2]) == ["done 0", "done 1"]  # the script's own output
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["world_size"] == 2 and [e["rank"] for e in report["ranks"]] == [0, 1]
    assert all(e["steps"] == 6 for e in report["ranks"])
    assert "straggler" not in report  # no wait measured in a watched script
    assert report["process_group"]["world_size"] == 2
