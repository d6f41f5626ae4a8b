"""Inside the data loader (training.dataloading): the work behind each DataLoader's batches,
in its workers and in the main process, and the verdict with the knob that removes the wait.
Sleeps in the datasets are large against the probe's cost, and the checks are lower bounds
that the sleeps guarantee or shares of the loop, never wall-clock ceilings."""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
from importlib import resources

import jsonschema
import pytest
import torch
from helpers import run_cli
from torch.optim import optimizer as _optimizer
from torch.utils.data import DataLoader, Dataset
from torch.utils.data import dataloader as _dataloader
from torch.utils.data._utils import fetch as _fetch

import layerscope
from layerscope.core.records.dataloading import LoaderStats
from layerscope.core.records.train import TrainReport
from layerscope.training import dataloading
from layerscope.training.dataloading import LoaderProbe, findings, probing
from tests.warm_start import python_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLEEP = 0.02  # per sample in __getitem__
SAMPLES, BATCH, EPOCHS = 24, 4, 2
BATCHES = SAMPLES // BATCH * EPOCHS

# a PyTorch-examples-shaped script: a map-style dataset with a slow __getitem__ (a transform,
# a file read), shuffling with a seeded generator, a worker_init_fn (opening a database per
# worker) and optionally the user's own collate function; it prints each batch's sample ids
SCRIPT = textwrap.dedent(f"""\
    import argparse, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--init-sleep", type=float, default=0.0)
    p.add_argument("--collate", action="store_true")
    args = p.parse_args()

    class Slow(Dataset):
        def __len__(self):
            return {SAMPLES}

        def __getitem__(self, i):
            time.sleep({SLEEP})
            g = torch.Generator().manual_seed(i)
            return torch.randn(8, generator=g), i

    def init(worker_id):
        time.sleep(args.init_sleep)

    def pairs(samples):  # the user's own collate: a dict, ids kept as a list
        time.sleep(0.01)
        return {{"x": torch.stack([s[0] for s in samples]), "ids": [s[1] for s in samples]}}

    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Slow(), batch_size={BATCH}, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.persistent, worker_init_fn=init,
                        collate_fn=pairs if args.collate else None,
                        generator=torch.Generator().manual_seed(1))
    for epoch in range({EPOCHS}):
        for batch in loader:
            x, ids = (batch["x"], batch["ids"]) if args.collate else batch
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(epoch, [int(i) for i in ids], f"{{loss.item():.6f}}")
    """)


def _python(*argv: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    command, env = python_command(argv, env)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _watched(tmp_path, *script_args: str) -> dict:
    """Run the script bare and under ``layerscope run``: the same stdout (same batches, same
    order, same losses); the report's data_loading section."""
    script = tmp_path / "slow_data.py"
    script.write_text(SCRIPT)
    bare = _python(str(script), *script_args, cwd=tmp_path)
    out = tmp_path / "report.json"
    run = _python("-m", "layerscope", "run", "-o", str(out), str(script), *script_args,
                  cwd=tmp_path)
    assert bare.returncode == run.returncode == 0, run.stderr
    assert run.stdout == bare.stdout
    assert len(bare.stdout.splitlines()) == BATCHES
    report = json.loads(out.read_text())
    for lo in report["data_loading"]["loaders"]:  # each pass's first batch is part of the wait
        assert lo["first_wait_s"] <= lo["wait_s"] <= lo["span_s"]
        # the fetching threads' CPU time and run-queue wait are read inside the timed fetch and
        # collate: together at most their time (in the main process and in each worker)
        for part in [lo, *lo.get("workers", [])]:
            if part.get("run_wait_s") is not None:
                assert part["thread_cpu_s"] + part["run_wait_s"] <= \
                    (part["fetch_s"] + part["collate_s"]) * (1 + dataloading.RUNQ_SLACK) + 1e-3
    return report


@pytest.fixture(scope="module")
def validator():
    text = resources.files("layerscope.schema").joinpath("report.schema.json").read_text()
    return jsonschema.Draft202012Validator(json.loads(text))


@pytest.mark.integration
def test_slow_getitem_in_the_main_process_names_num_workers(tmp_path, validator):
    report = _watched(tmp_path)
    assert not list(validator.iter_errors(report))
    (lo,) = report["data_loading"]["loaders"]
    assert (lo["dataset"], lo["num_workers"], lo["batches"], lo["epochs"]) == \
        ("Slow", 0, BATCHES, EPOCHS)
    assert lo["fetch_s"] >= SLEEP * SAMPLES * EPOCHS  # every sample's sleep, in the fetch
    assert lo["fetch_s"] > 0.5 * lo["wait_s"]  # the wait is the dataset's fetch
    assert lo["cpu_s"] < 0.5 * lo["fetch_s"]  # sleeping, not computing
    verdict = report["data_loading"]["findings"][0]
    assert (verdict["kind"], verdict["knob"]) == ("io_bound", "num_workers")
    assert verdict["value"] >= 2
    assert "num_workers=0" in verdict["message"] and "fetch" in verdict["message"]
    # the terminal says it in one line
    code, text, _ = run_cli("render", str(tmp_path / "report.json"), "--width", "400")
    assert code == 0
    assert any(line.startswith("data loading: Slow: the main process loads every batch itself")
               and f"num_workers={verdict['value']}" in line for line in text.splitlines())


@pytest.mark.integration
def test_workers_non_persistent_start_up_is_found_per_worker(tmp_path):
    init = 0.4
    report = _watched(tmp_path, "--workers", "2", "--init-sleep", str(init), "--collate")
    (lo,) = report["data_loading"]["loaders"]
    assert (lo["num_workers"], lo["persistent_workers"], lo["collate"]) == (2, False, "pairs")
    # two workers started in each pass, each timed on its own
    assert sorted((w["epoch"], w["worker"]) for w in lo["workers"]) == \
        [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert all(w["batches"] > 0 and w["fetch_s"] >= SLEEP * BATCH for w in lo["workers"])
    if dataloading.run_delay() is not None:  # each worker read its own thread's figures
        assert all(w["run_wait_s"] is not None and w["thread_cpu_s"] is not None
                   for w in lo["workers"])
        assert lo["run_wait_s"] == pytest.approx(sum(w["run_wait_s"] for w in lo["workers"]))
    assert all(w["startup_s"] >= init for w in lo["workers"])
    assert lo["fetch_s"] >= SLEEP * SAMPLES * EPOCHS
    assert lo["collate_s"] >= 0.01 * BATCHES  # the user's collate, timed in the workers
    assert lo["startup_s"] >= init * EPOCHS
    kinds = {f["kind"]: f for f in report["data_loading"]["findings"]}
    assert kinds["worker_startup"]["knob"] == "persistent_workers"
    assert kinds["worker_startup"]["value"] is True


@pytest.mark.integration
def test_persistent_workers_start_once(tmp_path):
    report = _watched(tmp_path, "--workers", "2", "--persistent", "--init-sleep", "0.4")
    (lo,) = report["data_loading"]["loaders"]
    assert {w["epoch"] for w in lo["workers"]} == {1}
    assert "worker_startup" not in {f["kind"] for f in report["data_loading"]["findings"]}
    assert all(w["batches"] > 0 for w in lo["workers"])


# ---- the verdict from the figures (hand-made loaders) -------------------------------------
def _loader(**kw) -> LoaderStats:
    base = dict(dataset="D", collate="default_collate", training=True, num_workers=0,
                prefetch_factor=None, persistent_workers=False, pin_memory=False, epochs=1,
                batches=10, wait_s=0.0, first_wait_s=0.0, span_s=10.0, fetch_s=0.0,
                collate_s=0.0, cpu_s=0.0)
    return LoaderStats(**{**base, **kw})


# (id, loader, cores, h2d_s, cuda, expected (kind, knob, value) of the findings, in order)
VERDICTS = [
    ("hardly-waits", _loader(wait_s=0.5, fetch_s=0.5, cpu_s=0.5), 4, 0.0, False,
     [("fine", None, None)]),
    # 8 of 10 s waiting on a CPU-bound fetch of 0.8 s per batch; 0.2 s of compute per batch:
    # 4 workers keep up
    ("main-cpu-bound", _loader(wait_s=8.0, fetch_s=7.0, collate_s=1.0, cpu_s=8.0), 8, 0.0,
     False, [("cpu_bound", "num_workers", 4)]),
    # the same capped at the cores
    ("main-cpu-bound-capped", _loader(wait_s=8.0, fetch_s=8.0, cpu_s=8.0), 2, 0.0, False,
     [("cpu_bound", "num_workers", 2)]),
    # sleeping (I/O): CPU 10%, hardly any run-queue wait: more workers than cores are worth it
    # (up to 4 x cores)
    ("main-io-bound", _loader(wait_s=8.0, fetch_s=8.0, cpu_s=0.8, thread_cpu_s=0.8,
                              run_wait_s=0.1), 2, 0.0, False,
     [("io_bound", "num_workers", 4)]),
    # 2 workers at 1.6 s per batch each, 0.2 s compute per batch -> 8 needed, 8 cores
    ("too-few-workers", _loader(num_workers=2, prefetch_factor=2, wait_s=8.0, first_wait_s=0.5,
                                fetch_s=16.0, cpu_s=16.0), 8, 0.0, False,
     [("too_few_workers", "num_workers", 8)]),
    # already as many workers as cores, CPU-bound: no knob, cheaper transforms
    ("workers-at-cores", _loader(num_workers=2, prefetch_factor=2, wait_s=8.0, first_wait_s=0.5,
                                 fetch_s=16.0, cpu_s=16.0), 2, 0.0, False,
     [("cpu_bound", None, None)]),
    # the workers keep up on average (0.3 s per batch for 2 workers, 0.5 s compute) yet wait
    ("bursty-prefetch", _loader(num_workers=2, prefetch_factor=2, wait_s=5.0, first_wait_s=0.1,
                                fetch_s=3.0, cpu_s=3.0), 8, 0.0, False,
     [("prefetch", "prefetch_factor", 4)]),
    # start-up of 3 passes: 2 of the 2.5 s waited
    ("start-up", _loader(num_workers=2, prefetch_factor=2, epochs=3, wait_s=2.5, first_wait_s=2.2,
                         startup_s=2.0, fetch_s=1.0, cpu_s=1.0), 8, 0.0, False,
     [("worker_startup", "persistent_workers", True)]),
    ("persistent-no-start-up", _loader(num_workers=2, prefetch_factor=2, epochs=3, wait_s=2.5,
                                       first_wait_s=2.2, startup_s=2.0, fetch_s=1.0, cpu_s=1.0,
                                       persistent_workers=True), 8, 0.0, False,
     [("first_batches", None, None)]),
    # the loop did nothing but wait (its own time per batch 0): as many workers as the cores
    # allow, not an infinite count
    ("loop-only-waits", _loader(num_workers=2, prefetch_factor=2, wait_s=10.0,
                                first_wait_s=0.5, fetch_s=16.0, cpu_s=16.0), 8, 0.0, False,
     [("too_few_workers", "num_workers", 8)]),
    ("main-only-waits", _loader(wait_s=10.0, fetch_s=9.0, cpu_s=9.0), 8, 0.0, False,
     [("cpu_bound", "num_workers", 8)]),
    ("no-pinning", _loader(wait_s=0.1, fetch_s=0.1, cpu_s=0.1), 4, 1.0, True,
     [("no_pinning", "pin_memory", True), ("fine", None, None)]),
    ("pinned", _loader(wait_s=0.1, fetch_s=0.1, cpu_s=0.1, pin_memory=True), 4, 1.0, True,
     [("fine", None, None)]),
]


@pytest.mark.parametrize("loader,cores,h2d,cuda,expected", [v[1:] for v in VERDICTS],
                         ids=[v[0] for v in VERDICTS])
def test_findings(loader, cores, h2d, cuda, expected):
    got = findings([loader], h2d_s=h2d, cuda=cuda, cores=cores)
    assert [(f.kind, f.knob, f.value) for f in got] == expected
    for f in got:  # every finding carries the figures behind it
        assert f.figures["wait_s"] == loader.wait_s


# ---- waiting for a core is not waiting for I/O (hand-made loaders) ---------------------------
# num_workers=0, 10 batches, the loop waited 8 of its 10 s for data: the loop's own time is
# 0.2 s per batch, the fetch 0.8 s per batch, so 4 workers would keep up (at most the cores if
# the fetch computes, 4 x the cores if it waits). The fetch's 8 s split, in its thread, into
# CPU (thread_cpu_s), run-queue wait (run_wait_s) and the rest (blocked: I/O, sleeps).
def _main(**kw) -> LoaderStats:
    return _loader(**{"wait_s": 8.0, "fetch_s": 8.0, **kw})


# (id, loader, cores, load, expected (kind, knob, value) of the verdict)
CONTENTION = [
    # CPU 10%, run-queue 1.25%: blocked 88.75% of the time on a quiet machine
    ("quiet-sleeps", _main(cpu_s=0.8, thread_cpu_s=0.8, run_wait_s=0.1), 2, 0.5,
     ("io_bound", "num_workers", 4)),
    # the same sleeps on a busy machine: CPU 10% + run-queue 15% < 50%; blocked 75%: the
    # workers overlap their waits, whatever the load
    ("busy-sleeps", _main(cpu_s=0.8, thread_cpu_s=0.8, run_wait_s=1.2), 2, 9.0,
     ("io_bound", "num_workers", 4)),
    # sleeps whose every wake-up waits for a core on a busy machine: CPU 1%, run-queue 67.5%,
    # blocked 31.5%: the CPU and blocked seconds are the work's (the queueing the machine's):
    # blocked 0.315 > CPU 0.01: waiting; workers overlap the sleeps and the wake-ups alike
    ("sleeps-queued-wake-ups", _main(cpu_s=0.08, thread_cpu_s=0.08, run_wait_s=5.4), 2, 9.0,
     ("io_bound", "num_workers", 4)),
    # in-memory MNIST at load 9 on 2 cores: CPU 25% (the old rule read this as I/O), run-queue
    # 72.5%: 2.5% blocked; waiting for a core is 5.8 / 7.8 = 74% of the time it wanted one
    ("busy-cpu-bound", _main(cpu_s=2.0, thread_cpu_s=2.0, run_wait_s=5.8), 2, 9.0,
     ("cpu_oversubscribed", None, None)),
    # the same fetch with a core free: CPU 95%, run-queue 0.2 / 7.8 = 2.6% of its demand
    ("cpu-bound-core-free", _main(cpu_s=7.6, thread_cpu_s=7.6, run_wait_s=0.2), 2, 1.0,
     ("cpu_bound", "num_workers", 2)),
    # the load average is not the evidence when the run-queue wait is there: load 9 from other
    # (niced, sleeping) work, yet the fetch got a core whenever it wanted one
    ("busy-load-core-free", _main(cpu_s=7.6, thread_cpu_s=7.6, run_wait_s=0.2), 2, 9.0,
     ("cpu_bound", "num_workers", 2)),
    # 1 s (12.5%) of the 15% run-queue share of demand: under RUNQ_SHARE (20%): a core was free
    ("cpu-bound-some-queueing", _main(cpu_s=6.8, thread_cpu_s=6.8, run_wait_s=1.2), 2, 2.0,
     ("cpu_bound", "num_workers", 2)),
    # 2 s of the 8 s it wanted a core (25%): no free core
    ("cpu-bound-oversubscribed", _main(cpu_s=6.0, thread_cpu_s=6.0, run_wait_s=2.0), 2, 2.0,
     ("cpu_oversubscribed", None, None)),
    # the fetch hardly queued (2.6%), but the loop's thread, over the whole loop, waited 12 s
    # of the 21 s it wanted a core (57%): the scheduler took the core away between fetches
    ("queued-outside-the-fetch", _main(cpu_s=7.6, thread_cpu_s=7.6, run_wait_s=0.2,
                                       loop_cpu_s=9.0, loop_run_wait_s=12.0), 2, 9.0,
     ("cpu_oversubscribed", None, None)),
    # ... and where it did not (0.3 s of 9.8 s: 3%), a core was free
    ("loop-hardly-queued", _main(cpu_s=7.6, thread_cpu_s=7.6, run_wait_s=0.2, loop_cpu_s=9.5,
                                 loop_run_wait_s=0.3), 2, 1.0,
     ("cpu_bound", "num_workers", 2)),
    # no run-queue wait (not Linux): CPU 25% with load 9 on 2 cores may be waiting for a core
    ("no-schedstat-busy", _main(cpu_s=2.0), 2, 9.0, ("cannot_judge", None, None)),
    # no run-queue wait and no load average: nothing tells I/O from a core
    ("no-schedstat-no-load", _main(cpu_s=0.8), 2, None, ("cannot_judge", None, None)),
    # no run-queue wait, load 0.3 on 2 cores: a core was free, CPU 10%: the old rule holds
    ("no-schedstat-quiet", _main(cpu_s=0.8), 2, 0.3, ("io_bound", "num_workers", 4)),
    # no run-queue wait, CPU 95%: CPU-bound; load 9 on 2 cores leaves no core for a worker
    ("no-schedstat-cpu-busy", _main(cpu_s=7.6), 2, 9.0, ("cpu_oversubscribed", None, None)),
    ("no-schedstat-cpu-quiet", _main(cpu_s=7.6), 2, 0.5, ("cpu_bound", "num_workers", 2)),
    # the thread's CPU 75% + run-queue wait 50% of the fetch's time: more than all of it
    ("readings-disagree", _main(cpu_s=6.0, thread_cpu_s=6.0, run_wait_s=4.0), 2, 1.0,
     ("cannot_judge", None, None)),
    # the fetching thread on a CPU 12.5%, blocked 85%, and the process's other threads on a
    # CPU 62.5% of the time (6 - 1 of the 8 s): other work (then it waits: 12.5 < 85) or the
    # fetch's own parallel threads (then it computes: 12.5 + 62.5 >= 85 - 62.5): not judged
    ("thread-blocked-process-busy", _main(cpu_s=6.0, thread_cpu_s=1.0, run_wait_s=0.2), 2,
     1.0, ("cannot_judge", None, None)),
    # the other threads on a CPU 12.5% (2 - 1 of the 8 s): waiting either way
    # (12.5 + 12.5 < 85 - 12.5)
    ("thread-blocked-process-little", _main(cpu_s=2.0, thread_cpu_s=1.0, run_wait_s=0.2),
     2, 1.0, ("io_bound", "num_workers", 4)),
    # workers: 2 of them at 1.6 s per batch each, the loop's own 0.2 s per batch: 8 would keep
    # up. On a machine with no free core (run-queue wait 60% of the fetch, 62% of its demand)
    # more would wait as well
    ("workers-oversubscribed", _loader(num_workers=2, prefetch_factor=2, wait_s=8.0,
                                       first_wait_s=0.5, fetch_s=16.0, cpu_s=6.2,
                                       thread_cpu_s=6.0, run_wait_s=9.6), 8, 20.0,
     ("cpu_oversubscribed", None, None)),
    # the same workers sleeping (CPU 5%, run-queue 10%): 8 workers (4 x 2 cores) at any load
    ("workers-sleep-busy", _loader(num_workers=2, prefetch_factor=2, wait_s=8.0,
                                   first_wait_s=0.5, fetch_s=16.0, cpu_s=0.8, thread_cpu_s=0.8,
                                   run_wait_s=1.6), 2, 20.0,
     ("too_few_workers", "num_workers", 8)),
    # workers whose fetch was not seen (spawn): whether they keep up is unknown
    ("workers-unseen", _loader(num_workers=2, prefetch_factor=2, wait_s=8.0, first_wait_s=0.5),
     8, 1.0, ("cannot_judge", None, None)),
    # workers too slow, CPU 12.5%, no run-queue wait and no load: more of them or not, unknown
    ("workers-no-evidence", _loader(num_workers=2, prefetch_factor=2, wait_s=8.0,
                                    first_wait_s=0.5, fetch_s=16.0, cpu_s=2.0), 8, None,
     ("cannot_judge", None, None)),
    # a loader iterated for one batch (to see the shapes), which waited 80% of its span on a
    # fetch that slept: its wait is a first batch's, not the loop's (the old rule: 4 workers)
    ("one-batch", _main(batches=1, cpu_s=0.8, thread_cpu_s=0.8, run_wait_s=0.1), 2, 0.5,
     ("cannot_judge", None, None)),
    # 4 batches: still under MIN_BATCHES (5); 5 batches: judged
    ("four-batches", _main(batches=4, cpu_s=0.8, thread_cpu_s=0.8, run_wait_s=0.1), 2, 0.5,
     ("cannot_judge", None, None)),
    # (1.6 s of fetch per batch over the loop's own 0.4 s: 4 workers)
    ("five-batches", _main(batches=5, cpu_s=0.8, thread_cpu_s=0.8, run_wait_s=0.1), 2, 0.5,
     ("io_bound", "num_workers", 4)),
]


@pytest.mark.parametrize("loader,cores,load,expected", [v[1:] for v in CONTENTION],
                         ids=[v[0] for v in CONTENTION])
def test_waiting_for_a_core_is_not_waiting_for_io(loader, cores, load, expected):
    (verdict, *_) = got = findings([loader], cores=cores, load=load)
    assert (verdict.kind, verdict.knob, verdict.value) == expected
    figs = verdict.figures
    assert figs["cores"] == cores and figs.get("load") == load
    # the batches it read are in its figures and in its words
    n = loader.batches
    assert figs["batches"] == n and f"{n} batch{'' if n == 1 else 'es'}" in verdict.message
    if loader.run_wait_s is not None and verdict.kind != "cannot_judge":
        # the fetch's time in its thread: on a CPU, waiting for a core, blocked (all of it)
        assert figs["thread_cpu_share"] + figs["run_wait_share"] + figs["blocked_share"] == \
            pytest.approx(1.0, abs=1e-3)
        assert figs["run_wait_s"] == pytest.approx(loader.run_wait_s)
    if verdict.kind == "io_bound" and "blocked_share" in figs:
        # waiting, and not for a core: blocked longer than on a CPU
        assert figs["blocked_share"] > figs["thread_cpu_share"]
    if verdict.kind == "cpu_oversubscribed":  # the figures are in its words
        assert "oversubscribed" in verdict.message and f"on {cores} cores" in verdict.message
    if verdict.kind == "cannot_judge":
        assert "cannot judge" in verdict.message
    # more workers are never suggested where the machine has no free core, nor unjudged
    if verdict.kind in ("cpu_oversubscribed", "cannot_judge"):
        assert all(f.knob != "num_workers" for f in got)


def test_the_oversubscribed_verdict_gives_its_figures():
    (verdict,) = findings([_main(cpu_s=2.0, thread_cpu_s=2.0, run_wait_s=5.6)], cores=2,
                          load=9.0)
    assert ("CPU-bound on an oversubscribed machine (CPU 25% of it, waiting for a core 70%, "
            "blocked 5%: 5.60 s of its 8.00 s waiting for a core; load 9.0 on 2 cores): a "
            "worker would wait for a core as well") in verdict.message
    assert verdict.figures["blocked_share"] == 0.05
    assert "other threads" not in verdict.message
    # the process's other threads on a CPU 6 - 2 = 4 of the 8 s (50%) while it fetched: said
    (verdict,) = findings([_main(cpu_s=6.0, thread_cpu_s=2.0, run_wait_s=5.6)], cores=2,
                          load=9.0)
    assert verdict.kind == "cpu_oversubscribed"
    assert ("the process's other threads (torch's among them) were on a CPU 50% of it"
            in verdict.message)


def test_a_loader_of_few_batches_is_left_out_when_another_gave_more():
    """A batch taken to see the shapes (1 batch, a long first read) beside the training loop's
    loader: the verdict is the loop's loader's (CPU-bound with a core free: 2 workers on 2
    cores), not "cannot judge" nor workers for the one batch; alone, the one batch is not
    judged."""
    peek = _main(dataset="Peek", batches=1, wait_s=9.0, fetch_s=9.0, cpu_s=0.1,
                 thread_cpu_s=0.1, run_wait_s=0.0)
    loop = _main(cpu_s=7.6, thread_cpu_s=7.6, run_wait_s=0.2)
    got = findings([peek, loop], cores=2, load=0.5)
    assert [(f.kind, f.knob, f.value) for f in got] == [("cpu_bound", "num_workers", 2)]
    assert got[0].message.startswith("D: ") and "over 10 batches" in got[0].message
    (alone,) = findings([peek], cores=2, load=0.5)
    assert alone.kind == "cannot_judge" and alone.knob is None
    assert alone.message.startswith("Peek: cannot judge the data loading from 1 batch (fewer "
                                    "than 5)")


@pytest.mark.parametrize("kind", ["cpu_oversubscribed", "cannot_judge"])
def test_advise_suggests_no_workers_on_these_verdicts(kind):
    """advise's workers rule reads the verdict's kind: no worker count on a machine with no
    free core, nor where the loader could not judge, however long the loop waited."""
    from layerscope.advice.rules.workers import RULE
    assert RULE.apply({"data_share": 0.8, "data_verdict": kind, "workers": 0, "cores": 2,
                       "training_loaders": 1, "loader_batches": 100}) is None


def test_eval_loaders_are_left_out_of_the_verdict():
    train = _loader(wait_s=0.1, fetch_s=0.1, cpu_s=0.1)
    val = _loader(dataset="V", training=False, wait_s=9.0, fetch_s=9.0, cpu_s=9.0)
    assert [f.kind for f in findings([val, train], cores=4)] == ["fine"]


# ---- a CPU-bound in-memory loader beside busy processes --------------------------------------
# One process pinned to one core with two busy processes pinned to the same core: its loader
# (in memory, nothing read per sample) gets about a third of the core and waits on the run
# queue for the rest, more under any other load and never less. The old rule read its CPU
# share (a third or less) as waiting for I/O.
BUSY = textwrap.dedent("""\
    import json, os, subprocess, sys
    import torch
    from torch.utils.data import DataLoader, Dataset
    from layerscope.training.dataloading import probing

    torch.set_num_threads(1)
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})  # the process's one thread (the busy ones inherit it)
    spin = "import sys; print(flush=True); sys.stdout.close()\\nwhile True: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
            for _ in range(2)]
    try:
        for p in busy:  # each spins from here on
            p.stdout.readline()

        class InMemory(Dataset):  # MNIST-like: uint8 images in memory, normalised per sample
            def __init__(self):
                self.images = torch.randint(0, 256, (512, 28, 28), dtype=torch.uint8)

            def __len__(self):
                return len(self.images)

            def __getitem__(self, i):
                x = self.images[i].float().div(255)
                for _ in range(60):
                    x = (x - 0.1307) / 0.3081
                return x, i % 10

        with probing() as probe:
            for x, y in DataLoader(InMemory(), batch_size=8):
                pass
        print(json.dumps(probe.result().to_dict()))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    """)


@pytest.mark.integration
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity")
                    or dataloading.run_delay() is None,
                    reason="needs CPU affinity and /proc/thread-self/schedstat (Linux)")
def test_an_in_memory_loader_beside_busy_processes_is_not_called_io_bound(tmp_path):
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    out = _python(str(script), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    (lo,) = d["loaders"]
    verdict = d["findings"][0]
    # the verdict: CPU-bound on an oversubscribed machine, no worker suggested
    assert verdict["kind"] == "cpu_oversubscribed"
    assert all(f.get("knob") != "num_workers" for f in d["findings"])
    work = lo["fetch_s"] + lo["collate_s"]
    figs = verdict["figures"]
    # the evidence: the fetch never blocks (nothing to read), so its thread was on a CPU or
    # waiting for one nearly all the time; with two busy processes on its core, the loop's
    # thread waited for the core about two thirds of the time it wanted it (whichever moments
    # the scheduler chose: inside the fetch or between fetches), more under other load
    assert lo["thread_cpu_s"] + lo["run_wait_s"] <= work * (1 + dataloading.RUNQ_SLACK)
    # blocked (page faults, nothing else) less than its CPU seconds: the work's own seconds,
    # whatever the load
    assert figs["blocked_share"] < figs["thread_cpu_share"]
    assert lo["loop_run_wait_s"] >= dataloading.RUNQ_SHARE * (lo["loop_cpu_s"]
                                                              + lo["loop_run_wait_s"])
    assert figs["loop_queued_share"] >= dataloading.RUNQ_SHARE
    assert figs["cores"] == 1


# ---- in process --------------------------------------------------------------------------
class _Squares(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


def _batches(loader) -> list[list[float]]:
    return [b.flatten().tolist() for b in loader]


@pytest.mark.integration
@pytest.mark.parametrize("workers", [0, 2])
def test_probe_changes_no_batch_and_leaves_nothing_behind(workers):
    classes = (_fetch._MapDatasetFetcher, _fetch._IterableDatasetFetcher,
               _dataloader._BaseDataLoaderIter, _dataloader.DataLoader)
    before = [dict(vars(c)) for c in classes]
    pin = torch.utils.data._utils.pin_memory.pin_memory

    def make():
        return DataLoader(_Squares(), batch_size=5, shuffle=True, num_workers=workers,
                          generator=torch.Generator().manual_seed(3))
    expected = _batches(make())
    hooks = dict(_optimizer._global_optimizer_post_hooks)
    with probing() as probe:
        with probing() as inner:  # one probe at a time: the inner block reuses none
            assert inner is None
        got = _batches(make())
    assert got == expected
    assert [dict(vars(c)) for c in classes] == before
    assert _optimizer._global_optimizer_post_hooks == hooks
    assert torch.utils.data._utils.pin_memory.pin_memory is pin
    assert not dataloading._RUNNING
    result = probe.result(cores=2)
    (lo,) = result.loaders
    assert (lo.batches, lo.num_workers, lo.training) == (3, workers, True)
    assert sum(w.samples for w in lo.workers) == (12 if workers else 0)
    assert LoaderProbe().result() is None  # no loader seen: no section


def test_a_test_loader_iterated_with_gradients_on_is_not_a_training_one():
    """A script that evaluates without torch.no_grad(): its test loader gives batches with
    gradients on, as the training loader does; only the training loader's batches are
    followed by an optimizer step. A slow test loader must not make the verdict."""
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    train = DataLoader(_Squares(), batch_size=2)
    test = DataLoader(torch.utils.data.TensorDataset(torch.ones(6, 1)), batch_size=2)
    with probing() as probe:
        for _ in range(2):
            for x in train:
                model(x).sum().backward()
                opt.step()
            for (x,) in test:  # gradients on, no step
                model(x).sum()
    by_name = {lo.dataset: lo for lo in probe.result(cores=2).loaders}
    assert by_name["_Squares"].training and by_name["_Squares"].batches == 12
    assert not by_name["TensorDataset"].training and by_name["TensorDataset"].batches == 6
    # no optimizer of torch's stepped (a script's own update): gradients on is the sign
    with probing() as probe:
        for x in train:
            model(x).sum().backward()
    (lo,) = probe.result(cores=2).loaders
    assert lo.training


@pytest.mark.integration
def test_train_report_has_the_section_and_reads_back(tmp_path):
    report = layerscope.train(recipe="digits-cnn", steps=3, evaluate=False, num_workers=1,
                              out=str(tmp_path))
    (lo,) = report.data_loading.loaders
    assert lo.training and lo.num_workers == 1 and lo.batches >= 3
    assert [w.worker for w in lo.workers] == [0]
    again = TrainReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.data_loading == report.data_loading.to_dict()
    with open(os.path.join(report.run_dir, "report.json")) as f:
        saved = json.load(f)
    assert saved["data_loading"]["loaders"][0]["num_workers"] == 1


@pytest.mark.integration
def test_spawned_workers_are_counted_from_the_main_process_and_noted():
    data = torch.utils.data.TensorDataset(torch.arange(8.0))
    loader = DataLoader(data, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    with probing() as probe:
        got = [b[0].tolist() for b in loader]
    assert got == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    result = probe.result(cores=2)
    (lo,) = result.loaders
    assert (lo.batches, lo.workers, lo.fetch_s) == (2, [], 0.0)
    assert result.notes == ["1 worker process(es) started with spawn/forkserver: their fetch "
                            "and collate times are not seen (fork only)"]


class _Stream(torch.utils.data.IterableDataset):
    """An iterable dataset that shards itself over the workers (PyTorch's documented way)."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (info.id, info.num_workers) if info else (0, 1)
        return iter(torch.arange(start, 10, step, dtype=torch.float32))


@pytest.mark.integration
@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_is_timed_and_unchanged(workers):
    def make():
        return DataLoader(_Stream(), batch_size=3, num_workers=workers)
    expected = [b.tolist() for b in make()]
    with probing() as probe:
        got = [b.tolist() for b in make()]
    assert got == expected
    (lo,) = probe.result(cores=2).loaders
    assert (lo.dataset, lo.batches) == ("_Stream", len(expected))
    if workers:  # each worker's own batches and samples (a short last batch as it is)
        assert sorted(w.worker for w in lo.workers) == [0, 1]
        assert sum(w.batches for w in lo.workers) == len(expected)
        assert sum(w.samples for w in lo.workers) == 10
