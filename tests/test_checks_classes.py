"""The classes of issue 30, each closed, with wrong answers written from the exercise texts: the function "as
given" only when literally unchanged, a -1e9 fill in float16, float64 judged at float64 accuracy, dtype before
values, no internal names, a None prediction, and the learner's exception explained."""

import math

import torch

from attnlib import causal_mask, sliding_window_mask
from attnlib.checks import (
    check_attention_output,
    check_cached_generation,
    check_fixed_qkv_attention,
    check_log_softmax,
    check_scaled_variance,
    check_sink_window_mask,
    check_split_fused,
    judge,
)
from attnlib.checks.heads import buggy_qkv_attention

GIVEN = "this is still the function as given"


def given_with_new_comments(X, W_QKV, W_O, h):
    """The learner's copy of the cell: comments and docstring changed, code not."""
    B, T, d_model = X.shape
    d_head = d_model // h
    qkv = (X @ W_QKV).view(B, T, h, 3, d_head)    # looked at this line, left it
    q, k, v = qkv.permute(3, 0, 2, 1, 4)
    Z = torch.einsum("bhid,bhjd->bhij", q, k) / d_head ** 0.5
    future = torch.ones(T, T, dtype=torch.bool, device=X.device).triu(1)
    P = Z.masked_fill(future, float("-inf")).softmax(dim=-1)
    out = torch.einsum("bhij,bhjd->bihd", P, v)
    return out.reshape(B, T, d_model) @ W_O


def same_bug_by_reshape(X, W_QKV, W_O, h):
    """Edited: the view became a reshape and the unpacking an unbind, the same wrong column order."""
    B, T, d_model = X.shape
    d_head = d_model // h
    q, k, v = (X @ W_QKV).reshape(B, T, h, 3, d_head).permute(3, 0, 2, 1, 4).unbind(0)
    P = (q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(
        torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf).softmax(-1)
    return (P @ v).transpose(1, 2).reshape(B, T, d_model) @ W_O


def test_as_given_only_of_literally_unchanged_code():
    assert check_fixed_qkv_attention(buggy_qkv_attention).message.startswith(GIVEN)
    assert check_fixed_qkv_attention(given_with_new_comments).message.startswith(GIVEN)
    edited = check_fixed_qkv_attention(same_bug_by_reshape)
    assert edited.mistake == "unchanged" and GIVEN not in edited.message, edited
    assert "your code still computes what the function as given computes" in edited.message
    assert GIVEN not in edited.hint(2).message


def dealt_by_slicing(X, W_QKV, d_k):
    P = X @ W_QKV
    return P[..., 0::3], P[..., 1::3], P[..., 2::3]


def test_the_same_wrong_column_order_written_another_way_is_not_as_given():
    verdict = check_split_fused(dealt_by_slicing)
    assert verdict.mistake == "unchanged" and GIVEN not in verdict.message, verdict


def fill_minus_1e9(Q, K, V):
    q, k, v = (t.transpose(0, 1) for t in (Q, K, V))
    Z = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    T = Z.shape[-1]
    Z = Z.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -1e9)
    return (Z.softmax(-1) @ v).transpose(0, 1)


def test_a_minus_1e9_fill_in_float16_blames_the_fill_value():
    verdict = check_attention_output(fill_minus_1e9)
    assert verdict.mistake == "finite" and "fill value" in verdict.message, verdict
    assert "two of your tensors" not in verdict.message


def test_a_float64_case_is_judged_at_float64_accuracy():
    verdict = check_log_softmax(lambda z: torch.log_softmax(z.float(), dim=-1).to(z.dtype))
    assert verdict.mistake == "precision" and "float32 round trip" in verdict.message, verdict
    assert check_log_softmax(lambda z: z - z.logsumexp(-1, keepdim=True)).ok
    cases = [(torch.randn(5, dtype=torch.float64),)]
    assert judge(lambda x: (x.float() * 2).double(), cases, lambda x: 2 * x).mistake == "precision"
    assert judge(lambda x: x + x, cases, lambda x: 2 * x).ok


def test_a_float_mask_without_sinks_is_told_its_dtype_not_an_astronomic_difference():
    def float_window(T_q, T_k, window, n_sink):
        return sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool).float()
    verdict = check_sink_window_mask(float_window)
    assert not verdict.ok and "e+30" not in verdict.message and "n_sink" in verdict.message, verdict
    assert verdict.mistake != "float-01-mask"          # its pattern is wrong too: not "the right pattern"

    def float_with_sinks(T_q, T_k, window, n_sink):
        sinks = causal_mask(T_q, T_k, dtype=torch.bool) & (torch.arange(T_k) < n_sink)
        return (sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool) | sinks).float()
    assert check_sink_window_mask(float_with_sinks).mistake == "float-01-mask"


def test_no_internal_name_leaks_and_the_hint_is_said_once():
    verdict = check_cached_generation(lambda model, ids, n_new, chunk: model.generate(ids, n_new))
    assert verdict.mistake == "shortcut" and "_Shortcut" not in verdict.message, verdict
    assert verdict.message.count("library's answer") == 1, verdict


def test_a_none_prediction_is_not_told_to_replace_the_ellipsis():
    verdict = check_scaled_variance(None)
    assert not verdict.ok and "`...`" not in verdict.message and "None" in verdict.message, verdict


def shapes_clash(x):
    y = x @ torch.ones(5)
    return y


def library_refuses(x):
    return causal_mask(x) + x


def test_the_learners_exception_names_the_case_inputs_and_line():
    cases = [(torch.ones(2, 3),), (torch.ones(3),)]
    verdict = judge(shapes_clash, cases, lambda x: x)
    assert verdict.mistake == "error" and isinstance(verdict.error, RuntimeError), verdict
    for said in ("test case 1 of 2", "x float32 (2, 3)", "line 2 of `shapes_clash`", "`y = x @ torch.ones(5)`"):
        assert said in verdict.message, (said, verdict)
    assert "x float32 (2, 3)" in verdict.hint(2).message
    refused = judge(library_refuses, cases, lambda x: x).hint(2)
    assert "library raised it; you passed float32 (2, 3)" in refused.message, refused
    assert "line 2 of `library_refuses`: `return causal_mask(x) + x`" in refused.message, refused


def heads_first_merged_by_reshape(X, W_Q, W_K, W_V, W_O):
    """The chapter's own bug, written from the exercise text: heads merged by a reshape, no transpose."""
    h, d_model, d_k = W_Q.shape
    B, T, _ = X.shape
    Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    Z = Q @ K.transpose(-2, -1) / math.sqrt(d_k) + causal_mask(T, dtype=X.dtype)
    heads = torch.softmax(Z, dim=-1) @ V                          # (B, h, T, d_v)
    return heads.reshape(B, T, -1) @ W_O.reshape(-1, d_model)


def test_heads_first_recognises_the_chapters_own_bug():
    from attnlib.checks import check_heads_first
    verdict = check_heads_first(heads_first_merged_by_reshape)
    assert verdict.mistake == "merge-no-transpose", verdict
    assert ".transpose(" not in verdict.message and ".transpose(" not in verdict.hint(2).message


def deepen_frozen(blocks):
    """Written from the exercise text: identity blocks whose zeroed output layers are frozen."""
    import copy

    from torch import nn
    deeper = nn.ModuleList()
    for block in blocks:
        new = copy.deepcopy(block)
        for p in [*new.attn.W_O.parameters(), *new.mlp.W_2.parameters()]:
            p.requires_grad_(False)
            p.data.zero_()
        deeper.extend([copy.deepcopy(block), new])
    return deeper


def test_deepen_rejects_frozen_new_layers():
    from attnlib.checks import check_deepen
    verdict = check_deepen(deepen_frozen)
    assert verdict.mistake == "frozen" and "requires_grad=False" in verdict.message, verdict


def test_merge_states_says_nan_only_of_a_nan():
    from attnlib.checks import check_merge_states
    from attnlib.checks.tiled import _merge_reference

    def empty_rows_hold_inf(a, b):
        m, l, O = _merge_reference(a, b)
        return m, l.masked_fill(torch.isinf(m), math.inf), O     # wrong on empty rows, yet no NaN

    verdict = check_merge_states(empty_rows_hold_inf)
    assert not verdict.ok and verdict.mistake != "nan-empty" and "comes out NaN" not in verdict.message, verdict
