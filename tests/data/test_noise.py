"""Input-dependent synthetic label noise (harness.data.noise), its transition, seeding and checks."""

import numpy as np
import pytest

from harness.data.config import DataConfig
from harness.data.noise import inject_label_noise, reference_probabilities, transition_matrix
from harness.data.sources import build_split


@pytest.fixture(scope="module")
def digits():
    ds = build_split(DataConfig(), "train")
    images, labels = ds.pixels(), ds.labels
    noisy, info = inject_label_noise(labels, 10, "input_dependent", 0.3, seed=0, images=images)
    return images, labels, noisy, info


def test_input_dependent_noise_flips_ambiguous_images_to_their_runner_up(digits):
    images, labels, noisy, info = digits
    assert set(info) >= {"kind", "rate", "seed", "realised_rate", "transition", "flip_prob"}
    assert info["kind"] == "input_dependent" and abs(info["realised_rate"] - 0.3) < 0.05
    assert 0.0 <= info["flip_prob"]["min"] < info["flip_prob"]["mean"] < info["flip_prob"]["max"] <= 1.0
    np.testing.assert_allclose(np.array(info["transition"]).sum(1), 1.0, atol=1e-3)
    probs = reference_probabilities(images, labels, 10, seed=0)
    order = np.argsort(-probs, axis=1, kind="stable")
    top, runner_up = order[:, 0], order[:, 1]
    ambiguity = 1 - (probs[np.arange(len(labels)), top] - probs[np.arange(len(labels)), runner_up])
    flipped = noisy != labels
    expected = np.where(runner_up == labels, top, runner_up)
    assert np.array_equal(noisy[flipped], expected[flipped])
    lo, hi = np.quantile(ambiguity, [0.25, 0.75])
    low_rate, high_rate = flipped[ambiguity <= lo].mean(), flipped[ambiguity >= hi].mean()
    assert high_rate > 0.4 and low_rate < 0.15 and high_rate > 3 * low_rate


def test_input_dependent_noise_is_seeded_and_needs_images(digits):
    images, labels, noisy, _ = digits
    again, _ = inject_label_noise(labels, 10, "input_dependent", 0.3, seed=0, images=images)
    other, _ = inject_label_noise(labels, 10, "input_dependent", 0.3, seed=1, images=images)
    assert np.array_equal(noisy, again) and not np.array_equal(noisy, other)
    with pytest.raises(ValueError, match="needs the training images"):
        inject_label_noise(labels, 10, "input_dependent", 0.3, seed=0)
    with pytest.raises(ValueError, match="no nominal transition matrix"):
        transition_matrix("input_dependent", 10, 0.3)


def test_permutation_moves_each_pair_mass_onto_the_permuted_classes():
    """T_π[π(c), π(j)] = T[c, j]: the noise rate and every pair mass are kept, carried by other classes."""
    from harness.data.noise import transition_matrix

    rng = np.random.default_rng(0)
    t = rng.random((4, 4))
    t /= t.sum(1, keepdims=True)
    pi = [2, 0, 3, 1]
    tp = transition_matrix("matrix", 4, matrix=t.tolist(), permutation=pi)
    for c in range(4):
        for j in range(4):
            assert tp[pi[c], pi[j]] == t[c, j]
    assert np.isclose(np.trace(tp), np.trace(t))
    with pytest.raises(ValueError, match="permutation must list each class"):
        transition_matrix("matrix", 4, matrix=t.tolist(), permutation=[0, 0, 1, 2])


def test_heldout_stream_draws_other_labels_from_the_same_matrix():
    from harness.data.noise import inject_label_noise

    labels = np.repeat(np.arange(3), 4000)
    train, info = inject_label_noise(labels, 3, kind="pair_flip", rate=0.3, seed=5)
    held, held_info = inject_label_noise(labels, 3, kind="pair_flip", rate=0.3, seed=5, stream=1)
    again, _ = inject_label_noise(labels, 3, kind="pair_flip", rate=0.3, seed=5, stream=1)
    assert (held == again).all() and (held != train).any()  # seeded, and not the training draws
    assert abs(info["realised_rate"] - 0.3) < 0.02 and abs(held_info["realised_rate"] - 0.3) < 0.02
