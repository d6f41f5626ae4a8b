"""Kept for callers of the old names: the training layouts live in layerscope/views/training.py."""
from layerscope.views.training import (  # noqa: F401
                                       breakdown_table,
                                       epoch_line,
                                       render_ablation,
                                       render_loop,
                                       render_train,
)
