"""Text → token IDs: the course's toy subword tokenizer, the running example, and a character tokenizer.

Nothing is downloaded: the vocabulary is written below and the training text ships in ``attnlib/data``.
"""

from __future__ import annotations

from importlib import resources

import torch

from ._validate import require_id_list, require_labels, require_pieces

__all__ = [
    "ToyTokenizer", "CharTokenizer", "TOY_VOCAB", "EXAMPLE", "SWAPPED", "load_text", "example_ids", "labels",
]

# Pieces that start with a space begin a word; pieces without one continue the word before them
# (" chase" + "s"). Every single character is in the table too, so any lowercase text can be encoded.
_WORDS = [
    " the", " a", " cat", " dog", " bird", " mat", " chase", " see", " sat", " on", " and", " run",
    " sing", " big", " small", " it", " is", " was", " mouse",
]
_SUFFIXES = ["es", "ed", "ing"]  # "s" is already a single character
_CHARS = list(" abcdefghijklmnopqrstuvwxyz.,!?'")
TOY_VOCAB: list[str] = _CHARS + _WORDS + _SUFFIXES

EXAMPLE = "the cat chases the dog"   # the running example of the whole course
SWAPPED = ("cat chases dog", "dog chases cat")   # the same tokens in another order


class ToyTokenizer:
    """A greedy longest-match subword tokenizer over :data:`TOY_VOCAB`.

    It puts a space in front of the text (as SentencePiece does; GPT-2's tokenizer does not by default), so
    every word, the first one included, starts with a space piece; a token can then be a whole word (" cat"),
    a word stem (" chase"), a suffix ("s") or a single character.
    """

    def __init__(self, vocab: list[str] | None = None):
        self.vocab = require_pieces(TOY_VOCAB if vocab is None else vocab, "vocab")
        if " " not in self.vocab:
            raise ValueError("vocab must contain the piece ' ' (a single space): the text is encoded with a "
                             "space in front")
        self.id_of = {piece: i for i, piece in enumerate(self.vocab)}
        self._longest = max(map(len, self.vocab))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def pieces(self, text: str) -> list[str]:
        """Split ``text`` into vocabulary pieces, longest match first."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text:
            raise ValueError("text is empty: there is nothing to tokenize")
        for pos, ch in enumerate(text):
            if ch not in self.id_of:   # every character is a piece, so the loop below always advances
                allowed = "lowercase letters, space and . , ! ? ' only" if self.vocab == TOY_VOCAB else \
                    "every character must be a piece of its own"
                raise ValueError(f"character {ch!r} at position {pos} is not in the vocabulary ({allowed})")
        s, out, i = " " + text, [], 0
        while i < len(s):
            for n in range(min(self._longest, len(s) - i), 0, -1):
                if s[i:i + n] in self.id_of:
                    out.append(s[i:i + n])
                    i += n
                    break
            else:
                raise ValueError(f"no piece of the vocabulary matches {s[i:i + 8]!r} at position {i - 1}")
        return out

    def encode(self, text: str) -> list[int]:
        """Text → list of T token IDs."""
        return [self.id_of[p] for p in self.pieces(text)]

    def decode(self, ids) -> str:
        """Token IDs (T,) → text; the leading space that :meth:`pieces` adds is dropped (if the text has one)."""
        text = "".join(self.vocab[i] for i in require_id_list(ids, self.vocab_size))
        return text[1:] if text.startswith(" ") else text


class CharTokenizer:
    """One token per character, with the vocabulary taken from a training text."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text:
            raise ValueError("CharTokenizer needs a non-empty text to build its vocabulary")
        self.vocab = sorted(set(text))
        self.id_of = {c: i for i, c in enumerate(self.vocab)}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> torch.Tensor:
        """Text → (T,) int64 tensor of token IDs."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        missing = sorted(set(text) - set(self.id_of))
        if missing:
            raise ValueError(f"characters {missing} are not in this tokenizer's vocabulary")
        return torch.tensor([self.id_of[c] for c in text], dtype=torch.long)

    def decode(self, ids) -> str:
        """Token IDs (T,) → text."""
        return "".join(self.vocab[i] for i in require_id_list(ids, self.vocab_size))


def load_text(name: str = "fables") -> str:
    """A small public-domain text shipped with the library (``attnlib/data/<name>.txt``)."""
    data = resources.files("attnlib").joinpath("data")
    names = sorted(p.name[:-4] for p in data.iterdir() if p.name.endswith(".txt"))
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"name must be one of the shipped texts {names}, got {name!r}")
    return data.joinpath(f"{name}.txt").read_text(encoding="utf-8")


def example_ids(text: str = EXAMPLE) -> tuple[torch.Tensor, list[str]]:
    """The running example as a (T,) tensor of token IDs and its T pieces."""
    tok = ToyTokenizer()
    return torch.tensor(tok.encode(text), dtype=torch.long), tok.pieces(text)


def labels(pieces: list[str]) -> list[str]:
    """Readable labels for token pieces: a word-initial space is shown as '▁' so 'the' and ' the' stay distinct."""
    return [p.replace(" ", "▁") for p in require_labels(pieces, None, "pieces")]
