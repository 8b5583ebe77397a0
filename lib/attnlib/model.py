"""Chapter 8: a compact GPT-style model. token IDs (B, T) → X₀ → L blocks → X_L → LayerNorm → logits.

Each block has its own parameters: the structure repeats, the weights do not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import (
    check_caches,
    check_choice,
    check_divisible,
    check_flags,
    check_ids,
    check_is_pad,
    check_kv_heads,
    check_nonnegative,
    check_number,
    check_positions,
    check_positive,
    check_targets,
)
from .attention import padding_mask
from .batches import position_ids
from .block import Block
from .embedding import TokenEmbedding
from .heads import KVCache
from .position import LearnedPositions, sinusoidal_positions

__all__ = ["GPT", "IGNORE_INDEX"]   # GPTConfig: import it from attnlib.model

IGNORE_INDEX = -100   # a target equal to this is skipped by GPT.loss (the value torch's cross_entropy uses)


@dataclass(frozen=True)
class GPTConfig:
    """Every option of :class:`GPT` in one place; ``GPT.from_config(cfg)`` builds the model, ``model.config``
    gives it back. The defaults are the course's model; GPT-2 uses ``tie=True, gelu="tanh"`` (``GPT.from_gpt2``).

    ``tie``: the output head reuses the token embedding table (head.weight is embed.table).
    ``gelu``: "exact" or "tanh" (the approximation GPT-2 calls ``gelu_new``).
    ``bias``: False removes every bias (projections, MLP, LayerNorm shifts). ``eps``: every LayerNorm's ε.
    ``h_kv``: key/value heads per attention layer, each shared by h / h_kv query heads (None: h_kv = h).
    """

    vocab_size: int
    d_model: int = 64
    h: int = 4
    L: int = 2
    d_ff: int | None = None
    max_T: int = 128
    pos: str | None = "learned"
    norm: str = "pre"
    causal: bool = True
    backend: str = "sdpa"
    tie: bool = False
    gelu: str = "exact"
    bias: bool = True
    eps: float = 1e-5
    h_kv: int | None = None


class GPT(nn.Module):
    """A decoder-only Transformer.

    ``pos``: "learned" or "sinusoidal" (added to X₀), "rope" (rotates Q and K in every block) or None.
    ``causal=False`` removes the mask everywhere (chapter 8's leak experiment).
    ``tie``, ``gelu``, ``bias``, ``eps``, ``h_kv``: see :class:`GPTConfig` (the defaults keep the course's model).
    """

    def __init__(self, vocab_size: int, d_model: int = 64, h: int = 4, L: int = 2, d_ff: int | None = None,
                 max_T: int = 128, *, pos: str | None = "learned", norm: str = "pre", causal: bool = True,
                 backend: str = "sdpa", tie: bool = False, gelu: str = "exact", bias: bool = True,
                 eps: float = 1e-5, h_kv: int | None = None):
        super().__init__()
        vocab_size, d_model, L, max_T = check_positive(vocab_size=vocab_size, d_model=d_model, L=L, max_T=max_T)
        pos = check_choice(pos, "pos", ("learned", "sinusoidal", "rope", None))
        causal, tie, bias = check_flags(causal=causal, tie=tie, bias=bias)
        gelu = check_choice(gelu, "gelu", ("exact", "tanh"))
        eps = check_number(eps, "eps", above=0)
        d_head = check_divisible(d_model, h)
        check_kv_heads(h, h_kv)
        if pos == "sinusoidal" and d_model % 2:
            raise ValueError(f"pos='sinusoidal' adds sin/cos pairs, so d_model must be even, got d_model={d_model}")
        if pos == "rope" and d_head % 2:
            raise ValueError(f"pos='rope' rotates pairs of dimensions in every head, so d_head = d_model / h must "
                             f"be even, got d_head={d_head} (d_model={d_model}, h={h})")
        self.vocab_size, self.d_model, self.max_T, self.pos, self.causal = vocab_size, d_model, max_T, pos, causal
        self.embed = TokenEmbedding(vocab_size, d_model)                       # ids → X₀
        self.positions = LearnedPositions(max_T, d_model) if pos == "learned" else None
        self.blocks = nn.ModuleList(
            Block(d_model, h, d_ff, norm=norm, rope=pos == "rope", backend=backend, bias=bias, gelu=gelu,
                  eps=eps, h_kv=h_kv) for _ in range(L))
        self.ln_f = nn.LayerNorm(d_model, eps=eps, bias=bias)                  # final LayerNorm
        self.head = nn.Linear(d_model, vocab_size, bias=False)                 # X_L → logits
        if tie:
            self.head.weight = self.embed.table   # one (vocab_size, d_model) parameter, used twice
        self.config = GPTConfig(vocab_size, d_model, h, L, d_ff, max_T, pos=pos, norm=norm, causal=causal,
                                backend=backend, tie=tie, gelu=gelu, bias=bias, eps=eps, h_kv=h_kv)

    @classmethod
    def from_config(cls, config: GPTConfig) -> GPT:
        """Build a model from a :class:`GPTConfig` (the same as passing its fields as keywords)."""
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        return cls(**asdict(config))

    @classmethod
    def from_gpt2(cls, hf_model) -> GPT:
        """A GPT with the weights of a Hugging Face ``GPT2LMHeadModel`` (see :mod:`attnlib.gpt2`)."""
        from .gpt2 import from_gpt2
        return from_gpt2(hf_model)

    def to_gpt2(self):
        """This model as a Hugging Face ``GPT2LMHeadModel`` with copied weights (see :mod:`attnlib.gpt2`)."""
        from .gpt2 import to_gpt2
        return to_gpt2(self)

    def _check_ids(self, ids) -> None:
        """ids must be (B, T) token IDs of this vocabulary, on the model's device (B = 0 is allowed)."""
        check_ids(ids, self.vocab_size, like=self.embed.table)
        if ids.dim() != 2:
            raise ValueError(f"ids must be (B, T), got {tuple(ids.shape)}; use ids[None] for one sequence")

    def embed_tokens(self, ids: torch.Tensor, offset: int = 0, *,
                     positions: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) → X₀ (B, T, d_model): token embedding plus absolute position, if any.

        ``offset`` (≥ 0) is the position of the first token, when earlier positions sit in a KV cache.
        ``positions`` (B, T), one position per token (a padded batch, chapter 11), replaces the offset's.
        """
        self._check_ids(ids)
        offset, = check_nonnegative(offset=offset)
        T = ids.shape[-1]
        if offset + T > self.max_T:
            at = f" (offset={offset} + {T} new)" if offset else ""
            raise ValueError(f"T={offset + T}{at} exceeds the context length max_T={self.max_T}")
        if positions is not None:
            positions = check_positions(positions, T, batch=ids.shape[0]).to(ids.device)
        X = self.embed(ids)
        if self.pos == "learned":
            X = X + self.positions(T, offset, positions=positions)
        elif self.pos == "sinusoidal" and positions is None:
            X = X + sinusoidal_positions(offset + T, self.d_model)[offset:].to(X)
        elif self.pos == "sinusoidal":
            n = int(positions.max()) + 1 if positions.numel() else 1
            X = X + sinusoidal_positions(n, self.d_model).to(X)[positions]
        return X

    def _padding(self, ids: torch.Tensor, is_pad, offset: int):
        """is_pad (B, T_past + T) of the whole sequence so far → mask (B, 1, 1, T_past + T), positions (B, T)."""
        if is_pad is None:
            return None, None
        self._check_ids(ids)
        is_pad = _check_pad_flags(is_pad, ids, offset + ids.shape[-1])
        return padding_mask(is_pad), position_ids(is_pad)[:, offset:]

    def hidden_states(self, ids: torch.Tensor, *, is_pad: torch.Tensor | None = None) -> list[torch.Tensor]:
        """[X₀, X₁, …, X_L], each (B, T, d_model): the residual stream after every block."""
        mask, positions = self._padding(ids, is_pad, 0)
        X = [self.embed_tokens(ids, positions=positions)]
        for block in self.blocks:
            X.append(block(X[-1], causal=self.causal, mask=mask, positions=positions))   # reads X_l, never X₀
        return X

    def forward(self, ids: torch.Tensor, caches: list[KVCache] | None = None, *,
                is_pad: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) → logits (B, T, vocab_size) for the next token at every position.

        ``caches``: one KVCache per block, all holding the same T_past earlier positions of this batch;
        ids are then the tokens at positions T_past … T_past + T − 1.
        ``is_pad`` (B, T_past + T), True at a padding token of the whole sequence so far: padding is never
        read, and each row counts its positions from its own first real token (chapter 11).
        """
        offset = 0 if caches is None else self._cache_length(ids, caches)
        mask, positions = self._padding(ids, is_pad, offset)   # (B, 1, 1, T_past + T), (B, T)
        X = self.embed_tokens(ids, offset, positions=positions)
        for l, block in enumerate(self.blocks):
            X = block(X, causal=self.causal, cache=caches[l] if caches else None, mask=mask, positions=positions)
        return self.head(self.ln_f(X))

    def _cache_length(self, ids, caches) -> int:
        self._check_ids(ids)
        attn = self.blocks[0].attn
        return check_caches(caches, len(self.blocks), B=ids.shape[0], h=attn.h_kv, d_head=attn.d_head,
                            like=self.embed.table, h_query=attn.h)

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of predicting targets (B, T) from ids (B, T).

        A target equal to ``IGNORE_INDEX`` (−100) is skipped; at least one target must count.
        """
        self._check_ids(ids)
        targets = check_targets(targets, ids, self.vocab_size, IGNORE_INDEX)
        logits = self(ids)
        return F.cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1), ignore_index=IGNORE_INDEX)

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, n_new: int, *, use_cache: bool = True, temperature: float = 0.0,
                 generator: torch.Generator | None = None, is_pad: torch.Tensor | None = None) -> torch.Tensor:
        """Append n_new tokens to ids (B, T), one at a time. temperature 0 picks the most likely token.

        With ``use_cache`` each step feeds only the newest token and reuses the cached K and V of the
        earlier positions; without it each step recomputes the whole prefix. Both give the same tokens.
        The last new token is never fed back, so T + n_new − 1 positions must fit in max_T.
        ``is_pad`` (B, T): prompts of different lengths, **left**-padded (``pad_prompts(..., side="left")``),
        so that every row's newest token is in the last column; each row gets the tokens it would get alone.
        """
        self._check_ids(ids)
        if is_pad is not None:
            is_pad = _check_left_padding(is_pad, ids)
        (n_new,), (use_cache,) = check_positive(n_new=n_new), check_flags(use_cache=use_cache)
        temperature = check_number(temperature, "temperature", minimum=0)
        _check_generator(generator, ids.device)
        if ids.shape[-1] + n_new - 1 > self.max_T:
            raise ValueError(f"a prompt of T={ids.shape[-1]} and n_new={n_new} feeds T + n_new - 1 = "
                             f"{ids.shape[-1] + n_new - 1} positions, more than max_T={self.max_T}")
        caches = [KVCache() for _ in self.blocks] if use_cache else None
        step_input = ids
        for _ in range(n_new):
            logits = self(step_input if use_cache else ids, caches, is_pad=is_pad)[:, -1]
            if temperature > 0:
                nxt = torch.multinomial(_sampling_probs(logits, temperature), 1, generator=generator)
            else:
                nxt = logits.argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
            if is_pad is not None:
                is_pad = torch.cat([is_pad, torch.zeros_like(nxt, dtype=torch.bool)], dim=1)   # nxt is real
            step_input = nxt
        return ids


def _check_pad_flags(is_pad, ids: torch.Tensor, T: int) -> torch.Tensor:
    """is_pad (B, T) for the B rows of ids, on their device."""
    is_pad = check_is_pad(is_pad, B=ids.shape[0], T=T)
    if is_pad.device != ids.device:
        raise ValueError(f"is_pad is on {is_pad.device} but ids are on {ids.device}; move both to one device")
    return is_pad


def _check_left_padding(is_pad, ids: torch.Tensor) -> torch.Tensor:
    """is_pad (B, T) of left-padded prompts: pads only before each row's first real token, one real at least."""
    is_pad = _check_pad_flags(is_pad, ids, ids.shape[-1])
    empty = is_pad.all(-1).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"row {empty[0]} of is_pad is all padding: every prompt needs at least one real token")
    late = (is_pad[:, 1:] & ~is_pad[:, :-1]).any(-1).nonzero().flatten().tolist()
    if late:
        raise ValueError(f"generate needs left padding, but row {late[0]} of is_pad has a pad after a real token; "
                         "pad with pad_prompts(prompts, pad_id, side='left')")
    return is_pad


def _check_generator(generator, device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if generator.device.type != device.type:
        raise ValueError(f"generator is on {generator.device} but ids are on {device}; "
                         f"use torch.Generator({str(device.type)!r})")


def _sampling_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / temperature) in at least float32. Where a tiny temperature makes logits / temperature
    overflow, the gaps to the largest logit are divided instead: the same distribution, without inf − inf.
    """
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    scaled = z / temperature
    shifted = (z - z.amax(-1, keepdim=True)) / temperature
    return F.softmax(torch.where(torch.isfinite(scaled).all(-1, keepdim=True), scaled, shifted), -1)
