"""torch.compile for many small layers: the per-op dispatch (and on GPUs the kernel launch) of
small elementwise layers dominates them; fusing them removes most of it."""
from layerscope.advice.rule import STEADY, Finding, Rule, amdahl_range, need

MIN_LAYERS = 20
SMALL_S = 50e-6  # a median layer this fast is mostly dispatch
SPEEDUP = (1.0, 2.0)


def _share(facts) -> tuple[float | None, str]:
    if facts.get("elementwise_share") is not None:
        return facts["elementwise_share"], "non-contraction layer"
    return facts.get("compute_share"), "forward+backward (bounds the small layers)"


NEEDS = (
    need("not compiled already", "compile", lambda f: not f.get("compile")),
    need(f">= {MIN_LAYERS} layers", "layers", lambda f: (f.get("layers") or 0) >= MIN_LAYERS),
    need(f"a median layer under {SMALL_S * 1e6:.0f} µs, where measured", "median_layer_s",
         lambda f: f.get("median_layer_s") is None or f["median_layer_s"] <= SMALL_S),
    need("a share of the non-contraction layers (profile) or of forward+backward (> 0)",
         ("elementwise_share", "compute_share"), lambda f: bool(_share(f)[0])),
    STEADY,
)


def check(facts) -> Finding | None:
    share, what = _share(facts)
    if not share:
        return None
    layers, median = facts["layers"], facts.get("median_layer_s")
    low, high, text = amdahl_range(share, SPEEDUP, what)
    return Finding(
        cause=f"{layers} layers" + (f", the median one {median * 1e6:.0f} µs"
                                    if median is not None else "")
        + ": dispatch and launch overhead between small layers",
        change="torch.compile the model (train --compile)",
        low=low, high=high, derivation=text, variant="compile")


RULE = Rule("compile", ("elementwise_share", "compute_share"),
            "f x (1 - 1/s), f = share of the non-contraction layers, s = 1..2; fires at >= 20 "
            "layers with a median layer under 50 µs", check, needs=NEEDS,
            edit="model = torch.compile(model)", sweep="--backends eager,compile")
