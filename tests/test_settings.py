"""One settings declaration per command (core.settings): the CLI's options, the API's
arguments and checks, the saved result's settings and the flags an advice writes all come
from the fields of one dataclass."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from layerscope.analysis.profiling import ProfileSettings
from layerscope.cli.common import Parser, add_all_settings, add_settings, settings_from
from layerscope.core import options, values
from layerscope.core.errors import UserError
from layerscope.core.settings import Settings, option


@dataclasses.dataclass(kw_only=True, eq=False)
class Every(Settings):
    """One field of each kind the declarations offer."""
    model: str = options.model()
    inputs: list[str] | None = options.inputs()
    runs: int | None = option(None, parse=values.positive_int, exclusive="how long")
    min_time: float | None = option(None, parse=values.finite_positive_float,
                                    exclusive="how long")
    exporter: str = option("dynamo", consts=(("--dynamo", "dynamo"), ("--legacy", "legacy")))
    bias: bool = option(True, negatable=True)
    roofline: bool = option(True, flag="--no-roofline")
    files: list[str] = option([], nargs="*")
    level: str = options.ort_level("--level")


def parsed(cls, argv):
    p = Parser(prog="t")
    add_settings(p, cls)
    return settings_from(cls, p.parse_args(argv))


@pytest.mark.parametrize("argv,expected", [
    (["m"], {"model": "m", "inputs": None, "runs": None, "exporter": "dynamo", "bias": True,
             "roofline": True, "files": [], "level": "disabled"}),
    (["m", "--input", "1x3", "--input", "x=2"], {"inputs": ["1x3", "x=2"]}),
    (["m", "--runs", "3"], {"runs": 3}),
    (["m", "--min-time", "0.5"], {"min_time": 0.5}),
    (["m", "--legacy"], {"exporter": "legacy"}),
    (["m", "--no-bias"], {"bias": False}),
    (["m", "--no-roofline"], {"roofline": False}),
    (["m", "--files", "a", "b"], {"files": ["a", "b"]}),
    (["m", "--level", "disable"], {"level": "disabled"}),  # an alias, parsed
])
def test_every_kind_of_field_parses(argv, expected):
    s = parsed(Every, argv)
    assert {k: getattr(s, k) for k in expected} == expected


@pytest.mark.parametrize("argv,words", [
    (["m", "--runs", "2", "--min-time", "1"], "not allowed with argument"),
    (["m", "--dynamo", "--legacy"], "not allowed with argument"),
    ([], "required: model"),
    (["m", "--runs", "0"], "--runs must be at least 1"),
    (["m", "--level", "fast"], "--level must be one of disabled, basic"),
])
def test_a_bad_command_line_is_one_line(argv, words):
    with pytest.raises(UserError, match=words):
        parsed(Every, argv)


@pytest.mark.parametrize("overrides", [
    {"runs": 3}, {"min_time": 0.25}, {"exporter": "legacy"}, {"bias": False},
    {"roofline": False}, {"inputs": ["1x3", "1x4"]}, {"files": ["a", "b"]},
    {"level": "all"}, {"bias": True, "exporter": "dynamo"},
])
def test_flags_parse_back_to_the_overrides(overrides):
    """``Settings.flags`` (what an advice's command or an ablation variant writes) is read
    back by the parser the same declarations built, to the same values."""
    s = parsed(Every, ["m", *Every.flags(**overrides)])
    assert {k: getattr(s, k) for k in overrides} == overrides


def test_flags_refuse_an_unknown_setting():
    with pytest.raises(UserError, match="Every has no setting colour"):
        Every.flags(colour="red")


def test_the_api_checks_each_value_in_its_own_words():
    with pytest.raises(UserError, match="runs must be at least 1") as e:
        Every(model="m", runs=0)
    assert e.value.arguments == ("runs",)
    s = Every(model="m", runs="4")  # a text is parsed as the CLI parses it
    assert s.runs == 4
    with pytest.raises(UserError, match="settings must be a Every"):
        Every.of(object(), runs=1)  # type: ignore[arg-type]
    assert Every.of(s, runs=5).runs == 5 and s.runs == 4  # the given object is not changed


def test_recorded_leaves_out_what_the_result_keeps_elsewhere():
    s = Every(model="m", inputs=["1x3"], runs=2)
    kept = s.recorded()
    assert "model" not in kept and "inputs" not in kept
    assert kept["runs"] == 2 and list(kept) == [f.name for f in dataclasses.fields(Every)
                                                 if f.name not in ("model", "inputs")]


def _profile_parser() -> argparse.ArgumentParser:
    p = Parser(prog="profile")
    add_all_settings(p, ProfileSettings)
    return p


def test_every_profile_setting_is_an_option_an_argument_and_recorded():
    """Adding an option to profile is one field of ProfileSettings: the parser offers it,
    the API takes it by name, and the saved result's settings keep it."""
    p = _profile_parser()
    dests = {a.dest for a in p._actions}
    for f in dataclasses.fields(ProfileSettings):
        assert f.name in dests, f.name
    extended = dataclasses.make_dataclass(
        "Extended", [("repeat_forward", int, option(1, "a new option",
                                                    parse=values.positive_int))],
        bases=(ProfileSettings,), kw_only=True, eq=False)
    q = Parser(prog="profile")
    add_all_settings(q, extended)
    s = settings_from(extended, q.parse_args(["mnist-cnn", "--repeat-forward", "3"]))
    assert s.repeat_forward == 3 and s.recorded()["repeat_forward"] == 3
    with pytest.raises(UserError, match="repeat_forward must be at least 1"):
        extended(model="m", repeat_forward=0)


@pytest.mark.parametrize("overrides,words", [
    ({"context": 8}, "context sets the KV cache of decode N"),
    ({"decode": 2, "runs": 3}, r"decode N times decode steps .*: runs does not apply"),
    ({"loop": "digits", "kernels": True, "nvtx": True},
     "loop takes the model's input from the data set: kernels and nvtx do not apply"),
    ({"synthetic": True}, "synthetic is for loop DATASET"),
    ({"num_workers": 2, "data_dir": "d"}, "data_dir and num_workers are for loop DATASET"),
    ({"functions": True, "backward": True}, "functions splits the forward pass only"),
])
def test_profile_settings_refuse_what_does_not_go_together(overrides, words):
    with pytest.raises(UserError, match=words):
        ProfileSettings(model="mnist-cnn", **overrides)


def test_a_profile_result_records_its_settings():
    import layerscope

    r = layerscope.profile("mnist-cnn", ["1x1x28x28"], runs=2, warmup=0, roofline=False)
    assert r.settings["runs"] == 2 and r.settings["warmup"] == 0
    assert r.settings["roofline"] is False and r.settings["optimization"] == "disabled"
    assert r.settings["loop"] is None and "model" not in r.settings
    s = ProfileSettings(model="mnist-cnn", inputs=["1x1x28x28"], runs=2, warmup=0,
                        roofline=False)
    again = layerscope.profile(settings=s)
    assert {k: again.settings[k] for k in s.recorded()} == {
        k: r.settings[k] for k in s.recorded()}


def test_a_loop_result_records_the_warmup_it_used(monkeypatch):
    """A default the entry point resolves (loop's warm-up of 1 batch) is recorded as used,
    not as the None that was given."""
    import layerscope.training.inference_loop as loop
    from layerscope.training.profiling import profile

    seen = {}

    class Result:
        settings: dict = {}

    def fake(model, dataset, **kw):
        seen.update(kw)
        return Result()

    monkeypatch.setattr(loop, "profile_loop", fake)
    r = profile("mnist-cnn", loop="mnist", synthetic=True)
    assert seen["warmup"] == 1 and r.settings["warmup"] == 1 and r.settings["loop"] == "mnist"


def test_a_comma_list_setting_is_written_back_comma_separated():
    """A single option that takes a list (sweep --batch-sizes 1,16,64) is written back as
    one comma-separated word, and the parser reads it back to the same list."""
    from layerscope.analysis.sweep import SweepSettings

    words = SweepSettings.flags(batch_sizes=[1, 16, 64])
    assert words == ["--batch-sizes", "1,16,64"]
    p = Parser(prog="sweep")
    add_all_settings(p, SweepSettings)
    assert settings_from(SweepSettings, p.parse_args(["mnist-cnn", *words])).batch_sizes == [
        1, 16, 64]


@pytest.mark.parametrize("kwargs,given", [
    ({}, {}),
    ({"runs": 3, "bias": True, "files": []}, {"runs": 3}),  # a default or empty: not asked for
    ({"bias": False, "files": ["a"], "level": "all"}, {"bias": False, "files": ["a"],
                                                       "level": "all"}),
])
def test_given_is_what_differs_from_the_defaults(kwargs, given):
    """What ``Settings.given`` returns (profile's "does not apply" rules and ``run``'s
    what-if flags read it): a required field is always given."""
    assert Every(model="m", **kwargs).given() == {"model": "m", **given}
