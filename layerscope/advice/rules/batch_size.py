"""A larger batch for a launch-bound GPU: layers far below their roof cost a fixed launch time
whatever the batch, so doubling the batch nearly halves their time per sample."""
from layerscope.advice.rule import STEADY, Finding, Rule, need

MAX_PCT_OF_ROOF = 0.1  # a layer under 10% of its roof is waiting on launches
MIN_SHARE = 0.2


def _share(facts) -> tuple[float | None, str]:
    share = facts.get("launch_bound_share")
    if share is not None:
        return share, f"layers under {MAX_PCT_OF_ROOF:.0%} of their roof"
    mfu = facts.get("mfu")
    if mfu is not None and mfu < MAX_PCT_OF_ROOF:
        # a training step at a low MFU: its forward+backward bounds the launch-bound part
        return facts.get("compute_share"), f"forward+backward at MFU {mfu:.1%}"
    return None, ""


NEEDS = (
    need("a CUDA device", "device", lambda f: f.get("device") == "cuda"),
    need(f"launch-bound share l >= {MIN_SHARE:g}: layers under 10% of their roof, or "
         "forward+backward at an MFU under 10%", ("launch_bound_share", "mfu", "compute_share"),
         lambda f: (_share(f)[0] or 0.0) >= MIN_SHARE),
    STEADY,
)


def check(facts) -> Finding | None:
    share, what = _share(facts)
    if share is None:
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
                 f"{batch},{batch * 2},{batch * 4}", "--device", "cuda"))


RULE = Rule("batch-size", ("launch_bound_share", "mfu", "compute_share", "batch_size"),
            "0 .. l / 2, l = share of the time in layers under 10% of their roof (CUDA)", check,
            needs=NEEDS)
