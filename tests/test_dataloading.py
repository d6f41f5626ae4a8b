"""Inside the data loader (training.dataloading): the work behind each DataLoader's batches,
in its workers and in the main process, and the verdict with the knob that removes the wait.
Sleeps in the datasets are large against the probe's cost, and the checks are lower bounds
that the sleeps guarantee or shares of the loop, never wall-clock ceilings."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import resources

import jsonschema
import pytest
import torch
from helpers import run_cli
from torch.utils.data import DataLoader, Dataset
from torch.utils.data import dataloader as _dataloader
from torch.utils.data._utils import fetch as _fetch

import layerscope
from layerscope.core.records.dataloading import LoaderStats
from layerscope.core.records.train import TrainReport
from layerscope.training import dataloading
from layerscope.training.dataloading import LoaderProbe, findings, probing

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
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
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
    return report


@pytest.fixture(scope="module")
def validator():
    text = resources.files("layerscope.schema").joinpath("report.schema.json").read_text()
    return jsonschema.Draft202012Validator(json.loads(text))


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


def test_workers_non_persistent_start_up_is_found_per_worker(tmp_path):
    init = 0.4
    report = _watched(tmp_path, "--workers", "2", "--init-sleep", str(init), "--collate")
    (lo,) = report["data_loading"]["loaders"]
    assert (lo["num_workers"], lo["persistent_workers"], lo["collate"]) == (2, False, "pairs")
    # two workers started in each pass, each timed on its own
    assert sorted((w["epoch"], w["worker"]) for w in lo["workers"]) == \
        [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert all(w["batches"] > 0 and w["fetch_s"] >= SLEEP * BATCH for w in lo["workers"])
    assert all(w["startup_s"] >= init for w in lo["workers"])
    assert lo["fetch_s"] >= SLEEP * SAMPLES * EPOCHS
    assert lo["collate_s"] >= 0.01 * BATCHES  # the user's collate, timed in the workers
    assert lo["startup_s"] >= init * EPOCHS
    kinds = {f["kind"]: f for f in report["data_loading"]["findings"]}
    assert kinds["worker_startup"]["knob"] == "persistent_workers"
    assert kinds["worker_startup"]["value"] is True


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
    # sleeping (I/O): CPU 10%, more workers than cores are worth it (up to 4 x cores)
    ("main-io-bound", _loader(wait_s=8.0, fetch_s=8.0, cpu_s=0.8), 2, 0.0, False,
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


def test_eval_loaders_are_left_out_of_the_verdict():
    train = _loader(wait_s=0.1, fetch_s=0.1, cpu_s=0.1)
    val = _loader(dataset="V", training=False, wait_s=9.0, fetch_s=9.0, cpu_s=9.0)
    assert [f.kind for f in findings([val, train], cores=4)] == ["fine"]


# ---- in process --------------------------------------------------------------------------
class _Squares(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


def _batches(loader) -> list[list[float]]:
    return [b.flatten().tolist() for b in loader]


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
    with probing() as probe:
        with probing() as inner:  # one probe at a time: the inner block reuses none
            assert inner is None
        got = _batches(make())
    assert got == expected
    assert [dict(vars(c)) for c in classes] == before
    assert torch.utils.data._utils.pin_memory.pin_memory is pin
    assert not dataloading._RUNNING
    result = probe.result(cores=2)
    (lo,) = result.loaders
    assert (lo.batches, lo.num_workers, lo.training) == (3, workers, True)
    assert sum(w.samples for w in lo.workers) == (12 if workers else 0)
    assert LoaderProbe().result() is None  # no loader seen: no section


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
