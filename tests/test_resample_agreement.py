"""F.interpolate costs the same analysed as a module and exported to ONNX (docs/definitions.md).

Rule (layerscope/ops/aten.py, resample_flops): an output element blends taps input elements,
taps = product over the resized axes of 1 (nearest), 2 (linear), 4 (cubic), antialiased
downsampling widening an axis to ceil(taps * in/out); FLOPs = numel(out) * (2*taps - 1), and a
single tap (nearest) is a copy: 0. Expected figures are derived beside each case and both
frontends must reach them.
"""
from __future__ import annotations

import pytest
import torch.nn.functional as F
from torch import nn

import layerscope
from layerscope.analysis.onnx_export import export_onnx

pytestmark = pytest.mark.integration  # every test here starts a process or runs end to end


class Interpolate(nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x):
        return F.interpolate(x, **self.options)


def case(id, shape, flops, exporter="legacy", **options):
    return pytest.param(shape, options, flops, exporter, id=id)


CASES = [
    # nearest: one tap per output element, a copy
    case("nearest-1d-scale", (1, 2, 5), 0, scale_factor=2, mode="nearest"),
    case("nearest-2d-size", (1, 2, 4, 5), 0, size=(7, 3), mode="nearest"),
    case("nearest-3d-scale", (1, 2, 2, 3, 4), 0, scale_factor=2, mode="nearest"),
    # linear 1-D, 5 -> 10: 20 outputs x (2*2 - 1)
    case("linear-scale", (1, 2, 5), 20 * 3, scale_factor=2, mode="linear"),
    # 5 -> 7 with align_corners: 14 outputs x 3
    case("linear-size-align-corners", (1, 2, 5), 14 * 3, size=7, mode="linear",
         align_corners=True),
    # bilinear 4x5 -> 8x10: 2 axes resized, 4 taps: 160 outputs x 7
    case("bilinear-scale", (1, 2, 4, 5), 160 * 7, scale_factor=2, mode="bilinear"),
    case("bilinear-size-align-corners", (1, 2, 4, 5), 2 * 6 * 3 * 7, size=(6, 3),
         mode="bilinear", align_corners=True),
    # only W resized (scale 1 on H): 2 taps, 2*4*10 = 80 outputs x 3
    case("bilinear-one-axis", (1, 2, 4, 5), 80 * 3, scale_factor=(1, 2), mode="bilinear"),
    # bicubic: 4 taps per axis, 16 in all: 2*16 - 1 = 31 per output
    case("bicubic-scale", (1, 2, 4, 5), 160 * 31, scale_factor=2, mode="bicubic"),
    case("bicubic-size-align-corners", (1, 2, 4, 5), 2 * 8 * 8 * 31, size=(8, 8),
         mode="bicubic", align_corners=True),
    # trilinear 3x4x5 -> 6x8x10: 8 taps, 960 outputs x 15
    case("trilinear-scale", (1, 2, 3, 4, 5), 960 * 15, scale_factor=2, mode="trilinear"),
    # 3x4x5 -> 4x4x4: H is unchanged, so 2 axes are resized: 4 taps, 128 outputs x 7
    case("trilinear-size-align-corners", (1, 2, 3, 4, 5), 2 * 64 * 7, size=(4, 4, 4),
         mode="trilinear", align_corners=True),
    # the legacy exporter has no nearest-exact or antialias: the dynamo exporter's graphs
    case("nearest-exact", (1, 2, 4, 5), 0, "dynamo", scale_factor=2, mode="nearest-exact"),
    # 8 -> 4 per axis, antialiased: ceil(2 * 8/4) = 4 taps per axis, 16 in all: 32 x 31
    case("bilinear-antialias-down", (1, 2, 8, 8), 32 * 31, "dynamo", scale_factor=0.5,
         mode="bilinear", antialias=True),
    # 8x8 -> 3x5: ceil(4 * 8/3) = 11 and ceil(4 * 8/5) = 7 taps: 77; 30 outputs x 153
    case("bicubic-antialias-size", (1, 2, 8, 8), 30 * 153, "dynamo", size=(3, 5),
         mode="bicubic", antialias=True),
]


@pytest.mark.parametrize("shape,options,flops,exporter", CASES)
def test_module_and_onnx_agree_on_interpolation(tmp_path, shape, options, flops, exporter):
    module = Interpolate(**options)
    eager = layerscope.analyze(module, [shape])
    path = str(tmp_path / "interpolate.onnx")
    export_onnx(module, path, inputs=[shape], exporter=exporter, verify=False)
    graph = layerscope.analyze(path)
    assert eager.uncounted_ops == [] and graph.uncounted_ops == []
    assert (eager.totals.macs, eager.totals.flops) == (0, flops)
    assert (graph.totals.macs, graph.totals.flops) == (0, flops)


class GridSample(nn.Module):
    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def forward(self, x, grid):
        return F.grid_sample(x, grid, mode=self.mode, align_corners=False)


@pytest.mark.parametrize("mode,flops", [
    pytest.param("bilinear", 2 * 3 * 5 * 7, id="bilinear"),  # 30 outputs x (2*4 - 1)
    pytest.param("bicubic", 2 * 3 * 5 * 31, id="bicubic"),  # 16 taps
])
def test_module_and_onnx_agree_on_grid_sample(tmp_path, mode, flops):
    # x: (1, 2, 4, 4) sampled at a (1, 3, 5, 2) grid -> (1, 2, 3, 5); GridSample needs the
    # dynamo exporter (opset 16+)
    shapes = [(1, 2, 4, 4), (1, 3, 5, 2)]
    module = GridSample(mode)
    path = str(tmp_path / "grid_sample.onnx")
    export_onnx(module, path, inputs=shapes, verify=False)
    for report in (layerscope.analyze(module, shapes), layerscope.analyze(path)):
        assert report.uncounted_ops == []
        assert (report.totals.macs, report.totals.flops) == (0, flops)
