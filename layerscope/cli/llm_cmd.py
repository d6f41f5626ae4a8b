"""layerscope llm MODEL: parameters, weight bytes, prefill/decode cost, KV cache and a roofline
bound of a decoder-only language model (a preset or hf:config.json), without its weights.
Every option is a field of ``analysis.llm_settings.LLMSettings``."""
from __future__ import annotations

from layerscope.analysis.llm_settings import LLMSettings
from layerscope.cli.common import add_all_settings, add_output, check_outputs, emit, settings_from


def register(sub) -> None:
    p = sub.add_parser("llm", help="LLM inference cost: parameters, prefill/decode FLOPs, KV "
                                   "cache, tokens/s bound on a GPU")
    add_all_settings(p, LLMSettings)
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.llm import llm

    s = settings_from(LLMSettings, args)
    check_outputs(args)
    emit(llm(settings=s), args)
    return 0
