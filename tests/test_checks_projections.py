"""The projections chapter's checkers accept the solutions, name each planted mistake at both hint levels, never
give the fix away at the first level, and have no holes: dtype, shared parameters, the structure of a built
module, in-place writes, and blame only where a mistake matches."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

from attnlib import FusedProjections, Projections
from attnlib.checks import check_cross_qkv, check_load_projections, check_qkv_params, check_split_fused
from attnlib.checks import projections as P
from attnlib.checks._core import _GENERAL, _close
from helpers import assert_accepted, assert_mistakes_distinct, assert_named, assert_named_at_both_levels

CHECKERS = [check_load_projections, check_split_fused, check_cross_qkv, check_qkv_params]


# ---- load a checkpoint into nn.Linear layers ---------------------------------------------------------------------

def _sizes(ckpt):
    (d_model, d_k), d_v = ckpt["W_Q"].shape, ckpt["W_V"].shape[1]
    return d_model, d_k, d_v


def load(ckpt, *, dtype=True, transpose=True, bias=True, share=False):
    """The solution, or with a planted slip."""
    proj = Projections(*_sizes(ckpt), bias=True)
    if dtype:
        proj = proj.to(ckpt["W_Q"].dtype)
    for name, layer in [("Q", proj.q), ("K", proj.k), ("V", proj.v)]:
        W, b = ckpt[f"W_{name}"], ckpt[f"b_{name}"]
        if share:
            layer.weight, layer.bias = nn.Parameter(W.T), nn.Parameter(b)
            continue
        with torch.no_grad():
            layer.weight.copy_(W.T if transpose else W)
            if bias:
                layer.bias.copy_(b)
    return proj


def load_own_module(ckpt):
    """Another right answer: a module of the learner's own, in float64 from the start."""
    d_model, d_k, d_v = _sizes(ckpt)
    dtype = ckpt["W_Q"].dtype

    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(d_model, n, dtype=dtype) for n in (d_k, d_k, d_v))

        def forward(self, X):
            return self.q(X), self.k(X), self.v(X)

    m = Three()
    with torch.no_grad():
        for name, layer in [("Q", m.q), ("K", m.k), ("V", m.v)]:
            layer.weight.copy_(ckpt[f"W_{name}"].T)
            layer.bias.copy_(ckpt[f"b_{name}"])
    return m


def load_clone_into_parameter(ckpt):
    """Another right answer: new Parameters, but of copies (clone), so nothing is shared."""
    proj = Projections(*_sizes(ckpt), bias=True).to(ckpt["W_Q"].dtype)
    for name, layer in [("Q", proj.q), ("K", proj.k), ("V", proj.v)]:
        layer.weight = nn.Parameter(ckpt[f"W_{name}"].T.clone())
        layer.bias = nn.Parameter(ckpt[f"b_{name}"].clone())
    return proj


def test_the_loaded_module_is_accepted_in_every_right_form():
    for answer in (load, load_own_module, load_clone_into_parameter):
        assert_accepted(check_load_projections(answer))


def test_a_float32_module_for_a_float64_checkpoint_is_named():
    verdict = check_load_projections(lambda c: load(c, dtype=False))
    assert_named(verdict, "module-dtype", "float32", "float64")
    assert_named(check_load_projections(lambda c: load(c, dtype=False), hint=2), "module-dtype", "default dtype")


def test_a_module_always_in_float64_is_named_for_the_float32_checkpoints():
    assert_named(check_load_projections(lambda c: load(c).double()), "module-dtype", "float64", "float32")


def test_a_checkpoint_loaded_through_numpy_is_named_for_its_dtype():
    def via_numpy(ckpt):
        arrays = {k: v.numpy() for k, v in ckpt.items()}             # float64 arrays stay float64, float32 …
        proj = Projections(*_sizes(ckpt), bias=True).double()         # … but the module is made float64
        with torch.no_grad():
            for name, layer in [("Q", proj.q), ("K", proj.k), ("V", proj.v)]:
                layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(arrays[f"W_{name}"].T)))
                layer.bias.copy_(torch.from_numpy(arrays[f"b_{name}"]))
        return proj

    assert_named(check_load_projections(via_numpy), "module-dtype")


@pytest.mark.parametrize("how", ["parameter-of-transpose", "data"])
def test_a_module_that_shares_the_checkpoints_memory_is_named(how):
    def sharing(ckpt):
        if how == "parameter-of-transpose":
            return load(ckpt, share=True)
        proj = load(ckpt)
        proj.k.weight.data = ckpt["W_K"].T            # a view of the checkpoint's memory
        return proj

    verdict = check_load_projections(sharing)
    assert_named(verdict, "shared-checkpoint", "weight")
    assert "copied" not in verdict.message


def test_an_untransposed_copy_is_named_although_it_fails_on_the_other_checkpoints():
    assert_named(check_load_projections(lambda c: load(c, transpose=False)), "no-transpose")
    assert_named(check_load_projections(lambda c: load(c, transpose=False), hint=2), "no-transpose", "out × in")


@pytest.mark.parametrize("how", ["left-random", "no-bias-at-all"])
def test_biases_not_loaded_are_named(how):
    def without(ckpt):
        if how == "left-random":
            return load(ckpt, bias=False)
        proj = Projections(*_sizes(ckpt), bias=False).to(ckpt["W_Q"].dtype)
        with torch.no_grad():
            for name, layer in [("Q", proj.q), ("K", proj.k), ("V", proj.v)]:
                layer.weight.copy_(ckpt[f"W_{name}"].T)
        return proj

    assert_named(check_load_projections(without), "bias", "Q, K, V")


def test_a_bias_missing_from_one_layer_is_named_with_that_layer():
    def v_without_bias(ckpt):
        proj = load(ckpt)
        with torch.no_grad():
            proj.v.bias.zero_()
        return proj

    assert_named(check_load_projections(v_without_bias), "bias", "your V ")


def test_a_module_with_the_widths_of_K_and_V_swapped_is_rejected():
    """Structure: Projections(d_model, d_v, d_k) has the same parameter count when d_k = d_v only; the
    behaviour on a probe input shows it in every case."""
    def swapped_widths(ckpt):
        d_model, d_k, d_v = _sizes(ckpt)
        proj = Projections(d_model, d_v, d_k, bias=True).to(ckpt["W_Q"].dtype)
        with torch.no_grad():
            for name, layer in [("Q", proj.q), ("K", proj.k), ("V", proj.v)]:
                n = min(layer.weight.shape[0], ckpt[f"W_{name}"].shape[1])
                layer.weight[:n].copy_(ckpt[f"W_{name}"].T[:n])
        return proj

    assert not check_load_projections(swapped_widths).ok


def test_what_is_not_a_module_is_named():
    assert_named(check_load_projections(lambda c: (c["W_Q"], c["W_K"], c["W_V"])), "not-a-module", "tuple")
    assert_named(check_load_projections(lambda c: c), "not-a-module", "dict")


def test_a_module_whose_call_is_not_q_k_v_is_named():
    class OnlyQ(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, X):
            return self.inner(X)[0]

    assert_named(check_load_projections(lambda c: OnlyQ(load(c))), "output", "Tensor")


def test_any_module_whose_call_gives_q_k_v_is_accepted_even_a_fused_one():
    def fused(ckpt):
        return FusedProjections.from_separate(load(ckpt).float()).to(ckpt["W_Q"].dtype)

    # weights copied into a float32 module, then converted: the float64 checkpoint lost its precision
    assert_named(check_load_projections(fused), "precision", "float32")

    def fused_in_dtype(ckpt):
        separate = load(ckpt)
        fused = FusedProjections(separate.d_model, separate.d_k, separate.d_v, bias=True).to(ckpt["W_Q"].dtype)
        with torch.no_grad():
            fused.qkv.weight.copy_(torch.cat([separate.q.weight, separate.k.weight, separate.v.weight]))
            fused.qkv.bias.copy_(torch.cat([separate.q.bias, separate.k.bias, separate.v.bias]))
        return fused

    assert_accepted(check_load_projections(fused_in_dtype))


def test_transposing_the_checkpoint_in_place_is_named():
    def t_in_place(ckpt):
        for n in "QKV":
            ckpt[f"W_{n}"].t_()                        # the caller's checkpoint, transposed in place
        proj = Projections(*(ckpt["W_Q"].shape[1], ckpt["W_Q"].shape[0], ckpt["W_V"].shape[0]), bias=True)
        proj = proj.to(ckpt["W_Q"].dtype)
        with torch.no_grad():
            for name, layer in [("Q", proj.q), ("K", proj.k), ("V", proj.v)]:
                layer.weight.copy_(ckpt[f"W_{name}"])
                layer.bias.copy_(ckpt[f"b_{name}"])
        return proj

    assert_named(check_load_projections(t_in_place), "in-place", "ckpt['W_Q']")


def test_the_load_cases_are_square_float64_and_of_unequal_widths():
    (square,), (wide,), (narrow,) = P._load_cases()
    assert len(set(_sizes(square))) == 1 and square["W_Q"].dtype == torch.float32
    assert wide["W_Q"].dtype == torch.float64 and _sizes(wide)[1] != _sizes(wide)[2]
    d_model, d_k, d_v = _sizes(narrow)
    assert d_k < d_model < d_v


# ---- find the bug: splitting a fused projection ------------------------------------------------------------------

def fused_as_given(X, W_QKV, d_k):
    """The function the chapter prints, bug included."""
    QKV = X @ W_QKV
    Q, K, V = QKV.view(*QKV.shape[:-1], d_k, 3).unbind(-1)
    return Q, K, V


def fused_right(X, W_QKV, d_k):
    Q, K, V = (X @ W_QKV).split(d_k, dim=-1)
    return Q, K, V


def fused_view_3_d_k(X, W_QKV, d_k):
    QKV = X @ W_QKV
    Q, K, V = QKV.view(*QKV.shape[:-1], 3, d_k).unbind(-2)    # another right repair
    return Q, K, V


def fused_slices(X, W_QKV, d_k):
    return tuple(X @ W_QKV[:, i * d_k:(i + 1) * d_k] for i in range(3))


def test_every_right_repair_of_the_fused_split_is_accepted():
    for answer in (fused_right, fused_view_3_d_k, fused_slices):
        assert_accepted(check_split_fused(answer))


def test_the_fused_bug_runs_silently_with_the_right_shapes():
    for X, W_QKV, d_k in P._fused_cases():
        for got, want in zip(fused_as_given(X, W_QKV, d_k), fused_right(X, W_QKV, d_k)):
            assert got.shape == want.shape and not torch.allclose(got, want)


def test_the_stored_verdict_of_the_fused_stub_does_not_say_what_Q_equals():
    verdict = check_split_fused(fused_as_given)
    assert_named(verdict, "unchanged")
    assert "W_QKV[" not in verdict.message and ":d_k" not in verdict.message and "split" not in verdict.message


def test_a_repair_that_writes_into_X_is_named():
    def into_X(X, W_QKV, d_k):
        X.mul_(1.0).add_(1.0)
        return fused_right(X - 1.0, W_QKV, d_k)

    assert_named(check_split_fused(into_X), "in-place", "X")


def test_a_float64_result_for_float32_inputs_is_a_dtype_mistake():
    assert_named(check_split_fused(lambda X, W, d: fused_right(X.double(), W.double(), d)), "dtype", "float64")


# ---- cross-attention with a fused K/V projection -----------------------------------------------------------------

def cross_right(X, X_kv, W_Q, W_KV, d_k):
    KV = X_kv @ W_KV
    K, V = KV.split([d_k, KV.shape[-1] - d_k], dim=-1)
    return X @ W_Q, K, V


def cross_slices(X, X_kv, W_Q, W_KV, d_k):
    return X @ W_Q, X_kv @ W_KV[:, :d_k], X_kv @ W_KV[:, d_k:]


@pytest.mark.parametrize("answer", [cross_right, cross_slices])
def test_the_cross_solution_is_accepted(answer):
    assert_accepted(check_cross_qkv(answer))


def test_the_cross_cases_have_other_lengths_other_widths_and_d_v_unequal_to_d_k():
    cases = P._cross_cases()
    assert any(X.shape[-2] != X_kv.shape[-2] for X, X_kv, *_ in cases)
    assert any(X.shape[-1] != X_kv.shape[-1] for X, X_kv, *_ in cases)
    assert any(W_KV.shape[-1] - d_k > d_k for *_, W_KV, d_k in cases)
    assert any(W_KV.shape[-1] - d_k < d_k for *_, W_KV, d_k in cases)


def test_a_cross_answer_in_float64_is_a_dtype_mistake():
    def promoted(X, X_kv, W_Q, W_KV, d_k):
        return tuple(t.double() for t in cross_right(X, X_kv, W_Q, W_KV, d_k))

    assert_named(check_cross_qkv(promoted), "dtype", "float64")


def test_an_einsum_answer_that_reads_the_wrong_sequence_is_still_rejected():
    def einsum_from_X(X, X_kv, W_Q, W_KV, d_k):
        KV = torch.einsum("...ti,io->...to", X, W_KV)
        return X @ W_Q, KV[..., :d_k], KV[..., d_k:]

    assert not check_cross_qkv(einsum_from_X).ok


# ---- every mistake of every table is named, with its first hint, then its second --------------------------------

TABLES = [(check_split_fused, P._FUSED_MISTAKES), (check_cross_qkv, P._CROSS_MISTAKES)]
PLANTED = [(c, m) for c, ms in TABLES for m in ms]


@pytest.mark.parametrize("check, m", PLANTED, ids=[f"{c.__name__}-{m.label}" for c, m in PLANTED])
def test_each_planted_mistake_is_named_at_both_hint_levels(check, m):
    assert_named_at_both_levels(check, m)


def test_every_planted_mistake_differs_from_the_answer_and_from_the_others():
    # the (3, d_k) view unbound on the wrong axis and pieces of 3 raise for d_k ≠ 3: compare the others on case 0;
    # the axis swapped with axis 0 is right without a batch axis: compare it on case 1, which has one;
    # equal pieces and halves are right when d_v ≤ d_k: compare on case 0, where d_v > d_k; a cut along axis 1 is
    # right without a batch axis (split raises with one: the others on case 1); a (d_k, 2) view raises on case 0
    fused = [m for m in P._FUSED_MISTAKES if m.label not in ("unbind-last", "split-count", "batch-axis", "axis-1")]
    assert_mistakes_distinct(P._fused_cases()[0], P._planted_split, fused)
    assert_mistakes_distinct(P._fused_cases()[1], P._planted_split, [m for m in P._FUSED_MISTAKES if m.label in (
        "unchanged", "batch-axis", "axis-1") and m.wrong.keywords.get("cut") != "axis-1"])
    cross = [m for m in P._CROSS_MISTAKES if m.label != "equal-pieces" and m.wrong.keywords.get("cut") != "dealt-d_k"]
    assert_mistakes_distinct(P._cross_cases()[0], P._planted_cross, cross)


def test_each_planted_function_with_no_switch_is_the_answer():
    for wrong, cases, reference in [(P._planted_split, P._fused_cases(), fused_right),
                                    (P._planted_cross, P._cross_cases(), cross_right)]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), 1e-5), wrong.__name__


def test_every_mistake_has_a_second_hint_and_is_registered():
    for check in CHECKERS:
        own = [m for m in check.mistakes if m not in _GENERAL]
        assert own and all(m.more for m in own), check.__name__
    for check, table in TABLES:
        assert set(table) <= set(check.mistakes), check.__name__
    assert {m.label for m in check_load_projections.mistakes} >= {
        "not-a-module", "module-dtype", "shared-checkpoint", "no-transpose", "bias", "output"}


# ---- wrong answers written from the exercise texts -------------------------------------------------------------

def fused_dealt_by_transpose(X, W_QKV, d_k):
    QKV = X @ W_QKV
    return QKV.view(*QKV.shape[:-1], d_k, 3).transpose(-1, -2).unbind(-2)


def fused_dealt_by_mT(X, W_QKV, d_k):
    QKV = X @ W_QKV
    Q, K, V = QKV.reshape(*QKV.shape[:-1], d_k, 3).mT.unbind(-2)
    return Q, K, V


def fused_thirds_of_axis_1(X, W_QKV, d_k):      # axis 1: the columns of a (T, 3·d_k) table, not of a batch
    Q, K, V = torch.chunk(X @ W_QKV, 3, dim=1)
    return Q, K, V


def fused_columns_of_one_table(X, W_QKV, d_k):
    QKV = torch.matmul(X, W_QKV)
    return QKV[:, :d_k], QKV[:, d_k:2 * d_k], QKV[:, 2 * d_k:]


def fused_counted_from_1(X, W_QKV, d_k):        # blocks counted from column 1: V runs past the end, one short
    QKV = X @ W_QKV
    return tuple(QKV[..., i * d_k + 1:(i + 1) * d_k + 1] for i in range(3))


def fused_ends_included(X, W_QKV, d_k):         # a block "from i·d_k to (i + 1)·d_k − 1", written as the slice
    QKV = X @ W_QKV
    return QKV[..., 0:d_k - 1], QKV[..., d_k:2 * d_k - 1], QKV[..., 2 * d_k:3 * d_k - 1]


def fused_rows_of_one_table(X, W_QKV, d_k):     # the batch axes flattened into rows, never put back
    QKV = X.reshape(-1, X.shape[-1]) @ W_QKV
    return QKV[:, :d_k], QKV[:, d_k:2 * d_k], QKV[:, 2 * d_k:]


FUSED_FROM_TEXT = [
    (fused_as_given, "unchanged"), (fused_dealt_by_transpose, "unchanged"), (fused_dealt_by_mT, "unchanged"),
    (lambda X, W, d_k: tuple((X @ W).split(3, dim=-1)), "split-count"),
    (lambda X, W, d_k: (X @ W).view(*X.shape[:-1], 3, d_k).unbind(-1), "unbind-last"),
    (lambda X, W, d_k: (X @ W).reshape(3, *X.shape[:-1], d_k).unbind(0), "reshape-front"),
    (lambda X, W, d_k: (X @ W).chunk(3, dim=-2), "rows"),
    (lambda X, W, d_k: (X @ W).split(d_k, dim=-1)[::-1], "reversed"),
    (lambda X, W, d_k: (lambda Q, K, V: (K, Q, V))(*(X @ W).split(d_k, -1)), "order"),
    (lambda X, W, d_k: (lambda Q, K, V: (Q, V, K))(*(X @ W).split(d_k, -1)), "kv-swapped"),
    (lambda X, W, d_k: tuple((X.float() @ W.float()).to(X.dtype).split(d_k, -1)), "precision"),
    (fused_thirds_of_axis_1, "axis-1"), (fused_columns_of_one_table, "axis-1"),
    (fused_counted_from_1, "off-by-one"), (fused_ends_included, "off-by-one"),
    (fused_rows_of_one_table, "flattened"), (lambda X, W, d_k: (X @ W).flatten(0, -2).split(d_k, -1), "flattened"),
]

def cross_dealt_by_index(X, X_kv, W_Q, W_KV, d_k):   # K the even columns, V every other one
    KV = X_kv @ W_KV
    even = torch.arange(d_k) * 2
    return X @ W_Q, KV[..., even], KV[..., [c for c in range(KV.shape[-1]) if c not in even.tolist()]]


def cross_dealt_by_mask(X, X_kv, W_Q, W_KV, d_k):
    KV = X_kv @ W_KV
    is_v = torch.ones(KV.shape[-1], dtype=torch.bool)
    is_v[: 2 * d_k: 2] = False
    return X @ W_Q, KV[..., 0::2][..., :d_k], KV[..., is_v]


def cross_v_first(X, X_kv, W_Q, W_KV, d_k):     # the sizes of the cut in the order (d_v, d_k)
    KV, d_v = X_kv @ W_KV, W_KV.shape[1] - d_k
    return X @ W_Q, KV[..., :d_v], KV[..., d_v:]


def cross_split_v_k(X, X_kv, W_Q, W_KV, d_k):
    K, V = torch.split(X_kv @ W_KV, (W_KV.shape[-1] - d_k, d_k), dim=-1)
    return X @ W_Q, K, V


def cross_dealt_in_d_k_pairs(X, X_kv, W_Q, W_KV, d_k):   # the chapter's view, (d_k, 2): raises when d_v ≠ d_k
    KV = X_kv @ W_KV
    K, V = KV.reshape(*KV.shape[:-1], d_k, 2).unbind(dim=-1)
    return X @ W_Q, K, V


CROSS_FROM_TEXT = [
    (lambda X, Xkv, W_Q, W_KV, d_k: (X @ W_Q, *(X @ W_KV).split([d_k, W_KV.shape[-1] - d_k], -1)), "kv-from-queries"),
    (lambda X, Xkv, W_Q, W_KV, d_k: (Xkv @ W_Q, *(Xkv @ W_KV).split([d_k, W_KV.shape[-1] - d_k], -1)),
     "q-from-other"),
    (lambda X, Xkv, W_Q, W_KV, d_k: (X @ W_Q, *(Xkv @ W_KV).chunk(2, -1)), "halves"),
    (lambda X, Xkv, W_Q, W_KV, d_k: (X @ W_Q, *(Xkv @ W_KV).split([d_k, d_k], -1)), "equal-pieces"),
    (lambda X, Xkv, W_Q, W_KV, d_k: (X @ W_Q, (Xkv @ W_KV)[..., -d_k:], (Xkv @ W_KV)[..., :-d_k]), "k-from-the-end"),
    (lambda X, Xkv, W_Q, W_KV, d_k: (X @ W_Q, (Xkv @ W_KV)[..., d_k:], (Xkv @ W_KV)[..., :d_k]), "order"),
    (lambda X, Xkv, W_Q, W_KV, d_k: (X @ W_Q, *(Xkv @ W_KV).split(d_k, -1)), "equal-pieces"),
    (lambda X, Xkv, W_Q, W_KV, d_k: (X @ W_Q, (Xkv @ W_KV)[..., :d_k], (Xkv @ W_KV)[..., :W_KV.shape[-1] - d_k]),
     "v-from-start"),
    (cross_v_first, "sizes-swapped"), (cross_split_v_k, "sizes-swapped"),
    (lambda X, Xkv, W_Q, W_KV, d_k: (X @ W_Q, (Xkv @ W_KV)[..., ::2], (Xkv @ W_KV)[..., 1::2]), "dealt"),
    (cross_dealt_in_d_k_pairs, "dealt"),
    (lambda X, Xkv, W_Q, W_KV, d_k: ((X.float() @ W_Q.float()).to(X.dtype),
                                     *(Xkv @ W_KV).split([d_k, W_KV.shape[-1] - d_k], -1)), "precision"),
    (cross_dealt_by_index, "dealt"), (cross_dealt_by_mask, "dealt"),
]


def load_shared(ckpt):
    proj = Projections(*_sizes(ckpt), bias=True).to(ckpt["W_Q"].dtype)
    for name, layer in [("Q", proj.q), ("K", proj.k), ("V", proj.v)]:
        layer.weight, layer.bias = nn.Parameter(ckpt[f"W_{name}"].T), nn.Parameter(ckpt[f"b_{name}"])
    return proj


LOAD_FROM_TEXT = [
    (lambda c: load(c, dtype=False), "module-dtype"), (lambda c: load(c, transpose=False), "no-transpose"),
    (lambda c: load(c, bias=False), "bias"), (load_shared, "shared-checkpoint"),
    (lambda c: {k: v.clone() for k, v in c.items()}, "not-a-module"),
    (lambda c: load(c, dtype=False).to(c["W_Q"].dtype), "precision"),
    (lambda c: Projections(c["W_Q"].shape[0], c["W_Q"].shape[1], bias=True).to(c["W_Q"].dtype), None),
]


@pytest.mark.parametrize("check, answers", [(check_split_fused, FUSED_FROM_TEXT), (check_cross_qkv, CROSS_FROM_TEXT),
                                            (check_load_projections, LOAD_FROM_TEXT)])
def test_wrong_answers_from_the_exercise_texts_are_named(check, answers):
    from test_checks_mask import assert_wrong_answers

    assert_wrong_answers(check, answers)


def test_wrong_predictions_from_the_text_are_named():
    from test_checks_mask import assert_wrong_answers

    guesses = [3 * (768 * 64 + 64), 3 * 768 * 768, 12 * 3 * (768 * 768 + 768), 4 * (768 * 768 + 768), 768 * 768 + 768,
               3 * 768 * 64]
    assert_wrong_answers(check_qkv_params, [(g, None) for g in guesses])


# ---- predict: the parameters of GPT-2 small's Q, K, V projections in one layer ----------------------------------

D_MODEL, H = 768, 12
D_HEAD = D_MODEL // H
GUESSES = {
    "one-head": 3 * (D_MODEL * D_HEAD + D_HEAD),
    "one-head-no-bias": 3 * D_MODEL * D_HEAD,
    "no-bias": 3 * D_MODEL**2,
    "full-width-heads": H * 3 * (D_MODEL**2 + D_MODEL),
    "with-W_O": 4 * (D_MODEL**2 + D_MODEL),
    "one-matrix": D_MODEL**2 + D_MODEL,
    "one-head-bias-width": 3 * D_MODEL * D_HEAD + 3 * D_MODEL,
}


def test_qkv_params_stub_right_number_and_each_typical_guess():
    assert_named(check_qkv_params(...), "stub")
    right = H * 3 * (D_MODEL * D_HEAD + D_HEAD)
    assert right == 3 * (D_MODEL**2 + D_MODEL) == 1_771_776
    assert_accepted(check_qkv_params(right))
    assert_accepted(check_qkv_params(torch.tensor(right)))
    for label, value in GUESSES.items():
        assert_named(check_qkv_params(value), label)
        assert_named(check_qkv_params(value, hint=2), label)
    assert_named(check_qkv_params(right + 1000), "values")
    assert_named(check_qkv_params("many"), "type")


@pytest.mark.parametrize("label", list(GUESSES))
def test_a_wrong_guess_is_told_too_high_or_too_low_and_never_the_formula(label):
    first = check_qkv_params(GUESSES[label]).message
    side = "high" if GUESSES[label] > 1_771_776 else "low"
    assert f"too {side}" in first, first
    for verdict in (first, check_qkv_params(GUESSES[label], hint=2).message):
        assert not re.search(r"[·×*]\s*\(|d_model²|\d+\s*[·×*]\s*\d+\s*[·×*]", verdict), verdict
        assert not re.search(r"3\s*[·×*]|h\s*[·×*]", verdict), verdict


def test_qkv_params_are_counted_from_real_modules():
    fused = FusedProjections(D_MODEL, D_MODEL, bias=True)      # all heads' W_Q, W_K, W_V side by side
    assert P._qkv_params(D_MODEL, H) == sum(p.numel() for p in fused.parameters())
    assert P._qkv_params(16, 4) == 3 * (16 * 16 + 16)




def test_column_runs_off_by_one_are_named_with_the_pieces_off_and_batch_axes_flattened_with_the_shape():
    assert_named(check_split_fused(fused_counted_from_1), "off-by-one", "edges of Q, K, V")
    assert_named(check_split_fused(fused_ends_included, hint=2), "off-by-one", "not including")
    assert_named(check_split_fused(fused_rows_of_one_table), "flattened", "(6, 2), expected (2, 3, 2)")
    # a wrong width that is no flattening stays a plain shape
    assert_named(check_split_fused(lambda X, W, d_k: (X @ W)[..., None, :].split(d_k, -1)), "shape")
