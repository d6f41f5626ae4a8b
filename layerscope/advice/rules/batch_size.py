"""A larger batch for a launch-bound GPU: layers far below their roof cost a fixed launch time
whatever the batch, so doubling the batch nearly halves their time per sample."""
from layerscope.advice.rule import Finding, Rule, pick

MAX_PCT_OF_ROOF = 0.1  # a layer under 10% of its roof is waiting on launches
MIN_SHARE = 0.2


def check(facts) -> Finding | None:
    share, what = facts.get("launch_bound_share"), (f"layers under {MAX_PCT_OF_ROOF:.0%} "
                                                    "of their roof")
    mfu = facts.get("mfu")
    if share is None and mfu is not None and mfu < MAX_PCT_OF_ROOF:
        # a training step at a low MFU: its forward+backward bounds the launch-bound part
        share, what = facts.get("compute_share"), f"forward+backward at MFU {mfu:.1%}"
    if facts.get("device") != "cuda" or share is None or share < MIN_SHARE:
        return None
    batch = facts.get("batch_size") or 1
    high = share / 2
    text = (f"share of the time in {what} l = {share:.3f}; doubling the batch keeps their "
            f"time per step: per-sample gain = 0 .. l x (1 - 1/2) = {high:.3f}")
    return Finding(
        cause=f"{share:.0%} of the time is in {what} at batch {batch} (launch-bound)",
        change=f"a larger batch ({batch * 2} or more, the learning rate scaled with it)",
        low=0.0, high=high, derivation=text,
        command=("layerscope", "sweep", str(facts.get("subject")), "--batch-sizes",
                 f"{batch},{batch * 2},{batch * 4}", "--device", "cuda"),
        facts=pick(facts, "launch_bound_share", "mfu", "compute_share", "batch_size",
                   "device"))


RULE = Rule("batch-size", ("device", "launch_bound_share (rows under 10% of roof), or "
                           "compute_share at an MFU under 10%", "batch_size"),
            "0 .. l / 2, l = share of the time in layers under 10% of their roof (CUDA)", check)
