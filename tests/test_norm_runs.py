"""Chapter 7's stored runs (attnlib/data/norm_runs.json): the recipe replays the start of the stored runs, and the
file holds what the chapter reads."""

import pytest
import torch

from attnlib.norms import (
    DEEP,
    DEEP_SEEDS,
    DEEP_VARIANTS,
    NORM_RUNS,
    WithoutResidual,
    _deep_data,
    block_grad_norms,
    deep_model,
    position_spread,
    stored_norm_runs,
    train_deep,
)

# Steps replayed against the stored losses (6 decimals), and how far a replayed loss may be from the stored one.
# Another seed moves the losses of the first steps by more than 0.01, and no warm-up against a warm-up by more.
N_REPLAY = 10
REPLAY_TOL = 1e-4


@pytest.fixture(scope="module")
def stored():
    return stored_norm_runs()


@pytest.fixture(scope="module")
def data():
    return _deep_data()


def test_the_file_is_small_and_holds_every_variant_on_every_seed(stored):
    assert NORM_RUNS.stat().st_size < 40_000
    assert list(stored) == list(DEEP_VARIANTS)
    for by_seed in stored.values():
        assert sorted(by_seed) == list(DEEP_SEEDS) and len(DEEP_SEEDS) >= 4
        for run in by_seed.values():
            assert len(run["losses"]) == DEEP["steps"] and len(run["grads"]) == DEEP["L"]
            assert 0 <= run["spread"] <= 1


@pytest.mark.parametrize("variant, seed", [("Pre", 0), ("Post, warm-up", 1), ("no residual", 2)])
def test_the_recipe_replays_the_start_of_a_stored_run(stored, data, variant, seed):
    tok, ids = data
    model = deep_model(variant, seed, tok.vocab_size)
    replayed = train_deep(model, ids, warmup=DEEP_VARIANTS[variant]["warmup"], seed=seed, stop=N_REPLAY)
    want = stored[variant][seed]["losses"][:N_REPLAY]
    assert len(replayed) == N_REPLAY
    assert max(abs(a - b) for a, b in zip(replayed, want)) < REPLAY_TOL
    other = stored[variant][seed + 1]["losses"][:N_REPLAY]
    assert max(abs(a - b) for a, b in zip(replayed, other)) > 100 * REPLAY_TOL   # the bound tells seeds apart


def test_every_variant_starts_from_the_same_weights_and_only_the_residual_wiring_differs(data):
    tok, _ = data
    models = {v: deep_model(v, 3, tok.vocab_size) for v in DEEP_VARIANTS}
    ref = [p for p in models["Pre"].parameters()]
    for m in models.values():
        assert all(torch.equal(p, q) for p, q in zip(ref, m.parameters()))
    assert all(isinstance(b, WithoutResidual) for b in models["no residual"].blocks)
    assert {m.blocks[0].norm for v, m in models.items() if v != "no residual"} == {"pre", "post"}


def test_the_measures_on_a_fresh_model(data):
    tok, ids = data
    x = ids[:DEEP["T"]].reshape(1, -1)
    y = ids[1:DEEP["T"] + 1].reshape(1, -1)
    model = deep_model("Pre", 0, tok.vocab_size)
    grads = block_grad_norms(model, x, y)
    assert len(grads) == DEEP["L"] and all(g > 0 for g in grads)
    assert 0 < position_spread(model, x) < 1


def test_bad_inputs_are_rejected_with_a_clear_message(data, tmp_path):
    tok, ids = data
    with pytest.raises(ValueError, match="variant must be"):
        deep_model("Middle")
    with pytest.raises(ValueError, match="seed"):
        deep_model("Pre", -1)
    with pytest.raises(TypeError, match="model must be a GPT"):
        train_deep("gpt", ids)
    with pytest.raises(ValueError, match="warmup"):
        train_deep(deep_model(), ids, warmup=-5)
    with pytest.raises(TypeError, match="ids must be"):
        position_spread(deep_model(), ids)
    with pytest.raises(FileNotFoundError, match="make train-norms"):
        stored_norm_runs(tmp_path / "none.json")
    with pytest.raises(TypeError, match="path"):
        stored_norm_runs(3)
