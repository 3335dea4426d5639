"""print_summary: what a run measured, ordered, with units (issue 43 item 3: the README scripts printed an
unordered dict that repeated the loss, listed every per-IDK variant and gave no units)."""

from __future__ import annotations

import io

import pytest
import torch

from lightning_div import print_summary
from lightning_div.summary import measurements, summary

# what trainer.callback_metrics held after the quick start, in Lightning's (unordered) order
LOGGED = {
    "timing/semantic_diversity_s": torch.tensor(3.25),
    "val/ruq_idk2": torch.tensor(4.0),
    "train/loss_step": torch.tensor(3.9),
    "val/ruq": torch.tensor(6.0),
    "train/loss": torch.tensor(4.05),
    "val/sem_ent": torch.tensor(1.98765),
    "train/loss_epoch": torch.tensor(4.05),
    "val/loss": torch.tensor(4.1234),
    "val/ruq_margin_idk1": torch.tensor(-2.0),
    "val/ruq_margin": torch.tensor(-2.0),
    "val/sem_ent_gold": torch.tensor(2.2),
    "train/ruq": torch.tensor(12.0),
    "my/val/ruq": torch.tensor(50.0),
    "val/my_own_metric": torch.tensor(0.5),
}


def test_the_headline_numbers_in_order_with_units():
    got = [(m.key, m.shown()) for m in measurements(LOGGED)]
    assert got == [
        ("val/loss", "4.1234 nats/token"),
        ("train/loss", "4.0500 nats/token"),  # the epoch mean, once (not _step and _epoch beside it)
        ("val/sem_ent", "1.9877 nats"),
        ("val/sem_ent_gold", "2.2000 nats"),
        ("train/ruq", "12.0 %"),
        ("val/ruq", "6.0 %"),
        ("val/ruq_margin", "-2.0000 nats/token"),
        ("my/val/ruq", "50.0 %"),  # a callback with a name, after the unnamed ones
        ("timing/semantic_diversity_s", "3.2 s"),
    ]


def test_printed_table_of_a_trainer_names_its_epochs_and_ln_k():
    class Space:
        num_clusters = 10

    class Monitor:
        kind, name, space = "semantic_diversity", None, Space()

    class Trainer:
        callback_metrics = LOGGED
        current_epoch, global_step, callbacks = 2, 64, [Monitor()]

    out = io.StringIO()
    print_summary(Trainer(), file=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "lightning-div: 2 epoch(s), 64 steps"
    assert len(lines) == 1 + 9
    sem_ent = next(line for line in lines if line.strip().startswith("val/sem_ent "))
    assert "1.9877 nats" in sem_ent and "(0 to ln 10 = 2.30)" in sem_ent
    ruq = next(line for line in lines if line.strip().startswith("val/ruq "))
    assert "6.0 %" in ruq and "I don't know." in ruq
    assert out.getvalue() == summary(Trainer()) + "\n"


def test_nothing_measured_and_bad_input():
    assert summary({}) == "lightning-div\n  nothing measured yet (no headline metric in callback_metrics)"
    assert summary({"val/loss": float("nan")}).endswith("val/loss  nan nats/token")  # shown, not dropped
    with pytest.raises(TypeError, match="takes a Lightning Trainer"):
        summary(object())


def test_a_grpo_runs_group_diversity_is_summarised():
    """Issue 54 L10: a run that logged GroupDiversityCallback's diversity/* keys was "nothing measured yet"."""
    row = {
        "reward": 0.5,
        "diversity/runtime": 0.25,
        "diversity/sem_ent": 1.5,
        "diversity/group_clusters": 2.5,
        "diversity/collapsed_groups": 0.25,
        "diversity/group_sem_ent": 0.75,
        "diversity/big/group_sem_ent": 0.5,
        "step": 4,
    }
    got = [(m.key, m.shown()) for m in measurements(row)]
    assert got == [
        ("diversity/group_sem_ent", "0.7500 nats"),
        ("diversity/group_clusters", "2.5000 clusters"),
        ("diversity/collapsed_groups", "0.2500"),
        ("diversity/sem_ent", "1.5000 nats"),
        ("diversity/runtime", "0.2 s"),
        ("diversity/big/group_sem_ent", "0.5000 nats"),  # a callback with a name, after the unnamed one
    ]

    class State:  # a Hugging Face / TRL trainer: its state.log_history, each key's last value
        log_history = [{"diversity/group_sem_ent": 0.25, "step": 2}, {"diversity/group_sem_ent": 1.0, "step": 4}]

    class GRPOTrainer:
        state = State()

    text = summary(GRPOTrainer())
    assert "nothing measured" not in text
    assert text.splitlines()[1].split() == ["diversity/group_sem_ent", "1.0000", "nats", "entropy", "of", "each"] + (
        "group's clusters, averaged over groups".split()
    )
    with pytest.raises(TypeError, match="a Hugging Face / TRL trainer"):
        summary(object())
