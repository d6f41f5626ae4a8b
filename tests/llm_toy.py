"""A small GPT-style causal LM built from an LLMConfig, for the llm/plan tests (the presets of
frontends/llm_models.py are the real ones). It matches the assumptions of Korthikanti et al.
2022's activation formula: pre-LayerNorm blocks, one QKV linear, explicit attention (scores,
softmax, dropout on the probabilities, probabilities @ V), dropout after the attention output
projection and after the MLP, a 4h GeLU MLP, biases."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from layerscope.frontends.llm_configs import LLMConfig


def toy_config(**overrides) -> LLMConfig:
    base = dict(name="toy-gpt", vocab_size=512, hidden_size=64, num_layers=3, num_heads=4,
                num_kv_heads=4, intermediate_size=256, max_position=256, norm="layernorm",
                mlp="gelu", position="learned", qkv_bias=True, proj_bias=True,
                tied_embeddings=True, default_seq_len=32)
    base.update(overrides)
    return LLMConfig(**base)


class Block(nn.Module):
    def __init__(self, c: LLMConfig, dropout: float, sdpa: bool):
        super().__init__()
        h = c.hidden_size
        self.heads, self.p, self.sdpa = c.num_heads, dropout, sdpa
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.fc2 = nn.Linear(h, c.intermediate_size), nn.Linear(c.intermediate_size, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, -1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:  # inference cost: the causal kernel
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # what Korthikanti et al. count: scores, softmax, dropout, probs @ V
            w = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
            w = F.dropout(F.softmax(w, -1), self.p, self.training)
            o = w @ v
        x = x + F.dropout(self.proj(o.transpose(1, 2).reshape(b, s, h)), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc(self.ln2(x)))), self.p, self.training)


class ToyGPT(nn.Module):
    def __init__(self, c: LLMConfig, dropout: float = 0.1, sdpa: bool = True):
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.hidden_size)
        self.wpe = nn.Embedding(c.max_position, c.hidden_size)
        self.blocks = nn.ModuleList(Block(c, dropout, sdpa) for _ in range(c.num_layers))
        self.ln_f = nn.LayerNorm(c.hidden_size)
        self.head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def build_toy(c: LLMConfig, **kw) -> nn.Module:
    with torch.device("meta"):
        return ToyGPT(c, **kw)
