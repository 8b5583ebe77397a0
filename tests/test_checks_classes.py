"""The classes of issue 30, each closed, with wrong answers written from the exercise texts: the function "as
given" only when literally unchanged, a -1e9 fill in float16, float64 judged at float64 accuracy, dtype before
values, no internal names, a None prediction, and the learner's exception explained."""

import math

import torch

from attnlib import causal_mask, sliding_window_mask
from attnlib.checks import (
    check_cached_generation,
    check_folded_heads,
    check_log_softmax,
    check_sink_window_mask,
    check_split_fused,
    check_top_k_attention,
    check_unit_length_scores,
    judge,
)
from attnlib.checks.heads import buggy_folded_attention

GIVEN = "this is still the function as given"


def given_with_new_comments(X, W_QKV, W_O, h):
    """The learner's copy of the cell: comments and docstring changed, code not."""
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head) for t in (Q, K, V))
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_head)      # looked at this line, left it
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V)
    out = out.reshape(h, B, T, d_head).permute(1, 2, 0, 3)
    return out.reshape(B, T, d_model) @ W_O


def same_bug_by_view(X, W_QKV, W_O, h):
    """Edited: the folds written with view and flatten, the same unfolding in the wrong order."""
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (t.view(B, T, h, d_head).transpose(1, 2).flatten(0, 1) for t in (X @ W_QKV).chunk(3, dim=-1))
    P = (Q @ K.transpose(-2, -1) / math.sqrt(d_head) + causal_mask(T, dtype=X.dtype)).softmax(-1)
    return (P @ V).view(h, B, T, d_head).permute(1, 2, 0, 3).reshape(B, T, d_model) @ W_O


def test_as_given_only_of_literally_unchanged_code():
    assert check_folded_heads(buggy_folded_attention).message.startswith(GIVEN)
    assert check_folded_heads(given_with_new_comments).message.startswith(GIVEN)
    edited = check_folded_heads(same_bug_by_view)
    assert edited.mistake == "unchanged" and GIVEN not in edited.message, edited
    assert "your code still computes what the function as given computes" in edited.message
    assert GIVEN not in edited.hint(2).message


def dealt_by_slicing(X, W_QKV, d_k):
    P = X @ W_QKV
    return P[..., 0::3], P[..., 1::3], P[..., 2::3]


def test_the_same_wrong_column_order_written_another_way_is_not_as_given():
    verdict = check_split_fused(dealt_by_slicing)
    assert verdict.mistake == "unchanged" and GIVEN not in verdict.message, verdict


def fill_minus_1e9(Z, V, k):
    """Each query's k best keys, the others blocked with -1e9: fine in float32, not in float16."""
    kth = Z.topk(k, dim=-1).values[..., -1:]
    return torch.softmax(Z.masked_fill(Z < kth, -1e9), dim=-1) @ V


def test_a_minus_1e9_fill_in_float16_blames_the_fill_value():
    verdict = check_top_k_attention(fill_minus_1e9)
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
    verdict = check_unit_length_scores(None)
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


def test_combine_splits_says_inf_or_nan_only_of_an_inf_or_nan():
    """The successor of "merge-states says it comes out NaN for an answer with no NaN": an answer wrong only
    where the scores are large, yet finite there, is not told it overflows."""
    from attnlib.checks import check_combine_splits

    def exponent_clamped(O_parts, lse_parts):
        w = lse_parts.clamp(max=700.0).exp()      # finite everywhere, wrong for scores near 750
        return (w[..., None] * O_parts).sum(0) / w.sum(0)[..., None], w.sum(0).log()

    verdict = check_combine_splits(exponent_clamped)
    assert not verdict.ok and verdict.mistake != "overflow" and "inf or NaN" not in verdict.message, verdict


# ---- chapters 2, 4 and 11: the common slips named, never "as given" for edited code, stubs that give nothing away

def test_the_dealt_column_order_written_with_a_transpose_is_named_as_that_mistake():
    def dealt_by_transpose(X, W_QKV, d_k):
        QKV = X @ W_QKV
        return QKV.view(*QKV.shape[:-1], d_k, 3).transpose(-1, -2).unbind(-2)

    def dealt_by_view_T(X, W_QKV, d_k):
        cols = torch.arange(3 * d_k).view(d_k, 3).T          # (3, d_k): the columns of Q, K and V
        QKV = X @ W_QKV
        return QKV[..., cols[0]], QKV[..., cols[1]], QKV[..., cols[2]]

    def dealt_weight_columns(X, W_QKV, d_k):
        return X @ W_QKV[:, 0::3], X @ W_QKV[:, 1::3], X @ W_QKV[:, 2::3]

    for answer in (dealt_by_transpose, dealt_by_slicing, dealt_by_view_T, dealt_weight_columns):
        verdict = check_split_fused(answer)
        assert verdict.mistake == "unchanged" and GIVEN not in verdict.message, verdict
        assert "still computes what the function as given computes" in verdict.message


def test_cross_attention_slips_are_named():
    from attnlib.checks import check_cross_qkv

    def rest(KV, d_k):
        return KV[..., :d_k], KV[..., d_k:]

    wrong = {
        "q-from-other": lambda X, X_kv, W_Q, W_KV, d_k: (X_kv @ W_Q, *rest(X_kv @ W_KV, d_k)),
        "kv-from-queries": lambda X, X_kv, W_Q, W_KV, d_k: (X @ W_Q, *rest(X @ W_KV, d_k)),
        "order": lambda X, X_kv, W_Q, W_KV, d_k: (X @ W_Q, *rest(X_kv @ W_KV, d_k)[::-1]),   # K and V swapped
    }
    for label, answer in wrong.items():
        assert check_cross_qkv(answer).mistake == label, label


def test_a_scale_by_the_wrong_width_and_a_mask_after_softmax_are_named_in_the_causal_head():
    from attnlib.checks import check_sealed_attention

    def head(Q, K, V, root, after=False):
        T = Q.shape[-2]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        Z = Q @ K.transpose(-2, -1) / math.sqrt(root(Q, V))
        P = Z.softmax(-1).masked_fill(future, 0.0) if after else Z.masked_fill(future, -math.inf).softmax(-1)
        return P @ V

    assert check_sealed_attention(lambda Q, K, V: head(Q, K, V, lambda Q, V: Q.shape[-2])).mistake == "scale-T"
    assert check_sealed_attention(lambda Q, K, V: head(Q, K, V, lambda Q, V: V.shape[-1])).mistake == "scale-d_v"
    after = check_sealed_attention(lambda Q, K, V: head(Q, K, V, lambda Q, V: Q.shape[-1], after=True))
    assert after.mistake == "mask-after-softmax", after


def test_a_planted_mistake_that_cannot_run_where_the_answer_is_wrong_is_not_blamed():
    """Equal pieces of d_k cannot be cut where d_v > d_k: an answer cut in halves, wrong only there, is not told
    it cut equal pieces."""
    from attnlib.checks import check_cross_qkv

    verdict = check_cross_qkv(lambda X, X_kv, W_Q, W_KV, d_k: (X @ W_Q, *(X_kv @ W_KV).chunk(2, dim=-1)))
    assert verdict.mistake == "halves", verdict


def test_find_the_bug_stubs_of_chapters_2_and_11_give_no_diagnosis_in_either_edition():
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    for page, name in [("02_projections", "def split_fused"), ("11_batches_and_padding", "def generate_batch")]:
        for edition in ("book", "learner"):
            cells = json.loads((root / edition / f"{page}.ipynb").read_text())["cells"]
            stub = next(c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).startswith(name)
                        and "raise NotImplementedError" in "".join(c["source"]))
            shown = "".join(t for o in stub["outputs"] for t in (o.get("text") or o.get("data", {}).get(
                "text/plain", "")))
            assert "still the stub" in shown and "column" not in shown and "padding" not in shown, (edition, shown)
