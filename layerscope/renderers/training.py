"""Kept for callers of the old names: the training layouts live in layerscope/views/training.py."""
from layerscope.views.training import (breakdown_table, epoch_line, render_ablation,  # noqa: F401
                                       render_loop, render_train)
