"""Exercise checkers for the stack chapter (chapter 8).

``check_deepen(fn)``: ``fn(blocks)``, an ``nn.ModuleList`` of L blocks → an ``nn.ModuleList`` of 2L: the copy of
block i at 2i, a new block of its settings that starts as the identity (and can learn) at 2i + 1, nothing shared.
``check_logit_lens(fn)``: ``fn(X0, blocks, ln_f, head)`` → head(ln_f(X_l)) for l = 0 … L, (L + 1, B, T, vocab_size).
``check_text_windows(fn)``: ``fn(data, T)`` → (inputs, targets), each (n, T): consecutive windows with next-token
targets, as many as fit.
``check_cached_generation(fn)``: ``fn(model, ids, n_new, chunk)`` → (1, T0 + n_new): the prompt fed in chunks of at
most ``chunk``, then n_new greedy tokens, with every layer's K and V kept by the learner's code.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from ..attention import attention, softmax
from ..block import Block
from ..heads import MultiHeadAttention, merge_heads
from ..model import GPT, GPTConfig
from ._core import Mistake, Verdict, _dtype_name, _gen, checker, judge, named, variants

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
    a, m = block.attn, block.mlp
    params = list(block.parameters())
    return {"d_model": block.d_model, "h": a.h, "h_kv": a.h_kv, "d_ff": m.d_ff, "rope": bool(a.rope),
            "norm": block.norm, "bias": m.W_1.bias is not None, "gelu": m.gelu,
            "dtype": _dtype_name(params[0].dtype) if len({p.dtype for p in params}) == 1 else "mixed",
            "device": str(params[0].device)}[field]


def _entries(out) -> list | None:
    """The entries of what the learner returned, when it is a collection of Blocks; else None."""
    if out is None or isinstance(out, (nn.Module, torch.Tensor)) and not isinstance(out, nn.ModuleList):
        return None
    try:
        items = list(out)
    except TypeError:
        return None
    return items if all(isinstance(b, Block) for b in items) else None


def _storages(module: nn.Module) -> dict[int, str]:
    return {p.untyped_storage().data_ptr(): name for name, p in module.named_parameters() if p.numel()}


def _identity_kind(block: Block, X: torch.Tensor) -> int:
    """0: block(X) is X; 1: it adds one vector to every position; 2: it changes X otherwise; 3: it cannot run."""
    try:
        with torch.no_grad():
            Y = block(X)
    except Exception:  # noqa: BLE001 - a block of the wrong dtype or size
        return 3
    if not isinstance(Y, torch.Tensor) or Y.shape != X.shape:
        return 3
    D = (Y - X).double()
    tol = 1e-5 * (1.0 + X.double().abs().max().item())
    if D.abs().max().item() <= tol:
        return 0
    return 1 if (D - D[:1, :1]).abs().max().item() <= tol else 2


_DEEPEN = {label: Mistake(label, hint, more=more) for label, hint, more in [   # found by _explain_stack
    ("type", "return an nn.ModuleList of Blocks, 2L of them; got {what}.",
     "return an nn.ModuleList whose entries are Block objects: for L given blocks, 2L entries, a copy of each "
     "given block followed by its new block. You returned {what}."),
    ("wrong-count", "your stack has {n} entries for {L} given blocks: how many blocks does each given one become?",
     "each given block becomes two entries, its copy and a new block after it: 2L = {want} entries, not {n}."),
    ("shared-parameters",
     "entry {k} of your stack shares its parameter {name} with block {i} that was passed in: training the "
     "deeper stack would change the old one too. Did you copy the numbers, or hand over the same tensors?",
     "entry {k}'s {name} is the same storage as a parameter of given block {i}. Putting a given module into the "
     "new list, or assigning one of its layers or parameters, shares it; a deep copy owns its numbers."),
    ("same-block",
     "entries {a} and {b} of your stack are one Block object: setting up one of them changes the other. How "
     "many blocks did you create for each given one?",
     "entries {a} and {b} are the same object, so the copy and the new block cannot differ. Create the new "
     "block as an object of its own."),
    ("shared-between",
     "entries {a} and {b} of your stack share the parameter {name}: can the two ever learn different numbers?",
     "entries {a} and {b} hold the same tensor {name}; every entry must own all of its parameters, so make each "
     "new block's layers its own."),
    ("wrong-heads",
     "entry {k} has {got} heads, block {i} has {want}. The weights have the same shapes for any number of "
     "heads: where can you read a block's number of heads?",
     "every attention module keeps its number of heads as a setting (no weight shape shows it), and a block "
     "keeps its other sizes too. A new block repeats all of them, or starts as a copy of the block it follows."),
    ("wrong-d_ff",
     "entry {k}'s MLP is {got} wide, block {i}'s is {want}: what width does a Block get when you do not say?",
     "a Block's default d_ff is 4·d_model; the given blocks are narrower. Give the new block the width of the "
     "block it follows (or start from a copy of it)."),
    ("wrong-dtype", "entry {k}'s parameters are {got}, block {i}'s are {want}: in which dtype is a new module "
     "created?",
     "a new module's parameters are float32, whatever its neighbours hold; convert it to the dtype of the given "
     "blocks (or start from a copy of one)."),
    ("wrong-structure",
     "entry {k} is not set up like block {i}: its {field} is {got}, block {i}'s is {want}. Which settings of "
     "a block do its weights not show?",
     "a new block repeats every setting of the block it follows ({field} included), or starts as a copy of it."),
    ("order", "entry {k} of your stack {does}, where {wanted} belongs: in which order do the entries go?",
     "entry 2i is the copy of block i and entry 2i + 1 the new block right after it, so that each new block "
     "reads the output of the block it was added to; yours are in another order."),
    ("copy-differs",
     "entry {k} should compute what block {i} computes, and on a test input it does not: are all of its "
     "numbers block {i}'s?",
     "entry {k} must be a copy of block {i}: every parameter (both LayerNorms included) with block {i}'s "
     "values, in a block of the same settings."),
    ("constant-added",
     "entry {k} adds one and the same vector to every position instead of leaving X as it is: which part of a "
     "sublayer still adds something when its input or its weight is zero?",
     "a Linear layer adds its bias even when its input or weight is zero. For X + attention + MLP to equal X, "
     "the last layer of each sublayer (W_O, and the MLP's second layer) must output zero: its weight and its "
     "bias."),
    ("not-identity",
     "entry {k} changes its input, so the deeper stack no longer computes what the old one did: what must a "
     "new block add to the residual stream?",
     "a new block starts as the identity when both of its sublayers add zero: the output layers of the "
     "attention (W_O) and of the MLP (its second layer), weights and biases, start at zero."),
    ("dead-block",
     "entry {k} leaves X as it is, but its {part} weights are all zero as well: what gradient would ever "
     "reach them?",
     "with a sublayer's first layer zero too, nothing flows back into that sublayer and it stays at zero. Only "
     "the output layers (weight and bias) need to be zero; the rest stays as it was, random or copied."),
    ("frozen",
     "entry {k} cannot learn: its parameter {name} has requires_grad=False. The new blocks start as the "
     "identity and must still be able to learn: which of your steps switched learning off?",
     "entry {k}'s {name} is frozen, so training leaves it as it is and the block stays the identity for ever. "
     "Change the output layers' values without turning off their gradient."),
    ("not-modulelist",
     "the blocks are right, but you returned a plain {what}: a module that stores it sees {seen} of its "
     "{total:,} parameters. What does a model's parameters() see?",
     "a plain Python collection of modules is not registered: parameters(), the optimiser and .to(device) "
     "would all miss the blocks. Return an nn.ModuleList."),
]}


def _zero_outside_no_grad(blocks):
    """The planted error: an output layer zeroed in place while autograd records (torch refuses)."""
    new = Block(blocks[0].d_model, blocks[0].attn.h)
    new.attn.W_O.weight.zero_()


NO_GRAD = Mistake(
    "in-place-with-grad",
    "torch refused to change a trainable parameter in place while it records gradients: how do you tell it "
    "not to record while you set the numbers?", _zero_outside_no_grad,
    more="set the numbers inside a block where autograd records nothing (torch's no-grad mode), or with the "
         "functions of torch.nn.init, which switch it off for you.")


def _n_params(modules) -> int:
    return sum(p.numel() for p in {id(p): p for m in modules for p in m.parameters()}.values())


def _role(entry: Block, X: torch.Tensor, outputs: list[torch.Tensor]):
    """What ``entry`` computes on the probe X: "identity", the index of the given block it equals, or None."""
    if _identity_kind(entry, X) == 0:
        return "identity"
    Y = entry(X)
    return next((i for i, want in enumerate(outputs) if torch.allclose(Y, want, atol=1e-5, rtol=1e-4)), None)


def _explain_stack(case, out, args, watch) -> Verdict | None:
    """The first thing wrong with ``out`` as the deeper stack of the given blocks (as passed in); None if nothing."""
    given, = args
    L, D = len(given), _DEEPEN
    items = _entries(out)
    if items is None:
        return named(D["type"], what=f"a {type(out).__name__}")
    if len(items) != 2 * L:
        return named(D["wrong-count"], n=len(items), L=L, want=2 * L)
    owners = {ptr: (i, name) for i, b in enumerate(given) for ptr, name in _storages(b).items()}
    for k, b in enumerate(items):
        for ptr, name in _storages(b).items():
            if ptr in owners:
                return named(D["shared-parameters"], k=k, i=owners[ptr][0], name=name)
    for a in range(len(items)):
        for b in range(a + 1, len(items)):
            if items[a] is items[b]:
                return named(D["same-block"], a=a, b=b)
            both = set(_storages(items[a])) & set(_storages(items[b]))
            if both:
                return named(D["shared-between"], a=a, b=b, name=_storages(items[b])[both.pop()])
    for k, b in enumerate(items):
        for field in _FIELDS:
            got, want = _setting(b, field), _setting(given[k // 2], field)
            if got != want:
                label = {"h": "wrong-heads", "d_ff": "wrong-d_ff", "dtype": "wrong-dtype"}.get(field, "wrong-structure")
                return named(D[label], k=k, i=k // 2, field=field, got=got, want=want)
    dtype = next(given.parameters()).dtype
    X = torch.randn(2, 5, given[0].d_model, generator=_gen(88), dtype=torch.float64).to(dtype)   # the probe
    with torch.no_grad():
        outputs = [block(X) for block in given]
        for k, entry in enumerate(items):
            role = _role(entry, X, outputs)
            if k % 2 == 0 and role == k // 2 or k % 2 == 1 and role == "identity":
                continue
            if role is not None:
                does = "starts as the identity" if role == "identity" else f"computes block {role}"
                wanted = f"the copy of block {k // 2}" if k % 2 == 0 else f"the new block after block {k // 2}"
                return named(D["order"], k=k, does=does, wanted=wanted)
            if k % 2 == 0:
                return named(D["copy-differs"], k=k, i=k // 2)
            return named(D["constant-added" if _identity_kind(entry, X) == 1 else "not-identity"], k=k)
        for k, entry in enumerate(items[1::2]):   # a first layer all zero: no gradient ever reaches it
            for part, W in (("attention", entry.attn.W_QKV.weight), ("MLP", entry.mlp.W_1.weight)):
                if not bool(W.detach().any()):
                    return named(D["dead-block"], k=2 * k + 1, part=part)
    for k, entry in enumerate(items[1::2]):
        frozen = [n for n, p in entry.named_parameters() if not p.requires_grad]
        if frozen:
            return named(D["frozen"], k=2 * k + 1, name=frozen[0])
    if not isinstance(out, nn.ModuleList):
        holder = nn.Module()
        holder.blocks = out
        return named(D["not-modulelist"], what=type(out).__name__, seen=_n_params([holder]), total=_n_params(items))
    return None


@checker(mistakes=[*_DEEPEN.values(), NO_GRAD])
def check_deepen(fn) -> Verdict:
    """``fn(blocks)`` → 2L blocks: each given block's copy, then a new block that starts as the identity."""
    return judge(fn, [_fresh_blocks(i) for i in range(len(_DEEPEN_CASES))], None, [NO_GRAD],
                 properties=_explain_stack,
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
        with torch.no_grad():
            ln_f.weight.uniform_(0.5, 1.5)
            ln_f.bias.normal_(0.0, 0.3)
        head = nn.Linear(d_model, vocab, bias=False)
        X0 = torch.randn(B, T, d_model) * 2.0
    return X0.to(dtype), blocks.to(dtype), ln_f.to(dtype), head.to(dtype)


def _lens(X0, blocks, ln_f, head, *, read="normed", stream="raw", first=True, last=True, from_X0=False,
          reverse=False, probs=False, axis=0):
    """Every layer read by the head; every switch's default is right, any other value plants a mistake."""
    order = list(blocks)[::-1] if reverse else list(blocks)
    X, Xs = X0, [X0]
    for block in order:
        X = block(X0 if from_X0 else ln_f(X) if stream == "normed" else X)
        X = ln_f(X) if stream == "normed-after" else X
        Xs.append(X)
    if stream == "normed-after":
        Xs[0] = ln_f(X0)
    L = len(Xs) - 1
    reads = [head(X if read == "raw" or (read == "raw-but-last" and l < L) or stream == "normed-after"
                  else ln_f(X)) for l, X in enumerate(Xs)]
    reads = reads[(0 if first else 1):(L + 1 if last else L)]
    out = torch.stack(reads, dim=axis)
    return out.softmax(-1) if probs else out


_LENS_MISTAKES = variants(_lens, [
    ("raw-reads", dict(read="raw"),
     "none of your readings matches, not even the last one: what happens to X_L between the last block and "
     "the head?",
     "the model normalises X_L with the final LayerNorm before the head; read every X_l through ln_f, then "
     "the head."),
    ("raw-but-last", dict(read="raw-but-last"),
     "your last reading is right and the earlier ones are not: what does the model do to X_L before the "
     "head, and did the other X_l get the same?",
     "only X_L went through ln_f. Every X_l has its own scale (the residual stream grows from layer to "
     "layer): read each one exactly as X_L is read, through ln_f and then the head."),
    *[("normed-stream", dict(stream=form),
       "your first reading is right and the later ones drift away: does reading a layer change what the next "
       "block receives?",
       "you passed the normalised X_l on to the next block. The reading is a side branch: normalise for the "
       "head only, and feed the blocks the raw residual stream.") for form in ("normed", "normed-after")],
    ("missing-x0", dict(first=False),
     "you returned L readings for L blocks: how many residual streams X_0 … X_L are there to read?",
     "the embeddings X₀ are read too, before any block: L blocks give L + 1 readings."),
    ("missing-last", dict(last=False),
     "your readings stop one layer early: is the output of the last block read?",
     "you read each X_l before its block, and never X_L after the last one: L blocks give L + 1 readings."),
    ("x0-every-block", dict(from_X0=True),
     "is your reading at layer l the output of l blocks, applied one after the other?",
     "every block read X₀, so each reading shows one block alone. Block l + 1 reads X_l, the output of "
     "block l."),
    ("reversed", dict(reverse=True),
     "in which order do the blocks run?",
     "you ran the blocks in reverse order: block 0 reads X₀, block 1 reads X₁, and so on."),
    ("probabilities", dict(probs=True),
     "every row of your readings sums to 1: does the head give probabilities?",
     "you applied a softmax. The head's outputs are logits; return those, and leave the softmax to whoever "
     "turns them into a choice."),
    ("layer-axis", dict(axis=1),
     "your numbers are right but the axes are in another order: which axis should count the layers?",
     "the readings go on a new first axis: (L + 1, B, T, vocab_size), reading l at index l."),
])


@checker(mistakes=_LENS_MISTAKES)
def check_logit_lens(fn) -> Verdict:
    """Check ``fn(X0, blocks, ln_f, head)`` returns head(ln_f(X_l)) for l = 0 … L as (L + 1, B, T, vocab_size)."""
    cases = [_fresh_lens(i) for i in range(len(_LENS_CASES))]
    with torch.no_grad():
        return judge(fn, cases, _lens, _LENS_MISTAKES,
                     success="every X_l, from X₀ to X_L, is read through ln_f and the head, and the blocks "
                             "receive the raw stream.")


# --- build: cut a text into training windows -------------------------------------------------------------------------

def _windows_cases() -> list[tuple]:
    data = (torch.arange(40) * 7) % 41          # 40 different token IDs, in no sorted order
    # T divides len(data) in the first and the last case: there the window that would end the text has no target
    return [(data, 5), (data[:38], 4), (data[3:27], 6)]


def _cut(data, T, *, n=None, stride=None, dx=0, dy=1, roll=False, positions=torch.long):
    """Windows starting at 0, stride, 2·stride, …: inputs data[s+dx : s+dx+T], targets data[s+dy : s+dy+T]; the
    defaults are right, others plant a mistake."""
    stride = {None: T, "gap": T + 1, "T-1": T - 1}.get(stride, stride)
    count = (len(data) - 1 - T) // stride + 1        # the last target, data[s + T], must exist
    count = count - 1 if n == "fewer" else count
    idx = (torch.arange(count)[:, None] * stride + torch.arange(T)).to(positions)
    inputs = data[idx + dx]
    return inputs, inputs.roll(-1, 1) if roll else data[idx + dy]


_WINDOWS_MISTAKES = variants(_cut, [
    ("no-shift", dict(dy=0),
     "your targets equal your inputs: what should the model learn to say at position i?",
     "the target at position i is the token after it, the same window one step later; yours would teach the "
     "model to repeat the token it already sees."),
    ("swapped", dict(dx=1, dy=0),
     "your inputs start one token late and your targets are where the inputs should be: which of the two "
     "begins where the window begins?",
     "inputs and targets are swapped: the inputs begin at the window's start, the targets one token later."),
    ("shifted-back", dict(dy=-1),
     "the target of position i should be a token the model has not seen yet: is yours after position i, or "
     "before it?",
     "your targets are shifted the wrong way, one token back: each target is the token before its input. The "
     "target of position i is the token right after it."),
    ("shift-by-two", dict(dy=2),
     "how far after position i is the token that position i must predict?",
     "you shifted the targets by two: the target of position i is the token right after it."),
    ("rolled", dict(roll=True),
     "all targets are right but the last of each window: where does your last target come from?",
     "you rolled each window by one, so its last target wrapped round to its own first input. The last target "
     "is the token after the window, data[s + T]."),
    ("overlapping", dict(stride=1),
     "your windows overlap: is every token an input in exactly one window?",
     "you started a window at every token. The windows follow each other: each one starts where the inputs "
     "of the one before end."),
    ("overlap-by-one", dict(stride="T-1"),
     "each of your windows starts on the last input of the one before: is every token an input exactly once?",
     "you stepped by T − 1, so that a window's last input is the next window's first. Step by T: a window's "
     "last target is the next window's first input, and no input repeats."),
    ("gap", dict(stride="gap"),
     "some tokens are never an input: where does a window start, compared with where the one before ends?",
     "you left one token between two windows, so that targets and the next inputs would not overlap. They "
     "may: the last target of a window is the first input of the next, and every token is still an input "
     "exactly once."),
    ("one-too-few", dict(n="fewer"),
     "is there room for one more window at the end of the text?",
     "the last window fits as long as its last target exists; you stopped one window early."),
    ("float-positions", dict(positions=torch.float32),
     "torch refused to index the text with your positions: what dtype are they?",
     "positions that index a tensor must be integers (int64); a division or linspace makes floats."),
]) + [Mistake(
    "one-too-many",
    "your answer is right when T does not divide the length of the text, and wrong when it does: does the "
    "target of the last token of your last window exist?", _cut,
    more="every input token needs the token after it as its target, so the last token of the text is never an "
         "input: count the windows that fit in all tokens but the last.",
    where=lambda case: len(case[0]) % case[1] != 0)]

WIDTH = Mistake(
    "window-width",
    "your windows are {got} tokens wide for T = {T}: how many inputs does a window hold, and where do its "
    "targets come from?",
    more="a window holds T inputs; its T targets are the same positions shifted by one, so a window reads T + 1 "
         "tokens of the text but returns two (n, T) tensors, not (n, T + 1) ones.")


def _width(case, got, args, watch) -> Verdict | None:
    """WIDTH when the inputs or targets come back as windows of another width than T."""
    T, widths = case[1], [t.shape[-1] for t in got if isinstance(t, torch.Tensor) and t.dim() == 2]
    wrong = [w for w in widths if w != T]
    return named(WIDTH, got=wrong[0], T=T) if wrong and len(widths) == 2 else None


@checker(mistakes=[*_WINDOWS_MISTAKES, WIDTH])
def check_text_windows(fn) -> Verdict:
    """``fn(data, T)`` → (inputs, targets), each (n, T), consecutive windows with next-token targets."""
    return judge(fn, _windows_cases(), _cut, _WINDOWS_MISTAKES, properties=_width,
                 success="consecutive windows from the start, as many as have their targets, each target the "
                         "next token of its input.")


# --- extend: chunked prefill and greedy generation with your own K/V cache ----------------------------------------

# seed, vocab_size, d_model, h, L, pos, T0, n_new, weight scale, chunk: prompts fed as 4 + 4 + 2 and 3 + 3 + 2, so a
# later chunk has T_q < T_k; the scales make context and position decide the greedy choices.
_GEN_CASES = ((118, 23, 16, 2, 2, "learned", 10, 8, 3.0, 4), (144, 19, 12, 3, 2, "rope", 8, 8, 2.0, 3))


class _Shortcut(RuntimeError):
    """Raised by a guarded model's own cached generation (always with one argument, so one mistake matches)."""


_OFF_LIMITS = "model.generate, model(ids, caches) and a block called with cache= are off limits"


def _fresh_model(i: int, guarded: bool = False):
    """Case i: a new GPT whose greedy choices depend on context and position, its prompt (1, T0), n_new, chunk."""
    seed, vocab, d_model, h, L, pos, T0, n_new, s, chunk = _GEN_CASES[i]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab, d_model, h, L, max_T=32, pos=pos)).eval()
        with torch.no_grad():
            model.head.weight.mul_(8.0)
            for block in model.blocks:
                block.attn.W_QKV.weight.mul_(s)
                block.attn.W_O.weight.mul_(s)
            if model.positions is not None:
                for p in model.positions.parameters():
                    p.mul_(s)
            for norm in [m for m in model.modules() if isinstance(m, nn.LayerNorm)]:   # ln_1 ≠ ln_2 ≠ ln_f
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.normal_(0.0, 0.3)
        ids = torch.randint(0, vocab, (1, T0))
    if guarded:
        forward = model.forward

        def no_generate(*args, **kwargs):
            raise _Shortcut(_OFF_LIMITS)

        def no_cached_forward(ids, caches=None, **kwargs):
            if caches is not None:
                raise _Shortcut(_OFF_LIMITS)
            return forward(ids, **kwargs)

        model.generate, model.forward = no_generate, no_cached_forward
        for module in [m for m in model.modules() if isinstance(m, (Block, MultiHeadAttention))]:
            def no_cached_call(x, *args, _forward=module.forward, cache=None, **kwargs):
                if cache is not None:
                    raise _Shortcut(_OFF_LIMITS)
                return _forward(x, *args, **kwargs)
            module.forward = no_cached_call
    return model, ids, n_new, chunk


def _masked(Q, K, V, *, mask):
    """Attention with a wrong mask: "top-left", "one-ahead", "square-only" (causal only when T_q = T_k) or "none"."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    start = {"top-left": 1, "one-ahead": 2 + T_k - T_q, "square-only": 1 if T_q == T_k else T_k, "none": T_k}[mask]
    S = (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).masked_fill(
        torch.ones(T_q, T_k, dtype=torch.bool).triu(start), float("-inf"))
    return softmax(S) @ V


def _generate_variant(model, ids, n_new, chunk, *, offset="cached", attend=attention, self_first=True,
                      keep_new=True, chunked=True, mlp_norm="ln_2"):
    """Chunked prefill, then greedy generation with a per-layer K/V cache; the defaults are right, the
    keywords plant the mistakes."""
    past = [None] * len(model.blocks)
    T0, todo, fed, steps = ids.shape[1], ids, 0, 0
    while ids.shape[1] < T0 + n_new:
        size = chunk if chunked else todo.shape[1]
        new, todo = todo[:, :size], todo[:, size:]
        at = {"cached": fed, "zero": 0, "steps": steps, "plus-one": fed + int(fed >= T0),
              "cache-length": 0 if past[0] is None else past[0][0].shape[-2]}[offset]
        X = model.embed_tokens(new, at)
        for l, block in enumerate(model.blocks):
            Q, K, V = block.attn.qkv(block.ln_1(X), at)
            if past[l] is not None:
                K_all, V_all = torch.cat([past[l][0], K], -2), torch.cat([past[l][1], V], -2)
            else:
                K_all, V_all = K, V
            if past[l] is None or keep_new or fed < T0:
                past[l] = (K_all, V_all)
            if not self_first and K_all.shape[-2] > Q.shape[-2]:
                K_all, V_all = K_all[..., :-Q.shape[-2], :], V_all[..., :-Q.shape[-2], :]
                out = attention(Q, K_all, V_all, causal=False)
            else:
                out = attend(Q, K_all, V_all)
            X = X + block.attn.W_O(merge_heads(out))
            X = X + block.mlp(getattr(block, mlp_norm)(X))
        fed, steps = fed + new.shape[1], steps + 1
        if todo.shape[1] == 0:
            todo = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, todo], dim=1)
    return ids


_GEN_VARIANTS = variants(_generate_variant, [
    ("no-offset", dict(offset="zero"),
     "your tokens go wrong once the first chunk is in: at which position does the model think the rows of "
     "a later step sit?",
     "every step placed its rows at positions from 0. They sit after the cached ones: the first is at the "
     "number of positions already cached, and both the embedding (learned positions) and qkv (RoPE) need "
     "that offset."),
    ("offset-counts-steps", dict(offset="steps"),
     "the rows of a later chunk sit at the wrong positions: what does your offset count?",
     "your offset counts the steps taken so far. A chunk of several tokens moves the next position on by its "
     "length: the offset is the number of positions already in the cache."),
    ("offset-one-too-far", dict(offset="plus-one"),
     "the prompt comes out right, and every generated token is placed one position too late: at which "
     "position, counting from 0, does the newest token sit?",
     "the newest token sits at the number of tokens before it; your offset counted the token itself as "
     "well."),
    ("top-left-mask", dict(attend=functools.partial(_masked, mask="top-left")),
     "a chunk after the first reads only the first keys of the cache: where does your mask assume that a "
     "chunk's queries sit when T_q < T_k?",
     "your mask treats a chunk's queries as positions 0 … T_q − 1, as scaled_dot_product_attention's "
     "is_causal does when T_q ≠ T_k (its triangle is aligned top-left). Query i of a chunk sits at position "
     "T_k − T_q + i and may read every key up to there, its own included."),
    ("unmasked", dict(attend=functools.partial(_masked, mask="none")),
     "one new token at a time would be fine, but the prompt's chunks are not: may a query of a chunk read "
     "the keys of later tokens of the same chunk?",
     "you attended without a causal mask. A single newest token may read every key, but a chunk of several "
     "is a small prompt of its own: each of its queries still needs the causal mask, shifted to its place "
     "after the cache."),
    ("later-chunks-unmasked", dict(attend=functools.partial(_masked, mask="square-only")),
     "the first chunk is right and the later ones are not: which keys does the first query of a later chunk "
     "read?",
     "you masked only when T_q equals T_k. A later chunk has T_q < T_k and still must not read its own "
     "future: its query i may read the cache and the chunk's keys up to its own."),
    ("one-ahead", dict(attend=functools.partial(_masked, mask="one-ahead")),
     "each query of a chunk reads one key too many: which is the last key that query i of a chunk may read?",
     "your mask lets each query read the key just after its own position; its future starts one key "
     "earlier."),
    ("not-self", dict(self_first=False),
     "does a new row read itself? Compare when you append a step's K and V with when you attend.",
     "you attended before appending the step's own K and V, so each new row read only the past, not itself "
     "or the rows before it in its chunk."),
    ("ln_1-for-mlp", dict(mlp_norm="ln_1"),
     "the tokens go wrong although positions, keys and mask may all be right: which LayerNorm reads the stream "
     "before each block's MLP?",
     "you normalised the MLP's input with ln_1, attention's LayerNorm. Each block has its own ln_2 for the MLP, "
     "with a scale and shift of its own."),
    *[("cache-not-updated", dict(keep_new=False, offset=offset),
       "after the prompt, does each generated token see the tokens generated before it?",
       "the cache keeps only the prompt's K and V: each generated token's K and V must be appended too (and "
       "a position read from the cache's length stops growing with it).") for offset in ("cached", "cache-length")],
])


def _observe(fn, i):
    """Run ``fn`` on case i's guarded model: (tokens, rows projected per layer, the most rows of one projection
    call, [(position, row)] of every row given to ln_f)."""
    model, ids, n_new, chunk = _fresh_model(i, guarded=True)
    counts, widest, seen = [0] * len(model.blocks), [0], []

    def count(l):
        def hook(mod, inp, out):
            counts[l] += inp[0].shape[-2]
            widest[0] = max(widest[0], inp[0].shape[-2])
        return hook

    def read(mod, inp, out):        # every row given to ln_f, and the position it stands for
        x = inp[0].detach().clone()
        rows = x.unbind(-2) if x.dim() == 3 else (x,)
        seen.extend((counts[0] - len(rows) + j, row) for j, row in enumerate(rows))

    hooks = [block.attn.W_QKV.register_forward_hook(count(l)) for l, block in enumerate(model.blocks)]
    hooks.append(model.ln_f.register_forward_hook(read))
    try:
        with torch.no_grad():
            got = fn(model, ids, n_new, chunk)
    finally:
        for hook in hooks:
            hook.remove()
    return got, counts, widest[0], seen


def _generation(fn, observed: dict | None = None):
    """``fn`` as judge sees it: case i → (tokens, each position projected once per layer, no step wider than
    chunk, every row given to ln_f right, the last such row); what was observed goes to ``observed[i]``."""
    def run(i):
        got, counts, widest, seen = seen_here = _observe(fn, i)
        if observed is not None:
            observed[i] = seen_here
        if got is None:
            return None
        _, _, _, _, _, _, T0, n_new, _, chunk = _GEN_CASES[i]
        return (got, max(counts) <= T0 + n_new, widest <= chunk, _first_bad_row(i, got, seen) is None,
                seen[-1][1] if seen else None)
    return run


def _first_bad_row(i, got, seen) -> int | None:
    """The first position whose row given to ln_f differs from X_L of the whole sequence ``got``; else None."""
    model, *_ = _fresh_model(i)
    try:
        with torch.no_grad():
            X_L = model.hidden_states(got)[-1]                    # (1, T, d_model)
    except Exception:  # noqa: BLE001 - tokens that are no token IDs: the comparison of tokens says so
        return seen[0][0] if seen else -1
    atol = 1e-4 * (1 + X_L.abs().max().item())
    for p, row in seen:
        if not (0 <= p < X_L.shape[1] and row.shape == X_L[:, p].shape
                and torch.allclose(row.to(X_L.dtype), X_L[:, p], atol=atol, rtol=1e-4)):
            return p
    return None


@functools.cache
def _recomputed(i):
    """The reference: the library's generation without a cache, recomputing the whole prefix at every step."""
    model, ids, n_new, _ = _fresh_model(i)
    with torch.no_grad():
        tokens = model.generate(ids, n_new, use_cache=False)
        return tokens, True, True, True, model.hidden_states(tokens[:, :-1])[-1][:, -1]


def _shortcut(i):
    raise _Shortcut(_OFF_LIMITS)


NO_CACHE = Mistake(
    "no-cache",
    "the tokens are right, but a layer projected some positions more than once: which rows does a step need "
    "to feed?",
    more="each step recomputed the past. Keep each layer's K and V, and feed only the rows that are new: the "
         "next chunk of the prompt, then the newest token.",
    wrong=functools.cache(lambda i: (_recomputed(i)[0], False, False, False, _recomputed(i)[4])))
CHUNK_TOO_BIG = Mistake(
    "chunk-too-big",
    "the tokens are right, but one step fed more than chunk positions to a layer: how is the prompt fed?",
    more="feed the prompt in pieces of at most chunk tokens (the last may be shorter), each reading the cache "
         "of the pieces before it; then one token at a time.",
    wrong=functools.cache(_generation(lambda model, ids, n_new, chunk: _generate_variant(model, ids, n_new, chunk,
                                                                             chunked=False))))
PROMPT_MISSING = Mistake(
    "prompt-missing",
    "your new tokens are right: what should come before them in the result?",
    more="return the prompt followed by the new tokens, (1, T0 + n_new), as model.generate does.",
    wrong=functools.cache(_generation(lambda model, ids, n_new, chunk:
                            _generate_variant(model, ids, n_new, chunk)[:, ids.shape[1]:])))
SHORTCUT = Mistake(
    "shortcut",
    "your function called the library's answer, its own cached generation (model.generate, model(ids, caches), "
    "or a block called with cache=). Which of the model's parts does one step of generation need?", _shortcut,
    more="use the model's parts (embed_tokens, the blocks' ln_1, attn.qkv, attn.W_O, ln_2 and mlp, then ln_f "
         "and head) and keep each layer's K and V in variables of your own: write the loop over the blocks and "
         "the attention step yourself.")
ROWS_DIFFER = Mistake(
    "rows-differ",
    "the tokens are right, but at position {p} the last layer's output differs from recomputing the whole "
    "prefix: the greedy choice hid the difference. Which keys does each row of that step read, and at which "
    "position does it sit?",
    more="compare one step with model.hidden_states on the whole prefix, layer by layer: the first layer "
         "that differs at position {p} holds the mistake (its position, its keys or its mask).")
TOKENS_DIFFER = Mistake(
    "values",
    "the tokens differ from recomputation from position {first} on (the prompt has {T0} tokens, fed in "
    "chunks of {chunk}). Is the first wrong token in the prompt's last step or after it?",
    more="compare one cached step with model(ids) on the whole prefix, layer by layer: the first layer whose "
         "rows differ holds the mistake, in the part of the block that you wrote.")
NOT_TOKENS = Mistake(
    "type",
    "expected a tensor of token IDs, got {what}.",
    more="return the token IDs as one tensor (1, T0 + n_new), the prompt followed by the new tokens, as "
         "model.generate does; you returned {what}.")
WRONG_LENGTH = Mistake(
    "shape",
    "the result has shape {got}, expected {want}: the prompt (T0 = {T0}) followed by n_new = {n_new} tokens. "
    "How many times does your loop choose a token?",
    more="the result is (1, T0 + n_new): every new token is chosen once, after the prompt is in, and the last "
         "one is returned without being fed.")

_GEN_MISTAKES = [Mistake(m.label, m.hint, functools.cache(_generation(m.wrong)), m.more) for m in _GEN_VARIANTS] + [
    NO_CACHE, CHUNK_TOO_BIG, PROMPT_MISSING, SHORTCUT]


def _diagnose_generation(observed: dict) -> Verdict | None:
    """Tokens of the wrong type, shape or value, or a property that fails, read from what was observed."""
    for i, (got, counts, widest, seen) in sorted(observed.items()):
        want = _recomputed(i)[0]
        _, _, _, _, _, _, T0, n_new, _, chunk = _GEN_CASES[i]
        if not isinstance(got, torch.Tensor):
            return named(NOT_TOKENS, what=type(got).__name__)
        if got.shape != want.shape:
            return named(WRONG_LENGTH, got=tuple(got.shape), want=tuple(want.shape), T0=T0, n_new=n_new)
        if not torch.equal(got, want):
            first = int((got != want).reshape(-1).nonzero()[0])
            return named(TOKENS_DIFFER, first=first, T0=T0, chunk=chunk)
        if max(counts) > T0 + n_new:
            return named(NO_CACHE)
        if widest > chunk:
            return named(CHUNK_TOO_BIG)
        bad = _first_bad_row(i, got, seen)
        if bad is not None:
            return named(ROWS_DIFFER, p=bad)
    return None


@checker(mistakes=[*_GEN_MISTAKES, ROWS_DIFFER, TOKENS_DIFFER, NOT_TOKENS, WRONG_LENGTH])
def check_cached_generation(fn) -> Verdict:
    """``fn(model, ids, n_new, chunk)``: chunked prefill and greedy generation with the learner's own cache."""
    observed: dict = {}
    return judge(_generation(fn, observed) if callable(fn) else fn, [(i,) for i in range(len(_GEN_CASES))],
                 _recomputed, _GEN_MISTAKES,
                 success="the same tokens and the same last-layer rows as recomputing the whole prefix, the "
                         "prompt fed in chunks and every position projected once per layer.",
                 diagnose=lambda verdict: _diagnose_generation(observed) if verdict.mistake in (
                     "values", "type", "shape", "length", "dtype", "device") else None)
