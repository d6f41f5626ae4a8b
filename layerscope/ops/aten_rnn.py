"""Aten cost handlers: recurrent layers.

Conventions (formulas, what a FLOP is): ``layerscope/ops/aten.py``.
"""
from __future__ import annotations

from layerscope.ops.aten_base import register
from layerscope.ops.registry import OpCost, TensorDesc
from layerscope.ops.rules import GATE_FLOPS, GATES

# ---------------------------------------------------------------- recurrent layers
# Per time step and batch element, a layer-direction with weights w_ih: (G*H, I), w_hh: (G*H, H)
# does G*H*I + G*H*H MACs (G = 4 LSTM, 3 GRU, 1 RNN), i.e. numel(w_ih) + numel(w_hh); so a
# whole RNN costs T * B * (sum of its 2-D weight matrices' sizes) MACs, on every path.
# Gate FLOPs per hidden unit and step (GATES, GATE_FLOPS): ops/rules.py (shared with onnx.py).
CUDNN_MODES = {0: "rnn", 1: "rnn", 2: "lstm", 3: "gru"}


def _rnn_cost(steps: int, weights: list[TensorDesc], kind: str, has_biases: bool) -> OpCost:
    matrices = [w for w in weights if isinstance(w, TensorDesc) and len(w.shape) == 2]
    macs = steps * sum(w.numel for w in matrices)
    gates = GATES[kind]
    # every w_ih (first of each layer-direction's pair) has G*H rows
    hidden_rows = sum(w.shape[0] for w in matrices[::2]) if matrices else 0
    hidden_units = hidden_rows // gates
    elementwise = steps * hidden_units * GATE_FLOPS[kind]
    bias = steps * 2 * hidden_rows if has_biases else 0
    return OpCost(macs=macs, flops=2 * macs + elementwise + bias)


def _steps(x: TensorDesc, batch_first: bool) -> int:
    # (T, B, I) or (B, T, I) or unbatched (T, I): time steps x batch
    return x.shape[0] * x.shape[1] if len(x.shape) == 3 else x.shape[0]


def aten_rnn(kind: str):
    def handler(args, kwargs, out) -> OpCost:
        # lstm.input(x: (T, B, I), hx[], params[], has_biases, num_layers, dropout, train, bidir,
        # batch_first); gru/rnn_*.input(x, hx, params[], has_biases, ...)
        return _rnn_cost(_steps(args[0], bool(args[8])), list(args[2]), kind, bool(args[3]))

    handler.__name__ = f"{kind}_layer"
    return handler


def aten_rnn_packed(kind: str):
    def handler(args, kwargs, out) -> OpCost:
        # lstm.data(data: (sum of batch sizes, I), batch_sizes, hx[], params[], has_biases, ...);
        # gru/rnn_*.data(data, batch_sizes, hx, params[], has_biases, ...): every packed row is
        # one (time step, sequence) pair
        return _rnn_cost(args[0].shape[0], list(args[3]), kind, bool(args[4]))

    handler.__name__ = f"{kind}_packed_layer"
    return handler


def mkldnn_rnn_layer(args, kwargs, out) -> OpCost:
    # mkldnn_rnn_layer(x: (T, B, I), w_ih: (G*H, I), w_hh: (G*H, H), b_ih, b_hh, hx, cx, reverse,
    # batch_sizes, mode, hidden_size, num_layers, has_biases, bidirectional, batch_first, train)
    kind = CUDNN_MODES.get(int(args[9]), "lstm")
    return _rnn_cost(_steps(args[0], bool(args[14])), [args[1], args[2]], kind, bool(args[12]))


def mkldnn_rnn_layer_backward(args, kwargs, out) -> OpCost:
    # (x, w_ih, w_hh, b_ih, b_hh, hx, cx, output, hy, cy, grad_out, grad_hy, grad_cy, reverse,
    # mode, hidden_size, num_layers, has_biases, train, bidirectional, batch_sizes, batch_first, ws)
    # Each projection's backward is a data-gradient and a weight-gradient product: 2 x forward MACs.
    kind = CUDNN_MODES.get(int(args[14]), "lstm")
    fwd = _rnn_cost(_steps(args[0], bool(args[21])), [args[1], args[2]], kind, bool(args[17]))
    return OpCost(macs=2 * fwd.macs, flops=2 * fwd.flops)


def cudnn_rnn(args, kwargs, out) -> OpCost:
    # _cudnn_rnn(x: (T, B, I), weights[], weight_stride0, weight_buf, hx, cx, mode, hidden, proj,
    # num_layers, batch_first, dropout, train, bidirectional, batch_sizes, dropout_state)
    weights = list(args[1])
    has_biases = len(weights) > 2 and any(isinstance(w, TensorDesc) and len(w.shape) == 1
                                          for w in weights)
    return _rnn_cost(_steps(args[0], bool(args[10])), weights,
                     CUDNN_MODES.get(int(args[6]), "lstm"), has_biases)


def fused_cell(kind: str):
    def handler(args, kwargs, out) -> OpCost:
        # _thnn_fused_{lstm,gru}_cell(input_gates: (B, G*H), hidden_gates: (B, G*H), ...):
        # the projections were already done by mm; only the gate arithmetic remains
        rows = args[0].shape[-1]
        batch = args[0].numel // rows
        units = rows // GATES[kind]
        bias = 2 * rows * batch if len(args) > 3 and isinstance(args[3], TensorDesc) else 0
        return OpCost(flops=batch * units * GATE_FLOPS[kind] + bias)

    handler.__name__ = f"fused_{kind}_cell"
    return handler


register("aten.lstm.input", aten_rnn("lstm"))
register("aten.gru.input", aten_rnn("gru"))
register(["aten.rnn_tanh.input", "aten.rnn_relu.input"], aten_rnn("rnn"))
register("aten.lstm.data", aten_rnn_packed("lstm"))
register("aten.gru.data", aten_rnn_packed("gru"))
register(["aten.rnn_tanh.data", "aten.rnn_relu.data"], aten_rnn_packed("rnn"))
register("aten.mkldnn_rnn_layer", mkldnn_rnn_layer)
register("aten.mkldnn_rnn_layer_backward", mkldnn_rnn_layer_backward)
register("aten._cudnn_rnn", cudnn_rnn)
register("aten._thnn_fused_lstm_cell", fused_cell("lstm"))
register("aten._thnn_fused_gru_cell", fused_cell("gru"))
