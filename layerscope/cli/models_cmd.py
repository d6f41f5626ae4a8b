"""layerscope models: the built-in model names, by group."""
from __future__ import annotations

# what each group's heading adds to its name
_NOTES = {"LLM": " (built on the meta device; input: token ids 1x2048 int64, gpt2 1x1024; "
                 "--seq-len changes it)"}


def register(sub) -> None:
    p = sub.add_parser("models", help="list the built-in model names")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.frontends import zoo

    for group, names in zoo.groups().items():
        print(f"{group}{_NOTES.get(group, '')}:")
        print("\n".join(f"  {n}" for n in names))
    return 0
