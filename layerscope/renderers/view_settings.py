"""Which table of a static report ``layerscope analyze`` shows, declared once
(``AnalyzeViewSettings``): how the report is drawn, not what the analysis computes, so these
are options of the command line only (the Python API returns the whole report; its views are
``renderers.onnx_views``). Kept free of the drawing libraries: the CLI builds its parser from
it at start-up."""
from __future__ import annotations

import dataclasses

from layerscope.core.errors import UserError
from layerscope.core.settings import Settings, option

VIEWS = ("layers", "ops", "attributes", "bandwidth", "memory")
# Views whose rows --op-type and --skip-trivial select (the others show the whole report).
FILTERED_VIEWS = ("ops", "attributes", "bandwidth")


@dataclasses.dataclass(kw_only=True, eq=False)
class AnalyzeViewSettings(Settings):
    """``analyze --view``, ``--op-type``, ``--skip-trivial``: a table of the report and its
    rows (nothing here is saved: JSON and CSV output stay the full report)."""

    view: str = option("layers", "table to show: layers (default), ops (op histogram), "
                                 "attributes (per node), bandwidth (bytes per node, sorted), "
                                 "memory (activation sum, live-set peak, arena); JSON and CSV "
                                 "output stay the full report", choices=VIEWS, record=False)
    op_type: str | None = option(None, "views ops, attributes and bandwidth: only nodes whose "
                                       "op type fully matches, e.g. 'Conv|Gemm'",
                                 metavar="REGEX", record=False)
    skip_trivial: bool = option(False, "views ops, attributes and bandwidth: leave out Constant "
                                       "and Identity nodes (no arithmetic; exporters write many)",
                                record=False)

    @property
    def selecting(self) -> bool:
        """Whether only some rows are shown."""
        return self.op_type is not None or self.skip_trivial

    def check(self) -> None:
        if self.selecting and self.view not in FILTERED_VIEWS:
            raise UserError(f"op_type and skip_trivial select the rows of the views "
                            f"{', '.join(FILTERED_VIEWS)} (view {self.view} shows the whole "
                            "report)", arguments=("op_type", "skip_trivial", "view"))
