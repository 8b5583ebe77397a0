"""Exercise checkers for the stack chapter (chapter 8).

``check_deepen(fn)``: ``fn(blocks)``, L blocks → an ``nn.ModuleList`` of 2L: block i's copy, then a new block of
its settings that starts as the identity and can learn; nothing shared.
``check_logit_lens(fn)``: ``fn(X0, blocks, ln_f, head)`` → head(ln_f(X_l)) for l = 0 … L, (L + 1, B, T, vocab_size).
``check_text_windows(fn)``: ``fn(data, T)`` → (inputs, targets), each (n, T): as many consecutive windows as fit.
``check_cached_generation(fn)``: ``fn(model, ids, n_new, chunk)`` → (1, T0 + n_new): the prompt fed in chunks of at
most ``chunk``, then n_new greedy tokens, with every layer's K and V kept by the learner's code.
"""

from __future__ import annotations

import functools
import itertools
from functools import partial

import torch
from torch import nn

from ..attention import attention
from ..block import Block
from ..heads import MultiHeadAttention, merge_heads
from ..model import GPT, GPTConfig
from ._core import Mistake, Verdict, _close, _dtype_name, _gen, checker, judge, named, variants

__all__ = ["check_deepen", "check_logit_lens", "check_text_windows", "check_cached_generation"]


# --- build: a deeper stack that starts as the old one ---------------------------------------------------------------
# seed, L, d_model, h, d_ff, rope, dtype: not the chapter's sizes (h = 4, d_ff = 4·d_model) nor its dtype.
_DEEPEN_CASES = ((880, 2, 16, 2, 40, False, torch.float32), (881, 3, 12, 3, 24, True, torch.float64))

_FIELDS = ("d_model", "h", "h_kv", "d_ff", "rope", "norm", "bias", "gelu", "dtype", "device")


def _fresh_blocks(i: int):
    """Case i: an nn.ModuleList of L "trained" blocks (no parameter at its initial value, LayerNorms included)."""
    seed, L, d_model, h, d_ff, rope, dtype = _DEEPEN_CASES[i]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks = nn.ModuleList(Block(d_model, h, d_ff, rope=rope) for _ in range(L))
        with torch.no_grad():
            for p in blocks.parameters():
                p.add_(torch.randn_like(p) * 0.3)
    return (blocks.to(dtype),)


def _setting(block: Block, field: str):
    a, m, params = block.attn, block.mlp, list(block.parameters())
    return {"d_model": block.d_model, "h": a.h, "h_kv": a.h_kv, "d_ff": m.d_ff, "rope": bool(a.rope),
            "norm": block.norm, "bias": m.W_1.bias is not None, "gelu": m.gelu,
            "dtype": _dtype_name(params[0].dtype) if len({p.dtype for p in params}) == 1 else "mixed",
            "device": str(params[0].device)}[field]


def _entries(out) -> list | None:
    """The entries of what the learner returned, when it is a collection of Blocks; else None."""
    items = list(out) if isinstance(out, (list, tuple, nn.ModuleList)) else None
    return items if items is not None and all(isinstance(b, Block) for b in items) else None


def _storages(module: nn.Module) -> dict[int, str]:
    return {p.untyped_storage().data_ptr(): name for name, p in module.named_parameters() if p.numel()}


_DEEPEN = {label: Mistake(label, hint, more=more) for label, hint, more in [   # found by _explain_stack
    ("type", "return an nn.ModuleList of Blocks, 2L of them; got {what}.",
     "for L given blocks, 2L entries: each given block's copy, then its new block. You returned {what}."),
    ("wrong-count", "your stack has {n} entries for {L} given blocks: how many blocks does each given one become?",
     "each given block becomes two entries, its copy and a new block after it: {want} entries."),
    ("shared-parameters", "entry {k} of your stack shares its parameter {name} with block {i} that was passed in: "
     "did you copy the numbers?", "a shared parameter would train the old blocks too; a deep copy owns its own."),
    ("same-block", "entries {a} and {b} of your stack are one Block object: how many blocks did you create for "
     "each given one?", "the copy and the new block must be objects of their own, or they cannot differ."),
    ("shared-between", "entries {a} and {b} of your stack share the parameter {name}: can they ever learn "
     "different numbers?", "every entry must own all of its parameters; make each new block's layers its own."),
    ("wrong-heads", "entry {k} has {got} heads, block {i} has {want}: where can you read a block's number of "
     "heads, which no weight shape shows?", "a new block repeats every setting of the block it follows."),
    ("wrong-d_ff", "entry {k}'s MLP is {got} wide, block {i}'s is {want}: what width does a Block get when you "
     "do not say?", "a Block's default d_ff is 4·d_model; give the new block the width of the block it follows."),
    ("wrong-dtype", "entry {k}'s parameters are {got}, block {i}'s are {want}: in which dtype is a new module "
     "created?", "a new module is float32 whatever its neighbours hold; convert it, or start from a copy."),
    ("wrong-structure", "entry {k}'s {field} is {got}, block {i}'s is {want}: which settings do a block's weights "
     "not show?", "a new block repeats every setting of the block it follows, or starts as a copy of it."),
    ("order", "entry {k} of your stack {does}, where {wanted} belongs: in which order do the entries go?",
     "entry 2i is the copy of block i and entry 2i + 1 the new block right after it."),
    ("copy-differs", "entry {k} should compute what block {i} computes, and does not: are all of its numbers "
     "block {i}'s?", "every parameter of block {i}, both LayerNorms included, in a block of the same settings."),
    ("constant-added", "entry {k} adds the same vector to every position: which part of a sublayer adds "
     "something even when its weight is zero?", "a Linear layer adds its bias even when its weight is zero."),
    ("not-identity", "entry {k} changes its input: what must a new block add to the residual stream?",
     "a new block is the identity when the output layers of attention (W_O) and of the MLP start at zero."),
    ("dead-block", "entry {k} leaves X as it is, but its {part} weights are all zero as well: what gradient "
     "would reach them?", "only the output layers need to be zero; with the first one zero too, nothing flows back."),
    ("frozen", "entry {k}'s parameter {name} has requires_grad=False: which step switched learning off?",
     "change the output layers' values without turning off their gradient."),
    ("not-modulelist", "the blocks are right, but you returned a plain {what}: a module that stores it sees "
     "{seen} of its {total:,} parameters.", "a plain collection is not registered: parameters() misses the blocks."),
]}


def _zero_outside_no_grad(blocks):   # the planted error: torch refuses
    new = Block(blocks[0].d_model, blocks[0].attn.h)
    new.attn.W_O.weight.zero_()


NO_GRAD = Mistake(
    "in-place-with-grad", "torch refused to change a trainable parameter in place while it records gradients: "
    "how do you tell it not to record?", _zero_outside_no_grad, more="set the numbers in torch's no-grad mode, "
    "or with the functions of torch.nn.init, which switch recording off for you.")


def _role(entry: Block, X: torch.Tensor, outputs: list[torch.Tensor]):
    """What ``entry`` computes on the probe X: "identity", the index of the given block it equals, "constant" (X
    plus one vector at every position) or None."""
    try:
        Y = entry(X)
    except Exception:  # noqa: BLE001 - a block that cannot run on the probe computes nothing it should
        return None
    D, tol = (Y - X).double(), 1e-5 * (1.0 + X.double().abs().max().item())
    if D.abs().max().item() <= tol:
        return "identity"
    same = next((i for i, want in enumerate(outputs) if torch.allclose(Y, want, atol=1e-5, rtol=1e-4)), None)
    return "constant" if same is None and (D - D[:1, :1]).abs().max().item() <= tol else same


def _explain_stack(case, out, args, watch) -> Verdict | None:
    """The first thing wrong with ``out`` as the deeper stack of the given blocks (as passed in); None if nothing."""
    (given,), D = args, _DEEPEN
    items = _entries(out)
    if items is None or len(items) != 2 * len(given):
        return named(D["type"], what=f"a {type(out).__name__}") if items is None else named(
            D["wrong-count"], n=len(items), L=len(given), want=2 * len(given))
    owners = {ptr: (i, name) for i, b in enumerate(given) for ptr, name in _storages(b).items()}
    for k, b in enumerate(items):
        for ptr, name in _storages(b).items():
            if ptr in owners:
                return named(D["shared-parameters"], k=k, i=owners[ptr][0], name=name)
    for a, b in itertools.combinations(range(len(items)), 2):
        both = set(_storages(items[a])) & set(_storages(items[b]))
        if items[a] is items[b] or both:
            return named(D["same-block"], a=a, b=b) if items[a] is items[b] else named(
                D["shared-between"], a=a, b=b, name=_storages(items[b])[both.pop()])
    for k, field in ((k, field) for k in range(len(items)) for field in _FIELDS):
        got, want = _setting(items[k], field), _setting(given[k // 2], field)
        if got != want:
            label = {"h": "wrong-heads", "d_ff": "wrong-d_ff", "dtype": "wrong-dtype"}.get(field, "wrong-structure")
            return named(D[label], k=k, i=k // 2, field=field, got=got, want=want)
    X = torch.randn(2, 5, given[0].d_model, generator=_gen(88), dtype=torch.float64).to(next(given.parameters()).dtype)
    with torch.no_grad():
        outputs = [block(X) for block in given]
        for k, entry in enumerate(items):
            role = _role(entry, X, outputs)
            if k % 2 == 0 and role == k // 2 or k % 2 == 1 and role == "identity":
                continue
            if role not in (None, "constant"):
                does = "starts as the identity" if role == "identity" else f"computes block {role}"
                wanted = f"the copy of block {k // 2}" if k % 2 == 0 else f"the new block after block {k // 2}"
                return named(D["order"], k=k, does=does, wanted=wanted)
            return named(D["copy-differs"], k=k, i=k // 2) if k % 2 == 0 else named(
                D["constant-added" if role == "constant" else "not-identity"], k=k)
    for k, entry in enumerate(items[1::2]):   # a first layer all zero: no gradient ever reaches it
        dead = [part for part, W in (("attention", entry.attn.W_QKV.weight), ("MLP", entry.mlp.W_1.weight))
                if not bool(W.detach().any())]
        frozen = [n for n, p in entry.named_parameters() if not p.requires_grad]
        if dead or frozen:
            return named(D["dead-block"], k=2 * k + 1, part=dead[0]) if dead else named(
                D["frozen"], k=2 * k + 1, name=frozen[0])
    if not isinstance(out, nn.ModuleList):
        holder = nn.Module()
        holder.blocks = out
        return named(D["not-modulelist"], what=type(out).__name__, seen=sum(p.numel() for p in holder.parameters()),
                     total=sum(p.numel() for p in nn.ModuleList(items).parameters()))
    return None


@checker(mistakes=[*_DEEPEN.values(), NO_GRAD])
def check_deepen(fn) -> Verdict:
    """``fn(blocks)`` → 2L blocks: each given block's copy, then a new block that starts as the identity."""
    return judge(fn, [_fresh_blocks(i) for i in range(len(_DEEPEN_CASES))], None, [NO_GRAD], properties=_explain_stack,
                 success="every block is followed by a new block of its own settings that starts as the "
                         "identity, and no entry shares a parameter with the given blocks or another entry.")


# --- build: read every layer with the head (the logit lens) ---------------------------------------------------------
_LENS_CASES = ((808, 2, 5, 16, 4, 3, 11, torch.float32), (809, 1, 4, 8, 2, 2, 7, torch.float64))
# seed, B, T, d_model, h, L, vocab_size, dtype


def _fresh_lens(i: int):
    """Case i: X0 (B, T, d_model), L blocks, a final LayerNorm whose scale and shift are not 1 and 0, a head."""
    seed, B, T, d_model, h, L, vocab, dtype = _LENS_CASES[i]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks = nn.ModuleList(Block(d_model, h) for _ in range(L)).eval()
        ln_f = nn.LayerNorm(d_model)
        nn.init.uniform_(ln_f.weight, 0.5, 1.5)
        nn.init.normal_(ln_f.bias, 0.0, 0.3)
        head = nn.Linear(d_model, vocab, bias=False)
        X0 = torch.randn(B, T, d_model) * 2.0
    return X0.to(dtype), blocks.to(dtype), ln_f.to(dtype), head.to(dtype)


def _lens(X0, blocks, ln_f, head, *, read="normed", stream="raw", first=True, last=True, from_X0=False,
          reverse=False, probs=False, axis=0, join=torch.stack):
    """Every layer read by the head; a switch off its default plants a mistake."""
    X, Xs = X0, [X0]
    for block in list(blocks)[::-1] if reverse else blocks:
        X = block(X0 if from_X0 else ln_f(X) if stream == "normed" else X)
        X = ln_f(X) if stream == "normed-after" else X
        Xs.append(X)
    if stream == "normed-after":
        Xs[0] = ln_f(X0)
    L = len(Xs) - 1
    reads = [head(X if read == "raw" or (read == "raw-but-last" and l < L) or stream == "normed-after"
                  else ln_f(X)) for l, X in enumerate(Xs)]
    out = join(reads[(0 if first else 1):(L + 1 if last else L)], dim=axis)
    return out.softmax(-1) if probs else out


_LENS_MISTAKES = variants(_lens, [
    ("raw-reads", dict(read="raw"), "none of your readings matches, not even the last: what happens to X_L between "
     "the last block and the head?", "the model normalises X_L with ln_f before the head; so is every X_l read."),
    ("raw-but-last", dict(read="raw-but-last"), "your last reading is right and the earlier ones are not: did "
     "every X_l get what X_L gets?", "only X_L went through ln_f; read each X_l exactly as X_L is read."),
    *[("normed-stream", dict(stream=form), "your later readings drift away: does reading a layer change what the "
       "next block receives?", "you fed the normalised X_l to the next block.") for form in ("normed", "normed-after")],
    ("missing-x0", dict(first=False), "you returned L readings for L blocks: how many residual streams X_0 … X_L "
     "are there?", "the embeddings X₀ are read too, before any block: L blocks give L + 1 readings."),
    ("missing-last", dict(last=False), "your readings stop one layer early: is the last block's output read?",
     "you never read X_L, the output of the last block: L blocks give L + 1 readings."),
    ("x0-every-block", dict(from_X0=True), "is your reading at layer l the output of l blocks, one after the "
     "other?", "every block read X₀; block l + 1 reads X_l, the output of block l."),
    ("reversed", dict(reverse=True), "in which order do the blocks run?",
     "you ran the blocks in reverse order: block 0 reads X₀, block 1 reads X₁, and so on."),
    ("probabilities", dict(probs=True), "every row of your readings sums to 1: does the head give probabilities?",
     "you applied a softmax; the head's outputs are logits, return those."),
    ("layer-axis", dict(axis=1), "your numbers are right but the axes are in another order: which axis counts "
     "the layers?", "the readings go on a new first axis: (L + 1, B, T, vocab_size)."),
    ("concatenated", dict(join=torch.cat), "your result has one axis too few: are the readings joined along an "
     "axis they already have?", "you joined the readings along the batch axis; they go on a new first axis."),
])


@checker(mistakes=_LENS_MISTAKES)
def check_logit_lens(fn) -> Verdict:
    """``fn(X0, blocks, ln_f, head)`` → head(ln_f(X_l)) for l = 0 … L as (L + 1, B, T, vocab_size)."""
    with torch.no_grad():
        return judge(fn, [_fresh_lens(i) for i in range(len(_LENS_CASES))], _lens, _LENS_MISTAKES, success="every "
                     "X_l, from X₀ to X_L, is read through ln_f and the head, and the blocks receive the raw stream.")


# --- build: cut a text into training windows -------------------------------------------------------------------------
def _windows_cases() -> list[tuple]:
    data = (torch.arange(40) * 7) % 41          # 40 different token IDs, in no sorted order
    # T divides len(data) in cases 1 and 3: a window that would end the text has no target; case 4 is int32
    return [(data, 5), (data[:38], 4), (data[3:27], 6), (data[1:35].int(), 3)]


def _cut(data, T, *, n=None, stride=None, dx=0, dy=1, roll=False, positions=torch.long, from_end=False):
    """Windows at s = 0, stride, …: inputs data[s+dx : s+dx+T], targets data[s+dy : s+dy+T]; defaults are right."""
    stride = {None: T, "gap": T + 1, "T-1": T - 1}.get(stride, stride)
    count = (len(data) - 1 - T) // stride + 1        # the last target, data[s + T], must exist
    count = count - 1 if n == "fewer" else count
    start = len(data) - 1 - count * T if from_end else 0
    idx = (torch.arange(count)[:, None] * stride + torch.arange(T) + start).to(positions)
    inputs = data[idx + dx]
    return inputs, inputs.roll(-1, 1) if roll else data[idx + dy]


_WINDOWS_MISTAKES = variants(_cut, [
    ("no-shift", dict(dy=0), "your targets equal your inputs: what should the model learn to say at position i?",
     "the target at position i is the token after it; yours teach the model to repeat what it sees."),
    ("swapped", dict(dx=1, dy=0), "your inputs start one token late: which of inputs and targets begins where "
     "the window begins?", "inputs and targets are swapped: the targets begin one token after the inputs."),
    ("shifted-back", dict(dy=-1), "is the target of position i after it, or before it?",
     "each of your targets is the token before its input; it is the token right after it."),
    ("shift-by-two", dict(dy=2), "how far after position i is the token that position i must predict?",
     "you shifted the targets by two; the target is the very next token."),
    ("rolled", dict(roll=True), "all targets are right but the last of each window: where does yours come from?",
     "you rolled each window, so its last target wrapped round to its first input; it is data[s + T]."),
    ("overlapping", dict(stride=1), "your windows overlap: is every token an input in exactly one window?",
     "you started a window at every token; each window starts where the inputs of the one before end."),
    ("overlap-by-one", dict(stride="T-1"), "each window starts on the last input of the one before: is every "
     "token an input exactly once?", "you stepped by T − 1; a window's last target is the next one's first input."),
    ("gap", dict(stride="gap"), "some tokens are never an input: where does a window start, compared with where "
     "the one before ends?", "you left a token between windows; a window's last target is the next one's first."),
    ("one-too-few", dict(n="fewer"), "is there room for one more window at the end of the text?",
     "the last window fits as long as its last target exists; you stopped one window early."),
    ("aligned-to-end", dict(from_end=True), "where does your first window start?",
     "you dropped the leftover tokens at the start; the windows start at the first token, the leftover is last."),
    ("float-positions", dict(positions=torch.float32), "torch refused to index the text with your positions: "
     "what dtype are they?", "positions that index a tensor must be integers; division or linspace makes floats."),
]) + [Mistake("one-too-many", "your answer is right when T does not divide the length of the text, and wrong when "
              "it does: does the target of the last token of your last window exist?", _cut, more="the last token "
              "of the text is never an input: count the windows that fit in all tokens but the last.",
              where=lambda case: len(case[0]) % case[1] != 0)]

WIDTH = Mistake("window-width", "your windows are {got} tokens wide for T = {T}: how many inputs does a window hold?",
    more="a window holds T inputs and T targets, the same positions shifted by one: two (n, T) tensors.")
COUNT = {1: Mistake(
    "one-too-many", "you cut {got} windows from {N} tokens with T = {T}: does the target of the last token of "
    "your last window exist?", more=_WINDOWS_MISTAKES[-1].more),
    -1: next(m for m in _WINDOWS_MISTAKES if m.label == "one-too-few")}
ONE_TARGET = Mistake("one-target", "your targets hold one token per window, shape {got}: how many positions of a "
                     "window make a prediction?", more="every position learns the token after it: targets are (n, T).")


def _width(case, got, args, watch) -> Verdict | None:
    """Windows of another width than T; right windows, but one too many or too few."""
    data, T = case
    shapes = [tuple(t.shape) for t in got if isinstance(t, torch.Tensor)]   # one target per window: (n,) or (n, 1)
    if len(shapes) == 2 and len(shapes[0]) == 2 and shapes[0][1] > 1 and shapes[1] in (shapes[0][:1], (len(got[0]), 1)):
        return named(ONE_TARGET, got=shapes[1])
    got = [t for t in got if isinstance(t, torch.Tensor) and t.dim() == 2]
    wrong = [t.shape[-1] for t in got if t.shape[-1] != T]
    if len(got) != 2 or wrong:
        return named(WIDTH, got=wrong[0], T=T) if len(got) == 2 else None
    want = _cut(data, T)
    right = all(torch.equal(g[:len(w)].to(w.dtype), w[:len(g)]) for g, w in zip(got, want))
    extra = {len(g) - len(w) for g, w in zip(got, want)}
    return named(COUNT[extra.pop()], got=len(got[0]), N=len(data), T=T) if right and extra in ({1}, {-1}) else None


@checker(mistakes=[*_WINDOWS_MISTAKES, WIDTH, COUNT[1], ONE_TARGET])
def check_text_windows(fn) -> Verdict:
    """``fn(data, T)`` → (inputs, targets), each (n, T), consecutive windows with next-token targets."""
    return judge(fn, _windows_cases(), _cut, _WINDOWS_MISTAKES, properties=_width, success="consecutive windows "
                 "from the start, as many as have their targets, each target the next token of its input.")


# --- extend: chunked prefill and greedy generation with your own K/V cache ----------------------------------------
# seed, vocab_size, d_model, h, L, pos, T0, n_new, weight scale, chunk: prompts fed as 4 + 4 + 2 and 3 + 3 + 2, so a
# later chunk has T_q < T_k; the scales make context and position decide the greedy choices.
_GEN_CASES = ((118, 23, 16, 2, 2, "learned", 10, 8, 3.0, 4), (144, 19, 12, 3, 2, "rope", 8, 8, 2.0, 3))


class _Shortcut(RuntimeError):
    """Raised by a guarded model's own cached generation (always with one argument, so one mistake matches)."""


_OFF_LIMITS = "model.generate, model(ids, caches) and a block called with cache= are off limits"


def _refuse(*args, **kwargs):
    raise _Shortcut(_OFF_LIMITS)


def _guarded(forward):
    def call(x, caches=None, *, cache=None, **kwargs):
        return _refuse() if cache is not None or caches is not None else forward(x, **kwargs)
    return call


def _fresh_model(i: int, guarded: bool = False):
    """Case i: a new GPT whose greedy choices depend on context and position, its prompt (1, T0), n_new, chunk."""
    seed, vocab, d_model, h, L, pos, T0, n_new, s, chunk = _GEN_CASES[i]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab, d_model, h, L, max_T=32, pos=pos)).eval()
        with torch.no_grad():
            model.head.weight.mul_(8.0)
            for p in [p for b in model.blocks for p in (b.attn.W_QKV.weight, b.attn.W_O.weight)] + list(
                    model.positions.parameters() if model.positions is not None else ()):
                p.mul_(s)
            for norm in [m for m in model.modules() if isinstance(m, nn.LayerNorm)]:   # ln_1 ≠ ln_2 ≠ ln_f
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.normal_(0.0, 0.3)
        ids = torch.randint(0, vocab, (1, T0))
    if guarded:
        model.generate = _refuse
        for module in [model, *(m for m in model.modules() if isinstance(m, (Block, MultiHeadAttention)))]:
            module.forward = _guarded(module.forward)
    return model, ids, n_new, chunk


def _masked(Q, K, V, *, mask):
    """Attention with a wrong mask: top-left (always, or for chunks), one-ahead, square-only (T_q = T_k), none."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    start = {"top-left": 1, "one-ahead": 2 + T_k - T_q, "square-only": 1 if T_q == T_k else T_k, "none": T_k,
             "chunks": 1 if T_q > 1 else T_k}[mask]
    return attention(Q, K, V, causal=False, mask=~torch.ones(T_q, T_k, dtype=torch.bool).triu(start))


def _generate_variant(model, ids, n_new, chunk, *, offset="cached", zero=("embed", "qkv"), attend=attention,
                      self_first=True, cache="extend", chunked=True, mlp_norm="ln_2", refeed=False, head="ln_f"):
    """Chunked prefill and greedy generation with a K/V cache per layer; a switch off its default plants a mistake."""
    past = [None] * len(model.blocks)
    T0, todo, fed, steps = ids.shape[1], ids, 0, 0
    while ids.shape[1] < T0 + n_new:
        size = chunk if chunked else todo.shape[1]
        new, todo = todo[:, :size], todo[:, size:]
        at = {"cached": fed, "zero": 0, "steps": steps, "plus-one": fed + int(fed >= T0),
              "cache-length": 0 if past[0] is None else past[0][0].shape[-2], "chunks": steps * chunk}[offset]
        X = model.embed_tokens(new, at if "embed" in zero else fed)
        for l, block in zip(itertools.repeat(0) if cache == "shared" else itertools.count(), model.blocks):
            Q, K, V = block.attn.qkv(block.ln_1(X), at if "qkv" in zero else fed)
            K_all, V_all = (K, V) if past[l] is None else (torch.cat([past[l][0], K], -2),
                                                           torch.cat([past[l][1], V], -2))
            if past[l] is None or cache != "prompt-only" or fed < T0:
                past[l] = (K, V) if cache == "overwrite" else (K_all, V_all)
            if cache == "overwrite" or cache == "chunks-alone" and fed < T0:
                K_all, V_all = K, V
            if not self_first and K_all.shape[-2] > Q.shape[-2]:
                out = attention(Q, K_all[..., :-Q.shape[-2], :], V_all[..., :-Q.shape[-2], :], causal=False)
            else:
                out = attend(Q, K_all, V_all)
            X = X + block.attn.W_O(merge_heads(out))
            X = X + block.mlp(getattr(block, mlp_norm)(X))
        fed, steps = fed + new.shape[1], steps + 1
        if todo.shape[1] == 0 and refeed and fed == T0:
            todo, fed, refeed = ids[:, -1:], T0 - 1, False        # the prompt's last token again, at its place
        elif todo.shape[1] == 0:
            Y = X if head == "no-ln_f" else model.ln_f(X)
            todo = model.head(Y)[:, 0 if head == "first-row" else -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, todo], dim=1)
    return ids


_NO_OFFSET = ("your tokens go wrong once the first chunk is in: at which position do the rows of a later step sit?",
              "every step placed its rows at positions from 0; both the embedding (learned positions) and qkv "
              "(RoPE) need the number of positions already cached.")
_TOP_LEFT = ("a later chunk reads only the first keys of the cache: where does your mask put its queries?",
             "is_causal aligns its triangle top-left when T_q < T_k; a chunk's query i sits at position T_k − T_q + i.")
_SHARED = ("does a layer read the keys of another layer? How many caches does your model keep?",
           "each block's attention has its own K and V: keep one cache per layer, each appended at every step.")
_NOT_UPDATED = ("after the prompt, does each generated token see the tokens generated before it?",
                "the cache keeps only the prompt's K and V: append each generated token's too.")

_GEN_VARIANTS = variants(_generate_variant, [
    *[("no-offset", dict(offset="zero", zero=parts), *_NO_OFFSET) for parts in (("embed", "qkv"), ("embed",),
                                                                                 ("qkv",))],
    ("offset-counts-steps", dict(offset="steps"), "the rows of a later chunk sit at the wrong positions: what "
     "does your offset count?", "your offset counts the steps taken; it is the number of positions in the cache."),
    ("offset-one-too-far", dict(offset="plus-one"), "the prompt is right, and every generated token is placed one "
     "position too late: where does the newest token sit?", "your offset counted the newest token itself too."),
    *[("top-left-mask", dict(attend=partial(_masked, mask=m)), *_TOP_LEFT) for m in ("top-left", "chunks")],
    ("unmasked", dict(attend=partial(_masked, mask="none")), "may a query of a prompt chunk read the keys of "
     "later tokens of its chunk?", "a chunk of several tokens needs the causal mask, shifted after the cache."),
    ("later-chunks-unmasked", dict(attend=partial(_masked, mask="square-only")), "the first chunk is right, the "
     "later ones are not: which keys does a later chunk's first query read?", "you masked only when T_q = T_k."),
    ("one-ahead", dict(attend=partial(_masked, mask="one-ahead")), "each query of a chunk reads one key "
     "too many: which is the last key query i may read?", "your mask lets each query read the key after its own."),
    ("not-self", dict(self_first=False), "does a new row read itself? When do you append a step's K and V?",
     "you attended before appending the step's own K and V, so each new row read only the past."),
    ("ln_1-for-mlp", dict(mlp_norm="ln_1"), "which LayerNorm reads the stream before each block's MLP?",
     "you normalised the MLP's input with ln_1, attention's LayerNorm; the MLP has its own, ln_2."),
    *[("cache-not-updated", dict(cache="prompt-only", offset=offset), *_NOT_UPDATED)
      for offset in ("cached", "cache-length")],
    ("cache-overwritten", dict(cache="overwrite"), "does a step read the keys of the steps before it?",
     "each step replaced the cache by its own K and V; append them to what the cache holds."),
    ("chunks-alone", dict(cache="chunks-alone"), "do the prompt's later chunks read the keys of the earlier ones?",
     "each prompt chunk attended to its own keys only; it reads the cache of the earlier chunks too."),
    ("last-token-twice", dict(refeed=True), "after the prompt, which token does your first step feed: is it in the "
     "cache already?", "you fed the prompt's last token twice; the first new token comes from the last chunk."),
    ("no-ln_f", dict(head="no-ln_f"), "what stands between the last block and the head?", "the head reads the last "
     "block's output after the final LayerNorm, ln_f; yours reads it raw."),
    ("first-row", dict(head="first-row"), "from which row of the prompt's last chunk do you choose the first new "
     "token?", "the next token follows the chunk's last position; you read the head at its first row."),
    ("shared-cache", dict(cache="shared"), *_SHARED),
])
_GEN_RAISING = variants(_generate_variant, [   # offsets that run past max_T: named by the library's error
    ("offset-counts-chunks", dict(offset="chunks"), "your offset is right while the chunks are full: what does it "
     "count?", "your offset counts chunks × chunk; a short chunk or a new token adds fewer positions than chunk."),
    ("shared-cache", dict(cache="shared", offset="cache-length"), *_SHARED)])


def _generation(fn, observed: dict | None = None):
    """``fn`` as judge sees it: case i → (tokens, each position projected once per layer, no step wider than
    chunk, every row given to ln_f right, the last such row); what was seen goes to ``observed[i]``."""
    def run(i):
        model, ids, n_new, chunk = _fresh_model(i, guarded=True)
        counts, widest, seen = [0] * len(model.blocks), [0], []

        def count(l, mod, inp, out):
            counts[l] += inp[0].shape[-2]
            widest[0] = max(widest[0], inp[0].shape[-2])

        def read(mod, inp, out):        # every row given to ln_f, and the position it stands for
            rows = inp[0].detach().clone().unbind(-2) if inp[0].dim() == 3 else (inp[0].detach().clone(),)
            seen.extend((counts[0] - len(rows) + j, row) for j, row in enumerate(rows))

        hooks = [b.attn.W_QKV.register_forward_hook(functools.partial(count, l)) for l, b in enumerate(model.blocks)]
        hooks.append(model.ln_f.register_forward_hook(read))
        try:
            with torch.no_grad():
                got = fn(model, ids, n_new, chunk)
        finally:
            for hook in hooks:
                hook.remove()
        if observed is not None:
            observed[i] = (got, counts, widest[0], seen)
        return None if got is None else (got, max(counts) <= ids.shape[1] + n_new, widest[0] <= chunk,
                                         _first_bad_row(i, got, seen) is None, seen[-1][1] if seen else None)
    return run


def _first_bad_row(i, got, seen) -> int | None:
    """The first position whose row given to ln_f differs from X_L of the whole sequence ``got``; else None."""
    try:
        with torch.no_grad():
            X_L = _fresh_model(i)[0].hidden_states(got)[-1]                    # (1, T, d_model)
    except Exception:  # noqa: BLE001 - tokens that are no token IDs: the comparison of tokens says so
        return seen[0][0] if seen else -1
    atol = 1e-4 * (1 + X_L.abs().max().item())
    return next((p for p, row in seen if not (0 <= p < X_L.shape[1] and row.shape == X_L[:, p].shape and
                                              torch.allclose(row.to(X_L.dtype), X_L[:, p], atol=atol, rtol=1e-4))),
                None)


@functools.cache
def _recomputed(i):
    """The reference: the library's generation without a cache, recomputing the whole prefix at every step."""
    model, ids, n_new, _ = _fresh_model(i)
    with torch.no_grad():
        tokens = model.generate(ids, n_new, use_cache=False)
        return tokens, True, True, True, model.hidden_states(tokens[:, :-1])[-1][:, -1]


_planted = lambda variant: functools.cache(_generation(variant))   # a planted slip, run once per case


NO_CACHE, CHUNK_TOO_BIG, PROMPT_MISSING, SHORTCUT, ROWS_DIFFER, TOKENS_DIFFER, WRONG_LENGTH, NOT_TOKENS = (
    Mistake(label, hint, wrong, more) for label, hint, more, wrong in [
        ("no-cache", "the tokens are right, but a layer projected some positions more than once: which rows does "
         "a step need to feed?", "keep each layer's K and V and feed only the new rows.",
         functools.cache(lambda i: (_recomputed(i)[0], False, False, False, _recomputed(i)[4]))),
        ("chunk-too-big", "the tokens are right, but one step fed more than chunk positions to a layer: how is the "
         "prompt fed?", "feed the prompt in pieces of at most chunk tokens, then one token at a time.",
         _planted(functools.partial(_generate_variant, chunked=False))),
        ("prompt-missing", "your new tokens are right: what should come before them in the result?",
         "return the prompt followed by the new tokens, (1, T0 + n_new), as model.generate does.",
         _planted(lambda model, ids, n_new, chunk: _generate_variant(model, ids, n_new, chunk)[:, ids.shape[1]:])),
        ("shortcut", f"your function called the library's answer: {_OFF_LIMITS}. Which parts does one step need?",
         "use embed_tokens, the blocks' ln_1, attn.qkv, attn.W_O, ln_2 and mlp, then ln_f and head, and keep each "
         "layer's K and V yourself.", lambda i: _refuse()),
        ("rows-differ", "the tokens are right, but at position {p} the last layer's output differs from "
         "recomputing the whole prefix: which keys does that row read, and where does it sit?", "compare one step "
         "with model.hidden_states on the whole prefix: the first layer that differs at {p} holds the mistake.", None),
        ("values", "the tokens differ from recomputation from position {first} on (the prompt has {T0} tokens, fed "
         "in chunks of {chunk}): is the first wrong token in the prompt's last step or after it?", "compare one "
         "cached step with model(ids) on the whole prefix: the first layer whose rows differ holds the mistake.", None),
        ("shape", "the result has shape {got}, expected {want}: the prompt (T0 = {T0}) followed by n_new = {n_new} "
         "tokens. How many times does your loop choose a token?", "every new token is chosen once, after the "
         "prompt is in; the last one is returned without being fed.", None),
        ("type", "expected a tensor of token IDs, got {what}.", "return the prompt and the new tokens as one "
         "tensor (1, T0 + n_new), as model.generate does; you returned {what}.", None)])

_GEN_MISTAKES = [Mistake(m.label, m.hint, _planted(m.wrong), m.more) for m in _GEN_VARIANTS + _GEN_RAISING] + [
    NO_CACHE, CHUNK_TOO_BIG, PROMPT_MISSING, SHORTCUT]


def _diagnose_generation(observed: dict) -> Verdict | None:
    """Tokens of the wrong type, shape or value (named by the one planted slip whose greedy tokens are the
    learner's on every case), or a property that fails, read from what was observed."""
    slips = {m.label: m for m in _GEN_MISTAKES[:len(_GEN_VARIANTS)] if all(
        isinstance(got, torch.Tensor) and _close(got, m.wrong(i)[0], 0) for i, (got, *_) in observed.items())}
    for i, (got, counts, widest, seen) in sorted(observed.items()):
        want, (*_, T0, n_new, _, chunk) = _recomputed(i)[0], _GEN_CASES[i]
        if not isinstance(got, torch.Tensor):
            return named(NOT_TOKENS, what=type(got).__name__)
        if got.shape != want.shape:
            return named(WRONG_LENGTH, got=tuple(got.shape), want=tuple(want.shape), T0=T0, n_new=n_new)
        if not torch.equal(got, want):
            first = int((got != want).reshape(-1).nonzero()[0])
            return named(slips.popitem()[1]) if len(slips) == 1 else named(TOKENS_DIFFER, first=first, T0=T0,
                                                                            chunk=chunk)
        bad = _first_bad_row(i, got, seen)
        for mistake, fails in ((NO_CACHE, max(counts) > T0 + n_new), (CHUNK_TOO_BIG, widest > chunk),
                               (ROWS_DIFFER, bad is not None)):
            if fails:
                return named(mistake, p=bad)
    return None


@checker(mistakes=[*_GEN_MISTAKES, ROWS_DIFFER, TOKENS_DIFFER, WRONG_LENGTH, NOT_TOKENS])
def check_cached_generation(fn) -> Verdict:
    """``fn(model, ids, n_new, chunk)``: chunked prefill and greedy generation with the learner's own cache."""
    observed: dict = {}

    def diagnose(verdict, run):
        run.outputs()                                    # every case observed, each run once
        return _diagnose_generation(observed) if verdict.mistake in (
            "values", "type", "shape", "length", "dtype", "device") else None
    return judge(_generation(fn, observed) if callable(fn) else fn, [(i,) for i in range(len(_GEN_CASES))],
                 _recomputed, _GEN_MISTAKES, diagnose=diagnose,
                 success="the same tokens and the same last-layer rows as recomputing the whole prefix, the "
                         "prompt fed in chunks and every position projected once per layer.")
