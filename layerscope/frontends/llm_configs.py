"""Decoder-only language-model configurations: the published numbers of the built-in presets.

One record describes a causal LM well enough to build it (frontends' LLM presets), to count its
KV cache and decode cost, and to plan its training memory (analysis). The values are those of the
models' public configuration files (``config.json`` on the Hugging Face hub; GPT-2 from
Radford et al. 2019 / the ``gpt2`` config). Nothing here imports torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# A model reference naming a Hugging Face causal LM by its config: hf:PATH/config.json or
# hf:ORG/NAME (frontends.detect routes it, llm_models builds it without weights).
HF_PREFIX = "hf:"


@dataclass(frozen=True)
class LLMConfig:
    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int  # == num_heads: multi-head; 1: multi-query; otherwise grouped-query
    intermediate_size: int  # the MLP's (each expert's) inner width
    max_position: int
    norm: str = "rmsnorm"  # "rmsnorm" | "layernorm" (with bias)
    mlp: str = "gated_silu"  # "gated_silu" (gate, up, down) | "gelu" (fc, proj)
    # "rope" | "learned" (an absolute position embedding table) | "alibi" (score biases)
    position: str = "rope"
    qkv_bias: bool = False
    proj_bias: bool = False  # bias on the attention output and MLP projections (GPT-2: yes)
    tied_embeddings: bool = False
    num_experts: int = 1  # > 1: a mixture-of-experts MLP in every block
    experts_per_token: int = 1  # top-k routing
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    default_seq_len: int = 2048
    head_size: int | None = None  # when not hidden / heads (Gemma-2, Mistral-NeMo, Qwen3)

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden_size // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, LLMConfig] = {c.name: c for c in (
    # openai-community/gpt2: 124,439,808 parameters (tied lm_head)
    LLMConfig("gpt2", vocab_size=50257, hidden_size=768, num_layers=12, num_heads=12,
              num_kv_heads=12, intermediate_size=3072, max_position=1024, norm="layernorm",
              mlp="gelu", position="learned", qkv_bias=True, proj_bias=True,
              tied_embeddings=True, default_seq_len=1024),
    # meta-llama/Meta-Llama-3-8B: 8,030,261,248
    LLMConfig("llama-3-8b", vocab_size=128256, hidden_size=4096, num_layers=32, num_heads=32,
              num_kv_heads=8, intermediate_size=14336, max_position=8192, rope_theta=500000.0),
    # meta-llama/Meta-Llama-3-70B: 70,553,706,496
    LLMConfig("llama-3-70b", vocab_size=128256, hidden_size=8192, num_layers=80, num_heads=64,
              num_kv_heads=8, intermediate_size=28672, max_position=8192, rope_theta=500000.0),
    # meta-llama/Llama-3.1-405B: 405,853,388,800
    LLMConfig("llama-3.1-405b", vocab_size=128256, hidden_size=16384, num_layers=126,
              num_heads=128, num_kv_heads=8, intermediate_size=53248, max_position=131072,
              rope_theta=500000.0),
    # mistralai/Mixtral-8x7B-v0.1: 46,702,792,704 (8 experts, 2 per token)
    LLMConfig("mixtral-8x7b", vocab_size=32000, hidden_size=4096, num_layers=32, num_heads=32,
              num_kv_heads=8, intermediate_size=14336, max_position=32768, num_experts=8,
              experts_per_token=2, rope_theta=1000000.0),
    # Qwen/Qwen2.5-7B: 7,615,616,512 (q/k/v bias, untied)
    LLMConfig("qwen2.5-7b", vocab_size=152064, hidden_size=3584, num_layers=28, num_heads=28,
              num_kv_heads=4, intermediate_size=18944, max_position=131072, qkv_bias=True,
              rope_theta=1000000.0, norm_eps=1e-6),
)}


def preset(name: str) -> LLMConfig | None:
    return PRESETS.get(name.lower())
