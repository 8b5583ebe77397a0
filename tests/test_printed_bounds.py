"""attnlib.agree and attnlib.at_most: the one way a page prints an agreement, as the bound it meets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlib import agree, at_most
from attnlib.runtime import bound_text


@pytest.mark.parametrize("bound, text", [(1e-12, "1e-12"), (1e-5, "1e-5"), (2.5e-6, "2.5e-6"), (5e-4, "0.0005"),
                                         (0.001, "0.001"), (0.5, "0.5"), (1, "1"), (100, "100")])
def test_a_bound_is_printed_with_the_digits_of_its_literal(bound, text):
    assert bound_text(bound) == text
    assert float(text) == bound


@pytest.mark.parametrize("bad", [0, -1e-3, float("nan"), "1e-5", True, None])
def test_a_bound_must_be_a_positive_number(bad):
    with pytest.raises(ValueError, match="positive number"):
        bound_text(bad)


def test_agree_prints_the_bound_never_the_gap():
    a = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    line = agree(a, a + 3.3e-13, within=1e-12, what="tiled vs SDPA")
    assert line == "tiled vs SDPA: equal within 1e-12"
    assert "3.3" not in line
    assert agree(a, a, within=1e-12) == "equal within 1e-12"


def test_agree_fails_with_the_gap_when_the_bound_is_not_met():
    a = torch.zeros(2, 3)
    with pytest.raises(AssertionError, match=r"mask differ by 0\.001, more than 1e-5"):
        agree(a, a + 1e-3, within=1e-5, what="mask")


def test_agree_compares_tensors_arrays_and_numbers_in_float64():
    x = torch.randn(4, 5)
    assert agree(x, x.numpy().astype(np.float64), within=1e-12)        # float32 values are exact in float64
    assert agree(0.1 + 0.2, 0.3, within=1e-15)
    with pytest.raises(AssertionError):                                   # 1e-9 is kept, not lost to float32
        agree(torch.tensor(1.0, dtype=torch.float64), 1 + 1e-9, within=1e-10)


def test_agree_treats_equal_infinities_as_equal_and_nan_as_disagreement():
    m = torch.tensor([0.0, -math.inf, -math.inf])
    assert agree(m, m.clone(), within=1e-12)
    with pytest.raises(AssertionError):
        agree(m, torch.tensor([0.0, -math.inf, math.inf]), within=1e-12)
    with pytest.raises(AssertionError):
        agree(torch.tensor([math.nan]), torch.tensor([math.nan]), within=1.0)
    with pytest.raises(ValueError, match="shapes"):
        agree(torch.zeros(2), torch.zeros(3), within=1e-3)


def test_at_most_asserts_a_measured_error():
    assert at_most(3e-7, 1e-5, "float32 logits") == "float32 logits: within 1e-5"
    with pytest.raises(AssertionError, match="above the bound 1e-5"):
        at_most(2e-5, 1e-5, "float32 logits")
    with pytest.raises(AssertionError):
        at_most(float("nan"), 1.0)
