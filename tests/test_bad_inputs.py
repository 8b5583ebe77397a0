"""Bad input fails at the library's boundary with a message naming what was expected and what came."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlib import (
    GPT,
    Block,
    LearnedPositions,
    MultiHeadAttention,
    Projections,
    SingleHeadAttention,
    TokenEmbedding,
    ToyTokenizer,
    apply_rope,
    attend,
    causal_mask,
    project,
    scores,
    sinusoidal_positions,
    split_heads,
)
from attnlib.train import random_batch

mha = MultiHeadAttention(64, 8)
model = GPT(50, 32, 4, 1, max_T=16)

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
]


@pytest.mark.parametrize("call,exc,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(call, exc, fragments):
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    assert "Traceback" not in message and not re.search(r"aten::|at::", message)


def test_there_are_at_least_twelve_bad_input_cases():
    assert len(CASES) >= 12
