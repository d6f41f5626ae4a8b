"""layerscope plan MODEL --gpus N: per-device training memory (weights, gradients, Adam states,
measured activations) for each sharding strategy, and whether it fits the GPU. Every option is
a field of ``analysis.llm_settings.PlanSettings``."""
from __future__ import annotations

from layerscope.analysis.llm_settings import PlanSettings
from layerscope.cli.common import add_all_settings, add_output, check_outputs, emit, settings_from


def register(sub) -> None:
    p = sub.add_parser("plan", help="LLM training memory per GPU under DDP / ZeRO / FSDP, "
                                    "tensor and pipeline parallelism")
    add_all_settings(p, PlanSettings)
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.plan import plan

    s = settings_from(PlanSettings, args)
    check_outputs(args)
    emit(plan(settings=s), args)
    return 0
