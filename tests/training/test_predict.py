"""harness.training.predict_logits, the one prediction loop of upstream, downstream and re-prediction."""

import numpy as np
import torch

from harness.heads import HeteroscedasticHead
from harness.training.predict import predict_logits


def _batches(n=10, b=4):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 6, generator=g)
    return x, [(x[i : i + b], np.arange(i, min(i + b, n)) % 3, torch.arange(i, min(i + b, n))) for i in range(0, n, b)]


def test_it_returns_the_model_outputs_in_order_in_eval_mode():
    torch.manual_seed(0)
    head = HeteroscedasticHead(6, 3, covariance="low_rank", num_factors=2, eval_mc_samples=16).train()
    x, batches = _batches()
    out = predict_logits(head, batches)
    assert not head.training
    with torch.no_grad():
        want = head(x)  # eval noise is per row: the batching does not change a row's output
    np.testing.assert_allclose(out["logits"], want.numpy(), atol=1e-6)
    assert out["logits"].dtype == np.float32 and out["index"].tolist() == list(range(10))
    assert out["targets"].tolist() == (np.arange(10) % 3).tolist()


def test_the_gather_hook_sees_every_batch_and_autocast_is_entered():
    seen, entered = [], []

    class Context:
        def __enter__(self):
            entered.append(1)

        def __exit__(self, *exc):
            return False

    def gather(parts):
        seen.append(len(parts[0]))
        return parts

    out = predict_logits(torch.nn.Linear(6, 3), _batches()[1], autocast=Context, gather=gather)
    assert seen == [4, 4, 2] and len(entered) == 3 and out["logits"].shape == (10, 3)
