"""torch.compile for many small layers: the per-op dispatch (and on GPUs the kernel launch) of
small elementwise layers dominates them; fusing them removes most of it."""
from layerscope.advice.rule import Finding, Rule, amdahl_range, pick

MIN_LAYERS = 20
SMALL_S = 50e-6  # a median layer this fast is mostly dispatch
SPEEDUP = (1.0, 2.0)


def check(facts) -> Finding | None:
    layers = facts.get("layers") or 0
    if facts.get("compile") or layers < MIN_LAYERS:
        return None
    median = facts.get("median_layer_s")
    if median is not None and median > SMALL_S:
        return None
    share = facts.get("elementwise_share")
    what = "non-contraction layer"
    if share is None:
        share, what = facts.get("compute_share"), "forward+backward (bounds the small layers)"
    if not share:
        return None
    low, high, text = amdahl_range(share, SPEEDUP, what)
    return Finding(
        cause=f"{layers} layers" + (f", the median one {median * 1e6:.0f} µs"
                                    if median is not None else "")
        + ": dispatch and launch overhead between small layers",
        change="torch.compile the model (train --compile)",
        low=low, high=high, derivation=text, variant="compile",
        facts=pick(facts, "layers", "median_layer_s", "elementwise_share", "compute_share"))


RULE = Rule("compile", ("layers", "median_layer_s", "elementwise_share or compute_share",
                        "compile"),
            "f x (1 - 1/s), f = share of the non-contraction layers, s = 1..2; fires at >= 20 "
            "layers with a median layer under 50 µs", check,
            edit="model = torch.compile(model)", sweep="--backends eager,compile")
