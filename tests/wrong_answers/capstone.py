"""Wrong answers to the exercises of the capstone (reading a GPT), written from the exercise texts."""

from __future__ import annotations

import math

import torch

from wrong_answers import Wrong, collect, wrong

# --- ex-capstone-sublayer ---------------------------------------------------------------------------------------
# buggy_sublayer's four bugs: K, V from X (not LN₁(X)); softmax over the queries (dim=-2); the mask applied after
# softmax as a 0 fill; P @ K. Each answer below fixes some of them, or fixes one in a wrong way.


def _future(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "three fixed, K and V still made from X, not LN₁(X)",
       "q1-kv-from-x")
def sublayer_kv_from_X(X, ln_1, W_Q, W_K, W_V):
    Q = ln_1(X) @ W_Q
    K, V = X @ W_K, X @ W_V
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    Z = Z.masked_fill(_future(Z.shape[-1]), float("-inf"))
    return torch.softmax(Z, dim=-1) @ V


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "three fixed, softmax still over the queries (dim=-2)",
       "q2-softmax-axis")
def sublayer_softmax_dim_2(X, ln_1, W_Q, W_K, W_V):
    Xn = ln_1(X)
    Q, K, V = Xn @ W_Q, Xn @ W_K, Xn @ W_V
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    Z = Z.masked_fill(_future(Z.shape[-1]), float("-inf"))
    return torch.softmax(Z, dim=-2) @ V


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "three fixed, mask still a 0 fill after softmax",
       "q3-mask-after-softmax")
def sublayer_mask_after(X, ln_1, W_Q, W_K, W_V):
    Xn = ln_1(X)
    Q, K, V = Xn @ W_Q, Xn @ W_K, Xn @ W_V
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z, dim=-1).masked_fill(_future(Z.shape[-1]), 0.0)
    return P @ V


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "three fixed, still multiplies the weights by K",
       "q4-weights-times-K")
def sublayer_times_K(X, ln_1, W_Q, W_K, W_V):
    Xn = ln_1(X)
    Q, K = Xn @ W_Q, Xn @ W_K
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    Z = Z.masked_fill(_future(Z.shape[-1]), float("-inf"))
    return torch.softmax(Z, dim=-1) @ K


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "mask moved before softmax but with triu(0): the diagonal too",
       "q3-mask-diagonal")
def sublayer_mask_diagonal(X, ln_1, W_Q, W_K, W_V):
    Xn = ln_1(X)
    Q, K, V = Xn @ W_Q, Xn @ W_K, Xn @ W_V
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    T = Z.shape[-1]
    Z = Z.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(0), float("-inf"))
    return torch.softmax(Z, dim=-1) @ V


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "mask built with tril: blocks the past instead of the future",
       "q3-mask-past")
def sublayer_mask_tril(X, ln_1, W_Q, W_K, W_V):
    Xn = ln_1(X)
    Q, K, V = Xn @ W_Q, Xn @ W_K, Xn @ W_V
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    T = Z.shape[-1]
    Z = Z.masked_fill(torch.ones(T, T, dtype=torch.bool).tril(-1), float("-inf"))
    return torch.softmax(Z, dim=-1) @ V


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "all four fixed, but scaled by √d_model (X's width)",
       "scale-d-model")
def sublayer_sqrt_d_model(X, ln_1, W_Q, W_K, W_V):
    Xn = ln_1(X)
    Q, K, V = Xn @ W_Q, Xn @ W_K, Xn @ W_V
    Z = Q @ K.transpose(-2, -1) / math.sqrt(X.shape[-1])
    Z = Z.masked_fill(_future(Z.shape[-1]), float("-inf"))
    return torch.softmax(Z, dim=-1) @ V


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "question 2 'fixed' by transposing P before P @ V",
       "q2-transposed-weights")
def sublayer_P_transposed(X, ln_1, W_Q, W_K, W_V):
    Xn = ln_1(X)
    Q, K, V = Xn @ W_Q, Xn @ W_K, Xn @ W_V
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    Z = Z.masked_fill(_future(Z.shape[-1]), float("-inf"))
    P = torch.softmax(Z, dim=-2)
    return P.transpose(-2, -1) @ V


@wrong("ex-capstone-sublayer", "check_fixed_sublayer", "Q, K and V all from X: LN₁ dropped altogether",
       "q1-all-from-x")
def sublayer_no_ln(X, ln_1, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    Z = Z + torch.full(Z.shape[-2:], float("-inf"), dtype=Z.dtype).triu(1)
    return torch.softmax(Z, dim=-1) @ V


# --- ex-capstone-hook-weights -----------------------------------------------------------------------------------


@wrong("ex-capstone-hook-weights", "check_block_weights", "blocks counted from 0: model.transformer.h[l]", "next-block")
def weights_block_l_zero_based(model, ids, l):
    caught = {}
    handle = model.transformer.h[l].attn.register_forward_hook(
        lambda mod, inp, out: caught.update(P=out[1]))
    with torch.no_grad():
        model(ids)
    handle.remove()
    return caught["P"]


@wrong("ex-capstone-hook-weights", "check_block_weights", "never removes the hook", "hook-left")
def weights_hook_left_on(model, ids, l):
    caught = []
    model.transformer.h[l - 1].attn.register_forward_hook(lambda mod, inp, out: caught.append(out[1]))
    with torch.no_grad():
        model(ids)
    return caught[-1]


@wrong("ex-capstone-hook-weights", "check_block_weights", "returns the attention's output, out[0], not the weights",
       "attention-output")
def weights_output_not_weights(model, ids, l):
    caught = []
    handle = model.transformer.h[l - 1].attn.register_forward_hook(lambda mod, inp, out: caught.append(out[0]))
    with torch.no_grad():
        model(ids)
    handle.remove()
    return caught[0]


@wrong("ex-capstone-hook-weights", "check_block_weights", "applies softmax again to what the hook caught",
       "softmax-again")
def weights_softmax_twice(model, ids, l):
    caught = []
    handle = model.transformer.h[l - 1].attn.register_forward_hook(lambda mod, inp, out: caught.append(out[1]))
    with torch.no_grad():
        model(ids)
    handle.remove()
    return torch.softmax(caught[0], dim=-1)


@wrong("ex-capstone-hook-weights", "check_block_weights", "averages the heads: (B, T, T) instead of (B, h, T, T)",
       "mean-over-heads")
def weights_mean_over_heads(model, ids, l):
    caught = []
    handle = model.transformer.h[l - 1].attn.register_forward_hook(lambda mod, inp, out: caught.append(out[1]))
    with torch.no_grad():
        model(ids)
    handle.remove()
    return caught[0].mean(dim=1)


@wrong("ex-capstone-hook-weights", "check_block_weights", "recomputes P from the caught Q and K, without the mask",
       "no-mask")
def weights_recomputed_unmasked(model, ids, l):
    caught = []
    attn = model.transformer.h[l - 1].attn
    handle = attn.c_attn.register_forward_hook(lambda mod, inp, out: caught.append(out))
    with torch.no_grad():
        model(ids)
    handle.remove()
    B, T, _ = caught[0].shape
    h = model.config.n_head
    q, k, _v = caught[0].split(model.config.n_embd, dim=-1)
    q, k = (t.view(B, T, h, -1).transpose(1, 2) for t in (q, k))
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)


@wrong("ex-capstone-hook-weights", "check_block_weights", "hooks the block, not its attention: catches hidden states",
       "block-output")
def weights_hook_on_block(model, ids, l):
    caught = []
    handle = model.transformer.h[l - 1].register_forward_hook(lambda mod, inp, out: caught.append(out))
    with torch.no_grad():
        model(ids)
    handle.remove()
    out = caught[0]
    return out[0] if isinstance(out, tuple) else out


@wrong("ex-capstone-hook-weights", "check_block_weights", "transposed the caught table, thinking columns are queries",
       "keys-on-rows")
def weights_transposed(model, ids, l):
    caught = []
    handle = model.transformer.h[l - 1].attn.register_forward_hook(lambda mod, inp, out: caught.append(out[1]))
    with torch.no_grad():
        model(ids)
    handle.remove()
    return caught[0].transpose(-2, -1)


@wrong("ex-capstone-hook-weights", "check_block_weights", "the same list for every block: returns the first caught",
       "first-block")
def weights_hook_every_block(model, ids, l):
    caught = []
    handles = [b.attn.register_forward_hook(lambda mod, inp, out: caught.append(out[1]))
               for b in model.transformer.h]
    with torch.no_grad():
        model(ids)
    for hd in handles:
        hd.remove()
    return caught[0]


# --- ex-capstone-hook-qkv ---------------------------------------------------------------------------------------


def _catch_c_attn(model, ids, l):
    caught = []
    handle = model.transformer.h[l - 1].attn.c_attn.register_forward_hook(
        lambda mod, inp, out: caught.append(out))
    with torch.no_grad():
        model(ids)
    handle.remove()
    return caught[0]


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "split into heads with view(B, h, T, d_head), no transpose",
       "no-transpose")
def qkv_view_no_transpose(model, ids, l):
    qkv = _catch_c_attn(model, ids, l)
    B, T, _ = qkv.shape
    h = model.config.n_head
    return tuple(t.reshape(B, h, T, -1) for t in qkv.split(model.config.n_embd, dim=-1))


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "heads split but not moved: (B, T, h, d_head)",
       "heads-not-moved")
def qkv_no_transpose(model, ids, l):
    qkv = _catch_c_attn(model, ids, l)
    B, T, _ = qkv.shape
    h = model.config.n_head
    return tuple(t.view(B, T, h, -1) for t in qkv.split(model.config.n_embd, dim=-1))


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "columns taken interleaved: q, k, v = every third column",
       "split-interleaved")
def qkv_interleaved(model, ids, l):
    qkv = _catch_c_attn(model, ids, l)
    B, T, _ = qkv.shape
    h = model.config.n_head
    q, k, v = qkv[..., 0::3], qkv[..., 1::3], qkv[..., 2::3]
    return tuple(t.reshape(B, T, h, -1).transpose(1, 2) for t in (q, k, v))


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "head columns split as (d_head, h) instead of (h, d_head)",
       "head-columns-order")
def qkv_heads_last(model, ids, l):
    qkv = _catch_c_attn(model, ids, l)
    B, T, _ = qkv.shape
    h = model.config.n_head
    return tuple(t.view(B, T, -1, h).permute(0, 3, 1, 2) for t in qkv.chunk(3, dim=-1))


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "blocks counted from 0: h[l]", "next-block")
def qkv_zero_based(model, ids, l):
    qkv = _catch_c_attn(model, ids, l + 1)                 # h[l]
    B, T, _ = qkv.shape
    h = model.config.n_head
    return tuple(t.view(B, T, h, -1).transpose(1, 2) for t in qkv.split(model.config.n_embd, dim=-1))


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "never removes the hook", "hook-left")
def qkv_hook_left_on(model, ids, l):
    caught = []
    model.transformer.h[l - 1].attn.c_attn.register_forward_hook(lambda mod, inp, out: caught.append(out))
    with torch.no_grad():
        model(ids)
    qkv = caught[-1]
    B, T, _ = qkv.shape
    h = model.config.n_head
    return tuple(t.view(B, T, h, -1).transpose(1, 2) for t in qkv.split(model.config.n_embd, dim=-1))


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "Q scaled by 1/√d_head: thought the core receives it scaled",
       "q-scaled")
def qkv_q_scaled(model, ids, l):
    qkv = _catch_c_attn(model, ids, l)
    B, T, _ = qkv.shape
    h = model.config.n_head
    q, k, v = (t.view(B, T, h, -1).transpose(1, 2) for t in qkv.split(model.config.n_embd, dim=-1))
    return q / math.sqrt(q.shape[-1]), k, v


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "returned in the order K, Q, V", "q-k-swapped")
def qkv_order_kqv(model, ids, l):
    qkv = _catch_c_attn(model, ids, l)
    B, T, _ = qkv.shape
    h = model.config.n_head
    q, k, v = (t.view(B, T, h, -1).transpose(1, 2) for t in qkv.split(model.config.n_embd, dim=-1))
    return k, q, v


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "hooked the block's input and projected it without LN₁",
       "no-ln_1")
def qkv_without_ln(model, ids, l):
    caught = []
    block = model.transformer.h[l - 1]
    handle = block.register_forward_pre_hook(lambda mod, args: caught.append(args[0]))
    with torch.no_grad():
        model(ids)
        handle.remove()
        qkv = block.attn.c_attn(caught[0])
    B, T, _ = qkv.shape
    h = model.config.n_head
    return tuple(t.view(B, T, h, -1).transpose(1, 2) for t in qkv.split(model.config.n_embd, dim=-1))


@wrong("ex-capstone-hook-qkv", "check_qkv_per_head", "projected LN₁'s output with the Conv1D weight but no bias",
       "no-bias")
def qkv_no_bias(model, ids, l):
    caught = []
    block = model.transformer.h[l - 1]
    handle = block.ln_1.register_forward_hook(lambda mod, inp, out: caught.append(out))
    with torch.no_grad():
        model(ids)
        handle.remove()
        qkv = caught[0] @ block.attn.c_attn.weight
    B, T, _ = qkv.shape
    h = model.config.n_head
    return tuple(t.view(B, T, h, -1).transpose(1, 2) for t in qkv.split(model.config.n_embd, dim=-1))


# --- ex-capstone-gpt2-lines -------------------------------------------------------------------------------------
L1 = "query_states, key_states, value_states = self.c_attn(hidden_states).split(self.split_size, dim=2)"
L2 = "attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling"
L3 = "attn_weights = attn_weights + attention_mask"
L4 = "attn_output = torch.matmul(attn_weights, value)"


def _lines(**change):
    d = {1: L1, 2: L2, 3: L3, 4: L4}
    d.update({int(k[1:]): v for k, v in change.items()})
    return d


lines_ln_1 = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                   _lines(q1="hidden_states = self.ln_1(hidden_states)"),
                   "question 1: quoted LN₁'s line in the block, not where Q, K, V are assigned",
    frozenset({"q1-ln_1"}))
lines_cross = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                    _lines(q1="key_states, value_states = self.c_attn(encoder_hidden_states)"
                              ".split(self.split_size, dim=2)"),
                    "question 1: quoted the cross-attention branch's line (K and V only, from the encoder)",
    frozenset({"never-runs"}))
lines_q_view = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                     _lines(q1="query_states = query_states.view(shape_q).transpose(1, 2)"),
                     "question 1: quoted the head split of Q (Q only, not where Q, K, V come from)",
    frozenset({"q1-part-of-qkv"}))
lines_softmax = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                      _lines(q2="attn_weights = nn.functional.softmax(attn_weights, dim=-1)"),
                      "question 2: quoted the softmax line (its axis) instead of the score table",
    frozenset({"q2-weights"}))
lines_transpose_out = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                            _lines(q2="attn_output = attn_output.transpose(1, 2)"),
                            "question 2: quoted the transpose of the output",
    frozenset({"q2-other"}))
lines_mask_if = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                      _lines(q3="if attention_mask is not None:"),
                      "question 3: quoted the if above the addition",
    frozenset({"not-a-statement"}))
lines_mask_made = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                        _lines(q3="return kv_idx <= q_idx"),
                        "question 3: quoted the mask's rule (causal_mask_function), not where it is added",
    frozenset({"q3-mask"}))
lines_mask_where = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                         _lines(q3="mask = torch.where(mask, torch.zeros((), device=mask.device, dtype=dtype), "
                                   "min_dtype)"),
                         "question 3: quoted where eager_mask turns the booleans into 0 and the lowest float",
    frozenset({"q3-mask"}))
lines_c_proj = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                     _lines(q4="attn_output = self.c_proj(attn_output)"),
                     "question 4: quoted the output projection W_O",
    frozenset({"q4-attention-output"}))
lines_paraphrase = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                         _lines(q4="attn_output = attn_weights @ value"),
                         "question 4: paraphrased the line instead of copying it",
    frozenset({"not-in-source"}))
lines_swapped = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines", _lines(q2=L3, q3=L2),
                      "questions 2 and 3 swapped",
    frozenset({"q2-masked-scores"}))
lines_dropout = Wrong("ex-capstone-gpt2-lines", "check_gpt2_lines",
                      _lines(q4="attn_weights = nn.functional.dropout(attn_weights, p=dropout, "
                                "training=module.training)"),
                      "question 4: quoted the dropout on the weights",
    frozenset({"q4-weights"}))


# --- ex-capstone-gpt2-bugs --------------------------------------------------------------------------------------
# Copies: A reshapes Q into heads without the transpose; B drops q_offset from the mask's query positions;
# C takes softmax over dim=-2; D swaps K and V in the cache update.
bugs_A_as_2 = Wrong("ex-capstone-gpt2-bugs", "check_which_question", {"A": 2, "B": 3, "C": 2, "D": 1},
                    "A: the Q reshape read as a score-axis bug (question 2)",
    frozenset({"A-not-2"}))
bugs_D_as_4 = Wrong("ex-capstone-gpt2-bugs", "check_which_question", {"A": 1, "B": 3, "C": 2, "D": 4},
                    "D: K and V swapped read as 'the weights multiply K' (question 4)",
    frozenset({"D-not-4"}))
bugs_B_as_1 = Wrong("ex-capstone-gpt2-bugs", "check_which_question", {"A": 1, "B": 1, "C": 2, "D": 1},
                    "B: a position offset read as 'where Q comes from' (question 1)",
    frozenset({"B-not-1"}))
bugs_C_as_3 = Wrong("ex-capstone-gpt2-bugs", "check_which_question", {"A": 1, "B": 3, "C": 3, "D": 1},
                    "C: the leak from the future taken as a mask bug (question 3)",
    frozenset({"C-not-3"}))
bugs_by_symptom = Wrong("ex-capstone-gpt2-bugs", "check_which_question", {"A": 3, "B": 3, "C": 3, "D": 1},
                        "every copy that leaks from the future blamed on the mask (question 3)",
    frozenset({"A-not-3"}))
bugs_B_as_2 = Wrong("ex-capstone-gpt2-bugs", "check_which_question", {"A": 1, "B": 2, "C": 2, "D": 1},
                    "B: the query positions of the mask read as 'which axis is the query' (question 2)",
    frozenset({"B-not-2"}))
bugs_in_order = Wrong("ex-capstone-gpt2-bugs", "check_which_question", {"A": 1, "B": 2, "C": 3, "D": 4},
                      "guessed one question per copy in order",
    frozenset({"B-not-2"}))
bugs_D_as_3 = Wrong("ex-capstone-gpt2-bugs", "check_which_question", {"A": 1, "B": 3, "C": 2, "D": 3},
                    "D: a cache bug read as a mask/position bug (question 3)",
    frozenset({"D-not-3"}))


WRONG = collect(globals())
