"""Fewer threads on an oversubscribed CPU: OpenMP threads wait for the slowest at every
parallel region when other work holds the cores, which gives the slow tail of the step times;
with no more threads than idle cores the steps come back to the fast ones."""
from layerscope.advice.rule import Finding, Rule, pick


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


RULE = Rule("threads", ("oversubscribed", "threads", "cpus_available", "busy_cpus",
                        "step_p10_s", "step_median_s"),
            "0 .. 1 - p10/median of the step (or run) times", check)
