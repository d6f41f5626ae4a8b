"""The advice rules: one module each (a ``RULE`` declaration), registered below in the order
they are checked. A new rule is one module plus one line here."""
from layerscope.advice.rule import Rule
from layerscope.advice.rules import (
    amp,
    batch_size,
    bucket_size,
    channels_last,
    compile,
    recompute,
    threads,
    workers,
)

RULES: list[Rule] = []


def register(rule: Rule) -> None:
    if any(r.name == rule.name for r in RULES):
        raise ValueError(f"an advice rule named {rule.name!r} is registered already")
    RULES.append(rule)


register(workers.RULE)
register(channels_last.RULE)
register(amp.RULE)
register(compile.RULE)
register(threads.RULE)
register(batch_size.RULE)
register(bucket_size.RULE)
register(recompute.RULE)
