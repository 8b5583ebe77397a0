"""attnlib: the one implementation of causal self-attention that every chapter of the course imports.

Modules follow the chapters: text → embedding, position → projections → attention (scores, scaling,
mask, softmax, weights·V) → heads → block → model, with train, plots, reference and checks beside them.
"""

from .attention import SingleHeadAttention, attend, attention, attention_weights, causal_mask, scale, scores, softmax
from .block import MLP, Block
from .embedding import TokenEmbedding, one_hot_embedding, running_X0
from .heads import KVCache, MultiHeadAttention, merge_heads, split_heads
from .model import GPT
from .position import LearnedPositions, apply_rope, rope_angles, sinusoidal_positions
from .projections import FusedProjections, Projections, project
from .runtime import pick_device, seed_everything, setup, show_source
from .text import EXAMPLE, SWAPPED, CharTokenizer, ToyTokenizer, example_ids, load_text

__version__ = "0.1.0"

__all__ = [
    "setup", "pick_device", "seed_everything", "show_source",
    "ToyTokenizer", "CharTokenizer", "EXAMPLE", "SWAPPED", "example_ids", "load_text",
    "TokenEmbedding", "one_hot_embedding", "running_X0",
    "sinusoidal_positions", "LearnedPositions", "rope_angles", "apply_rope",
    "Projections", "FusedProjections", "project",
    "scores", "scale", "causal_mask", "softmax", "attention_weights", "attend", "attention",
    "SingleHeadAttention",
    "split_heads", "merge_heads", "KVCache", "MultiHeadAttention",
    "MLP", "Block", "GPT",
]
