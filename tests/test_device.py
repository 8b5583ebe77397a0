"""The device choice lives in the library: cuda, else mps, else cpu; ATTNLIB_DEVICE overrides it.

Notebooks never name a device (test_notebook_hygiene.py); they use what ``setup()`` returns, so the library
must run on whatever ``pick_device()`` picks here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import attnlib
from attnlib import GPT, GPTConfig, pick_device, runtime


@pytest.fixture
def machine(monkeypatch):
    """Pretend the machine has the given accelerators: machine(cuda=..., mps=...)."""
    monkeypatch.delenv("ATTNLIB_DEVICE", raising=False)

    def pretend(cuda: bool, mps: bool):
        # the library's own probe, not torch's: torch wraps some of its probes, and patching them breaks torch
        monkeypatch.setattr(runtime, "accelerators", lambda: {"cuda": cuda, "mps": mps})

    return pretend


@pytest.mark.parametrize(("cuda", "mps", "expected"), [
    (True, True, "cuda"),
    (True, False, "cuda"),
    (False, True, "mps"),
    (False, False, "cpu"),
])
def test_pick_device_prefers_cuda_then_mps_then_cpu(machine, cuda, mps, expected):
    machine(cuda=cuda, mps=mps)
    assert pick_device() == torch.device(expected)


@pytest.mark.parametrize("forced", ["cpu", "cuda", "cuda:1", "mps"])
def test_attnlib_device_overrides_the_choice(machine, monkeypatch, forced):
    machine(cuda=True, mps=True)
    monkeypatch.setenv("ATTNLIB_DEVICE", forced)
    assert pick_device() == torch.device(forced)


@pytest.mark.parametrize(("forced", "what"), [("cuda", "CUDA"), ("cuda:1", "CUDA"), ("mps", "MPS")])
def test_an_override_names_an_accelerator_this_machine_lacks(machine, monkeypatch, forced, what):
    machine(cuda=False, mps=False)
    monkeypatch.setenv("ATTNLIB_DEVICE", forced)
    with pytest.raises(ValueError, match=f"ATTNLIB_DEVICE='{forced}': {what}.* was asked for, but this machine has no"):
        pick_device()


def test_cuda_on_a_machine_without_it_is_named_at_every_entry_point(machine):
    from attnlib import causal_mask
    from attnlib.costs import peak_memory, sync, time_fn
    from attnlib.train import train

    machine(cuda=False, mps=False)
    model = attnlib.GPT(attnlib.GPTConfig(vocab_size=10, d_model=8, h=2, L=1, max_T=8))
    for call in (lambda: causal_mask(3, device="cuda"), lambda: sync("cuda"), lambda: time_fn(lambda: 1, device="cuda"),
                 lambda: peak_memory(lambda: 1, device="cuda"),
                 lambda: train(model, torch.arange(20) % 10, T=4, steps=1, device="cuda")):
        with pytest.raises(ValueError, match="CUDA was asked for, but this machine has none"):
            call()


def test_an_empty_override_is_ignored(machine, monkeypatch):
    machine(cuda=False, mps=False)
    monkeypatch.setenv("ATTNLIB_DEVICE", "")
    assert pick_device() == torch.device("cpu")


@pytest.mark.parametrize(("forced", "expected"), [("", "mps"), ("cpu", "cpu")])
def test_setup_returns_the_picked_device(forced, expected):
    """What a notebook gets from `device = setup()` (in a fresh interpreter: setup() changes global state)."""
    code = ("import attnlib.runtime as r; r.accelerators = lambda: {'cuda': False, 'mps': True}; "
            "import attnlib; print(attnlib.setup())")
    env = {**os.environ, "ATTNLIB_DEVICE": forced}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected, out.stderr


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_a_small_gpt_runs_on_the_picked_device(pos):
    """Forward, loss, backward and a cached generation, all on the device this machine offers."""
    device = pick_device()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, d_model=16, h=4, L=2, max_T=16, pos=pos)).to(device)
    ids = torch.randint(0, 11, (2, 7), device=device)
    logits = model(ids)
    assert logits.shape == (2, 7, 11) and logits.device.type == device.type
    assert torch.isfinite(logits).all()
    loss = model.loss(ids[:, :-1], ids[:, 1:])
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.device.type == device.type and torch.isfinite(g).all() for g in grads)
    model.eval()
    with torch.no_grad():
        out = model.generate(ids[:1, :3], n_new=4)
    assert out.shape == (1, 7) and out.device.type == device.type


def test_results_agree_across_devices():
    """Where an accelerator exists, the GPT gives the CPU's answer up to float tolerance."""
    device = pick_device()
    if device.type == "cpu":
        pytest.skip("only a CPU here: nothing to compare with")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, d_model=16, h=4, L=2, max_T=16)).eval()
    ids = torch.randint(0, 11, (2, 7))
    with torch.no_grad():
        on_cpu = model(ids)
        on_device = model.to(device)(ids.to(device)).cpu()
    torch.testing.assert_close(on_device, on_cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync debug mode needs CUDA")
@pytest.mark.parametrize("padded", [False, True])
def test_a_generated_token_costs_no_cuda_sync(padded):
    """The CUDA side of tests/test_model_syncs.py: 7 more tokens warn of no more syncs than 1 token does."""
    import warnings

    from attnlib import pad_prompts

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, d_model=16, h=4, L=2, max_T=24)).cuda().eval()
    ids, is_pad = (t.cuda() for t in pad_prompts([torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6])], 0))

    def warned(n_new):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                model.generate(ids, n_new, is_pad=is_pad if padded else None)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught)

    assert warned(8) == warned(1)


def test_train_moves_the_model_to_the_device_it_is_given():
    """train(device=...) trains there: the model moves with the batches."""
    from attnlib.train import train

    device = pick_device()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, d_model=8, h=2, L=1, max_T=8))
    losses = train(model, torch.arange(60) % 11, steps=2, T=4, B=2, device=device)
    assert len(losses) == 2 and next(model.parameters()).device.type == device.type
