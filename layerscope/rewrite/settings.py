"""The settings of ``layerscope verify`` and ``layerscope rewrite``, declared once:
``Tolerances`` (how two models are compared: the random inputs, the tolerances, onnxruntime's
level), ``VerifySettings`` (the two models, then those), ``PassCheck`` and ``SubgraphCheck``
(``rewrite``'s ``--verify``, then the tolerances), ``LinearSubgraphSettings`` (the Linear graph
of ``rewrite linear-subgraph``). Kept apart from ``rewrite.verify`` and ``rewrite.linear`` so
that the command line declares its options without importing numpy or onnx."""
from __future__ import annotations

import dataclasses
from typing import Any

from layerscope.core import options, values
from layerscope.core.errors import UserError
from layerscope.core.settings import REQUIRED, Settings, option
from layerscope.rewrite import DEFAULT_ATOL, DEFAULT_RTOL


@dataclasses.dataclass(kw_only=True, eq=False)
class Tolerances(Settings):
    """How ``verify`` compares two models (``verify``'s and ``rewrite --verify``'s options)."""

    runs: int = option(5, "random inputs to compare on (default 5)", parse=values.positive_int)
    rtol: float = option(DEFAULT_RTOL, f"relative tolerance, of max|A| (default {DEFAULT_RTOL:g})",
                         parse=values.finite_non_negative_float)
    atol: float = option(DEFAULT_ATOL, f"absolute tolerance (default {DEFAULT_ATOL:g})",
                         parse=values.finite_non_negative_float)
    seed: int = option(0, "seed of the random inputs and of model A's random weights when A is "
                          "a built-in model or factory (default 0, as in export)",
                       parse=values.seed)
    optimization: str = options.ort_level("--ort-optimization")

    def tolerances(self) -> dict[str, Any]:
        """These settings as ``verify``'s keyword arguments."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Tolerances)}


@dataclasses.dataclass(kw_only=True, eq=False)
class VerifySettings(Tolerances):
    """Every setting of ``layerscope verify`` and ``layerscope.rewrite.verify``: a new one is a
    field here (the CLI's option and the API's argument follow)."""

    a: Any = option(REQUIRED, "reference: an ONNX file, or a model spec (built-in name, "
                          "file.py:factory, ...) run in PyTorch", positional=True, metavar="A")
    b: Any = option(REQUIRED, "an ONNX file", positional=True, metavar="B")


def of_call(settings: VerifySettings | None, a: Any, b: Any,
            overrides: dict[str, Any]) -> VerifySettings:
    """The settings of a ``verify`` call: ``settings`` with the models and keyword arguments
    given; without settings, both models are needed."""
    given = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
    if settings is None and len(given) < 2:
        raise UserError("verify compares two models: give a and b", arguments=("a", "b"))
    return VerifySettings.of(settings, **given, **overrides)


@dataclasses.dataclass(kw_only=True, eq=False)
class _PassVerify(Settings):
    verify: bool = option(False, "run IN and OUT on random inputs and compare (exit 1 on "
                                 "mismatch)")


@dataclasses.dataclass(kw_only=True, eq=False)
class _GraphsVerify(Settings):
    verify: bool = option(False, "compare the two graphs (exit 1 on mismatch)")


# a dataclass takes its bases' fields from the last base to the first: --verify, then the
# tolerances, as the commands list them
@dataclasses.dataclass(kw_only=True, eq=False)
class PassCheck(Tolerances, _PassVerify):
    """``rewrite PASS --verify`` and how it compares IN with OUT."""


@dataclasses.dataclass(kw_only=True, eq=False)
class SubgraphCheck(Tolerances, _GraphsVerify):
    """``rewrite linear-subgraph --verify`` and how it compares the two graphs."""


@dataclasses.dataclass(kw_only=True, eq=False)
class LinearSubgraphSettings(Settings):
    """Every setting of the Linear graph ``rewrite linear-subgraph`` writes (``m`` x ``k``
    input, ``k`` x ``n`` weight) and of ``rewrite.linear.linear_subgraph``."""

    m: int = option(REQUIRED, "rows of the input", parse=values.positive_int)
    k: int = option(REQUIRED, "input features", parse=values.positive_int)
    n: int = option(REQUIRED, "output features", parse=values.positive_int)
    tile: int = option(64, "tile size (default 64)", parse=values.positive_int)
    bias: bool = option(True, "add a bias (default: yes)", negatable=True)
    weight_seed: int = option(0, "seed of the random weights", parse=values.seed)
