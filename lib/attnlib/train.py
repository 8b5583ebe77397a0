"""Chapter 8: a tiny, deterministic training loop for :class:`attnlib.model.GPT` on a shipped text.

Chapter 8's recipe (:data:`CONFIG`) trains a 2-block character model on the fables, once with the causal mask
and once without it. Another processor or kernel path trains weights that differ in their last digits, so the
chapter's samples, figure and printed values come from the weights of one run, shipped with the library:
``python -m attnlib.train`` trains both models with one thread and writes ``attnlib/data/stack.safetensors``,
with the training losses of every step in its metadata, and ``attnlib/data/stack_seeds.json``: the recipe run
with each of :data:`SEEDS`, with and without the mask, and its scores (chapter 8's table over seeds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ._validate import (
    _show,
    boundary,
    require_choice,
    require_device,
    require_nonnegative,
    require_number,
    require_positive,
    require_readable,
    require_shape,
    require_weights,
)
from .model import GPT, GPTConfig

__all__ = ["next_token_windows", "random_batch", "train", "evaluate", "evaluate_prefix",
           "CONFIG", "VARIANTS", "WEIGHTS", "char_data", "new_char_model", "train_char_model",
           "load_char_models", "stored_losses", "SEEDS", "SEED_TABLE", "seed_runs", "load_seed_table"]

# Chapter 8's recipe: the model (vocab_size: the fables' 43 characters), the text and its held-out tenth,
# the training run (train's arguments).
CONFIG = {"model": GPTConfig(vocab_size=43, d_model=48, h=4, L=2, max_T=128, pos="rope"),
          "text": "fables", "held_out": 0.1, "steps": 120, "T": 32, "B": 16, "lr": 1e-2, "seed": 0}
VARIANTS = {"masked": True, "unmasked": False}   # name → causal: with the mask, and the leak without it
WEIGHTS = Path(__file__).with_name("data") / "stack.safetensors"
_MODEL_KEYS = ("d_model", "h", "L", "max_T", "pos")   # the model's fields the weights file keeps
SEEDS = (0, 1, 2)   # the seeds of chapter 8's table: the recipe with each seed, with and without the mask
SEED_TABLE = Path(__file__).with_name("data") / "stack_seeds.json"
_SEED_EVAL = {"batches": 8, "seed": 1}   # the held-out windows every run of the table is scored on


def _train_args(model, data, steps, T, B, lr, seed, device, stop) -> dict:
    _require_model(model)
    (steps, T, B), (seed,) = require_positive(steps=steps, T=T, B=B), require_nonnegative(seed=seed)
    stop = None if stop is None else require_positive(stop=stop)[0]
    _require_data(data, model)
    lr, device = require_number(lr, "lr", above=0), None if device is None else require_device(device)
    _require_window(model, T)
    return {"steps": steps, "T": T, "B": B, "lr": lr, "seed": seed, "device": device, "stop": stop}


def next_token_windows(data: torch.Tensor, starts: torch.Tensor, T: int):
    """Inputs (B, T) = data[s : s+T] and targets (B, T) = data[s+1 : s+T+1] for every start s in starts (B,).

    The target at position i is the token that comes right after input position i: the same window
    shifted by one to the left.
    """
    T, = require_positive(T=T)
    _require_data(data)
    require_shape(starts, "starts", "B", float_only=False)
    if starts.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"starts must be an integer tensor (B,), got dtype {starts.dtype}")
    require_readable(starts, "starts")
    starts = starts.to(data.device)
    if starts.numel() and (int(starts.min()) < 0 or int(starts.max()) + T + 1 > data.numel()):
        raise ValueError(f"every start s needs 0 <= s and s + T + 1 <= N={data.numel()} (T={T}), "
                         f"got starts from {int(starts.min())} to {int(starts.max())}")
    idx = starts[:, None] + torch.arange(T, device=data.device)
    return data[idx], data[idx + 1]


def _require_data(data, model=None) -> None:
    """data (N,): integer token IDs with values, all of them in ``model``'s vocabulary where it has a config
    (checked once, up front, not when a window happens to reach a bad one)."""
    require_shape(data, "data", "N", float_only=False)
    if data.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"data must hold integer token IDs (N,), got dtype {data.dtype}")
    require_readable(data, "data")
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab_size is not None and data.numel():
        lo, hi = int(data.min()), int(data.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"data holds token id {lo if lo < 0 else hi}, outside the model's vocabulary "
                             f"0..{vocab_size - 1}")


def random_batch(data: torch.Tensor, T: int, B: int, generator: torch.Generator):
    """B random windows of data (N,): inputs (B, T) and targets (B, T), the same windows shifted by one."""
    T, B = require_positive(T=T, B=B)
    _require_data(data)
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(f"generator must be a CPU torch.Generator (the windows are drawn on the CPU), "
                        f"got {getattr(generator, 'device', type(generator).__name__)}")
    if data.numel() <= T:
        raise ValueError(f"data must be a 1-D tensor longer than T={T}, got shape {tuple(data.shape)}")
    start = torch.randint(0, data.numel() - T, (B,), generator=generator)
    return next_token_windows(data, start, T)


@boundary(_train_args)
def train(model, data: torch.Tensor, *, steps: int = 300, T: int = 64, B: int = 32, lr: float = 3e-3,
          seed: int = 0, device=None, stop: int | None = None) -> list[float]:
    """Train with AdamW on random windows of data (N,) and return the training loss of every step.

    The learning rate falls from lr to 0 along a cosine over the steps. ``stop`` ends the run after that
    many of them: the start of the same run, to replay it. ``device``: the model moves there, and so do
    the batches (default: where the model is).
    """
    if device is not None:
        model.to(device)
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)   # the windows come from a CPU generator, whatever the device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    model.train()
    losses = []
    for _ in range(steps if stop is None else min(stop, steps)):
        x, y = (t.to(device) for t in random_batch(data, T, B, gen))
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def evaluate(model, data: torch.Tensor, *, T: int = 64, B: int = 32, batches: int = 8, seed: int = 1) -> float:
    """Mean loss over a fixed set of random windows of data (N,)."""
    _require_model(model)
    (T, B, batches), (seed,) = require_positive(T=T, B=B, batches=batches), require_nonnegative(seed=seed)
    _require_data(data, model)
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    total = 0.0
    for _ in range(batches):
        x, y = (t.to(device) for t in random_batch(data, T, B, gen))
        total += model.loss(x, y).item()
    return total / batches


@torch.no_grad()
def evaluate_prefix(model, data: torch.Tensor, *, T: int = 64, B: int = 32, batches: int = 8, seed: int = 1) -> float:
    """Mean loss when the prediction for position i is computed from tokens 0..i alone (one forward per prefix).

    The windows are those of :func:`evaluate` with the same arguments. This is how a model is used when it
    generates: the future does not exist yet. For a causal model it equals :func:`evaluate`; a model
    trained without the mask loses the future it learned to copy from.
    """
    _require_model(model)
    (T, B, batches), (seed,) = require_positive(T=T, B=B, batches=batches), require_nonnegative(seed=seed)
    _require_data(data, model)
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    total = 0.0
    for _ in range(batches):
        x, y = (t.to(device) for t in random_batch(data, T, B, gen))
        logits = torch.stack([model(x[:, :i + 1])[:, -1] for i in range(T)], dim=1)   # (B, T, vocab_size)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    return total / batches


def char_data(config: dict = CONFIG):
    """The recipe's text as (tokenizer, training IDs, held-out IDs): a CharTokenizer of the whole text, and
    the text's IDs split before its last ``held_out`` fraction."""
    from .text import CharTokenizer, load_text

    _require_config(config)
    text = load_text(config["text"])
    tok = CharTokenizer(text)
    data = tok.encode(text)
    n_train = int((1 - config["held_out"]) * len(data))
    return tok, data[:n_train], data[n_train:]


def new_char_model(vocab_size: int, causal: bool = True, config: dict = CONFIG):
    """The untrained model of the recipe, its weights drawn from torch's RNG seeded with the recipe's seed."""
    _require_config(config)
    torch.manual_seed(config["seed"])
    return _char_gpt(vocab_size, causal, config["model"])


def _char_gpt(vocab_size: int, causal: bool, model: GPTConfig) -> GPT:
    return GPT(dataclasses.replace(model, vocab_size=vocab_size, causal=causal))


def train_char_model(variant: str = "masked", stop: int | None = None, config: dict = CONFIG):
    """Train the recipe's model, ``variant`` "masked" (causal) or "unmasked", and return (model, losses).

    ``stop`` ends the run after that many steps of the same schedule. Run it with one thread to get the
    stored losses bit for bit on the maintainer's machine.
    """
    variant = require_choice(variant, "variant", tuple(VARIANTS))
    tok, train_data, _ = char_data(config)
    model = new_char_model(tok.vocab_size, VARIANTS[variant], config)
    losses = train(model, train_data, steps=config["steps"], T=config["T"], B=config["B"], lr=config["lr"],
                   seed=config["seed"], stop=stop)
    return model, losses


def load_char_models(path: str | Path = WEIGHTS) -> dict:
    """The shipped trained models of chapter 8, ``{"masked": GPT, "unmasked": GPT}``, from a local file."""
    from safetensors.torch import load_file

    meta = _metadata(path)
    tensors = load_file(str(path))
    models = {}
    for variant in meta["variants"]:
        model = _char_gpt(meta["vocab_size"], VARIANTS[variant], _model_from_file(meta["config"]))
        model.load_state_dict(_run_state(tensors, variant))
        models[variant] = model.eval()
    return models


def stored_losses(path: str | Path = WEIGHTS) -> dict[str, list[float]]:
    """The training loss of every step of every shipped model, as the training script recorded them."""
    return _metadata(path)["losses"]


def seed_runs(seeds=SEEDS, config: dict = CONFIG) -> dict:
    """Train the recipe with each seed, with and without the mask: ``{variant: {seed: run}}``, where a run holds
    its training loss of every step ("losses", 6 decimals) and its held-out loss with the whole window visible
    ("held_out") and with each prediction made from its prefix alone ("prefix", as in generation)."""
    _, _, held_out = char_data(config)
    given = seeds
    seeds = () if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__") else tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of integers >= 0, got {_show(given)}")
    table = {v: {} for v in VARIANTS}
    for seed in seeds:
        run_config = {**config, "seed": int(seed)}
        for variant in VARIANTS:
            label = f"{variant}, seed {seed}"
            model, losses = _timed_run(label, lambda v=variant, c=run_config: train_char_model(v, config=c),
                                       last=20)
            ev = {"T": config["T"], "B": config["B"], **_SEED_EVAL}
            table[variant][str(seed)] = {
                "losses": [round(x, 6) for x in losses],
                "held_out": round(evaluate(model, held_out, **ev), 4),
                "prefix": round(evaluate_prefix(model, held_out, **ev), 4)}
    return table


def load_seed_table(path: str | Path = SEED_TABLE) -> dict:
    """Chapter 8's table over seeds, as :func:`seed_runs` returned it (``make train-stack`` writes it)."""
    return _read_runs(path, "load_seed_table", "table over seeds", ("config", "eval", "seeds", "runs"),
                      "make train-stack")


def _read_runs(path, reader: str, what: str, keys: tuple, make: str) -> dict:
    """The runs of a JSON table that ``make`` writes; its top-level ``keys`` say which chapter's table it is."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or a Path, got {type(path).__name__}")
    if not Path(path).is_file():
        raise FileNotFoundError(f"no {what} at {path} (`{make}` writes the shipped one)")
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"path={str(path)!r} is not a JSON file: {reader} expects the {what} that `{make}` "
                         "writes") from None
    got = sorted(table) if isinstance(table, dict) else type(table).__name__
    if not isinstance(table, dict) or any(k not in table for k in keys):
        raise ValueError(f"path={str(path)!r} is the wrong file for {reader}, which expects the {what} that "
                         f"`{make}` writes, with keys {list(keys)}: got keys {got}")
    return table["runs"]


def _require_recipe_keys(config, template: dict, where: str) -> None:
    """A recipe: a dict with every key of ``template`` (the module's CONFIG), its "model" a GPTConfig."""
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict like {where}, got {_show(config)}")
    missing = sorted(set(template) - set(config))
    if missing:
        raise ValueError(f"config lacks the recipe's keys {missing}; start from {{**CONFIG, ...}}")
    if not isinstance(config["model"], GPTConfig):
        raise TypeError(f"config['model'] must be a GPTConfig, got {_show(config['model'])}")


def _require_config(config) -> None:
    _require_recipe_keys(config, CONFIG, "attnlib.train.CONFIG")
    held_out = require_number(config["held_out"], "held_out", above=0)
    if held_out >= 1:
        raise ValueError(f"held_out must be a fraction below 1, got {held_out}")


def _model_from_file(flat: dict) -> GPTConfig:
    """The model's fields the weights file keeps (beside the training run's) → a GPTConfig; vocab_size is
    stored apart, as the file's own entry."""
    return GPTConfig(vocab_size=CONFIG["model"].vocab_size, **{k: flat[k] for k in _MODEL_KEYS})


def _recipe_to_file(config: dict) -> dict:
    model = config["model"]
    return {**{k: getattr(model, k) for k in _MODEL_KEYS}, **{k: v for k, v in config.items() if k != "model"}}


def _metadata(path) -> dict:
    meta = _weights_metadata(path, ("config", "vocab_size", "variants", "losses"), "attnlib.train.load_char_models",
                             "`make train-stack` writes the shipped one")
    return {**meta, "vocab_size": int(meta["vocab_size"])}


# The metadata key that tells a weights file of the course apart → what the file holds and what reads it.
_WEIGHTS_FILES = {
    "variants": "chapter 8's character models (masked and unmasked), read by attnlib.train.load_char_models",
    "seeds": "the trained induction heads, read by attnlib.induction.load_models",
}


def _weights_metadata(path, keys: tuple[str, ...], reader: str, writer: str) -> dict:
    """The JSON entries ``keys`` of a safetensors file's metadata; a file of another kind says what it is."""
    from safetensors import SafetensorError, safe_open

    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or a Path to a safetensors file, got {_show(path)}")
    if not Path(path).is_file():
        raise FileNotFoundError(f"no weights file at {path} ({writer})")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"path={str(path)!r} is not a safetensors weights file: {e}") from None
    missing = [k for k in keys if k not in meta]
    if missing:
        other = next((what for key, what in _WEIGHTS_FILES.items() if key in meta and key not in keys), None)
        it = f"it holds {other}" if other else f"its metadata has {sorted(meta)}, not {missing}"
        raise ValueError(f"path={str(path)!r} is the wrong weights file for {reader}, which expects metadata "
                         f"{list(keys)}: {it}")
    try:
        return {k: json.loads(meta[k]) for k in keys}
    except json.JSONDecodeError as e:
        raise ValueError(f"path={str(path)!r}: the metadata of this weights file is not the JSON {reader} "
                         f"expects ({e})") from None


def _require_window(model, T: int) -> None:
    """T tokens per window fit the model's context (checked here: model.loss, called inside train, checks nothing)."""
    max_T = getattr(getattr(model, "config", None), "max_T", None)
    if max_T is not None and T > max_T:
        raise ValueError(f"T={T} exceeds the context length max_T={max_T}: train draws windows of T tokens, and "
                         f"the model reads at most max_T positions; use T={max_T} or less")


def _require_model(model) -> None:
    """A model with parameters and a ``loss(ids, targets)`` method, such as :class:`attnlib.GPT`."""
    if not isinstance(model, torch.nn.Module) or not callable(getattr(model, "loss", None)):
        raise TypeError(f"model must be a GPT (an nn.Module with a loss(ids, targets) method), "
                        f"got {type(model).__name__}")
    if next(model.parameters(), None) is None:
        raise ValueError("model has no parameters to train or to place on a device")
    require_weights(model)


def _save_runs(path, runs: dict, meta: dict) -> None:
    """Write trained runs ``{name: (model, losses)}`` to one safetensors file: tensors ``"<name>.<parameter>"``,
    and in its metadata each run's loss of every step (6 decimals), the torch release, and ``meta`` (strings)."""
    from safetensors.torch import save_file

    tensors = {f"{name}.{k}": v.detach().contiguous() for name, (model, _) in runs.items()
               for k, v in model.state_dict().items()}
    losses = {name: [round(x, 6) for x in ls] for name, (_, ls) in runs.items()}
    save_file(tensors, str(path), metadata={**meta, "losses": json.dumps(losses), "torch": torch.__version__})
    print(f"wrote {path} ({Path(path).stat().st_size / 1e3:.0f} KB)")


def _run_state(tensors: dict, name: str) -> dict:
    """The state dict of run ``name`` among the tensors of a file that :func:`_save_runs` wrote."""
    prefix = f"{name}."
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def _timed_run(label: str, run, last: int):
    """Call ``run()`` → (model, losses) and print how long it took and how far the loss fell."""
    t0 = time.perf_counter()
    model, losses = run()
    tail = losses[-last:]
    print(f"{label}: {len(losses)} steps in {time.perf_counter() - t0:.1f} s, "
          f"loss {losses[0]:.3f} → {sum(tail) / len(tail):.3f} (mean of the last {len(tail)})")
    return model, losses


def main(argv: list[str] | None = None) -> None:
    """Train both models of chapter 8's recipe with one thread and write the weights and the losses, and the
    recipe's table over seeds."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--out", default=str(WEIGHTS), help="where to write the safetensors file")
    parser.add_argument("--seeds-out", default=str(SEED_TABLE), help="where to write the table over seeds (JSON)")
    parser.add_argument("--seeds-only", action="store_true", help="write only the table over seeds")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    table = {"config": _recipe_to_file(CONFIG), "eval": _SEED_EVAL, "seeds": list(SEEDS),
             "runs": seed_runs(SEEDS), "torch": torch.__version__}
    Path(args.seeds_out).write_text(json.dumps(table) + "\n")
    print(f"wrote {args.seeds_out}")
    if args.seeds_only:
        return
    runs = {v: _timed_run(v, lambda v=v: train_char_model(v), last=20) for v in VARIANTS}
    _save_runs(args.out, runs, {"config": json.dumps(_recipe_to_file(CONFIG)),
                               "vocab_size": str(runs["masked"][0].config.vocab_size),
                               "variants": json.dumps(list(VARIANTS))})


if __name__ == "__main__":
    main()
