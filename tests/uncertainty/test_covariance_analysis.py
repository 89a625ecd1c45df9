"""The average covariance, Table 4 top pairs and Figure 2 confusion ranks (harness.uncertainty.covariance)."""

import numpy as np
import pytest
import torch

from harness.heads import HeteroscedasticHead
from harness.uncertainty.covariance import CovarianceAccumulator, confusion_ranks, top_pairs


@pytest.mark.parametrize(
    "kw",
    [
        dict(covariance="low_rank", num_factors=2),
        dict(covariance="diagonal"),
        dict(covariance="parameter_efficient", num_factors=2),
        dict(covariance="low_rank", num_factors=2, noise_space="pre_logits"),
        dict(covariance="low_rank", num_factors=2, diag_noise="shared_scalar"),
    ],
)
def test_average_covariance_equals_the_dense_mean(kw):
    torch.manual_seed(0)
    head = HeteroscedasticHead(5, 7, **kw)
    acc = CovarianceAccumulator(head, block=3)
    xs = [torch.randn(4, 5), torch.randn(3, 5)]
    for x in xs:
        acc.update(x)
    dense = torch.cat([head.covariance(x).detach() for x in xs]).double().mean(0).numpy()
    np.testing.assert_allclose(acc.mean(), dense, rtol=1e-5, atol=1e-6)


def test_top_pairs_match_brute_force():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(30, 30))
    sigma = a @ a.T
    got = top_pairs(sigma, [str(i) for i in range(30)], k=5, block=7)
    iu = np.triu_indices(30, 1)
    order = np.argsort(-np.abs(sigma[iu]))[:5]
    assert [(p["class_a"], p["class_b"]) for p in got] == [(str(iu[0][o]), str(iu[1][o])) for o in order]


def test_confusion_rank_of_the_most_covarying_class_is_one():
    head = HeteroscedasticHead(2, 4, covariance="low_rank", num_factors=1)
    with torch.no_grad():
        head.scale.weight.zero_()
        head.scale.bias.copy_(torch.tensor([1.0, 0.9, 0.0, 0.1]))  # class 0 covaries most with class 1
    feats = torch.zeros(2, 2)
    het = np.array([[5.0, 0, 0, 0], [5.0, 0, 0, 0]])
    hom = np.array([[0, 5.0, 0, 0], [0, 0, 5.0, 0]])  # wrong: class 1 (rank 1), class 2 (rank 3)
    ranks = confusion_ranks(head, [(feats, np.array([0, 0]), np.array([0, 1]))], het, hom, np.array([0, 1]))
    assert ranks.tolist() == [1, 3]
