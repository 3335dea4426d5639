"""RUQ's reference choice and margin: hand-computed in the metric, the torchmetrics state and the monitor."""

import math

import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from monitor_setup import fit, ruq_monitor
from torch.utils.data import DataLoader

from lightning_div import DialoguePair
from lightning_div.callbacks.ruq import RUQMonitor, RUQPlot, RUQScoring
from lightning_div.metrics import ruq_margin, ruq_score
from lightning_div.metrics._states import RUQ  # deprecated (docs/measure.md): tested until it goes
from lightning_div.metrics.ruq import reference_scores_of
from lightning_div.settings import Generation, Outputs

IDK1, IDK2 = "idk", "idk two"

# Per (context, response): the token log-probs a fixed model gives (means in the comments).
# Prompt a: references r1 (-1), r2 (-3); prompt b: one reference s1 (-1.5);
# prompt c: references t1 (-4), t2 (-0.5), t3 (-2.5).
LOGPROBS = {
    ("a", "r1"): [-1.0, -1.0],
    ("a", "r2"): [-2.0, -4.0],
    ("a", IDK1): [-2.0],
    ("a", IDK2): [0.0, -1.0],
    ("b", "s1"): [-1.0, -2.0],
    ("b", IDK1): [-0.5, -1.5],
    ("b", IDK2): [-2.0],
    ("c", "t1"): [-4.0],
    ("c", "t2"): [-0.5],
    ("c", "t3"): [-2.0, -3.0],
    ("c", IDK1): [-3.0, -3.0, -3.0],
    ("c", IDK2): [-0.25],
}
PAIRS = [DialoguePair(("a",), "r1", ("r2",)), DialoguePair(("b",), "s1"), DialoguePair(("c",), "t1", ("t2", "t3"))]
REFS = [[-1.0, -3.0], [-1.5], [-4.0, -0.5, -2.5]]
IDK1_SCORES, IDK2_SCORES = [-2.0, -1.0, -3.0], [-0.5, -2.0, -0.25]

# By hand. "lowest": references -3, -1.5, -4; "first": -1, -1.5, -4.
#  IDK1 (-2, -1, -3):   lowest: none preferred -> 0;    margin (-1 - 0.5 - 1)/3    = -2.5/3
#                       first:  a preferred   -> 100/3; margin (1 - 0.5 - 1)/3     = -0.5/3
#  IDK2 (-0.5, -2, -0.25): lowest: b preferred -> 100/3; margin (-2.5 + 0.5 - 3.75)/3 = -5.75/3
#                       first:  b preferred   -> 100/3; margin (-0.5 + 0.5 - 3.75)/3 = -3.75/3
EXPECTED = {
    "lowest": {"ruq_idk1": 0.0, "ruq_idk2": 100 / 3, "ruq_margin_idk1": -2.5 / 3, "ruq_margin_idk2": -5.75 / 3},
    "first": {"ruq_idk1": 100 / 3, "ruq_idk2": 100 / 3, "ruq_margin_idk1": -0.5 / 3, "ruq_margin_idk2": -3.75 / 3},
}


class FixedModel(pl.LightningModule):
    """A LightningModule that *is* a DialogueModelAdapter with the log-probs above; one trainable weight."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def generate(self, contexts, **kwargs):
        return ["x"] * len(contexts)

    def token_logprobs(self, contexts, responses):
        return [
            torch.tensor(LOGPROBS[(c[-1] if not isinstance(c, str) else c, r)]) for c, r in zip(contexts, responses)
        ]

    def training_step(self, batch, batch_idx):
        return (self.w**2).sum() + batch.sum() * 0

    def train_dataloader(self):
        return DataLoader(torch.zeros(2, 1), batch_size=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("reference", ["lowest", "first"])
def test_ruq_and_margin_by_hand(reference):
    want = EXPECTED[reference]
    assert ruq_score(REFS, IDK1_SCORES, reference) == pytest.approx(want["ruq_idk1"])
    assert ruq_score(REFS, IDK2_SCORES, reference=reference) == pytest.approx(want["ruq_idk2"])
    assert ruq_margin(REFS, IDK1_SCORES, reference) == pytest.approx(want["ruq_margin_idk1"], abs=1e-12)
    assert ruq_margin(REFS, IDK2_SCORES, reference) == pytest.approx(want["ruq_margin_idk2"], abs=1e-12)
    metric = RUQ(reference=reference)
    metric.update(REFS[:2], IDK1_SCORES[:2])
    metric.update(REFS[2:], IDK1_SCORES[2:])
    assert float(metric.compute()) == pytest.approx(want["ruq_idk1"])


def test_reference_choice_and_margin_details():
    assert reference_scores_of(REFS, "first") == [-1.0, -1.5, -4.0]
    assert reference_scores_of(REFS, "lowest") == reference_scores_of(REFS) == [-3.0, -1.5, -4.0]  # the default
    # the default is the paper's recommendation, "lowest"
    assert ruq_score(REFS, IDK1_SCORES) == 0.0 and ruq_margin(REFS, IDK1_SCORES) == pytest.approx(-2.5 / 3)
    # a tie is not preferred but contributes 0 to the margin
    assert ruq_score([-2.0], [-2.0]) == 0.0 and ruq_margin([-2.0], [-2.0]) == 0.0
    assert ruq_margin([-1.0, -4.0], [-2.0, -2.0]) == pytest.approx(-0.5)  # (1 - 2) / 2
    with pytest.raises(ValueError, match="reference must be 'lowest'.*or 'first'.*got 'min'"):
        ruq_score(REFS, IDK1_SCORES, "min")
    with pytest.raises(ValueError, match="reference must be"):
        RUQ(reference="last")
    with pytest.raises(ValueError, match="reference must be"):
        RUQScoring(reference="all")
    with pytest.raises(ValueError, match="ruq_margin needs at least one prompt"):
        ruq_margin([], [])
    with pytest.raises(ValueError, match="reference_scores has 1 prompts but idk_scores has 2"):
        ruq_margin([-1.0], [-1.0, -2.0])
    # "first" still refuses a NaN in a reference it does not use: that is a scoring bug upstream
    with pytest.raises(ValueError, match=r"reference_scores\[0\]\[1\]"):
        ruq_margin([[-1.0, math.nan]], [-2.0], "first")


@pytest.mark.parametrize("reference", ["lowest", "first"])
def test_monitor_compute_by_hand(reference):
    monitor = RUQMonitor(
        idk_responses=[IDK1, IDK2], scoring=RUQScoring(reference), outputs=Outputs(show_progress=False), plot=None
    )
    got = monitor.compute(FixedModel(), PAIRS)
    want = EXPECTED[reference]
    assert set(got) == {"ruq", "ruq_margin", *want}
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    assert got["ruq"] == got["ruq_idk1"] and got["ruq_margin"] == got["ruq_margin_idk1"]


def test_monitor_logs_margins_every_epoch(tmp_path):
    monitor = RUQMonitor(
        idk_responses=[IDK1, IDK2],
        scoring=RUQScoring(reference="first"),
        train_pairs=PAIRS,
        val_pairs=PAIRS[::-1],
        num_train_contexts=None,
        num_contexts=None,
        plot=None,
        outputs=Outputs(show_progress=False, dirpath=str(tmp_path)),
        on_error="raise",
    )
    trainer = quiet_trainer(
        callbacks=[monitor],
        max_epochs=2,
        num_sanity_val_steps=2,  # Lightning's default, which this run was written with
        default_root_dir=str(tmp_path),
    )
    trainer.fit(FixedModel())
    want = EXPECTED["first"]
    for split in ("train", "val"):
        rows = [h for h in monitor.history if f"{split}/ruq_margin" in h]
        assert [h["epoch"] for h in rows] == [0.0, 1.0]
        for h in rows:
            assert h[f"{split}/ruq_margin"] == pytest.approx(want["ruq_margin_idk1"], abs=1e-9)
            assert h[f"{split}/ruq_margin_idk2"] == pytest.approx(want["ruq_margin_idk2"], abs=1e-9)
            assert h[f"{split}/ruq"] == pytest.approx(want["ruq_idk1"])
        assert trainer.callback_metrics[f"{split}/ruq_margin"].item() == pytest.approx(
            want["ruq_margin_idk1"], abs=1e-6
        )


def _ruq_values(rank, world_size, shared):
    """RUQMonitor.compute on 16 chitchat prompts, on whatever number of processes runs it."""
    from helpers import causal_model, chitchat_pairs, tokenizer

    from lightning_div.model.adapters import HuggingFaceAdapter

    adapter = HuggingFaceAdapter(causal_model(), tokenizer(False), show_progress=False, batch_size=8)
    monitor = RUQMonitor(
        outputs=Outputs(show_progress=False),
        generation=Generation(batch_size=8),
        scoring=RUQScoring(shared_contexts=shared),
    )
    return monitor.compute(adapter, list(chitchat_pairs("validation", 60))[:16])


def _margin_tolerance() -> float:
    """float32 rounding of this model's margins (helpers.float32_margin_tolerance); near 0.004 here."""
    from helpers import causal_model, chitchat_pairs, float32_margin_tolerance, tokenizer

    from lightning_div.model.adapters import HuggingFaceAdapter

    adapter = HuggingFaceAdapter(causal_model(), tokenizer(False), show_progress=False, batch_size=8)
    idk = RUQMonitor(outputs=Outputs(show_progress=False)).idk_responses
    return float32_margin_tolerance(adapter, list(chitchat_pairs("validation", 60))[:16], idk)


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_shared_contexts_on_two_processes():
    """Shared-context RUQ on 2 processes: the same RUQ, margins to float32 rounding; pair by pair: bit for bit."""
    from ddp_utils import run_distributed

    single = {shared: _ruq_values(0, 1, shared) for shared in (True, False)}
    # 3.2e-6 here: a margin of 0.0041664555 on 2 processes against 0.0041664655 on one failed the old
    # rel=1e-6 of the (near-0) margin itself
    tolerance = _margin_tolerance()
    assert 0 < tolerance < 1e-5
    for shared in (True, False):
        rank0, rank1 = run_distributed(_ruq_values, 2, shared)
        assert rank0 == rank1  # every rank gets the gathered values
        for key, value in single[shared].items():
            if key.startswith("ruq_margin") and shared:
                assert rank0[key] == pytest.approx(value, rel=0, abs=tolerance), key
            else:
                assert rank0[key] == value, key  # RUQ itself, and every value of pair-by-pair scoring
    # the two ways of scoring agree to float32 rounding too (RUQ itself exactly)
    for key, value in single[False].items():
        if key.startswith("ruq_margin"):
            assert single[True][key] == pytest.approx(value, rel=0, abs=tolerance), key
        else:
            assert single[True][key] == value, key


def test_ruq_per_idk_splits_each_prompts_scores_by_hand():
    from lightning_div.metrics.ruq import ruq_per_idk

    # prompt 0: one reference (-2.0), IDK strings -1.0 (preferred) and -3.0
    # prompt 1: two references (-4.0, -1.5), IDK strings -2.0 and -0.5
    scores = [[-2.0, -1.0, -3.0], [-4.0, -1.5, -2.0, -0.5]]
    out = ruq_per_idk(scores, [1, 2], 2, "lowest")
    # lowest reference: -2.0 and -4.0. IDK 1: -1.0 > -2.0 and -2.0 > -4.0 -> RUQ 0 %; IDK 2: -3.0 < -2.0, -0.5 > -4.0 -> 50 %
    assert out["ruq_idk1"] == 0.0 and out["ruq_idk2"] == 50.0
    assert out["ruq"] == out["ruq_idk1"] and out["ruq_margin"] == out["ruq_margin_idk1"]
    # margin: mean of reference minus IDK
    assert out["ruq_margin_idk1"] == pytest.approx(((-2.0 - -1.0) + (-4.0 - -2.0)) / 2)
    assert out["ruq_margin_idk2"] == pytest.approx(((-2.0 - -3.0) + (-4.0 - -0.5)) / 2)
    first = ruq_per_idk(scores, [1, 2], 2, "first")  # prompt 1 keeps -4.0 either way here
    assert first["ruq_idk2"] == 50.0
    with pytest.raises(ValueError, match="prompt 1: 3 scores for 2 references and 2 IDK strings"):
        ruq_per_idk([[-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0]], [1, 2], 2)
    assert ruq_per_idk([[-1.0]], [1], 0) == {}


def test_a_failing_ruq_plot_keeps_ruq_and_its_alert(tmp_path, monkeypatch):

    def broken(*args, **kwargs):
        raise RuntimeError("beam search exploded")

    import lightning_div.measure.ruq as ruq_core

    monkeypatch.setattr(ruq_core, "generate_responses", broken)  # only the plot's beam search generates
    cb = ruq_monitor(tmp_path, num_train_contexts=4, num_contexts=4, plot=RUQPlot(num_contexts=2, num_beams=2))
    with pytest.warns(
        RuntimeWarning,
        match=r"RUQMonitor: the RUQ plot failed at epoch 0: RuntimeError\('beam "
        r"search exploded'\); the values measured before it are logged",
    ):
        fit(tmp_path, [cb])
    logged = {k for row in cb.history for k in row}
    assert {"val/ruq", "val/ruq_idk1", "val/ruq_idk2", "val/ruq_alert", "train/ruq"} <= logged
