"""core/values.py: the one parser per kind of user value (CLI text and Python API numbers)."""
from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

import layerscope
from layerscope.core import values
from layerscope.core.errors import UserError

INT64_MAX = 2**63 - 1

ACCEPTED = [
    ("positive-text", values.positive_int, "42", 42),
    ("positive-int64-max", values.positive_int, str(INT64_MAX), INT64_MAX),
    ("positive-numpy", values.positive_int, np.int64(7), 7),
    ("positive-underscores", values.positive_int, "1_000", 1000),
    ("non-negative-zero", values.non_negative_int, "0", 0),
    ("seed-max", values.seed, str(2**63 - 1), 2**63 - 1),
    ("threads-1", values.thread_count, "1", 1),
    ("width-40", values.width, "40", 40),
    ("float-positive", values.finite_positive_float, "1e-3", 1e-3),
    ("float-non-negative-zero", values.finite_non_negative_float, "0", 0.0),
    ("shape", values.shape, "1x3x224x224", ((1, 3, 224, 224), None)),
    ("shape-dtype", values.shape, "1x128:INT64", ((1, 128), "int64")),
    ("named-shape", values.named_shape, "ids=1x128:int64", ("ids", (1, 128), "int64")),
    ("unnamed-shape", values.named_shape, "1x8", (None, (1, 8), None)),
    ("shape-at-int64-limit", values.shape, f"{INT64_MAX}", ((INT64_MAX,), None)),
    ("size-pair", values.size_pair, "1200x800", (1200, 800)),
]


@pytest.mark.parametrize("parse,text,expected", [a[1:] for a in ACCEPTED],
                         ids=[a[0] for a in ACCEPTED])
def test_accepted(parse, text, expected):
    assert parse(text) == expected


REFUSED = [
    ("positive-zero", values.positive_int, "0", "must be at least 1, got 0"),
    ("positive-over-int64", values.positive_int, str(2**63), "must be at most 2**63-1"),
    ("positive-5000-digits", values.positive_int, "9" * 5000, "must be a whole number"),
    ("positive-float-text", values.positive_int, "1.5", "must be a whole number"),
    ("positive-bool", values.positive_int, True, "must be a whole number"),
    ("positive-float", values.positive_int, 2.0, "must be a whole number"),
    ("non-negative", values.non_negative_int, "-5", "must be 0 or more, got -5"),
    ("seed-2-70", values.seed, str(2**70), "must be at most 2**63-1"),
    ("seed-negative", values.seed, -1, "must be 0 or more"),
    ("threads-0", values.thread_count, "0", "must be at least 1 (and at most 1024)"),
    ("threads-huge", values.thread_count, "100000", "must be at most 1024"),
    ("width-5", values.width, "5", "must be at least 40"),
    ("float-nan", values.finite_positive_float, "nan", "must be a finite number"),
    ("float-inf", values.finite_positive_float, "inf", "must be a finite number"),
    ("float-overflow", values.finite_positive_float, "1e999", "must be a finite number"),
    ("float-zero", values.finite_positive_float, "0", "must be positive"),
    ("float-text", values.finite_positive_float, "abc", "must be a number"),
    ("float-negative-tolerance", values.finite_non_negative_float, -1.0, "0 or more"),
    ("shape-zero-dim", values.shape, "0x3", "must be at least 1, got 0"),
    ("shape-letters", values.shape, "1x3xa", "malformed inputs"),
    ("shape-empty", values.shape, "", "malformed inputs"),
    ("shape-numel", values.shape, "4294967296x4294967296", "elements, more than a tensor"),
    ("named-empty-name", values.named_shape, "=1x3", "the name before '=' is empty"),
    ("named-dim-int64", values.named_shape, f"x={2**64}x8", "at most 2**63-1"),
    ("size-pair-one", values.size_pair, "1200", "write WIDTHxHEIGHT"),
    ("check-shape-negative", values.check_shape, (2, -1), "must be at least 1, got -1"),
]


@pytest.mark.parametrize("parse,value,expected", [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_refused_with_one_line(parse, value, expected):
    with pytest.raises(UserError) as info:
        parse(value)
    message = str(info.value)
    assert expected in message and "\n" not in message, message


def test_names_start_the_message():
    with pytest.raises(UserError, match=r"^--runs must be at least 1, got 0$"):
        values.positive_int(0, "--runs")


def test_lists_check_every_item():
    assert values.comma_list("1, 16,64", item=values.positive_int) == [1, 16, 64]
    for text, why in [("1,0", "each item must be at least 1"), ("1,,2", "empty items"),
                      ("", "empty items"), ("1,x", "each item must be a whole number")]:
        with pytest.raises(UserError, match=why):
            values.comma_list(text, "--batch-sizes", item=values.positive_int)


def test_argparse_adapter_turns_errors_into_argparse_errors():
    parse = values.arg(values.finite_positive_float, maximum=3600.0)
    assert parse("2.5") == 2.5
    with pytest.raises(argparse.ArgumentTypeError, match="must be at most 3600"):
        parse("4000")


def test_thread_count_above_the_cpus_warns(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    with pytest.warns(UserWarning, match="more than this machine's 2 CPUs"):
        assert values.thread_count(4) == 4


@pytest.mark.parametrize("seed,part,factor", [(0, 0, 1000), (7, 3, 1000), (5, 11, 1_000_003)])
def test_derived_seed_is_the_old_formula_for_small_seeds(seed, part, factor):
    # training seeded epochs with seed * 1000 + epoch and samples with seed * 1_000_003 + i:
    # the same numbers, so runs and checkpoints made before stay reproducible
    assert values.derived_seed(seed, part, factor=factor) == seed * factor + part


def test_derived_seed_of_the_largest_seed_fits_int64():
    s = values.derived_seed(2**63 - 1, 999, factor=1_000_003)
    assert 0 <= s <= 2**63 - 1 and not math.isnan(s)


@pytest.mark.parametrize("shape,expected", [((0, 4), "must be at least 1, got 0"),
                                            ((2**70, 4), "must be at most 2**63-1"),
                                            ((2**40, 2**40), "elements, more than a tensor")],
                         ids=["zero", "int64", "numel"])
def test_api_shape_tuples_go_through_the_same_parser(shape, expected):
    with pytest.raises(UserError, match=expected.replace("*", r"\*")):
        layerscope.analyze("mnist-cnn", inputs=shape)
