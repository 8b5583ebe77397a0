"""Chapter 8: a compact GPT-style model. token IDs (B, T) → X₀ → L blocks → X_L → LayerNorm → logits.

Each block has its own parameters: the structure repeats, the weights do not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import check_positive
from .block import Block
from .embedding import TokenEmbedding, check_ids
from .heads import KVCache
from .position import LearnedPositions, sinusoidal_positions

__all__ = ["GPT"]


class GPT(nn.Module):
    """A decoder-only Transformer.

    ``pos``: "learned" or "sinusoidal" (added to X₀), "rope" (rotates Q and K in every block) or None.
    ``causal=False`` removes the mask everywhere (chapter 8's leak experiment).
    """

    def __init__(self, vocab_size: int, d_model: int = 64, h: int = 4, L: int = 2, d_ff: int | None = None,
                 max_T: int = 128, *, pos: str | None = "learned", norm: str = "pre", causal: bool = True,
                 backend: str = "sdpa"):
        super().__init__()
        check_positive(vocab_size=vocab_size, L=L, max_T=max_T)
        if pos not in ("learned", "sinusoidal", "rope", None):
            raise ValueError(f"pos must be 'learned', 'sinusoidal', 'rope' or None, got {pos!r}")
        self.vocab_size, self.d_model, self.max_T, self.pos, self.causal = vocab_size, d_model, max_T, pos, causal
        self.embed = TokenEmbedding(vocab_size, d_model)                       # ids → X₀
        self.positions = LearnedPositions(max_T, d_model) if pos == "learned" else None
        self.blocks = nn.ModuleList(
            Block(d_model, h, d_ff, norm=norm, rope=pos == "rope", backend=backend) for _ in range(L))
        self.ln_f = nn.LayerNorm(d_model)                                      # final LayerNorm
        self.head = nn.Linear(d_model, vocab_size, bias=False)                 # X_L → logits

    def embed_tokens(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """ids (B, T) → X₀ (B, T, d_model): token embedding plus absolute position, if any."""
        check_ids(ids, self.vocab_size)
        if ids.dim() != 2:
            raise ValueError(f"ids must be (B, T), got {tuple(ids.shape)}; use ids[None] for one sequence")
        T = ids.shape[-1]
        if offset + T > self.max_T:
            raise ValueError(f"T={offset + T} exceeds the context length max_T={self.max_T}")
        X = self.embed(ids)
        if self.pos == "learned":
            X = X + self.positions(T, offset)
        elif self.pos == "sinusoidal":
            X = X + sinusoidal_positions(offset + T, self.d_model)[offset:].to(X)
        return X

    def hidden_states(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """[X₀, X₁, …, X_L], each (B, T, d_model): the residual stream after every block."""
        X = [self.embed_tokens(ids)]
        for block in self.blocks:
            X.append(block(X[-1], causal=self.causal))   # block l+1 reads X_l, never X₀
        return X

    def forward(self, ids: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """ids (B, T) → logits (B, T, vocab_size) for the next token at every position."""
        offset = len(caches[0]) if caches else 0
        X = self.embed_tokens(ids, offset)
        for l, block in enumerate(self.blocks):
            X = block(X, causal=self.causal, cache=caches[l] if caches else None)
        return self.head(self.ln_f(X))

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of predicting targets (B, T) from ids (B, T)."""
        if targets.shape != ids.shape:
            raise ValueError(f"targets must have the shape of ids {tuple(ids.shape)}, got {tuple(targets.shape)}")
        logits = self(ids)
        return F.cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1))

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, n_new: int, *, use_cache: bool = True, temperature: float = 0.0,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Append n_new tokens to ids (B, T), one at a time. temperature 0 picks the most likely token.

        With ``use_cache`` each step feeds only the newest token and reuses the cached K and V of the
        earlier positions; without it each step recomputes the whole prefix. Both give the same tokens.
        """
        check_positive(n_new=n_new)
        check_ids(ids, self.vocab_size)
        if ids.shape[-1] + n_new > self.max_T:
            raise ValueError(f"T={ids.shape[-1] + n_new} exceeds the context length max_T={self.max_T}")
        caches = [KVCache() for _ in self.blocks] if use_cache else None
        step_input = ids
        for _ in range(n_new):
            logits = self(step_input if use_cache else ids, caches)[:, -1]
            if temperature > 0:
                nxt = torch.multinomial(F.softmax(logits / temperature, -1), 1, generator=generator)
            else:
                nxt = logits.argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
            step_input = nxt
        return ids
