"""The interactive figures stored in chapters 4 and 5 hold the scores of the heads those pages build.

The pages themselves only draw the figures; these tests read the numbers written into each stored figure
(the JSON the browser reads) and compare the weights they give with the library's.
"""
from __future__ import annotations

import json
import math

import torch

from attnlib import causal_mask, running_X0, softmax
from helpers import BOOK, html_parts


def stored_figures(name: str) -> list[dict]:
    """The data of every interactive figure stored in book/<name>.ipynb, as the browser reads it."""
    nb = json.loads((BOOK / f"{name}.ipynb").read_text())
    figures = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            page = out.get("data", {}).get("text/html")
            if page is None:
                continue
            scripts = html_parts("".join(page) if isinstance(page, list) else page).scripts
            figures += [json.loads(text) for attrs, text in scripts if attrs.get("type") == "application/json"]
    return figures


def weights(S: torch.Tensor, d_k: int, causal: bool = True, tau: float = 1.0) -> torch.Tensor:
    Z = S / math.sqrt(d_k) / tau
    return softmax(Z + causal_mask(S.shape[-1], dtype=S.dtype) if causal else Z)


def test_chapter_4_figure_gives_the_weights_of_the_running_head():
    (fig,) = stored_figures("04_mask")
    S_page = torch.tensor(fig["S"], dtype=torch.float64)[0, 0]
    X0, pieces = running_X0()
    d_model, d_k = X0.shape[-1], 8
    gen = torch.Generator().manual_seed(2)            # the head of chapters 2 to 5
    W_Q, W_K, _ = (torch.randn(d_model, d_k, generator=gen) / math.sqrt(d_model) for _ in range(3))
    Q, K = X0 @ W_Q, X0 @ W_K
    S = (Q @ K.transpose(-2, -1))[0].double()
    assert fig["tokens"] == pieces and fig["d_k"] == d_k and fig["controls"]["mask"]
    assert (S_page - S).abs().max() <= 5e-3 + 1e-6        # 2 decimals on the page
    for causal in (True, False):
        assert (weights(S_page, d_k, causal) - weights(S, d_k, causal)).abs().max() < 5e-4
    leak = weights(S_page, d_k, causal=False).triu(1).sum(-1)
    assert (leak[:-1] > 0).all()                      # without the mask, every row but the last leaks


def test_chapter_5_figure_gives_the_designed_head():
    (fig,) = stored_figures("05_softmax")
    S_page = torch.tensor(fig["S"], dtype=torch.float64)[0, 0]
    d_k = fig["d_k"]
    assert d_k == 3 and fig["controls"]["temperature"] and fig["state"]["query"] == 2
    # scaled scores: only the query of ' chase' (position 2) is not zero; its keys score 3.1·noun + 1.8·content + 0.3
    Z = torch.zeros(6, 6, dtype=torch.float64)
    Z[2] = torch.tensor([0.3, 5.2, 2.1, 0.3, 0.3, 5.2], dtype=torch.float64)
    assert (S_page / math.sqrt(d_k) - Z).abs().max() < 1e-3
    on_cat = []
    for tau in (0.5, 1.0, 2.0, 4.0):
        got = weights(S_page, d_k, tau=tau)
        assert (got - softmax(Z / tau + causal_mask(6, dtype=Z.dtype))).abs().max() < 1e-4
        on_cat.append(got[2, 1].item())
    assert abs(on_cat[1] - 0.950) < 5e-4 and on_cat == sorted(on_cat, reverse=True)
