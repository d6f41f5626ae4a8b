"""Fewer threads on an oversubscribed CPU: OpenMP threads wait for the slowest at every
parallel region when other work holds the cores, which gives the slow tail of the step times;
with no more threads than idle cores the steps come back to the fast ones.

The bound is Amdahl's law on measured shares: only the time in the model's ops (the parallel
phases: forward, loss, backward, optimizer; a profile's or sweep's forward) changes, by at
most the spread the steps showed, s = median / p10: gain = f x (1 - p10/median). The rest of
the step (data, the Python between the ops, communication) stays, so it is never the whole
step. A p10 needs enough steps: of fewer than ``MIN_SAMPLES`` it is their fastest one, a
moment the machine happened to be quiet."""
from layerscope.advice.rule import Finding, Outcome, Rule, amdahl_why, need

MIN_SAMPLES = 10


def _idle(facts) -> int:
    return max(1, (facts.get("cpus_available") or 1) - (facts.get("busy_cpus") or 0))


def _spread(facts) -> bool:
    p10, median = facts.get("step_p10_s"), facts.get("step_median_s")
    return bool(p10 and median and p10 < median)


NEEDS = (
    need("a CPU run", "device", lambda f: f.get("device") != "cuda"),
    need("oversubscribed (the noise section: threads + busy CPUs > CPUs)", "oversubscribed",
         lambda f: bool(f.get("oversubscribed"))),
    need("more threads than idle CPUs", ("threads", "cpus_available", "busy_cpus"),
         lambda f: (f.get("threads") or 1) > _idle(f)),
    need("a spread of the step times (p10 < median)", ("step_p10_s", "step_median_s"),
         _spread),
    need(f">= {MIN_SAMPLES} timed steps (or runs) for the p10", "step_samples",
         lambda f: (f.get("step_samples") or 0) >= MIN_SAMPLES,
         lambda f: f"{f.get('step_samples') or 'an unknown number of'} timed step(s) or "
                   f"run(s), fewer than {MIN_SAMPLES}: their p10 is their fastest one, a "
                   "moment the machine was quiet, not the steps fewer threads would give "
                   "(measure more runs)", judge=True),
    need("the share of the step in the model's ops (the parallel phases) measured",
         "parallel_share", lambda f: bool(f.get("parallel_share")),
         "the result does not split the step into phases, so the share of it that fewer "
         "threads would change is unknown", judge=True),
)


def check(facts) -> Finding | None:
    threads, free = facts.get("threads") or 1, _idle(facts)
    p10, median = facts["step_p10_s"], facts["step_median_s"]
    f = min(1.0, facts["parallel_share"])
    high = f * (1 - p10 / median)
    text = (f"{threads} thread(s), {free} idle CPU(s); the share of the step in the model's "
            f"ops f = {f:.3f}; the steps the waits spared took p10 = {p10 * 1e3:.2f} ms against "
            f"the median {median * 1e3:.2f} ms, so those ops get at most s = median/p10 = "
            f"{median / p10:.2f}x faster: gain = 0 .. f x (1 - p10/median) = {high:.3f}")
    return Finding(
        cause=f"{threads} thread(s) on {facts.get('cpus_available')} CPU(s) with "
              f"{facts.get('busy_cpus')} kept busy by other work (oversubscribed)",
        change=f"torch.set_num_threads({free}) (--threads {free})",
        low=0.0, high=high, derivation=text, threads=free)


def explain(o: Outcome) -> str:
    """Why the gain left 0 .. f x (1 - p10/median): the bound assumes the fastest tenth of the
    steps ran without waiting for a busy core; above it, even those steps waited (every
    parallel region waits for its slowest thread), so fewer threads saved more than the
    bound."""
    threads, free = o.facts.get("threads"), o.threads
    if o.gain > o.high:
        return (f"the measured gain {o.gain:.3f} is above f x (1 - p10/median) = {o.high:.3f}: "
                "the bound takes the fastest tenth of the steps as free of waits, but with "
                f"{threads} thread(s) on a machine whose other work held "
                f"{o.facts.get('busy_cpus')} CPU(s), even those steps waited for a busy core; "
                f"with {free} thread(s) none did")
    return amdahl_why(o)


RULE = Rule("threads", ("parallel_share", "step_p10_s", "step_median_s", "step_samples"),
            "0 .. f x (1 - p10/median), f = the share of the step in the model's ops, p10 and "
            "median of the step (or run) times", check, needs=NEEDS, explain=explain)
