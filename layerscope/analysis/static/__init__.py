"""Static cost of a PyTorch module: the capture engine's ``Capture`` (``analysis.capture``)
shaped into layer rows, totals and the ops no handler counted."""
from layerscope.analysis.static.rows import OPTIMIZER_STATE_FACTOR, layer_rows, totals, uncounted

__all__ = ["OPTIMIZER_STATE_FACTOR", "layer_rows", "totals", "uncounted"]
