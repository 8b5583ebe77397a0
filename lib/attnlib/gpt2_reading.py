"""GPT-2's attention as the installed ``transformers`` writes it, read with the course's four questions.

:func:`gpt2_sources` lists the functions one forward pass of GPT-2 runs for its attention and its causal mask.
:func:`ask_gpt2` asks the four questions of a running GPT-2 by measurement, whichever lines implement them:

1. the Q, K and V that reach the attention core are the per-head projections of LN₁(X), the cached positions'
   keys and values included;
2. the table softmax receives is (T_q, T_k): each entry is q_i · k_j · scale, or masked, and each row of the
   weights sums to 1;
3. every entry j > T_past + i of that table is masked (the lowest float), no other one, and its weight is 0;
4. the attention core returns P · V.

Each is measured on a whole prompt and on a cached step (4 positions cached, 2 new). :func:`line_finding` says
what one quoted line computes in block 0 of a whole prompt, measured against an independent computation from
the weights, and whether changing that line changes GPT-2 the way its answer predicts. :func:`planted_bug`
runs GPT-2 with one line of its code changed, :func:`show_planted` prints that copy.

``transformers`` is imported inside the functions only, so attnlib works without it. A notebook and checker
helper: the library's own models never use it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from unittest import mock

import torch
from torch import nn

from ._validate import (
    _integer,
    _show,
    boundary,
    require_dtype,
    require_fits,
    require_nonnegative,
    require_positive,
    require_readable,
    require_weights,
)
from .reading import Place, _line_changed_args, find_line, line_changed, show_code

__all__ = ["gpt2_sources", "tiny_gpt2", "ask_gpt2", "Answers", "line_finding", "Finding", "PLANTED",
           "planted_bug", "show_planted", "QUESTIONS"]

QUESTIONS = {1: "where do Q, K and V come from?", 2: "which axis of the score table is the query?",
             3: "where is the mask added?", 4: "what do the weights multiply?"}

T_PAST = 4   # the cached step: positions 0 … 3 in the cache, 4 and 5 new


def _transformers():
    from transformers import masking_utils
    from transformers.models.gpt2 import modeling_gpt2

    return modeling_gpt2, masking_utils


def _tiny_gpt2_args(seed, dtype, vocab_size):
    seed, = require_nonnegative(seed=seed)   # 2.5 and True are not seeds
    if seed >= 2**63:
        raise ValueError(f"seed must be below 2**63 (torch's limit), got {seed}")
    vocab_size, = require_positive(vocab_size=vocab_size)
    require_fits("tiny_gpt2", {f"vocab_size={vocab_size} (n_embd=16)": 2 * 16 * vocab_size})
    return {"seed": seed, "dtype": require_dtype(dtype), "vocab_size": vocab_size}


def _ask_gpt2_args(model, ids):
    _require_eager(model)
    if ids is not None:
        _require_prompt(ids, model)


def _line_finding_args(question, places, model):
    question = _integer(question, "question", "1, 2, 3 or 4")   # True is not question 1
    if question not in QUESTIONS:
        raise ValueError(f"question must be 1, 2, 3 or 4, got {question!r}")
    _line_changed_args(places, None, True, None)   # a non-empty list of Place
    if model is not None:
        _require_eager(model)
    return {"question": question}


def _letter_args(letter):
    if not isinstance(letter, str) or letter not in PLANTED:
        raise ValueError(f"letter must be one of {', '.join(PLANTED)}, got {_show(letter)}")


def gpt2_sources() -> list[Callable]:
    """The functions of the installed ``transformers`` that make GPT-2's attention and its mask: the block, the
    attention module and its eager core, then the model's forward, which builds the causal mask once per pass
    with ``masking_utils``, and the mask functions it calls, in the order they run."""
    g, m = _transformers()
    return [g.GPT2Block.forward, g.GPT2Attention.forward, g.eager_attention_forward, g.GPT2Model.forward,
            m.create_causal_mask, m._preprocess_mask_arguments, m.eager_mask, m.sdpa_mask, m.causal_mask_function]


@boundary(_tiny_gpt2_args)
def tiny_gpt2(seed: int = 0, *, dtype: torch.dtype = torch.float64, vocab_size: int = 32):
    """A random-init GPT-2 in eval mode (d_model = 16, h = 4, L = 2, 16 positions, eager attention), built without
    moving the caller's random state. Never downloaded."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_positions=16, n_embd=16, n_head=4, n_layer=2,
                        bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1, initializer_range=0.2,
                        attn_implementation="eager")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    return model.to(dtype).eval().requires_grad_(False)


def _ids(model) -> torch.Tensor:
    g = torch.Generator().manual_seed(21)
    return torch.randint(0, model.config.vocab_size, (1, 6), generator=g)


def _require_eager(model) -> None:
    from transformers import GPT2LMHeadModel

    if not isinstance(model, GPT2LMHeadModel):
        raise TypeError(f"model must be a transformers GPT2LMHeadModel, got {type(model).__name__}")
    require_weights(model)
    if model.config._attn_implementation != "eager":
        raise ValueError(f"the source read here is GPT-2's eager attention: build the model with "
                         f"attn_implementation=\"eager\", got {model.config._attn_implementation!r}")
    if model.config.n_positions < 6:
        raise ValueError(f"the questions run on 6 positions, the model has n_positions="
                         f"{model.config.n_positions}")


def _require_prompt(ids, model) -> torch.Tensor:
    """ids (B, T) of token IDs, T > T_PAST (the cached step needs a new token), every ID in the vocabulary."""
    V, n = model.config.vocab_size, model.config.n_positions
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype not in (torch.int32, torch.int64):
        shown = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise TypeError(f"ids must be an integer tensor (B, T), got {shown}")
    require_readable(ids, "ids")
    if ids.device != model.device:
        raise ValueError(f"ids is on {ids.device} but the model is on {model.device}; "
                         f"use ids.to({str(model.device)!r})")
    if not T_PAST < ids.shape[1] <= n:
        raise ValueError(f"ids must hold {T_PAST + 1} to n_positions={n} tokens per row, got T={ids.shape[1]}")
    if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < V):
        raise ValueError(f"token IDs must lie in 0 … {V - 1} (vocab_size={V})")
    return ids


def _cache_keyword(model) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(out):
    return getattr(out, "cache", None) or getattr(out, "past_key_values", None)


# --- what each block sees, and the numbers an independent computation gives ---------------------------------------

class _Blocks:
    """Forward hooks on every block: which block is running (None outside them) and what it read, per call."""

    def __init__(self, model):
        self.model, self.block, self.inputs = model, None, []   # inputs: (block, X) in call order

    @contextlib.contextmanager
    def attached(self) -> Iterator[_Blocks]:
        hooks = []
        for b, block in enumerate(self.model.transformer.h):
            hooks.append(block.register_forward_pre_hook(self._enter(b)))
            hooks.append(block.register_forward_hook(self._leave))
        try:
            yield self
        finally:
            for hook in hooks:
                hook.remove()

    def _enter(self, b: int):
        def pre(module, args):
            self.block = b
            self.inputs.append((b, args[0]))
        return pre

    def _leave(self, module, args, out):
        self.block = None

    def X(self) -> torch.Tensor:
        """The input of the running block."""
        return self.inputs[-1][1]


def _heads(t: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, d_model) → (B, h, T, d_head)."""
    B, T, d = t.shape
    return t.reshape(B, T, h, d // h).transpose(1, 2)


def _merge(t: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d_head) → (B, T, h·d_head)."""
    B, h, T, d = t.shape
    return t.transpose(1, 2).reshape(B, T, h * d)


def _projections(attn, x: torch.Tensor) -> list[torch.Tensor]:
    """Q, K, V = x W + b from the column blocks of GPT-2's fused c_attn (a Conv1D: weight (d_model, 3·d_model))."""
    d = x.shape[-1]
    W, b = attn.c_attn.weight, attn.c_attn.bias
    return [x @ W_ + b_ for W_, b_ in zip(W.split(d, dim=1), b.split(d))]


def _future(T_q: int, T_k: int) -> torch.Tensor:
    """(T_q, T_k) True where key j stands after query i, the queries being the last T_q positions."""
    i = torch.arange(T_q)[:, None] + (T_k - T_q)
    return torch.arange(T_k)[None, :] > i


@dataclass
class _Expected:
    """Block b's quantities on a whole prompt, computed from its input X and its weights (never its code)."""

    X: torch.Tensor
    x: torch.Tensor                 # LN₁(X)
    flat: list[torch.Tensor]        # Q, K, V (B, T, d_model)
    heads: list[torch.Tensor]       # Q, K, V (B, h, T, d_head)
    Z: torch.Tensor                 # scaled scores (B, h, T, T)
    ZM: torch.Tensor                # Z + M, M the lowest float above the diagonal
    P: torch.Tensor                 # softmax(Z + M)
    R: torch.Tensor                 # P · V (B, h, T, d_head)
    A: torch.Tensor                 # the attention sublayer's output c_proj(merge(R)) (B, T, d_model)


def _expected(block, X: torch.Tensor, h: int) -> _Expected:
    x = block.ln_1(X)
    flat = _projections(block.attn, x)
    Q, K, V = heads = [_heads(t, h) for t in flat]
    Z = Q @ K.transpose(-1, -2) * block.attn.scaling
    T = X.shape[-2]
    ZM = Z.masked_fill(_future(T, T), torch.finfo(Z.dtype).min)
    P = torch.softmax(ZM, dim=-1)
    R = P @ V
    return _Expected(X, x, flat, heads, Z, ZM, P, R, block.attn.c_proj(_merge(R)))


def _tol(t: torch.Tensor) -> float:
    return 1e-9 if t.dtype == torch.float64 else 1e-4


def _same(a, b: torch.Tensor) -> bool:
    if not isinstance(a, torch.Tensor) or a.shape != b.shape or not a.is_floating_point():
        return False
    tol = max(_tol(a), _tol(b))
    a, b = a.detach().double(), b.detach().double()
    return bool(((a - b).abs() <= tol * (1 + b.abs())).all())


def _masked_like(a, want: _Expected) -> bool:
    """``a`` is Z + M: the scaled scores where j ≤ i, the lowest float (or near it) where j > i."""
    if not isinstance(a, torch.Tensor) or a.shape != want.Z.shape or not a.is_floating_point():
        return False
    future = _future(*a.shape[-2:])
    low = torch.finfo(a.dtype).min / 2
    allowed = (a - want.Z).abs() <= _tol(want.Z) * (1 + want.Z.abs())
    return bool(allowed[..., ~future].all() and (a[..., future] <= low).all())


def _is_mask(a) -> bool:
    """A causal mask as a table: booleans, or a float table of 0 and the lowest float only, of shape (…, T, T)."""
    if not isinstance(a, torch.Tensor) or a.dim() < 2 or a.shape[-1] != a.shape[-2] or a.shape[-1] < 2:
        return False
    if a.dtype == torch.bool:
        return bool((a == ~_future(*a.shape[-2:])).all())
    if a.is_floating_point():
        return bool(((a == 0) | (a <= torch.finfo(a.dtype).min / 2)).all() and (a == 0).any() and (a != 0).any())
    return False


# --- the four questions, measured ----------------------------------------------------------------------------------

@dataclass
class _Call:
    """One call of the attention core (eager_attention_forward): what it received and returned, and softmax's."""

    block: int | None
    X: torch.Tensor | None
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    scaling: float
    output: torch.Tensor | None = None
    softmax: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


@contextlib.contextmanager
def _watching(model) -> Iterator[tuple[_Blocks, list[_Call]]]:
    """Record every call of GPT-2's attention core, and what softmax received and gave inside it."""
    g, _ = _transformers()
    blocks, calls, current = _Blocks(model), [], []
    core = g.eager_attention_forward
    real_softmax = torch.nn.functional.softmax

    def spy_core(module, query, key, value, attention_mask, scaling=None, *args, **kwargs):
        X = blocks.X() if blocks.block is not None else None
        call = _Call(blocks.block, X, query, key, value, query.size(-1) ** -0.5 if scaling is None else scaling)
        calls.append(call)
        current.append(call)
        try:
            out = core(module, query, key, value, attention_mask, scaling, *args, **kwargs)
        finally:
            current.pop()
        call.output = out[0]
        return out

    def spy_softmax(x, *args, **kwargs):
        P = real_softmax(x, *args, **kwargs)
        if current:
            current[-1].softmax.append((x, P))
        return P

    with blocks.attached(), mock.patch.object(g, "eager_attention_forward", spy_core), \
            mock.patch.object(torch.nn.functional, "softmax", spy_softmax):
        yield blocks, calls


def _answers_args(self) -> None:
    for name in ("passed", "found"):
        if not isinstance(getattr(self, name), dict):
            raise TypeError(f"{name} must be a dict of question → answer, got {_show(getattr(self, name))}")
    for q, ok in self.passed.items():
        if not isinstance(ok, bool):
            raise TypeError(f"passed[{q!r}] must be True or False, got {_show(ok)}")


@dataclass
class Answers:
    """What :func:`ask_gpt2` measured: for each question, whether its check passed, and what it found."""

    passed: dict[int, bool]
    found: dict[int, str]

    @boundary(_answers_args)
    def __post_init__(self):
        """passed and found are checked by the spec: dicts, passed's values True or False."""

    def failed(self) -> list[int]:
        return [q for q, ok in self.passed.items() if not ok]

    def __repr__(self) -> str:
        return "\n".join(textwrap.fill(f"{'✓' if self.passed[q] else '✗'} question {q}, {QUESTIONS[q]} "
                                       f"{self.found[q]}", width=88, subsequent_indent="  ")
                         for q in QUESTIONS)


def _check_calls(model, blocks: _Blocks, calls: list[_Call]) -> dict[int, list[str]]:
    """The failures of each question's check on the recorded calls (an empty list: the check passed)."""
    h = model.config.n_head
    seen: dict[int, list[torch.Tensor]] = {}            # block → its inputs so far (the cached positions first)
    problems: dict[int, list[str]] = {q: [] for q in QUESTIONS}
    for call in calls:
        b = call.block
        blk = model.transformer.h[b]
        seen.setdefault(b, []).append(call.X)
        X_all = torch.cat(seen[b], dim=-2)
        _, K_all, V_all = (_heads(t, h) for t in _projections(blk.attn, blk.ln_1(X_all)))
        Q_new = _heads(_projections(blk.attn, blk.ln_1(call.X))[0], h)
        for name, got, want in (("Q", call.query, Q_new), ("K", call.key, K_all), ("V", call.value, V_all)):
            if not _same(got, want):
                problems[1].append(f"{name} in block {b}")
        if len(call.softmax) != 1:
            problems[2].append(f"softmax ran {len(call.softmax)} times in block {b}")
            continue
        S_in, P = call.softmax[0]
        T_q, T_k = call.query.shape[-2], call.key.shape[-2]
        if S_in.shape[-2:] != (T_q, T_k):
            problems[2].append(f"softmax received a {tuple(S_in.shape[-2:])} table, not (T_q, T_k) = "
                               f"{(T_q, T_k)}")
            continue
        raw = call.query @ call.key.transpose(-1, -2) * call.scaling
        low = torch.finfo(S_in.dtype).min / 2
        scored = (S_in - raw).abs() <= _tol(raw) * (1 + raw.abs())
        if not bool((scored | (S_in <= low)).all()):
            problems[2].append(f"the entries are not q_i · k_j · scale in block {b}")
        if not _same(P.sum(-1), torch.ones_like(P.sum(-1))):
            problems[2].append(f"the rows of the weights do not sum to 1 in block {b}")
        future = _future(T_q, T_k)
        if not bool((S_in[..., future] <= low).all()) or not bool((P[..., future] == 0).all()):
            problems[3].append(f"a future key is not masked in block {b} ({T_k - T_q} cached)")
        if bool((S_in[..., ~future] <= low).any()):
            problems[3].append(f"a key at or before its query is masked in block {b} ({T_k - T_q} cached)")
        if call.output is None or not _same(call.output, (P @ call.value).transpose(1, 2)):
            problems[4].append(f"the core's output is not P · V in block {b}")
    return problems


_PASS = {1: "the per-head projections of LN₁(X), cached keys and values included",
         2: "a (T_q, T_k) table of q_i · k_j · scale, each row of weights summing to 1",
         3: "every key after its query masked before softmax, no other one",
         4: "P · V"}


@boundary(_ask_gpt2_args)
def ask_gpt2(model, ids: torch.Tensor | None = None) -> Answers:
    """Ask the four questions of a running GPT-2 (eager attention) by measurement, on a whole prompt of 6 tokens
    and on a cached step (4 cached, 2 new): see the module's docstring for what each check compares."""
    ids = _ids(model) if ids is None else ids
    problems: dict[int, list[str]] = {q: [] for q in QUESTIONS}
    kw = _cache_keyword(model)
    with torch.no_grad():
        for steps in ((ids,), (ids[:, :T_PAST], ids[:, T_PAST:])):
            with _watching(model) as (blocks, calls):
                cache = None
                for part in steps:
                    extra = {kw: cache, "use_cache": True} if len(steps) > 1 else {}
                    out = model(part, **extra)
                    cache = _cache_of(out)
            for q, found in _check_calls(model, blocks, calls).items():
                problems[q] += found
    passed = {q: not problems[q] for q in QUESTIONS}
    found = {q: _PASS[q] if passed[q] else "no: " + "; ".join(dict.fromkeys(problems[q])) for q in QUESTIONS}
    return Answers(passed, found)


# --- one line, by behaviour ----------------------------------------------------------------------------------------

@dataclass
class Finding:
    """What a line computes in block 0 of a whole prompt (``kinds``), and, for the question asked, whether
    changing that line changed GPT-2 as the answer predicts (``confirmed``; None when not tried)."""

    ran: bool
    kinds: set[str]
    which: str = ""                  # for "part-of-qkv": which of Q, K, V the line holds
    confirmed: bool | None = None


_EXPECTED_KIND = {1: "qkv", 2: "scores", 3: "masked-scores", 4: "weighted-values"}


def _flat_values(values: Sequence) -> list[tuple[int | None, object]]:
    """The values a line assigned, with those inside a tuple or list (a returned pair) brought up, unplaced."""
    out: list[tuple[int | None, object]] = []

    def walk(v, i):
        if isinstance(v, (tuple, list)):
            for item in v:
                walk(item, None)
        else:
            out.append((i, v))

    for i, v in enumerate(values):
        walk(v, i)
    return out


def _kinds(values: Sequence, want: _Expected) -> tuple[set[str], str, dict]:
    """What the values one execution of a line assigned are, compared with block 0's expected quantities."""
    kinds, where = set(), {}
    held = []
    for i, v in _flat_values(values):       # i: the place of a value the line assigns, None inside a tuple
        for name, flat, head in zip("QKV", want.flat, want.heads):
            if _same(v, flat):
                held.append(name)
                where[name] = (i, "flat")
            elif _same(v, head):
                held.append(name)
                where[name] = (i, "heads")
        if _same(v, want.x):
            kinds.add("ln_1")
        if _same(v, want.Z):
            kinds.add("scores")
            where["scores"] = i
        if _masked_like(v, want):
            kinds.add("masked-scores")
        if _same(v, want.P):
            kinds.add("weights")
        if _same(v, want.R):
            kinds.add("weighted-values")
            where["R"] = i
        if _same(v, want.R.transpose(1, 2)) or _same(v, _merge(want.R)):
            kinds.add("weighted-values-rearranged")
        if _same(v, want.A):
            kinds.add("attention-output")
        if _is_mask(v):
            kinds.add("mask")
    names = sorted(set(held), key="QKV".index)
    if names == ["Q", "K", "V"]:
        kinds.add("qkv")
    elif names:
        kinds.add("part-of-qkv")
    return kinds, " and ".join(names), where


def _logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def _without_ln_1(model):
    other = copy.deepcopy(model)
    for block in other.transformer.h:
        block.ln_1 = nn.Identity()
    return other


def _columns(model, change: Callable[[list[torch.Tensor]], list[torch.Tensor]]):
    """A copy of ``model`` whose c_attn column blocks (W_Q, W_K, W_V, and their biases) are rearranged."""
    other = copy.deepcopy(model)
    d = model.config.n_embd
    with torch.no_grad():
        for block in other.transformer.h:
            W, b = block.attn.c_attn.weight, block.attn.c_attn.bias
            W.copy_(torch.cat(change(list(W.split(d, dim=1))), dim=1))
            b.copy_(torch.cat(change(list(b.split(d)))))
    return other


def _without_mask(model):
    """The library's GPT with GPT-2's weights and no causal mask (``causal=False``)."""
    from .gpt2 import from_gpt2
    from .model import GPT

    mine = from_gpt2(model)
    free = GPT(dataclasses.replace(mine.config, causal=False)).to(mine.embed.table)
    free.load_state_dict(mine.state_dict())
    return free.eval()


def _library_logits(gpt, ids) -> torch.Tensor:
    with torch.no_grad():
        return gpt(ids)


def _confirm(question: int, places: Sequence[Place], model, ids, where: dict) -> bool:
    """Change the line as the answer to ``question`` says and compare GPT-2 with the model that answer predicts."""
    h = model.config.n_head
    blocks = _Blocks(model)

    def live(b: int) -> _Expected:
        return _expected(model.transformer.h[b], blocks.X(), h)

    if question == 1:
        def probe(line, values):
            if blocks.block is None:
                return values
            blk = model.transformer.h[blocks.block]
            raw = _projections(blk.attn, blocks.X())               # from X itself: LN₁ skipped
            out = list(values)
            for name, t in zip("QKV", raw):
                i, layout = where[name]
                out[i] = t if layout == "flat" else _heads(t, h)
            return tuple(out)
        predicted = _logits(_without_ln_1(model), ids)
    elif question == 2:
        def probe(line, values):
            if blocks.block is None:
                return values
            out = list(values)
            out[where["scores"]] = out[where["scores"]].transpose(-1, -2)   # keys on the rows
            return tuple(out)
        predicted = _logits(_columns(model, lambda qkv: [qkv[1], qkv[0], qkv[2]]), ids)   # W_Q ↔ W_K
    elif question == 4:
        def probe(line, values):
            if blocks.block is None:
                return values
            want = live(blocks.block)
            out = list(values)
            out[where["R"]] = want.P @ want.heads[1]                 # the weights times K
            return tuple(out)
        predicted = _logits(_columns(model, lambda qkv: [qkv[0], qkv[1], qkv[1]]), ids)   # W_V := W_K
    else:
        probe = None
        predicted = _library_logits(_without_mask(model), ids)
    needed = {1: ("Q", "K", "V"), 2: ("scores",), 3: (), 4: ("R",)}[question]
    if any(where.get(k) is None or where[k] == (None, "flat") or where[k] == (None, "heads") for k in needed):
        return False                 # held inside a returned tuple: nothing to change in its place
    try:
        with blocks.attached(), line_changed(places, probe=probe, delete=probe is None):
            got = _logits(model, ids)
    except Exception:  # noqa: BLE001 - without this line GPT-2 no longer runs: not the predicted change
        return False
    return _same(got, predicted) and not _same(got, _logits(model, ids))


@boundary(_line_finding_args)
def line_finding(question: int, places: Sequence[Place], model=None) -> Finding:
    """What the line at ``places`` computes in block 0 of a whole prompt, and whether changing it as the answer
    to ``question`` says changes ``model`` (default: :func:`tiny_gpt2`) as that answer predicts:

    1. Q, K, V computed from X instead of LN₁(X) there: GPT-2 with every LN₁ replaced by the identity;
    2. the table transposed there (keys on the rows): GPT-2 with W_Q and W_K swapped;
    3. the line taken out: the library's GPT with GPT-2's weights and ``causal=False``;
    4. P · K in place of P · V there: GPT-2 with W_V replaced by W_K.
    """
    model = tiny_gpt2() if model is None else model
    ids = _ids(model)
    h = model.config.n_head
    blocks = _Blocks(model)
    records: list[tuple[int | None, tuple]] = []

    def record(line, values):
        records.append((blocks.block, values))
        return values

    kw = _cache_keyword(model)
    with torch.no_grad(), blocks.attached(), line_changed(places, probe=record):
        model(ids)
        whole = len(records)
        first = model(ids[:, :T_PAST], use_cache=True)
        model(ids[:, T_PAST:], **{kw: _cache_of(first), "use_cache": True})
    if not records:
        return Finding(False, set())
    X0 = next(X for b, X in blocks.inputs if b == 0)
    want = _expected(model.transformer.h[0], X0, h)
    kinds, which, where = set(), "", {}
    for b, values in records[:whole]:
        found, held, at = _kinds(values, want) if b == 0 else (set(), "", {})
        if b is None:   # the mask functions run before the blocks
            found = {"mask"} if any(_is_mask(v) for _, v in _flat_values(values)) else set()
        if _EXPECTED_KIND[question] in found:
            kinds, which, where = found, held, at
            break
        kinds |= found
        which = which or held
    finding = Finding(True, kinds, which)
    if _EXPECTED_KIND[question] in kinds:
        finding.confirmed = _confirm(question, places, model, ids, where)
    return finding


# --- four copies of GPT-2's code, one line changed in each -----------------------------------------------------------

# letter → (where: "module.qualname", the line as installed, the line planted in its place)
PLANTED = {
    "A": ("modeling_gpt2.GPT2Attention.forward",
          "query_states = query_states.view(shape_q).transpose(1, 2)",
          "query_states = query_states.reshape(query_states.shape[0], -1, query_states.shape[1], self.head_dim)"),
    "B": ("masking_utils.sdpa_mask",
          "q_arange = torch.arange(q_length, device=device) + q_offset",
          "q_arange = torch.arange(q_length, device=device)"),
    "C": ("modeling_gpt2.eager_attention_forward",
          "attn_weights = nn.functional.softmax(attn_weights, dim=-1)",
          "attn_weights = nn.functional.softmax(attn_weights, dim=-2)"),
    "D": ("modeling_gpt2.GPT2Attention.forward",
          "key_states, value_states = curr_cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)",
          "key_states, value_states = curr_cache.update(value_states, key_states, self.layer_idx, kwargs=kwargs)"),
}


def _planted(letter: str) -> tuple[Callable, str, str]:
    if not isinstance(letter, str) or letter not in PLANTED:
        raise ValueError(f"letter must be one of {', '.join(PLANTED)}, got {letter!r}")
    where, old, new = PLANTED[letter]
    g, m = _transformers()
    module, _, name = where.partition(".")
    target = {"modeling_gpt2": g, "masking_utils": m}[module]
    for part in name.split("."):
        target = getattr(target, part)
    return target, old, new


@boundary(_letter_args)
@contextlib.contextmanager
def planted_bug(letter: str) -> Iterator[None]:
    """Inside the ``with`` block, GPT-2 runs copy ``letter`` of its code (one line changed, see :data:`PLANTED`)."""
    fn, old, new = _planted(letter)
    places = find_line(old, [fn])
    if not places:
        raise LookupError(f"the installed transformers has no line {old!r} in {fn.__qualname__}: the planted "
                          f"copies were written for another release")
    with line_changed(places, new=new):
        yield


@boundary(_letter_args)
def show_planted(letter: str):
    """Display copy ``letter`` of the function it changes, as the installed source with the planted line in place."""
    fn, old, new = _planted(letter)
    return show_code(fn, replace={old: new})
