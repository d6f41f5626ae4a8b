"""The reference counts of docs/definitions.md ("Reference counts"), through the CLI's JSON and
the Python API."""
import json

import pytest

import layerscope
from tests.helpers import run_cli

# (model, MACs, params, weight bytes); weight bytes are fp32 parameter bytes = 4 x params.
REFERENCE = [
    ("alexnet", 714_188_480, 61_100_840, 244_403_360),
    ("googlenet", 1_498_376_192, 6_624_904, 26_499_616),
    ("resnet50", 4_089_184_256, 25_557_032, 4 * 25_557_032),
    ("mobilenet_v2", 300_774_272, 3_504_872, 4 * 3_504_872),
]


@pytest.mark.parametrize("model,macs,params,weight_bytes", REFERENCE, ids=[r[0] for r in REFERENCE])
def test_reference_counts_via_cli_json(model, macs, params, weight_bytes):
    code, out, err = run_cli("analyze", model, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert set(d) >= {"schema_version", "model", "frontend", "inputs", "totals", "layers",
                      "uncounted_ops", "environment"}
    assert d["totals"]["macs"] == macs
    assert d["totals"]["params"] == params
    assert d["totals"]["weight_bytes"] == weight_bytes
    assert d["uncounted_ops"] == [] and d["op_coverage"] == 1.0


def test_vit_b_16_counts_attention_exactly():
    # 12 x (4*197*768^2 + 2*197*3072*768 + 2*197^2*768) + patch 196*768*(3*16*16) + head 768*1000
    truth = 12 * (4 * 197 * 768**2 + 2 * 197 * 3072 * 768 + 2 * 197**2 * 768) \
        + 196 * 768 * 768 + 768 * 1000
    assert truth == 17_563_828_224
    report = layerscope.analyze("vit_b_16")
    assert report.totals.macs == truth
    assert report.totals.params == 86_567_656


def test_googlenet_buffers_are_reported_apart_from_weights():
    # 57 BatchNorm2d layers hold running mean/var (fp32) and num_batches_tracked (int64).
    report = layerscope.analyze("googlenet")
    channels = sum(r.params // 2 for r in report.layers if r.type == "BatchNorm2d")
    bn_layers = sum(1 for r in report.layers if r.type == "BatchNorm2d")
    assert report.totals.buffer_bytes == 2 * 4 * channels + 8 * bn_layers


def test_environment_is_recorded():
    env = layerscope.analyze("mnist-cnn").environment
    assert {"cpu", "cores", "os", "python", "torch", "torchvision", "cuda", "gpu"} <= set(env)
