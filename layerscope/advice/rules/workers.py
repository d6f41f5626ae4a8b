"""Loader workers (and pinned memory on CUDA) for data stalls: with workers the next batches
are prepared while the step computes, so the data phase leaves the critical path."""
from layerscope.advice.rule import Finding, Rule, pick

MIN_SHARE = 0.05
MAX_WORKERS = 4
# data-loader verdicts (the first finding of a run's data_loading) that more workers remove
STALLED = ("cpu_bound", "io_bound", "too_few_workers")


def check(facts) -> Finding | None:
    share = facts.get("data_share")
    workers = facts.get("workers") or 0
    # the data loader's verdict says the loop waits on too few workers or on the transforms
    stalled = facts.get("data_verdict") in STALLED
    if share is None or (share < MIN_SHARE and not stalled):
        return None
    cores = facts.get("cores") or 1
    new = min(MAX_WORKERS, max(1, cores))
    if new <= workers:
        return None
    variant = f"workers={new}"
    h2d = facts.get("h2d_share") or 0.0
    pin = facts.get("device") == "cuda" and not facts.get("pin_memory") and h2d >= MIN_SHARE
    if pin:
        variant += "+pin-memory"
    hidden = share + (h2d / 2 if pin else 0.0)
    low, high = hidden / 2, hidden
    text = (f"data share d = {share:.3f}" + (f", host-to-device h = {h2d:.3f} (pinning hides "
                                            f"about half)" if pin else "")
            + f"; workers hide between half and all of it: gain = d{' + h/2' if pin else ''}"
            f" x 0.5 .. 1 = {low:.3f} .. {high:.3f}")
    return Finding(
        cause=f"{share:.0%} of the step waits for data with {workers} loader worker(s)",
        change=f"DataLoader(num_workers={new}" + (", pin_memory=True" if pin else "")
               + f") (train --num-workers {new}" + (" --pin-memory" if pin else "") + ")",
        low=low, high=high, derivation=text, variant=variant,
        facts=pick(facts, "data_share", "h2d_share", "workers", "pin_memory", "cores",
                   "data_verdict"))


RULE = Rule("workers", ("data_share (or the data-loader verdict)", "workers", "pin_memory",
                        "h2d_share", "cores"),
            "d x 0.5 .. d x 1 (d = data share >= 0.05; + h/2 for pinning on CUDA)", check)
