"""attnlib.explore: the interactive attention figure's HTML, without a browser.

The browser side (hovering, menus, switches, the slider, dark theme) is tested in test_rendered_book.py on the
figures of the built book.
"""

from __future__ import annotations

import copy
import html.parser
import json
import math
import re

import numpy as np
import pytest
import torch

from attnlib import GPT
from attnlib.attention import attention_weights, causal_mask, softmax
from attnlib.explore import MAX_NUMBERS, MAX_T, AttentionExplorer, explore, model_scores
from attnlib.induction import head_weights

TOKENS = [" the", " cat", " chase", "s", " the", " dog"]


def raw(*shape, seed=0, spread=3.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * spread


class _Parts(html.parser.HTMLParser):
    """Tags, attributes and the text of every <script> of an HTML fragment."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._in: dict | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in = dict(attrs)
            self.scripts.append((self._in, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def parts(fig) -> _Parts:
    p = _Parts()
    p.feed(fig.html)
    return p


def page_json(fig) -> dict:
    """The data exactly as the browser reads it: parsed out of the HTML text, not from the object."""
    found = [text for attrs, text in parts(fig).scripts if attrs.get("type") == "application/json"]
    assert len(found) == 1, f"expected one JSON script, found {len(found)}"
    return json.loads(found[0])


def test_two_calls_give_identical_bytes():
    S = raw(2, 3, 6, 6)
    a = explore(S, TOKENS, 8, controls=("scale", "mask", "temperature"), title="t")
    b = explore(S.clone(), list(TOKENS), 8, controls=("scale", "mask", "temperature"), title="t")
    assert a.html == b.html and a._repr_html_() == a.html
    assert repr(a) == repr(b) and len(repr(a)) < 120 and "\n" not in repr(a)
    assert explore(S + 1.0, TOKENS, 8).html != a.html            # the data is in it


def test_no_ids_no_external_urls_one_container():
    fig = explore(raw(2, 3, 6, 6), TOKENS, 8, controls=("scale", "mask", "temperature"))
    text = fig.html
    assert not re.search(r"\sid\s*=", text), "an element id would repeat when a page shows two figures"
    for bad in ("http:", "https:", "//cdn", "src=", "@import", "url("):
        assert bad not in text.replace("http://www.w3.org/2000/svg", ""), bad   # the SVG namespace is a name
    tags = parts(fig).tags
    assert tags[0] == ("div", {"class": "attnlib-explore"})
    assert [a.get("type") for t, a in tags if t == "script"] == ["application/json", None]
    assert "</script" not in text.split("<script>", 1)[1].rsplit("</script>", 1)[0]


def test_fallback_sentence_for_untrusted_notebooks():
    text = explore(raw(6, 6), TOKENS, 8).html
    m = re.search(r'<p class="ax-fallback">([^<]*)</p>', text)
    assert m and "run this cell or trust the notebook" in m.group(1)
    assert text.index("ax-fallback") < text.index("<script")     # visible before any script runs


def test_stored_scores_are_rounded_and_give_the_library_weights():
    S = raw(2, 4, 6, 6, spread=5.0)
    fig = explore(S, TOKENS, 16, controls=("scale", "mask", "temperature"))
    data = page_json(fig)
    stored = torch.tensor(data["S"], dtype=torch.float64)
    assert stored.shape == (2, 4, 6, 6) and data["L"] == 2 and data["h"] == 4 and data["T"] == 6
    assert (stored - S).abs().max() <= 5e-5 + 1e-12
    assert (stored * 1e4 - (stored * 1e4).round()).abs().max() < 1e-6        # 4 decimals, no more
    assert torch.equal(stored, fig.scores)
    for l, k in ((0, 0), (1, 3)):
        for scaled, causal, tau in ((True, True, 1.0), (False, True, 1.0), (True, False, 0.5), (False, False, 3.0)):
            div = (math.sqrt(16) if scaled else 1.0) * tau
            want = torch.softmax(S[l, k] / div + (causal_mask(6, dtype=S.dtype) if causal else 0), dim=-1)
            got = softmax(stored[l, k] / div + (causal_mask(6, dtype=S.dtype) if causal else 0))
            assert (got - want).abs().max() < 5e-4                          # the printed precision, 3 decimals
            torch.testing.assert_close(fig.weights(l, k, scaled=scaled, causal=causal, temperature=tau), got)
    P = fig.weights()
    assert (P.triu(1) == 0).all() and torch.allclose(P.sum(-1), torch.ones(6, dtype=P.dtype))


def test_initial_state_and_controls_in_the_data():
    fig = explore(raw(3, 6, 6), TOKENS, 8, controls=("temperature",), causal=False, temperature=0.5, head=2,
                  query=2)
    data = page_json(fig)
    assert data["controls"] == {"scale": False, "mask": False, "temperature": True}
    assert data["state"] == {"layer": 0, "head": 2, "scaled": True, "causal": False, "temperature": 0.5,
                             "query": 2}
    assert data["labels"][1] == "\u2581cat" and data["tokens"][1] == " cat"


def test_tokens_with_html_characters_stay_inside_the_json():
    tokens = ["</script>", "<b>", "&amp;", "x"]
    fig = explore(raw(4, 4), tokens, 4)
    assert "</script><" not in fig.html.split('application/json"', 1)[1].split("</script>", 1)[0]
    assert page_json(fig)["tokens"] == tokens


def test_model_scores_give_the_models_own_weights():
    torch.manual_seed(0)
    for pos in ("learned", "rope"):
        model = GPT(20, d_model=16, h=4, L=2, max_T=16, pos=pos).eval()
        ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
        S = model_scores(model, ids)
        assert S.shape == (2, 4, 8, 8) and S.dtype == torch.float64        # computed in float64
        P_lib = head_weights(model, ids[None])[:, 0]                        # (L, h, T, T), float32
        P = softmax(S / math.sqrt(4) + causal_mask(8, dtype=S.dtype))
        torch.testing.assert_close(P, P_lib.double(), atol=1e-5, rtol=1e-4)
        P64 = head_weights(copy.deepcopy(model).double(), ids[None])[:, 0]  # the float64 model's own weights
        torch.testing.assert_close(P, P64, atol=1e-12, rtol=0)
        assert model.head.weight.dtype == torch.float32                     # the model itself is untouched
        fig = explore(S, [str(t) for t in ids.tolist()], 4)
        assert (fig.weights(1, 3) - P_lib[1, 3].double()).abs().max() < 5e-4


def test_figure_size_stays_small():
    one = explore(raw(6, 6), TOKENS, 8, controls=("scale", "mask", "temperature"))
    many = explore(raw(2, 4, 24, 24), [f"t{k}" for k in range(24)], 8)
    assert one.nbytes < 20_000, one.nbytes
    assert many.nbytes < 60_000, many.nbytes
    assert isinstance(one, AttentionExplorer)


@pytest.mark.parametrize("call, error, words", [
    (lambda: explore([[1.0]], ["a"], 1), TypeError, ["torch.Tensor or NumPy array", "list"]),
    (lambda: explore(torch.ones(2, 2, dtype=torch.bool), ["a", "b"], 1), TypeError, ["real numbers", "bool"]),
    (lambda: explore(np.array([["a"]]), ["a"], 1), TypeError, ["real numbers", "<U1"]),
    (lambda: explore(raw(6, 5), TOKENS, 8), ValueError, ["square", "(6, 5)"]),
    (lambda: explore(raw(6), TOKENS, 8), ValueError, ["(T, T), (h, T, T) or (L, h, T, T)", "(6,)"]),
    (lambda: explore(raw(1, 1, 1, 6, 6), TOKENS, 8), ValueError, ["(L, h, T, T)", "(1, 1, 1, 6, 6)"]),
    (lambda: explore(torch.full((2, 2), float("inf")), ["a", "b"], 1), ValueError, ["finite", "inf"]),
    (lambda: explore(raw(6, 6), TOKENS[:5], 8), ValueError, ["T=6", "got 5"]),
    (lambda: explore(raw(6, 6), "the cat", 8), TypeError, ["list of T strings", "str"]),
    (lambda: explore(raw(6, 6), TOKENS, 0), ValueError, ["d_k must be a positive integer", "0"]),
    (lambda: explore(raw(6, 6), TOKENS, 8.0), TypeError, ["d_k", "8.0"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, controls=("sharpness",)), ValueError, ["'temperature'", "'sharpness'"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, controls="mask"), TypeError, ["tuple of names", "'mask'"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, temperature=0), ValueError, ["greater than 0", "0.0"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, temperature=9), ValueError, ["between 0.1 and 4.0", "9.0"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, causal=1), TypeError, ["True or False", "1"]),
    (lambda: explore(raw(3, 6, 6), TOKENS, 8, head=3), ValueError, ["head in 0..2", "head=3"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, query=6), ValueError, ["0..5", "6"]),
    (lambda: explore(raw(MAX_T + 1, MAX_T + 1), ["a"] * (MAX_T + 1), 8), ValueError, [f"at most {MAX_T}", "65"]),
    (lambda: explore(raw(12, 8, 20, 20), [str(k) for k in range(20)], 8), ValueError,
     [f"at most {MAX_NUMBERS}", "38400"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, title=3), TypeError, ["title must be a string", "int"]),
    (lambda: model_scores("gpt", torch.tensor([1, 2])), TypeError, ["attnlib GPT", "str"]),
    (lambda: model_scores(GPT(10, 8, 2, 1), [1, 2]), TypeError, ["torch.Tensor", "list"]),
    (lambda: model_scores(GPT(10, 8, 2, 1), torch.ones(2, 3, dtype=torch.long)), ValueError,
     ["one sequence", "(2, 3)"]),
    # on another device ("meta" stands in for a GPU: it holds no values to copy to the CPU)
    (lambda: explore(raw(6, 6).to("meta"), TOKENS, 8), ValueError, ["S", "meta", "no values"]),
    (lambda: model_scores(GPT(10, 8, 2, 1), torch.tensor([1, 2], device="meta")), ValueError,
     ["ids", "meta", "no values"]),
    # the model's own check of its ids is skipped inside model_scores' call, so model_scores checks them
    (lambda: model_scores(GPT(10, 8, 2, 1), torch.tensor([1, 12])), ValueError, ["12", "0..9"]),
    (lambda: model_scores(GPT(10, 8, 2, 1, max_T=4), torch.ones(5, dtype=torch.long)), ValueError,
     ["T=5", "max_T=4"]),
    (lambda: model_scores(GPT(10, 8, 2, 1, norm="post"), torch.tensor([1, 2])), ValueError,
     ["Pre-Norm", "'post'"]),
])
def test_bad_input_names_expected_and_actual(call, error, words):
    with pytest.raises(error) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_weights_rejects_a_head_that_is_not_there():
    fig = explore(raw(2, 6, 6), TOKENS, 8)
    with pytest.raises(ValueError, match="head in 0..1"):
        fig.weights(0, 2)
    with pytest.raises(ValueError, match="greater than 0"):
        fig.weights(temperature=-1)


def test_attention_weights_agree_with_the_figure_on_the_library_path():
    g = torch.Generator().manual_seed(1)
    Q, K = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
    fig = explore(Q @ K.T, TOKENS, 8, controls=("mask",))
    assert (fig.weights().float() - attention_weights(Q, K)).abs().max() < 5e-4
