"""Host syncs of generation: how often the host waits to read a value off the device.

On CUDA every ``.item()``, ``.tolist()``, ``int(t)``, ``bool(t)`` or ``nonzero()`` waits for the queued kernels:
a generated token should cost none of them (the next token stays on the device), and the prompt's ids are read
once, at the entry point. No GPU is needed to count them: a TorchFunctionMode sees every such call on the CPU.
"""

from __future__ import annotations

import collections

import pytest
import torch
from torch.overrides import TorchFunctionMode

from attnlib import GPT, GPTConfig, pad_prompts

SYNCS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "aminmax"}


class CountSyncs(TorchFunctionMode):
    """Counts the calls that read a tensor's values on the host, by name."""

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in SYNCS:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def syncs(fn) -> int:
    with CountSyncs() as counter:
        fn()
    return sum(counter.calls.values())


def test_the_counter_sees_every_kind_of_read():
    t = torch.tensor([3, 1])
    reads = [lambda: t[0].item(), lambda: t.tolist(), lambda: int(t[0]), lambda: bool(t[0]), lambda: t.nonzero()]
    assert [syncs(r) for r in reads] == [1, 1, 1, 1, 1]


def _model(pos):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, d_model=16, h=4, L=2, max_T=24, pos=pos)).eval()


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_generated_token_costs_no_host_sync(pos, padded, use_cache, temperature):
    model = _model(pos)
    ids, is_pad = pad_prompts([torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6])], 0)
    kwargs = dict(is_pad=is_pad if padded else None, use_cache=use_cache, temperature=temperature)
    one = syncs(lambda: model.generate(ids, 1, generator=torch.Generator().manual_seed(0), **kwargs))
    many = syncs(lambda: model.generate(ids, 8, generator=torch.Generator().manual_seed(0), **kwargs))
    assert many == one   # 7 more tokens, not one more read
    # the prompt, once: ids.min() and ids.max(); with padding, one read of is_pad's rows (all pad? a late pad?)
    assert one == (2 + 1 if padded else 2)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope"])
def test_a_forward_pass_reads_its_ids_once(pos):
    model = _model(pos)
    ids = torch.randint(0, 11, (2, 6))
    assert syncs(lambda: model(ids)) == 2                     # ids.min() and ids.max(), not once per layer
    is_pad = torch.zeros(2, 6, dtype=torch.bool)
    assert syncs(lambda: model(ids, is_pad=is_pad)) == 2      # padding adds no read
