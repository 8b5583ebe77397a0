"""What trained heads do (the page after chapter 8): heads that specialise, measured.

A 2-block model is trained on sequences made of a random block of distinct tokens followed by the same
block again, ``[a b c … a b c …]``. The first half is random (each token a fresh draw among those not yet in
the block); the second half can be predicted, by a two-step circuit: heads that carry the previous token into
each position (in the shipped models, *recent-token heads* that read the last few positions) and an *induction
head* (find the earlier occurrence of the current token, read the token that came right after it).

Scores, for attention weights P (…, T, T) with queries on rows and keys on columns:

* previous-token score: the mean of P[i, i − 1] over the queries i ≥ 1;
* induction score: the mean of P[i, j + 1] over the queries i whose token appeared before, where j is the
  latest earlier position holding the same token (in a repeated block: the repeated half).

``python -m attnlib.induction`` (``make train-heads``) trains the shipped models (four seeds, one thread) and writes
``attnlib/data/heads.safetensors`` with the training losses in its metadata. On one machine the runs repeat bit for
bit; another processor may round differently, and the runs then drift apart after a few hundred steps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from ._validate import _show, boundary, require_ids, require_nonnegative, require_positive, require_shape
from .model import GPT, GPTConfig
from .train import _require_recipe_keys, _run_state, _save_runs, _timed_run, _weights_metadata

__all__ = [
    "CONFIG", "SEEDS", "WEIGHTS", "repeated_blocks", "head_weights", "previous_token_score",
    "induction_targets", "induction_score", "head_scores", "qk_weights", "half_losses", "ablate_heads",
    "new_model", "train_induction", "load_models", "stored_losses", "stored_recipe",
]

# The recipe: the model, and the training run. vocab_size ≥ the longest block, so a block's tokens can all differ.
CONFIG = {"model": GPTConfig(vocab_size=32, d_model=64, h=4, L=2, max_T=48, pos="learned"),
          "r_min": 6, "r_max": 24, "B": 32, "steps": 1500, "lr": 1e-3, "weight_decay": 0.01}
SEEDS = (0, 1, 2, 3)
WEIGHTS = Path(__file__).with_name("data") / "heads.safetensors"
_MODEL_KEYS = ("vocab_size", "d_model", "h", "L", "max_T", "pos")   # the model's fields the weights file keeps


def _targets_args(ids) -> None:
    require_shape(ids, "ids", "... T", float_only=False)
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"ids must hold integer token IDs, got dtype {ids.dtype}")


def _induction_args(P, ids) -> None:
    d = _require_table(P)
    _targets_args(ids)
    if ids.shape[-1] != d["T"]:
        raise ValueError(f"ids must have T={d['T']} positions like P, got shape {tuple(ids.shape)}")
    if ids.dim() == 2:
        if P.dim() != 4 or P.shape[0] != ids.shape[0]:
            raise ValueError(f"ids (B, T) go with P (B, h, T, T), got ids {tuple(ids.shape)} and "
                             f"P {tuple(P.shape)}")
    elif ids.dim() != 1:
        raise ValueError(f"ids must be (T,) or (B, T), got shape {tuple(ids.shape)}")
    if int(induction_targets(ids).any(-1).sum(-1).min()) == 0:
        raise ValueError("no query token appears twice in ids, so there is nothing to score")


def _previous_token_args(P) -> None:
    T = _require_table(P)["T"]
    if T < 2:
        raise ValueError(f"a previous-token score needs T >= 2 positions, got T={T}")


def repeated_blocks(B: int, r: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """Token IDs (B, 2r): per row, r distinct random tokens, then the same r tokens again."""
    B, r, vocab_size = require_positive(B=B, r=r, vocab_size=vocab_size)
    if r > vocab_size:
        raise ValueError(f"a block of r={r} distinct tokens needs vocab_size >= r, got {vocab_size}")
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(f"generator must be a CPU torch.Generator, got "
                        f"{getattr(generator, 'device', type(generator).__name__)}")
    block = torch.rand(B, vocab_size, generator=generator).argsort(dim=-1)[:, :r]
    return torch.cat([block, block], dim=1)


@torch.no_grad()
def head_weights(model: GPT, ids: torch.Tensor) -> torch.Tensor:
    """Weights (L, B, h, T, T) of every head of every block for token IDs (B, T).

    Block l's weights come from its input X_l through its first LayerNorm (the model must be Pre-Norm).
    """
    _require_gpt(model)
    X = model.hidden_states(ids)
    tables = []
    for block, X_l in zip(model.blocks, X):
        _, P = block.attn(block.ln_1(X_l), causal=model.config.causal, return_weights=True)
        tables.append(P)
    return torch.stack(tables)


@torch.no_grad()
def qk_weights(block, X_q: torch.Tensor, X_k: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """Weights (B, h, T, T) of a Pre-Norm block's heads whose queries read the stream X_q and whose keys read
    X_k, both (B, T, d_model) through the block's ln_1: which of two inputs each side needs."""
    if X_q.shape != X_k.shape:
        raise ValueError(f"X_q and X_k must have one shape, got {tuple(X_q.shape)} and {tuple(X_k.shape)}")
    Q, _, _ = block.attn.qkv(block.ln_1(X_q))          # (B, h, T, d_head)
    _, K, V = block.attn.qkv(block.ln_1(X_k))
    return block.attn.attend_heads(Q, K, V, causal=causal, return_weights=True)[1]


def _require_table(P) -> dict[str, int]:
    d = require_shape(P, "P", "... T T_k")
    if d["T"] != d["T_k"]:
        raise ValueError(f"P must end in a square (T, T) table, got shape {tuple(P.shape)}")
    return d


@boundary(_previous_token_args)
def previous_token_score(P: torch.Tensor) -> torch.Tensor:
    """P (…, T, T) → (…): the mean weight a query puts on the position just before it, over i ≥ 1."""
    return P.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


@boundary(_targets_args)
def induction_targets(ids: torch.Tensor) -> torch.Tensor:
    """ids (…, T) → bool (…, T, T): True at (i, j + 1) where j < i is the latest earlier
    position with the same token as position i. Rows of first-seen tokens are all False."""
    T = ids.shape[-1]
    i = torch.arange(T, device=ids.device)
    earlier = i[None, :] < i[:, None]                                  # (T, T): j < i
    same = (ids[..., :, None] == ids[..., None, :]) & earlier          # (…, i, j)
    latest = torch.where(same, i, -1).amax(dim=-1)                     # (…, i), −1: none
    target = torch.zeros(*ids.shape, T, dtype=torch.bool, device=ids.device)
    rows = latest >= 0
    target[rows.nonzero(as_tuple=True) + ((latest[rows] + 1),)] = True
    return target


@boundary(_induction_args)
def induction_score(P: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """P (B, h, T, T) with ids (B, T), or P (…, T, T) with ids (T,) → P.shape[:-2]: the mean
    weight on the token right after the previous occurrence of the query's token, over the
    queries that have one."""
    target = induction_targets(ids)           # (…, T, T): True at (i, j + 1)
    if ids.dim() == 2:
        target = target[:, None]              # (B, 1, T, T): the same targets for every head
    counted = target.any(-1).sum(-1)          # how many queries have an earlier copy
    return (P * target).sum(dim=(-2, -1)) / counted


def head_scores(model: GPT, ids: torch.Tensor) -> torch.Tensor:
    """(L, h, 2): per block and head, the previous-token and the induction score on ids (B, T)."""
    P = head_weights(model, ids)                       # (L, B, h, T, T)
    prev = previous_token_score(P).mean(1)             # (L, h)
    ind = torch.stack([induction_score(P_l, ids) for P_l in P]).mean(1)
    return torch.stack([prev, ind], dim=-1)


@torch.no_grad()
def half_losses(model: GPT, ids: torch.Tensor) -> tuple[float, float]:
    """Mean next-token loss on ids (B, 2r): (first half, repeated half).

    First half: the predictions of tokens 1 … r − 1. Repeated half: of tokens r + 1 … 2r − 1 (token r,
    where the repeat starts, cannot be known in advance and counts in neither).
    """
    _require_gpt(model)
    require_ids(ids, model.config.vocab_size, like=model.embed.table)
    T = ids.shape[-1]
    if ids.dim() != 2 or T % 2 or T < 4:
        raise ValueError(f"ids must be (B, 2r) with r >= 2, got shape {tuple(ids.shape)}")
    r = T // 2
    loss = F.cross_entropy(model(ids[:, :-1]).transpose(1, 2), ids[:, 1:], reduction="none")  # (B, T-1)
    return loss[:, :r - 1].mean().item(), loss[:, r:].mean().item()


@contextlib.contextmanager
def ablate_heads(model: GPT, heads):
    """Within the ``with`` block, every (layer, head) pair in ``heads`` outputs zeros: the head's d_head
    columns of the concatenated heads are zeroed before W_O mixes them. ``layer`` indexes ``model.blocks``, so
    head n of block l (blocks numbered 1 … L) is the pair (l - 1, n)."""
    _require_gpt(model)
    if isinstance(heads, tuple) and len(heads) == 2 and all(isinstance(v, int) for v in heads):
        raise TypeError(f"heads must be a list of (layer, head) pairs, got the single pair {heads}; "
                        f"write [{heads}]")
    if not isinstance(heads, (list, tuple, set)):
        raise TypeError(f"heads must be a list of (layer, head) pairs, got {_show(heads)}")
    columns = {}
    for pair in heads:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise TypeError(f"heads must hold (layer, head) pairs, got {pair!r}")
        layer, head = require_nonnegative(layer=pair[0], head=pair[1])
        if layer >= len(model.blocks):
            raise ValueError(f"layer must be below L={len(model.blocks)}, got {layer}")
        attn = model.blocks[layer].attn
        if head >= attn.h:
            raise ValueError(f"head must be below h={attn.h}, got {head}")
        columns.setdefault(layer, []).extend(range(head * attn.d_head, (head + 1) * attn.d_head))

    def zeroer(cols):
        def zero(module, inputs):
            x = inputs[0].clone()
            x[..., cols] = 0
            return (x,)
        return zero

    handles = [model.blocks[layer].attn.W_O.register_forward_pre_hook(zeroer(cols))
               for layer, cols in columns.items()]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def new_model(seed: int, config: dict = CONFIG) -> GPT:
    """The untrained model of the recipe, its weights drawn from torch's RNG seeded with ``seed``."""
    seed, = require_nonnegative(seed=seed)
    torch.manual_seed(seed)
    return GPT(_require_recipe(config)["model"])


def train_induction(seed: int, steps: int | None = None, config: dict = CONFIG) -> tuple[GPT, list[float]]:
    """Train the recipe's model with ``seed`` (weights and batches) for ``steps`` steps (default: all).

    Every step draws a block length r from r_min … r_max, so a head cannot find the earlier copy by a
    fixed distance: it has to look for the token. Run it with one thread to repeat the stored losses
    (their first steps on any machine, all of them on the machine that trained them).
    """
    seed, = require_nonnegative(seed=seed)
    config = _require_recipe(config)
    steps, = require_positive(steps=config["steps"] if steps is None else steps)
    model = new_model(seed, config)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    model.train()
    losses = []
    for _ in range(steps):
        r = int(torch.randint(config["r_min"], config["r_max"] + 1, (1,), generator=g))
        ids = repeated_blocks(config["B"], r, config["model"].vocab_size, g)
        loss = model.loss(ids[:, :-1], ids[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return model, losses


def load_models(path: str | Path = WEIGHTS) -> dict[int, GPT]:
    """The shipped trained models, ``{seed: GPT}``, read from a local safetensors file."""
    from safetensors.torch import load_file

    meta = _metadata(path)
    tensors, recipe = load_file(str(path)), _recipe_from_file(meta["config"])
    models = {}
    for seed in meta["seeds"]:
        model = new_model(seed, recipe)
        model.load_state_dict(_run_state(tensors, f"seed{seed}"))
        models[seed] = model.eval()
    return models


def stored_recipe(path: str | Path = WEIGHTS) -> dict:
    """The recipe the shipped models were trained with, as the weights file records it: a CONFIG-like dict, its
    "model" a GPTConfig beside the training run's keys (r_min, r_max, B, steps, lr, weight_decay)."""
    return _recipe_from_file(_metadata(path)["config"])


def stored_losses(path: str | Path = WEIGHTS) -> dict[int, list[float]]:
    """The training loss of every step of every shipped seed, as the training script recorded them."""
    return {int(k.removeprefix("seed")): v for k, v in _metadata(path)["losses"].items()}   # "0" or "seed0"


def _metadata(path) -> dict:
    return _weights_metadata(path, ("config", "seeds", "losses"), "attnlib.induction.load_models",
                             "`python -m attnlib.induction` writes the shipped one")


def _recipe_from_file(flat: dict) -> dict:
    """The file's recipe (the model's fields beside the training run's, as ``json`` keeps them) → a CONFIG."""
    model = GPTConfig(**{k: flat[k] for k in _MODEL_KEYS})
    return {"model": model, **{k: v for k, v in flat.items() if k not in _MODEL_KEYS}}


def _recipe_to_file(config: dict) -> dict:
    model = config["model"]
    return {**{k: getattr(model, k) for k in _MODEL_KEYS}, **{k: v for k, v in config.items() if k != "model"}}


def _require_recipe(config) -> dict:
    """A dict with every key of CONFIG, its "model" a GPTConfig."""
    _require_recipe_keys(config, CONFIG, "attnlib.induction.CONFIG")
    r_min, r_max = require_positive(r_min=config["r_min"], r_max=config["r_max"])
    if r_min > r_max or 2 * r_max - 1 > config["model"].max_T or r_max > config["model"].vocab_size:
        raise ValueError(f"the blocks need r_min <= r_max, 2·r_max - 1 <= max_T={config['model'].max_T} "
                         f"and r_max <= vocab_size={config['model'].vocab_size}, got r_min={r_min}, r_max={r_max}")
    return config


def _require_gpt(model) -> None:
    if not isinstance(model, GPT):
        raise TypeError(f"model must be an attnlib.GPT, got {type(model).__name__}")
    if model.config.norm != "pre":
        raise ValueError("head weights are read through ln_1, which needs a Pre-Norm model (norm='pre')")


def main(argv: list[str] | None = None) -> None:
    """Train every seed of the recipe with one thread and write the weights and the losses."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--out", default=str(WEIGHTS), help="where to write the safetensors file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = {f"seed{seed}": _timed_run(f"seed {seed}", lambda seed=seed: train_induction(seed), last=50)
            for seed in SEEDS}
    _save_runs(args.out, runs, {"config": json.dumps(_recipe_to_file(CONFIG)), "seeds": json.dumps(list(SEEDS))})


if __name__ == "__main__":
    main()
