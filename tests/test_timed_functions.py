"""``profile --functions``: each torch function a container's own code calls (F.relu, the
residual add, torch.cat...) is timed as its own row, a child of its module, as
``analyze --functions`` counts it; the container's "(own ops)" row keeps what is left
(``tree.own_time``: inclusive minus the nearest timed descendants, the functions included), so
the rows never overlap and the shares never add up to more than 100%.

Hand-derived times with a fake clock (functions that advance it, written with torch's
``handle_torch_function`` protocol so that a TorchFunctionMode sees them as torch functions); on
a real ResNet block only call counts and invariants (no time asserted)."""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import handle_torch_function, has_torch_function

import layerscope
from layerscope.analysis.timing import ForwardTimer
from layerscope.core import tree
from tests.helpers import FakeClock, run_cli
from tests.test_own_time import Tick


def _slow(name: str, clock: FakeClock, seconds: float, op):
    """A torch-level function called ``name`` that takes ``seconds`` fake seconds."""
    def fn(*args):
        if has_torch_function(args):
            return handle_torch_function(fn, args, *args)
        clock.advance(seconds)
        return op(*args)
    fn.__name__ = name
    return fn


class TickBlock(nn.Module):
    """A residual block: 0.5 ms of its own Python, a 1 ms leaf, relu 0.1 ms, add 0.2 ms."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.conv = Tick(clock, 0.001)
        self.relu = _slow("relu", clock, 0.0001, torch.relu)
        self.add = _slow("add", clock, 0.0002, torch.add)

    def forward(self, x):
        self.clock.advance(0.0005)
        return self.add(self.relu(self.conv(x)), x)


class TickNet(nn.Module):
    """Two blocks in a never-called ModuleList, then the root's own cat (0.3 ms, once)."""

    def __init__(self, clock):
        super().__init__()
        self.blocks = nn.ModuleList([TickBlock(clock), TickBlock(clock)])
        self.cat = _slow("cat", clock, 0.0003, lambda a, b: torch.cat([a, b]))

    def forward(self, x):
        y = self.blocks[1](self.blocks[0](x))
        return self.cat(y, x)


# per run: 2 blocks x (0.5 + 1 + 0.1 + 0.2 ms) + 0.3 ms = 3.9 ms
WALL = 2 * 0.0018 + 0.0003
EXPECTED = [  # (row, type, calls, median seconds)
    ("(root) (cat)", "cat", 1, 0.0003),
    ("(root)", "TickNet", 1, 0.0),  # the root's own code takes no fake time
    ("blocks.0 (relu)", "relu", 1, 0.0001),
    ("blocks.0 (add)", "add", 1, 0.0002),
    # own Python only (leaf and functions subtracted); every op of the block ran inside a
    # function, so analyze has no "(own ops)" row for it: profile adds a zero-cost one
    ("blocks.0", "TickBlock", 1, 0.0005),
    ("blocks.0.conv", "Tick", 1, 0.001),
    ("blocks.1 (relu)", "relu", 1, 0.0001),
    ("blocks.1 (add)", "add", 1, 0.0002),
    ("blocks.1", "TickBlock", 1, 0.0005),
    ("blocks.1.conv", "Tick", 1, 0.001),
]


@pytest.fixture(scope="module")
def tick_report():
    clock = FakeClock()
    return layerscope.profile(TickNet(clock), inputs=(1, 4), runs=5, warmup=1,
                              roofline=False, clock=clock, functions=True)


@pytest.mark.parametrize("name,kind,calls,seconds", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_function_rows_are_timed_with_hand_derived_times(tick_report, name, kind, calls,
                                                         seconds):
    rows = {r.name: r for r in tick_report.layers}
    row = rows[name]
    assert (row.type, row.calls) == (kind, calls)
    assert row.time["median_s"] == pytest.approx(seconds)
    assert row.share == pytest.approx(seconds / WALL)


def test_function_rows_never_overlap_their_module(tick_report):
    assert [r.name for r in tick_report.layers] == [e[0] for e in EXPECTED]
    assert tick_report.end_to_end["median_s"] == pytest.approx(WALL)
    shares = sum(r.share for r in tick_report.layers)
    assert shares == pytest.approx(1.0) and shares <= 1.0 + 1e-9
    assert tick_report.coverage == pytest.approx(1.0)
    own = {r.name: r for r in tick_report.layers}["blocks.0"]
    assert (own.self_only, own.macs, own.flops, own.params) == (True, 0, 0, 0)
    by_type = {t.type: t for t in tick_report.by_type}
    # function rows are grouped by their function, not as "(own ops)"
    assert by_type["add"].layers == 2 and "add (own ops)" not in by_type
    assert by_type["add"].share == pytest.approx(0.0004 / WALL)


def test_without_functions_the_block_row_holds_its_functions(tick_report):
    clock = FakeClock()
    report = layerscope.profile(TickNet(clock), inputs=(1, 4), runs=3, warmup=1,
                                roofline=False, clock=clock)
    rows = {r.name: r for r in report.layers}
    assert "blocks.0 (add)" not in rows
    assert rows["blocks.0"].time["median_s"] == pytest.approx(0.0008)  # 0.5 + 0.1 + 0.2 ms


class BasicBlock(nn.Module):
    """torchvision's resnet18 BasicBlock, with the functional relu: the residual add and
    F.relu run in the block's own code."""

    def __init__(self, planes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

    def forward(self, x):
        identity = x
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + identity
        return F.relu(out)


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(BasicBlock(), BasicBlock())

    def forward(self, x):
        return torch.flatten(self.layer1(x), 1)


SHAPE = (1, 4, 6, 6)
# per block: F.relu twice, one add; the root: one flatten
BLOCK_FUNCTIONS = [("layer1.0 (relu)", 2), ("layer1.0 (add)", 1), ("layer1.1 (relu)", 2),
                   ("layer1.1 (add)", 1)]


@pytest.mark.integration
@pytest.mark.parametrize("name,calls", BLOCK_FUNCTIONS, ids=[n for n, _ in BLOCK_FUNCTIONS])
def test_basic_block_rows_match_analyze_functions(name, calls):
    model = TwoBlocks().eval()
    analyzed = {r.name: r for r in layerscope.analyze(model, SHAPE, functions=True).layers}
    profiled = {r.name: r for r in layerscope.profile(model, SHAPE, runs=3, warmup=1,
                                                      roofline=False, functions=True).layers}
    assert analyzed[name].calls == profiled[name].calls == calls
    assert profiled[name].time["n"] == 3
    # analyze's rows, plus the own row of each container whose ops all ran in functions
    assert [n for n in profiled if n not in analyzed] == ["(root)", "layer1.0", "layer1.1"]
    assert [n for n in profiled if n in analyzed] == list(analyzed)
    assert list(profiled).index("layer1.0") == list(profiled).index("layer1.0 (add)") + 1
    assert profiled["layer1.0"].calls == 1 and profiled["layer1.0"].type == "BasicBlock"
    shares = [r.share for r in profiled.values() if r.share is not None]
    assert sum(shares) <= 1.0 + 1e-9


def test_the_timer_counts_the_calls_analyze_counts():
    model = TwoBlocks().eval()
    rows = [r for r in layerscope.analyze(model, SHAPE, functions=True).layers
            if r.function() is not None]
    timer = ForwardTimer(list(model.named_modules()), functions=[r.function() for r in rows])
    with timer, torch.no_grad():
        model(torch.zeros(SHAPE))
    counts = timer.calls()
    assert {r.name: counts[tree.function_path(*r.function())] for r in rows} \
        == {r.name: r.calls for r in rows}
    assert counts["(flatten)"] == 1 and counts["layer1.0"] == 1
    assert F.relu.__name__ == "relu"  # the timer is gone: calls are plain again
    assert torch.overrides._get_current_function_mode() is None


def test_cli_profile_functions_and_refusals():
    code, out, err = run_cli("profile", "resnet20", "--functions", "--runs", "1", "--warmup",
                             "0", "--no-roofline", "--format", "csv")
    assert code == 0, err
    assert "layer1.0 (add)" in out and "layer1.0 (relu)" in out
    code, _, err = run_cli("profile", "resnet20", "--functions", "--backward")
    assert code == 2 and err.count("\n") == 1 and "--functions" in err and "--backward" in err


# ---- run --layers --functions (training.watch.Watch) ------------------------------------
WATCH_EXPECTED = [  # (row, type, forward seconds per step, own seconds per step)
    ("TickNet (cat)", "cat", 0.0003, 0.0003),
    ("blocks.0 (relu)", "relu", 0.0001, 0.0001),
    ("blocks.0 (add)", "add", 0.0002, 0.0002),
    ("blocks.0", "TickBlock", 0.0018, 0.0005),  # own: minus conv and both functions
    ("blocks.0.conv", "Tick", 0.001, 0.001),
    ("TickNet", "TickNet", WALL, 0.0),  # all of the root's time is in its blocks and cat
]


@pytest.fixture(scope="module")
def watched():
    from layerscope.training.watch import Watch

    clock = FakeClock()
    model = TickNet(clock)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with Watch(model, opt, warmup_steps=1, layers=True, functions=True, clock=clock) as w:
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
        with torch.no_grad():
            model(torch.ones(2, 4))  # evaluation: in no row
    return w.report()


@pytest.mark.parametrize("name,kind,forward,own", WATCH_EXPECTED,
                         ids=[e[0] for e in WATCH_EXPECTED])
def test_watch_times_function_rows_by_hand(watched, name, kind, forward, own):
    rows = {row["name"]: row for row in watched.layers}
    steps = watched.breakdown["steps"]
    assert steps == 2
    row = rows[name]
    assert (row["type"], row["calls"]) == (kind, steps)
    assert row["forward_s"] == pytest.approx(steps * forward)
    assert row["own_s"] == pytest.approx(steps * own)


def test_watch_function_rows_never_overlap(watched):
    rows = {row["name"]: row for row in watched.layers}
    # own times tile the root's inclusive time: no function counted twice
    assert sum(row["own_s"] for row in watched.layers) \
        == pytest.approx(rows["TickNet"]["forward_s"])
    assert watched.config["functions"] is True
    assert not any(name.endswith("(get)") or "size" in name for name in rows)


def test_watch_functions_needs_layers():
    from layerscope.core.errors import UserError
    from layerscope.training.watch import Watch

    with pytest.raises(UserError, match="layers=True"):
        Watch(functions=True)


SCRIPT = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

{blocks}

torch.manual_seed(0)
model = TwoBlocks()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(1, 4, 6, 6)).sum().backward()
    opt.step()
'''


@pytest.mark.integration
def test_run_layers_functions_rows_match_analyze_functions(tmp_path):
    import json

    script = tmp_path / "train_blocks.py"
    script.write_text(SCRIPT.format(blocks=inspect.getsource(BasicBlock) + "\n\n"
                                    + inspect.getsource(TwoBlocks)))
    out = tmp_path / "r.json"
    code, _, err = run_cli("run", "--layers", "--functions", "-o", str(out), str(script))
    assert code == 0, err
    report = json.loads(out.read_text())
    steps = report["breakdown"]["steps"]
    assert steps == 3
    rows = {row["name"]: row for row in report["layers"]}
    analyzed = [r for r in layerscope.analyze(TwoBlocks(), SHAPE, functions=True).layers
                if r.function() is not None]
    assert len(analyzed) == 5
    for r in analyzed:  # the runner names modules under the root's type: "TwoBlocks.layer1.0"
        name = ("TwoBlocks" if r.name.startswith("(root)") else "TwoBlocks.") + r.name.replace(
            "(root)", "")
        assert rows[name]["calls"] == steps * r.calls, name
    code, _, err = run_cli("run", "--functions", str(script))
    assert code == 2 and "--layers" in err and err.count("\n") == 1
