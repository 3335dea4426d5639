"""Label smoothing in the weighted loss and in DialogueLM (Khayrallah & Sedoc's second regularisation axis)."""

import math

import pytest
import torch

from lightning_div.dress.losses import weighted_lm_loss


def _log_softmax(row):
    z = math.log(sum(math.exp(v) for v in row))
    return [v - z for v in row]


# one example, vocabulary 3, seq2seq layout (logits and labels aligned): two target tokens and one ignored
LOGITS = [[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [0.0, 0.0, 0.0]]
LABELS = [0, 1, -100]


def _hand(eps):
    # (1 - eps) * -log p(y) + eps * mean_v -log p(v), summed over the two targets, over 2 target tokens
    total = 0.0
    for row, y in zip(LOGITS[:2], LABELS[:2]):
        logp = _log_softmax(row)
        total += (1 - eps) * -logp[y] + eps * sum(-v for v in logp) / 3
    return total / 2


@pytest.mark.parametrize("eps", [0.0, 0.2, 0.4])
def test_label_smoothing_matches_a_hand_computation(eps):
    logits, labels = torch.tensor([LOGITS]), torch.tensor([LABELS])
    loss = weighted_lm_loss(logits, labels, causal=False, label_smoothing=eps)
    assert float(loss) == pytest.approx(_hand(eps), rel=1e-6)


def test_label_smoothing_leaves_negatives_unsmoothed():
    logits = torch.tensor([LOGITS, LOGITS])
    labels = torch.tensor([LABELS, LABELS])
    weights = torch.tensor([1.0, -1.0])
    loss = weighted_lm_loss(logits, labels, weights, causal=False, label_smoothing=0.4)
    # the gold row is smoothed; the negative row is -1 x its plain NLL; 4 target tokens in the batch
    plain = _hand(0.0) * 2
    assert float(loss) == pytest.approx((_hand(0.4) * 2 - plain) / 4, rel=1e-6)


@pytest.mark.parametrize("eps", [-0.1, 1.0])
def test_label_smoothing_out_of_range_is_refused(eps):
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        weighted_lm_loss(torch.tensor([LOGITS]), torch.tensor([LABELS]), causal=False, label_smoothing=eps)


def test_dialogue_lm_smooths_training_but_measures_plain_nll():
    from lightning_div.model.dialogue_lm import DialogueLM

    with pytest.raises(ValueError, match="label_smoothing must be in"):
        DialogueLM(model_name_or_path=None, tokenizer="local:chitchat", label_smoothing=1.5)
    torch.manual_seed(0)  # a from-scratch model: its near-uniform output makes smoothing's effect small but fixed
    module = DialogueLM(
        model_name_or_path=None,
        tokenizer="local:chitchat",
        from_scratch={"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64},
        label_smoothing=0.3,
    ).eval()  # no dropout: the three forwards below must see one function
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([[-100, -100, 7, 8, 9]])}
    logits = module(batch)
    smoothed = weighted_lm_loss(logits, batch["labels"], label_smoothing=0.3)
    plain = weighted_lm_loss(logits, batch["labels"])
    assert float(module.loss(batch, weighted=True).loss) == pytest.approx(float(smoothed), rel=1e-6)
    assert float(module.loss(batch, weighted=False).loss) == pytest.approx(float(plain), rel=1e-6)
    assert float(smoothed) != pytest.approx(float(plain), rel=1e-4)


def test_dress_loss_smooths_gold_examples_and_keeps_negatives_plain():
    from lightning_div.dress.losses import dress_loss

    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    labels = torch.tensor([[-100, 1, 2, 3], [-100, 4, 5, -100]])
    batch = {"sample_weight": torch.tensor([1.0, -0.5]), "negative": torch.tensor([False, True])}
    parts = dress_loss(logits, labels, batch, label_smoothing=0.2)
    # the whole batch is weighted_lm_loss's smoothed formula; the gold part is the gold row's smoothed
    # cross-entropy and the negative part its plain -0.5 x NLL, each over its own target tokens
    expected = weighted_lm_loss(logits, labels, batch["sample_weight"], label_smoothing=0.2)
    assert float(parts.loss) == pytest.approx(float(expected), rel=1e-6)
    gold = weighted_lm_loss(logits[:1], labels[:1], label_smoothing=0.2)
    negative = weighted_lm_loss(logits[1:], labels[1:], torch.tensor([-0.5]))
    assert float(parts.gold) == pytest.approx(float(gold), rel=1e-6)
    assert float(parts.negative) == pytest.approx(float(negative), rel=1e-6)
