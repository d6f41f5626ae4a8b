"""Smaller gradient buckets for exposed communication: DDP all-reduces a bucket as soon as its
last gradient is ready, so only the last bucket's all-reduce runs after backward; more, smaller
buckets leave a smaller tail exposed."""
from layerscope.advice.rule import Finding, Rule, need

MIN_SHARE = 0.05
SPLIT = 4  # buckets this many times smaller (bucket_cap_mb 25 -> 6)

NEEDS = (
    need(f"exposed communication share e >= {MIN_SHARE:g} (measured)", "exposed_share",
         lambda f: (f.get("exposed_share") or 0.0) >= MIN_SHARE),
)


def check(facts) -> Finding | None:
    share = facts["exposed_share"]
    buckets = facts.get("buckets") or 1
    high = share * (1 - 1 / SPLIT)
    text = (f"exposed communication share e = {share:.3f} in {buckets} bucket(s); with buckets "
            f"{SPLIT}x smaller about 1/{SPLIT} of it stays exposed: gain = e x (1 - 1/{SPLIT}) = "
            f"{high:.3f} at best, 0 when the all-reduce is latency-bound: 0 .. {high:.3f}")
    world = facts.get("world_size") or 2
    return Finding(
        cause=f"{share:.0%} of the step is communication nothing overlaps, in {buckets} "
              f"bucket(s) of {(facts.get('bytes_per_step') or 0) / buckets / 2**20:.1f} MiB",
        change=f"DistributedDataParallel(bucket_cap_mb=<about 1/{SPLIT} of a bucket's size>)",
        low=0.0, high=high, derivation=text,
        command=("layerscope", "scaling", str(facts.get("subject")), "--nproc", str(world)),
        after="(after the change)")


RULE = Rule("bucket-size", ("exposed_share", "buckets", "bytes_per_step", "world_size"),
            "0 .. e x (1 - 1/4), e = exposed communication share (>= 0.05)", check, needs=NEEDS)
