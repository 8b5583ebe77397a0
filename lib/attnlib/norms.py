"""Chapter 7: eight blocks in training, with and without the residual additions, Pre-Norm against Post-Norm.

The recipe (:data:`DEEP`) is an 8-block character GPT of the fables, trained by Adam at a fixed rate, in four
variants (:data:`DEEP_VARIANTS`) that start from the same weights. Seed s draws both the initial weights and the
training windows. ``python -m attnlib.norms`` (``make train-norms``) runs every variant on every seed of
:data:`DEEP_SEEDS` with one thread and writes each run's losses, gradients and position spread to
``attnlib/data/norm_runs.json``, which the chapter reads with :func:`stored_norm_runs`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ._validate import (
    boundary,
    require_choice,
    require_flags,
    require_ids,
    require_input,
    require_nonnegative,
    require_positive,
    require_targets,
)
from .block import Block
from .model import GPT, IGNORE_INDEX, GPTConfig
from .train import _read_runs, _require_data, _require_model, _require_window, random_batch

__all__ = ["DEEP", "DEEP_VARIANTS", "DEEP_SEEDS", "NORM_RUNS", "WithoutResidual", "deep_model", "train_deep",
           "block_grad_norms", "position_spread", "stored_norm_runs"]

DEEP = {"d_model": 32, "h": 4, "L": 8, "T": 16, "B": 32, "steps": 100, "lr": 5e-3, "text": "fables"}
DEEP_VARIANTS = {"Pre": {"norm": "pre", "residual": True, "warmup": 0},
                 "Post": {"norm": "post", "residual": True, "warmup": 0},
                 "Post, warm-up": {"norm": "post", "residual": True, "warmup": 50},
                 "no residual": {"norm": "pre", "residual": False, "warmup": 0}}
DEEP_SEEDS = (0, 1, 2, 3, 4, 5)
NORM_RUNS = Path(__file__).with_name("data") / "norm_runs.json"
_PROBE_SEED = 1   # the fixed batch that gradients and spreads are measured on


def _without_residual_args(self, block) -> None:
    if not isinstance(block, Block):
        raise TypeError(f"block must be a Block (one of model.blocks), got {type(block).__name__}")


def _without_residual_forward_args(self, X, causal, unused) -> dict:
    require_input(X, "X", "B T d_model", self.block.ln_1.weight, d_model=self.block.d_model)
    return {"causal": require_flags(causal=causal)[0]}


class WithoutResidual(torch.nn.Module):
    """A Pre-Norm block's own parts, wired without its two residual additions: X (B, T, d_model) → same."""

    @boundary(_without_residual_args)
    def __init__(self, block):
        super().__init__()
        self.block = block

    @boundary(_without_residual_forward_args)
    def forward(self, X, causal=True, **unused):     # GPT also passes cache, mask, ...
        b = self.block
        H = b.attn(b.ln_1(X), causal=causal)         # not X + Attention(LN₁(X))
        return b.mlp(b.ln_2(H))                      # not H + MLP(LN₂(H))


# ------------------------------------------------------------------------------------------ argument specs
def _deep_model_args(variant, seed, vocab_size) -> dict:
    (seed,), (vocab_size,) = require_nonnegative(seed=seed), require_positive(vocab_size=vocab_size)
    return {"variant": require_choice(variant, "variant", tuple(DEEP_VARIANTS)), "seed": seed,
            "vocab_size": vocab_size}


def _train_deep_args(model, data, warmup, seed, stop) -> dict:
    _require_model(model)
    warmup, seed = require_nonnegative(warmup=warmup, seed=seed)
    stop = None if stop is None else require_positive(stop=stop)[0]
    _require_data(data, model)
    return {"warmup": warmup, "seed": seed, "stop": stop}


def _measure_args(model, ids, targets=None) -> dict:
    _require_model(model)
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
        raise TypeError(f"ids must be a (B, T) tensor of token IDs, got {getattr(ids, 'shape', type(ids).__name__)}")
    vocab_size = model.config.vocab_size   # the model's own checks are skipped inside this boundary
    require_ids(ids, vocab_size, like=next(model.parameters()))
    _require_window(model, ids.shape[-1])
    return {} if targets is None else {"targets": require_targets(targets, ids, vocab_size, IGNORE_INDEX)}


@boundary(_deep_model_args)
def deep_model(variant: str = "Pre", seed: int = 0, vocab_size: int = 43) -> GPT:
    """The untrained 8-block character GPT of the recipe; every variant draws the same weights for one seed."""
    v = DEEP_VARIANTS[variant]
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab_size, d_model=DEEP["d_model"], h=DEEP["h"], L=DEEP["L"], max_T=DEEP["T"],
                norm=v["norm"]))
    if not v["residual"]:
        model.blocks = torch.nn.ModuleList(WithoutResidual(b) for b in model.blocks)
    return model


@boundary(_train_deep_args)
def train_deep(model, data: torch.Tensor, *, warmup: int = 0, seed: int = 0,
               stop: int | None = None) -> list[float]:
    """Adam on random windows (B, T) of data (N,), the rate rising linearly to DEEP["lr"] over the first
    ``warmup`` steps; windows drawn with ``seed``. Returns the loss of every step (the first ``stop`` only)."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=DEEP["lr"])
    losses = []
    with torch.enable_grad():
        for step in range(DEEP["steps"] if stop is None else min(stop, DEEP["steps"])):
            opt.param_groups[0]["lr"] = DEEP["lr"] * min(1.0, (step + 1) / max(warmup, 1))
            x, y = random_batch(data, DEEP["T"], DEEP["B"], gen)
            loss = model.loss(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


@boundary(_measure_args)
def block_grad_norms(model, ids: torch.Tensor, targets: torch.Tensor) -> list[float]:
    """The norm of the loss gradient over each block's parameters, one per block (ids, targets (B, T))."""
    with torch.enable_grad():
        model.zero_grad()
        model.loss(ids, targets).backward()
    return [torch.cat([p.grad.flatten() for p in b.parameters()]).norm().item() for b in model.blocks]


@boundary(_measure_args)
def position_spread(model, ids: torch.Tensor, targets: torch.Tensor | None = None) -> float:
    """The share of X_L (B, T, d_model) that differs from position to position: ‖X_L − mean over T‖ / ‖X_L‖.
    0 means every position holds the same vector."""
    with torch.no_grad():
        X_L = model.hidden_states(ids)[-1]
        return ((X_L - X_L.mean(dim=1, keepdim=True)).norm() / X_L.norm()).item()


def _deep_data():
    from .text import CharTokenizer, load_text

    text = load_text(DEEP["text"])
    tok = CharTokenizer(text)
    return tok, tok.encode(text)


def probe_batch(data: torch.Tensor):
    """The fixed batch (B, T) of the recipe's shape that gradients and spreads are measured on."""
    return random_batch(data, DEEP["T"], DEEP["B"], torch.Generator().manual_seed(_PROBE_SEED))


def _norm_run(variant: str, seed: int, tok, data, probe) -> dict:
    model = deep_model(variant, seed, tok.vocab_size)
    losses = train_deep(model, data, warmup=DEEP_VARIANTS[variant]["warmup"], seed=seed)
    return {"losses": [round(x, 6) for x in losses],
            "grads": [float(f"{x:.6g}") for x in block_grad_norms(model, *probe)],   # some are tiny
            "spread": round(position_spread(model, probe[0]), 6)}


def write_norm_runs(path: str | Path = NORM_RUNS, seeds=DEEP_SEEDS) -> None:
    """Train every variant on every seed (one thread) and write each run's loss of every step, each block's
    gradient norm after training and the position spread of X_L, both on the probe batch."""
    torch.set_num_threads(1)
    tok, data = _deep_data()
    probe = probe_batch(data)
    runs = {}
    for variant in DEEP_VARIANTS:
        runs[variant] = {}
        for seed in seeds:
            t0 = time.perf_counter()
            runs[variant][str(seed)] = run = _norm_run(variant, seed, tok, data, probe)
            print(f"{variant:<14} seed {seed}: {time.perf_counter() - t0:.1f} s, "
                  f"last 10 steps {sum(run['losses'][-10:]) / 10:.3f}", flush=True)
    out = {"recipe": DEEP, "variants": DEEP_VARIANTS, "seeds": list(seeds), "torch": torch.__version__,
           "runs": runs}
    Path(path).write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({Path(path).stat().st_size / 1e3:.0f} KB)")


def stored_norm_runs(path: str | Path = NORM_RUNS) -> dict:
    """The stored runs, ``{variant: {seed: {"losses": [...], "grads": [...], "spread": float}}}``, int seeds."""
    runs = _read_runs(path, "stored_norm_runs", "stored runs", ("recipe", "variants", "seeds", "runs"),
                      "make train-norms")
    return {variant: {int(s): run for s, run in by_seed.items()} for variant, by_seed in runs.items()}


if __name__ == "__main__":
    write_norm_runs()
