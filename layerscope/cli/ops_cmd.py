"""layerscope ops MODEL: torch.profiler's operator table and a trace with module ranges.
Every option is a field of ``analysis.op_profile.OpsSettings``."""
from __future__ import annotations

from layerscope.analysis.op_profile import OpsSettings
from layerscope.cli.common import add_all_settings, add_output, emit, settings_from


def register(sub) -> None:
    p = sub.add_parser("ops", help="per-operator time (torch.profiler) and a Chrome/Perfetto trace")
    add_all_settings(p, OpsSettings)
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.op_profile import ops

    emit(ops(settings=settings_from(OpsSettings, args)), args)
    return 0
