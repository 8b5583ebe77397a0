"""attnlib: the one implementation of causal self-attention that every chapter of the course imports.

Modules follow the chapters: text → embedding, position → projections → attention (scores, scaling,
mask, softmax, weights·V) → heads → block → model, with train, plots, explore, reference and checks beside
them; then the further chapters: tiled (9), grouped K/V heads in heads (10), batches (11).
"""

from .attention import (
                        SingleHeadAttention,
                        attend,
                        attention,
                        attention_weights,
                        causal_mask,
                        combine_masks,
                        padding_mask,
                        scale,
                        scores,
                        sliding_window_mask,
                        softmax,
)
from .audit import audit
from .batches import pad_prompts, position_ids
from .block import MLP, Block
from .display import show_source
from .embedding import TokenEmbedding, one_hot_embedding, running_X0
from .explore import explore, model_scores
from .heads import KVCache, MultiHeadAttention, merge_heads, repeat_kv, split_heads
from .model import GPT, GPTConfig
from .position import LearnedPositions, apply_rope, rope_angles, sinusoidal_positions
from .projections import FusedProjections, Projections, project
from .runtime import agree, at_most, pick_device, seed_everything, setup
from .text import EXAMPLE, SWAPPED, CharTokenizer, ToyTokenizer, example_ids, load_text
from .tiled import online_softmax, online_softmax_step, tile_plan, tiled_attention

__version__ = "0.1.0"

__all__ = [
    "setup", "pick_device", "seed_everything", "show_source", "agree", "at_most",
    "ToyTokenizer", "CharTokenizer", "EXAMPLE", "SWAPPED", "example_ids", "load_text",
    "TokenEmbedding", "one_hot_embedding", "running_X0",
    "sinusoidal_positions", "LearnedPositions", "rope_angles", "apply_rope",
    "Projections", "FusedProjections", "project",
    "scores", "scale", "causal_mask", "softmax", "attention_weights", "attend", "attention",
    "SingleHeadAttention",
    "split_heads", "merge_heads", "KVCache", "MultiHeadAttention",
    "MLP", "Block", "GPT", "GPTConfig",
    "explore", "model_scores",
    "online_softmax_step", "online_softmax", "tile_plan", "tiled_attention",
    "repeat_kv",
    "padding_mask", "sliding_window_mask", "combine_masks", "pad_prompts", "position_ids",
    "audit",
]
