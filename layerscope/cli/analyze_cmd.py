"""layerscope analyze MODEL: static cost per layer (PyTorch modules) or per node (ONNX). Every
option is a field of ``analysis.analyze.AnalyzeSettings``, or of
``renderers.view_settings.AnalyzeViewSettings`` (which table is shown)."""
from __future__ import annotations

from layerscope.analysis.analyze import AnalyzeSettings
from layerscope.cli.common import (
    add_all_settings,
    add_output,
    emit,
    output,
    settings_from,
    write_report_files,
)
from layerscope.renderers.view_settings import AnalyzeViewSettings


def register(sub) -> None:
    p = sub.add_parser("analyze", help="parameters, memory, MACs/FLOPs and bytes per layer")
    add_all_settings(p, AnalyzeSettings)
    add_all_settings(p, AnalyzeViewSettings)
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.analyze import analyze
    from layerscope.core.errors import UserError
    from layerscope.renderers import pick_format

    view = settings_from(AnalyzeViewSettings, args)
    # an ONNX file is analysed without loading torch (analyze routes it)
    report = analyze(settings=settings_from(AnalyzeSettings, args))
    if view.view == "layers" or pick_format(args.format, args.output) != "table":
        if view.selecting:
            raise UserError("--op-type and --skip-trivial select table rows; JSON, CSV, HTML "
                            "and PNG output stay the full report")
        emit(report, args)
        return 0
    from layerscope.renderers.onnx_views import select_rows, to_text

    output(to_text(select_rows(report, view.op_type, view.skip_trivial), view.view,
                   width=args.width or 160), args.output)
    write_report_files(report, args)
    return 0
