"""Bad input fails at the library's boundary with a message naming what was expected and what came.

One case per kind of mistake, readable as a list; tests/test_fuzz.py generates many more of each kind.
"""

from __future__ import annotations

import ast
import pathlib
import re

import numpy as np
import pytest
import torch

import attnlib
from attnlib import (
    GPT,
    MLP,
    Block,
    CharTokenizer,
    FusedProjections,
    KVCache,
    LearnedPositions,
    MultiHeadAttention,
    Projections,
    SingleHeadAttention,
    TokenEmbedding,
    ToyTokenizer,
    apply_rope,
    attend,
    causal_mask,
    one_hot_embedding,
    project,
    rope_angles,
    scores,
    sinusoidal_positions,
    softmax,
    split_heads,
)
from attnlib.costs import attention_flops, attention_params, count_ops, kv_cache_bytes, ops_called
from attnlib.heads import repeat_kv
from attnlib.plots import heads_grid, mask_picture
from attnlib.train import evaluate, random_batch

mha = MultiHeadAttention(64, 8)
model = GPT(50, 32, 4, 1, max_T=16)


def _filled_cache(B=2):
    cache = KVCache()
    small = MultiHeadAttention(8, 2)
    small(torch.randn(B, 3, 8), cache=cache)
    return small, cache


def _caches(lengths):
    caches = [KVCache() for _ in lengths]
    for c, n in zip(caches, lengths):
        c.K, c.V = torch.zeros(1, 4, n, 8), torch.zeros(1, 4, n, 8)
    return caches


CASES = [
    # (what, call, exception, message fragments that must all appear)
    ("x of the wrong rank", lambda: mha(torch.randn(7, 64)), ValueError, ["(B, T, d_model=64)", "(7, 64)"]),
    ("x of the wrong width", lambda: mha(torch.randn(2, 7, 32)), ValueError, ["(B, T, d_model=64)", "(2, 7, 32)"]),
    ("d_model not divisible by h", lambda: MultiHeadAttention(64, 5), ValueError, ["d_model=64", "h=5"]),
    ("split into a non-dividing h", lambda: split_heads(torch.randn(1, 3, 10), 4), ValueError, ["d_model=10", "h=4"]),
    ("T beyond the context length", lambda: model(torch.zeros(1, 17, dtype=torch.long)), ValueError,
     ["T=17", "max_T=16"]),
    ("learned positions past max_T", lambda: LearnedPositions(8, 4)(9), ValueError, ["T=9", "max_T=8"]),
    ("mismatched dtypes", lambda: scores(torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64)), TypeError,
     ["torch.float32", "torch.float64"]),
    ("input dtype differs from the weights", lambda: mha(torch.randn(1, 3, 64, dtype=torch.float64)), TypeError,
     ["torch.float64", "torch.float32"]),
    ("mismatched devices", lambda: scores(torch.randn(3, 4), torch.randn(3, 4, device="meta")), ValueError,
     ["cpu", "meta"]),
    ("empty sequence", lambda: mha(torch.randn(2, 0, 64)), ValueError, ["empty", "T must be at least 1"]),
    ("empty token ids", lambda: model(torch.zeros(1, 0, dtype=torch.long)), ValueError, ["empty"]),
    ("token id out of vocabulary", lambda: model(torch.tensor([[3, 50]])), ValueError, ["50", "0..49"]),
    ("negative token id", lambda: TokenEmbedding(10, 4)(torch.tensor([-1])), ValueError, ["-1", "0..9"]),
    ("float token ids", lambda: model(torch.tensor([[1.0, 2.0]])), TypeError, ["integer", "torch.float32"]),
    ("ids without a batch axis", lambda: model(torch.tensor([1, 2])), ValueError, ["(B, T)", "(2,)"]),
    ("not a tensor", lambda: scores(np.ones((3, 4)), torch.ones(3, 4)), TypeError, ["torch.Tensor", "ndarray"]),
    ("keys of another width", lambda: scores(torch.randn(5, 8), torch.randn(5, 6)), ValueError, ["d_k=8", "(5, 6)"]),
    ("values of another length", lambda: attend(torch.rand(4, 4), torch.randn(5, 3)), ValueError, ["T_k=4", "(5, 3)"]),
    ("projection matrix of the wrong height", lambda: project(torch.randn(4, 16), torch.randn(8, 4)), ValueError,
     ["d_model=8", "(4, 16)"]),
    ("cross-attention source of the wrong width",
     lambda: Projections(16, 8)(torch.randn(1, 3, 16), torch.randn(1, 5, 12)), ValueError,
     ["X_kv", "d_model=16", "(1, 5, 12)"]),
    ("single head on the wrong width", lambda: SingleHeadAttention(16, 8)(torch.randn(1, 3, 15)), ValueError,
     ["d_model=16", "(1, 3, 15)"]),
    ("odd width for sinusoidal positions", lambda: sinusoidal_positions(5, 7), ValueError, ["even", "d_model=7"]),
    ("odd width for RoPE", lambda: apply_rope(torch.randn(3, 5)), ValueError, ["even", "d=5"]),
    ("a mask with fewer keys than queries", lambda: causal_mask(5, 3), ValueError, ["T_k=3", "T_q=5"]),
    ("zero heads", lambda: Block(16, 0), ValueError, ["h must be a positive integer", "0"]),
    ("unknown norm placement", lambda: Block(16, 4, norm="middle"), ValueError, ["'pre' or 'post'", "'middle'"]),
    ("unknown position kind", lambda: GPT(10, pos="absolute"), ValueError, ["'rope'", "'absolute'"]),
    ("a character the toy tokenizer lacks", lambda: ToyTokenizer().encode("The cat"), ValueError,
     ["'T'", "position 0"]),
    ("text that is empty", lambda: ToyTokenizer().encode(""), ValueError, ["empty"]),
    ("training data shorter than a window", lambda: random_batch(torch.arange(10), 10, 2, torch.Generator()),
     ValueError, ["T=10", "(10,)"]),
    ("targets of another shape",
     lambda: model.loss(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)), ValueError,
     ["(1, 4)", "(1, 3)"]),
    # a hang: a vocabulary without the leading-space piece used to loop forever in encode
    ("a vocabulary without the space piece", lambda: ToyTokenizer(["a", "b", "c"]), ValueError, ["' '"]),
    # silently wrong results
    ("a negative position offset", lambda: LearnedPositions(8, 4)(2, -1), ValueError, ["offset", "-1"]),
    ("a negative offset into the model", lambda: model.embed_tokens(torch.zeros(1, 2, dtype=torch.long), -3),
     ValueError, ["offset", "-3"]),
    ("a negative id to decode", lambda: CharTokenizer("abc").decode([0, -1]), ValueError, ["-1", "0..2"]),
    ("queries and keys of different batches", lambda: scores(torch.randn(2, 5, 8), torch.randn(3, 5, 8)),
     ValueError, ["batch axes", "(2,)", "(3,)"]),
    ("weights and values of different batches", lambda: attend(torch.rand(2, 4, 4), torch.randn(3, 4, 5)),
     ValueError, ["batch axes", "(2,)", "(3,)"]),
    ("a negative temperature", lambda: model.generate(torch.zeros(1, 2, dtype=torch.long), 2, temperature=-1.0),
     ValueError, ["temperature", "-1.0"]),
    ("a NaN temperature", lambda: model.generate(torch.zeros(1, 2, dtype=torch.long), 2, temperature=float("nan")),
     ValueError, ["temperature", "nan"]),
    ("targets all ignored", lambda: model.loss(torch.zeros(1, 3, dtype=torch.long), torch.full((1, 3), -100)),
     ValueError, ["-100", "at least one target"]),
    ("a target outside the vocabulary", lambda: model.loss(torch.zeros(1, 3, dtype=torch.long),
                                                            torch.tensor([[1, 50, 2]])), ValueError, ["50", "0..49"]),
    ("per-layer caches of different lengths", lambda: GPT(50, 32, 4, 2, max_T=16)(
        torch.zeros(1, 1, dtype=torch.long), _caches([3, 2])), ValueError, ["same positions", "[3, 2]"]),
    ("a one-dimensional embedding table", lambda: one_hot_embedding(torch.tensor([0, 1]), torch.randn(5)),
     ValueError, ["(vocab_size, d_model)", "(5,)"]),
    ("a non-positive base", lambda: rope_angles(4, 8, base=0.0), ValueError, ["base", "0.0"]),
    ("a size given as a string", lambda: attention_flops("2", 4, 8, 2), TypeError, ["B", "'2'"]),
    ("a negative size in a cost formula", lambda: attention_flops(2, 4, -8, 2), ValueError, ["d_model", "-8"]),
    ("count_ops of something that cannot be called", lambda: count_ops(7), TypeError, ["fn", "7"]),
    ("a match pattern that is not text", lambda: ops_called(lambda: None, match=5), TypeError, ["match", "5"]),
    ("labels that do not fit the table", lambda: mask_picture(causal_mask(4), ["a", "b", "c"]), ValueError,
     ["T=4", "got 3"]),
    # deep tracebacks
    ("projections fed float64", lambda: Projections(8, 4)(torch.randn(1, 3, 8, dtype=torch.float64)), TypeError,
     ["torch.float64", "torch.float32"]),
    ("fused projections fed float64", lambda: FusedProjections(8, 4)(torch.randn(1, 3, 8, dtype=torch.float64)),
     TypeError, ["torch.float64", "torch.float32"]),
    ("a Pre-Norm block fed float64", lambda: Block(8, 2)(torch.randn(1, 3, 8, dtype=torch.float64)), TypeError,
     ["torch.float64", "torch.float32"]),
    ("an MLP fed the wrong width", lambda: MLP(8, 16)(torch.randn(3, 7)), ValueError, ["d_model=8", "(3, 7)"]),
    ("softmax over an axis that does not exist", lambda: softmax(torch.randn(3, 4), dim=2), ValueError,
     ["dim=2", "2 axes"]),
    ("softmax of a bool tensor", lambda: softmax(torch.ones(3, dtype=torch.bool)), TypeError, ["torch.bool"]),
    ("a cache from another batch", lambda: (lambda m, c: m(torch.randn(1, 1, 8), cache=c))(*_filled_cache(2)),
     ValueError, ["cache", "B=1", "(2, 2, 3, 4)"]),
    ("one cache shared by two layers", lambda: (lambda c: GPT(50, 32, 4, 2, max_T=16)(
        torch.zeros(1, 1, dtype=torch.long), [c, c]))(KVCache()), ValueError, ["caches[1]", "caches[0]"]),
    ("a negative width for a block", lambda: Block(-8, 2), ValueError, ["d_model", "-8"]),
    ("zero columns of heads", lambda: heads_grid(torch.rand(2, 3, 3), list("abc"), cols=0), ValueError,
     ["cols", "0"]),
    ("zero evaluation batches", lambda: evaluate(model, torch.arange(40), T=4, B=2, batches=0), ValueError,
     ["batches", "0"]),
    # tensors on another device than the weights ("meta" stands in for a GPU here)
    ("token ids on another device", lambda: model(torch.zeros(1, 2, dtype=torch.long, device="meta")), ValueError,
     ["meta", "cpu"]),
    ("input on another device", lambda: mha(torch.randn(1, 3, 64, device="meta")), ValueError, ["meta", "cpu"]),
    ("a cache on another device", lambda: (lambda m, c: m(torch.randn(2, 1, 8), cache=KVCache(
        c.K.to("meta"), c.V.to("meta"))))(*_filled_cache(2)), ValueError, ["cache", "meta", "cpu"]),
    # grouped-query attention (chapter 10)
    ("h not divisible by h_kv", lambda: MultiHeadAttention(64, 8, h_kv=3), ValueError, ["h=8", "h_kv=3"]),
    ("more key/value heads than query heads", lambda: attention_params(64, 8, 16), ValueError,
     ["h_kv=16", "h=8"]),
    ("a cache with another number of key/value heads",
     lambda: (lambda m, c: MultiHeadAttention(8, 2, h_kv=1)(torch.randn(2, 1, 8), cache=c))(*_filled_cache(2)),
     ValueError, ["holds 2 key/value heads", "h_kv=1", "(2, 2, 3, 4)"]),
    ("a K/V group of zero heads", lambda: repeat_kv(torch.randn(1, 2, 3, 4), 0), ValueError, ["n_rep", "0"]),
    ("a fractional number of key/value heads", lambda: kv_cache_bytes(12, 1.5, 64), TypeError, ["h_kv", "1.5"]),
    # vague messages
    ("RoPE with an odd d_head", lambda: GPT(50, 12, 4, 1, pos="rope"), ValueError, ["pos='rope'", "d_head=3"]),
    ("a prompt that leaves no room", lambda: model.generate(torch.zeros(1, 10, dtype=torch.long), 8), ValueError,
     ["n_new=8", "max_T=16"]),
    ("an agreement without a bound", lambda: attnlib.agree(torch.zeros(2), torch.zeros(2), within=0), ValueError,
     ["positive number", "0"]),
    ("an agreement of two shapes", lambda: attnlib.agree(torch.zeros(2), torch.zeros(3), within=1e-6), ValueError,
     ["(2,)", "(3,)"]),
    ("a bound given as text", lambda: attnlib.at_most(1e-7, "1e-5"), ValueError, ["positive number", "'1e-5'"]),
    ("a negative bound", lambda: attnlib.runtime.bound_text(-1e-3), ValueError, ["positive number", "-0.001"]),
]


@pytest.mark.parametrize("call,exc,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(call, exc, fragments):
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    assert "Traceback" not in message and not re.search(r"aten::|at::", message)


def test_numpy_integers_are_accepted_as_sizes():
    torch.manual_seed(0)
    a = MultiHeadAttention(np.int64(16), np.int32(4))
    torch.manual_seed(0)
    b = MultiHeadAttention(16, 4)
    x = torch.randn(1, 3, 16)
    assert torch.equal(a(x), b(x)) and type(a.d_model) is int and type(a.h) is int


# Public names that take no input, or whose input is any object: nothing to reject.
NO_INPUT = {"EXAMPLE", "SWAPPED", "TOY_VOCAB", "PIPELINE", "IGNORE_INDEX", "pipeline_figure", "accelerators",
            "SKIPPED", "FULL", "DIAGONAL", "CONTROLS", "MAX_T", "MAX_NUMBERS"}


def _public_names() -> set[str]:
    names = set(attnlib.__all__)
    for module in ("text", "embedding", "position", "projections", "attention", "heads", "block", "model", "train",
                   "plots", "explore", "costs", "reference", "runtime", "tiled", "batches"):
        names |= set(getattr(__import__(f"attnlib.{module}", fromlist=["__all__"]), "__all__", ()))
    return names - NO_INPUT


def test_every_public_entry_point_has_a_bad_input_case():
    """Every public function and class appears in a bad-input case here or in the fuzz (a new one must too)."""
    used: set[str] = set()
    here = pathlib.Path(__file__)
    # the further chapters' modules, and chapter 8's shipped models, keep their bad-input cases beside their tests
    beside = ("fuzz", "explore", "tiled", "batches", "stack_weights", "audit")
    for path in [here] + [here.with_name(f"test_{name}.py") for name in beside]:
        used |= {node.id for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Name)}
        used |= {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}
    missing = sorted(_public_names() - used)
    assert not missing, f"public entry points without a bad-input case: {missing}"
