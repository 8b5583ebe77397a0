"""Fuzzing the library's input boundary with hypothesis (deterministic: ``derandomize=True``, no deadline).

For every public entry point (``attnlib.__all__``, the modules' public functions, ``forward``, ``generate``,
``loss``, ``KVCache``, the cost formulas and the plots) the tests generate

* wrong inputs: wrong rank, width or dtype, empty axes, mismatched batch axes, out-of-range token IDs and
  offsets, mismatched caches, non-tensors, bad sizes, numbers, switches and names. Each must raise ValueError
  or TypeError *from attnlib's own code* (the last frame of the traceback is in the library, not in torch),
  whose message names the expected and the actual value;
* legitimate variants: transposed, strided and expanded views, extra batch axes, an empty batch, int32 IDs,
  NumPy integers as sizes. Each must give exactly (bit for bit) the result of the plain input.

Every call runs under a timer, so a hang fails the test instead of stopping the suite.
"""

from __future__ import annotations

import faulthandler
import functools
import math
import os
import signal
import threading
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import attnlib  # noqa: E402
from attnlib import (  # noqa: E402
    GPT,
    MLP,
    Block,
    CharTokenizer,
    FusedProjections,
    GPTConfig,
    KVCache,
    LearnedPositions,
    MultiHeadAttention,
    Projections,
    SingleHeadAttention,
    TokenEmbedding,
    ToyTokenizer,
    apply_rope,
    attend,
    attention,
    attention_weights,
    causal_mask,
    costs,
    merge_heads,
    one_hot_embedding,
    plots,
    project,
    reference,
    rope_angles,
    runtime,
    scale,
    scores,
    sinusoidal_positions,
    softmax,
    split_heads,
    train,
)
from attnlib.embedding import require_ids  # noqa: E402

LIB = Path(attnlib.__file__).resolve().parent
TIMEOUT_S = 10.0
FUZZ = settings(derandomize=True, deadline=None, database=None, print_blob=False,
                suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------------------------------------- harness

CASES = {"wrong inputs rejected": 0, "legitimate variants accepted": 0}


@pytest.fixture(scope="module", autouse=True)
def count_cases():
    """With ATTNLIB_FUZZ_REPORT=path, write how many cases ran (for a maintainer sizing the fuzz)."""
    yield
    path = os.environ.get("ATTNLIB_FUZZ_REPORT")
    if path:
        Path(path).write_text("".join(f"{k}: {v}\n" for k, v in CASES.items()))


class Hang(BaseException):
    """Raised by the timer: a BaseException, so no ``except Exception`` in the code under test can swallow it."""


@contextmanager
def time_limit(seconds: float = TIMEOUT_S):
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def on_alarm(signum, frame):
            raise Hang(f"no answer after {seconds} s")

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    else:   # no signals off the main thread: dump the stacks and stop the process instead of hanging
        faulthandler.dump_traceback_later(seconds, exit=True)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()


def run(fn: Callable[[], object]):
    """fn() under the timer; a hang fails the test."""
    try:
        with time_limit():
            return fn()
    except Hang as e:
        pytest.fail(f"hang: {e}")


def rejects_at_boundary(fn: Callable[[], object], *fragments: str, any_of: tuple[str, ...] = (), origin: Path = LIB):
    """fn() must raise ValueError or TypeError from the library, naming every fragment (and one of any_of)."""
    try:
        run(fn)
    except (ValueError, TypeError) as e:
        message = str(e)
        missing = [f for f in fragments if f not in message]
        assert not missing, f"{missing} not named in: {message}"
        assert not any_of or any(f in message for f in any_of), f"none of {any_of} named in: {message}"
        last = Path(traceback.extract_tb(e.__traceback__)[-1].filename).resolve()
        assert last.is_relative_to(origin), f"raised deep inside {last}, not at the boundary: {message}"
        CASES["wrong inputs rejected"] += 1
        return e
    except Exception as e:  # noqa: BLE001 - anything else is the defect this file looks for
        pytest.fail(f"{type(e).__name__} instead of ValueError/TypeError: {e}")
    pytest.fail(f"a wrong input was accepted (expected an error naming {fragments or any_of})")


def same(a, b) -> bool:
    """Bit-for-bit equality of results: tensors, modules (their parameters), and containers of them."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, nn.Module):
        sa, sb = a.state_dict(), b.state_dict()
        return type(a) is type(b) and sa.keys() == sb.keys() and all(same(sa[k], sb[k]) for k in sa)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def accepts_alike(fn: Callable[..., object], variant: tuple, plain: tuple):
    """fn(*variant) must give exactly fn(*plain)."""
    got, want = run(lambda: fn(*variant)), run(lambda: fn(*plain))
    assert same(got, want), "a legitimate variant of the input changed the result"
    CASES["legitimate variants accepted"] += 1
    return got


def seeded(build: Callable[[], object], seed: int = 0):
    """build() with torch's global generator seeded, and the caller's generator state left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def no_numpy_sizes(obj) -> None:
    """A module built from NumPy integers keeps plain ints (they end up in messages and in shapes)."""
    for m in obj.modules() if isinstance(obj, nn.Module) else ():
        for k, v in vars(m).items():
            assert not isinstance(v, np.generic), f"{type(m).__name__}.{k} kept a NumPy {type(v).__name__}"


# ---------------------------------------------------------------------------------------------- tensors


def randn(shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


LAYOUTS = ("transposed", "strided", "expanded")


def stored(x: torch.Tensor, kind: str) -> torch.Tensor:
    """A view with x's shape but another memory layout. "expanded" repeats x's first entry along axis 0."""
    if kind == "transposed" and x.dim() >= 2:
        order = tuple(range(x.dim()))[::-1]
        return x.permute(order).contiguous().permute(order)
    if kind == "strided":
        big = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype)
        big[..., ::2] = x
        return big[..., ::2]
    if kind == "expanded" and x.dim() >= 1 and x.shape[0] > 0:
        return x[:1].expand(x.shape)
    return x


@dataclass
class Arg:
    """A tensor argument: its axes as the library names them (e.g. "... T d_model") and its dtype."""

    dims: str
    dtype: torch.dtype = torch.float32
    high: int = 0                      # integer arguments: valid values are 0..high-1
    linked: tuple[str, ...] = ()       # axes whose size is checked (pinned by a module or by another argument)
    any_rank: bool = False             # any number of axes is valid (and empty axes too)
    optional_lead: bool = False        # the first axis may be left out, e.g. ids (T,) or (B, T)
    nullable: bool = False             # None is a valid value (e.g. X_kv=None: self-attention)


@dataclass
class Entry:
    """A function of tensors, with what the library checks about them."""

    name: str
    call: Callable[..., object]
    args: dict[str, Arg]
    sizes: dict[str, int]              # the valid size of every named axis
    batched: bool = False              # the "..." axes of all arguments must agree
    weights: bool = False              # a module with float32 weights: a float64 input is an error
    empty_batch: bool = True           # B = 0 (or empty "..." axes) is accepted
    lead: tuple[int, ...] = (2,)

    def shape(self, arg: Arg, sizes=None, lead=None) -> tuple[int, ...]:
        sizes, lead = sizes or self.sizes, self.lead if lead is None else lead
        out: list[int] = []
        for n in arg.dims.split():
            out.extend(lead if n == "..." else [sizes[n]])
        return tuple(out)

    def make(self, name: str, shape, seed: int) -> torch.Tensor:
        arg = self.args[name]
        if arg.dtype.is_floating_point:
            return randn(shape, seed, arg.dtype)
        return torch.randint(0, arg.high, shape, generator=torch.Generator().manual_seed(seed), dtype=arg.dtype)

    def valid(self, seed: int, sizes=None, lead=None) -> dict[str, torch.Tensor]:
        return {n: self.make(n, self.shape(a, sizes, lead), seed + k) for k, (n, a) in enumerate(self.args.items())}

    def __call__(self, tensors: dict[str, object]):
        return self.call(*tensors.values())


BAD_TENSOR = ("rank-", "rank+", "width", "empty", "batch", "dtype", "float64", "numpy", "list", "none")
GOOD_TENSOR = LAYOUTS + ("lead", "empty-batch", "int32")


def bad_tensor_case(entry: Entry, data) -> tuple[dict, tuple[str, ...], tuple[str, ...]] | None:
    """Wrong arguments for entry, and the fragments the error must name (all of, one of); None if not applicable."""
    seed = data.draw(st.integers(0, 2**16), label="seed")
    tensors = entry.valid(seed)
    name = data.draw(st.sampled_from(list(entry.args)), label="argument")
    arg, x = entry.args[name], tensors[name]
    axes = arg.dims.split()
    fixed = axes[0] != "..."
    named = [a for a in axes if a != "..."]
    kind = data.draw(st.sampled_from(BAD_TENSOR), label="mistake")
    floating = arg.dtype.is_floating_point
    if kind == "rank-" and not (arg.any_rank or arg.optional_lead):
        bad_shape = entry.shape(arg)[len(entry.shape(arg)) - len(named) + 1:]
        tensors[name] = entry.make(name, bad_shape, seed)
        return tensors, (str(bad_shape),), ()
    if kind == "rank+" and fixed and not arg.any_rank:
        tensors[name] = bad = x[None].expand(2, *x.shape).contiguous()
        return tensors, (str(tuple(bad.shape)),), ()
    if kind == "width" and arg.linked:
        axis = data.draw(st.sampled_from(arg.linked), label="axis")
        sizes = {**entry.sizes, axis: entry.sizes[axis] + 1}
        tensors[name] = bad = entry.make(name, entry.shape(arg, sizes), seed)
        return tensors, (axis,), (str(tuple(bad.shape)), f"{axis}={sizes[axis]}")
    if kind == "empty" and not arg.any_rank:
        axis = data.draw(st.sampled_from([a for a in named if a != "B"]), label="axis")
        tensors[name] = bad = entry.make(name, entry.shape(arg, {**entry.sizes, axis: 0}), seed)
        return tensors, (), ("at least 1", str(tuple(bad.shape)))
    if kind == "batch" and entry.batched and not fixed:
        tensors[name] = entry.make(name, entry.shape(arg, lead=(3,)), seed)
        return tensors, ("batch axes",), ()
    if kind == "dtype":
        if floating:
            dtype = data.draw(st.sampled_from([torch.int64, torch.bool, torch.int32]), label="dtype")
            tensors[name] = x.to(dtype)
            return tensors, (str(dtype),), ()
        tensors[name] = x.float()
        return tensors, ("torch.float32",), ("integer",)
    if kind == "float64" and floating and (entry.weights or sum(a.dtype.is_floating_point
                                                                 for a in entry.args.values()) > 1):
        tensors[name] = x.double()
        return tensors, ("torch.float64", "torch.float32"), ()
    if kind == "numpy":
        tensors[name] = x.numpy()
        return tensors, ("torch.Tensor", "ndarray"), ()
    if kind == "list":
        tensors[name] = x.tolist()
        return tensors, ("torch.Tensor", "list"), ()
    if kind == "none" and not arg.nullable:
        tensors[name] = None
        return tensors, ("torch.Tensor", "NoneType"), ()
    return None


def good_tensor_case(entry: Entry, data) -> tuple[dict, dict] | None:
    """(variant, plain): a legitimate variant of valid arguments and the same values as plain tensors."""
    seed = data.draw(st.integers(0, 2**16), label="seed")
    kind = data.draw(st.sampled_from(GOOD_TENSOR), label="variant")
    if kind in LAYOUTS:
        views = {n: stored(x, kind) for n, x in entry.valid(seed).items()}
        return views, {n: v.contiguous() for n, v in views.items()}
    if kind == "lead" and any(a.dims.startswith("...") for a in entry.args.values()):
        lead = data.draw(st.sampled_from([(), (1,), (2, 3)]), label="lead")
        tensors = entry.valid(seed, lead=lead)
        return tensors, {n: x.clone() for n, x in tensors.items()}
    if kind == "empty-batch" and entry.empty_batch:
        sizes = {**entry.sizes, "B": 0}
        tensors = entry.valid(seed, sizes=sizes, lead=(0,))
        return tensors, {n: x.clone() for n, x in tensors.items()}
    if kind == "int32" and any(a.dtype == torch.int64 for a in entry.args.values()):
        tensors = entry.valid(seed)
        return ({n: x.int() if x.dtype == torch.int64 else x for n, x in tensors.items()}, tensors)
    return None


# Entry points of tensors. Each factory draws sizes and returns an Entry (modules are built afresh each time).


def _dims(data, *names, lo=1, hi=4):
    return {n: data.draw(st.integers(lo, hi), label=n) for n in names}


def entry_scores(data):
    return Entry("scores", scores, {"Q": Arg("... T_q d_k", linked=("d_k",)), "K": Arg("... T_k d_k", linked=("d_k",))},
                 _dims(data, "T_q", "T_k", "d_k"), batched=True)


def entry_scale(data):
    d = _dims(data, "T_q", "T_k")
    return Entry("scale", lambda S: scale(S, 4), {"S": Arg("... T_q T_k", any_rank=True)}, d)


def entry_softmax(data):
    dim = data.draw(st.sampled_from([-1, 0, 1, -2]), label="dim")
    return Entry("softmax", lambda Z: softmax(Z, dim), {"Z": Arg("T_q T_k", any_rank=True)}, _dims(data, "T_q", "T_k"))


def entry_attention_weights(data):
    d = _dims(data, "T", "d_k")
    return Entry("attention_weights", attention_weights,
                 {"Q": Arg("... T d_k", linked=("d_k",)), "K": Arg("... T d_k", linked=("d_k",))}, d, batched=True)


def entry_attend(data):
    return Entry("attend", attend, {"P": Arg("... T_q T_k", linked=("T_k",)), "V": Arg("... T_k d_v", linked=("T_k",))},
                 _dims(data, "T_q", "T_k", "d_v"), batched=True)


def entry_attention(data):
    causal = data.draw(st.booleans(), label="causal")
    d = _dims(data, "T", "d_k", "d_v")
    return Entry("attention", lambda Q, K, V: attention(Q, K, V, causal=causal, return_weights=True),
                 {"Q": Arg("... T d_k", linked=("d_k",)), "K": Arg("... T d_k", linked=("d_k",)),
                  "V": Arg("... T d_v", linked=("T",))}, d, batched=True)


def entry_project(data):
    return Entry("project", project, {"X": Arg("... T d_model", linked=("d_model",)),
                                      "W": Arg("d_model d_out", linked=("d_model",))},
                 _dims(data, "T", "d_model", "d_out"))


def entry_split_heads(data):
    d = _dims(data, "B", "T", "h", "d_head")
    d["d_model"] = d["h"] * d["d_head"]
    h = d["h"]
    return Entry("split_heads", lambda x: split_heads(x, h), {"x": Arg("B T d_model", linked=("d_model",) * (h > 1))},
                 d)


def entry_merge_heads(data):
    return Entry("merge_heads", merge_heads, {"x": Arg("B h T d_head")}, _dims(data, "B", "h", "T", "d_head"))


def entry_apply_rope(data):
    d = _dims(data, "T")
    d["d"] = 2 * data.draw(st.integers(1, 3), label="pairs")
    offset = data.draw(st.integers(0, 5), label="offset")
    return Entry("apply_rope", lambda x: apply_rope(x, offset), {"x": Arg("... T d", linked=("d",))}, d)


def entry_one_hot(data):
    d = _dims(data, "T", "d_model")
    d["vocab_size"] = data.draw(st.integers(2, 6), label="vocab_size")
    return Entry("one_hot_embedding", one_hot_embedding,
                 {"ids": Arg("B T", torch.int64, high=d["vocab_size"], optional_lead=True),
                  "table": Arg("vocab_size d_model")}, {**d, "B": 2})


def entry_token_embedding(data):
    vocab = data.draw(st.integers(2, 6), label="vocab_size")
    emb = seeded(lambda: TokenEmbedding(vocab, 3))
    return Entry("TokenEmbedding", emb, {"ids": Arg("B T", torch.int64, high=vocab, optional_lead=True)},
                 _dims(data, "B", "T"))


def _module_entry(name, module, dims, d, *, arg="x"):
    return Entry(name, module, {arg: Arg(dims, linked=("d_model",))}, d, weights=True)


def entry_projections(data):
    d = _dims(data, "T", "T_kv", "d_model", "d_k")
    p = seeded(lambda: Projections(d["d_model"], d["d_k"]))
    return Entry("Projections", p, {"X": Arg("... T d_model", linked=("d_model",)),
                                    "X_kv": Arg("... T_kv d_model", linked=("d_model",), nullable=True)}, d,
                 batched=True, weights=True)


def entry_fused(data):
    d = _dims(data, "T", "d_model", "d_k")
    return _module_entry("FusedProjections", seeded(lambda: FusedProjections(d["d_model"], d["d_k"])),
                         "... T d_model", d, arg="X")


def entry_single_head(data):
    d = _dims(data, "T", "d_model", "d_k")
    return _module_entry("SingleHeadAttention", seeded(lambda: SingleHeadAttention(d["d_model"], d["d_k"])),
                         "... T d_model", d, arg="X")


def entry_mlp(data):
    d = _dims(data, "d_model", "d_ff")
    return _module_entry("MLP", seeded(lambda: MLP(d["d_model"], d["d_ff"])), "... d_model", d)


def _heads_sizes(data, rope=False):
    d = _dims(data, "B", "T", "h")
    d["d_model"] = d["h"] * (2 * data.draw(st.integers(1, 2), label="pairs") if rope else
                             data.draw(st.integers(1, 3), label="d_head"))
    return d


def entry_mha(data):
    rope, backend = data.draw(st.booleans(), label="rope"), data.draw(st.sampled_from(["sdpa", "plain"]))
    causal = data.draw(st.booleans(), label="causal")
    d = _heads_sizes(data, rope)
    mha = seeded(lambda: MultiHeadAttention(d["d_model"], d["h"], rope=rope, backend=backend))
    return _module_entry("MultiHeadAttention", lambda x: mha(x, causal=causal), "B T d_model", d)


def entry_block(data):
    norm, rope = data.draw(st.sampled_from(["pre", "post"])), data.draw(st.booleans(), label="rope")
    d = _heads_sizes(data, rope)
    block = seeded(lambda: Block(d["d_model"], d["h"], norm=norm, rope=rope))
    return _module_entry("Block", block, "B T d_model", d)


def entry_kv_extend(data):
    d = _dims(data, "B", "h", "T_q", "d_head")
    return Entry("KVCache.extend", lambda K, V: KVCache().extend(K, V),
                 {"K_new": Arg("B h T_q d_head", linked=("B", "h", "T_q", "d_head")),
                  "V_new": Arg("B h T_q d_head", linked=("B", "h", "T_q", "d_head"))}, d)


@functools.cache
def tiny_gpt(vocab_size: int, pos: str | None, L: int = 1, max_T: int = 8) -> GPT:
    """A small GPT in eval mode, built once per configuration (nothing in these tests changes its weights)."""
    return seeded(lambda: GPT(GPTConfig(vocab_size, 8, 2, L, max_T=max_T, pos=pos)).eval())


def _gpt(data):
    pos = data.draw(st.sampled_from(["learned", "sinusoidal", "rope", None]), label="pos")
    return tiny_gpt(data.draw(st.integers(2, 9), label="vocab_size"), pos)


def entry_gpt_forward(data):
    model = _gpt(data)
    V = model.config.vocab_size
    return Entry("GPT.forward", model, {"ids": Arg("B T", torch.int64, high=V)},
                 _dims(data, "B", "T"))


def entry_gpt_hidden(data):
    model = _gpt(data)
    V = model.config.vocab_size
    return Entry("GPT.hidden_states", model.hidden_states, {"ids": Arg("B T", torch.int64, high=V)},
                 _dims(data, "B", "T"))


def entry_gpt_loss(data):
    model = _gpt(data)
    V = model.config.vocab_size
    return Entry("GPT.loss", model.loss, {"ids": Arg("B T", torch.int64, high=V, linked=("B", "T")),
                                          "targets": Arg("B T", torch.int64, high=V, linked=("B", "T"))},
                 _dims(data, "B", "T"), empty_batch=False)


def entry_gpt_generate(data):
    model, use_cache = _gpt(data), data.draw(st.booleans(), label="use_cache")
    return Entry("GPT.generate", lambda ids: model.generate(ids, 2, use_cache=use_cache),
                 {"ids": Arg("B T", torch.int64, high=model.config.vocab_size)}, _dims(data, "B", "T"))


def entry_check_ids(data):
    return Entry("require_ids", lambda ids: require_ids(ids, 5).long(), {"ids": Arg("B T", torch.int64, high=5,
                                                                          optional_lead=True)},
                 _dims(data, "B", "T"))


TENSOR_ENTRIES = [
    entry_scores, entry_scale, entry_softmax, entry_attention_weights, entry_attend, entry_attention, entry_project,
    entry_split_heads, entry_merge_heads, entry_apply_rope, entry_one_hot, entry_token_embedding, entry_projections,
    entry_fused, entry_single_head, entry_mlp, entry_mha, entry_block, entry_kv_extend, entry_gpt_forward,
    entry_gpt_hidden, entry_gpt_loss, entry_gpt_generate, entry_check_ids,
]


def _integer_wrong(entry: Entry, data, tensors: dict) -> tuple[dict, tuple[str, ...]] | None:
    """Token IDs outside the vocabulary (above it, or negative: never read "from the end")."""
    ints = [n for n, a in entry.args.items() if not a.dtype.is_floating_point]
    if not ints:
        return None
    name = data.draw(st.sampled_from(ints), label="ids argument")
    high = entry.args[name].high
    bad = data.draw(st.sampled_from([high, high + 3, -1, -high]), label="bad id")
    x = tensors[name].clone()
    x.view(-1)[data.draw(st.integers(0, x.numel() - 1), label="where")] = bad
    tensors[name] = x
    return tensors, (str(bad), f"0..{high - 1}")


@pytest.mark.parametrize("factory", TENSOR_ENTRIES, ids=lambda f: f.__name__[6:])
@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_wrong_tensors_are_rejected_at_the_boundary(factory, data):
    entry = factory(data)
    if data.draw(st.integers(0, 5), label="ids out of range?") == 0:
        case = _integer_wrong(entry, data, entry.valid(data.draw(st.integers(0, 99))))
        if case is not None:
            tensors, fragments = case
            rejects_at_boundary(lambda: entry(tensors), *fragments)
            return
    case = bad_tensor_case(entry, data)
    if case is None:
        return
    tensors, fragments, any_of = case
    rejects_at_boundary(lambda: entry(tensors), *fragments, any_of=any_of)


@pytest.mark.parametrize("factory", TENSOR_ENTRIES, ids=lambda f: f.__name__[6:])
@settings(FUZZ, max_examples=14)
@given(data=st.data())
def test_legitimate_tensor_variants_give_the_plain_result(factory, data):
    entry = factory(data)
    case = good_tensor_case(entry, data)
    if case is None:
        return
    variant, plain = case
    accepts_alike(lambda *xs: entry(dict(zip(entry.args, xs))), tuple(variant.values()), tuple(plain.values()))


# ---------------------------------------------------------------------------------------------- sizes


BAD_POSITIVE = (0, -1, -7, 2.5, "4", True, [4], 1 + 2j, torch.tensor(True), torch.tensor(3.0))
BAD_NONNEGATIVE = (-1, -5, 1.5, "2", False, (1,))
BAD_REAL = (float("nan"), float("inf"), -float("inf"), "1.0", None, True, torch.ones(2))
BAD_FLAG = ("yes", 1, 0, None, 2.0)


def shown(v) -> str:
    return repr(v) if isinstance(v, str) else str(v)


@dataclass
class Sized:
    """A function or constructor with size (and other scalar) arguments."""

    name: str
    build: Callable[..., object]
    valid: dict[str, object]
    positive: tuple[str, ...] = ()
    nonneg: tuple[str, ...] = ()
    reals: dict[str, tuple] = field(default_factory=dict)   # name -> extra bad values beyond BAD_REAL
    flags: tuple[str, ...] = ()
    choices: dict[str, tuple] = field(default_factory=dict)  # name -> bad values
    optional: tuple[str, ...] = ()                           # sizes for which None is valid
    slow: bool = False                                       # a successful call is slow: test only wrong values


SIZED = [
    Sized("TokenEmbedding", TokenEmbedding, {"vocab_size": 7, "d_model": 4}, ("vocab_size", "d_model")),
    Sized("sinusoidal_positions", sinusoidal_positions, {"T": 5, "d_model": 6, "base": 100.0}, ("T", "d_model"),
          reals={"base": (0.0, -2.0, 0.5)}),
    Sized("LearnedPositions", LearnedPositions, {"max_T": 6, "d_model": 4}, ("max_T", "d_model")),
    Sized("LearnedPositions.forward", lambda T, offset: seeded(lambda: LearnedPositions(9, 2))(T, offset),
          {"T": 3, "offset": 2}, ("T",), ("offset",)),
    Sized("rope_angles", rope_angles, {"T": 4, "d": 6, "offset": 3, "base": 50.0}, ("T", "d"), ("offset",),
          reals={"base": (0.0, -1.0)}),
    Sized("apply_rope", lambda offset: apply_rope(randn((3, 4), 0), offset), {"offset": 2}, (), ("offset",)),
    Sized("running_X0", attnlib.running_X0, {"d_model": 6, "seed": 1}, ("d_model",), ("seed",)),
    Sized("Projections", Projections, {"d_model": 5, "d_k": 3, "d_v": 2, "bias": True},
          ("d_model", "d_k", "d_v"), flags=("bias",), optional=("d_v",)),
    Sized("FusedProjections", FusedProjections, {"d_model": 5, "d_k": 3, "d_v": 2, "bias": False},
          ("d_model", "d_k", "d_v"), flags=("bias",), optional=("d_v",)),
    Sized("SingleHeadAttention", SingleHeadAttention, {"d_model": 5, "d_k": 3, "d_v": 4}, ("d_model", "d_k", "d_v"),
          optional=("d_v",)),
    Sized("scale", lambda d_k: scale(randn((2, 3), 0), d_k), {"d_k": 4}, ("d_k",)),
    Sized("causal_mask", lambda T_q, T_k: causal_mask(T_q, T_k), {"T_q": 3, "T_k": 5}, ("T_q", "T_k"),
          optional=("T_k",)),
    Sized("softmax", lambda dim: softmax(randn((2, 3), 0), dim), {"dim": -1}, choices={"dim": (2, -3, 1.0, "1")}),
    Sized("attention", lambda causal, return_weights: attention(*(randn((3, 2), s) for s in range(3)), causal,
                                                                   return_weights),
          {"causal": True, "return_weights": True}, flags=("causal", "return_weights")),
    Sized("split_heads", lambda h: split_heads(randn((1, 2, 6), 0), h), {"h": 3}, ("h",)),
    Sized("MultiHeadAttention", MultiHeadAttention, {"d_model": 6, "h": 3, "bias": True, "rope": False,
                                                     "backend": "plain"}, ("d_model", "h"), flags=("bias", "rope"),
          choices={"backend": ("flash", None, 1)}),
    Sized("MultiHeadAttention.qkv", lambda offset: seeded(lambda: MultiHeadAttention(4, 2, rope=True)).qkv(
        randn((1, 3, 4), 0), offset), {"offset": 1}, (), ("offset",)),
    Sized("MLP", MLP, {"d_model": 3, "d_ff": 5}, ("d_model", "d_ff")),
    Sized("Block", Block, {"d_model": 8, "h": 2, "d_ff": 5, "norm": "post", "rope": True, "backend": "sdpa"},
          ("d_model", "h", "d_ff"), flags=("rope",), choices={"norm": ("middle", None), "backend": ("x",)},
          optional=("d_ff",)),
    Sized("GPT", lambda **fields: GPT(GPTConfig(**fields)),
          {"vocab_size": 7, "d_model": 8, "h": 2, "L": 2, "d_ff": 6, "max_T": 5, "pos": "rope",
                       "norm": "pre", "causal": False, "backend": "plain"},
          ("vocab_size", "d_model", "h", "L", "d_ff", "max_T"), flags=("causal",),
          choices={"pos": ("absolute", "Rope", 0), "norm": ("both",), "backend": ("cuda",)}, optional=("d_ff",)),
    Sized("GPT.embed_tokens", lambda offset: seeded(lambda: GPT(GPTConfig(5, 4, 2, 1, max_T=8))).embed_tokens(
        torch.tensor([[1, 2]]), offset), {"offset": 3}, (), ("offset",)),
    Sized("GPT.generate", lambda n_new, temperature, use_cache: seeded(
        lambda: GPT(GPTConfig(5, 4, 2, 1, max_T=8))).generate(
        torch.tensor([[1, 2]]), n_new, temperature=temperature, use_cache=use_cache,
        generator=torch.Generator().manual_seed(0)), {"n_new": 3, "temperature": 0.7, "use_cache": True},
          ("n_new",), reals={"temperature": (-0.5, -1e-9)}, flags=("use_cache",)),
    Sized("attention_flops", costs.attention_flops, {"B": 2, "T": 3, "d_model": 8, "h": 2}, ("B", "T", "d_model", "h")),
    Sized("block_flops", costs.block_flops, {"B": 2, "T": 3, "d_model": 8, "h": 2, "d_ff": 5},
          ("B", "T", "d_model", "h", "d_ff"), optional=("d_ff",)),
    Sized("model_flops", costs.model_flops, {"B": 1, "T": 4, "d_model": 8, "h": 4, "L": 2, "vocab_size": 9,
                                             "d_ff": None, "backward": True},
          ("B", "T", "d_model", "h", "L", "vocab_size", "d_ff"), flags=("backward",), optional=("d_ff",)),
    Sized("elementwise_ops", costs.elementwise_ops, {"B": 2, "T": 3, "d_model": 6, "h": 3, "d_ff": 7},
          ("B", "T", "d_model", "h", "d_ff"), optional=("d_ff",)),
    Sized("block_params", costs.block_params, {"d_model": 6, "d_ff": 7, "bias": False}, ("d_model", "d_ff"),
          flags=("bias",), optional=("d_ff",)),
    Sized("model_params", costs.model_params, {"vocab_size": 9, "d_model": 6, "L": 2, "max_T": 5, "d_ff": 3,
                                               "pos": "learned"}, ("vocab_size", "d_model", "L", "max_T", "d_ff"),
          choices={"pos": ("learnt", 1)}, optional=("d_ff",)),
    Sized("activation_elements", costs.activation_elements, {"B": 2, "T": 3, "d_model": 6, "h": 2, "d_ff": 7},
          ("B", "T", "d_model", "h", "d_ff"), optional=("d_ff",)),
    Sized("time_interleaved", lambda repeat, warmup: len(costs.time_interleaved({"a": lambda: None}, repeat=repeat,
                                                                                warmup=warmup)["a"]),
          {"repeat": 2, "warmup": 1}, ("repeat",), ("warmup",)),
    Sized("heads_grid", lambda cols: plt.close(plots.heads_grid(torch.rand(2, 2, 2), ["a", "b"], cols=cols)),
          {"cols": 3}, ("cols",)),
    Sized("next_token_windows", lambda T: train.next_token_windows(torch.arange(20), torch.tensor([0, 5]), T),
          {"T": 4}, ("T",)),
    Sized("random_batch", lambda T, B: train.random_batch(torch.arange(20), T, B, torch.Generator().manual_seed(0)),
          {"T": 4, "B": 3}, ("T", "B")),
    Sized("evaluate", lambda T, B, batches, seed: train.evaluate(seeded(lambda: GPT(GPTConfig(20, 4, 2, 1, max_T=8))),
                                                                 torch.arange(20), T=T, B=B, batches=batches,
                                                                 seed=seed),
          {"T": 3, "B": 2, "batches": 2, "seed": 1}, ("T", "B", "batches"), ("seed",)),
    Sized("train", lambda steps, T, B, lr: train.train(
        seeded(lambda: GPT(GPTConfig(20, 4, 2, 1, max_T=8))), torch.arange(20),
                                                       steps=steps, T=T, B=B, lr=lr),
          {"steps": 2, "T": 3, "B": 2, "lr": 1e-3}, ("steps", "T", "B"), reals={"lr": (0.0, -1e-3)}, slow=True),
    Sized("seed_everything", runtime.seed_everything, {"seed": 0}, (), ("seed",)),
]


def _bad_value(sized: Sized, data):
    """One argument made wrong: (its name, the bad value, the fragments its error must name)."""
    kinds = ([("positive", n) for n in sized.positive] + [("nonneg", n) for n in sized.nonneg]
             + [("real", n) for n in sized.reals] + [("flag", n) for n in sized.flags]
             + [("choice", n) for n in sized.choices])
    kind, name = data.draw(st.sampled_from(kinds), label="argument")
    pool = {"positive": BAD_POSITIVE, "nonneg": BAD_NONNEGATIVE, "flag": BAD_FLAG,
            "real": BAD_REAL + sized.reals.get(name, ()), "choice": sized.choices.get(name, ())}[kind]
    if kind in ("positive", "nonneg") and name not in sized.optional:
        pool = pool + (None,)
    value = data.draw(st.sampled_from(pool), label="value")
    if kind == "real" and isinstance(value, float) and math.isfinite(value):
        return name, value, (name,), (str(value), str(float(value)))
    if isinstance(value, torch.Tensor) or isinstance(value, complex) or isinstance(value, (list, tuple)):
        return name, value, (name,), ()
    return name, value, (name, shown(value)), ()


@pytest.mark.parametrize("sized", SIZED, ids=lambda s: s.name)
@settings(FUZZ, max_examples=12)
@given(data=st.data())
def test_bad_sizes_numbers_and_switches_are_rejected(sized, data):
    name, value, fragments, any_of = _bad_value(sized, data)
    kwargs = {**sized.valid, name: value}
    with torch.random.fork_rng(devices=[]):
        rejects_at_boundary(lambda: sized.build(**kwargs), *fragments, any_of=any_of)
    plt.close("all")


NUMPY_INTS = (np.int64, np.int32, np.int16, np.uint8)


@pytest.mark.parametrize("sized", [s for s in SIZED if (s.positive or s.nonneg) and not s.slow], ids=lambda s: s.name)
@settings(FUZZ, max_examples=2)
@given(data=st.data())
def test_numpy_integers_are_sizes_like_any_other(sized, data):
    kind = data.draw(st.sampled_from(NUMPY_INTS), label="numpy type")
    ints = set(sized.positive + sized.nonneg)
    as_numpy = {k: kind(v) if k in ints and v is not None else v for k, v in sized.valid.items()}
    with torch.random.fork_rng(devices=[]):
        got = run(lambda: seeded(lambda: sized.build(**as_numpy)))
        want = run(lambda: seeded(lambda: sized.build(**sized.valid)))
    assert same(got, want), f"NumPy integers changed the result of {sized.name}"
    CASES["legitimate variants accepted"] += 1
    no_numpy_sizes(got)
    plt.close("all")


# ---------------------------------------------------------------------------------------------- KV caches


def _filled(mha: MultiHeadAttention, B: int, T: int, seed: int, dtype=torch.float32) -> KVCache:
    cache = KVCache()
    with torch.no_grad():
        mha(randn((B, T, mha.d_model), seed, dtype), cache=cache)
    return cache


CACHE_MISTAKES = ("batch", "heads", "d_head", "dtype", "K/V length", "K only", "not a cache", "K not a tensor")


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_mismatched_caches_are_rejected_in_terms_of_the_cache(data):
    h, d_head, B, T = (data.draw(st.integers(1, 3)) for _ in range(4))
    mha = seeded(lambda: MultiHeadAttention(h * d_head, h, backend=data.draw(st.sampled_from(["sdpa", "plain"]))))
    cache = _filled(mha, B, T, 0)
    x = randn((B, 1, h * d_head), 1)
    kind = data.draw(st.sampled_from(CACHE_MISTAKES), label="mistake")
    if kind == "batch":
        x = randn((B + 1, 1, h * d_head), 1)
        rejects_at_boundary(lambda: mha(x, cache=cache), "cache", f"B={B + 1}", str(tuple(cache.K.shape)))
    elif kind == "heads":
        other = seeded(lambda: MultiHeadAttention(h * d_head * 2, 2 * h))
        x2 = randn((B, 1, 2 * h * d_head), 1)
        rejects_at_boundary(lambda: other(x2, cache=cache), "cache", f"h={2 * h}", str(tuple(cache.K.shape)))
    elif kind == "d_head":
        cache.K, cache.V = cache.K.new_zeros(B, h, T, d_head + 1), cache.V.new_zeros(B, h, T, d_head + 1)
        rejects_at_boundary(lambda: mha(x, cache=cache), "cache", f"d_head={d_head}", str((B, h, T, d_head + 1)))
    elif kind == "dtype":
        cache.K, cache.V = cache.K.double(), cache.V.double()
        rejects_at_boundary(lambda: mha(x, cache=cache), "cache", "torch.float64", "torch.float32")
    elif kind == "K/V length":
        cache.V = torch.cat([cache.V, cache.V[:, :, :1]], dim=2)
        rejects_at_boundary(lambda: mha(x, cache=cache), "cache", str(tuple(cache.K.shape)), str(tuple(cache.V.shape)))
    elif kind == "K only":
        cache.V = None
        rejects_at_boundary(lambda: mha(x, cache=cache), "cache", "K", "V")
    elif kind == "not a cache":
        bad = data.draw(st.sampled_from([(cache.K, cache.V), [], "cache", 3]))
        rejects_at_boundary(lambda: mha(x, cache=bad), "KVCache", type(bad).__name__)
    else:
        cache.K = cache.K.numpy()
        rejects_at_boundary(lambda: mha(x, cache=cache), "cache.K", "torch.Tensor", "ndarray")


GPT_CACHE_MISTAKES = ("count", "shared", "lengths", "not a list", "batch", "dtype", "entry")


@settings(FUZZ, max_examples=21)
@given(data=st.data())
def test_gpt_caches_are_one_per_block_of_one_length(data):
    L, B, T = data.draw(st.integers(2, 3)), data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    model = tiny_gpt(11, data.draw(st.sampled_from(["learned", "rope"])), L)
    ids = torch.randint(0, 11, (B, T), generator=torch.Generator().manual_seed(0))
    caches = [KVCache() for _ in range(L)]
    with torch.no_grad():
        model(ids, caches)
    nxt = ids[:, -1:]
    kind = data.draw(st.sampled_from(GPT_CACHE_MISTAKES), label="mistake")
    if kind == "count":
        bad = caches[:-1] if data.draw(st.booleans()) else caches + [KVCache()]
        rejects_at_boundary(lambda: model(nxt, bad), "caches", f"L={L}", f"got {len(bad)}")
    elif kind == "shared":
        bad = [caches[0]] * L
        rejects_at_boundary(lambda: model(nxt, bad), "caches[1]", "caches[0]", "its own")
    elif kind == "lengths":
        k = data.draw(st.integers(1, L - 1))
        caches[k] = KVCache(caches[k].K[:, :, :-1], caches[k].V[:, :, :-1]) if T > 1 else KVCache()
        lengths = [T] * L
        lengths[k] = T - 1
        rejects_at_boundary(lambda: model(nxt, caches), "same positions", str(lengths))
    elif kind == "not a list":
        bad = data.draw(st.sampled_from([caches[0], {0: caches[0]}, "caches"]))
        rejects_at_boundary(lambda: model(nxt, bad), "caches", "list", type(bad).__name__)
    elif kind == "batch":
        rejects_at_boundary(lambda: model(ids[:, -1:].repeat(2, 1), caches), "caches[0]", f"B={2 * B}")
    elif kind == "dtype":
        k = data.draw(st.integers(0, L - 1))
        caches[k] = KVCache(caches[k].K.double(), caches[k].V.double())
        rejects_at_boundary(lambda: model(nxt, caches), f"caches[{k}]", "torch.float64", "torch.float32")
    else:
        k = data.draw(st.integers(0, L - 1))
        caches[k] = None
        rejects_at_boundary(lambda: model(nxt, caches), f"caches[{k}]", "KVCache", "None")


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_a_cache_that_is_inconsistent_in_itself_is_rejected_when_built_or_extended(data):
    B, h, T, d = (data.draw(st.integers(1, 3)) for _ in range(4))
    K, V = randn((B, h, T, d), 0), randn((B, h, T, d), 1)
    kind = data.draw(st.sampled_from(["V length", "V rank", "dtype", "V missing", "extend batch", "extend d"]))
    if kind == "V length":
        rejects_at_boundary(lambda: KVCache(K, V[:, :, :0] if T == 1 else V[:, :, :-1]), "KVCache.K", "KVCache.V")
    elif kind == "V rank":
        rejects_at_boundary(lambda: KVCache(K, V[0]), "KVCache.V", str(tuple(V[0].shape)))
    elif kind == "dtype":
        rejects_at_boundary(lambda: KVCache(K, V.half()), "torch.float32", "torch.float16")
    elif kind == "V missing":
        rejects_at_boundary(lambda: KVCache(K), "K", "V")
    elif kind == "extend batch":
        cache = KVCache(K, V)
        rejects_at_boundary(lambda: cache.extend(randn((B + 1, h, 1, d), 2), randn((B + 1, h, 1, d), 3)), "K_new",
                f"B={B}", str((B + 1, h, 1, d)))   # the new keys named, against the cache they extend
    else:
        cache = KVCache(K, V)
        rejects_at_boundary(lambda: cache.extend(randn((B, h, 1, d + 1), 2), randn((B, h, 1, d + 1), 3)), "K_new",
                f"d_head={d}", str((B, h, 1, d + 1)))


# ---------------------------------------------------------------------------------------------- GPT


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_gpt_offsets_lengths_and_targets(data):
    max_T = data.draw(st.integers(2, 6), label="max_T")
    model = tiny_gpt(9, data.draw(st.sampled_from(["learned", "sinusoidal", "rope", None])), 1, max_T)
    B, T = data.draw(st.integers(1, 2)), data.draw(st.integers(1, max_T))
    ids = torch.randint(0, 9, (B, T), generator=torch.Generator().manual_seed(1))
    kind = data.draw(st.sampled_from(["too long", "offset past", "negative offset", "generate bound",
                                      "targets range", "targets all ignored", "targets float", "targets shape",
                                      "generator", "ids rank"]))
    if kind == "too long":
        long = torch.zeros(B, max_T + data.draw(st.integers(1, 3)), dtype=torch.long)
        rejects_at_boundary(lambda: model(long), f"T={long.shape[1]}", f"max_T={max_T}")
    elif kind == "offset past":
        offset = max_T - T + data.draw(st.integers(1, 3))
        rejects_at_boundary(lambda: model.embed_tokens(ids, offset), f"max_T={max_T}", f"offset={offset}")
    elif kind == "negative offset":
        offset = -data.draw(st.integers(1, 4))
        rejects_at_boundary(lambda: model.embed_tokens(ids, offset), "offset", str(offset))
    elif kind == "generate bound":
        n_ok = max_T - T + 1                                # the last new token is never fed back
        assert run(lambda: model.generate(ids, n_ok)).shape == (B, max_T + 1)
        rejects_at_boundary(lambda: model.generate(ids, n_ok + 1), f"n_new={n_ok + 1}", f"max_T={max_T}",
                            str(max_T + 1))
    elif kind == "targets range":
        bad = data.draw(st.sampled_from([9, 12, -1, -99, -101]))
        targets = ids.clone()
        targets[0, -1] = bad
        rejects_at_boundary(lambda: model.loss(ids, targets), str(bad), "0..8")
    elif kind == "targets all ignored":
        rejects_at_boundary(lambda: model.loss(ids, torch.full_like(ids, -100)), "-100", "at least one target")
    elif kind == "targets float":
        rejects_at_boundary(lambda: model.loss(ids, ids.float()), "targets", "torch.float32")
    elif kind == "targets shape":
        targets = ids[:, :-1] if T > 1 else ids[None]
        rejects_at_boundary(lambda: model.loss(ids, targets), str(tuple(ids.shape)), str(tuple(targets.shape)))
    elif kind == "generator":
        rejects_at_boundary(lambda: model.generate(ids, 1, temperature=1.0, generator=0), "generator",
                            "torch.Generator")
    else:
        rejects_at_boundary(lambda: model(ids[0]), "(B, T)", str(tuple(ids[0].shape)))


@settings(FUZZ, max_examples=8)
@given(data=st.data())
def test_sampling_at_any_temperature_and_precision_gives_tokens(data):
    dtype = data.draw(st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]))
    temperature = data.draw(st.sampled_from([1e-45, 1e-30, 1e-8, 1e-3, 0.5, 1.0, 50.0, 1e30]))
    model = seeded(lambda: GPT(GPTConfig(13, 8, 2, 1, max_T=8)).to(dtype).eval())
    ids = torch.tensor([[1, 2, 3]])
    out = run(lambda: model.generate(ids, 4, temperature=temperature, generator=torch.Generator().manual_seed(0)))
    assert out.shape == (1, 7) and int(out.min()) >= 0 and int(out.max()) < 13
    CASES["legitimate variants accepted"] += 1
    if temperature <= 1e-30 and dtype in (torch.float32, torch.float64):   # a tiny temperature is greedy
        assert torch.equal(out, model.generate(ids, 4))


# ---------------------------------------------------------------------------------------------- text


@settings(FUZZ, max_examples=120)
@given(vocab=st.lists(st.text("ab c", min_size=1, max_size=3), min_size=1, max_size=8, unique=True),
       text=st.text("ab cd", min_size=0, max_size=12))
def test_the_toy_tokenizer_never_hangs_and_round_trips_what_it_accepts(vocab, text):
    try:
        tok = run(lambda: ToyTokenizer(vocab))
    except ValueError as e:
        assert "' '" in str(e) and " " not in vocab
        return
    try:
        ids = run(lambda: tok.encode(text))
    except ValueError as e:
        assert text == "" or any(ch not in vocab for ch in text), e
        return
    assert run(lambda: tok.decode(ids)) == text
    CASES["legitimate variants accepted"] += 1


BAD_IDS = ([-1], [3, -2], [1.0], [True], [[1, 2]], "12", 3, None, torch.tensor([[1, 2]]), torch.tensor([0.5]),
           np.array([1.5]), [10**6])


@pytest.mark.parametrize("tok", [ToyTokenizer(), CharTokenizer("abcdef")], ids=["toy", "char"])
@settings(FUZZ, max_examples=15)
@given(bad=st.sampled_from(BAD_IDS))
def test_tokenizers_reject_ids_they_cannot_decode(tok, bad):
    e = rejects_at_boundary(lambda: tok.decode(bad), any_of=("token id", "ids"))
    if isinstance(bad, list) and bad and isinstance(bad[-1], int) and not isinstance(bad[-1], bool):
        assert str(bad[-1]) in str(e) or str(bad[0]) in str(e)


@pytest.mark.parametrize("tok", [ToyTokenizer(), CharTokenizer("abcdef")], ids=["toy", "char"])
@settings(FUZZ, max_examples=6)
@given(kind=st.sampled_from([list, tuple, np.array, torch.tensor, "int32", "numpy ints"]))
def test_tokenizers_decode_every_kind_of_id_sequence(tok, kind):
    ids = [1, 0, 2]
    variant = {"int32": lambda v: torch.tensor(v, dtype=torch.int32),
               "numpy ints": lambda v: [np.int64(i) for i in v]}.get(kind, kind)(ids)
    assert run(lambda: tok.decode(variant)) == tok.decode(ids)
    CASES["legitimate variants accepted"] += 1


BAD_TEXT_CALLS = [
    ("ToyTokenizer(vocab=str)", lambda: ToyTokenizer(" abc"), ("vocab", "str")),
    ("ToyTokenizer(repeated)", lambda: ToyTokenizer([" ", "a", "a"]), ("repeated", "'a'")),
    ("ToyTokenizer(empty piece)", lambda: ToyTokenizer([" ", ""]), ("vocab[1]", "''")),
    ("ToyTokenizer(no space)", lambda: ToyTokenizer(["a", "b"]), ("' '",)),
    ("ToyTokenizer(empty)", lambda: ToyTokenizer([]), ("vocab", "empty")),
    ("encode(bytes)", lambda: ToyTokenizer().encode(b"cat"), ("str", "bytes")),
    ("encode(capital)", lambda: ToyTokenizer().encode("the Cat"), ("'C'", "position 4")),
    ("CharTokenizer(list)", lambda: CharTokenizer(["a"]), ("str", "list")),
    ("CharTokenizer.encode(None)", lambda: CharTokenizer("ab").encode(None), ("str", "NoneType")),
    ("CharTokenizer.encode(missing)", lambda: CharTokenizer("ab").encode("abc"), ("'c'",)),
    ("load_text(unknown)", lambda: attnlib.load_text("shakespeare"), ("fables", "'shakespeare'")),
    ("load_text(path)", lambda: attnlib.load_text("../__init__"), ("fables", "'../__init__'")),
    ("example_ids(int)", lambda: attnlib.example_ids(3), ("str", "int")),
]


@pytest.mark.parametrize("call,fragments", [c[1:] for c in BAD_TEXT_CALLS], ids=[c[0] for c in BAD_TEXT_CALLS])
def test_text_entry_points_reject_bad_input(call, fragments):
    rejects_at_boundary(call, *fragments)


# ---------------------------------------------------------------------------------------------- everything else


def _fig(f):
    """Run a plotting call, then close every figure (plots are checked for errors, not for pixels)."""
    def wrapped():
        try:
            return f()
        finally:
            plt.close("all")
    return wrapped


OTHER_BAD_CALLS = [
    # (what, call, fragments that must all be named)
    ("causal_mask(dtype=int)", lambda: causal_mask(3, dtype=torch.int64), ("dtype", "torch.int64")),
    ("causal_mask(dtype=str)", lambda: causal_mask(3, dtype="float"), ("dtype", "'float'")),
    ("causal_mask(device=bogus)", lambda: causal_mask(3, device="gpu0"), ("'gpu0'", "'cpu'")),
    ("one_hot_embedding(1-D table)", lambda: one_hot_embedding(torch.tensor([0]), torch.ones(4)),
     ("(vocab_size, d_model)", "(4,)")),
    ("from_separate(not Projections)", lambda: FusedProjections.from_separate(nn.Linear(2, 2)),
     ("Projections", "Linear")),
    ("ATTNLIB_DEVICE bogus", lambda: _with_env("ATTNLIB_DEVICE", "gpu", runtime.pick_device),
     ("ATTNLIB_DEVICE", "'gpu'", "'cpu'")),
    ("setup(seed=-1)", lambda: runtime.setup(-1), ("seed", "-1")),
    ("seed_everything(2**40)", lambda: runtime.seed_everything(2**40), ("seed", "2**32")),
    ("ops_called(match=3)", lambda: costs.ops_called(lambda: None, match=3), ("match", "3")),
    ("ops_called(match=())", lambda: costs.ops_called(lambda: None, match=()), ("match", "()")),
    ("count_flops(not callable)", lambda: costs.count_flops(3), ("function", "3")),
    ("time_fn(not callable)", lambda: costs.time_fn("f"), ("function", "'f'")),
    ("time_interleaved(list)", lambda: costs.time_interleaved([lambda: None]), ("dict", "list")),
    ("time_interleaved(value)", lambda: costs.time_interleaved({"a": 1}), ("fns['a']", "1")),
    ("peak_memory(device)", lambda: costs.peak_memory(lambda: None, device="tpu"), ("'tpu'",)),
    ("sync(device)", lambda: costs.sync(device=3), ("device", "3")),
    ("to_torch_mha(Block)", lambda: reference.to_torch_mha(Block(4, 2)), ("MultiHeadAttention", "Block")),
    ("to_torch_layer(MHA)", lambda: reference.to_torch_layer(MultiHeadAttention(4, 2)),
     ("Block", "MultiHeadAttention")),
    ("to_torch_mha(rope)", lambda: reference.to_torch_mha(MultiHeadAttention(4, 2, rope=True)), ("RoPE",)),
    ("next_token_windows(float data)", lambda: train.next_token_windows(torch.rand(20), torch.tensor([0]), 3),
     ("data", "torch.float32")),
    ("next_token_windows(float starts)", lambda: train.next_token_windows(torch.arange(20), torch.tensor([0.5]), 3),
     ("starts", "torch.float32")),
    ("next_token_windows(start past end)", lambda: train.next_token_windows(torch.arange(20), torch.tensor([17]), 3),
     ("N=20", "17")),
    ("next_token_windows(negative start)",
     lambda: train.next_token_windows(torch.arange(20), torch.tensor([-2]), 3), ("0 <= s", "-2")),
    ("random_batch(generator)", lambda: train.random_batch(torch.arange(20), 3, 2, 0), ("generator", "int")),
    ("random_batch(list data)", lambda: train.random_batch(list(range(20)), 3, 2, torch.Generator()),
     ("data", "torch.Tensor", "list")),
    ("train(not a model)", lambda: train.train("gpt", torch.arange(20)), ("model", "str")),
    ("train(device)", lambda: train.train(GPT(GPTConfig(20, 4, 2, 1, max_T=8)), torch.arange(20), device="gpu"),
     ("'gpu'",)),
    ("evaluate_prefix(batches=0)", lambda: train.evaluate_prefix(GPT(GPTConfig(20, 4, 2, 1, max_T=8)), torch.arange(20),
                                                                 batches=0), ("batches", "0")),
    ("attention_heatmap(tokens)", _fig(lambda: plots.attention_heatmap(torch.rand(3, 3), ["a", "b"])),
     ("T=3", "got 2")),
    ("attention_heatmap(str tokens)", _fig(lambda: plots.attention_heatmap(torch.rand(3, 3), "abc")),
     ("tokens", "str")),
    ("attention_heatmap(not square)", _fig(lambda: plots.attention_heatmap(torch.rand(3, 4), list("abc"))),
     ("(T, T)", "(3, 4)")),
    ("attention_heatmap(rank)", _fig(lambda: plots.attention_heatmap(torch.rand(1, 3, 3), list("abc"))),
     ("(T, T)", "(1, 3, 3)")),
    ("attention_heatmap(vmin)", _fig(lambda: plots.attention_heatmap(torch.rand(2, 2), list("ab"), vmin=1, vmax=0)),
     ("vmin=1.0", "vmax=0.0")),
    ("attention_heatmap(ax)", _fig(lambda: plots.attention_heatmap(torch.rand(2, 2), list("ab"), ax="left")),
     ("Axes", "str")),
    ("attention_heatmap(text)", _fig(lambda: plots.attention_heatmap([["a", "b"], ["c", "d"]], list("ab"))),
     ("numbers", "list")),
    ("mask_picture(tokens)", _fig(lambda: plots.mask_picture(causal_mask(4), list("abc"))), ("T=4", "got 3")),
    ("mask_picture(bool)", _fig(lambda: plots.mask_picture(causal_mask(3, dtype=torch.bool), list("abc"))),
     ("real numbers", "torch.bool")),
    ("heads_grid(tokens)", _fig(lambda: plots.heads_grid(torch.rand(2, 3, 3), list("ab"))), ("T=3", "got 2")),
    ("heads_grid(rank)", _fig(lambda: plots.heads_grid(torch.rand(3, 3), list("abc"))), ("(h, T, T)", "(3, 3)")),
    ("heads_grid(no heads)", _fig(lambda: plots.heads_grid(torch.rand(0, 3, 3), list("abc"))),
     ("(h, T, T)", "(0, 3, 3)")),
    ("labels(str)", lambda: plots.labels("the cat"), ("pieces", "str")),
    ("save_pipeline(path)", lambda: plots.save_pipeline(3), ("path", "3")),
    ("save_pipeline(png)", lambda: plots.save_pipeline("pipeline.png"), (".svg", "'pipeline.png'")),
    ("save_pipeline(folder)", lambda: plots.save_pipeline("no/such/folder/p.svg"), ("folder", "'no/such/folder'")),
]


def _with_env(name, value, fn):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        return fn()
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


@pytest.mark.parametrize("call,fragments", [c[1:] for c in OTHER_BAD_CALLS], ids=[c[0] for c in OTHER_BAD_CALLS])
def test_other_entry_points_reject_bad_input(call, fragments):
    rejects_at_boundary(call, *fragments)


OTHER_GOOD_CALLS = [
    ("attention_heatmap(numpy) == (tensor)", _fig(lambda: plots.attention_heatmap(np.eye(2), ["a", "b"]).get_title()),
     _fig(lambda: plots.attention_heatmap(torch.eye(2), ["a", "b"]).get_title())),
    ("heads_grid(transposed)", _fig(lambda: len(plots.heads_grid(torch.rand(3, 2, 2).mT, ["a", "b"]).axes)),
     _fig(lambda: len(plots.heads_grid(torch.rand(3, 2, 2), ["a", "b"]).axes))),
    ("mask_picture(tuple tokens)", _fig(lambda: plots.mask_picture(causal_mask(2), ("a", "b")).get_title()),
     _fig(lambda: plots.mask_picture(causal_mask(2), ["a", "b"]).get_title())),
    ("next_token_windows(int32)",
     lambda: [t.long() for t in train.next_token_windows(torch.arange(9, dtype=torch.int32),
                                                          torch.tensor([1, 3], dtype=torch.int32), 4)],
     lambda: list(train.next_token_windows(torch.arange(9), torch.tensor([1, 3]), 4))),
    ("causal_mask(device='cpu')", lambda: causal_mask(3, device="cpu"), lambda: causal_mask(3)),
    ("apply_rope(expanded)", lambda: apply_rope(torch.arange(8.0).expand(5, 8)),
     lambda: apply_rope(torch.arange(8.0).expand(5, 8).contiguous())),
    ("GPT.loss(int32 targets)", lambda: seeded(lambda: GPT(GPTConfig(7, 4, 2, 1))).loss(
        torch.tensor([[1, 2]]), torch.tensor([[2, 3]], dtype=torch.int32)),
     lambda: seeded(lambda: GPT(GPTConfig(7, 4, 2, 1))).loss(torch.tensor([[1, 2]]), torch.tensor([[2, 3]]))),
]


@pytest.mark.parametrize("variant,plain", [c[1:] for c in OTHER_GOOD_CALLS], ids=[c[0] for c in OTHER_GOOD_CALLS])
def test_other_legitimate_variants_give_the_plain_result(variant, plain):
    assert same(run(variant), run(plain))
    CASES["legitimate variants accepted"] += 1


# ---------------------------------------------------------------------------------------------- tiled, batches, costs,
# explore, runtime: rows that start blocked, counted parameters, devices, prompts, show_source, seeds


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_online_softmax_of_rows_that_start_blocked_equals_softmax(data):
    """A row whose first blocks are all −inf (left padding, a window) is finite and equals attnlib.softmax."""
    from attnlib.tiled import online_softmax, online_softmax_step

    n = data.draw(st.integers(1, 12), label="n")
    block = data.draw(st.integers(1, n + 2), label="block")
    blocked = data.draw(st.lists(st.integers(0, n), min_size=3, max_size=3), label="blocked keys per row")
    S = randn((3, n), data.draw(st.integers(0, 2**16), label="seed"), torch.float64)
    for r, k in enumerate(blocked):
        S[r, :k] = float("-inf")                            # k leading keys blocked (k = n: nothing to read)
    got = run(lambda: online_softmax(S, block))
    readable = torch.tensor([k < n for k in blocked])
    assert not got[readable].isnan().any()
    torch.testing.assert_close(got, softmax(S), rtol=0, atol=1e-15, equal_nan=True)
    m, ell = S.new_full((3,), float("-inf")), S.new_zeros(3)
    _, ell_new, rescale, P_blk = run(lambda: online_softmax_step(m, ell, S[:, :block]))
    assert not (ell_new.isnan().any() or rescale.isnan().any() or P_blk.isnan().any())
    CASES["legitimate variants accepted"] += 1


@settings(FUZZ, max_examples=12)
@given(d_model=st.integers(1, 12), d_ff=st.one_of(st.none(), st.integers(1, 12)), bias=st.booleans())
def test_block_params_count_what_the_block_holds(d_model, d_ff, bias):
    block = seeded(lambda: Block(d_model, 1, d_ff, bias=bias))
    assert run(lambda: costs.block_params(d_model, d_ff, bias=bias))["block"] == sum(
        t.numel() for t in block.parameters())
    CASES["legitimate variants accepted"] += 1


def _meta(x: torch.Tensor) -> torch.Tensor:
    return x.to("meta")


def _model_scores(*args):
    import importlib

    return importlib.import_module("attnlib.explore").model_scores(*args)   # attnlib.explore is the function


DEVICE_CALLS = [
    # (what, call, fragments): a "meta" tensor stands in for another device; it holds no values to read
    ("pad_prompts(meta prompt after a cpu one)",
     lambda: attnlib.batches.pad_prompts([torch.tensor([1, 2]), _meta(torch.tensor([3]))], 0),
     ("prompts[1]", "meta", "prompts[0]", "cpu")),
    ("pad_prompts(all on meta)", lambda: attnlib.batches.pad_prompts([_meta(torch.tensor([1, 2]))], 0),
     ("meta", "no values")),
    ("explore(S on meta)", lambda: attnlib.explore(_meta(torch.zeros(3, 3)), list("abc"), 4),
     ("S", "meta", "no values")),
    ("model_scores(ids on meta)", lambda: _model_scores(tiny_gpt(9, "learned"), _meta(torch.tensor([1, 2]))),
     ("ids", "meta", "no values")),
]


@pytest.mark.parametrize("call,fragments", [c[1:] for c in DEVICE_CALLS], ids=[c[0] for c in DEVICE_CALLS])
def test_tensors_on_another_device_are_rejected_before_their_values_are_read(call, fragments):
    rejects_at_boundary(call, *fragments)


@settings(FUZZ, max_examples=20)
@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
def test_a_bad_id_in_pad_prompts_names_its_prompt_and_position(lengths, data):
    prompts = [torch.arange(1, n + 1) for n in lengths]
    k = data.draw(st.integers(0, len(lengths) - 1), label="prompt")
    t = data.draw(st.integers(0, lengths[k] - 1), label="position")
    bad = data.draw(st.integers(-10**6, -1), label="id")
    prompts[k][t] = bad
    rejects_at_boundary(lambda: attnlib.batches.pad_prompts(prompts, 0), f"prompts[{k}]", f"position {t}", str(bad))


@pytest.mark.parametrize("obj", [3, None, "GPT", len, torch.softmax, attnlib.GPTConfig(9, 4, 2, 1)])
def test_show_source_rejects_what_has_no_python_source(obj):
    """Its own TypeError, before inspect.getsource sees the object (it once raised inside inspect)."""
    rejects_at_boundary(lambda: attnlib.show_source(obj), "function", "class", type(obj).__name__)


@pytest.mark.parametrize("seed", [1.5, 2.0, np.float64(3.0), torch.tensor(0.5), "1", True])
def test_a_seed_that_is_not_an_integer_is_rejected_not_truncated(seed):
    rejects_at_boundary(lambda: runtime.seed_everything(seed), "seed", "integer")
    rejects_at_boundary(lambda: runtime.setup(seed), "seed", "integer")


# ------------------------------------------------------------------ the model's config and entry points


def _tiny_gpt(**options):
    return seeded(lambda: GPT(GPTConfig(vocab_size=7, d_model=8, h=2, L=1, max_T=8, **options)))


META_CALLS = [
    ("GPT.forward", lambda m, ids: m(ids)), ("GPT.hidden_states", lambda m, ids: m.hidden_states(ids)),
    ("GPT.loss", lambda m, ids: m.loss(ids, ids)), ("GPT.generate", lambda m, ids: m.generate(ids, 2)),
    ("GPT.embed_tokens", lambda m, ids: m.embed_tokens(ids)),
]


@pytest.mark.parametrize("call", [c[1] for c in META_CALLS], ids=[c[0] for c in META_CALLS])
@pytest.mark.parametrize("model_on", ["cpu", "meta"])
def test_ids_on_the_meta_device_are_refused_before_any_read(call, model_on):
    model = _tiny_gpt().to(model_on)
    rejects_at_boundary(lambda: call(model, torch.zeros(1, 3, dtype=torch.long, device="meta")), "meta", "ids")


def test_next_token_windows_refuses_meta_starts():
    starts = torch.tensor([1], device="meta")
    rejects_at_boundary(lambda: train.next_token_windows(torch.arange(9), starts, 4), "meta", "starts")


@pytest.mark.parametrize("convert", ["to_torch_mha", "to_torch_layer"])
def test_torch_references_refuse_grouped_query_layers(convert):
    block = Block(16, 4, h_kv=2)
    layer = block.attn if convert == "to_torch_mha" else block
    rejects_at_boundary(lambda: getattr(reference, convert)(layer), "h_kv=2", "h=4", "grouped-query")


def test_gpt_config_stores_plain_python_values():
    config = GPTConfig(np.int64(10), np.int32(8), np.int64(2), np.int64(1), d_ff=np.int64(12), max_T=np.int16(6),
                       tie=np.bool_(True), eps=np.float32(1e-5), h_kv=np.int64(1))
    assert all(type(getattr(config, k)) is int for k in ("vocab_size", "d_model", "h", "L", "d_ff", "max_T", "h_kv"))
    assert type(config.tie) is bool and type(config.eps) is float and config.d_head == 4
    assert GPT(config).config is config


def test_to_gpt2_takes_a_model_built_from_numpy_sizes():
    pytest.importorskip("transformers")
    from attnlib.gpt2 import to_gpt2, weight_pairs

    gpt = seeded(lambda: GPT(GPTConfig(np.int64(10), np.int64(8), np.int64(2), np.int64(1), max_T=np.int64(6)))).eval()
    hf = to_gpt2(gpt)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.allclose(hf(ids).logits, gpt(ids), atol=1e-5)
    tied = _tiny_gpt(tie=True)
    untied = to_gpt2(_tiny_gpt())
    rejects_at_boundary(lambda: weight_pairs(tied, untied), "tie=True", "lm_head", "wte")


@pytest.mark.parametrize("make,fragments", [
    (lambda: GPTConfig(-3), ["vocab_size", "-3"]),
    (lambda: GPTConfig(10, d_model=6, h=4), ["d_model=6", "h=4"]),
    (lambda: GPTConfig(10, h_kv=3), ["h_kv=3"]),
    (lambda: GPTConfig(10, norm="middle"), ["norm", "'middle'"]),
    (lambda: GPTConfig(10, backend="flash"), ["backend", "'flash'"]),
    (lambda: GPTConfig(10, d_ff=0), ["d_ff", "0"]),
    (lambda: GPT(GPT(GPTConfig(10))), ["GPTConfig", "GPT(model.config)"]),
    (lambda: GPT({"vocab_size": 10}), ["GPTConfig", "dict"]),
    (lambda: GPT("10"), ["vocab_size", "'10'"]),
])
def test_gpt_config_checks_every_option_once(make, fragments):
    rejects_at_boundary(make, *fragments)


def test_a_gpt_too_large_for_memory_names_the_size_that_asks():
    with pytest.raises(MemoryError) as e:
        GPT(GPTConfig(10**12))
    assert "vocab_size=1000000000000" in str(e.value) and "bytes" in str(e.value)
    with torch.device("meta"):
        assert GPT(GPTConfig(10**9, 8, 2, 1)).embed.table.is_meta   # on meta nothing is allocated: no limit


def test_caches_of_none_say_what_a_cache_is():
    model = _tiny_gpt()
    rejects_at_boundary(lambda: model(torch.zeros(1, 2, dtype=torch.long), [None]), "caches[0]", "KVCache", "None")
    rejects_at_boundary(lambda: model(torch.zeros(1, 2, dtype=torch.long), [3]), "caches[0]", "KVCache", "got 3")


def test_train_moves_the_model_to_its_device_and_checks_the_data_first():
    model, moved = _tiny_gpt(), []
    to = model.to
    model.to = lambda *a, **k: moved.append(a) or to(*a, **k)
    train.train(model, torch.arange(40) % 7, steps=1, T=4, B=2, device="cpu")
    assert moved == [(torch.device("cpu"),)]
    before = [p.detach().clone() for p in model.parameters()]
    data = torch.arange(400) % 7
    data[-1] = 9   # one bad id, that a late window would reach
    rejects_at_boundary(lambda: train.train(model, data, steps=20, T=4, B=2), "token id 9", "vocabulary 0..6")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # no update before the error
    rejects_at_boundary(lambda: train.evaluate(model, data, T=2, B=1, batches=1), "token id 9", "vocabulary 0..6")
    rejects_at_boundary(lambda: train.evaluate_prefix(model, data, T=2, B=1, batches=1), "token id 9")


def test_the_induction_recipe_checks_its_arguments():
    from attnlib import induction

    model = _tiny_gpt()
    rejects_at_boundary(lambda: induction.ablate_heads(model, 3).__enter__(), "heads", "pairs", "3")
    rejects_at_boundary(lambda: induction.ablate_heads(model, "0,1").__enter__(), "heads", "str")
    rejects_at_boundary(lambda: induction.new_model(1.5), "seed", "1.5")
    rejects_at_boundary(lambda: induction.new_model(0, {"model": induction.CONFIG["model"]}), "lacks", "steps")
    as_dict = {**induction.CONFIG, "model": {"vocab_size": 32}}
    rejects_at_boundary(lambda: induction.new_model(0, as_dict), "GPTConfig", "dict")
    rejects_at_boundary(lambda: induction.train_induction(0, 1, {"steps": 1}), "lacks", "r_min")
    rejects_at_boundary(lambda: induction.train_induction(0.5, 1), "seed")
    rejects_at_boundary(lambda: induction.load_models(3), "path", "got 3")
    with pytest.raises(FileNotFoundError, match="absent"):
        induction.load_models("absent.safetensors")


# ------------------------------------------------------------------------- stage modules: the holes at the boundary

_META_IDS = torch.zeros(2, 3, dtype=torch.long, device="meta")


def _rope_mha():
    return seeded(lambda: MultiHeadAttention(8, 2, rope=True))


STAGE_BAD_CALLS = [
    # tensors on another device (meta: a cheap stand-in) are named before their values are read
    ("TokenEmbedding(meta ids)", lambda: TokenEmbedding(5, 4)(_META_IDS), ("ids", "meta", "cpu")),
    ("TokenEmbedding on meta(meta ids)", lambda: TokenEmbedding(5, 4).to("meta")(_META_IDS), ("ids", "meta tensor")),
    ("one_hot_embedding(meta ids)", lambda: one_hot_embedding(_META_IDS, torch.ones(5, 4)), ("ids", "meta")),
    ("apply_rope(meta positions)", lambda: apply_rope(randn((2, 3, 4), 0), positions=_META_IDS),
     ("positions", "meta", "cpu")),
    ("apply_rope on meta(meta positions)", lambda: apply_rope(torch.zeros(2, 3, 4, device="meta"),
                                                              positions=_META_IDS), ("positions", "meta tensor")),
    ("qkv(meta positions)", lambda: _rope_mha().qkv(randn((2, 3, 8), 0), positions=_META_IDS),
     ("positions", "meta", "cpu")),
    ("MHA.forward(meta positions)", lambda: _rope_mha()(randn((2, 3, 8), 0), positions=_META_IDS),
     ("positions", "meta", "cpu")),
    ("Block.forward(meta positions)", lambda: Block(8, 2, rope=True)(randn((2, 3, 8), 0), positions=_META_IDS),
     ("positions", "meta", "cpu")),
    ("LearnedPositions(meta positions)", lambda: LearnedPositions(8, 4)(3, positions=_META_IDS),
     ("positions", "meta", "the table")),
    # apply_rope with an odd d is named with positions= too
    ("apply_rope(odd d, positions)",
     lambda: apply_rope(randn((2, 3, 5), 0), positions=torch.zeros(2, 3, dtype=torch.long)), ("even", "d=5")),
    # positions are checked without RoPE as well
    ("qkv(positions of another T, no RoPE)", lambda: MultiHeadAttention(8, 2).qkv(
        randn((2, 3, 8), 0), positions=torch.zeros(5, dtype=torch.long)), ("T=3", "(5,)")),
    ("qkv(negative positions, no RoPE)", lambda: MultiHeadAttention(8, 2).qkv(
        randn((2, 3, 8), 0), positions=torch.tensor([0, -1, 2])), ("≥ 0", "-1")),
    ("qkv(float positions, no RoPE)", lambda: MultiHeadAttention(8, 2).qkv(
        randn((2, 3, 8), 0), positions=torch.zeros(3)), ("positions", "torch.float32")),
    ("MHA.forward(positions of another B, no RoPE)", lambda: MultiHeadAttention(8, 2)(
        randn((2, 3, 8), 0), positions=torch.zeros(3, 3, dtype=torch.long)), ("B=2", "(3, 3)")),
]


@pytest.mark.parametrize("call,fragments", [c[1:] for c in STAGE_BAD_CALLS], ids=[c[0] for c in STAGE_BAD_CALLS])
def test_stage_module_holes_are_closed(call, fragments):
    rejects_at_boundary(call, *fragments)


MASK_LAYOUTS = ("(B, h, T, T)", "(B, 1, T, T)", "(1, h, T, T)", "(T, T)", "(B, 1, 1, T)")


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_a_mask_means_what_its_axes_say_and_an_ambiguous_or_inverted_one_is_named(data):
    """A mask has all of the scores' axes (each 1 or equal) or only (T_q, T_k); (B, T, T) is ambiguous (B == h or
    not); a mask that leaves no query a key is in the other convention (True = blocked). See test_boundary.py."""
    B, h, T = (data.draw(st.integers(1, 3), label=n) for n in ("B", "h", "T"))
    where = data.draw(st.sampled_from(["attention", "MultiHeadAttention", "Block"]), label="where")
    backend = data.draw(st.sampled_from(["sdpa", "plain"]), label="backend")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    x = randn((B, T, 2 * h), seed, torch.float64)
    Q, K, V = (randn((B, h, T, 2), seed + k, torch.float64) for k in range(3))
    layer = seeded(lambda: (Block(2 * h, h, backend=backend) if where == "Block"
                            else MultiHeadAttention(2 * h, h, backend=backend)).double())
    call = (lambda m: attention(Q, K, V, mask=m)) if where == "attention" else (lambda m: layer(x, mask=m))
    kind = data.draw(st.sampled_from(MASK_LAYOUTS + ("(B, T, T)", "(h, T, T)", "inverted", "none True")),
                     label="mask")
    full = torch.rand(B, h, T, T, generator=torch.Generator().manual_seed(seed)) < 0.5
    full |= torch.eye(T, dtype=torch.bool)                          # every query may read itself
    if kind in MASK_LAYOUTS:
        mask = {"(B, h, T, T)": full, "(B, 1, T, T)": full[:, :1], "(1, h, T, T)": full[:1], "(T, T)": full[0, 0],
                "(B, 1, 1, T)": full[:, :1, -1:] | (torch.arange(T) == 0)}[kind]
        got = run(lambda: call(mask))
        want = run(lambda: call(mask.expand(B, h, T, T).contiguous()))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        CASES["legitimate variants accepted"] += 1
    elif kind in ("(B, T, T)", "(h, T, T)"):
        mask = full[:, 0] if kind == "(B, T, T)" else full[0]
        rejects_at_boundary(lambda: call(mask), str(tuple(mask.shape)), "(B, 1, T_q, T_k)", "(T_q, T_k)")
    else:
        mask = ~causal_mask(T, dtype=torch.bool) if kind == "inverted" else torch.zeros(T, T, dtype=torch.bool)
        rejects_at_boundary(lambda: call(mask), "True = may attend", "~mask", str(tuple(mask.shape)))


@pytest.mark.parametrize("build, size", [
    (lambda: MultiHeadAttention(200_000, 4), "d_model=200000"),
    (lambda: MLP(10**6, 10**6), "d_model=1000000, d_ff=1000000"),
    (lambda: Block(100_000, 4), "d_model=100000"),
    (lambda: TokenEmbedding(10**11, 64), "vocab_size=100000000000"),
    (lambda: LearnedPositions(10**11, 64), "max_T=100000000000"),
    (lambda: Projections(10**6, 10**5), "d_k=100000"),
    (lambda: FusedProjections(10**6, 10**5), "d_k=100000"),
    (lambda: SingleHeadAttention(10**6, 10**5), "d_k=100000"),
])
def test_a_layer_too_large_for_memory_names_the_size_that_asks(build, size):
    """Every module that allocates weights says which size asked for how many bytes, before the allocator fails."""
    with pytest.raises(MemoryError) as e:
        build()
    assert size in str(e.value) and "bytes" in str(e.value), str(e.value)
    with torch.device("meta"):
        build()                          # on meta nothing is allocated: no limit


@pytest.mark.parametrize("draw", ["attention_heatmap", "mask_picture", "heads_grid"])
def test_a_figure_of_a_meta_tensor_says_it_holds_no_values(draw):
    from attnlib import plots

    table = torch.zeros(2, 3, 3, device="meta") if draw == "heads_grid" else torch.zeros(3, 3, device="meta")
    rejects_at_boundary(lambda: getattr(plots, draw)(table, list("abc")), "meta", "no values")


@pytest.mark.parametrize("vocab_size", [0, -1])
def test_a_vocabulary_of_no_tokens_is_named_as_such(vocab_size):
    from attnlib._validate import require_id_list, require_ids

    rejects_at_boundary(lambda: require_ids(torch.tensor([1]), vocab_size), "vocab_size", str(vocab_size))
    rejects_at_boundary(lambda: require_id_list([1], vocab_size), "vocab_size", str(vocab_size))
    rejects_at_boundary(lambda: require_id_list(torch.tensor([1], device="meta"), 5), "meta")
