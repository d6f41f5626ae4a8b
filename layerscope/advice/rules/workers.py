"""Loader workers (and pinned memory on CUDA) for data stalls: with workers the next batches
are prepared while the step computes, so the data phase leaves the critical path."""
from layerscope.advice.rule import Finding, Outcome, Rule, amdahl_why, moved, pick, rest_ms

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
    if facts.get("data_verdict") is not None and not stalled:
        # the data loader measured that the loading keeps up (or that another knob removes
        # the wait): workers would add their hand-off and hide nothing
        return None
    cores = facts.get("cores") or 1
    # the data loader's own count when it measured one (the workers that keep up with the
    # step: work per batch / the loop's time per batch, rounded up), else one per core; a
    # worker that computes needs a core of its own, one that waits (I/O, sleeps) does not
    suggested = facts.get("data_suggested_workers") if stalled else None
    cap = MAX_WORKERS if facts.get("data_verdict") == "io_bound" else min(MAX_WORKERS, cores)
    new = max(1, min(cap, suggested or cores))
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
               + f") ({'run' if facts.get('script') else 'train'} --num-workers {new}"
               + (" --pin-memory" if pin else "") + ")",
        low=low, high=high, derivation=text, variant=variant,
        facts=pick(facts, "data_share", "h2d_share", "workers", "pin_memory", "cores",
                   "data_verdict"))


def explain(o: Outcome) -> str:
    """Why the measured gain left d x 0.5 .. d: the other phases shrank too (the loading no
    longer competes with the step in the main process), grew (the workers compete for the
    cores the step uses), or the workers did not keep up (the loop still waits for data)."""
    if not o.base_ms or not o.new_ms:
        return amdahl_why(o)
    share = o.facts.get("data_share") or 0.0
    parts = (o.variant or "").split("+")
    workers = next((int(p.split("=", 1)[1]) for p in parts if p.startswith("workers=")), 0)
    data_b, data_n = o.base_ms.get("data", 0.0), o.new_ms.get("data", 0.0)
    rest_b, rest_n = rest_ms(o.base_ms, "data"), rest_ms(o.new_ms, "data")
    head = (f"the data share was d = {share:.3f} (data {data_b:.1f} ms of "
            f"{data_b + rest_b:.1f} ms per step)")
    others = moved(o, leave_out=("data",))
    if o.gain > o.high:
        return (f"{head}; the measured gain {o.gain:.3f} exceeded it because the step's other "
                f"phases also shrank, {rest_b:.1f} -> {rest_n:.1f} ms per step ({others}): "
                "the main process no longer loads batches, so the CPU contention the loading "
                "caused is gone")
    if rest_n - rest_b > data_n:
        cores, threads = o.facts.get("cores") or 1, o.facts.get("threads") or 1
        return (f"{head}; the measured gain {o.gain:.3f} fell short because the {workers} "
                f"worker(s) competed for the cores the step used ({workers} workers and "
                f"{threads} torch thread(s) on {cores} core(s)): the other phases grew "
                f"{rest_b:.1f} -> {rest_n:.1f} ms per step ({others}); fewer torch threads "
                f"leave the workers their cores (run --threads {max(1, cores - workers)})")
    work = o.facts.get("data_work_per_batch_s")
    if work and workers and work * 1e3 / workers < rest_n and data_n >= data_b:
        # the workers make batches faster than the step uses them, yet the wait grew: what
        # the loop waits for is the hand-off from the worker processes, not the loading
        return (f"{head}; the measured gain {o.gain:.3f} fell short because handing the "
                f"batches over from {workers} worker process(es) cost more than the loading it "
                f"hid: they make a batch every {work * 1e3 / workers:.2f} ms, faster than the "
                f"step's {rest_n:.1f} ms, yet the loop waited {data_b:.1f} -> {data_n:.1f} ms "
                "per step for data (loading this cheap is best left in the main process)")
    supply = (f"; {workers} worker(s) making a batch in {work * 1e3:.1f} ms each deliver one "
              f"every {work * 1e3 / workers:.1f} ms against the step's {rest_n:.1f} ms"
              if work and workers else "")
    return (f"{head}; the measured gain {o.gain:.3f} fell short because the workers did not "
            f"keep up: the loop still waited {data_n:.1f} ms per step for data{supply}")


RULE = Rule("workers", ("data_share (or the data-loader verdict and its worker count)",
                        "workers", "pin_memory", "h2d_share", "cores"),
            "d x 0.5 .. d x 1 (d = data share >= 0.05; + h/2 for pinning on CUDA)", check,
            explain=explain)
