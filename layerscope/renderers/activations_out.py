"""Captured activations as an .npz file (their table: layerscope/views/activations.py)."""
from __future__ import annotations


def write_npz(capture, path: str) -> None:
    """Through core.io: atomic for files, written through for devices and FIFOs, ``-`` is
    standard output."""
    import numpy as np

    from layerscope.core.io import write_file

    write_file(path, lambda f: np.savez(f, **capture.arrays))
