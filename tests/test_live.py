"""attnlib.live: chapter 8's model in the page, without a browser (what the page is made of).

The browser side (the forward pass in JavaScript against the library, Continue, the seed, the 64-character limit,
the time per keystroke, the keyboard, axe-core, a phone) is tested in test_rendered_book.py on the built chapter.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import attnlib
from attnlib import GPT, CharTokenizer
from attnlib.explore import MODULES, _script
from attnlib.live import LIVE_MODULES, LIVE_WORDS, MAX_CHARS, LiveModel, half_model, live, page_model, page_text
from attnlib.train import char_data, load_char_models


@pytest.fixture(scope="module")
def shipped():
    tok, _, held_out = char_data()
    return load_char_models()["masked"], tok, held_out


@pytest.fixture(scope="module")
def fig(shipped):
    model, tok, _ = shipped
    return live(model, tok, "the lion and the mouse", title="t")


def test_two_calls_give_identical_bytes(shipped, fig):
    model, tok, _ = shipped
    again = live(model, tok, "the lion and the mouse", title="t")
    assert again.html == fig.html and fig._repr_html_() == fig.html
    assert live(model, tok, "the fox", title="t").html != fig.html
    assert "\n" not in repr(fig) and "float16" in repr(fig)


def test_identical_bytes_in_a_fresh_process(fig):
    code = ("import hashlib; from attnlib.train import char_data, load_char_models; from attnlib.live import live; "
            "tok = char_data()[0]; f = live(load_char_models()['masked'], tok, 'the lion and the mouse', title='t'); "
            "print(hashlib.sha256(f.html.encode()).hexdigest())")
    lib = os.pathsep.join([os.path.dirname(os.path.dirname(attnlib.__file__)), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONHASHSEED": "3", "PYTHONPATH": lib})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == hashlib.sha256(fig.html.encode()).hexdigest()


def test_page_weight_is_within_250_kb(fig):
    n = sum(p.numel() for p in fig.model.parameters())
    assert fig.weights_nbytes == 2 * n                                  # float16: 2 bytes a weight
    assert len(fig.data["weights"]) == 4 * ((2 * n + 2) // 3)           # base64
    assert fig.nbytes <= 250_000, fig.nbytes
    assert fig.nbytes == len(fig.html.encode("utf-8"))


def test_one_container_scripts_in_order_nothing_from_outside(fig):
    text = fig.html
    assert text.startswith('<div class="attnlib-explore attnlib-live">') and text.endswith("</div>")
    assert not re.search(r"\sid\s*=", text)
    for bad in ("http:", "https:", "//cdn", "src=", "@import", "url("):
        assert bad not in text.replace("http://www.w3.org/2000/svg", ""), bad
    scripts = re.findall(r"<script([^>]*)>", text)
    assert scripts == [' type="application/json" class="ax-data"', ""]      # the data, then one script
    assert _script(LIVE_MODULES) in text and _script(MODULES) not in text and "window.attnlib" not in text
    assert LIVE_MODULES.index("model") < LIVE_MODULES.index("live") < LIVE_MODULES.index("start") == \
        len(LIVE_MODULES) - 1
    m = re.search(r'<p class="ax-fallback">([^<]*)</p>', text)
    assert m and "run this cell or trust the notebook" in m.group(1)
    assert text.index("ax-fallback") < text.index("<script")


def test_the_page_weights_are_the_library_models_weights(shipped, fig):
    """The page's bytes decode to fig.model exactly; fig.model is the shipped model rounded to float16."""
    model, _, _ = shipped
    rebuilt = page_model(fig.data)
    ours, theirs, full = fig.model.state_dict(), rebuilt.state_dict(), model.state_dict()
    assert list(ours) == list(theirs) == list(full)
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name
        assert ours[name].dtype == torch.float32
        assert torch.equal(ours[name], full[name].half().float()), name          # float16, once
    moved = max(float((ours[k] - full[k]).abs().max()) for k in ours)
    assert 0 < moved <= 2 ** -11 * max(float(v.abs().max()) for v in full.values())
    assert any(not torch.equal(v, v.half().float()) for v in full.values())       # the shipped model untouched
    offsets = [at for _, _, at in fig.data["tensors"]]
    sizes = [int(np.prod(shape)) for _, shape, _ in fig.data["tensors"]]
    assert offsets == list(np.cumsum([0] + sizes[:-1]))


def test_rounding_to_float16_moves_the_predictions_little(shipped, fig):
    model, _, held_out = shipped
    ids = held_out[:640].reshape(10, 64)
    with torch.no_grad():
        gap = (torch.softmax(model(ids), -1) - torch.softmax(fig.model(ids), -1)).abs().max()
    assert 0 < gap <= 2e-3


def test_half_model_leaves_its_argument_alone(shipped):
    model, _, _ = shipped
    before = {k: v.clone() for k, v in model.state_dict().items()}
    half = half_model(model)
    assert half is not model and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(p, p.half().float()) for p in half.parameters())


@pytest.mark.parametrize("typed, runs, left", [
    ("the lion", "the lion", []),
    ("The Lion", "the lion", []),                       # capitals become lower-case letters
    ("2 µ", " ", ["2", "µ"]),                           # the rest is left out, each named once
    ("a2b2c", "abc", ["2"]),
    ("7 foxes: \"run!\"\n", "7 foxes: \"run!\"\n", []),
    ("Élan ÀB", "lan b", ["É", "À"]),                    # only A–Z are lower-cased
    ("tab\there", "tabhere", ["\t"]),
])
def test_page_text_keeps_the_vocabulary_and_names_the_rest(fig, typed, runs, left):
    assert page_text(typed, fig.vocab) == (runs, left)
    assert fig.page_text(typed) == (runs, left)
    ids = fig.ids(typed)
    assert ids.shape == (1, len(runs)) and "".join(fig.vocab[i] for i in ids[0].tolist()) == runs


def test_the_script_applies_the_same_rule_and_limit(fig):
    js = _script(LIVE_MODULES)
    assert 'ch >= "A" && ch <= "Z" ? ch.toLowerCase() : ch' in js
    assert fig.data["maxChars"] == MAX_CHARS == 64
    assert LIVE_WORDS["refused"].startswith("Refused: ") and LIVE_WORDS["leftOut"].startswith("Left out ")
    assert "W.refused" in js and "W.leftOut" in js and fig.data["words"]["refused"] == LIVE_WORDS["refused"]
    for what in ("Float32Array", "Math.fround", "softmaxRow", "seeded"):
        assert what in js, what


def _post_norm(model):
    return GPT(dataclasses.replace(model.config, norm="post"))


@pytest.mark.parametrize("call, error, words", [
    (lambda m, t: live("model", t), TypeError, ["attnlib GPT", "str"]),
    (lambda m, t: live(_post_norm(m), t), ValueError, ["chapter 8's kind of model", "norm='post'"]),
    (lambda m, t: live(GPT(dataclasses.replace(m.config, causal=False)), t), ValueError, ["causal=False"]),
    (lambda m, t: live(GPT(dataclasses.replace(m.config, pos="learned")), t), ValueError, ["pos='learned'"]),
    (lambda m, t: live(m, CharTokenizer("abc")), ValueError, ["vocab_size=43", "with 3"]),
    (lambda m, t: live(m, t, 5), TypeError, ["strings", "int"]),
    (lambda m, t: live(m, t, "µµ"), ValueError, ["1 to 64 characters", "got 0"]),
    (lambda m, t: live(m, t, "a" * 65), ValueError, ["1 to 64 characters", "got 65"]),
])
def test_bad_input_names_expected_and_actual(shipped, call, error, words):
    model, tok, _ = shipped
    with pytest.raises(error) as e:
        call(model, tok)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_a_live_model_is_a_figure_of_its_own(fig):
    assert isinstance(fig, LiveModel) and fig.text == "the lion and the mouse"
    assert fig.data["kind"] == "live" and fig.data["labels"][fig.vocab.index("\n")] == "\u21b5"
    assert fig.data["labels"][fig.vocab.index(" ")] == "\u2581"


def test_continue_at_temperature_0_is_what_generate_picks(shipped, fig):
    """Chapter 8 shows the greedy loop with the library's model; the page's float16 copy picks the same 20
    characters (the browser side is compared with fig.model in test_rendered_book.py)."""
    model, tok, _ = shipped
    prompt = fig.ids("the lion ")
    page, full = fig.model.generate(prompt, 20), model.generate(prompt, 20)
    assert torch.equal(page, full)
    assert tok.decode(full[0]) == "the lion the the the the the "


def test_chapter_8s_figure_holds_the_models_own_scores(shipped):
    """The 24 held-out characters of chapter 8's figure: the scores written into the page give the weights
    that head_weights computes."""
    from attnlib import causal_mask, scale, softmax
    from attnlib.explore import explore, model_scores
    from attnlib.induction import head_weights

    model, tok, held_out = shipped
    chars = held_out[300:324]
    d_head = model.blocks[0].attn.d_head
    fig = explore(model_scores(model, chars), [tok.decode([c]) for c in chars.tolist()], d_head, title="t")
    S = torch.as_tensor(fig.scores)
    P_page = softmax(scale(S, d_head) + causal_mask(S.shape[-1]))
    assert (P_page - head_weights(model, chars[None])[:, 0]).abs().max() <= 5e-4
