"""bf16/AMP for matmul-bound layers: contractions that run at the compute roof in float32 get
the bfloat16 roof (tensor cores on GPUs, AMX/AVX512-BF16 on CPUs that have them).

Only contractions get faster, so the rule needs contraction time: contractions counted in
the result (the layer table's or the kernels window's Linear/Conv rows, the profile's counted
FLOPs, the model's FLOPs per step, the recipe's model) and a meaningful share of the step in
them. A step whose counted FLOPs keep the processor under 1% of its peak (MFU) waits for
something else: launches, dispatch, the Python between the ops, communication. The share it
reads leaves out communication (a data-parallel script's backward: at most twice the forward)
and the transient steps (compilation), and it says it cannot judge when a transient could not
be taken out or when nothing counts the contractions."""
from layerscope.advice.rule import (
    STEADY,
    Finding,
    Outcome,
    Rule,
    amdahl_range,
    amdahl_why,
    need,
)

SPEEDUP = {"cuda": (1.5, 3.0), "cpu": (1.0, 1.6)}
MIN_SHARE = 0.2  # below this the contractions are not what the step waits for
MIN_MFU = 0.01  # below this the FLOPs are not what the step waits for
# the facts that count contractions, in the order the rule prefers them
COUNTED = ("matmul_share", "contraction_share", "contraction_flop_share", "contraction_layers",
           "mfu")


def _share(facts) -> tuple[float | None, str]:
    """The share the prediction reads and what it is."""
    if facts.get("matmul_share") is not None:
        return facts["matmul_share"], "compute-bound contraction"
    if facts.get("contraction_share") is not None:
        return (facts["contraction_share"],
                f"contraction layers' (from the {facts.get('contraction_source', 'layers')})")
    bound = "forward+backward, bounds the contractions"
    if facts.get("communication_in_backward"):
        bound = "forward+backward, backward at most 2x the forward without its all-reduce"
    return facts.get("compute_share"), bound


def _meaningful(facts) -> bool:
    for name in ("matmul_share", "contraction_share", "contraction_flop_share"):
        if facts.get(name) is not None and facts[name] < MIN_SHARE:
            return False
    if facts.get("contraction_layers") == 0:
        return False
    timed = any(facts.get(n) is not None for n in ("matmul_share", "contraction_share"))
    if not timed and facts.get("mfu") is not None:  # no time in contractions measured
        return facts["mfu"] >= MIN_MFU
    return True


NEEDS = (
    need("float32, no autocast", ("amp", "dtype"),
         lambda f: not f.get("amp") and f.get("dtype") in (None, "float32")),
    need(f"a share to read >= {MIN_SHARE:g}: compute-bound contraction rows (profile), the "
         "contraction layers' time, else forward+backward (communication left out)",
         ("matmul_share", "contraction_share", "compute_share", "communication_in_backward"),
         lambda f: (_share(f)[0] or 0.0) >= MIN_SHARE),
    need("contractions counted: the layer table's or kernels window's Linear/Conv rows, the "
         "profile's FLOPs (2 x MACs), the recipe's model, or the model's FLOPs per step (MFU)",
         COUNTED, lambda f: any(f.get(n) is not None for n in COUNTED),
         "the result counts no contraction: no model's forward was seen (so no FLOPs per "
         "step), and it has no layer table (run --layers) or kernels window (--kernels) "
         "naming Linear or Conv layers", judge=True),
    need(f"contractions a meaningful share: >= {MIN_SHARE:g} of the time or of the counted "
         f"FLOPs, a contraction layer, MFU >= {MIN_MFU:.0%} where no time is split by layer",
         COUNTED, _meaningful),
    STEADY,
)


def check(facts) -> Finding | None:
    share, what = _share(facts)
    if not share:
        return None
    low, high, text = amdahl_range(share, SPEEDUP.get(facts.get("device"), SPEEDUP["cpu"]), what)
    return Finding(
        cause=f"{share:.0%} of the time ({what}) runs in float32",
        change=("run the model and its inputs in bfloat16 (model.to(torch.bfloat16))"
                if facts.get("kind") in ("profile", "sweep")  # inference: sweep --dtypes
                else "run them in bfloat16 autocast (train --amp)"),
        low=low, high=high, derivation=text, variant="amp")


def explain(o: Outcome) -> str:
    """Why the gain left f x (1 - 1/s): the speed-up of the contractions it implies, against
    the assumed range (a CPU with bfloat16 matrix units beats 1.6; one without them, or a
    step that converts more than it computes, falls short), or, above f, that the rest of the
    step got faster too (half the bytes to move)."""
    f = (o.facts.get("matmul_share") or o.facts.get("contraction_share")
         or o.facts.get("compute_share") or 0.0)
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


RULE = Rule("amp", ("matmul_share", "contraction_share", "compute_share", "device", "kind"),
            f"f x (1 - 1/s), f = compute-bound contraction share, else the contraction layers' "
            f"share, else forward+backward (>= {MIN_SHARE:g}), s = 1.0..1.6 (CPU), 1.5..3 (CUDA)",
            check, needs=NEEDS,
            edit="wrap the forward and the loss in "
                 "torch.autocast(device_type, dtype=torch.bfloat16)",
            # a model given by name: sweep runs it in bfloat16 (weights and inputs cast)
            sweep="--dtypes float32,bfloat16", explain=explain)
