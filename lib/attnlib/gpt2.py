"""attnlib ↔ Hugging Face GPT-2: the same model, weights mapped both ways.

GPT-2 is a Pre-Norm decoder with learned positions (``wpe``), a tied output head (``lm_head.weight`` is the
token table ``wte``), the tanh-approximate GELU (``gelu_new``) and LayerNorm ε = 1e-5. Its linear layers are
``Conv1D`` modules that store the weight as (in, out) and compute ``x @ W + b``; ``nn.Linear`` stores
(out, in), so every matrix is transposed on the way. ``c_attn`` is one fused (d_model, 3·d_model) matrix
whose columns are W_Q, then W_K, then W_V: the same order as attnlib's ``W_QKV`` rows.

``transformers`` is imported inside the functions only, so attnlib works without it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ._validate import boundary, require_choice, require_flags
from .model import GPT, GPTConfig

__all__ = ["from_gpt2", "to_gpt2", "load_gpt2", "weight_pairs"]

# activation_function names of GPT2Config → attnlib's gelu option
_GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "exact"}


def _require_pair(gpt, hf) -> None:
    _, GPT2LMHeadModel = _gpt2_classes()
    if not isinstance(gpt, GPT):
        raise TypeError(f"gpt must be an attnlib GPT, got {type(gpt).__name__}")
    if not isinstance(hf, GPT2LMHeadModel):
        raise TypeError(f"hf must be a transformers GPT2LMHeadModel, got {type(hf).__name__}")
    c, g = hf.config, gpt.config
    ours = (g.vocab_size, g.d_model, g.h, g.L, g.max_T, g.d_ff)
    theirs = (c.vocab_size, c.n_embd, c.n_head, c.n_layer, c.n_positions, c.n_inner or 4 * c.n_embd)
    if ours != theirs or g.pos != "learned" or g.h_kv != g.h or not g.bias:
        raise ValueError(f"the models must have the same sizes (vocab_size, d_model, h, L, max_T, d_ff), "
                         f"learned positions, biases and h_kv = h: GPT has {ours}, pos={g.pos!r}, "
                         f"bias={g.bias}, h_kv={g.h_kv}; GPT-2 has {theirs}")
    if g.tie != _tied(hf):
        raise ValueError(f"both models must tie the output head to the token table, or neither: the GPT has "
                         f"tie={g.tie}, GPT-2's lm_head {'is' if _tied(hf) else 'is not'} its wte; a tied head "
                         f"has no pair of its own, so one side's head would be left out")


def _gpt2_classes():
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:   # pragma: no cover - transformers is in requirements.txt
        raise ImportError("attnlib.gpt2 needs the 'transformers' package: pip install transformers") from e
    return GPT2Config, GPT2LMHeadModel


@boundary(_require_pair)
def weight_pairs(gpt: GPT, hf) -> list[tuple[torch.Tensor, torch.Tensor, bool]]:
    """(attnlib tensor, GPT-2 tensor, transpose?) for every weight of two models of the same sizes.

    Conv1D stores (in, out), nn.Linear (out, in): those pairs are transposed. The tied head has no pair
    of its own (it is the token table), so both models must tie it, or neither.
    """
    t = hf.transformer
    pairs = [(gpt.embed.table, t.wte.weight, False),          # token table (vocab_size, d_model)
             (gpt.positions.table, t.wpe.weight, False)]      # learned positions (max_T, d_model)
    for ours, theirs in zip(gpt.blocks, t.h):
        a, b = ours.attn, theirs.attn
        pairs += [
            (ours.ln_1.weight, theirs.ln_1.weight, False), (ours.ln_1.bias, theirs.ln_1.bias, False),
            (a.W_QKV.weight, b.c_attn.weight, True),          # columns of c_attn: W_Q, W_K, W_V
            (a.W_QKV.bias, b.c_attn.bias, False),
            (a.W_O.weight, b.c_proj.weight, True), (a.W_O.bias, b.c_proj.bias, False),
            (ours.ln_2.weight, theirs.ln_2.weight, False), (ours.ln_2.bias, theirs.ln_2.bias, False),
            (ours.mlp.W_1.weight, theirs.mlp.c_fc.weight, True),
            (ours.mlp.W_1.bias, theirs.mlp.c_fc.bias, False),
            (ours.mlp.W_2.weight, theirs.mlp.c_proj.weight, True),
            (ours.mlp.W_2.bias, theirs.mlp.c_proj.bias, False),
        ]
    pairs += [(gpt.ln_f.weight, t.ln_f.weight, False), (gpt.ln_f.bias, t.ln_f.bias, False)]
    if not gpt.config.tie:
        pairs.append((gpt.head.weight, hf.lm_head.weight, False))
    return pairs


def _tied(hf) -> bool:
    return hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()


def from_gpt2(hf_model) -> GPT:
    """A :class:`GPT` that computes what ``hf_model`` (a ``GPT2LMHeadModel``) computes, in its dtype and device.

    Tied head, GELU flavour and ε follow the GPT-2 config; the result is in eval mode (GPT-2 has dropout,
    attnlib has none, so the two agree when ``hf_model`` is in eval mode too).
    """
    _, GPT2LMHeadModel = _gpt2_classes()
    if not isinstance(hf_model, GPT2LMHeadModel):
        raise TypeError(f"hf_model must be a transformers GPT2LMHeadModel, got {type(hf_model).__name__}")
    c = hf_model.config
    act = require_choice(c.activation_function, "config.activation_function", tuple(_GELU))
    if not c.scale_attn_weights or c.scale_attn_by_inverse_layer_idx:
        raise ValueError(f"attnlib scales scores by 1/√d_head only: expected scale_attn_weights=True and "
                         f"scale_attn_by_inverse_layer_idx=False, got {c.scale_attn_weights} and "
                         f"{c.scale_attn_by_inverse_layer_idx}")
    if getattr(c, "add_cross_attention", False):
        raise ValueError("attnlib's GPT has no cross-attention, got config.add_cross_attention=True")
    tie = _tied(hf_model)
    table = hf_model.transformer.wte.weight
    gpt = GPT(GPTConfig(vocab_size=c.vocab_size, d_model=c.n_embd, h=c.n_head, L=c.n_layer, d_ff=c.n_inner,
                        max_T=c.n_positions, pos="learned", norm="pre", tie=tie, gelu=_GELU[act], bias=True,
                        eps=c.layer_norm_epsilon))
    gpt = gpt.to(device=table.device, dtype=table.dtype)
    with torch.no_grad():
        for ours, theirs, transpose in weight_pairs(gpt, hf_model):
            ours.copy_(theirs.T if transpose else theirs)
    return gpt.eval()


def to_gpt2(gpt: GPT):
    """A ``transformers.GPT2LMHeadModel`` with the weights of ``gpt``, in eval mode, same dtype and device.

    ``gpt`` must have GPT-2's shape: learned positions, Pre-Norm, causal, biases, and as many key/value heads
    as query heads (h_kv = h: GPT-2 has no grouped-query attention). Its GELU flavour, ε and head tying are
    carried over (an untied head gives ``tie_word_embeddings=False``).
    """
    if not isinstance(gpt, GPT):
        raise TypeError(f"gpt must be an attnlib GPT, got {type(gpt).__name__}")
    cfg = gpt.config
    wanted = {"pos": "learned", "norm": "pre", "causal": True, "bias": True}
    for name, want in wanted.items():
        if getattr(cfg, name) != want:
            raise ValueError(f"GPT-2 has {name}={want!r}; this model has {name}={getattr(cfg, name)!r}")
    if cfg.h_kv != cfg.h:
        raise ValueError(f"GPT-2 has one key/value head per query head (h_kv = h = {cfg.h}); this model has "
                         f"h_kv={cfg.h_kv} key/value heads for h={cfg.h} query heads (grouped-query attention)")
    GPT2Config, GPT2LMHeadModel = _gpt2_classes()
    last = cfg.vocab_size - 1   # GPT-2's bos/eos id is its last token; keep it inside this vocabulary
    config = GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.max_T, n_embd=cfg.d_model, n_layer=cfg.L, n_head=cfg.h,
        n_inner=cfg.d_ff, activation_function="gelu_new" if cfg.gelu == "tanh" else "gelu",
        layer_norm_epsilon=cfg.eps, tie_word_embeddings=cfg.tie, bos_token_id=last, eos_token_id=last,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    table = gpt.embed.table
    hf = GPT2LMHeadModel(config).to(device=table.device, dtype=table.dtype)
    with torch.no_grad():
        for ours, theirs, transpose in weight_pairs(gpt, hf):
            theirs.copy_(ours.T if transpose else ours)
    return hf.eval()


def _load_gpt2_args(name_or_path, local_files_only):
    if isinstance(name_or_path, Path):
        name_or_path = str(name_or_path)
    if not isinstance(name_or_path, str) or not name_or_path:
        raise TypeError(f"name_or_path must be a Hub name such as 'gpt2' or a folder (a str or a Path), got "
                        f"{name_or_path!r} ({type(name_or_path).__name__})")
    local_files_only, = require_flags(local_files_only=local_files_only)
    return {"name_or_path": name_or_path, "local_files_only": local_files_only}


@boundary(_load_gpt2_args)
def load_gpt2(name_or_path: str = "gpt2", *, local_files_only: bool = False) -> GPT:
    """Load a pretrained GPT-2 (a Hub name such as "gpt2", or a folder written by ``save_pretrained``) as a GPT.

    Loading by name downloads the weights once (it needs a network); a folder is read from disk.
    """
    _, GPT2LMHeadModel = _gpt2_classes()
    try:
        hf = GPT2LMHeadModel.from_pretrained(name_or_path, local_files_only=local_files_only)
    except OSError as e:   # no such folder, and no such name on the Hub or no network to ask it
        raise OSError(f"name_or_path={name_or_path!r} is neither a folder written by save_pretrained nor a GPT-2 "
                      f"this machine can download now ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    return from_gpt2(hf.eval())
