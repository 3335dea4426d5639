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
    assert len(lines) == 1 + 1 + 9
    assert lines[1].startswith("  verdict: no alert measured")  # no RUQ alert logged: nothing to say healthy by
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
    """Issue 54 L10: a run that logged GroupDiversityMonitor's diversity/* keys was "nothing measured yet"."""
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
    assert (
        text.splitlines()[1]
        == "  verdict: no alert measured (no collapse, breakdown or RUQ alert is logged, and no empty-reply share)"
    )
    assert text.splitlines()[2].split() == ["diversity/group_sem_ent", "1.0000", "nats", "entropy", "of", "each"] + (
        "group's clusters, averaged over groups".split()
    )
    with pytest.raises(TypeError, match="a Hugging Face / TRL trainer"):
        summary(object())


# Issue 63: a GRPO run at learning rate 2e-3 broke down from step 9 on (log_history, abridged to the numbers the
# summary reads); its summary printed group Sem-Ent and collapsed_groups and nothing alarming.
BROKEN = [
    {
        "diversity/group_sem_ent": sem,
        "diversity/collapsed_groups": 0.0,
        "diversity/reference_nll": nll,
        "diversity/length_cut_share": 0.0,
        "diversity/group_top_word_share": top,
        "diversity/collapse_alert": 0.0,
        "diversity/breakdown_alert": float(step >= 9),
        "diversity/runtime": 0.028,
        "reward": 0.1,
        "step": step,
    }
    for step, sem, nll, top in [
        (3, 1.02, 4.63, 0.08),
        (6, 0.9, 5.0, 0.2),
        (9, 0.7, 8.0, 0.55),
        (12, 0.6277, 10.57, 0.63),
    ]
]
REASON = "the most frequent word is 63 % of the words within a group (breakdown_top_word = 0.4)"


class _State:
    def __init__(self, history):
        self.log_history, self.global_step = history, history[-1]["step"]


class _Handler:
    def __init__(self, callbacks):
        self.callbacks = callbacks


class _Alerting:  # a GroupDiversityMonitor as the summary sees it: its alert record
    alert_record = {
        "who": "GroupDiversityMonitor",
        "kind": "breakdown",
        "since": 9,
        "unit": "step",
        "reasons": [REASON],
        "key": "diversity/breakdown_alert",
    }


class _TRLTrainer:
    def __init__(self, history, callbacks=()):
        self.state, self.callback_handler = _State(history), _Handler(list(callbacks))


def test_a_broken_grpo_run_opens_with_its_breakdown_its_reason_and_its_numbers():
    lines = summary(_TRLTrainer(BROKEN, [_Alerting()])).splitlines()
    assert lines[:4] == [
        "lightning-div: 12 steps",
        "  verdict: breakdown since step 9 (diversity/breakdown_alert)",
        f"    why: {REASON}",
        "    numbers: group Sem-Ent 0.6277 (first 1.02); NLL under the reference 10.57 (first 4.63); "
        "length-cut share 0 (first 0); top-word share 0.63 (first 0.08)",
    ]
    keys = [line.split()[0] for line in lines[4:]]
    assert keys == [
        "diversity/group_sem_ent",
        "diversity/collapsed_groups",
        "diversity/collapse_alert",
        "diversity/breakdown_alert",
        "diversity/reference_nll",
        "diversity/length_cut_share",
        "diversity/group_top_word_share",
        "diversity/runtime",
    ]
    assert lines[-1].split()[1:3] == ["0.028", "s"]  # was "0.0 s"
    # without the callback (a trainer rebuilt from its log), the start comes from the 0/1 values, no reason
    lines = summary(_TRLTrainer(BROKEN)).splitlines()
    assert lines[1] == "  verdict: breakdown since step 9 (diversity/breakdown_alert)"
    assert lines[2].startswith("    numbers: group Sem-Ent 0.6277 (first 1.02)")
    # an alert that ended is not the verdict: back to healthy at the last step
    healed = [*BROKEN, {**BROKEN[-1], "diversity/breakdown_alert": 0.0, "step": 15}]
    assert summary(_TRLTrainer(healed, [_Alerting()])).splitlines()[1] == (
        "  verdict: healthy (diversity/collapse_alert, diversity/breakdown_alert off)"
    )


def test_lexical_metrics_of_mostly_empty_replies_are_marked():
    """Issue 63: 11 empty replies of 12 showed val/distinct_2 1.0000 and val/distinct_3 1.0000 unmarked."""
    logged = {"val/sem_ent": 0.3, "val/empty_share": 11 / 12, "val/distinct_2": 1.0, "val/distinct_3": 1.0}
    lines = summary(logged).splitlines()
    assert lines[1] == "  verdict: mostly empty replies (val/empty_share)"
    assert (
        lines[2] == "    why: 92% of the replies are empty (from 50% on, the lexical metrics describe almost nothing)"
    )
    marked = {line.split()[0]: "[of mostly empty replies: 92% empty]" in line for line in lines[3:]}
    assert marked == {"val/sem_ent": False, "val/empty_share": False, "val/distinct_2": True, "val/distinct_3": True}
    # below the threshold: nothing marked, and the share is shown beside the lexical metrics
    lines = summary({**logged, "val/empty_share": 0.25}).splitlines()
    assert not any("mostly empty" in line for line in lines)
    assert [line.split()[0] for line in lines[2:]] == [
        "val/sem_ent",
        "val/empty_share",
        "val/distinct_2",
        "val/distinct_3",
    ]
    # the same for a GRPO run's completions
    group = summary({"diversity/group_sem_ent": 0.5, "diversity/empty_share": 0.75, "diversity/distinct_1": 1.0})
    assert "[of mostly empty replies: 75% empty]" in group.splitlines()[-1]


def test_a_hugging_face_run_is_summarised_with_its_ruq_alert_since_its_step():
    history = [
        {"eval_loss": 4.0, "eval_sem_ent": 2.0, "eval_ruq": 40.0, "eval_ruq_alert": 0.0, "step": 10},
        {"loss": 3.9, "step": 15},
        {"eval_loss": 3.8, "eval_sem_ent": 1.5, "eval_ruq": 20.0, "eval_ruq_alert": 1.0, "step": 20},
        {"eval_loss": 3.7, "eval_sem_ent": 1.25, "eval_ruq": 15.0, "eval_ruq_alert": 1.0, "step": 30},
    ]
    lines = summary(_TRLTrainer(history)).splitlines()
    assert lines[:3] == [
        "lightning-div: 30 steps",
        "  verdict: RUQ alert since step 20 (eval_ruq_alert)",
        "    numbers: Sem-Ent 1.25 (first 2); RUQ 15 (first 40)",
    ]
    assert [line.split()[0] for line in lines[3:]] == ["eval_loss", "eval_sem_ent", "eval_ruq", "eval_ruq_alert"]
    assert lines[5].split()[1:3] == ["15.0", "%"]


def test_avg_distinct_says_it_is_not_the_mean_of_the_lines_above():
    lines = summary({"val/distinct_1": 0.5, "val/distinct_2": 0.7, "val/avg_distinct": 0.75}).splitlines()
    assert lines[-1].endswith("mean of distinct-1 to distinct-5 (not of the lines above)")


def test_a_lightning_run_says_since_which_epoch_from_its_monitors_history():
    """callback_metrics hold the last values only: the monitors' histories say when the replies emptied out."""

    class Monitor:
        kind, name = "semantic_diversity", None
        history = [
            {"epoch": 0.0, "val/empty_share": 0.0, "val/sem_ent": 2.0},
            {"epoch": 1.0, "val/empty_share": 0.9, "val/sem_ent": 0.4},
            {"epoch": 2.0, "val/empty_share": 1.0, "val/sem_ent": 0.0},
        ]

    class Trainer:
        callback_metrics = {"val/empty_share": torch.tensor(1.0), "val/sem_ent": torch.tensor(0.0)}
        current_epoch, global_step, callbacks = 3, 39, [Monitor()]

    lines = summary(Trainer()).splitlines()
    assert lines[1] == "  verdict: mostly empty replies since epoch 1 (val/empty_share)"
    Trainer.callbacks = []  # without a history: the state, but not since when
    assert summary(Trainer()).splitlines()[1] == "  verdict: mostly empty replies (val/empty_share)"


def test_a_grpo_runs_loss_is_not_called_an_nll():
    """A GRPO / RLOO run's loss is its policy-gradient objective (0.0 at step 16 of a broken run read
    "0.0000 nats/token"); a Lightning run's training loss stays an NLL per token."""
    grpo = {m.key: m for m in measurements({"train/loss": 0.0, "diversity/group_sem_ent": 0.75})}
    assert (grpo["train/loss"].unit, grpo["train/loss"].note) == ("", "the trainer's policy loss (not an NLL)")
    assert grpo["diversity/group_sem_ent"].unit == "nats"
    sft = {m.key: m for m in measurements({"train/loss": 2.0, "val/sem_ent": 1.0})}
    assert sft["train/loss"].unit == "nats/token"
