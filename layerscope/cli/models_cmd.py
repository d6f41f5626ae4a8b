"""layerscope models: the built-in model names."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("models", help="list the built-in model names")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.frontends import zoo

    print("\n".join(zoo.names()))
    return 0
