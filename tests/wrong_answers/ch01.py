"""Wrong answers to the exercises of chapter 1 (embeddings and position), written from the exercise texts."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import attnlib
from wrong_answers import collect, wrong

# --- ex-01-lookup-grad ------------------------------------------------------------------------------------------


@wrong("ex-01-lookup-grad", "check_lookup_grad",
       "assigns dX to the rows: a repeated token keeps only its last position", "overwrite")
def lookup_grad_assign(ids, dX, vocab_size):
    grad = torch.zeros(vocab_size, dX.shape[-1], dtype=dX.dtype, device=dX.device)
    grad[ids] = dX
    return grad


@wrong("ex-01-lookup-grad", "check_lookup_grad",
       "scatter_ instead of scatter_add_: repeated tokens overwrite each other", "overwrite")
def lookup_grad_scatter(ids, dX, vocab_size):
    d = dX.shape[-1]
    flat_ids = ids.reshape(-1)
    rows = dX.reshape(-1, d)
    grad = torch.zeros(vocab_size, d, dtype=dX.dtype, device=dX.device)
    return grad.scatter_(0, flat_ids[:, None].expand(-1, d), rows)


@wrong("ex-01-lookup-grad", "check_lookup_grad",
       "F.one_hot without num_classes: only as many rows as the largest id + 1", "rows-from-ids")
def lookup_grad_one_hot_no_classes(ids, dX, vocab_size):
    d = dX.shape[-1]
    one_hot = F.one_hot(ids.reshape(-1)).to(dX.dtype)       # (N, max_id + 1)
    return one_hot.T @ dX.reshape(-1, d)


@wrong("ex-01-lookup-grad", "check_lookup_grad",
       "one-hot product per sequence, never summed over the batch", "per-sentence")
def lookup_grad_batch_not_summed(ids, dX, vocab_size):
    one_hot = F.one_hot(ids, vocab_size).to(dX.dtype)       # (..., T, V)
    return one_hot.transpose(-2, -1) @ dX                   # (..., V, d)


@wrong("ex-01-lookup-grad", "check_lookup_grad", "averages the gradient over the positions of a repeated token", "mean")
def lookup_grad_mean_of_repeats(ids, dX, vocab_size):
    d = dX.shape[-1]
    flat = ids.reshape(-1)
    grad = torch.zeros(vocab_size, d, dtype=dX.dtype, device=dX.device)
    grad.index_add_(0, flat, dX.reshape(-1, d))
    counts = torch.bincount(flat, minlength=vocab_size).clamp(min=1)
    return grad / counts[:, None].to(dX.dtype)


@wrong("ex-01-lookup-grad", "check_lookup_grad", "autograd through a float32 table: E.grad comes back float32", "dtype")
def lookup_grad_autograd_float32(ids, dX, vocab_size):
    E = torch.zeros(vocab_size, dX.shape[-1], device=dX.device, requires_grad=True)
    X = E[ids]
    (X * dX).sum().backward()
    return E.grad


@wrong("ex-01-lookup-grad", "check_lookup_grad",
       "one-hot product computed in float32, then cast back to dX's dtype", "precision")
def lookup_grad_float32_round_trip(ids, dX, vocab_size):
    d = dX.shape[-1]
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).float()
    return (one_hot.T @ dX.reshape(-1, d).float()).to(dX.dtype)


@wrong("ex-01-lookup-grad", "check_lookup_grad",
       "product written the other way round: (d_model, vocab_size)", "transposed")
def lookup_grad_transposed(ids, dX, vocab_size):
    d = dX.shape[-1]
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).to(dX.dtype)
    return dX.reshape(-1, d).T @ one_hot


@wrong("ex-01-lookup-grad", "check_lookup_grad", "a batch summed first, with the ids of its first sequence only")
def lookup_grad_first_sequence_ids(ids, dX, vocab_size):
    if ids.dim() == 2:
        dX, ids = dX.sum(0), ids[0]
    grad = torch.zeros(vocab_size, dX.shape[-1], dtype=dX.dtype, device=dX.device)
    for t in range(len(ids)):
        grad[ids[t]] += dX[t]
    return grad


# --- ex-01-shift-matrix -----------------------------------------------------------------------------------------


def _blocks(k, d_model, block, exponent=lambda f, d: -2 * f / d, base=10000.0, dtype=torch.float32):
    # helper in the learner's style: one 2 × 2 block per frequency pair on the diagonal
    R = torch.zeros(d_model, d_model, dtype=dtype)
    for f in range(d_model // 2):
        a = k * base ** exponent(f, d_model)
        R[2 * f:2 * f + 2, 2 * f:2 * f + 2] = torch.tensor(block(a), dtype=dtype)
    return R


@wrong("ex-01-shift-matrix", "check_shift_matrix",
       "the rotation for column vectors: PE[t] @ R gives PE[t − k]", "backwards")
def shift_matrix_transposed(k, d_model):
    return _blocks(k, d_model, lambda a: [[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])


@wrong("ex-01-shift-matrix", "check_shift_matrix", "frequency 10000^(−f/d_model): the 2 of 2f forgotten", "exponent-f")
def shift_matrix_no_two(k, d_model):
    return _blocks(k, d_model, lambda a: [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                   exponent=lambda f, d: -f / d)


@wrong("ex-01-shift-matrix", "check_shift_matrix", "angle ω_f instead of k·ω_f: always the shift by one", "one-step")
def shift_matrix_no_k(k, d_model):
    return _blocks(1, d_model, lambda a: [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])


@wrong("ex-01-shift-matrix", "check_shift_matrix", "built in float64 and returned in float64", "dtype")
def shift_matrix_float64(k, d_model):
    f = torch.arange(d_model // 2, dtype=torch.float64)
    angle = k * 10000.0 ** (-2 * f / d_model)
    c, s = angle.cos(), angle.sin()
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    R[idx, idx] = c
    R[idx + 1, idx + 1] = c
    R[idx, idx + 1] = -s
    R[idx + 1, idx] = s
    return R


@wrong("ex-01-shift-matrix", "check_shift_matrix",
       "pairs column f with column f + d_model/2, the halves layout", "halves")
def shift_matrix_halves(k, d_model):
    angle = k * 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    c, s = torch.diag(angle.cos()), torch.diag(angle.sin())      # (d_model/2, d_model/2)
    return torch.cat([torch.cat([c, -s], 1), torch.cat([s, c], 1)], 0)


@wrong("ex-01-shift-matrix", "check_shift_matrix", "base 1000 instead of 10000", "wrong-angles")
def shift_matrix_base_1000(k, d_model):
    return _blocks(k, d_model, lambda a: [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], base=1000.0)


@wrong("ex-01-shift-matrix", "check_shift_matrix", "both sines positive: not a rotation", "no-minus")
def shift_matrix_both_sines_positive(k, d_model):
    return _blocks(k, d_model, lambda a: [[math.cos(a), math.sin(a)], [math.sin(a), math.cos(a)]])


@wrong("ex-01-shift-matrix", "check_shift_matrix",
       "half done: cosines on the diagonal, the sine terms left out", "diagonal")
def shift_matrix_only_cos(k, d_model):
    angle = k * 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    return torch.diag(angle.cos().repeat_interleave(2))


@wrong("ex-01-shift-matrix", "check_shift_matrix",
       "exponent +2f/d_model: frequencies grow instead of shrink", "wrong-angles")
def shift_matrix_positive_exponent(k, d_model):
    return _blocks(k, d_model, lambda a: [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                   exponent=lambda f, d: 2 * f / d)


# --- ex-01-rope-halves ------------------------------------------------------------------------------------------


def _cos_sin(x, theta):
    return theta.cos().to(x.dtype), theta.sin().to(x.dtype)


@wrong("ex-01-rope-halves", "check_rotate_halves",
       "the two rotated halves put back in the wrong order", "halves-swapped")
def rotate_halves_swapped(x, theta):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    cos, sin = _cos_sin(x, theta)
    return torch.cat([x1 * sin + x2 * cos, x1 * cos - x2 * sin], dim=-1)


@wrong("ex-01-rope-halves", "check_rotate_halves",
       "rotates the other way: the minus sign on the wrong term", "wrong-direction")
def rotate_halves_backwards(x, theta):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    cos, sin = _cos_sin(x, theta)
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=-1)


@wrong("ex-01-rope-halves", "check_rotate_halves", "pairs neighbours (2f, 2f+1) as apply_rope does", "neighbours")
def rotate_halves_interleaved(x, theta):
    cos, sin = _cos_sin(x, theta)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


@wrong("ex-01-rope-halves", "check_rotate_halves",
       "cos and sin of the float64 theta not cast: the result is float64", "angles-dtype")
def rotate_halves_no_cast(x, theta):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    cos, sin = theta.cos(), theta.sin()
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


@wrong("ex-01-rope-halves", "check_rotate_halves", "cos and sin cast to float32 even for a float64 x", "precision")
def rotate_halves_float32_angles(x, theta):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    cos, sin = theta.float().cos(), theta.float().sin()
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


@wrong("ex-01-rope-halves", "check_rotate_halves",
       "writes the rotated halves back into x: the caller's x changes", "in-place")
def rotate_halves_in_place(x, theta):
    h = x.shape[-1] // 2
    cos, sin = _cos_sin(x, theta)
    x1, x2 = x[..., :h].clone(), x[..., h:].clone()
    x[..., :h] = x1 * cos - x2 * sin
    x[..., h:] = x1 * sin + x2 * cos
    return x


@wrong("ex-01-rope-halves", "check_rotate_halves", "rotate_half without its minus sign: cat(x2, x1)", "no-minus")
def rotate_halves_rotate_half_no_minus(x, theta):
    h = x.shape[-1] // 2
    cos, sin = _cos_sin(x, torch.cat([theta, theta], dim=-1))
    rotated = torch.cat([x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rotated * sin


@wrong("ex-01-rope-halves", "check_rotate_halves",
       "angles repeated pairwise (repeat_interleave) with the halves split", "interleaved-angles")
def rotate_halves_interleaved_angles(x, theta):
    h = x.shape[-1] // 2
    cos, sin = _cos_sin(x, theta.repeat_interleave(2, dim=-1))
    rotated = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rotated * sin


@wrong("ex-01-rope-halves", "check_rotate_halves",
       "angles of row t read from column t: theta transposed", "other-angles")
def rotate_halves_theta_transposed(x, theta):
    T, d = x.shape[-2:]
    h = d // 2
    angles = theta.reshape(h, T).T                     # "theta is (d/2, T)"
    cos, sin = _cos_sin(x, angles)
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


# --- ex-01-positions-bug ----------------------------------------------------------------------------------------


@wrong("ex-01-positions-bug", "check_embed_with_positions",
       "rewritten, same bug: positions count on across the batch", "unchanged")
def embed_positions_still_counting(ids, E, PE):
    n = 1
    for s in ids.shape:
        n *= s
    positions = torch.arange(n, device=ids.device).reshape(*ids.shape)
    return E[ids] + PE[positions]


@wrong("ex-01-positions-bug", "check_embed_with_positions",
       "T read as ids.shape[0], the batch size for a batch", "first-axis")
def embed_positions_first_axis(ids, E, PE):
    T = ids.shape[0]
    return E[ids] + PE[:T]


@wrong("ex-01-positions-bug", "check_embed_with_positions",
       "positions taken modulo the first axis (B for a batch)", "first-axis")
def embed_positions_modulo_wrong_axis(ids, E, PE):
    positions = torch.arange(ids.numel(), device=ids.device).view(ids.shape) % ids.shape[0]
    return E[ids] + PE[positions]


@wrong("ex-01-positions-bug", "check_embed_with_positions", "token ids used as positions: PE[ids]", "by-id")
def embed_positions_by_token(ids, E, PE):
    return E[ids] + PE[ids]


@wrong("ex-01-positions-bug", "check_embed_with_positions", "positions counted from 1", "from-one")
def embed_positions_from_one(ids, E, PE):
    positions = torch.arange(1, ids.shape[-1] + 1, device=ids.device)
    return E[ids] + PE[positions]


@wrong("ex-01-positions-bug", "check_embed_with_positions",
       "ignores the given PE: a fresh float32 sinusoidal table", "own-table")
def embed_positions_own_table(ids, E, PE):
    T = ids.shape[-1]
    return E[ids] + attnlib.sinusoidal_positions(T, E.shape[-1]).to(E.device)


@wrong("ex-01-positions-bug", "check_embed_with_positions",
       "T read as ids.shape[1]: a single sentence fails", "second-axis")
def embed_positions_second_axis(ids, E, PE):
    positions = torch.arange(ids.shape[1], device=ids.device)
    return E[ids] + PE[positions]


@wrong("ex-01-positions-bug", "check_embed_with_positions", "positions reversed: T − 1 down to 0",
       "reversed-positions")
def embed_positions_reversed(ids, E, PE):
    T = ids.shape[-1]
    return E[ids] + PE[:T].flip(0)


WRONG = collect(globals())
