"""Fewer threads on an oversubscribed CPU: OpenMP threads wait for the slowest at every
parallel region when other work holds the cores, which gives the slow tail of the step times;
with no more threads than idle cores the steps come back to the fast ones."""
from layerscope.advice.rule import Finding, Outcome, Rule, amdahl_why, pick


def check(facts) -> Finding | None:
    if not facts.get("oversubscribed") or facts.get("device") == "cuda":
        return None
    threads = facts.get("threads") or 1
    free = max(1, (facts.get("cpus_available") or 1) - (facts.get("busy_cpus") or 0))
    if free >= threads:
        return None
    p10, median = facts.get("step_p10_s"), facts.get("step_median_s")
    if not p10 or not median or p10 >= median:
        return None
    high = 1 - p10 / median
    text = (f"{threads} thread(s), {free} idle CPU(s); the steps the waits spared took p10 = "
            f"{p10 * 1e3:.2f} ms against the median {median * 1e3:.2f} ms: gain = 0 .. "
            f"1 - p10/median = {high:.3f}")
    return Finding(
        cause=f"{threads} thread(s) on {facts.get('cpus_available')} CPU(s) with "
              f"{facts.get('busy_cpus')} kept busy by other work (oversubscribed)",
        change=f"torch.set_num_threads({free}) (--threads {free})",
        low=0.0, high=high, derivation=text, threads=free,
        facts=pick(facts, "threads", "cpus_available", "busy_cpus", "step_p10_s",
                   "step_median_s"))


def explain(o: Outcome) -> str:
    """Why the gain left 0 .. 1 - p10/median: the bound assumes the fastest tenth of the steps
    ran without waiting for a busy core; above it, even those steps waited (every parallel
    region waits for its slowest thread), so fewer threads saved more than the bound."""
    threads, free = o.facts.get("threads"), o.threads
    if o.gain > o.high:
        return (f"the measured gain {o.gain:.3f} is above 1 - p10/median = {o.high:.3f}: the "
                f"bound takes the fastest tenth of the steps as free of waits, but with "
                f"{threads} thread(s) on a machine whose other work held "
                f"{o.facts.get('busy_cpus')} CPU(s), even those steps waited for a busy core; "
                f"with {free} thread(s) none did")
    return amdahl_why(o)


RULE = Rule("threads", ("oversubscribed", "threads", "cpus_available", "busy_cpus",
                        "step_p10_s", "step_median_s"),
            "0 .. 1 - p10/median of the step (or run) times", check, explain=explain)
