"""Mixtures of experts whose code runs every token through every expert, counted as the router's
top-k runs them.

A routed implementation (transformers' ``batched_mm`` and ``grouped_mm`` experts, the presets'
balanced dispatch, a GPU's grouped GEMM, vLLM) computes k of the E experts for each token.
Some implementations compute all E densely and weight the unrouted ones 0: transformers'
Llama-4 (``Llama4TextMoe``) copies every token once per expert, scales the copies by the
router's scores and multiplies them by all E experts in one bmm over (E, tokens, hidden). Counted
as traced, such a model costs E/k times the expert work it states (Llama-4-Scout, 16 experts,
top-1: 16 times).

Such a block is recognised by what ran, not by its class: an ``experts`` module (the container
whose parameters ``llm_counts.expert_params`` counts) whose first input holds E rows per token
of its block's input (rows: all elements but the last dimension's), or whose E expert modules
each saw every token. Where one is found and k < E, what scales with the (token, expert) pairs
is counted k/E of it:

- ``analyze`` (hence ``llm``): the experts module's MACs, FLOPs, bytes read and written and
  activation bytes, its submodules' included, forward and backward (exact for the MACs: every
  contraction of the block's expert work is inside it). The block's own elementwise work on the
  copies (making them, weighting them, summing the experts' outputs) stays as traced: FLOPs and
  activation bytes, no MACs; the peak of live activations too;
- ``plan``: every tensor autograd saves inside the block that holds E rows per token (the
  copies, their weights, the experts' inputs and intermediate activations).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from layerscope.analysis.capture import Capture, ModuleStats
from layerscope.core import tree
from layerscope.core.cost import Cost

EXPERTS = "experts"


def rows(shapes: list[list[int]]) -> int | None:
    """Rows of the first tensor of ``shapes``: its elements but the last dimension's."""
    if not shapes or not shapes[0]:
        return None
    return math.prod(shapes[0][:-1])


def dense(stats: Mapping[str, ModuleStats], experts: int) -> dict[str, int]:
    """``experts`` module name -> the tokens of its block, for every ``experts`` module of
    ``stats`` (a capture's, with each module's first-call input shapes) that ran every token
    through all ``experts`` experts."""
    out = {}
    for name, s in stats.items():
        if name.rsplit(tree.SEP, 1)[-1] != EXPERTS:
            continue
        block = stats.get(tree.parent(name) or "")
        tokens = rows(block.input_shapes) if block is not None and block.calls else None
        if not tokens:
            continue
        if s.calls:
            found = rows(s.input_shapes) == experts * tokens
        else:  # a list of expert modules, called one by one
            kids = [stats[c] for c in s.children]
            found = len(kids) == experts and all(
                k.calls and rows(k.input_shapes) == tokens for k in kids)
        if found:
            out[name] = tokens
    return out


def _scaled(c: Cost, k: int, e: int) -> Cost:
    return Cost(c.macs * k // e, c.flops * k // e, c.bytes_read * k // e,
                c.bytes_written * k // e)


def count_routed(cap: Capture, route: tuple[int, int]) -> list[str]:
    """Scale, in ``cap``, the experts modules that ran every token through every expert to the
    router's top-k (module docstring); the note saying which, or nothing."""
    k, e = route
    if e <= 1 or k >= e:
        return []
    found = dense(cap.modules, e)
    for name in found:
        for s in _subtree(cap.modules, name):
            s.forward, s.backward = _scaled(s.forward, k, e), _scaled(s.backward, k, e)
            s.activation_bytes = s.activation_bytes * k // e
            s.recompute_flops = s.recompute_flops * k // e
            for f in s.functions.values():
                f.forward, f.backward = _scaled(f.forward, k, e), _scaled(f.backward, k, e)
                f.activation_bytes = f.activation_bytes * k // e
    if not found:
        return []
    kinds = sorted({cap.modules[n].type for n in found})
    return [f"{len(found)} experts module(s) ({', '.join(kinds)}) ran every token through all "
            f"{e} experts (their input holds {e} rows per token): their MACs, FLOPs, bytes and "
            f"activations are counted as the router's top-{k} runs them, {k}/{e} of that dense "
            "computation; the blocks' own elementwise work on the per-expert copies of the "
            "tokens stays as traced (FLOPs, no MACs)"]


def _subtree(stats: Mapping[str, ModuleStats], name: str) -> list[ModuleStats]:
    out, todo = [], [name]
    while todo:
        s = stats[todo.pop()]
        out.append(s)
        todo.extend(s.children)
    return out


def pair_scale(stats: Mapping[str, ModuleStats], route: tuple[int, int]
               ) -> dict[str, tuple[int, int, int]]:
    """Block name -> (rows of a per-(token, expert) tensor, k, E) for the blocks whose experts
    module ran densely: a tensor made in such a block (its name or below) with that many rows
    counts k/E (plan's saved tensors)."""
    k, e = route
    if e <= 1 or k >= e:
        return {}
    return {tree.parent(name) or "": (e * tokens, k, e)
            for name, tokens in dense(stats, e).items()}


def scale_of(owner: str, shape: tuple[int, ...],
             blocks: Mapping[str, tuple[int, int, int]]) -> tuple[int, int]:
    """(k, E) when a tensor of ``shape`` made by module ``owner`` holds one row per (token,
    expert) pair of a dense block (``pair_scale``), else (1, 1)."""
    for block, (pair_rows, k, e) in blocks.items():
        inside = owner == block or owner.startswith(block + tree.SEP) or block == ""
        if inside and len(shape) >= 2 and math.prod(shape[:-1]) == pair_rows:
            return k, e
    return 1, 1
