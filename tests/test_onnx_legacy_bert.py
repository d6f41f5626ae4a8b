"""A BERT exported the common way (``torch.onnx.export(dynamo=False)``, the legacy exporter):
its position ids and attention mask are shape computations (Shape -> Gather -> Unsqueeze ->
Concat -> Slice, Reshape with computed shapes) that onnx's shape inference does not fold, which
left every node after them without shapes and every MatMul uncounted. onnxruntime's symbolic
shape inference folds them given the bound input shapes."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import layerscope  # noqa: E402
from layerscope.frontends.onnx_model import load_onnx  # noqa: E402

S, H, I, HEADS, LAYERS = 8, 32, 64, 2, 2  # noqa: E741
# per layer: Q, K, V, O projections 4*S*H*H = 32,768; FFN 2*S*H*I = 32,768; attention scores
# and values 2*heads*S*S*(H/heads) = 4,096; 69,632 per layer
MATMUL_MACS = LAYERS * (4 * S * H * H + 2 * S * H * I + 2 * HEADS * S * S * (H // HEADS))
assert MATMUL_MACS == 139_264


class _Encoder(torch.nn.Module):
    """BertModel's last hidden state (the pooler is not exported)."""

    def __init__(self):
        super().__init__()
        config = transformers.BertConfig(hidden_size=H, num_hidden_layers=LAYERS,
                                         num_attention_heads=HEADS, intermediate_size=I,
                                         vocab_size=100)
        self.bert = transformers.BertModel(config).eval()

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    torch.manual_seed(0)
    model = _Encoder().eval()
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    ids = torch.zeros(1, S, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, torch.ones_like(ids)), str(path), dynamo=False,
                          input_names=["input_ids", "attention_mask"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "attention_mask": {0: "batch", 1: "seq"}})
    return model, str(path)


BOUND = [f"input_ids=1x{S}:int64", f"attention_mask=1x{S}:int64"]


def test_every_node_has_shapes_and_every_matmul_is_counted(bert):
    _, path = bert
    g = load_onnx(path, BOUND)
    assert any(n.op_type == "Slice" for n in g.nodes)  # the chain that stopped onnx's inference
    r = layerscope.analyze(path, inputs=BOUND)
    matmuls = [row for row in r.layers if row.type == "MatMul"]
    assert len(matmuls) == LAYERS * 8  # Q, K, V, O, FFN in and out, scores, values
    assert sum(row.macs for row in matmuls) == MATMUL_MACS
    assert r.totals.macs == MATMUL_MACS
    assert r.op_coverage == 1.0 and r.uncounted_ops == []
    assert not any("could not determine" in n for n in r.notes)


def test_same_matmul_macs_as_the_pytorch_analysis(bert):
    model, path = bert
    ids = torch.zeros(1, S, dtype=torch.long)
    torch_report = layerscope.analyze(model, inputs=(ids, torch.ones_like(ids)))
    # PyTorch also runs the pooler (Linear on the first token, H*H MACs) that the export prunes
    pooler = sum(row.macs for row in torch_report.layers if row.name.startswith("bert.pooler"))
    assert pooler == H * H
    assert torch_report.totals.macs - pooler == MATMUL_MACS
    assert layerscope.analyze(path, inputs=BOUND).totals.macs == MATMUL_MACS


def test_the_bound_sequence_length_is_used(bert):
    _, path = bert
    s = 16
    r = layerscope.analyze(path, inputs=[f"input_ids=1x{s}:int64",
                                         f"attention_mask=1x{s}:int64"])
    per_layer = 4 * s * H * H + 2 * s * H * I + 2 * HEADS * s * s * (H // HEADS)
    assert r.totals.macs == LAYERS * per_layer


def test_shapes_left_unknown_write_no_file(tmp_path, monkeypatch):
    """A custom op with no schema: its output stays unknown after both inferences, the nodes
    are uncounted, and nothing is written in the working directory (onnxruntime's
    infer_shapes saves sym_shape_infer_temp.onnx there when it cannot infer every shape)."""
    from onnx import helper

    from tests.onnx_graphs import model, save, tensor

    nodes = [helper.make_node("Mystery", ["x"], ["c"], name="custom", domain="acme"),
             helper.make_node("Relu", ["c"], ["y"], name="r")]
    m = model(nodes, [tensor("x", [2, 5])], [tensor("y", [2, 5])], extra_opsets=[("acme", 1)])
    path = save(m, tmp_path)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    r = layerscope.analyze(path)
    assert r.op_coverage == 0.0 and r.totals.layer_output_bytes is None
    assert ("1 node(s) have tensors whose shapes shape inference could not determine "
            "('r'); they are uncounted") in r.notes
    assert list(work.iterdir()) == []
