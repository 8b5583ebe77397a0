"""The chapter 7 checkers accept the solutions, name every planted mistake and every realistic wrong answer of
each hole class (dtype, precision, in-place changes, structure, calling the thing to be built), and recognise the
stub."""

from __future__ import annotations

import ast
import functools
import inspect

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import gelu

from attnlib.checks import (
    block as ch7,
)
from attnlib.checks import (
    check_block_flops,
    check_layer_norm_from_rms,
    check_mlp_in_chunks,
    check_parallel_block,
    check_run_block,
    run_block_as_given,
)
from attnlib.checks._core import MORE, _close, _fresh
from helpers import BOOK, assert_accepted, assert_each_mistake_named, assert_named, stub

CHECKS = [check_mlp_in_chunks, check_run_block, check_parallel_block, check_block_flops, check_layer_norm_from_rms]


def assert_registered(check, verdict) -> None:
    """A named verdict comes from a mistake the checker registers, so the hint tests read its text."""
    assert verdict.mistake in {m.label for m in check.mistakes} | {"values", "dtype", "shape", "type", "error"}, \
        verdict



def named_by(check, fn, label, *fragments):
    v = check(fn)
    assert_named(v, label, *fragments)
    assert_registered(check, v)
    return v


# ------------------------------------------------------------------------------------------ MLP in chunks
def chunks_ok(X, W_1, b_1, W_2, b_2, chunk):
    out = torch.zeros_like(X) + b_2
    for start in range(0, W_1.shape[1], chunk):
        cols = slice(start, start + chunk)
        out = out + gelu(X @ W_1[:, cols] + b_1[cols]) @ W_2[cols]
    return out


def chunks_split(X, W_1, b_1, W_2, b_2, chunk):
    parts = zip(W_1.split(chunk, dim=1), b_1.split(chunk), W_2.split(chunk, dim=0))
    return sum(gelu(X @ w_1 + c_1) @ w_2 for w_1, c_1, w_2 in parts) + b_2


def chunks_in_place_accumulator(X, W_1, b_1, W_2, b_2, chunk):
    out = X.new_zeros(X.shape)
    for a in range(0, W_1.shape[1], chunk):
        out += gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]
    out += b_2
    return out


def chunks_whole(X, W_1, b_1, W_2, b_2, chunk):
    return gelu(X @ W_1 + b_1) @ W_2 + b_2


def chunks_whole_then_sliced(X, W_1, b_1, W_2, b_2, chunk):
    hidden = gelu(X @ W_1 + b_1)
    return sum(hidden[..., a:a + chunk] @ W_2[a:a + chunk] for a in range(0, W_1.shape[1], chunk)) + b_2


def chunks_concatenated(X, W_1, b_1, W_2, b_2, chunk):
    hs = [gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) for a in range(0, W_1.shape[1], chunk)]
    return torch.cat(hs, -1) @ W_2 + b_2


def chunks_one_token_at_a_time(X, W_1, b_1, W_2, b_2, chunk):
    """Chunks over the positions, not over the hidden columns: each token's full d_ff hidden vector."""
    rows = X.reshape(-1, X.shape[-1])
    return torch.stack([gelu(r @ W_1 + b_1) @ W_2 + b_2 for r in rows]).reshape(X.shape)


def chunks_b_2_each(X, W_1, b_1, W_2, b_2, chunk):
    out = 0
    for a in range(0, W_1.shape[1], chunk):
        out = out + gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk] + b_2
    return out


def chunks_tail_dropped(X, W_1, b_1, W_2, b_2, chunk):
    out = 0
    for k in range(W_1.shape[1] // chunk):
        cols = slice(k * chunk, (k + 1) * chunk)
        out = out + gelu(X @ W_1[:, cols] + b_1[cols]) @ W_2[cols]
    return out + b_2


def chunks_d_ff_assumed(X, W_1, b_1, W_2, b_2, chunk):
    out = 0
    for a in range(0, 4 * X.shape[-1], chunk):
        out = out + gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]
    return out + b_2


def chunks_gelu_after_sum(X, W_1, b_1, W_2, b_2, chunk):
    out = 0
    for a in range(0, W_1.shape[1], chunk):
        out = out + (X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]
    return gelu(out + b_2)


def chunks_gelu_per_chunk_output(X, W_1, b_1, W_2, b_2, chunk):
    out = 0
    for a in range(0, W_1.shape[1], chunk):
        out = out + gelu((X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk])
    return out + b_2


def chunks_relu(X, W_1, b_1, W_2, b_2, chunk):
    return sum(torch.relu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]
               for a in range(0, W_1.shape[1], chunk)) + b_2


def chunks_linear(X, W_1, b_1, W_2, b_2, chunk):
    return sum((X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]
               for a in range(0, W_1.shape[1], chunk)) + b_2


def chunks_tanh(X, W_1, b_1, W_2, b_2, chunk):
    return sum(gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk], approximate="tanh") @ W_2[a:a + chunk]
               for a in range(0, W_1.shape[1], chunk)) + b_2


def chunks_b_1_uncut(X, W_1, b_1, W_2, b_2, chunk):
    return sum(gelu(X @ W_1[:, a:a + chunk] + b_1) @ W_2[a:a + chunk]
               for a in range(0, W_1.shape[1], chunk)) + b_2


def chunks_W_2_uncut(X, W_1, b_1, W_2, b_2, chunk):
    return sum(gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2
               for a in range(0, W_1.shape[1], chunk)) + b_2


def chunks_float32_accumulator(X, W_1, b_1, W_2, b_2, chunk):
    """``torch.zeros`` without a dtype, added into in place: float32 precision, though b_2 promotes it back."""
    out = torch.zeros(X.shape)
    for a in range(0, W_1.shape[1], chunk):
        out += gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]
    return out + b_2


def chunks_float32_result(X, W_1, b_1, W_2, b_2, chunk):
    """The same running sum, with b_2 added in place too: a float32 result for a float64 input."""
    out = torch.zeros(X.shape)
    for a in range(0, W_1.shape[1], chunk):
        out += gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]
    out += b_2
    return out


def chunks_into_X(X, W_1, b_1, W_2, b_2, chunk):
    """Accumulates into the input itself."""
    Y = X.clone()
    for a in range(0, W_1.shape[1], chunk):
        X += gelu(Y @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]
    return X - Y + b_2


def chunks_into_b_2(X, W_1, b_1, W_2, b_2, chunk):
    """Accumulates into b_2, which broadcasts: changes an input (and fails on the shapes)."""
    out = b_2
    for a in range(0, W_1.shape[1], chunk):
        out += (gelu(X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]) @ W_2[a:a + chunk]).sum()
    return out.expand_as(X)


@pytest.mark.parametrize("fn", [chunks_ok, chunks_split, chunks_in_place_accumulator, ch7._chunk_variant])
def test_mlp_in_chunks_solutions_are_accepted(fn):
    assert_accepted(check_mlp_in_chunks(fn))


@pytest.mark.parametrize("fn, label", [
    (chunks_whole, "full-hidden"), (chunks_whole_then_sliced, "full-hidden"), (chunks_concatenated, "full-hidden"),
    (chunks_one_token_at_a_time, "full-hidden"),
    (chunks_b_2_each, "b_2-each-chunk"), (chunks_tail_dropped, "tail-dropped"), (chunks_d_ff_assumed, "d_ff-assumed"),
    (chunks_gelu_after_sum, "gelu-after-W_2"), (chunks_gelu_per_chunk_output, "gelu-after-W_2"),
    (chunks_relu, "relu"), (chunks_linear, "no-activation"), (chunks_tanh, "tanh-gelu"),
    (chunks_b_1_uncut, "uncut"), (chunks_W_2_uncut, "uncut"),
    (chunks_float32_accumulator, "precision"), (chunks_float32_result, "dtype"),
    (chunks_into_X, "in-place"), (chunks_into_b_2, "in-place"),
    (stub, "stub"),
])
def test_mlp_in_chunks_mistakes_are_named(fn, label):
    named_by(check_mlp_in_chunks, fn, label)


def test_the_whole_hidden_layer_is_named_with_its_width():
    assert_named(check_mlp_in_chunks(chunks_whole), "full-hidden", "40", "16")


def chunks_over_the_input_axis(X, W_1, b_1, W_2, b_2, chunk):
    """Cuts X's own axis (d_model) into chunks and takes GELU of each partial sum: wrong values, full-width hidden."""
    out = 0
    for a in range(0, X.shape[-1], chunk):
        out = out + gelu(X[..., a:a + chunk] @ W_1[a:a + chunk] + b_1) @ W_2
    return out + b_2


@pytest.mark.parametrize("fn", [chunks_over_the_input_axis, lambda *a: chunks_whole(*a) + 1])
def test_a_wide_tensor_is_not_blamed_alone_when_the_values_are_wrong_too(fn):
    """"The values are right, but …" is said only where they are."""
    verdict = check_mlp_in_chunks(fn)
    assert not verdict.ok and verdict.mistake != "full-hidden", verdict


def test_mlp_in_chunks_covers_d_ff_not_a_multiple_of_chunk_and_not_four_d_model():
    widths = [(W_1.shape[0], W_1.shape[1], chunk) for _, W_1, _, _, _, chunk in ch7._mlp_cases()]
    assert any(d_ff % chunk for _, d_ff, chunk in widths) and any(d_ff % chunk == 0 for _, d_ff, chunk in widths)
    assert all(d_ff != 4 * d for d, d_ff, _ in widths)
    assert any(X.dtype == torch.float64 for X, *_ in ch7._mlp_cases())


# ------------------------------------------------------------------------------- find the bug: run_block
def run_fixed(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        if block.norm == "post":
            stream = norm(stream + sublayer(stream))
        else:
            stream = stream + sublayer(norm(stream))
    return stream


def run_written_out(X, block):
    if block.norm == "pre":
        H = X + block.attn(block.ln_1(X))
        return H + block.mlp(block.ln_2(H))
    H = block.ln_1(X + block.attn(X))
    return block.ln_2(H + block.mlp(H))


def run_both_normed(X, block):
    """A rewrite that keeps the bug: the residual still adds to the normalised stream."""
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        if block.norm == "post":
            stream = norm(stream + sublayer(stream))
        else:
            stream = norm(stream) + sublayer(norm(stream))
    return stream


def run_pre_for_all(X, block):
    H = X + block.attn(block.ln_1(X))
    return H + block.mlp(block.ln_2(H))


def run_post_for_all(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        stream = norm(stream + sublayer(stream))
    return stream


def run_mlp_reads_X(X, block):
    if block.norm == "post":
        return run_fixed(X, block)
    return X + block.attn(block.ln_1(X)) + block.mlp(block.ln_2(X))


def run_no_residual(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        stream = norm(stream + sublayer(stream)) if block.norm == "post" else sublayer(norm(stream))
    return stream


def run_normed_output(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        stream = norm(stream + sublayer(stream)) if block.norm == "post" else stream + norm(sublayer(stream))
    return stream


def run_norms_swapped(X, block):
    stream = X
    for norm, sublayer in ((block.ln_2, block.attn), (block.ln_1, block.mlp)):
        stream = norm(stream + sublayer(stream)) if block.norm == "post" else stream + sublayer(norm(stream))
    return stream


def run_calls_block(X, block):
    return block(X)


def run_calls_forward(X, block):
    return block.forward(X)


def run_mutates_block(X, block):
    with torch.no_grad():
        for p in block.mlp.parameters():
            p.zero_()
    return X + block.attn(block.ln_1(X)) if block.norm == "pre" else run_fixed(X, block)


@pytest.mark.parametrize("fn", [run_fixed, run_written_out])
def test_run_block_solutions_are_accepted(fn):
    assert_accepted(check_run_block(fn))


@pytest.mark.parametrize("fn, label", [
    (run_block_as_given, "unchanged"), (run_both_normed, "unchanged"), (run_pre_for_all, "post-broken"),
    (run_post_for_all, "pre-as-post"), (run_mlp_reads_X, "mlp-reads-X"), (run_no_residual, "no-residual"),
    (run_normed_output, "normed-output"), (run_norms_swapped, "norms-swapped"),
    (run_calls_block, "called-block"), (run_calls_forward, "called-block"),
    (run_mutates_block, "in-place"), (stub, "stub"),
])
def test_run_block_mistakes_are_named(fn, label):
    named_by(check_run_block, fn, label)


def test_a_block_answer_that_mutates_the_block_changes_no_later_verdict():
    assert not check_run_block(run_mutates_block).ok
    assert_accepted(check_run_block(run_fixed))
    assert_named(check_run_block(run_block_as_given), "unchanged")


def test_run_block_tests_both_layouts():
    assert {b.norm for _, b in ch7._block_cases()} == {"pre", "post"}


def _function_body(source: str, name: str) -> str:
    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name)
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    if body and isinstance(body[0], ast.Raise):      # the stub's "delete this line" guard
        body = body[1:]
    return "\n".join(ast.dump(n) for n in body)


def test_the_notebooks_stub_is_the_function_the_checker_calls_as_given():
    nb = nbformat.read(BOOK / "07_block.ipynb", as_version=4)
    stub_cell = next(c.source for c in nb.cells if c.cell_type == "code" and "check_run_block(run_block)" in c.source
                     and "solution" not in c.metadata.get("tags", []))
    assert _function_body(stub_cell, "run_block") == _function_body(inspect.getsource(run_block_as_given),
                                                                     "run_block_as_given")


# ------------------------------------------------------------------------------- build: the parallel block
def parallel_ok(X, block):
    N = block.ln_1(X)
    return X + block.attn(N) + block.mlp(N)


def parallel_norm_twice(X, block):
    return X + block.attn(block.ln_1(X)) + block.mlp(block.ln_1(X))


def parallel_summed(X, block):
    N = F.layer_norm(X, X.shape[-1:], block.ln_1.weight, block.ln_1.bias, block.ln_1.eps)
    return torch.stack([X, block.attn(N), block.mlp(N)]).sum(0)


def parallel_sequential(X, block):
    return block(X)


def parallel_both_norms(X, block):
    return X + block.attn(block.ln_1(X)) + block.mlp(block.ln_2(X))


def parallel_residual_per_branch(X, block):
    N = block.ln_1(X)
    return (X + block.attn(N)) + (X + block.mlp(N))


def parallel_residual_from_copy(X, block):
    X = block.ln_1(X)
    return X + block.attn(X) + block.mlp(X)


def parallel_ln_2(X, block):
    N = block.ln_2(X)
    return X + block.attn(N) + block.mlp(N)


def parallel_in_place(X, block):
    N = block.ln_1(X)
    X += block.attn(N)
    return X + block.mlp(N)


@pytest.mark.parametrize("fn", [parallel_ok, parallel_norm_twice, parallel_summed, ch7._parallel_reference])
def test_parallel_block_solutions_are_accepted(fn):
    assert_accepted(check_parallel_block(fn))


@pytest.mark.parametrize("fn, label", [
    (parallel_sequential, "sequential"), (parallel_both_norms, "two-norms"),
    (parallel_residual_per_branch, "residual-twice"), (parallel_residual_from_copy, "normed-residual"),
    (parallel_ln_2, "ln_2"), (parallel_in_place, "in-place"),
    (stub, "stub"),
    # the classes written in other spellings than the table's
    (lambda X, b: torch.add(X, b.mlp(X.clone())).add(b.attn(b.ln_1(X))), "mlp-reads-X"),
    (lambda X, b: (lambda A: torch.stack([A, b.mlp(A)]).sum(0) + X)(b.attn(b.ln_1(X))), "mlp-reads-attention"),
    (lambda X, b: (lambda N: b.mlp(N) + b.attn.forward(N, causal=False) + X)(b.ln_1(X)), "not-causal"),
    (lambda X, b: X + torch.stack([b.attn(b.ln_1(X)), b.mlp(b.ln_1(X))]).mean(0), "averaged"),
    (lambda X, b: (lambda N: X + 0.5 * b.attn(N) + 0.5 * b.mlp(N))(b.ln_1(X)), "averaged"),
])
def test_parallel_block_mistakes_are_named(fn, label):
    named_by(check_parallel_block, fn, label)


def test_parallel_block_blames_a_mistake_only_when_it_matches_every_case():
    verdict = check_parallel_block(lambda X, block: parallel_sequential(X, block) if X.shape[0] == 2
                                   else parallel_ok(X, block))
    assert not verdict.ok and verdict.mistake == "values", verdict


def test_the_parallel_blocks_mlp_reads_no_other_position_and_the_sequential_ones_does():
    """Change one token: the parallel block's MLP term changes at that position only, the sequential block's F
    (which reads H = X + A) at the later positions too; and the two layouts differ on every case."""
    def mlp_terms(X, block):
        return block.mlp(block.ln_1(X)), block.mlp(block.ln_2(X + block.attn(block.ln_1(X))))

    with torch.no_grad():
        for X, block in ch7._block_cases("pre"):
            assert block.norm == "pre" and not _close(parallel_ok(X, block), block(X), 1e-3)
            X2 = X.clone()
            X2[:, -2] += torch.linspace(-1, 1, X.shape[-1])      # change the second-to-last token
            (par, seq), (par2, seq2) = mlp_terms(X, block), mlp_terms(X2, block)
            assert (par2 - par)[:, -1].abs().max() < 1e-6 < (seq2 - seq)[:, -1].abs().max()


# ------------------------------------------------------------------------------- predict: a block's FLOPs
T, D, H, D_FF = 10, 48, 4, 128          # the question: Block(48, h=4, d_ff=128, backend="plain") on 10 tokens
RIGHT = 2 * T * D * 3 * D + 2 * T * D * D + 4 * T * D * D_FF + 4 * T * T * D


def test_block_flops_prediction():
    assert_named(check_block_flops(...), "stub")
    v = check_block_flops(RIGHT)
    assert_accepted(v)
    assert "449,280" in v.message
    assert not check_block_flops(RIGHT + 2).ok
    assert_named(check_block_flops(100_000), "values", "too low")
    assert_named(check_block_flops(900_000), "values", "too high")
    assert_named(check_block_flops("449280"), "type")


def test_the_block_flops_are_measured_and_match_the_count():
    assert ch7._block_flops(**ch7._FLOPS_QUESTION) == RIGHT


@pytest.mark.parametrize("guess, label", [
    (RIGHT // 2, "multiply-adds"),
    (RIGHT - 4 * T * D * D_FF + 4 * T * D * 4 * D, "d_ff-assumed"),
    (RIGHT - 4 * T * T * D, "no-attention-products"),
    (RIGHT - 4 * T * T * D + 2 * T * (T + 1) * D, "causal-half"),
    (RIGHT - 4 * T * T * D + T * T * D, "one-head"),
    (RIGHT - 2 * T * D * D, "no-W_O"),
    (RIGHT - 4 * T * D * D, "one-projection"),
    (RIGHT - 2 * T * D * D_FF, "one-mlp-matrix"),
    (4 * T * D * D_FF, "mlp-only"),
    (RIGHT - 4 * T * D * D_FF, "attention-only"),
    (RIGHT // T, "one-token"),
    (RIGHT + T * (5 * D + D_FF), "elementwise-counted"),
])
def test_block_flops_guesses_are_named(guess, label):
    v = check_block_flops(guess)
    assert_named(v, label)
    assert_registered(check_block_flops, v)
    assert f"{guess:,}" in v.message


def test_every_flops_guess_says_too_high_or_too_low_and_no_formula():
    guesses = [m for m in check_block_flops.mistakes if hasattr(m, "value")][:len(ch7._flops_guesses(T, D, H, D_FF))]
    values = [g.value for g in guesses]
    assert len(set(values)) == len(values) and RIGHT not in values
    for g in guesses:
        assert ("too low" in g.hint) == (g.value < RIGHT) and ("too high" in g.hint) == (g.value > RIGHT), g
        assert "·" not in g.hint and "d_model ×" not in g.hint, g


# ------------------------------------------------------------------------------- extend: LayerNorm from RMSNorm
def from_rms_ok(X, gamma, beta):
    centred = X - X.mean(dim=-1, keepdim=True)
    return F.rms_norm(centred, X.shape[-1:], gamma, eps=1e-5) + beta


def from_rms_scaled_after(X, gamma, beta):
    centred = X - X.mean(-1, keepdim=True)
    return F.rms_norm(centred, (X.shape[-1],), eps=1e-5) * gamma + beta


def from_rms_default_eps(X, gamma, beta):
    centred = X - X.mean(dim=-1, keepdim=True)
    return F.rms_norm(centred, X.shape[-1:], gamma) + beta


def from_rms_not_centred(X, gamma, beta):
    return F.rms_norm(X, X.shape[-1:], gamma, eps=1e-5) + beta


def from_rms_no_beta(X, gamma, beta):
    return F.rms_norm(X - X.mean(-1, keepdim=True), X.shape[-1:], gamma, eps=1e-5)


def from_rms_no_gamma(X, gamma, beta):
    return F.rms_norm(X - X.mean(-1, keepdim=True), X.shape[-1:], eps=1e-5) + beta


def from_rms_centred_over_T(X, gamma, beta):
    return F.rms_norm(X - X.mean(-2, keepdim=True), X.shape[-1:], gamma, eps=1e-5) + beta


def from_rms_in_place(X, gamma, beta):
    X -= X.mean(dim=-1, keepdim=True)
    return F.rms_norm(X, X.shape[-1:], gamma, eps=1e-5) + beta


def from_rms_calls_layer_norm(X, gamma, beta):
    return F.layer_norm(X, X.shape[-1:], gamma, beta, 1e-5)


def from_rms_float32(X, gamma, beta):
    return from_rms_ok(X.float(), gamma.float(), beta.float())


@pytest.mark.parametrize("fn", [from_rms_ok, from_rms_scaled_after, ch7._from_rms_variant])
def test_layer_norm_from_rms_solutions_are_accepted(fn):
    assert_accepted(check_layer_norm_from_rms(fn))


@pytest.mark.parametrize("fn, label", [
    (from_rms_default_eps, "eps-default"), (from_rms_not_centred, "no-centering"), (from_rms_no_beta, "no-beta"),
    (from_rms_no_gamma, "no-gamma"), (from_rms_centred_over_T, "center-wrong-axis"),
    (from_rms_in_place, "in-place"), (from_rms_calls_layer_norm, "called-layer-norm"),
    (from_rms_float32, "dtype"), (stub, "stub"),
])
def test_layer_norm_from_rms_mistakes_are_named(fn, label):
    named_by(check_layer_norm_from_rms, fn, label)


# ---- the tables of mistakes, and the hints ---------------------------------------------------------------------

TABLES = [
    (check_mlp_in_chunks, ch7._CHUNK_TABLE, ch7._mlp_cases(), ch7._mlp),
    (check_run_block, ch7._RUN_MISTAKES, ch7._block_cases(), lambda X, b: b(X)),
    (check_parallel_block, ch7._PARALLEL_MISTAKES, ch7._block_cases("pre"), ch7._parallel_reference),
    (check_layer_norm_from_rms, ch7._RMS_TABLE, ch7._rms_cases(), ch7._layer_norm_same_dtype),
]


@pytest.mark.parametrize("check, mistakes, cases, reference", TABLES, ids=[t[0].__name__ for t in TABLES])
def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others(check, mistakes, cases,
                                                                                  reference):
    assert_each_mistake_named(check, mistakes, exact=False)
    assert all(m in check.mistakes for m in mistakes)
    def same(a, b) -> bool:
        if isinstance(a, Exception) or isinstance(b, Exception):
            return str(a) == str(b)
        return _close(a, b, 1e-5)

    def runs(f):
        outs = []
        for case in cases:
            try:
                outs.append(f(*_fresh(case)))
            except Exception as e:  # noqa: BLE001 - an error is an outcome like any other
                outs.append(e)
        return outs

    with torch.no_grad():
        outs = [runs(f) for f in [reference] + [m.wrong for m in mistakes]]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):      # every two differ on some case, so each can be named
            assert not all(same(a, b) for a, b in zip(outs[i], outs[j])), (i, j)


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_every_mistake_has_two_levels_and_the_second_is_asked_for(check):
    own = [m for m in check.mistakes if m.label not in ("stub", "none", "not-callable", "in-place",
                                                       "shared-parameters", "type")]
    assert own
    for m in own:
        assert m.more and m.more != m.hint, m.label


def test_hint_2_gives_the_second_level_without_the_pointer_to_it():
    v1, v2 = check_run_block(run_block_as_given), check_run_block(run_block_as_given, hint=2)
    assert v1.message.endswith(MORE) and not v2.message.endswith(MORE)
    assert "LN(X)" in v2.message and "LN(X)" not in v1.message
    v1, v2 = check_block_flops(RIGHT // 2), check_block_flops(RIGHT // 2, hint=2)
    assert "two FLOPs" in v2.message and "two FLOPs" not in v1.message


def test_a_result_on_another_device_is_named():
    """The learner's tensor created without saying where it lives (here: on the meta device, which every
    machine has) is told so, for the exercise that creates tensors of its own."""
    assert_named(check_mlp_in_chunks(lambda X, W_1, b_1, W_2, b_2, chunk: torch.zeros(
        X.shape, dtype=X.dtype, device="meta")), "device")


# ---- wrong answers written from the exercise statements (not from the tables) -----------------------------------
# Each list holds what a learner who read only the statement could write. None is accepted, none is blamed on a
# mistake it did not make (a label given here must be the verdict's), and at least 85 % get a specific verdict.
GENERIC = {"values", "shape", "type", "error", "length"}


def _chunks(X, W_1, b_1, W_2, b_2, chunk, *, slip=None):
    out = torch.zeros(X.shape) if slip == "zeros" else torch.zeros_like(X)
    d_ff = W_1.shape[1]
    stop = d_ff // chunk * chunk if slip == "tail" else d_ff
    hidden = gelu(X @ W_1 + b_1) if slip == "whole" else None
    for a in range(0, stop, chunk):
        h = hidden[..., a:a + chunk] if slip == "whole" else X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]
        act = torch.relu if slip == "relu" else (lambda t: t) if slip in ("late", "whole") else gelu
        out += act(h) @ W_2[a:a + chunk] + (b_2 if slip == "b_2" else 0)
    out = out if slip == "b_2" else out + b_2
    return gelu(out) if slip == "late" else out


def _loop(X, block, *, slip):
    stream = X
    pairs = ((block.ln_2, block.attn), (block.ln_1, block.mlp)) if slip == "norms" else \
        ((block.ln_1, block.attn), (block.ln_2, block.mlp))
    for norm, sublayer in pairs:
        if block.norm == "post" and slip != "pre-everywhere":
            stream = norm(stream + sublayer(stream))
        elif slip == "no-norm":
            stream = stream + sublayer(stream)
        elif slip == "roles":
            stream = norm(stream) + sublayer(stream)
        elif slip == "both-normed":
            stream = norm(stream) + sublayer(norm(stream))
        else:
            stream = stream + sublayer(norm(stream))
    return stream


def _from_rms(X, gamma, beta, *, eps=1e-5, swap=False, center=True, shape=1, after=False, axis=-1):
    g, b = (beta, gamma) if swap else (gamma, beta)
    if after:
        Y = F.rms_norm(X, X.shape[-1:], eps=eps)
        return (Y - Y.mean(-1, keepdim=True)) * g + b
    Xc = X - X.mean(axis, keepdim=True) if center else X
    if shape == 2:
        return F.rms_norm(Xc, X.shape[-2:], eps=eps) * g + b
    return F.rms_norm(Xc, X.shape[-1:], g, eps=eps) + b


WRITTEN = {
    check_mlp_in_chunks: [
        (functools.partial(_chunks, slip="whole"), None), (functools.partial(_chunks, slip="tail"), "tail-dropped"),
        (functools.partial(_chunks, slip="b_2"), "b_2-each-chunk"), (functools.partial(_chunks, slip="zeros"), None),
        (functools.partial(_chunks, slip="late"), "gelu-after-W_2"), (functools.partial(_chunks, slip="relu"), "relu"),
    ],
    check_run_block: [
        (functools.partial(_loop, slip="no-norm"), "no-norm"),
        (functools.partial(_loop, slip="norms"), "norms-swapped"),
        (functools.partial(_loop, slip="roles"), "roles-swapped"),
        (functools.partial(_loop, slip="both-normed"), "unchanged"),
        (functools.partial(_loop, slip="pre-everywhere"), "post-broken"),
        (lambda X, block: block(X).clone(), "called-block"),
    ],
    check_layer_norm_from_rms: [
        (functools.partial(_from_rms, eps=1e-6), "eps-value"), (functools.partial(_from_rms, swap=True),
                                                               "gamma-beta-swapped"),
        (functools.partial(_from_rms, center=False), "no-centering"),
        (lambda X, g, b: F.rms_norm(X - X.mean(-1, keepdim=True), X.shape[-1:], g) + b, "eps-default"),
        (functools.partial(_from_rms, after=True), "centred-after"),
        (functools.partial(_from_rms, shape=2), "rms-wrong-axes"),
        (functools.partial(_from_rms, axis=-2), "center-wrong-axis"),
    ],
    check_block_flops: [(RIGHT // 2, "multiply-adds"), (RIGHT - 4 * T * D * D_FF + 16 * T * D * D, "d_ff-assumed"),
                        (RIGHT - 4 * T * T * D, "no-attention-products"), (RIGHT - 2 * T * D * D, "no-W_O"),
                        (RIGHT - 3 * T * T * D, "one-head"), (4 * T * D * D_FF, "mlp-only")],
}


@pytest.mark.parametrize("check", list(WRITTEN), ids=[c.__name__ for c in WRITTEN])
def test_wrong_answers_written_from_the_statements_are_rejected_and_named(check):
    answers = WRITTEN[check]
    assert len(answers) >= 5
    verdicts = [(check(fn), label) for fn, label in answers]
    for v, label in verdicts:
        assert not v.ok, v
        assert label is None or v.mistake == label, (label, v)
    assert sum(v.mistake not in GENERIC for v, _ in verdicts) >= 0.85 * len(verdicts), verdicts


# ---- the slips of issue 35: named by class ----------------------------------------------------------------------

@pytest.mark.parametrize("check, fn, label", [
    (check_mlp_in_chunks, lambda X, W_1, b_1, W_2, b_2, chunk: sum(
        gelu(X @ W_1[:, a:a + chunk]) @ W_2[a:a + chunk] for a in range(0, W_1.shape[1], chunk)) + b_2, "no-b_1"),
    (check_run_block, lambda X, block: _loop(X, block, slip=None) if block.norm == "post" else block.ln_2(
        _loop(X, block, slip=None)), "final-norm"),
    (check_layer_norm_from_rms, lambda X, g, b: g * F.rms_norm(X - X.mean(-1, keepdim=True), X.shape[-1:], g,
                                                               eps=1e-5) + b, "gamma-twice"),
    (check_layer_norm_from_rms, functools.partial(_from_rms, axis=0), "center-wrong-axis"),
    (check_layer_norm_from_rms, lambda X, g, b: F.rms_norm(X - X.mean(-1, keepdim=True), X.shape[1:], eps=1e-5) * g
     + b, "rms-wrong-axes"),
    (check_block_flops, RIGHT - 2 * T * T * D, "causal-half"), (check_block_flops, RIGHT + 3 * 4 * T * T * D,
                                                                "d_model-per-head"),
])
def test_slips_written_from_the_statements_are_named_by_class(check, fn, label):
    assert_named(check(fn), label)


def test_one_layernorm_for_both_sublayers_is_named():
    def one_norm(X, block):
        stream = X
        for sublayer in (block.attn, block.mlp):
            stream = block.ln_1(stream + sublayer(stream)) if block.norm == "post" else \
                stream + sublayer(block.ln_1(stream))
        return stream if block.norm == "pre" else _loop(X, block, slip=None)
    assert_named(check_run_block(one_norm), "ln_1-for-mlp")


# ---- layouts written wrongly: the verdict names the lines the output matches -------------------------------------

def run_post_normed_outputs(X, block):
    """Post-Norm "fixed" too: the LayerNorm moved onto each sublayer's output."""
    if block.norm == "pre":
        return run_written_out(X, block)
    H = X + block.ln_1(block.attn(X))
    return H + block.ln_2(block.mlp(H))


def run_pre_normed_twice(X, block):
    """Pre-Norm with the LayerNorm also applied after each sum."""
    if block.norm == "post":
        return run_written_out(X, block)
    H = block.ln_1(X + block.attn(block.ln_1(X)))
    return block.ln_2(H + block.mlp(block.ln_2(H)))


def run_mlp_added_to_X(X, block):
    """The MLP reads the stream H, but its output is added to the block's input X: attention's output is lost."""
    if block.norm == "post":
        return run_fixed(X, block)
    H = X + block.attn(block.ln_1(X))
    return block.mlp(block.ln_2(H)) + X


@pytest.mark.parametrize("fn, says", [
    (run_post_normed_outputs, "your Post-Norm blocks come out as if both lines had the LayerNorm on the sublayer's "
                              "output"),
    (run_pre_normed_twice, "your Pre-Norm blocks come out as if both lines had a LayerNorm before the sublayer and "
                           "one after the sum"),
    (run_mlp_added_to_X, "your Pre-Norm blocks come out as if the MLP's line had the output added to the block's "
                         "input X"),
    (lambda X, block: run_pre_normed_twice(X, block) if block.norm == "pre" else run_post_normed_outputs(X, block),
     "your Pre-Norm blocks come out as if both lines had a LayerNorm before the sublayer and one after the sum; "
     "your Post-Norm blocks"),
])
def test_a_layout_written_wrongly_is_named_by_the_lines_it_matches(fn, says):
    v = check_run_block(fn)
    assert_named(v, "layout")
    assert v.message.startswith(says), v
    assert v.hint(2).message.startswith(says) and "Pre-Norm normalises" in v.hint(2).message
    assert "smallest test case" in v.hint(3).message


def test_a_layout_matching_no_pair_of_lines_is_not_named():
    """Half of the MLP's output: no line of either layout gives it, so the verdict stays 'values'."""
    def half_mlp(X, block):
        if block.norm == "post":
            return run_fixed(X, block)
        H = X + block.attn(block.ln_1(X))
        return H + 0.5 * block.mlp(block.ln_2(H))
    assert check_run_block(half_mlp).mistake == "values"


def test_beta_added_before_the_scale_is_named():
    def shift_then_scale(X, gamma, beta):
        centred = X - X.mean(-1, keepdim=True)
        return gamma * (F.rms_norm(centred, (X.shape[-1],), eps=1e-5) + beta)
    assert_named(check_layer_norm_from_rms(shift_then_scale), "beta-first")
    assert_named(check_layer_norm_from_rms(lambda X, g, b: F.rms_norm(X - X.mean(-1, keepdim=True), X.shape[-1:],
                                                                      eps=1e-5).add(b).mul(g)), "beta-first")
