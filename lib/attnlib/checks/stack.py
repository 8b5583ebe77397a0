"""Exercise checkers for the stack chapter.

``check_build_blocks(fn)``: ``fn(L, d_model, h)`` must return an ``nn.ModuleList`` of L independent
:class:`~attnlib.block.Block` objects.
``check_run_stack(fn)``: ``fn(X0, blocks, ln_f)`` must return ln_f(X_L), feeding X_l to block l+1.
``check_next_token_windows(fn)``: ``fn(data, starts, T)`` must return inputs and targets shifted by one.
``check_cached_generation(fn)``: ``fn(model, ids, n_new)`` must generate greedily with its own K/V cache.

Modules are built afresh on every call, and the learner's function gets copies of its own, so an answer that
changes a module in place cannot change the reference or a later verdict.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..attention import attention, softmax
from ..block import Block
from ..heads import merge_heads
from ..model import GPT
from ..train import next_token_windows
from ._core import Mistake, Verdict, checker, judge, variants

__all__ = ["check_build_blocks", "check_run_stack", "check_next_token_windows", "check_cached_generation"]


# --- build a stack: L blocks, L sets of parameters --------------------------------------------------------------

def _n_params(modules) -> int:
    """Parameters of the modules, a tensor shared between them counted once."""
    return sum(p.numel() for p in {id(p): p for m in modules for p in m.parameters()}.values())


def _shares(a: nn.Module, b: nn.Module) -> bool:
    return bool({id(p) for p in a.parameters()} & {id(p) for p in b.parameters()})


def _judge_stack(blocks, L: int, d_model: int, h: int) -> Verdict | None:
    """What is wrong with ``blocks`` as a stack of L independent Block(d_model, h); None when nothing is."""
    if isinstance(blocks, nn.Module) and not isinstance(blocks, nn.ModuleList):
        return Verdict(False, f"you returned one {type(blocks).__name__}; return an nn.ModuleList holding L "
                              "blocks.", "type")
    try:
        items = list(blocks)
    except TypeError:
        return Verdict(False, f"expected an nn.ModuleList of Blocks, got {type(blocks).__name__}.", "type")
    wrong = [type(b).__name__ for b in items if not isinstance(b, Block)]
    if wrong:
        return Verdict(False, f"every entry must be a Block(d_model, h), got a {wrong[0]}.", "type")
    if len(items) != L:
        return Verdict(False, f"you built {len(items)} blocks for L = {L}: build exactly L of them (range(L)).",
                       "wrong-count")
    if len({id(b) for b in items}) < L:
        return Verdict(False, "your list holds the same Block object several times (e.g. [Block(d_model, h)] * L), "
                              "so every layer uses one set of weights. Create a new Block on every turn of the loop: "
                              "nn.ModuleList(Block(d_model, h) for _ in range(L)).", "same-block")
    pairs = [(a, b) for i, a in enumerate(items) for b in items[i + 1:]]
    if any(_shares(a.attn, b.attn) for a, b in pairs):
        return Verdict(False, "the blocks are distinct but they share attention weights: every layer must own "
                              "its W_Q, W_K, W_V and W_O. Do not assign one block's attn to the others.",
                       "shared-attention")
    if any(_shares(a.mlp, b.mlp) for a, b in pairs):
        return Verdict(False, "the blocks are distinct but they share one MLP: every layer must own its W_1 and "
                              "W_2.", "shared-mlp")
    if any(_shares(a, b) for a, b in pairs):
        return Verdict(False, "two blocks share a parameter tensor (a LayerNorm?): every layer must own all of "
                              "its parameters.", "shared-parameters")
    n, want = _n_params(items), L * _n_params([Block(d_model, h)])
    if n != want:
        return Verdict(False, f"your stack has {n:,} parameters, expected {want:,} ({L} blocks of {want // L:,}). "
                              "Build each block as Block(d_model, h), with the default d_ff = 4·d_model.",
                       "parameter-count")
    if not isinstance(blocks, nn.ModuleList):
        holder = nn.Module()
        holder.blocks = blocks
        return Verdict(False, f"the blocks are right, but you returned a plain {type(blocks).__name__}. A module "
                              f"that stores it sees {_n_params([holder])} of its {n:,} parameters, so "
                              "model.parameters(), the optimiser and .to(device) would all miss them. Wrap the "
                              "blocks in nn.ModuleList(...).", "not-modulelist")
    return None


def _summary(blocks):
    """(an nn.ModuleList?, entries, distinct blocks, attention shared?, MLP shared?, anything else shared?,
    parameters) of a stack, or (-1,) when it is not a collection of Blocks; None stays None."""
    if blocks is None:
        return None
    try:
        items = list(blocks)
    except TypeError:
        return (-1,)
    if not all(isinstance(b, Block) for b in items):
        return (-1,)
    pairs = [(a, b) for i, a in enumerate(items) for b in items[i + 1:] if a is not b]
    return (int(isinstance(blocks, nn.ModuleList)), len(items), len({id(b) for b in items}),
            int(any(_shares(a.attn, b.attn) for a, b in pairs)), int(any(_shares(a.mlp, b.mlp) for a, b in pairs)),
            int(any(_shares(a, b) for a, b in pairs)), _n_params(items))


def _stack(L, d_model, h, *, one_block=False, share=None, count=0):
    """The summary of a stack built in one way; every switch's default is right, any other value plants a mistake.

    ``one_block``: the same Block object L times. ``share``: the later blocks take the first block's "attn" or
    "mlp". ``count``: how many blocks too many (or, negative, too few).
    """
    if one_block:
        return _summary(nn.ModuleList([Block(d_model, h)] * L))
    blocks = nn.ModuleList(Block(d_model, h) for _ in range(L + count))
    for b in blocks[1:] if share else ():
        setattr(b, share, getattr(blocks[0], share))
    return _summary(blocks)


_BUILD_MISTAKES = variants(_stack, [
    ("same-block", dict(one_block=True),
     "your list holds the same Block object L times (e.g. [Block(d_model, h)] * L), so every layer uses one "
     "set of weights. Create a new Block on every turn of the loop: "
     "nn.ModuleList(Block(d_model, h) for _ in range(L))."),
    ("shared-attention", dict(share="attn"),
     "the blocks are distinct but they share one attention module: every layer must own its W_Q, W_K, "
     "W_V and W_O. Do not assign one block's attn to the others."),
    ("shared-mlp", dict(share="mlp"),
     "the blocks are distinct but they share one MLP: every layer must own its W_1 and W_2."),
    ("wrong-count", dict(count=-1),
     "the number of blocks is off by one: build exactly L of them (range(L))."),
    ("wrong-count", dict(count=+1),
     "the number of blocks is off by one: build exactly L of them (range(L))."),
])

_CONTENT = ("values", "type", "shape", "length")       # judge's labels for a result that is merely different


@checker
def check_build_blocks(fn) -> Verdict:
    """Check ``fn(L, d_model, h)`` returns an nn.ModuleList of L distinct Blocks, no parameter tensor shared."""
    if not callable(fn):
        return judge(fn, [], None)
    cases = [(3, 16, 4), (2, 8, 2)]

    def diagnose(verdict):                             # say what differs: a count, a type, a shared tensor …
        if verdict.mistake in _CONTENT:
            return next(filter(None, (_judge_stack(fn(*case), *case) for case in cases)), None)
        return None

    return judge(lambda L, d_model, h: _summary(fn(L, d_model, h)), cases, _stack, _BUILD_MISTAKES,
                 success="an nn.ModuleList of L distinct blocks, and no parameter tensor is shared between them.",
                 diagnose=diagnose)


# --- run a stack: block l+1 reads X_l, then the final LayerNorm -------------------------------------------------

_STACK_CASES = ((808, 2, 5, 16, 4, 3), (809, 1, 4, 8, 2, 2))      # seed, B, T, d_model, h, L


def _fresh_stack(i: int):
    """Case i: X0 (B, T, d_model), L new blocks and a final LayerNorm whose scale and shift are not 1 and 0.

    Built on every call; judge then gives the learner, the reference and each mistake a deep copy of their own.
    """
    seed, B, T, d_model, h, L = _STACK_CASES[i]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks = nn.ModuleList(Block(d_model, h) for _ in range(L)).eval()
        ln_f = nn.LayerNorm(d_model)
        with torch.no_grad():
            ln_f.weight.uniform_(0.5, 1.5)
            ln_f.bias.normal_(0.0, 0.3)
        X0 = torch.randn(B, T, d_model) * 2.0
    return X0, blocks, ln_f


def _run(X0, blocks, ln_f, *, read_X0=False, norm="end", reverse=False):
    """Run the stack; every switch's default is right, any other value plants a mistake.

    ``read_X0``: every block reads X₀. ``norm``: ln_f once at the "end", after "every" block, once "first" (on
    X₀) or "none". ``reverse``: the blocks in reverse order.
    """
    X = ln_f(X0) if norm == "first" else X0
    for block in blocks[::-1] if reverse else blocks:
        X = block(X0 if read_X0 else X)
        X = ln_f(X) if norm == "every" else X
    return ln_f(X) if norm == "end" else X


_RUN_MISTAKES = variants(_run, [
    ("x0-every-block", dict(read_X0=True),
     "every block reads X₀, so only the last block's output survives and the earlier layers are wasted. "
     "Block l+1 must read X_l, the output of block l: X = block(X) inside the loop."),
    ("no-final-norm", dict(norm="none"),
     "you returned X_L itself: the final LayerNorm ln_f is missing. Return ln_f(X) after the loop."),
    ("norm-every-block", dict(norm="every"),
     "you applied ln_f after every block. ln_f is applied once, after the last block; each block already "
     "normalises its own inputs with its ln_1 and ln_2."),
    ("reversed", dict(reverse=True),
     "you ran the blocks in reverse order: block 0 reads X₀, block 1 reads X₁, and so on."),
    ("norm-first", dict(norm="first"),
     "you applied ln_f to X₀ before the blocks. ln_f comes once, after the last block."),
])


@checker
def check_run_stack(fn) -> Verdict:
    """Check ``fn(X0, blocks, ln_f)`` with X0 (B, T, d_model) returns ln_f(X_L), shape (B, T, d_model)."""
    cases = [_fresh_stack(i) for i in range(len(_STACK_CASES))]
    with torch.no_grad():
        return judge(fn, cases, _run, _RUN_MISTAKES,
                     success="each block reads the previous block's output, and ln_f is applied once at the end.")


# --- next-token targets -------------------------------------------------------------------------------------------

def _windows_cases() -> list[tuple]:
    data = (torch.arange(40) * 7) % 41          # 40 different token IDs, in no sorted order
    return [(data, torch.tensor([3, 10, 17]), 5), (data, torch.tensor([1, 22]), 8)]


def _slices(data, starts, T, *, dx=0, dy=1):
    """Inputs data[s+dx : s+dx+T] and targets data[s+dy : s+dy+T]; the defaults are right, others plant a mistake."""
    idx = starts[:, None] + torch.arange(T)
    return data[idx + dx], data[idx + dy]


_WINDOWS_MISTAKES = variants(_slices, [
    ("no-shift", dict(dy=0),
     "your targets equal the inputs: the model would learn to repeat the token it already sees. The target "
     "at position i is the NEXT token: targets = data[s+1 : s+T+1]."),
    ("wrong-way", dict(dy=-1),
     "you shifted the targets the wrong way (data[s-1 : s+T-1]): that asks the model for the PREVIOUS token, "
     "which it can already see. Shift forward: targets = data[s+1 : s+T+1]."),
    ("swapped", dict(dx=1, dy=0),
     "inputs and targets are swapped: the inputs are data[s : s+T], the targets the same window one step "
     "later, data[s+1 : s+T+1]."),
    ("shift-by-two", dict(dy=2),
     "you shifted by two: the target of position i is the token at i + 1, not i + 2."),
])


@checker
def check_next_token_windows(fn) -> Verdict:
    """Check ``fn(data, starts, T)`` returns inputs (B, T) and next-token targets (B, T)."""
    return judge(fn, _windows_cases(), next_token_windows, _WINDOWS_MISTAKES,
                 success="inputs are data[s : s+T] and targets data[s+1 : s+T+1] for every start s.")


# --- extend: greedy generation with your own K/V cache -------------------------------------------------------------

# seed, vocab_size, d_model, h, L, pos, prompt length T0, n_new, weight scale: one model with learned positions and
# one with RoPE. The scale makes attention and position matter to the greedy choices (a plain random model soon
# repeats one token whatever its context), and the head's ×8 separates the winners clearly (by 0.8 logits or more).
_GEN_CASES = ((81, 23, 16, 2, 2, "learned", 5, 9, 3.0), (82, 19, 12, 3, 2, "rope", 3, 8, 2.0))


class _Shortcut(RuntimeError):
    """Raised when the learner's generation calls the library's own cached generation."""


_NO_GENERATE = "model.generate is the library's answer: write the loop yourself"
_NO_CACHED_FORWARD = "model(ids, caches) is the library's cache: keep your own K and V per layer"
_SHORTCUT_HINT = ("use the model's parts: embed_tokens, blocks (ln_1, attn.qkv, attn.W_O, ln_2, mlp), ln_f and "
                  "head, and keep each layer's K and V yourself, rather than model.generate or model(ids, caches).")


def _fresh_model(i: int, guarded: bool = False):
    """Case i: a new GPT whose greedy choices depend on context and position, and its prompt (1, T0)."""
    seed, vocab, d_model, h, L, pos, T0, _, s = _GEN_CASES[i]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(vocab, d_model, h, L, max_T=32, pos=pos).eval()
        with torch.no_grad():
            model.head.weight.mul_(8.0)
            for block in model.blocks:
                block.attn.W_QKV.weight.mul_(s)
                block.attn.W_O.weight.mul_(s)
            if model.positions is not None:
                for p in model.positions.parameters():
                    p.mul_(s)
        ids = torch.randint(0, vocab, (1, T0))
    if guarded:
        forward = model.forward

        def no_generate(*args, **kwargs):
            raise _Shortcut(_NO_GENERATE)

        def no_cached_forward(ids, caches=None):
            if caches is not None:
                raise _Shortcut(_NO_CACHED_FORWARD)
            return forward(ids)

        model.generate, model.forward = no_generate, no_cached_forward
    return model, ids


def _top_left(Q, K, V):
    """Attention whose mask treats the queries as positions 0…T_q−1 (aligned top-left), whatever T_k is."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(1)
    S = (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).masked_fill(future, float("-inf"))
    return softmax(S) @ V


def _generate_variant(model, ids, n_new, *, offset_zero=False, attend=attention, self_first=True, keep_new=True,
                      causal_prompt=True):
    """Greedy generation with a per-layer K/V cache; the keywords plant the typical mistakes."""
    past = [None] * len(model.blocks)
    new = ids
    for _ in range(n_new):
        offset = 0 if offset_zero else ids.shape[1] - new.shape[1]
        X = model.embed_tokens(new, offset)
        for l, block in enumerate(model.blocks):
            Q, K, V = block.attn.qkv(block.ln_1(X), offset)
            if past[l] is not None:
                K_all, V_all = torch.cat([past[l][0], K], -2), torch.cat([past[l][1], V], -2)
            else:
                K_all, V_all = K, V
            if past[l] is None or keep_new:
                past[l] = (K_all, V_all)
            if past[l] is not None and not self_first and K_all.shape[-2] > Q.shape[-2]:
                K_all, V_all = K_all[..., :-Q.shape[-2], :], V_all[..., :-Q.shape[-2], :]
            if Q.shape[-2] == K_all.shape[-2] and not causal_prompt:
                out = attention(Q, K_all, V_all, causal=False)
            else:
                out = attend(Q, K_all, V_all)
            X = X + block.attn.W_O(merge_heads(out))
            X = X + block.mlp(block.ln_2(X))
        nxt = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        new = nxt
    return ids


_GEN_VARIANTS = variants(_generate_variant, [
    ("no-offset", dict(offset_zero=True),
     "every new token was placed at position 0. Its position is the number of tokens before it: pass "
     "offset = len(past) to model.embed_tokens(new, offset) and to block.attn.qkv(x, offset)."),
    ("top-left-mask", dict(attend=_top_left),
     "with cached keys, the new query is the LAST position and may read every cached key. Your mask was "
     "aligned top-left (as F.scaled_dot_product_attention(..., is_causal=True) does when T_q < T_k), so "
     "the new token read only position 0. Use attention(Q, K, V), whose mask is aligned bottom-right."),
    ("not-self", dict(self_first=False),
     "the new token attends to the cached past but not to itself: append its K and V to the cache "
     "BEFORE attending, so that it reads positions 0…t, itself included."),
    ("cache-not-updated", dict(keep_new=False),
     "the cache keeps only the prompt's K and V: each generated token must be appended too, or later "
     "tokens cannot see the earlier generated ones."),
    ("prompt-unmasked", dict(causal_prompt=False),
     "the prompt's first pass ran without the causal mask, so the cached K and V of layer 1 and above "
     "were computed from rows that read later prompt tokens. The first pass is an ordinary causal pass."),
])


def _generation(fn):
    """Run ``fn(model, ids, n_new)`` on case i's fresh guarded model: (tokens, every position projected once?)."""
    def run(i):
        _, _, _, _, _, _, T0, n_new, _ = _GEN_CASES[i]
        model, ids = _fresh_model(i, guarded=True)
        counts = [0] * len(model.blocks)
        hooks = [block.attn.W_QKV.register_forward_hook(
                 lambda mod, inp, out, l=l: counts.__setitem__(l, counts[l] + inp[0].shape[-2]))
                 for l, block in enumerate(model.blocks)]
        try:
            with torch.no_grad():
                got = fn(model, ids, n_new)
        finally:
            for hook in hooks:
                hook.remove()
        return None if got is None else (got, max(counts) <= T0 + n_new)
    return run


def _recomputed(i):
    """The reference: the library's generation without a cache, recomputing the whole prefix at every step."""
    model, ids = _fresh_model(i)
    with torch.no_grad():
        return model.generate(ids, _GEN_CASES[i][7], use_cache=False), True


def _shortcut(i, *, message):
    raise _Shortcut(message)


_GEN_MISTAKES = [Mistake(m.label, m.hint, _generation(m.wrong)) for m in _GEN_VARIANTS] + [
    Mistake("no-cache",
            "the tokens are right, but each step recomputed the past: every layer projected the earlier "
            "positions again. Keep each layer's K and V, and feed only the newest token.",
            lambda i: (_recomputed(i)[0], False)),
    Mistake("prompt-missing",
            "your new tokens are right, but return the prompt followed by them, (1, T0 + n_new), as "
            "model.generate does.",
            lambda i: (_recomputed(i)[0][:, _GEN_CASES[i][6]:], True)),
    *variants(_shortcut, [
        ("shortcut", dict(message=_NO_GENERATE), _SHORTCUT_HINT),
        ("shortcut", dict(message=_NO_CACHED_FORWARD), _SHORTCUT_HINT),
    ]),
]


def _diagnose_generation(fn) -> Verdict | None:
    """A plain-words verdict for tokens of the wrong type, shape or value (judge sees a (tokens, flag) pair)."""
    for i, (*_, T0, n_new, _) in enumerate(_GEN_CASES):
        model, ids = _fresh_model(i, guarded=True)
        with torch.no_grad():
            got = fn(model, ids, n_new)
        want, _ = _recomputed(i)
        if not isinstance(got, torch.Tensor):
            return Verdict(False, f"expected a tensor of token IDs, got {type(got).__name__}.", "type")
        if got.shape != want.shape:
            return Verdict(False, f"the result has shape {tuple(got.shape)}, expected {tuple(want.shape)}: the "
                                  f"prompt (T0 = {T0}) followed by n_new = {n_new} tokens.", "shape")
        if not torch.equal(got, want):
            first = int((got != want).reshape(-1).nonzero()[0])
            return Verdict(False, f"the tokens differ from recomputation from position {first} on (the prompt "
                                  f"has {T0} tokens). Compare one cached step with model(ids) on the whole "
                                  "prefix, layer by layer.", "values")
    return None


@checker
def check_cached_generation(fn) -> Verdict:
    """Check ``fn(model, ids, n_new)``: greedy generation from ids (1, T0) → (1, T0 + n_new) that keeps its own
    K and V per layer. Its tokens must equal those of recomputing the whole prefix at every step, and every
    position must pass through each layer's projection once."""
    if not callable(fn):
        return judge(fn, [], None)
    return judge(_generation(fn), [(i,) for i in range(len(_GEN_CASES))], _recomputed, _GEN_MISTAKES,
                 success="the same tokens as recomputing the whole prefix, with every position projected "
                         "once per layer.",
                 diagnose=lambda verdict: _diagnose_generation(fn) if verdict.mistake in _CONTENT else None)
