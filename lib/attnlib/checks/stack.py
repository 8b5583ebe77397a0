"""Exercise checkers for the stack chapter and the capstone.

``check_build_blocks(fn)``: ``fn(L, d_model, h)`` must return L independent :class:`~attnlib.block.Block` objects.
``check_run_stack(fn)``: ``fn(X0, blocks, ln_f)`` must return ln_f(X_L), feeding X_l to block l+1.
``check_next_token_windows(fn)``: ``fn(data, starts, T)`` must return inputs and targets shifted by one.
``check_fixed_attention(fn)``: ``fn(X, W_Q, W_K, W_V)`` must be causal self-attention without the bugs of
:func:`buggy_attention`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..attention import attention
from ..block import Block
from ..train import next_token_windows
from ._core import Mistake, Verdict, checker, judge

__all__ = [
    "check_build_blocks", "check_run_stack", "check_next_token_windows", "check_fixed_attention",
    "buggy_attention",
]


# --- build a stack: L blocks, L sets of parameters --------------------------------------------------------------

def _stack_summary(blocks) -> torch.Tensor:
    """[number of blocks, distinct Block objects, distinct parameter tensors, distinct parameter numbers]."""
    blocks = list(blocks)
    for b in blocks:
        if not isinstance(b, Block):
            raise TypeError(f"expected Block objects, got a {type(b).__name__}")
    params = {id(p): p for b in blocks for p in b.parameters()}        # a shared tensor counts once
    return torch.tensor([len(blocks), len({id(b) for b in blocks}), len(params),
                         sum(p.numel() for p in params.values())])


def _independent(L, d_model, h):
    return nn.ModuleList(Block(d_model, h) for _ in range(L))


def _same_block(L, d_model, h):
    return nn.ModuleList([Block(d_model, h)] * L)


def _shared_attention(L, d_model, h):
    blocks = _independent(L, d_model, h)
    for b in blocks[1:]:
        b.attn = blocks[0].attn
    return blocks


def _shared_mlp(L, d_model, h):
    blocks = _independent(L, d_model, h)
    for b in blocks[1:]:
        b.mlp = blocks[0].mlp
    return blocks


_BUILD_MISTAKES = [
    Mistake("same-block",
            "your list holds the same Block object L times (e.g. [Block(d_model, h)] * L), so every layer uses one "
            "set of weights. Create a new Block inside the loop: nn.ModuleList(Block(d_model, h) for _ in range(L)).",
            lambda L, d, h: _stack_summary(_same_block(L, d, h))),
    Mistake("shared-attention",
            "the blocks are distinct but they share one attention module: every layer must own its W_Q, W_K, "
            "W_V and W_O. Do not assign one block's attn to the others.",
            lambda L, d, h: _stack_summary(_shared_attention(L, d, h))),
    Mistake("shared-mlp",
            "the blocks are distinct but they share one MLP: every layer must own its W_1 and W_2.",
            lambda L, d, h: _stack_summary(_shared_mlp(L, d, h))),
    Mistake("wrong-count",
            "the number of blocks is off by one: build exactly L of them (range(L)).",
            lambda L, d, h: _stack_summary(_independent(L - 1, d, h))),
    Mistake("wrong-count",
            "the number of blocks is off by one: build exactly L of them (range(L)).",
            lambda L, d, h: _stack_summary(_independent(L + 1, d, h))),
]


@checker
def check_build_blocks(fn) -> Verdict:
    """Check ``fn(L, d_model, h)`` returns L independent Blocks: distinct objects, no parameter tensor shared."""
    if not callable(fn):
        return judge(fn, [], None)

    def summary(L, d_model, h):
        blocks = fn(L, d_model, h)
        return None if blocks is None else _stack_summary(blocks)

    with torch.random.fork_rng():                     # building blocks must not move the learner's random state
        return judge(summary, [(3, 16, 4), (2, 8, 2)], lambda L, d, h: _stack_summary(_independent(L, d, h)),
                     _BUILD_MISTAKES,
                     success="L distinct blocks, and no parameter tensor is shared between them.")


# --- run a stack: block l+1 reads X_l, then the final LayerNorm -------------------------------------------------

def _stack_cases() -> list[tuple]:
    cases = []
    torch.manual_seed(808)
    for B, T, d_model, h, L in ((2, 5, 16, 4, 3), (1, 4, 8, 2, 2)):
        blocks = nn.ModuleList(Block(d_model, h) for _ in range(L)).eval()
        ln_f = nn.LayerNorm(d_model)
        with torch.no_grad():                         # a final LayerNorm whose scale and shift are not 1 and 0
            ln_f.weight.uniform_(0.5, 1.5)
            ln_f.bias.normal_(0.0, 0.3)
        cases.append((torch.randn(B, T, d_model) * 2.0, blocks, ln_f))
    return cases


def _run(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = block(X)
    return ln_f(X)


def _x0_every_block(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = block(X0)
    return ln_f(X)


def _norm_every_block(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = ln_f(block(X))
    return X


_RUN_MISTAKES = [
    Mistake("x0-every-block",
            "every block reads X₀, so only the last block's output survives and the earlier layers are wasted. "
            "Block l+1 must read X_l, the output of block l: X = block(X) inside the loop.",
            _x0_every_block),
    Mistake("no-final-norm",
            "you returned X_L itself: the final LayerNorm ln_f is missing. Return ln_f(X) after the loop.",
            lambda X0, blocks, ln_f: _run(X0, blocks, nn.Identity())),
    Mistake("norm-every-block",
            "you applied ln_f after every block. ln_f is applied once, after the last block; each block already "
            "normalises its own inputs with its ln_1 and ln_2.",
            _norm_every_block),
    Mistake("reversed",
            "you ran the blocks in reverse order: block 0 reads X₀, block 1 reads X₁, and so on.",
            lambda X0, blocks, ln_f: _run(X0, blocks[::-1], ln_f)),
    Mistake("norm-first",
            "you applied ln_f to X₀ before the blocks. ln_f comes once, after the last block.",
            lambda X0, blocks, ln_f: _run(ln_f(X0), blocks, nn.Identity())),
]


@checker
def check_run_stack(fn) -> Verdict:
    """Check ``fn(X0, blocks, ln_f)`` with X0 (B, T, d_model) returns ln_f(X_L), shape (B, T, d_model)."""
    with torch.random.fork_rng(), torch.no_grad():   # the learner's random state is left as it was
        return judge(fn, _stack_cases(), _run, _RUN_MISTAKES,
                     success="each block reads the previous block's output, and ln_f is applied once at the end.")


# --- next-token targets -------------------------------------------------------------------------------------------

def _windows_cases() -> list[tuple]:
    data = (torch.arange(40) * 7) % 41          # 40 different token IDs, in no sorted order
    return [(data, torch.tensor([3, 10, 17]), 5), (data, torch.tensor([1, 22]), 8)]


def _slices(data, starts, T, dx, dy):
    idx = starts[:, None] + torch.arange(T)
    return data[idx + dx], data[idx + dy]


_WINDOWS_MISTAKES = [
    Mistake("no-shift",
            "your targets equal the inputs: the model would learn to repeat the token it already sees. The target "
            "at position i is the NEXT token: targets = data[s+1 : s+T+1].",
            lambda data, starts, T: _slices(data, starts, T, 0, 0)),
    Mistake("wrong-way",
            "you shifted the targets the wrong way (data[s-1 : s+T-1]): that asks the model for the PREVIOUS token, "
            "which it can already see. Shift forward: targets = data[s+1 : s+T+1].",
            lambda data, starts, T: _slices(data, starts, T, 0, -1)),
    Mistake("swapped",
            "inputs and targets are swapped: the inputs are data[s : s+T], the targets the same window one step "
            "later, data[s+1 : s+T+1].",
            lambda data, starts, T: _slices(data, starts, T, 1, 0)),
    Mistake("shift-by-two",
            "you shifted by two: the target of position i is the token at i + 1, not i + 2.",
            lambda data, starts, T: _slices(data, starts, T, 0, 2)),
]


@checker
def check_next_token_windows(fn) -> Verdict:
    """Check ``fn(data, starts, T)`` returns inputs (B, T) and next-token targets (B, T)."""
    return judge(fn, _windows_cases(), next_token_windows, _WINDOWS_MISTAKES,
                 success="inputs are data[s : s+T] and targets data[s+1 : s+T+1] for every start s.")


# --- capstone: find the bug -------------------------------------------------------------------------------------

def buggy_attention(X, W_Q, W_K, W_V):
    """Causal self-attention with bugs: X (..., T, d_model) → (..., T, d_v). Find them with the four questions."""
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    S = K @ Q.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    P = torch.softmax(S, dim=-1)
    T = S.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    P = P.masked_fill(future, 0.0)
    return P @ V


def _variant(X, W_Q, W_K, W_V, *, keys_on_rows=False, mask_after=False, times_K=False, scale=True,
             softmax_dim=-1):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    S = (K @ Q.transpose(-2, -1)) if keys_on_rows else (Q @ K.transpose(-2, -1))
    if scale:
        S = S / math.sqrt(Q.shape[-1])
    T = S.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    if mask_after:
        P = torch.softmax(S, dim=softmax_dim).masked_fill(future, 0.0)
    else:
        P = torch.softmax(S.masked_fill(future, float("-inf")), dim=softmax_dim)
    return P @ (K if times_K else V)


def _attention_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(2017)
    X1, X2 = torch.randn(5, 6, generator=g), torch.randn(2, 4, 6, generator=g)
    W = [torch.randn(6, n, generator=g) for n in (4, 4, 3)]      # d_k = 4, d_v = 3
    return [(X1, *W), (X2, *W)]


_ATTENTION_MISTAKES = [
    Mistake("unchanged",
            "this is still the buggy version. Ask the four questions: which axis of S is the query? where is the "
            "mask applied, before or after softmax?",
            buggy_attention),
    Mistake("keys-on-rows",
            "the mask is fixed, but S = K Qᵀ puts keys on the rows. Rows must be queries: S = Q Kᵀ, so that "
            "S[i, j] = q_i · k_j and softmax over the last axis mixes keys.",
            lambda *a: _variant(*a, keys_on_rows=True)),
    Mistake("mask-after-softmax",
            "the axes are fixed, but the mask still comes after softmax: the rows no longer sum to 1. Add -inf "
            "to the future scores BEFORE softmax.",
            lambda *a: _variant(*a, mask_after=True)),
    Mistake("weights-times-K",
            "the weights multiply K. They average the values: return P @ V.",
            lambda *a: _variant(*a, times_K=True)),
    Mistake("no-scale",
            "the scaling by √d_k is gone: divide the scores by math.sqrt(d_k) before the mask and softmax.",
            lambda *a: _variant(*a, scale=False)),
    Mistake("softmax-wrong-axis",
            "softmax runs over the query axis (dim=-2). Each query's weights over the keys must sum to 1: "
            "softmax(..., dim=-1).",
            lambda *a: _variant(*a, softmax_dim=-2)),
]


@checker
def check_fixed_attention(fn) -> Verdict:
    """Check ``fn(X, W_Q, W_K, W_V)`` with X (..., T, d_model) equals softmax(QKᵀ/√d_k + M) V, shape (..., T, d_v)."""
    return judge(fn, _attention_cases(), lambda X, W_Q, W_K, W_V: attention(X @ W_Q, X @ W_K, X @ W_V),
                 _ATTENTION_MISTAKES,
                 success="queries on the rows, the mask before softmax, the weights times V.")
