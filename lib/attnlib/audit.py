"""Ask the course's four questions of anyone's attention code: ``audit(obj, kind=..., **sizes) -> Report``.

The four questions (from the introduction): (1) where do Q, K and V come from, (2) which axis of the score table
is the query, (3) where does the mask enter, (4) what do the weights multiply. The audit answers them by
*looking*: while the code runs, a ``TorchFunctionMode`` records the torch calls it makes (softmax and its axis,
the matrix products and their operands, ``masked_fill`` and ``where``, the float → bool conversions, and the
arguments of ``scaled_dot_product_attention``). Where looking cannot tell, it probes properties: change a future
token (at several lengths: a mask can be right at one length only), change each sequence of a batch in turn and
watch every other one (earlier and later), feed a batch that begins as padding does (NaN there, where the code's
own mask empties a row, is nan-empty-row), run a float16 and a bfloat16 copy, give it large scores, and, for a
core, ask for a cached step (fewer queries than keys); the trace is read again at the longest length (a prompt read
in chunks through a cache has fewer queries than keys there only). Attention computed in steps (a token at a time,
or chunks, through a cache) is joined into one table of which keys each query reads; a changed position must move
its own output (a core, a layer) and a key that its own query reads. A window (no future, each query reading
itself) is not a misplaced diagonal: only the upper edge is the diagonal. A module runs in its own mode, train or eval,
every call from the same random seed, and its buffers are put back afterwards. Weights that multiply the tensor the
scores used as keys are weights-times-K in a core (its V is given) and, in a layer or model, only when the code also
made a value tensor of that size that it never used: attention with no projections, whose values are its keys, is
correct.

Kinds:
- ``"core"``: ``obj(Q, K, V) -> O``, Q (B, h, T_q, d_k), K (B, h, T_k, d_k), V (B, h, T_k, d_v); with T_q < T_k
  the queries are the last T_q positions. Sizes (optional): ``h``, ``d_k``, ``d_v``, ``max_T``.
- ``"layer"``: ``obj(X) -> Y``, X (B, T, d_model), Y (B, T, d_model) or a tuple/list whose first item is Y.
  Sizes: ``d_model`` (required), ``max_T``.
- ``"model"``: ``obj(ids) -> logits`` (B, T, vocab_size), or an object with ``.logits``, or a tuple whose first
  item is the logits. Sizes: ``vocab_size`` (required), ``max_T``.

Labels (``Finding.label``): leak, batch-mixing, mask-offset, mask-convention, mask-after-softmax, softmax-axis,
weights-times-K, scale, nan-empty-row, half-precision, unstable, and three more: head-split (a changed token moves
other rows of the queries that reach the score table, though not the rows of the first projection's input),
cached-step (a core that fails, or computes something else, when T_q < T_k) and nan (NaN on ordinary float32
input, with no empty row to blame). :data:`LABELS` gives each label's question and meaning.

The audit page's exercise checkers are ``attnlib.checks.check_audit_labels`` (predict the labels for a given core)
and ``check_audit_prediction`` (plant a bug, predict its labels), in ``checks/audit.py``, on the checkers' engine
like every other checker.
"""

from __future__ import annotations

import contextlib
import copy
import html
import math
import textwrap
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ._validate import _show, boundary, require_choice, require_fits, require_positive
from .checks._core import _close

__all__ = ["audit", "Report", "Finding", "LABELS"]

# label -> (question it answers, or None; what it means)
LABELS = {
    "leak": (3, "an output at position i changes when an input after i changes"),
    "batch-mixing": (None, "one sequence's output changes when another sequence of the batch changes"),
    "mask-offset": (3, "the diagonal of the mask is misplaced"),
    "mask-convention": (3, "a boolean mask read in the other convention"),
    "mask-after-softmax": (3, "the mask enters after softmax"),
    "softmax-axis": (2, "softmax runs over an axis other than the keys"),
    "weights-times-K": (4, "the weights multiply K instead of V"),
    "scale": (None, "the scores are scaled by something other than 1/√d_k"),
    "nan-empty-row": (3, "a query the code's own mask leaves with no key gives NaN"),
    "nan": (None, "ordinary float32 input gives NaN"),
    "half-precision": (None, "float16 or bfloat16 input raises, or gives NaN or inf where float32 is finite"),
    "unstable": (None, "float32 scores of 100 or more given to softmax overflow without the max subtraction"),
    "head-split": (1, "the queries that reach the score table mix positions (heads split without a transpose)"),
    "cached-step": (3, "a cached step (T_q < T_k) fails or differs from the full computation's last rows"),
}

KINDS = ("core", "layer", "model")
_SIZES = {"core": {"h": 2, "d_k": 8, "d_v": 12, "max_T": 6}, "layer": {"d_model": None, "max_T": 6},
          "model": {"vocab_size": None, "max_T": 6}}


# ------------------------------------------------------------------------------------------------ the report

@dataclass(frozen=True)
class Finding:
    """One thing found: ``label`` (see :data:`LABELS`), ``question`` (1–4 or None) and ``message``."""

    label: str
    question: int | None
    message: str

    def __str__(self) -> str:
        q = f"question {self.question}" if self.question else "no question"
        return f"✗ {self.label} ({q}): {self.message}"


@dataclass
class Report:
    """What the audit found: ``ok``, ``findings`` and ``looked_at`` (what was traced and probed)."""

    kind: str
    findings: list[Finding] = field(default_factory=list)
    looked_at: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def labels(self) -> list[str]:
        return [f.label for f in self.findings]

    def __str__(self) -> str:
        if self.ok:
            head = f"audit of a {self.kind}: nothing found"
        else:
            n = len(self.findings)
            head = f"audit of a {self.kind}: {n} finding{'s' * (n != 1)}"
        wrap = dict(width=88, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
        lines = [head] + [textwrap.fill(str(f), **wrap) for f in self.findings]
        lines.append(textwrap.fill("looked at: " + ", ".join(self.looked_at), **wrap))
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = html.escape(str(self).split("\n")[0])
        rows = "".join(f"<tr><td><code>{f.label}</code></td><td>{f.question or '–'}</td>"
                       f"<td>{html.escape(f.message)}</td></tr>" for f in self.findings)
        table = (f"<table><thead><tr><th>label</th><th>question</th><th>what was found</th></tr></thead>"
                 f"<tbody>{rows}</tbody></table>") if rows else ""
        seen = html.escape(", ".join(self.looked_at))
        return f"<div><p><strong>{head}</strong></p>{table}<p>looked at: {seen}</p></div>"


def _finding(label: str, message: str) -> Finding:
    return Finding(label, LABELS[label][0], message)


# ------------------------------------------------------------------------------------------------ the trace

_SOFTMAX = {torch.softmax, F.softmax, torch.Tensor.softmax, torch.special.softmax}
_MATMUL = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm, torch.einsum,
           torch.baddbmm, torch.Tensor.baddbmm}
_FILL = {torch.Tensor.masked_fill, torch.Tensor.masked_fill_, torch.masked_fill, torch.where}
_SCALAR = {torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.Tensor.mul, torch.mul, torch.Tensor.__imul__,
           torch.Tensor.mul_, torch.Tensor.__truediv__, torch.Tensor.div, torch.div, torch.Tensor.__itruediv__,
           torch.Tensor.div_, torch.true_divide}
_DIVIDE = {torch.Tensor.__truediv__, torch.Tensor.div, torch.div, torch.Tensor.__itruediv__, torch.Tensor.div_,
           torch.true_divide}
_SAME = {torch.Tensor.transpose, torch.transpose, torch.Tensor.permute, torch.permute, torch.Tensor.contiguous,
         torch.Tensor.view, torch.Tensor.reshape, torch.reshape, torch.Tensor.to, torch.Tensor.float,
         torch.Tensor.half, torch.Tensor.bfloat16, torch.Tensor.double, torch.Tensor.type, torch.Tensor.type_as,
         torch.Tensor.clone, F.dropout, torch.Tensor.expand, torch.Tensor.mT.__get__, torch.Tensor.T.__get__,
         torch.Tensor.__getitem__}
_TO_BOOL = {torch.Tensor.bool, torch.Tensor.to, torch.Tensor.type}
_SDPA = F.scaled_dot_product_attention


@dataclass
class _Call:
    func: object
    args: tuple
    kwargs: dict
    out: object


class _Recorder(TorchFunctionMode):
    """Records the torch calls that the audit reads (outermost calls only: torch's own insides are not seen)."""

    WATCH = _SOFTMAX | _MATMUL | _FILL | _SCALAR | _SAME | _TO_BOOL | {_SDPA, torch.Tensor.__add__,
                                                                     torch.Tensor.__iadd__, torch.add, F.linear}

    def __init__(self):
        super().__init__()
        self.calls: list[_Call] = []
        self.made: list[torch.Tensor] = []   # every tensor a call returned, in order
        self.read: set[int] = set()          # the ids of every tensor a call was given

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in list(args) + list(kwargs.values()):
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if isinstance(t, torch.Tensor):
                    self.read.add(id(t))
        out = func(*args, **kwargs)
        for t in (out if isinstance(out, (list, tuple)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.made.append(t)
        if func in self.WATCH and not _inside_vmap(args):
            self.calls.append(_Call(func, args, kwargs, out))
        return out


def _inside_vmap(args) -> bool:
    """A call on tensors that vmap batches (flex_attention's score_mod): they cannot be read after it returns."""
    return any(isinstance(t, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(t) for t in args)


def _tensor_args(call: _Call) -> list[torch.Tensor]:
    found = [a for a in call.args if isinstance(a, torch.Tensor)]
    if call.func is torch.einsum:
        found = [a for a in (call.args[1:] if len(call.args) > 1 else []) for a in (a if isinstance(a, (list, tuple))
                                                                                     else [a])
                 if isinstance(a, torch.Tensor)]
    if call.func in (torch.baddbmm, torch.Tensor.baddbmm):
        found = found[1:3]
    return found


def _product_factor(call: _Call) -> float:
    """The factor a product applies itself: baddbmm's alpha (beta·input is an added bias, such as ALiBi's)."""
    alpha = call.kwargs.get("alpha", 1) if call.func in (torch.baddbmm, torch.Tensor.baddbmm) else 1
    return float(alpha)


def _einsum_specs(call: _Call, ops: list[torch.Tensor]) -> tuple[str, str, str] | None:
    """An einsum's two operand subscripts and its output's, when they are plain letters; None otherwise."""
    eq = call.args[0] if call.func is torch.einsum and isinstance(call.args[0], str) else None
    if eq is None or "->" not in eq or "." in eq:
        return None
    ins, out = eq.replace(" ", "").split("->")
    ins = ins.split(",")
    if len(ins) != 2 or len(ins[0]) != ops[0].dim() or len(ins[1]) != ops[1].dim():
        return None
    return ins[0], ins[1], out


def _laid(t: torch.Tensor, spec: str, row: str, tail: list[str]) -> torch.Tensor | None:
    """t, of einsum subscripts spec, permuted to (the other axes…, row, tail) with the tail axes flattened."""
    if row not in spec or not tail or row in tail:
        return None
    order = [x for x in spec if x != row and x not in tail] + [row] + tail
    return t.permute([spec.index(x) for x in order]).flatten(-len(tail))


def _rows_and_keys(call: _Call, ops: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The two operands of a score product laid out as (…, T_q, d) and (…, T_k, d): an einsum's operands are
    permuted by its equation ("bqhd,bkhd->bhqk" holds the positions on axis 1), a matmul's second is transposed."""
    a, b = ops
    specs = _einsum_specs(call, ops)
    if specs is None or len(specs[2]) < 2:
        return a, b.mT
    sa, sb, out = specs
    summed = [x for x in sa if x in sb and x not in out]
    q, k = _laid(a, sa, out[-2], summed), _laid(b, sb, out[-1], summed)
    return (a, b.mT) if q is None or k is None else (q, k)


def _values_laid(call: _Call, ops: list[torch.Tensor], weights_first: bool) -> torch.Tensor:
    """The operand that the weights multiply, laid out as (…, T_k, d_v), so that it compares with the keys: an
    einsum's ("bhqk,bkhd->bqhd") by its equation, a matmul's as it is."""
    specs = _einsum_specs(call, ops)
    other = ops[1] if weights_first else ops[0]
    if specs is None:
        return other
    sw, sv = (specs[0], specs[1]) if weights_first else (specs[1], specs[0])
    summed = [x for x in sw if x in sv and x not in specs[2]]
    laid = _laid(other, sv, summed[0], [x for x in sv if x not in sw]) if len(summed) == 1 else None
    return other if laid is None else laid


class _Trace:
    """The calls of one run, with the walks the analysis needs (back through reshapes and scalar factors)."""

    def __init__(self, calls: list[_Call], made=(), read=frozenset(), result=None):
        self.calls = calls
        self.made, self.read = list(made), set(read)
        self.result = {id(t) for t in (result if isinstance(result, (list, tuple)) else (result,))
                       if isinstance(t, torch.Tensor)}

    def unread_like(self, t: torch.Tensor) -> bool:
        """Whether the code made a tensor of t's size that no later call read and that is not its result: a value
        tensor computed and left unused (what tells weights-times-K from attention whose values are its keys)."""
        for m in self.made:
            if (m is not t and m.numel() == t.numel() and m.dim() >= 2 and m.is_floating_point()
                    and id(m) not in self.read and id(m) not in self.result
                    and not (m.shape == t.shape and torch.equal(m.detach(), t.detach()))):
                return True
        return False

    def producer(self, t, before: int) -> int | None:
        for i in range(before - 1, -1, -1):
            if self.calls[i].out is t:
                return i
        return None

    def origin(self, t, before: int, *, through_scalars: bool = True) -> tuple[object, float, int | None]:
        """Walk back from ``t`` through shape-only calls (and scalar factors): (the first other tensor, factor,
        index of its producer)."""
        factor, at = 1.0, before
        for _ in range(64):
            i = self.producer(t, at)
            if i is None:
                return t, factor, None
            c = self.calls[i]
            ts = _tensor_args(c)
            if c.func in _SAME and ts and not (c.func in _TO_BOOL and getattr(c.out, "dtype", None) == torch.bool):
                t, at = ts[0], i
                continue
            if through_scalars and c.func in _SCALAR:
                s = _scalar_factor(c)
                if s is not None:
                    factor *= s
                    t, at = next(a for a in c.args if isinstance(a, torch.Tensor) and a.numel() > 1), i
                    continue
            return t, factor, i
        return t, factor, None

    def from_softmax(self, t, before: int) -> bool:
        _, _, i = self.origin(t, before, through_scalars=False)
        return i is not None and self.calls[i].func in _SOFTMAX


def _scalar_factor(c: _Call) -> float | None:
    """The number a scalar multiply or divide applies, or None when it is not one."""
    tensors = [a for a in c.args if isinstance(a, torch.Tensor)]
    big = [a for a in tensors if a.numel() > 1]
    if len(big) != 1:
        return None
    others = [a for a in list(c.args) + list(c.kwargs.values()) if a is not big[0]]
    if len(others) != 1:
        return None
    s = others[0]
    if isinstance(s, torch.Tensor):
        if s.numel() != 1:
            return None
        s = s.item()
    if not isinstance(s, (int, float)) or s == 0:
        return None
    return 1.0 / s if c.func in _DIVIDE and c.args[0] is big[0] else float(s)


def _seeded(fn, *args):
    """fn(*args) from one fixed random seed: a module in train mode drops the same entries at every call."""
    torch.manual_seed(0)
    return fn(*args)


def _traced(fn, *args):
    rec = _Recorder()
    with rec:
        out = fn(*args)
    return out, _Trace(rec.calls, rec.made, rec.read, out)


# ------------------------------------------------------------------------------------------------ reading a trace

def _blocked(Z: torch.Tensor) -> torch.Tensor:
    return torch.isneginf(Z) | (Z < -1e4)


def _expected(T_q: int, T_k: int) -> torch.Tensor:
    return ~torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + T_k - T_q)


def _rows(allowed: torch.Tensor) -> str:
    return " / ".join("".join("1" if x else "0" for x in row) for row in allowed.tolist())


def _pattern(allowed: torch.Tensor, where: str) -> list[Finding]:
    """Compare a (…, T_q, T_k) table of what each query may read with the causal one."""
    allowed = allowed.detach().cpu().bool()
    flat = allowed.reshape(-1, *allowed.shape[-2:])
    a = flat[0]
    T_q, T_k = a.shape
    want = _expected(T_q, T_k)
    if bool((flat == want).all()):
        return []
    if all(torch.equal(t, want & t[-1]) for t in flat):
        return []   # causal, with whole keys blocked (padding): what such a query then reads is the padding probe's
    shown = f"{where}: query rows read keys {_rows(a)} (1 = may read), where causal attention reads {_rows(want)}"
    i = torch.arange(T_q)[:, None] + (T_k - T_q)
    j = torch.arange(T_k)[None, :]
    if not bool(a.logical_not().any()):
        return []   # nothing masked at all: the leak probe says what that does
    own = torch.arange(T_q) + T_k - T_q   # each query's own key
    if T_q <= T_k and all(bool((t <= want).all() and t[torch.arange(T_q), own].all()) for t in flat):
        return []   # no future, and each query reads itself: a window (its lower edge is not the diagonal)
    if torch.equal(a, j >= i) or torch.equal(a, j > i) or torch.equal(a, ~want):
        return [_finding("mask-convention", f"{shown}: the mask keeps the future and blocks the past, a boolean "
                         "mask read in the other convention (SDPA reads True as may attend).")]
    lost = [str(r) for r in range(T_q) if T_q <= T_k and not a[r, own[r]]]
    if torch.equal(a, j <= i + 1):
        why = "each query also reads the next key"
    elif T_q < T_k and torch.equal(a, j <= torch.arange(T_q)[:, None]):
        why = "the cached step's queries are aligned top-left, as if they were the first positions"
    elif lost and bool((a <= want).all()):
        why = (f"quer{'ies' if len(lost) > 1 else 'y'} {', '.join(lost)} cannot read "
               f"{'their' * (len(lost) > 1) or 'its'} own key")
    else:
        why = "the diagonal is misplaced"
    return [_finding("mask-offset", f"{shown}: {why}.")]


def _joined(steps, T_q: int, T_k: int, where: str) -> list[Finding]:
    """Attention computed in steps (fewer query rows per call than the input has: a token at a time, or chunks,
    through a cache): a step whose keys extend an unfinished chain's last keys continues it, each step's keys taken
    as positions 0, 1, …; a chain of T_q rows is one picture of which keys each query reads, checked as a table."""
    chains, found = [], []   # each chain: [rows so far, its last keys, which keys each query may read]
    for may, _, keys in steps:
        n_q, n_k = may.shape
        if n_q >= T_q or n_k > T_k or keys.dim() < 3:
            continue
        chain = next((c for c in chains if c[0] + n_q <= T_q and _extends(keys, c[1])), None)
        if chain is None:
            chain = [0, keys, torch.zeros(T_q, T_k, dtype=torch.bool)]
            chains.append(chain)
        chain[2][chain[0]:chain[0] + n_q, :n_k] = may
        chain[0], chain[1] = chain[0] + n_q, keys
        if chain[0] == T_q:
            found += _pattern(chain[2], f"{where}, the attention steps joined (the keys as the cache holds them)")
    return found


def _extends(keys: torch.Tensor, last: torch.Tensor) -> bool:
    """Whether keys begin with the rows of last (a cache that grew, or stayed as it was)."""
    n = last.shape[-2]
    return (keys.shape[:-2] == last.shape[:-2] and keys.shape[-1] == last.shape[-1] and n <= keys.shape[-2]
            and _close(keys[..., :n, :].detach().double(), last.detach().double(), 1e-6))


def _factor_text(f: float, d_k: int, d_model: int | None, d_v: int | None = None) -> str:
    if abs(f - 1) < 1e-4:
        return "the scores are not scaled (factor 1)"
    n = 1 / f ** 2
    name = ""
    if abs(n - round(n)) < 1e-3 * n:
        n = round(n)
        name = f" = 1/√{n}"
        if abs(1 / f - round(1 / f)) < 1e-4 * (1 / f) and round(1 / f) in (d_k, d_model):
            name += f" = 1/{round(1 / f)}"
        if d_model and n == d_model and d_model != d_k:
            name += " (d_model, not the head size d_k)"
        elif n == d_k ** 2:
            name += " (1/d_k, not 1/√d_k)"
        elif d_v and n == d_v and d_v != d_k:
            name += f" (the width of V, d_v = {d_v}, not d_k = {d_k})"
    return f"the scores are multiplied by {f:.4f}{name}"


def _read(trace: _Trace, where: str, d_model: int | None, K_in=None, V_in=None, Q_in=None) -> tuple[list[Finding],
                                                                                                   dict]:
    """Findings from one trace, and facts (empty rows, whether a mask or a softmax was seen)."""
    found: list[Finding] = []
    d_v = None if V_in is None else V_in.shape[-1]
    facts = {"softmax": False, "mask": False, "empty": False, "max_score": 0.0, "max_product": 0.0,
             "steps": []}   # steps: (which keys each query row may read, the query rows, the keys) per table
    score_K = []
    for idx, c in enumerate(trace.calls):
        if c.func is _SDPA:
            facts["softmax"] = True
            q, k, v = (list(c.args) + [None] * 3)[:3]
            q = c.kwargs.get("query", q)
            k = c.kwargs.get("key", k)
            v = c.kwargs.get("value", v)
            mask = c.kwargs.get("attn_mask", c.args[3] if len(c.args) > 3 else None)
            causal = c.kwargs.get("is_causal", c.args[5] if len(c.args) > 5 else False)
            scale = c.kwargs.get("scale", None)
            d_k = q.shape[-1]
            used = 1 / math.sqrt(d_k) if scale is None else float(scale)
            _, fq, _ = trace.origin(q, idx)
            _, fk, _ = trace.origin(k, idx)
            total = used * fq * fk
            groups = q.shape[-3] // k.shape[-3] if q.dim() > 2 and k.dim() > 2 and k.shape[-3] else 1
            k_all = k.repeat_interleave(groups, -3) if groups > 1 else k   # enable_gqa: a K head per query group
            facts["max_score"] = max(facts["max_score"], float((q.double() @ k_all.double().mT).abs().max()) * total)
            if abs(total * math.sqrt(d_k) - 1) > 1e-3:
                found.append(_finding("scale", f"{where}: {_factor_text(total, d_k, d_model, d_v)}; scaled dot-product "
                                      f"attention needs 1/√d_k = 1/√{d_k} (scaled_dot_product_attention's own "
                                      f"scale is {'1/√d_k' if scale is None else 'given'})."))
            T_q, T_k = q.shape[-2], k.shape[-2]
            allowed = torch.ones(T_q, T_k, dtype=torch.bool)
            if causal:
                facts["mask"] = True
                allowed = allowed & torch.ones(T_q, T_k, dtype=torch.bool).tril()
            if mask is not None:
                facts["mask"] = True
                m = mask.detach().cpu()
                allowed = allowed & (m if m.dtype == torch.bool else ~_blocked(m.float()))
            converted = ""
            if mask is not None and mask.dtype == torch.bool:
                j = trace.producer(mask, idx)
                if j is not None and trace.calls[j].func in _TO_BOOL:
                    src = _tensor_args(trace.calls[j])
                    if src and src[0].is_floating_point() and bool(_blocked(src[0]).any()):
                        converted = (" The boolean mask was converted from an additive float mask (0 = read, "
                                     "−inf = blocked): its True entries are the blocked ones.")
            pattern = _pattern(allowed.expand(*q.shape[:-2], T_q, T_k) if allowed.dim() > 2 else allowed,
                               f"{where}, scaled_dot_product_attention's mask")
            if converted and pattern and pattern[0].label == "mask-convention":
                pattern = [_finding("mask-convention", pattern[0].message + converted)]
            found += pattern
            facts["empty"] |= bool((~allowed).all(-1).any())
            score_K.append(k)
            facts["steps"].append((allowed.expand(*q.shape[:-2], T_q, T_k).reshape(-1, T_q, T_k)[0], q, k))
            if (v is k or (v.shape == k.shape and torch.equal(v, k))) and (
                    V_in is not None or trace.unread_like(v)):
                found.append(_finding("weights-times-K", f"{where}: scaled_dot_product_attention is given the "
                                      "keys K as its values, so the weights multiply K, not V."))
            continue
        if c.func in _SOFTMAX:
            facts["softmax"] = True
            Z = c.args[0]
            dim = c.kwargs.get("dim", c.args[1] if len(c.args) > 1 else None)
            if Z.dim() < 2:
                continue
            dim = Z.dim() - 1 if dim is None else dim % Z.dim()
            if dim != Z.dim() - 1:
                which = "the query axis" if dim == Z.dim() - 2 else f"axis {dim} of {Z.dim()}"
                found.append(_finding("softmax-axis", f"{where}: softmax runs over {which} of the score table "
                                      f"{tuple(Z.shape)}, so each column, not each query's row, sums to 1; the "
                                      "keys are the last axis."))
            blocked = _blocked(Z.detach())
            facts["mask"] |= bool(blocked.any())
            facts["empty"] |= bool(blocked.all(-1).any())
            found += _pattern(~blocked, f"{where}, the scores that reach softmax")
            # the score table: the last matrix product of the same shape that Z is a multiple of
            for j in range(idx - 1, -1, -1):
                m = trace.calls[j]
                if m.func not in _MATMUL or not isinstance(m.out, torch.Tensor) or m.out.shape != Z.shape:
                    continue
                S, Zd = m.out.detach().double(), Z.detach().double()
                if Q_in is not None and K_in is not None and dim == Z.dim() - 1 and _transposed(S, Q_in, K_in):
                    found.append(_finding("softmax-axis", f"{where}: the score table handed to softmax "
                                          f"{tuple(Z.shape)} is KQᵀ, keys by queries (its rows are keys), so "
                                          "softmax over its last axis runs over the query axis; each query's "
                                          "weights must sum to 1 over the keys."))
                keep = ~blocked & (S.abs() > 1e-6)
                if not bool(keep.any()):
                    continue
                c_post = float((Zd[keep] / S[keep]).median())
                if not torch.allclose(Zd[keep], c_post * S[keep], rtol=1e-3, atol=1e-4):
                    continue
                ops = _tensor_args(m)
                if len(ops) != 2:
                    break
                _, fa, _ = trace.origin(ops[0], j)
                _, fb, _ = trace.origin(ops[1], j)
                rows, keys = _rows_and_keys(m, ops)
                alpha = _product_factor(m)
                total, d_k = c_post * alpha * fa * fb, rows.shape[-1]
                facts["max_score"] = max(facts["max_score"], float((S[keep] / alpha * total).abs().max()))
                if abs(total * math.sqrt(d_k) - 1) > 1e-3:
                    found.append(_finding("scale", f"{where}: {_factor_text(total, d_k, d_model, d_v)} between QKᵀ "
                                          f"and softmax; scaled dot-product attention needs 1/√d_k = 1/√{d_k}."))
                score_K.append(keys)
                facts["steps"].append(((~blocked).reshape(-1, *Z.shape[-2:])[0], rows, keys))
                break
            continue
        if c.func in _FILL or (c.func in _SCALAR and _scalar_factor(c) is None):
            target, dropped = _masked_entries(c)
            if target is not None and target.dim() >= 2 and trace.from_softmax(target, idx) and _partial_rows(
                    dropped, target.shape):
                found.append(_finding("mask-after-softmax", f"{where}: the weights coming out of softmax are "
                                      "masked afterwards, so each row was normalised over keys it then loses "
                                      "(the future still shapes the past through the sum)."))
            continue
        if c.func in _MATMUL:
            ops = _tensor_args(c)
            if len(ops) != 2:
                continue
            out = c.out
            if isinstance(out, torch.Tensor) and out.dim() >= 3 and out.shape[-1] == out.shape[-2] > 1 and not any(
                    trace.from_softmax(a, idx) for a in ops):   # a square table of products: scores, perhaps
                facts["max_product"] = max(facts["max_product"], float(out.detach().abs().max()))
            for a, b in (ops, ops[::-1]):
                if trace.from_softmax(a, idx):
                    partner, _, _ = trace.origin(b, idx, through_scalars=False)
                    laid = _values_laid(c, ops, a is ops[0])
                    keys = [t for t in score_K + [K_in] if t is not None]
                    values = [t for t in [V_in] if t is not None]
                    def same(x, y):
                        return x.shape == y.shape and torch.equal(x.detach(), y.detach())
                    if any(same(b, k) or same(partner, k) or same(laid, k) for k in keys) and not any(
                            same(b, v) or same(partner, v) or same(laid, v) for v in values) and (
                            V_in is not None or trace.unread_like(b)):
                        found.append(_finding("weights-times-K", f"{where}: the weights P multiply the keys K, "
                                              "not the values V" + ("." if V_in is not None else
                                              ", and a value tensor of the same size is computed and never "
                                              "used.")))
                    break
    return _unique(found), facts


def _multiple(S: torch.Tensor, R: torch.Tensor) -> bool:
    """Whether S is c·R for some scalar c ≠ 0 (up to float32 noise)."""
    if S.shape != R.shape or not bool(torch.isfinite(S).all()):
        return False
    c = float((S * R).sum() / (R * R).sum().clamp_min(1e-30))
    return abs(c) > 1e-12 and bool(((S - c * R).abs().max()) <= 1e-4 * (1 + float((c * R).abs().max())))


def _transposed(S: torch.Tensor, Q: torch.Tensor, K: torch.Tensor) -> bool:
    """Whether a score table is KQᵀ (keys by queries) rather than QKᵀ: its rows follow the keys."""
    R = Q.detach().double() @ K.detach().double().mT
    if R.shape[-2] != R.shape[-1]:
        R = R[..., -R.shape[-2]:]   # the square part (the last T_q keys) is what a swapped table can hold
    return _multiple(S, R.mT) and not _multiple(S, R)


def _masked_entries(c: _Call):
    """(the tensor a masking call acts on, a boolean table of the entries it overwrites), or (None, None)."""
    ts = _tensor_args(c)
    if c.func is torch.where:
        if len(c.args) < 3 or not isinstance(c.args[0], torch.Tensor):
            return None, None
        cond, x, y = c.args[:3]
        if isinstance(x, torch.Tensor) and x.dim() >= 2:
            return x, ~cond.bool()
        return (y, cond.bool()) if isinstance(y, torch.Tensor) else (None, None)
    if c.func in _FILL:
        mask = c.args[1] if len(c.args) > 1 else c.kwargs.get("mask")
        return (ts[0], mask.bool()) if ts and isinstance(mask, torch.Tensor) else (None, None)
    if len(ts) == 2:   # a product with a table of 0s and 1s
        return (ts[0], ts[1] == 0) if ts[0].dim() >= ts[1].dim() else (ts[1], ts[0] == 0)
    return None, None


def _partial_rows(dropped, shape) -> bool:
    """Whether some row loses some of its entries but not all: a mask, not the clean-up of an empty row."""
    if dropped is None:
        return False
    try:
        m = dropped.detach().cpu().broadcast_to(shape)
    except RuntimeError:
        return False
    return bool((m.any(-1) & ~m.all(-1)).any())


def _unique(found: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in found:
        if f.label not in seen:
            seen.add(f.label)
            out.append(f)
    return out


# ------------------------------------------------------------------------------------------------ the subjects

def _first_tensor(result, kind: str):
    if isinstance(result, torch.Tensor):
        return result
    logits = getattr(result, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        return result[0]
    want = {"core": "a tensor O (B, h, T_q, d_v)", "layer": "a tensor Y (B, T, d_model), or a tuple whose first "
            "item is one", "model": "logits (B, T, vocab_size), an object with .logits, or a tuple whose first "
            "item is the logits"}[kind]
    raise TypeError(f"audit: the {kind} must return {want}; it returned {_show(result)}")


class _Subject:
    """How to make inputs for one kind, call the object on them, and perturb them."""

    def __init__(self, obj, kind: str, sizes: dict):
        self.obj, self.kind, self.sizes = obj, kind, sizes
        self.max_T = sizes["max_T"]
        self.gen = torch.Generator().manual_seed(0)
        self.dtype, self.device = torch.float32, torch.device("cpu")
        if isinstance(obj, nn.Module):
            p = next(iter(obj.parameters()), None)
            if p is not None:
                self.device = p.device
                if p.is_floating_point() and kind == "layer":
                    self.dtype = p.dtype

    def _randn(self, *shape):
        return torch.randn(*shape, generator=self.gen, dtype=torch.float64).to(self.dtype).to(self.device)

    def inputs(self, B: int, T: int, T_q: int | None = None):
        if self.kind == "core":
            h, d_k, d_v = self.sizes["h"], self.sizes["d_k"], self.sizes["d_v"]
            T_q = T if T_q is None else T_q
            return (self._randn(B, h, T_q, d_k), self._randn(B, h, T, d_k), self._randn(B, h, T, d_v))
        if self.kind == "layer":
            return (self._randn(B, T, self.sizes["d_model"]),)
        ids = torch.randint(0, self.sizes["vocab_size"], (B, T), generator=self.gen)
        return (ids.to(self.device),)

    def call(self, *args):
        try:
            result = _seeded(self.obj, *args)
        except Exception as e:   # the object's own failure, said where it happened
            raise RuntimeError(f"audit: calling the {self.kind} on {self.describe(*_bt(self, args))} raised "
                               f"{type(e).__name__}: {e}") from e
        return _first_tensor(result, self.kind)

    def trace(self, *args):
        out, trace = _traced(_seeded, self.obj, *args)
        return _first_tensor(out, self.kind), trace

    def change_from(self, args, pos: int):
        """A copy of the inputs with every position ≥ pos changed."""
        out = []
        for a in args:
            a = a.clone()
            ax = -2 if self.kind == "core" else 1
            sl = [slice(None)] * a.dim()
            sl[ax] = slice(pos, None)
            if self.kind == "model":
                a[tuple(sl)] = (a[tuple(sl)] + 1) % self.sizes["vocab_size"]
            else:
                a[tuple(sl)] = self._randn(*a[tuple(sl)].shape)
            out.append(a)
        return tuple(out)

    def change_sequence(self, args, b: int):
        out = []
        for a in args:
            a = a.clone()
            if self.kind == "model":
                a[b] = (a[b] + 1) % self.sizes["vocab_size"]
            else:
                a[b] = self._randn(*a[b].shape)
            out.append(a)
        return tuple(out)

    def positions(self, out, sl):
        return out[..., sl, :] if self.kind == "core" else out[:, sl]

    def describe(self, B: int, T: int) -> str:
        if self.kind == "core":
            return f"Q, K, V of B={B}, h={self.sizes['h']}, T={T}, d_k={self.sizes['d_k']}, d_v={self.sizes['d_v']}"
        if self.kind == "layer":
            return f"X of B={B}, T={T}, d_model={self.sizes['d_model']}"
        return f"ids of B={B}, T={T}"


def _differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().double(), b.detach().double()
    scale = 1 + float(a.nan_to_num(0, 0, 0).abs().max()) if a.numel() else 1.0
    return not _close(a, b, 1e-4 * scale)


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())


# ------------------------------------------------------------------------------------------------ the probes

def _leak_at(s: _Subject, T: int) -> list[int]:
    """The earlier positions whose output changes when position T − 1 of a batch of one changes."""
    args = s.inputs(1, T)
    base = s.call(*args)
    moved = s.call(*s.change_from(args, T - 1))
    return [i for i in range(T - 1) if _differs(s.positions(base, slice(i, i + 1)),
                                                s.positions(moved, slice(i, i + 1)))]


def _probe_leak(s: _Subject) -> Finding | None:
    # a few lengths first (a buffer sliced wrongly can be right at one length only); the search for the smallest
    # input only when one of them leaks
    if not any(_leak_at(s, T) for T in sorted({2, min(3, s.max_T), s.max_T})):
        return None
    for T in range(2, s.max_T + 1):
        changed = _leak_at(s, T)
        if changed:
            where = ", ".join(map(str, changed))
            return _finding("leak", f"with {s.describe(1, T)}, changing only position {T - 1} changes the output "
                            f"at position{'s' * (len(changed) > 1)} {where}: an earlier output reads the future.")
    return None


def _probe_reads(s: _Subject) -> Finding | None:
    """Which positions each output reads (change one position at a time): queries that also read the next key
    (the causal set shifted by one, for some or all queries), or whose output moves with other positions but not
    with their own (a core's K and V, a layer's X: that query cannot read itself), are mask-offset."""
    T = s.max_T
    args = s.inputs(1, T)
    base = s.call(*args)
    reads = torch.zeros(T, T, dtype=torch.bool)
    for j in range(T):
        moved = []
        for n, a in enumerate(args):
            a = a.clone()
            if s.kind == "core" and n == 0:
                moved.append(a)
                continue
            sl = (Ellipsis, slice(j, j + 1), slice(None)) if s.kind == "core" else (slice(None), slice(j, j + 1))
            if s.kind == "model":
                a[sl] = (a[sl] + 1) % s.sizes["vocab_size"]
            else:
                a[sl] = s._randn(*a[sl].shape)
            moved.append(a)
        out = s.call(*moved)
        for i in range(T):
            reads[i, j] = _differs(s.positions(base, slice(i, i + 1)), s.positions(out, slice(i, i + 1)))
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    causal = j <= i
    extra = reads & ~causal   # only what is read and should not be: an unread key may just have a tiny weight
    shown = (f"with {s.describe(1, T)}, changing one position at a time: query rows read keys {_rows(reads)} "
             f"(1 = the output changes), where causal attention reads {_rows(causal)}")
    if bool(extra.any()) and bool((~extra | (j == i + 1)).all()):
        rows = [str(q) for q in range(T) if bool(extra[q].any())]
        return _finding("mask-offset", f"{shown}: quer{'ies' if len(rows) > 1 else 'y'} {', '.join(rows)} "
                        "also read the next key, the causal set shifted by one.")
    alone = [str(q) for q in range(T) if not reads[q, q] and bool(reads[q].any())]
    if alone and not bool(extra.any()):   # reading the future has its own findings
        return _finding("mask-offset", f"{shown}: the output of quer{'ies' if len(alone) > 1 else 'y'} "
                        f"{', '.join(alone)} does not move with {'their' * (len(alone) > 1) or 'its'} own position: "
                        "a query that cannot read its own key.")
    return None


def _probe_last_token(s: _Subject) -> Finding | None:
    """Change only the last token. The last query row of each score table (the changed position's query, in a whole
    table or in a step) must read a key that changes too, its own: if none does, it cannot read itself, however the
    code splits its steps (mask-offset). The queries that reach the first table may change in their last row only."""
    T = min(4, s.max_T)
    args = s.inputs(1, T)
    traces = s.trace(*args)[1], s.trace(*s.change_from(args, T - 1))[1]
    before, after = (_read(t, "", None)[1]["steps"] for t in traces)
    for (may, q0, k0), (_, q1, k1) in zip(before, after):
        if q0.shape == q1.shape and k0.shape == k1.shape and k0.dim() >= 3 and may[-1].any() and _differs(
                q0[..., -1, :], q1[..., -1, :]) and not any(_differs(k0[..., j, :], k1[..., j, :]) for j in
                                                            may[-1].nonzero().flatten().tolist()):
            return _finding("mask-offset", f"with {s.describe(1, T)}, changing only position {T - 1} changes the "
                            f"last query of a score table ({q0.shape[-2]} by {k0.shape[-2]} keys) but none of the "
                            "keys it reads: the query cannot read its own key.")
    projected = [next((c.args[0] for c in t.calls if c.func is F.linear), None) for t in traces]
    if all(isinstance(x, torch.Tensor) and x.dim() == 3 and x.shape[1] == T for x in projected) and any(
            _differs(projected[0][:, i], projected[1][:, i]) for i in range(T - 1)):
        return None   # the positions are mixed before the first projection (a norm or a convolution over time)
    if not before or not after or before[0][1].shape != after[0][1].shape or before[0][1].shape[-2] != T:
        return None
    rows = [i for i in range(T - 1) if _differs(before[0][1][..., i, :], after[0][1][..., i, :])]
    if not rows:
        return None
    return _finding("head-split", f"with {s.describe(1, T)}, changing only position {T - 1} changes row"
                    f"{'s' * (len(rows) > 1)} {', '.join(map(str, rows))} of the queries that reach the first "
                    "score table: a row of Q must come from its own position only (heads split by a reshape "
                    "without a transpose?).")


def _probe_batch(s: _Subject) -> Finding | None:
    """Change each sequence of a batch of three in turn and watch every other one, earlier and later."""
    T, B = min(3, s.max_T), 3
    args = s.inputs(B, T)
    base = s.call(*args)
    for b in range(B):
        moved = s.call(*s.change_sequence(args, b))
        hit = [o for o in range(B) if o != b and _differs(base[o], moved[o])]
        if hit:
            which = ", ".join(map(str, hit))
            return _finding("batch-mixing", f"with {s.describe(B, T)}, changing sequence {b} changes the output "
                            f"of sequence{'s' * (len(hit) > 1)} {which}: the sequences of a batch must not read "
                            "each other.")
    return None


def _padded(s: _Subject, B: int, T: int):
    """A batch that begins as padding does: a model's sequences start with a repeated pad id (0, the last id, 1),
    a layer's first positions are zero vectors, a core's first key of sequence 0 is all zeros."""
    args = s.inputs(B, T)
    if s.kind == "model":
        ids = args[0].clone()
        pads = [0, s.sizes["vocab_size"] - 1, 1][:B]
        for b, pad in enumerate(pads):
            ids[b, :2] = pad
        return (ids,), (f"ids of B={B}, T={T} whose sequences begin with a repeated pad id "
                        f"({', '.join(map(str, pads))})")
    if s.kind == "layer":
        X = args[0].clone()
        X[0, :2] = 0
        return (X,), f"X of B={B}, T={T}, d_model={s.sizes['d_model']} whose sequence 0 begins with two zero vectors"
    Q, K, V = (a.clone() for a in args)
    K[0, :, 0] = 0
    return (Q, K, V), f"Q, K, V of B={B}, h={s.sizes['h']}, T={T} whose key 0 of sequence 0 is all zeros"


def _probe_padding(s: _Subject) -> Finding | None:
    """A padded batch: NaN where the code's own mask leaves a query no key is nan-empty-row."""
    args, shown = _padded(s, 3 if s.kind == "model" else 2, min(4, s.max_T))
    try:
        out, trace = s.trace(*args)
        # Run untraced too: a traced call can take another path (nn.MultiheadAttention's fused inference path
        # is skipped while a torch function mode is active, and only that path gives NaN for an empty row).
        plain = s.call(*args)
    except Exception:  # noqa: BLE001 - the ordinary input ran; a failure on zeros is not one of the labels
        return None
    if _finite(out) and _finite(plain):
        return None
    _, facts = _read(trace, "", None)
    if facts["empty"]:
        return _finding("nan-empty-row", f"with {shown}, the output holds NaN: the code's own mask leaves a "
                        "query with no key to read (a padded batch), and softmax of a row of −inf is NaN.")
    if _finite(out):   # NaN only on the untraced path: a fused kernel that the trace cannot look inside
        return _finding("nan-empty-row", f"with {shown}, the output holds NaN when the code runs as it is "
                        "(its fused path), though finite when traced: a padded query left with no key to read "
                        "gives NaN on that path.")
    return _finding("nan", f"with {shown}, the output holds NaN or inf.")


def _probe_cached(s: _Subject) -> Finding | None:
    T, T_q = min(5, s.max_T), 2
    Q, K, V = s.inputs(1, T)
    full = s.call(Q, K, V)
    where = f"a cached step (T_q={T_q} queries, the last of T_k={T} keys)"
    try:
        step, trace = s.trace(Q[..., -T_q:, :], K, V)
    except Exception as e:  # noqa: BLE001 - the core's own failure is the finding
        return _finding("cached-step", f"{where} raises {type(e).__name__}: the core must accept fewer queries "
                        "than keys.")
    if tuple(step.shape) == tuple(full[..., -T_q:, :].shape) and not _differs(step, full[..., -T_q:, :]):
        return None
    seen = [f for f in _read(trace, f"in {where}", None)[0] if f.label == "mask-offset"]
    if seen:
        return seen[0]
    return _finding("cached-step", f"{where} gives other outputs than the last {T_q} rows of the full "
                    f"computation on the same Q, K, V.")


def _low_precision_copy(s: _Subject, dtype):
    obj = s.obj
    if isinstance(obj, nn.Module):
        obj = copy.deepcopy(obj).to(dtype)
    elif s.kind != "core":
        return None
    return obj


def _probe_half(s: _Subject, args, base, shown: str | None = None) -> tuple[Finding | None, str | None]:
    if not _finite(base):
        return None, None
    shown = shown or s.describe(*_bt(s, args))
    for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
        obj = _low_precision_copy(s, dtype)
        if obj is None:
            return None, "half precision (not a module)"
        low = tuple(a.to(dtype) if a.is_floating_point() else a for a in args)
        try:
            out = _first_tensor(_seeded(obj, *low), s.kind)
        except Exception as e:  # noqa: BLE001 - a failure in half precision is the finding
            rec = _Recorder()   # run again, recorded: where did float32 enter?
            with rec, contextlib.suppress(Exception):
                _seeded(obj, *low)
            mix = next((c for c in rec.calls if {t.dtype for t in _tensor_args(c)} >= {dtype, torch.float32}), None)
            why = "" if mix is None else (
                f": a {mix.func.__name__.strip('_')} of a {name} tensor and a float32 one of shape "
                f"{tuple(next(t for t in _tensor_args(mix) if t.dtype == torch.float32).shape)} gives float32 (a "
                "table the code builds in float32, such as rotary cos/sin or a mask, not cast to the input's "
                f"dtype), and a later call refuses to mix float32 and {name}")
            return _finding("half-precision", f"with {shown} in {name} the code raises "
                            f"{type(e).__name__}, where float32 runs{why}."), None
        if not _finite(out):
            return _finding("half-precision", f"with {shown} in {name} the output holds NaN "
                            "or inf where float32 gives finite values (a fill value or a product that the "
                            "format cannot hold?)."), None
    return None, None


def _bt(s: _Subject, args) -> tuple[int, int]:
    a = args[0]
    return (a.shape[0], a.shape[-2] if s.kind == "core" else a.shape[1])


def _probe_unstable(s: _Subject, max_score: float) -> tuple[Finding | None, str | None]:
    T = min(4, s.max_T)
    args = s.inputs(1, T)
    if s.kind == "model":
        return None, None
    if s.kind == "core":
        Q, K, V = args
        S = (Q.double() @ K.double().mT) / math.sqrt(s.sizes["d_k"])
        alpha = 1000.0 / float(S.abs().max())
        args = (Q * alpha, K, V)
    else:
        if max_score <= 0:
            return None, "large scores (no score table seen)"
        alpha = math.sqrt(1000.0 / max_score)
        args = (args[0] * alpha,)
    try:
        out, trace = s.trace(*args)
    except Exception as e:  # noqa: BLE001 - a failure on large scores is the finding
        return _finding("unstable", f"with {s.describe(1, T)} scaled so that score entries reach 100 in size, "
                        f"the code raises {type(e).__name__}."), None
    if s.kind == "layer":
        _, facts = _read(trace, "", None)
        if max(facts["max_score"], facts["max_product"]) < 100:
            return None, "large scores (not reached)"
    if not _finite(out):
        return _finding("unstable", f"with {s.describe(1, T)} scaled so that score entries reach 100 in size, "
                        "the output holds NaN or inf: exp of a large score overflows unless the row's maximum is "
                        "subtracted first."), None
    return None, None


# ------------------------------------------------------------------------------------------------ variants (cores)

def _variant_outputs(Q, K, V) -> dict[str, torch.Tensor]:
    """Named wrong cores, as the checkers' mistakes: a core whose output matches one of them is that mistake."""
    Q, K, V = Q.double(), K.double(), V.double()
    d_k = Q.shape[-1]
    T_q, T_k = Q.shape[-2], K.shape[-2]
    S = Q @ K.mT
    M = torch.zeros(T_q, T_k, dtype=torch.float64).masked_fill(~_expected(T_q, T_k), float("-inf"))
    right = torch.softmax(S / math.sqrt(d_k) + M, -1)
    return {
        "scale": torch.softmax(S / d_k + M, -1) @ V,
        "softmax-axis": torch.softmax(S / math.sqrt(d_k) + M, -2).nan_to_num() @ V,
        "weights-times-K": right @ K,
        "mask-after-softmax": torch.softmax(S / math.sqrt(d_k), -1).masked_fill(M < 0, 0) @ V,
        "mask-convention": torch.softmax((S / math.sqrt(d_k)).masked_fill(M == 0, float("-inf")), -1) @ V,
    }


def _probe_variants(s: _Subject) -> Finding | None:
    args = s.inputs(1, min(4, s.max_T))
    out = s.call(*args)
    for label, want in _variant_outputs(*args).items():
        if out.shape == want.shape and _close(out.double(), want, 1e-4):
            return _finding(label, f"with {s.describe(1, args[1].shape[-2])} the output equals a core with this "
                            f"mistake: {LABELS[label][1]}.")
    return None


# ------------------------------------------------------------------------------------------------ the audit

def _audit_args(obj, kind, sizes):
    kind = require_choice(kind, "kind", KINDS)
    if not callable(obj):
        raise TypeError(f"audit: obj must be the attention code to call (a function or an nn.Module), "
                        f"got {_show(obj)}")
    if isinstance(obj, type):
        raise TypeError(f"audit: obj must be an instance to call, e.g. {obj.__name__}(...) built with its sizes, got "
                        f"the class {obj.__name__} itself")
    allowed = _SIZES[kind]
    extra = sorted(set(sizes) - set(allowed))
    if extra:
        raise TypeError(f"audit(kind={kind!r}) takes the sizes {', '.join(allowed)}; got {', '.join(extra)}")
    missing = [n for n, v in allowed.items() if v is None and n not in sizes]
    if missing:
        example = {"layer": "audit(layer, kind='layer', d_model=64)",
                   "model": "audit(model, kind='model', vocab_size=65)"}[kind]
        raise TypeError(f"audit(kind={kind!r}) needs the size {missing[0]}, e.g. {example}")
    full = {**allowed, **sizes}
    full.update(zip(full, require_positive(**full)))
    if kind == "core" and "d_v" not in sizes and full["d_v"] == full["d_k"]:
        full["d_v"] = full["d_k"] + 4   # V's width differs from d_k, so a scale by √d_v is seen and named
    if full["max_T"] < 2:
        raise ValueError(f"max_T must be at least 2 (a leak needs two positions), got {full['max_T']}")
    T, width = full["max_T"], full.get("d_model") or full.get("vocab_size") or 2 * full["d_k"] + full["d_v"]
    require_fits("audit", {f"max_T={T}": full.get("h", 1) * T * (T + width)}, what="numbers")   # inputs, scores
    return {"kind": kind, "sizes": full}


@boundary(_audit_args)
def audit(obj, kind: str = "core", **sizes) -> Report:
    """Ask the four questions of ``obj``: trace what it computes and probe its properties; return a Report.

    ``kind="core"``: obj(Q, K, V) → O, Q (B, h, T_q, d_k), K (B, h, T_k, d_k), V (B, h, T_k, d_v).
    ``kind="layer"``: obj(X) → Y, X and Y (B, T, d_model) (or a tuple whose first item is Y); needs ``d_model``.
    ``kind="model"``: obj(ids) → logits (B, T, vocab_size) (or ``.logits``, or a tuple); needs ``vocab_size``.

    An ``nn.Module`` is audited in the mode it is in, as it would run: in train mode BatchNorm's batch statistics
    mix the sequences of a batch, and that is found; in eval mode it is not there to find. Every call starts from
    the same random seed, so dropout drops the same entries each time and the probes compare like with like; the
    object's buffers (BatchNorm's running statistics) are put back afterwards. The report's "looked at" line says
    which mode was audited.
    """
    s = _Subject(obj, kind, sizes)
    report = Report(kind)
    modules = list(obj.modules()) if isinstance(obj, nn.Module) else []
    saved = [(m, name, b.detach().clone()) for m in modules for name, b in m.named_buffers(recurse=False)]
    devices = [s.device.index or 0] if s.device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            _run(s, report)
        if modules:
            mode = ("train mode, as given (each call with the same random seed)" if any(m.training for m in modules)
                    else "eval mode, as given (train-mode behaviour, such as BatchNorm's batch statistics, not seen)")
            report.looked_at.append(f"all of it with the object in {mode}")
    finally:
        with torch.no_grad():
            for m, name, value in saved:   # in place where the buffer is still the same size, else put back
                b = m._buffers.get(name)
                if b is not None and b.shape == value.shape and b.dtype == value.dtype:
                    b.copy_(value)
                else:
                    m._buffers[name] = value
    return report


audit.LABELS = LABELS   # so that attnlib.audit.LABELS works, though the package's name `audit` is this function


def _run(s: _Subject, report: Report) -> None:
    found: list[Finding] = []
    T = min(3, s.max_T)
    args = s.inputs(1, T)
    K_in, V_in = (args[1], args[2]) if s.kind == "core" else (None, None)
    try:
        out, trace = s.trace(*args)
    except Exception as e:
        if str(e).startswith("audit:"):   # what came back is not a tensor: said by _first_tensor
            raise
        raise RuntimeError(f"audit: calling the {s.kind} on {s.describe(1, T)} raised {type(e).__name__}: {e}") \
            from e
    want = {"core": lambda: (1, s.sizes["h"], T, s.sizes["d_v"]), "layer": lambda: (1, T, s.sizes["d_model"]),
            "model": lambda: (1, T, s.sizes["vocab_size"])}[s.kind]()
    h, d_k, d_v = (s.sizes.get(n) for n in ("h", "d_k", "d_v"))
    if s.kind == "core" and d_v != d_k and tuple(out.shape) == (1, h, T, d_k):
        # the output has K's width, not V's: the weights multiply K; audit the rest with V as wide as K
        s.sizes["d_v"] = d_k
        s.gen.manual_seed(0)
        _run(s, report)
        report.findings = _unique([_finding("weights-times-K", f"with Q, K of width d_k={d_k} and V of width "
                                            f"d_v={d_v}, the output has width {d_k}, not {d_v}: the weights "
                                            "multiply K, not V.")] + report.findings)
        return
    if tuple(out.shape) != want:
        raise ValueError(f"audit: the {s.kind} returned a tensor of shape {tuple(out.shape)} for "
                         f"{s.describe(1, T)}; expected {want}")
    traced, facts = _read(trace, f"with {s.describe(1, T)}", s.sizes.get("d_model"), K_in, V_in,
                          args[0] if s.kind == "core" else None)
    report.looked_at.append("the trace (softmax, products, masks, SDPA)" if facts["softmax"]
                            else "the trace (no softmax seen)")
    found += traced
    if not _finite(out):
        if facts["empty"]:
            found.append(_finding("nan-empty-row", f"with {s.describe(1, T)} the output holds NaN: the code's own "
                                  "mask leaves a query with no key to read, and softmax of a row of −inf is NaN."))
        else:
            found.append(_finding("nan", f"with {s.describe(1, T)} (ordinary float32 values) the output holds NaN "
                                  "or inf."))
    leak = _probe_leak(s)
    report.looked_at.append("a future token")
    if leak:
        if facts["softmax"] and not facts["mask"]:
            leak = _finding("leak", leak.message + " No entry of the score table is masked before softmax.")
        found.append(leak)
    if leak or s.kind != "model":   # which keys each query reads: its own, and not the next one
        offset = _probe_reads(s)
        report.looked_at.append("which keys each query reads")
        if offset:
            found.append(offset)
    if s.kind != "core" and facts["steps"]:
        split = _probe_last_token(s)
        report.looked_at.append("the rows of Q and K when one token changes")
        if split:
            found.append(split)
    batch = _probe_batch(s)
    report.looked_at.append("each other sequence")
    if batch:
        found.append(batch)
    if _finite(out):
        pad = _probe_padding(s)
        report.looked_at.append("a padded batch")
        if pad:
            found.append(pad)
    if s.kind == "core":
        cached = _probe_cached(s)
        report.looked_at.append("a cached step")
        if cached:
            found.append(cached)
        if not facts["softmax"]:
            variant = _probe_variants(s)
            report.looked_at.append("named wrong cores")
            if variant:
                found.append(variant)
    B2 = s.inputs(2, min(4, s.max_T))
    half, skipped = _probe_half(s, B2, s.call(*B2))
    if not half and not skipped:   # a padded batch in half precision: a fill value that only padding brings in
        padded, shown = _padded(s, 3 if s.kind == "model" else 2, min(4, s.max_T))
        with contextlib.suppress(Exception):
            half, _ = _probe_half(s, padded, s.call(*padded), shown)
    report.looked_at.append("float16 and bfloat16" if not skipped else f"not {skipped}")
    if half:
        found.append(half)
    unstable, skipped = (None, "large scores (NaN already)") if not _finite(out) else _probe_unstable(
        s, facts["max_score"] or facts["max_product"] / 4)
    if s.kind != "model":
        report.looked_at.append("large scores" if not skipped else f"not {skipped}")
    if unstable:
        found.append(unstable)
    if s.max_T > T:   # the trace again at the longest length: code that reads a prompt in chunks through a cache
        long = s.inputs(1, s.max_T)   # calls SDPA with fewer queries than keys only when the prompt is long
        core = long if s.kind == "core" else (None, None, None)
        try:
            where = f"with {s.describe(1, s.max_T)}"
            long_found, long_facts = _read(s.trace(*long)[1], where, s.sizes.get("d_model"), core[1], core[2],
                                           core[0])
            found += long_found + _joined(long_facts["steps"], s.max_T, s.max_T, where)
        except Exception:  # noqa: BLE001 - the probes above already ran it at this length
            pass
        report.looked_at.append(f"the trace at T={s.max_T}")
    report.findings = _unique(found + _joined(facts["steps"], T, T, f"with {s.describe(1, T)}"))
