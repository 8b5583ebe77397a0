"""Chapter 8: a compact GPT-style model. token IDs (B, T) → X₀ → L blocks → X_L → LayerNorm → logits.

Each block has its own parameters: the structure repeats, the weights do not. Every option lives in one
:class:`GPTConfig`; the model reads it as ``model.config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import (
    _show,
    boundary,
    require_caches,
    require_choice,
    require_device,
    require_divisible,
    require_fits,
    require_flags,
    require_ids,
    require_is_pad,
    require_kv_heads,
    require_nonnegative,
    require_number,
    require_positions,
    require_positive,
    require_readable,
    require_targets,
    require_tensor,
)
from .attention import padding_mask
from .batches import position_ids
from .block import Block
from .embedding import TokenEmbedding
from .heads import KVCache
from .position import LearnedPositions, sinusoidal_positions

__all__ = ["GPT", "GPTConfig", "IGNORE_INDEX"]

IGNORE_INDEX = -100   # a target equal to this is skipped by GPT.loss (the value torch's cross_entropy uses)


# ------------------------------------------------------------------------------ the config's checks


def _config_fields(c: GPTConfig) -> dict:
    """Every field of a GPTConfig checked, as plain Python values, with d_ff, h_kv and d_head filled in."""
    vocab_size, d_model, h, L, max_T = require_positive(vocab_size=c.vocab_size, d_model=c.d_model, h=c.h, L=c.L,
                                                        max_T=c.max_T)
    d_ff, = require_positive(d_ff=4 * d_model if c.d_ff is None else c.d_ff)
    d_head, h_kv = require_divisible(d_model, h), require_kv_heads(h, c.h_kv)
    pos = require_choice(c.pos, "pos", ("learned", "sinusoidal", "rope", None))
    causal, tie, bias = require_flags(causal=c.causal, tie=c.tie, bias=c.bias)
    if pos == "sinusoidal" and d_model % 2:
        raise ValueError(f"pos='sinusoidal' adds sin/cos pairs, so d_model must be even, got d_model={d_model}")
    if pos == "rope" and d_head % 2:
        raise ValueError(f"pos='rope' rotates pairs of dimensions in every head, so d_head = d_model / h must "
                         f"be even, got d_head={d_head} (d_model={d_model}, h={h})")
    return dict(vocab_size=vocab_size, d_model=d_model, h=h, L=L, d_ff=d_ff, max_T=max_T, pos=pos,
                norm=require_choice(c.norm, "norm", ("pre", "post")), causal=causal,
                backend=require_choice(c.backend, "backend", ("sdpa", "plain")), tie=tie,
                gelu=require_choice(c.gelu, "gelu", ("exact", "tanh")), bias=bias,
                eps=require_number(c.eps, "eps", above=0), h_kv=h_kv, d_head=d_head)


def _require_config(config) -> GPTConfig:
    """GPT is built from a GPTConfig, and from nothing else: one way, so that model.config is always what built it."""
    if isinstance(config, GPTConfig):
        return config
    if isinstance(config, Mapping):
        hint = "GPT(GPTConfig(**fields))"
    elif isinstance(config, GPT):
        hint = "GPT(model.config)"
    else:
        hint = "GPT(GPTConfig(vocab_size, d_model, h, L, ...))"
    raise TypeError(f"GPT takes a GPTConfig, got {_show(config)} ({type(config).__name__}); write {hint}")


def _require_fits(c: GPTConfig) -> None:
    """A model that cannot fit in memory fails here, naming the size that asks for the most (biases left out),
    instead of in the allocator (or in the operating system, after it has swapped for minutes)."""
    block = c.d_model * (c.h + 2 * c.h_kv) * c.d_head + c.d_model ** 2 + 2 * c.d_model * c.d_ff
    require_fits("this GPTConfig", {
        f"vocab_size={c.vocab_size} (d_model={c.d_model})": c.vocab_size * c.d_model * (1 if c.tie else 2),
        f"max_T={c.max_T} (d_model={c.d_model})": c.max_T * c.d_model if c.pos == "learned" else 0,
        f"L={c.L} blocks (d_model={c.d_model}, d_ff={c.d_ff})": c.L * block})


# ------------------------------------------------------------------------------ the entry points' checks


def _init_args(self, config) -> dict:
    config = _require_config(config)
    _require_fits(config)
    return {"config": config}


def _require_model_ids(model: GPT, ids) -> torch.Tensor:
    """ids (B, T) of the model's vocabulary on the model's device (B = 0 is allowed): the one read of ids.min()
    and ids.max() of a forward pass."""
    require_readable(require_tensor(ids, "ids"), "ids")   # a meta tensor has no IDs to read
    require_ids(ids, model.config.vocab_size, like=model.embed.table)
    if ids.dim() != 2:
        raise ValueError(f"ids must be (B, T), got {tuple(ids.shape)}; use ids[None] for one sequence")
    return ids


def _require_context(model: GPT, T: int, offset: int) -> None:
    max_T = model.config.max_T
    if offset + T > max_T:
        at = f" (offset={offset} + {T} new)" if offset else ""
        raise ValueError(f"T={offset + T}{at} exceeds the context length max_T={max_T}")


def _embed_args(self, ids, offset, positions) -> dict:
    ids = _require_model_ids(self, ids)
    offset, = require_nonnegative(offset=offset)
    _require_context(self, ids.shape[-1], offset)
    if positions is not None:
        positions = require_positions(positions, ids.shape[-1], batch=ids.shape[0]).to(ids.device)
        if positions.numel() and int(positions.max()) >= self.config.max_T:
            raise ValueError(f"position {int(positions.max())} exceeds the context length: positions must "
                             f"be < max_T={self.config.max_T}")
    return {"offset": offset, "positions": positions}


def _require_pad_flags(is_pad, ids: torch.Tensor, T: int) -> torch.Tensor:
    """is_pad (B, T) for the B rows of ids, on their device."""
    is_pad = require_is_pad(is_pad, B=ids.shape[0], T=T)
    if is_pad.device != ids.device:
        raise ValueError(f"is_pad is on {is_pad.device} but ids are on {ids.device}; move both to one device")
    return is_pad


def _hidden_args(self, ids, is_pad) -> dict:
    ids = _require_model_ids(self, ids)
    _require_context(self, ids.shape[-1], 0)
    return {"is_pad": None if is_pad is None else _require_pad_flags(is_pad, ids, ids.shape[-1])}


def _cache_length(model: GPT, ids: torch.Tensor, caches) -> int:
    """T_past of one KVCache per block (checked as a list of KVCaches first: a list of None is not one)."""
    if isinstance(caches, (list, tuple)):
        for l, cache in enumerate(caches):
            if not isinstance(cache, KVCache):
                raise TypeError(f"caches[{l}] must be a KVCache, got {_show(cache)}; start from "
                                "[KVCache() for _ in model.blocks]")
    attn = model.blocks[0].attn
    return require_caches(caches, len(model.blocks), B=ids.shape[0], h=attn.h_kv, d_head=attn.d_head,
                          like=model.embed.table, h_query=attn.h)


def _forward_args(self, ids, caches, is_pad) -> dict:
    ids = _require_model_ids(self, ids)
    offset = 0 if caches is None else _cache_length(self, ids, caches)
    _require_context(self, ids.shape[-1], offset)
    return {"is_pad": None if is_pad is None else _require_pad_flags(is_pad, ids, offset + ids.shape[-1])}


def _loss_args(self, ids, targets) -> dict:
    ids = _require_model_ids(self, ids)
    _require_context(self, ids.shape[-1], 0)
    return {"targets": require_targets(targets, ids, self.config.vocab_size, IGNORE_INDEX)}


def _require_left_padding(is_pad, ids: torch.Tensor) -> torch.Tensor:
    """is_pad (B, T) of left-padded prompts: pads only before each row's first real token, one real at least."""
    is_pad = _require_pad_flags(is_pad, ids, ids.shape[-1])
    empty, late = torch.stack([is_pad.all(-1), (is_pad[:, 1:] & ~is_pad[:, :-1]).any(-1)]).tolist()   # one read
    if any(empty):
        raise ValueError(f"row {empty.index(True)} of is_pad is all padding: every prompt needs at least one real "
                         "token")
    if any(late):
        raise ValueError(f"generate needs left padding, but row {late.index(True)} of is_pad has a pad after a real "
                         "token; pad with pad_prompts(prompts, pad_id, side='left')")
    return is_pad


def _require_generator(generator, device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if generator.device.type != device.type:
        raise ValueError(f"generator is on {generator.device} but ids are on {device}; "
                         f"use torch.Generator({str(device.type)!r})")


def _generate_args(self, ids, n_new, use_cache, temperature, generator, is_pad) -> dict:
    ids = _require_model_ids(self, ids)
    is_pad = None if is_pad is None else _require_left_padding(is_pad, ids)
    (n_new,), (use_cache,) = require_positive(n_new=n_new), require_flags(use_cache=use_cache)
    temperature = require_number(temperature, "temperature", minimum=0)
    _require_generator(generator, ids.device)
    T, max_T = ids.shape[-1], self.config.max_T
    if T + n_new - 1 > max_T:
        raise ValueError(f"a prompt of T={T} and n_new={n_new} feeds T + n_new - 1 = {T + n_new - 1} "
                         f"positions, more than max_T={max_T}")
    return {"is_pad": is_pad, "n_new": n_new, "use_cache": use_cache, "temperature": temperature}


@dataclass(frozen=True)
class GPTConfig:
    """Every option of :class:`GPT` in one place: ``GPT(config)`` builds the model, ``model.config`` gives it
    back. The defaults are the course's model; GPT-2 uses ``tie=True, gelu="tanh"`` (:mod:`attnlib.gpt2`).

    ``pos``: "learned" or "sinusoidal" (added to X₀), "rope" (rotates Q and K in every block) or None.
    ``causal=False`` removes the mask everywhere (chapter 8's leak experiment).
    ``tie``: the output head reuses the token embedding table (head.weight is embed.table).
    ``gelu``: "exact" or "tanh" (the approximation GPT-2 calls ``gelu_new``).
    ``bias``: False removes every bias (projections, MLP, LayerNorm shifts). ``eps``: every LayerNorm's ε.
    ``h_kv``: key/value heads per attention layer, each shared by h / h_kv query heads (chapter 10).

    The options are checked once, here, and stored as plain Python values (a NumPy size becomes an int).
    The derived sizes are filled in: ``d_ff`` None → 4·d_model, ``h_kv`` None → h, ``d_head`` = d_model / h.
    ``dataclasses.replace(config, d_model=…)`` keeps the filled-in d_ff and h_kv: pass them again if they
    should follow.
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
    d_head: int = field(init=False, repr=False)

    def __post_init__(self):
        for name, value in _config_fields(self).items():
            object.__setattr__(self, name, value)   # frozen: filled in once, here


def _frozen_setattr(self, name, value):
    """``config.h = 3`` says what to do instead: a config is checked once, when it is made."""
    raise FrozenInstanceError(f"config.{name} cannot be set: a GPTConfig is frozen, checked once when it is made "
                              f"(config.{name}={getattr(self, name, None)!r}); expected a new config, "
                              f"dataclasses.replace(config, {name}={value!r}), got an assignment of {value!r}")


GPTConfig.__setattr__ = _frozen_setattr   # replaces the dataclass's own, whose message names no way out
_CONFIG_FIELDS = frozenset(f.name for f in fields(GPTConfig))


class GPT(nn.Module):
    """A decoder-only Transformer built from a :class:`GPTConfig`.

    ``GPT(GPTConfig(vocab_size, d_model, h, L, pos="rope", …))``: the config is the one way to build it, and
    ``model.config`` gives it back.
    """

    @boundary(_init_args)
    def __init__(self, config: GPTConfig):
        super().__init__()
        c = self.config = config
        self.embed = TokenEmbedding(c.vocab_size, c.d_model)                   # ids → X₀
        self.positions = LearnedPositions(c.max_T, c.d_model) if c.pos == "learned" else None
        self.blocks = nn.ModuleList(
            Block(c.d_model, c.h, c.d_ff, norm=c.norm, rope=c.pos == "rope", backend=c.backend, bias=c.bias,
                  gelu=c.gelu, eps=c.eps, h_kv=c.h_kv) for _ in range(c.L))
        self.ln_f = nn.LayerNorm(c.d_model, eps=c.eps, bias=c.bias)           # final LayerNorm
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)            # X_L → logits
        if c.tie:
            self.head.weight = self.embed.table   # one (vocab_size, d_model) parameter, used twice

    def __setattr__(self, name, value):
        """An option of the config (``model.causal = False``) cannot be set on the model: it would change nothing."""
        if name in _CONFIG_FIELDS:
            raise AttributeError(f"model.{name} is an option of the model's frozen config, model.config.{name}="
                                 f"{getattr(self.config, name)!r}; setting it on the model would change nothing. "
                                 f"Build a new model: GPT(dataclasses.replace(model.config, {name}={value!r})), and "
                                 "copy the weights with load_state_dict(model.state_dict())")
        super().__setattr__(name, value)

    def to(self, *args, **kwargs):
        """``nn.Module.to``; a device this machine lacks ('cuda' without CUDA) is named here, not deep in torch."""
        device = kwargs.get("device", next((a for a in args if isinstance(a, (str, torch.device))), None))
        if device is not None:
            require_device(device)
        return super().to(*args, **kwargs)

    @boundary(_embed_args)
    def embed_tokens(self, ids: torch.Tensor, offset: int = 0, *,
                     positions: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) → X₀ (B, T, d_model): token embedding plus absolute position, if any.

        ``offset`` (≥ 0) is the position of the first token, when earlier positions sit in a KV cache.
        ``positions`` (B, T), one position per token (a padded batch, chapter 11), replaces the offset's.
        """
        c, T = self.config, ids.shape[-1]
        X = self.embed(ids)                                                    # (B, T, d_model)
        if c.pos == "learned":
            X = X + self.positions(T, offset, positions=positions)
        elif c.pos == "sinusoidal":
            PE = sinusoidal_positions(c.max_T, c.d_model).to(X)                # (max_T, d_model)
            X = X + (PE[offset:offset + T] if positions is None else PE[positions])
        return X

    def _padding(self, is_pad: torch.Tensor | None, offset: int):
        """is_pad (B, T_past + T) of the whole sequence so far → mask (B, 1, 1, T_past + T), positions (B, T)."""
        if is_pad is None:
            return None, None
        return padding_mask(is_pad), position_ids(is_pad)[:, offset:]

    @boundary(_hidden_args)
    def hidden_states(self, ids: torch.Tensor, *, is_pad: torch.Tensor | None = None) -> list[torch.Tensor]:
        """[X₀, X₁, …, X_L], each (B, T, d_model): the residual stream after every block."""
        mask, positions = self._padding(is_pad, 0)
        X = [self.embed_tokens(ids, positions=positions)]
        for block in self.blocks:
            X.append(block(X[-1], causal=self.config.causal, mask=mask, positions=positions))   # block l reads X_{l−1}
        return X

    @boundary(_forward_args)
    def forward(self, ids: torch.Tensor, caches: list[KVCache] | None = None, *,
                is_pad: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) → logits (B, T, vocab_size) for the next token at every position.

        ``caches``: one KVCache per block, all holding the same T_past earlier positions of this batch;
        ids are then the tokens at positions T_past … T_past + T − 1.
        ``is_pad`` (B, T_past + T), True at a padding token of the whole sequence so far: padding is never
        read, and each row counts its positions from its own first real token (chapter 11).
        """
        offset = len(caches[0]) if caches else 0                   # T_past positions already cached
        mask, positions = self._padding(is_pad, offset)            # (B, 1, 1, T_past + T), (B, T)
        X = self.embed_tokens(ids, offset, positions=positions)    # (B, T, d_model)
        for l, block in enumerate(self.blocks):
            X = block(X, causal=self.config.causal, cache=caches[l] if caches else None, mask=mask,
                      positions=positions)
        return self.head(self.ln_f(X))                             # (B, T, vocab_size)

    @boundary(_loss_args)
    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of predicting targets (B, T) from ids (B, T).

        A target equal to ``IGNORE_INDEX`` (−100) is skipped; at least one target must count.
        """
        logits = self(ids)                                         # (B, T, vocab_size)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)

    @torch.no_grad()
    @boundary(_generate_args)
    def generate(self, ids: torch.Tensor, n_new: int, *, use_cache: bool = True, temperature: float = 0.0,
                 generator: torch.Generator | None = None, is_pad: torch.Tensor | None = None) -> torch.Tensor:
        """Append n_new tokens to ids (B, T), one at a time. temperature 0 picks the most likely token.

        With ``use_cache`` each step feeds only the newest token and reuses the cached K and V of the
        earlier positions; without it each step recomputes the whole prefix. Both give the same tokens.
        The last new token is never fed back, so T + n_new − 1 positions must fit in max_T.
        ``is_pad`` (B, T): prompts of different lengths, **left**-padded (``pad_prompts(..., side="left")``),
        so that every row's newest token is in the last column; each row gets the tokens it would get alone.
        """
        caches = [KVCache() for _ in self.blocks] if use_cache else None
        step_input = ids
        for _ in range(n_new):
            logits = self(step_input if use_cache else ids, caches, is_pad=is_pad)[:, -1]   # (B, vocab_size)
            if temperature > 0:
                nxt = torch.multinomial(_sampling_probs(logits, temperature), 1, generator=generator)
            else:
                nxt = logits.argmax(-1, keepdim=True)                                        # (B, 1)
            ids = torch.cat([ids, nxt], dim=1)
            if is_pad is not None:
                is_pad = torch.cat([is_pad, torch.zeros_like(nxt, dtype=torch.bool)], dim=1)   # nxt is real
            step_input = nxt
        return ids


def _sampling_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / temperature) in at least float32. Where a tiny temperature makes logits / temperature
    overflow, the gaps to the largest logit are divided instead: the same distribution, without inf − inf.
    """
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    scaled = z / temperature
    shifted = (z - z.amax(-1, keepdim=True)) / temperature
    return F.softmax(torch.where(torch.isfinite(scaled).all(-1, keepdim=True), scaled, shifted), -1)
