"""Loader workers (and pinned memory on CUDA) for data stalls: with workers the next batches
are prepared while the step computes, so the data phase leaves the critical path.

It needs a training loader (one whose batches fed steps with gradients on: a validation or
test loader is not one) that fed more than a few batches: over a handful, the wait is mostly
the first batch's (iter(), worker start-up), which more workers do not remove."""
from layerscope.advice.rule import Finding, Outcome, Rule, amdahl_why, moved, need, rest_ms

MIN_SHARE = 0.05
MAX_WORKERS = 4
MIN_BATCHES = 8  # a training loader that fed fewer is judged on its start-up alone
# data-loader verdicts (the first finding of a run's data_loading) that more workers remove
STALLED = ("cpu_bound", "io_bound", "too_few_workers")


def _waits(facts) -> bool:
    """The step waits for data: a data share of 5% or more, or the data loader's verdict
    names a stall that more workers remove."""
    share = facts.get("data_share")
    return share is not None and (share >= MIN_SHARE or facts.get("data_verdict") in STALLED)


def _fed(facts) -> bool:
    batches = facts.get("loader_batches")
    return bool(facts.get("training_loaders")) and batches is not None \
        and batches >= MIN_BATCHES


def _not_fed(facts) -> str:
    if facts.get("training_loaders") is None:
        return ("the result does not record its data loaders (no data_loading section): "
                "which loader fed the training steps, and for how many batches, is unknown")
    if not facts.get("training_loaders"):
        return ("no data loader fed the training steps: the loaders measured gave their "
                "batches with gradients off (validation or test loaders)")
    batches = facts.get("loader_batches")
    if batches is None:
        return "the result does not record how many batches the training loader fed"
    return (f"the training loader fed {batches} batch(es), fewer than {MIN_BATCHES}: its wait "
            "is mostly the first batch's (iter(), worker start-up), which more workers do not "
            "remove; measure more steps")


def _more(facts) -> int:
    """The worker count to test: the data loader's own count when it measured one (the
    workers that keep up with the step: work per batch / the loop's time per batch, rounded
    up), else one per core; a worker that computes needs a core of its own, one that waits
    (I/O, sleeps) does not."""
    cores = facts.get("cores") or 1
    stalled = facts.get("data_verdict") in STALLED
    suggested = facts.get("data_suggested_workers") if stalled else None
    cap = MAX_WORKERS if facts.get("data_verdict") == "io_bound" else min(MAX_WORKERS, cores)
    return max(1, min(cap, suggested or cores))


NEEDS = (
    need(f"the step waits for data: data share >= {MIN_SHARE:g}, or the data loader's verdict "
         "names a stall more workers remove", ("data_share", "data_verdict"), _waits),
    need("the data loader's verdict, where it measured one, is a stall (it did not find that "
         "the loading keeps up)", "data_verdict",
         lambda f: f.get("data_verdict") is None or f["data_verdict"] in STALLED),
    need(f"a training loader (gradients on) that fed >= {MIN_BATCHES} batches",
         ("training_loaders", "loader_batches"), _fed, _not_fed, judge=True),
    need("more workers than the loader has", ("workers", "cores", "data_suggested_workers"),
         lambda f: _more(f) > (f.get("workers") or 0)),
)


def check(facts) -> Finding | None:
    share = facts["data_share"]
    workers = facts.get("workers") or 0
    new = _more(facts)
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
        low=low, high=high, derivation=text, variant=variant)


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


RULE = Rule("workers", ("data_share", "h2d_share", "pin_memory", "device"),
            "d x 0.5 .. d x 1 (d = data share >= 0.05; + h/2 for pinning on CUDA)", check,
            needs=NEEDS, explain=explain)
