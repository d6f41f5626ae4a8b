"""``train``, ``run``, ``ablate`` and ``advise`` take their options from settings declarations
(core.settings): ``TrainConfig`` and ``LaunchSettings`` (training/config.py), ``RunSettings``
(training/script_runner.py), ``WhatIf`` (training/whatif.py), ``AblateSettings``
(training/ablation.py), ``AdviseSettings`` (advice). Every field is an option of its command,
the train config's every field is saved, the rules between fields are refused in the API's
words and in the CLI's, and ``flags()`` (what an ablation variant and an advice's command
write) reads back to the same values."""
from __future__ import annotations

import dataclasses

import pytest

from layerscope.advice import AdviseSettings
from layerscope.cli import train_cmd
from layerscope.cli.common import settings_from
from layerscope.cli.main import build_parser
from layerscope.core.errors import UserError
from layerscope.core.settings import spec_of
from layerscope.training import ablation
from layerscope.training.ablation import AblateSettings
from layerscope.training.config import LaunchSettings, TrainConfig
from layerscope.training.script_runner import RunSettings
from layerscope.training.whatif import WhatIf
from tests.helpers import run_cli

COMMANDS = [("train", TrainConfig), ("train", LaunchSettings), ("run", RunSettings),
            ("run", WhatIf), ("ablate", AblateSettings), ("advise", AdviseSettings)]


def _subparser(command: str):
    parser = build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices[command]


@pytest.mark.parametrize("command,cls", COMMANDS, ids=[f"{c}-{k.__name__}" for c, k in COMMANDS])
def test_every_field_is_an_option_of_its_command(command, cls):
    dests = {a.dest for a in _subparser(command)._actions}
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        if spec is None or not spec.cli:  # WhatIf.seen; TrainConfig.synthetic_size (API only)
            continue
        assert f.name in dests, (cls.__name__, f.name)


def test_the_train_config_saves_every_setting():
    """config.json and the report's config (``to_dict``) keep what ``recorded()`` says: every
    field, in declaration order; the launch options are the command's, not saved."""
    config = TrainConfig(epochs=2, synthetic=True)
    assert list(config.to_dict()) == list(config.recorded()) == [
        f.name for f in dataclasses.fields(TrainConfig)]
    assert not set(config.to_dict()) & {f.name for f in dataclasses.fields(LaunchSettings)}


# (settings class, arguments, the API's words, the command line, the CLI's words)
RULES = [
    (TrainConfig, {"kernels": True, "profile": "torch"},
     "kernels runs torch.profiler itself over three steps: leave out profile torch",
     ["train", "--kernels", "--profile", "torch"],
     "--kernels runs torch.profiler itself over three steps: leave out --profile torch"),
    (RunSettings, {"functions": True},
     "functions needs layers: it splits the per-layer rows",
     ["run", "--functions", "SCRIPT"], "--functions needs --layers: it splits the per-layer rows"),
    (RunSettings, {"kernels": True, "nproc_per_node": 2},
     "kernels profiles the steps of one process: leave out nproc_per_node",
     ["run", "--kernels", "--nproc-per-node", "2", "SCRIPT"],
     "--kernels profiles the steps of one process: leave out --nproc-per-node (the window is "
     "not merged across ranks)"),
    (AblateSettings, {"recipe": "digits-cnn", "steps": 4, "warmup_steps": 4},
     "warmup_steps \\(4\\) must be below steps \\(4\\)",
     ["ablate", "digits-cnn", "--steps", "4", "--warmup-steps", "4"],
     "--warmup-steps (4) must be below --steps (4)"),
    # the variants are read when the settings are made, before any training run
    (AblateSettings, {"recipe": "digits-cnn", "variants": "baseline,compile+torchscript"},
     "variants: variant 'compile\\+torchscript': compile and torchscript exclude each other",
     ["ablate", "digits-cnn", "--variants", "baseline,compile+torchscript"],
     "variant 'compile+torchscript': compile and torchscript exclude each other"),
]


@pytest.mark.parametrize("cls,kwargs,api,argv,cli", RULES, ids=["train-kernels-profile",
                                                                "run-functions-layers",
                                                                "run-kernels-nproc",
                                                                "ablate-warmup-steps",
                                                                "ablate-variants"])
def test_what_does_not_go_together_is_one_line(tmp_path, monkeypatch, cls, kwargs, api, argv,
                                               cli):
    with pytest.raises(UserError, match="^" + api) as info:
        cls(**kwargs)
    # the fields it names (the CLI shows each as its flag)
    assert set(info.value.arguments) <= {f.name for f in dataclasses.fields(cls)}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text("raise SystemExit(5)\n")  # never started: refused first
    code, out, err = run_cli(*[w.replace("SCRIPT", "s.py") for w in argv])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.rstrip().endswith(cli), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.py"]


# (command, settings class, overrides): ``flags`` parsed back by the command's own parser
FLAGS = [
    ("train", TrainConfig, {"epochs": 3, "amp": True, "evaluate": False, "num_workers": 2}),
    ("train", TrainConfig, {"profile": "torch", "device": "cuda", "comm_timeout": 30.0}),
    ("train", LaunchSettings, {"nproc_per_node": 2, "nnodes": 2, "node_rank": 1,
                               "rdzv_endpoint": "node0:29500"}),
    ("run", RunSettings, {"steps": 4, "step_on": "backward", "layers": True,
                          "functions": True, "memory_limit": 2**30}),
    ("run", WhatIf, {"num_workers": 0, "pin_memory": True, "threads": 2}),
    ("ablate", AblateSettings, {"variants": ["baseline", "workers=2+amp"], "repeats": 2,
                                "warmup_steps": 0, "data_dir": "--download", "seed": 3}),
    ("advise", AdviseSettings, {"verify": True, "allow_code": True, "steps": 2, "repeats": 3}),
]


@pytest.mark.parametrize("command,cls,overrides", FLAGS,
                         ids=[f"{c}-{k.__name__}-{i}" for i, (c, k, _) in enumerate(FLAGS)])
def test_flags_parse_back_to_the_overrides(command, cls, overrides):
    positional = {"run": ["s.py"], "ablate": ["digits-cnn"], "advise": ["r.json"]}
    words = [*cls.flags(**{k: ",".join(v) if k == "variants" else v
                           for k, v in overrides.items()}), *positional.get(command, [])]
    s = settings_from(cls, _subparser(command).parse_args(words))
    assert {k: getattr(s, k) for k in overrides} == overrides


# (command line after `run`, the script words, the -m words): everything after the script (or
# -m MODULE) is the script's, options included
REST = [
    (["--steps", "2", "s.py", "--steps", "3", "-m", "x"], ["s.py", "--steps", "3", "-m", "x"],
     None),
    (["--layers", "-m", "pkg.mod", "--layers", "a"], [], ["pkg.mod", "--layers", "a"]),
    (["--", "s.py", "--help"], ["--", "s.py", "--help"], None),
    ([], [], None),
]


@pytest.mark.parametrize("argv,script,module", REST, ids=["script", "module", "dashes", "none"])
def test_the_script_takes_the_rest_of_the_command_line(argv, script, module):
    args = _subparser("run").parse_args(argv)
    s = settings_from(RunSettings, args)
    assert (s.script, s.module) == (script, module)


def test_each_variant_trains_with_flags_that_read_back_to_its_settings(monkeypatch):
    """An ablation's variant runs ``layerscope train`` with ``TrainConfig.flags`` of its
    settings: parsed by train's own parser they are the settings it was to run with. The
    Python API without ``settings`` runs the baseline alone on generated data
    (``API_DEFAULTS``); the command's defaults are its own."""
    runs = []

    def fake(recipe, settings, workdir, tag):
        runs.append((tag, settings))
        return {"breakdown": {"steps": 2, "wall_s": 0.2, "seconds": {"forward": 0.1}},
                "step_seconds": [0.1, 0.1]}

    monkeypatch.setattr(ablation, "_run_variant", fake)
    monkeypatch.setattr(ablation, "_noise", lambda *a: None)
    report = ablation.ablate("digits-cnn", steps=3, variants="workers=1+amp,pin-memory",
                             data_dir="-d", seed=4)
    assert [r.variant for r in report.variants] == ["baseline", "workers=1+amp", "pin-memory"]
    assert report.variants[2].status == "n/a"  # a CUDA-only variant on the CPU
    assert [tag for tag, _ in runs] == ["baseline-0", "workers-1-amp-0"]
    for _, settings in runs:
        config = train_cmd.config_from(_subparser("train").parse_args(
            ["digits-cnn", *TrainConfig.flags(**settings)]))
        assert {k: getattr(config, k) for k in settings} == {
            **settings, "data_dir": "-d"}
    assert runs[1][1]["num_workers"] == 1 and runs[1][1]["amp"] is True
    assert runs[0][1]["synthetic"] is True and runs[0][1]["warmup_steps"] == 1  # 3 // 2
    runs.clear()
    ablation.ablate("digits-cnn", steps=2)
    assert [tag for tag, _ in runs] == ["baseline-0"]
    assert AblateSettings(recipe="r").variants == ["baseline", "workers=2", "compile",
                                                   "channels-last"]


@pytest.mark.parametrize("variant,threads,settings", [
    ("workers=2", None, {"num_workers": 2}),
    ("workers=3+pin-memory", None, {"num_workers": 3, "pin_memory": True}),
    (None, 2, {"threads": 2}),
    ("amp", None, None),  # the script's code decides: an edit, not a what-if option
    ("workers=2+amp", None, None),
    ("all", None, None),
    ("baseline", None, None),
    (None, None, None),
    ("workers=x", None, None),
], ids=["workers", "workers-pin", "threads", "amp", "workers-amp", "all", "baseline", "none",
        "bad"])
def test_an_advices_change_on_a_script_is_what_if_settings(variant, threads, settings):
    """A rule's ablation variant measured on the user's own script: the same train settings
    as run's what-if options when ``WhatIf`` has each of them."""
    from layerscope.advice import run_argv, run_settings

    assert run_settings(variant, threads) == settings
    if settings:
        argv = run_argv({"path": "s.py", "argv": ["--x"]}, settings, 20)
        parsed = settings_from(WhatIf, _subparser("run").parse_args(argv[2:]))
        assert {k: getattr(parsed, k) for k in settings} == settings
        assert argv[-3:] == ["--", "s.py", "--x"]


# (a result's saved config, what its typed view reads): a key the result does not hold is "not
# set"; the switches are booleans; other values are kept as saved
RUN_CONFIGS = [
    ({}, {"device": "cpu", "num_workers": None, "amp": False, "what_if": {},
          "recorded": frozenset()}),
    ({"device": "cuda", "num_workers": 2, "pin_memory": 1, "seed": 3, "data_dir": "--d"},
     {"device": "cuda", "num_workers": 2, "pin_memory": True, "seed": 3, "data_dir": "--d",
      "recorded": frozenset({"device", "num_workers", "pin_memory", "seed", "data_dir"})}),
    # a run with what-if settings: those it was made with, not the ones left out
    ({"what_if": ["--threads", "1"], "threads": 1, "num_workers": None, "pin_memory": False},
     {"what_if": {"threads": 1, "pin_memory": False}, "threads": 1}),
    ({"threads": 2}, {"what_if": {}, "threads": 2}),  # not a what-if run
    (None, {"device": "cpu", "recorded": frozenset()}),  # a malformed result: nothing set
]


@pytest.mark.parametrize("config,expected", RUN_CONFIGS,
                         ids=["empty", "recipe", "what-if", "no-what-if", "not-a-dict"])
def test_a_results_config_is_read_through_its_typed_view(config, expected):
    from layerscope.core.records.train import RunConfig

    view = RunConfig.of(config)
    assert {k: getattr(view, k) for k in expected} == expected


def test_the_train_reports_config_keeps_its_saved_shape():
    """``TrainReport.run_config`` reads the config; the saved dict and its JSON stay as they
    were (the keys of ``TrainConfig.to_dict``)."""
    from layerscope.core.records.train import TrainReport
    from tests.sample_results import train_report

    report = train_report()
    saved = report.to_dict()["config"]
    assert report.run_config.seed == saved.get("seed")
    assert report.run_config.synthetic is bool(saved.get("synthetic"))
    assert TrainReport.from_dict(report.to_dict()).to_dict()["config"] == saved
