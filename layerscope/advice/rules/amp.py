"""bf16/AMP for matmul-bound layers: contractions that run at the compute roof in float32 get
the bfloat16 roof (tensor cores on GPUs, AMX/AVX512-BF16 on CPUs that have them)."""
from layerscope.advice.rule import Finding, Outcome, Rule, amdahl_range, amdahl_why, pick

SPEEDUP = {"cuda": (1.5, 3.0), "cpu": (1.0, 1.6)}
MIN_SHARE = 0.2  # below this the contractions are not what the step waits for


def check(facts) -> Finding | None:
    if facts.get("amp") or facts.get("dtype") not in (None, "float32"):
        return None
    share, what = facts.get("matmul_share"), "compute-bound contraction"
    if share is None:
        share, what = facts.get("compute_share"), "forward+backward (bounds the contractions)"
    if not share or share < MIN_SHARE:
        return None
    low, high, text = amdahl_range(share, SPEEDUP.get(facts.get("device"), SPEEDUP["cpu"]), what)
    return Finding(
        cause=f"{share:.0%} of the time ({what}) runs in float32",
        change=("run the model and its inputs in bfloat16 (model.to(torch.bfloat16))"
                if facts.get("kind") in ("profile", "sweep")  # inference: sweep --dtypes
                else "run them in bfloat16 autocast (train --amp)"),
        low=low, high=high, derivation=text, variant="amp",
        facts=pick(facts, "matmul_share", "compute_share", "dtype", "device"))


def explain(o: Outcome) -> str:
    """Why the gain left f x (1 - 1/s): the speed-up of the contractions it implies, against
    the assumed range (a CPU with bfloat16 matrix units beats 1.6; one without them, or a
    step that converts more than it computes, falls short), or, above f, that the rest of the
    step got faster too (half the bytes to move)."""
    f = o.facts.get("matmul_share") or o.facts.get("compute_share") or 0.0
    if o.gain >= f > 0:
        return (f"the measured gain {o.gain:.3f} is above the contractions' whole share "
                f"f = {f:.3f}: the rest of the step got faster too (bfloat16 halves the bytes "
                "every layer moves), which the prediction over f alone leaves out")
    if 0 < o.gain < f:
        s = 1.0 / (1.0 - o.gain / f)
        side = "above" if o.gain > o.high else "below"
        return (f"the measured gain {o.gain:.3f} means the contractions ran {s:.2f}x faster "
                f"(1 / (1 - gain / f), f = {f:.3f}), {side} the assumed speed-up range: "
                + ("this processor's bfloat16 units beat it (layerscope roofline --dtype "
                   "bfloat16 measures them)" if side == "above" else
                   "the casts to and from bfloat16 cost more than the contractions saved"))
    return amdahl_why(o)


RULE = Rule("amp", ("matmul_share (compute-bound rows) or compute_share", "dtype", "amp",
                    "device"),
            "f x (1 - 1/s), f = compute-bound contraction share (>= 0.2), s = 1.0..1.6 (CPU), "
            "1.5..3 (CUDA)", check,
            edit="wrap the forward and the loss in "
                 "torch.autocast(device_type, dtype=torch.bfloat16)",
            # a model given by name: sweep runs it in bfloat16 (weights and inputs cast)
            sweep="--dtypes float32,bfloat16", explain=explain)
