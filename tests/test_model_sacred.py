"""The model is sacred whatever its forward does: ``analyze``, ``profile`` and ``ops`` leave every
module attribute the very same object with the same value (caches a forward writes into ``self``,
``None`` placeholders, plain tensors, lists), and the model still runs as before. What the fake
run cannot do (data-dependent indexing, a tensor it could not replace) runs for real, with a
note. Models are written here in the shape of the public examples (the PyTorch examples'
word-language-model, torchinfo's test models)."""
import copy
import math

import pytest
import torch
import torch.nn as nn

import layerscope
from layerscope.errors import UserError

REAL_RUN = "the model ran for real"


class PositionalEncoding(nn.Module):
    """As in PyTorch examples' word_language_model/model.py."""

    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(0), :])


class TransformerModel(nn.Transformer):
    """PyTorch examples' word-language-model: ``src_mask`` is None until forward caches the
    causal mask there."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                         num_encoder_layers=nlayers)
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src)).to(device)
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return torch.log_softmax(output, dim=-1)


class CachingAttention(nn.Module):
    """One attention head that caches in ``self``: a causal mask (None until first call), rotary
    tables in a tuple, a KV cache in plain tensors written in place, a position counter and a
    list of calls."""

    def __init__(self, d=8, max_len=64):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.mask = None
        self.rope = None
        self.k_cache = torch.zeros(1, max_len, d)
        self.v_cache = torch.zeros(1, max_len, d)
        self.pos = 0
        self.calls = []
        self.max_len = max_len

    def forward(self, x):
        t, d = x.shape[1], x.shape[2]
        if self.mask is None:
            self.mask = torch.tril(torch.ones(self.max_len, self.max_len))
        if self.rope is None:
            angle = torch.arange(self.max_len).float()[:, None] / 10
            self.rope = (torch.cos(angle), torch.sin(angle))
        cos, sin = self.rope
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q * cos[self.pos:self.pos + t] + q * sin[self.pos:self.pos + t]
        self.k_cache[:, self.pos:self.pos + t] = k
        self.v_cache[:, self.pos:self.pos + t] = v
        end = self.pos + t
        att = q @ self.k_cache[:, :end].transpose(1, 2)
        att = att.masked_fill(self.mask[self.pos:end, :end] == 0, float("-inf")).softmax(-1)
        y = att @ self.v_cache[:, :end]
        self.pos = end
        self.calls.append(t)
        return self.proj(y)


class EmptyModule(nn.Module):
    """torchinfo's EmptyModule: a plain tensor attribute (not a parameter) used in forward."""

    def __init__(self):
        super().__init__()
        self.parameter = torch.rand(3, 3, requires_grad=True)
        self.example_input_array = torch.zeros(1, 2, 3, 4, 5)

    def forward(self):
        return {"loss": self.parameter.sum()}


class ScalarIndexAttr(nn.Module):
    """A 0-dim tensor attribute used as an index."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.idx = torch.tensor(1)

    def forward(self, x):
        return self.fc(x[self.idx])


class ScalarTensorInputNet(nn.Module):
    """A 0-dim tensor input used as an index (torchinfo's scalar-tensor input case)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, i):
        return self.fc(x[i])


# The word-language-model, ntoken 50, ninp 16, 2 heads, nhid 32, 2 encoder layers. Per encoder
# layer: in_proj 3*16*16+48, out_proj 16*16+16, linear1 16*32+32, linear2 32*16+16, 2 norms
# 2*32 = 2224; the encoder's final norm 32; embedding 50*16; output linear 16*50+50. The 6
# decoder layers nn.Transformer also builds are never run, so not counted.
TRANSFORMER_PARAMS = 2 * 2224 + 32 + 50 * 16 + 16 * 50 + 50
# Seq 7, batch 2: the output linear is 14 rows x 16 x 50 MACs.
TRANSFORMER_DECODER_MACS = 14 * 16 * 50


def _transformer():
    return TransformerModel(50, 16, 2, 32, 2), (torch.randint(0, 50, (7, 2)),)


def _caching():
    return CachingAttention(), (torch.rand(1, 4, 8),)


def _caching_macs(pos):
    # qkv 4x8x24, proj 4x8x8, scores and values 4x8x(pos+4) each
    return 4 * 8 * 24 + 4 * 8 * 8 + 2 * 4 * 8 * (pos + 4)


CASES = [
    # id, build, warm (one real run first), params, (layer, MACs), real run expected
    ("word-lm-fresh", _transformer, False, TRANSFORMER_PARAMS,
     ("decoder", TRANSFORMER_DECODER_MACS), None),
    ("word-lm-after-run", _transformer, True, TRANSFORMER_PARAMS,
     ("decoder", TRANSFORMER_DECODER_MACS), None),
    ("caching-fresh", _caching, False, 8 * 24 + 8 * 8, ("", _caching_macs(0)), False),
    # rotary tables in a tuple cannot be faked: the real run takes over
    ("caching-after-run", _caching, True, 8 * 24 + 8 * 8, ("", _caching_macs(4)), True),
    ("empty-module", lambda: (EmptyModule(), ()), False, 0, ("", 0), False),
    ("scalar-index-attr", lambda: (ScalarIndexAttr(), (torch.rand(3, 4),)), False, 20,
     ("fc", 16), None),
    ("scalar-tensor-input", lambda: (ScalarTensorInputNet(), (torch.rand(3, 4), torch.tensor(2))),
     False, 20, ("fc", 16), True),
]


def _state(model):
    """Every module's attributes (the objects themselves), copies of tensor values and list/dict
    contents, for comparison after the analysis."""
    out = []
    for m in model.modules():
        attrs = dict(m.__dict__)
        values = {}
        for key, v in attrs.items():
            if isinstance(v, torch.Tensor):
                values[key] = v.detach().clone()
            elif isinstance(v, (list, dict)):
                values[key] = copy.copy(v)
            elif isinstance(v, tuple):
                values[key] = tuple(t.detach().clone() if isinstance(t, torch.Tensor) else t
                                    for t in v)
        tensors = {n: t.detach().clone() for n, t in
                   list(m.named_parameters(recurse=False)) + list(m.named_buffers(recurse=False))}
        out.append((m, attrs, values, tensors, m.training))
    return out


def _assert_same(state):
    for m, attrs, values, tensors, training in state:
        assert m.__dict__.keys() == attrs.keys(), type(m).__name__
        for key, v in attrs.items():
            assert m.__dict__[key] is v, f"{type(m).__name__}.{key} was replaced"
        for key, v in values.items():
            now = m.__dict__[key]
            if isinstance(v, torch.Tensor):
                assert torch.equal(now, v), f"{type(m).__name__}.{key} changed"
            elif isinstance(v, tuple):
                assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
                           for a, b in zip(now, v)), key
            elif isinstance(v, dict):
                assert list(now.keys()) == list(v.keys()), key
                assert all(now[k] is v[k] for k in v), key
            else:
                assert len(now) == len(v) and all(a is b for a, b in zip(now, v)), key
        for name, t in tensors.items():
            assert torch.equal(getattr(m, name), t), f"{type(m).__name__}.{name} changed"
        assert m.training == training


def _global_hooks():
    from torch.nn.modules import module as mm
    return [len(getattr(mm, name)) for name in dir(mm) if name.startswith("_global_")
            and isinstance(getattr(mm, name), dict)]


def _analyze(model, inputs):
    return layerscope.analyze(model, inputs=inputs)


def _profile(model, inputs):
    return layerscope.profile(model, inputs=inputs, runs=2, warmup=1, roofline=False)


def _ops(model, inputs):
    return layerscope.ops(model, inputs=inputs, runs=1, warmup=1)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("api", [_analyze, _profile, _ops], ids=["analyze", "profile", "ops"])
@pytest.mark.parametrize("case_id,build,warm,params,layer,real", CASES,
                         ids=[c[0] for c in CASES])
def test_model_is_unchanged_and_still_runs(case_id, build, warm, params, layer, real, api):
    torch.manual_seed(0)
    model, inputs = build()
    model.eval()
    if warm:
        with torch.no_grad():
            model(*inputs)
    with torch.no_grad():
        expected = copy.deepcopy(model)(*inputs)  # what the untouched model computes next
    state = _state(model)
    hooks = _global_hooks()
    result = api(model, inputs)
    if api is not _ops:
        assert result.totals.params == params
        name, macs = layer
        row = next(r for r in result.layers if r.name == name) if name else result.totals
        assert row.macs == macs
        if real is not None:
            assert any(n.startswith(REAL_RUN) for n in result.notes) == real, result.notes
    _assert_same(state)
    assert _global_hooks() == hooks
    with torch.no_grad():
        again = model(*inputs)
    torch.testing.assert_close(again, expected)


def test_attributes_come_back_when_the_model_fails():
    """A forward that caches into ``self`` and then fails: the cache is gone, a deleted
    attribute is back, and the error is the model's own."""

    class Fails(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.cache = None
            self.gone = torch.ones(2)

        def forward(self, x):
            self.cache = x * 2
            self.extra = 1
            del self.gone
            return self.fc(x)  # 3 features: rejected

    model = Fails()
    state = _state(model)
    with pytest.raises(UserError, match="rejected input"):
        layerscope.analyze(model, inputs=(torch.rand(2, 3),))
    _assert_same(state)


def test_a_real_run_with_weights_on_the_meta_device_is_refused_in_one_line():
    with torch.device("meta"):
        model = ScalarTensorInputNet()
    with pytest.raises(UserError, match=r"needs real values \(.*\) but its weights are on the "
                                        r"meta device"):
        layerscope.analyze(model, inputs=(torch.rand(3, 4), torch.tensor(2)))
