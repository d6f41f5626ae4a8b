"""bf16/AMP for matmul-bound layers: contractions that run at the compute roof in float32 get
the bfloat16 roof (tensor cores on GPUs, AMX/AVX512-BF16 on CPUs that have them)."""
from layerscope.advice.rule import Finding, Rule, amdahl_range, pick

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
        change="run them in bfloat16 autocast (train --amp)",
        low=low, high=high, derivation=text, variant="amp",
        facts=pick(facts, "matmul_share", "compute_share", "dtype", "device"))


RULE = Rule("amp", ("matmul_share (compute-bound rows) or compute_share", "dtype", "amp",
                    "device"),
            "f x (1 - 1/s), f = compute-bound contraction share (>= 0.2), s = 1.0..1.6 (CPU), "
            "1.5..3 (CUDA)", check,
            edit="wrap the forward and the loss in "
                 "torch.autocast(device_type, dtype=torch.bfloat16)",
            # a model given by name: sweep runs it in bfloat16 (weights and inputs cast)
            sweep="--dtypes float32,bfloat16")
