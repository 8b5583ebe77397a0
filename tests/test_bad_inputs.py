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
import attnlib.gpt2
import attnlib.induction
import attnlib.live
import attnlib.norms
import attnlib.train
from attnlib import (
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
    causal_mask,
    one_hot_embedding,
    project,
    rope_angles,
    scores,
    sinusoidal_positions,
    softmax,
    split_heads,
)
from attnlib.audit import audit
from attnlib.costs import attention_flops, attention_params, count_ops, kv_cache_bytes, ops_called
from attnlib.explore import AttentionExplorer
from attnlib.heads import multi_head_attention, repeat_kv
from attnlib.plots import heads_grid, mask_picture
from attnlib.reading import Place, find_line, line_changed, show_code, source_lines
from attnlib.train import evaluate, random_batch

mha = MultiHeadAttention(64, 8)
model = GPT(GPTConfig(50, 32, 4, 1, max_T=16))


def _filled_cache(B=2):
    cache = KVCache()
    small = MultiHeadAttention(8, 2)
    small(torch.randn(B, 3, 8), cache=cache)
    return small, cache


small = GPT(attnlib.GPTConfig(vocab_size=11, d_model=16, h=2, L=1, max_T=8))
for _one in (lambda: 1,):   # a lambda on a line that opens a block: its source is no statement on its own
    _LAMBDA_IN_A_FOR = _one


def _extended(K_new, V_new):
    cache = KVCache()
    cache.extend(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8))
    return cache.extend(K_new, V_new)


def _renamed_tensor(data):
    data["tensors"][0][0] = "nope"
    return data


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
    ("fused weights of the wrong width", lambda: multi_head_attention(torch.randn(1, 3, 8), torch.randn(8, 16),
                                                                       torch.randn(8, 8), 2),
     ValueError, ["W_QKV", "3·d_model=24", "(8, 16)"]),
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
    ("unknown position kind", lambda: GPT(GPTConfig(10, pos="absolute")), ValueError, ["'rope'", "'absolute'"]),
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
    ("per-layer caches of different lengths", lambda: GPT(GPTConfig(50, 32, 4, 2, max_T=16))(
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
    ("one cache shared by two layers", lambda: (lambda c: GPT(GPTConfig(50, 32, 4, 2, max_T=16))(
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
    ("RoPE with an odd d_head", lambda: GPT(GPTConfig(50, 12, 4, 1, pos="rope")), ValueError,
     ["pos='rope'", "d_head=3"]),
    ("a prompt that leaves no room", lambda: model.generate(torch.zeros(1, 10, dtype=torch.long), 8), ValueError,
     ["n_new=8", "max_T=16"]),
    ("an agreement without a bound", lambda: attnlib.agree(torch.zeros(2), torch.zeros(2), within=0), ValueError,
     ["positive number", "0"]),
    ("an agreement of two shapes", lambda: attnlib.agree(torch.zeros(2), torch.zeros(3), within=1e-6), ValueError,
     ["(2,)", "(3,)"]),
    ("a bound given as text", lambda: attnlib.at_most(1e-7, "1e-5"), ValueError, ["positive number", "'1e-5'"]),
    ("a negative bound", lambda: attnlib.runtime.bound_text(-1e-3), ValueError, ["positive number", "-0.001"]),
    ("an agreement of a meta tensor", lambda: attnlib.agree(torch.zeros(2, device="meta"), torch.zeros(2), within=1),
     ValueError, ["a is a meta tensor"]),
    ("an agreement of text", lambda: attnlib.agree("x", 1, within=1), TypeError, ["a must be", "'x'"]),
    ("a bound that is True", lambda: attnlib.at_most(0.0, True), ValueError, ["positive number", "True"]),
    ("a measured value as text", lambda: attnlib.at_most("0.1", 1.0), TypeError, ["value", "'0.1'"]),
    ("at_most's what as a number", lambda: attnlib.at_most(0.1, 1.0, 3), TypeError, ["what", "3"]),
    # accelerators that are not there (tests/test_device.py names every entry point)
    ("cuda without CUDA", lambda: _without_accelerators(lambda: causal_mask(3, device="cuda")), ValueError,
     ["device='cuda'", "CUDA was asked for, but this machine has none"]),
    # meta tensors have no values to read
    ("meta token IDs", lambda: model(torch.zeros(1, 3, dtype=torch.long, device="meta")), ValueError,
     ["ids is a meta tensor"]),
    ("meta IDs to require_ids", lambda: attnlib._validate.require_ids(
        torch.zeros(3, dtype=torch.long, device="meta"), 10), ValueError, ["ids is a meta tensor"]),
    ("meta positions", lambda: model.embed_tokens(torch.zeros(1, 3, dtype=torch.long),
                                                  positions=torch.zeros(1, 3, dtype=torch.long, device="meta")),
     ValueError, ["positions is a meta tensor"]),
    # the config's own fields
    ("GPT given the config's fields", lambda: GPT(10), TypeError, ["GPT takes a GPTConfig", "got 10 (int)",
                                                                    "GPT(GPTConfig(vocab_size"]),
    ("GPT given a dict", lambda: GPT({"vocab_size": 10}), TypeError, ["GPTConfig", "dict", "GPT(GPTConfig(**fields))"]),
    # live: the page's text, model and payload
    ("page_text of None", lambda: attnlib.live.page_text(None, ["a"]), TypeError, ["text must be a string", "None"]),
    ("page_text with a string vocab", lambda: attnlib.live.page_text("a", "abc"), TypeError, ["vocab", "'abc'"]),
    ("page_model of an empty dict", lambda: attnlib.live.page_model({}), ValueError, ["data", "missing", "'weights'"]),
    ("page_model of a list", lambda: attnlib.live.page_model([]), TypeError, ["data", "payload", "list"]),
    ("half_model of a string", lambda: attnlib.live.half_model("x"), TypeError, ["model", "GPT", "'x'"]),
    ("live's ids of a number", lambda: _live_figure().ids(3), TypeError, ["text must be a string", "3"]),
    ("live's page_text of None", lambda: _live_figure().page_text(None), TypeError, ["text must be a string"]),
    ("a LiveModel built of a string", lambda: attnlib.live.LiveModel("x", ["a"], "a", ""), TypeError,
     ["model", "GPT"]),
    ("a LiveModel of a string", lambda: attnlib.live.live("x", None), TypeError, ["model", "GPT"]),
    # reading: functions, lines and places
    ("find_line of None", lambda: find_line(None, [softmax]), TypeError, ["line must be a str", "None"]),
    ("find_line in one function, not a list", lambda: find_line("x", softmax), TypeError, ["functions", "list"]),
    ("find_line in a number", lambda: find_line("x", [3]), TypeError, ["functions[0]", "function written in Python"]),
    ("a Place counted from the end", lambda: Place(softmax, -1), ValueError, ["line", "softmax", "got -1"]),
    ("a Place at a float line", lambda: Place(softmax, 2.0), TypeError, ["line", "2.0"]),
    ("line_changed with delete=1", lambda: line_changed(find_line("e = Z.exp()", [softmax]), delete=1), TypeError,
     ["delete must be True or False", "1"]),
    ("line_changed with a number as the new line", lambda: line_changed(find_line("e = Z.exp()", [softmax]), new=3),
     TypeError, ["new must be a line of code", "3"]),
    ("line_changed of no places", lambda: line_changed([], delete=True), TypeError, ["places", "non-empty"]),
    ("source_lines of a number", lambda: source_lines(3), TypeError, ["fn must be a function", "3"]),
    ("show_code with a bad replace", lambda: show_code(softmax, replace=["a"]), TypeError, ["replace", "dict"]),
    # gpt2_reading: seeds, sizes, questions, letters
    ("a seed of 2.5", lambda: _gpt2_reading().tiny_gpt2(2.5), TypeError, ["seed", "2.5"]),
    ("a seed that is True", lambda: _gpt2_reading().tiny_gpt2(True), TypeError, ["seed", "True"]),
    ("an empty vocabulary", lambda: _gpt2_reading().tiny_gpt2(vocab_size=0), ValueError, ["vocab_size", "0"]),
    ("a float dtype that is not one", lambda: _gpt2_reading().tiny_gpt2(dtype=torch.long), TypeError, ["dtype"]),
    ("ask_gpt2 of meta IDs", lambda: _gpt2_reading().ask_gpt2(_gpt2_reading().tiny_gpt2(),
                                                             torch.zeros(1, 6, dtype=torch.long, device="meta")),
     ValueError, ["ids is a meta tensor"]),
    ("ask_gpt2 of a string", lambda: _gpt2_reading().ask_gpt2("gpt2"), TypeError, ["model", "GPT2LMHeadModel"]),
    ("question True", lambda: _gpt2_reading().line_finding(True, find_line("e = Z.exp()", [softmax])), TypeError,
     ["question", "True"]),
    ("question 5", lambda: _gpt2_reading().line_finding(5, find_line("e = Z.exp()", [softmax])), ValueError,
     ["question must be 1, 2, 3 or 4", "5"]),
    ("a planted bug of a number", lambda: _gpt2_reading().planted_bug(3), ValueError, ["letter", "A, B, C, D", "3"]),
    ("a planted copy of a number", lambda: _gpt2_reading().show_planted("Z"), ValueError, ["letter", "'Z'"]),
    ("load_gpt2 with local_files_only=1", lambda: _gpt2_reading() and attnlib.gpt2.load_gpt2(
        "gpt2", local_files_only=1), TypeError, ["local_files_only must be True or False", "1"]),
    ("load_gpt2 of a missing folder", lambda: _gpt2_reading() and attnlib.gpt2.load_gpt2(
        "/nonexistent/gpt2-folder", local_files_only=True), OSError, ["name_or_path='/nonexistent/gpt2-folder'",
                                                                       "neither a folder"]),
    # weights files of the wrong kind say what they are
    ("chapter 8's reader on the induction heads' file", lambda: attnlib.train.load_char_models(
        attnlib.induction.WEIGHTS), ValueError, ["wrong weights file", "load_char_models", "induction heads"]),
    ("the induction heads' reader on chapter 8's file", lambda: attnlib.induction.load_models(
        attnlib.train.WEIGHTS), ValueError, ["wrong weights file", "load_models", "chapter 8's character models"]),
    ("a weights file that is not one", lambda: attnlib.induction.stored_losses(pathlib.Path(__file__)), ValueError,
     ["not a safetensors weights file"]),
    ("a table over seeds read from chapter 7's runs", lambda: attnlib.train.load_seed_table(attnlib.norms.NORM_RUNS),
     ValueError, ["wrong file for load_seed_table", "'recipe'"]),
    ("chapter 7's runs read from the table over seeds", lambda: attnlib.norms.stored_norm_runs(
        attnlib.train.SEED_TABLE), ValueError, ["wrong file for stored_norm_runs", "'config'"]),
    ("a table over seeds read from a weights file", lambda: attnlib.train.load_seed_table(attnlib.train.WEIGHTS),
     ValueError, ["not a JSON file", "load_seed_table"]),
    # the boundary of the later modules
    ("a cache extended by keys of another width", lambda: _extended(torch.zeros(1, 2, 1, 7), torch.zeros(1, 2, 1, 8)),
     ValueError, ["K_new", "d_head=8", "(1, 2, 1, 7)"]),
    ("a causal mask of more queries than keys", lambda: attnlib.combine_masks(None, 4, 2), ValueError,
     ["T_k=2", "T_q=4"]),
    ("RoPE positions past float64's exact integers", lambda: rope_angles(4, 4, offset=10**19), ValueError,
     ["offset + T", "2**53", "offset=10000000000000000000"]),
    ("a Place in a lambda", lambda: Place(_LAMBDA_IN_A_FOR, 1), TypeError,
     ["fn must be a function defined by a def statement", "<lambda>"]),
    ("show_code replacing a line it lacks", lambda: show_code(softmax, replace={"nothere": "x"}), ValueError,
     ["replace's keys must be lines of softmax's source", "softmax has no line 'nothere'"]),
    ("line_changed to a line that is not Python", lambda: line_changed(find_line("e = Z.exp()", [softmax]),
                                                                       new="e = ("), ValueError,
     ["new must be one line of valid Python", "'e = ('"]),
    ("page_model of a tensor the model lacks", lambda: attnlib.live.page_model(_renamed_tensor(_live_figure().data)),
     ValueError, ["data['tensors']", "'nope'"]),
    ("a LiveModel without a vocabulary", lambda: attnlib.live.LiveModel(_live_figure().model, None, "a", ""),
     TypeError, ["vocab must be a list of strings", "None"]),
    ("training a meta model", lambda: attnlib.train.train(GPT(small.config).to("meta"),
                                                          torch.zeros(50, dtype=torch.long), steps=1, T=4, B=2),
     ValueError, ["model is on the meta device"]),
    ("ask_gpt2 of a meta model", lambda: _gpt2_reading().ask_gpt2(_gpt2_reading().tiny_gpt2().to("meta")),
     ValueError, ["model is on the meta device"]),
    ("answers that are not a dict", lambda: _gpt2_reading().Answers(None, None), TypeError,
     ["passed must be a dict", "None"]),
    ("a block without residuals of no block", lambda: attnlib.norms.WithoutResidual(None), TypeError,
     ["block must be a Block", "NoneType"]),
    ("a block without residuals fed the wrong width", lambda: attnlib.norms.WithoutResidual(Block(16, 2))(
        torch.randn(2, 4, 8)), ValueError, ["X must be (B, T, d_model=16)", "(2, 4, 8)"]),
    ("gradient norms with targets of another shape", lambda: attnlib.norms.block_grad_norms(
        small, torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)), ValueError,
     ["targets", "(2, 5)", "(2, 3)"]),
    ("the spread of ids outside the vocabulary", lambda: attnlib.norms.position_spread(
        small, torch.full((2, 5), 28)), ValueError, ["28", "0..10"]),
    ("an assignment to the frozen config", lambda: setattr(small.config, "h", 3), AttributeError,
     ["config.h cannot be set", "dataclasses.replace(config, h=3)"]),
    ("a model moved to cuda without CUDA", lambda: _without_accelerators(lambda: GPT(small.config).to("cuda")),
     ValueError, ["device='cuda'", "CUDA was asked for, but this machine has none"]),
    ("an attention figure of an empty payload", lambda: AttentionExplorer({}), ValueError,
     ["data must hold the keys explore() writes", "missing"]),
    ("an attention figure of None", lambda: AttentionExplorer(None), TypeError, ["data must be the payload", "None"]),
    ("an audit of a class, not an instance", lambda: audit(MultiHeadAttention, "layer", d_model=16), TypeError,
     ["obj must be an instance", "the class MultiHeadAttention"]),
]


@pytest.mark.parametrize("what, call, fragments", [
    ("causal_mask", lambda: causal_mask(10**7), ["this mask", "T_q=10000000, T_k=10000000"]),
    ("sliding_window_mask", lambda: attnlib.sliding_window_mask(10**7, window=3), ["this mask", "T_q=10000000"]),
    ("combine_masks", lambda: attnlib.combine_masks(None, 10**7, 10**7), ["this mask", "T_k=10000000"]),
    ("sinusoidal_positions", lambda: sinusoidal_positions(10**10, 64), ["table of positions", "T=10000000000"]),
    ("rope_angles", lambda: rope_angles(10**10, 64), ["table of angles", "T=10000000000"]),
    ("tile_plan", lambda: attnlib.tile_plan(10**9, 10**9, 1, 1), ["tile plan", "T_q=1000000000 / block_q=1"]),
    ("repeat_kv", lambda: attnlib.repeat_kv(torch.zeros(1, 1, 100, 100), 10**12), ["repeat_kv", "n_rep=10**12"]),
    ("running_X0", lambda: attnlib.running_X0(d_model=10**12), ["running_X0", "d_model=10**12"]),
    ("audit", lambda: audit(lambda Q, K, V: attnlib.attention(Q, K, V), "core", max_T=10**9),
     ["audit", "max_T=1000000000"]),
])
def test_huge_masks_tables_and_plans_fail_before_allocating(what, call, fragments):
    fragments = [f.replace("10**12", str(10**12)) for f in fragments]
    with pytest.raises(MemoryError) as info:
        call()
    assert all(f in str(info.value) for f in fragments), str(info.value)


def _without_accelerators(fn):
    from unittest import mock

    with mock.patch.object(attnlib.runtime, "accelerators", lambda: {"cuda": False, "mps": False}):
        return fn()


def _live_figure():
    from attnlib.live import live

    tok = CharTokenizer("ab c")
    config = attnlib.GPTConfig(vocab_size=tok.vocab_size, d_model=8, h=2, L=1, max_T=64, pos="rope")
    return live(GPT(config), tok, "ab")


def _gpt2_reading():
    pytest.importorskip("transformers")
    import attnlib.gpt2_reading

    return attnlib.gpt2_reading


def test_numbers_of_numpy_are_accepted_where_python_numbers_are():
    assert attnlib.at_most(np.float32(5e-4), np.float32(1e-3)) == "within 0.001"   # printed as its own digits
    assert attnlib.agree(np.float64(1), 1, within=np.float32(1e-6)) == "equal within 1e-6"
    pytest.importorskip("transformers")
    from attnlib.gpt2_reading import tiny_gpt2

    assert tiny_gpt2(np.int64(0), vocab_size=np.int64(8)).config.vocab_size == 8


def test_at_most_prints_a_bound_never_below_the_value_it_passed():
    value = 0.0012345645
    line = attnlib.at_most(value, 0.0012345649)
    assert float(line.split()[-1]) >= value


def test_agree_compares_complex_numbers_whole():
    with pytest.raises(AssertionError, match="differ by 1"):
        attnlib.agree(torch.tensor([1 + 1j]), torch.tensor([1 + 0j]), within=0.5)
    assert attnlib.agree(torch.tensor([1 + 1j]), np.array([1 + 1j]), within=1e-12) == "equal within 1e-12"


def test_the_config_is_the_one_way_to_build_a_model():
    config = attnlib.GPTConfig(vocab_size=10, d_model=16, h=2, L=1)
    model = GPT(config)
    assert model.config is config and GPT(model.config).config == config


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
            "SKIPPED", "FULL", "DIAGONAL", "CONTROLS", "MAX_T", "MAX_NUMBERS", "MAX_CHARS", "PLANTED", "QUESTIONS",
            "CONFIG", "SEEDS", "WEIGHTS", "gpt2_sources", "Answers", "Finding"}


def _public_names() -> set[str]:
    names = set(attnlib.__all__)
    for module in ("text", "embedding", "position", "projections", "attention", "heads", "block", "model", "train",
                   "plots", "explore", "costs", "reference", "runtime", "tiled", "batches", "live", "reading",
                   "gpt2_reading", "induction", "gpt2", "display"):
        names |= set(getattr(__import__(f"attnlib.{module}", fromlist=["__all__"]), "__all__", ()))
    return names - NO_INPUT


def test_every_public_entry_point_has_a_bad_input_case():
    """Every public function and class appears in a bad-input case here or in the fuzz (a new one must too)."""
    used: set[str] = set()
    here = pathlib.Path(__file__)
    # the further chapters' modules, and chapter 8's shipped models, keep their bad-input cases beside their tests
    beside = ("fuzz", "explore", "tiled", "batches", "stack_weights", "induction", "gpt2", "gpt2_reading", "live",
              "audit")
    for path in [here] + [here.with_name(f"test_{name}.py") for name in beside]:
        used |= {node.id for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Name)}
        used |= {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}
    missing = sorted(_public_names() - used)
    assert not missing, f"public entry points without a bad-input case: {missing}"
