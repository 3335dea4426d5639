"""DRESS weights, head clusters and the weighted loss against hand-computed values."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lightning_div.dress.losses import weighted_lm_loss
from lightning_div.dress.weights import dress_weights, effective_sample_size, head_clusters, negative_weights


def test_dress_weights_hand_computed():
    # 4 responses: clusters [0, 0, 0, 1] -> p(0) = 3/4, p(1) = 1/4
    # lam = 2: w(0) = (1/4)^2 = 1/16, w(1) = (3/4)^2 = 9/16
    w = dress_weights([0, 0, 0, 1], num_clusters=3, lam=2.0)
    np.testing.assert_allclose(w, [1 / 16, 1 / 16, 1 / 16, 9 / 16])
    # normalised to mean 1: mean = (3/16 + 9/16) / 4 = 12/64 = 3/16 -> [1/3, 1/3, 1/3, 3]
    np.testing.assert_allclose(dress_weights([0, 0, 0, 1], 3, lam=2.0, normalize=True), [1 / 3, 1 / 3, 1 / 3, 3])
    # paper default lam = 30 on a cluster with 10 % of the data: 0.9^30
    w = dress_weights([0] * 1 + [1] * 9, 2)
    assert w[0] == pytest.approx(0.9**30) and w[1] == pytest.approx(0.1**30)
    # lam = 0 switches reweighting off
    np.testing.assert_array_equal(dress_weights([0, 1, 1], 2, lam=0.0), [1.0, 1.0, 1.0])


def test_dress_weights_errors_and_edges():
    assert dress_weights([], 5).shape == (0,)
    with pytest.raises(ValueError, match="lam"):
        dress_weights([0], 2, lam=-1)
    with pytest.raises(ValueError, match=">= num_clusters"):
        dress_weights([0, 7], 2)
    with pytest.raises(ValueError, match="one cluster"):
        dress_weights([1, 1], 2, normalize=True)


def test_head_clusters_and_negative_weights():
    # 10 generations: cluster 2 has 6 (0.6), cluster 0 has 3 (0.3), cluster 4 has 1 (0.1, not > 0.1)
    gen = [2, 2, 2, 2, 2, 2, 0, 0, 0, 4]
    heads = head_clusters(gen, 5, threshold=0.1)
    np.testing.assert_array_equal(heads, [0, 2])
    np.testing.assert_array_equal(negative_weights(gen, heads), [-1.0] * 9 + [0.0])
    np.testing.assert_array_equal(negative_weights(gen, heads, negative_weight=-0.5)[-2:], [-0.5, 0.0])
    assert head_clusters([], 5).size == 0


def test_effective_sample_size():
    assert effective_sample_size([1, 1, 1, 1]) == 4.0
    # (1 + 3)^2 / (1 + 9) = 1.6
    assert effective_sample_size([1, 3]) == pytest.approx(1.6)
    assert effective_sample_size([]) == 0.0


def test_weighted_loss_equals_mean_ce_with_unit_weights():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7)
    labels = torch.randint(0, 7, (3, 5))
    labels[0, :2] = -100
    labels[2, 4] = -100
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 7), labels[:, 1:].reshape(-1), ignore_index=-100)
    assert weighted_lm_loss(logits, labels, torch.ones(3)) == pytest.approx(expected.item(), rel=1e-6)
    assert weighted_lm_loss(logits, labels) == pytest.approx(expected.item(), rel=1e-6)
    s2s = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), ignore_index=-100)
    assert weighted_lm_loss(logits, labels, None, causal=False) == pytest.approx(s2s.item(), rel=1e-6)


def test_weighted_loss_value_and_gradient_two_examples():
    # seq2seq layout (no shift), vocab 2, one target token per example:
    # example 0: logits (0, 0), label 0 -> CE = ln 2, dCE/dz = softmax - onehot = (1/2 - 1, 1/2) = (-1/2, 1/2)
    # example 1: logits (ln 3, 0), label 1 -> p = (3/4, 1/4), CE = ln 4, dCE/dz = (3/4, 1/4 - 1) = (3/4, -3/4)
    # weights (2, -1), tokens = 2: loss = (2 ln 2 - ln 4) / 2 = 0
    # grads: example 0: 2/2 * (-1/2, 1/2) = (-1/2, 1/2); example 1: -1/2 * (3/4, -3/4) = (-3/8, 3/8)
    logits = torch.tensor([[[0.0, 0.0]], [[math.log(3), 0.0]]], requires_grad=True)
    labels = torch.tensor([[0], [1]])
    loss = weighted_lm_loss(logits, labels, torch.tensor([2.0, -1.0]), causal=False)
    assert loss.item() == pytest.approx(0.0, abs=1e-7)
    loss.backward()
    np.testing.assert_allclose(logits.grad[0, 0].numpy(), [-0.5, 0.5], atol=1e-6)
    np.testing.assert_allclose(logits.grad[1, 0].numpy(), [-3 / 8, 3 / 8], atol=1e-6)


def test_weighted_loss_bad_shapes_and_empty_batch():
    logits = torch.randn(2, 4, 5, requires_grad=True)
    with pytest.raises(ValueError, match="sample_weight has shape"):
        weighted_lm_loss(logits, torch.zeros(2, 4, dtype=torch.long), torch.ones(3))
    with pytest.raises(ValueError, match="do not line up"):
        weighted_lm_loss(logits, torch.zeros(2, 3, dtype=torch.long), causal=False)
    loss = weighted_lm_loss(logits, torch.full((2, 4), -100), torch.ones(2))
    assert loss.item() == 0.0 and loss.requires_grad
