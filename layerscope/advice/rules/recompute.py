"""Activation recomputation when memory blocks a larger batch: checkpointing frees most saved
activations for one more forward pass per step; a doubled batch then halves the per-sample cost
of what does not grow with the batch (data, optimizer, other)."""
from layerscope.advice.rule import Finding, Rule, need

MIN_MEMORY = 0.85  # peak / device memory from which a doubled batch does not fit

NEEDS = (
    need(f"peak CUDA memory >= {MIN_MEMORY:.0%} of the device's",
         ("peak_cuda_bytes", "gpu_memory_bytes"),
         lambda f: bool(f.get("peak_cuda_bytes") and f.get("gpu_memory_bytes"))
         and f["peak_cuda_bytes"] / f["gpu_memory_bytes"] >= MIN_MEMORY),
)


def check(facts) -> Finding | None:
    peak, total = facts["peak_cuda_bytes"], facts["gpu_memory_bytes"]
    fwd = facts.get("forward_share") or 0.0
    fixed = facts.get("fixed_share") or 0.0
    low, high = fixed / 2 - fwd, fixed / 2 - fwd / 3
    text = (f"peak {peak / total:.0%} of device memory; batch x2 halves the per-sample cost of "
            f"the fixed share o = {fixed:.3f}; recomputation costs the forward share "
            f"f = {fwd:.3f} (full) .. f/3 (selective): gain = o/2 - f .. o/2 - f/3 = "
            f"{low:.3f} .. {high:.3f}")
    return Finding(
        cause=f"the peak memory is {peak / total:.0%} of the device's: a larger batch "
              "does not fit",
        change="torch.utils.checkpoint on the blocks, then double the batch",
        low=low, high=high, derivation=text,
        command=("layerscope", "plan", str(facts.get("subject")), "--recompute", "full"),
        after="(memory), then train with the doubled batch")


RULE = Rule("recompute", ("forward_share", "fixed_share"),
            "o/2 - f .. o/2 - f/3 (o = fixed share, f = forward share), when peak >= 85% of "
            "device memory", check, needs=NEEDS)
