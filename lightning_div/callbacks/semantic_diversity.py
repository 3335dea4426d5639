"""SemanticDiversityMonitor: Sem-Ent and lexical diversity of generated responses at validation epoch end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytorch_lightning as pl

from lightning_div.callbacks.base import ValidationMonitor, sample_indices
from lightning_div.callbacks.clusters import ClusterSpec
from lightning_div.datamodules.formats import DialoguePair
from lightning_div.metrics import DEFAULT_LEXICAL, check_lexical_names, count_vocab, lexical_scores, semantic_entropy
from lightning_div.tracking import log_figure, log_table


class SemanticDiversityMonitor(ValidationMonitor):
    """Sem-Ent (Han et al., 2022) and lexical diversity of the model's responses on a fixed validation sample.

    At fit start the semantic clusters are loaded (``clusters`` = a SemanticClusters
    or a saved file) or fitted on the gold training responses and cached in
    ``dirpath`` (the same file DRESSReweighting uses, so the work is done once). At
    each measured validation epoch end: generate for the fixed sample (greedy with
    3-gram blocking by default; sharded across processes and gathered), embed, assign
    clusters, and log ``val/sem_ent``, the lexical metrics (``val/distinct_1`` ...
    ``val/ead``), once ``val/sem_ent_gold`` (Sem-Ent of the gold responses of the same
    contexts: the ceiling to compare with), a generated-vs-gold cluster histogram
    figure and a table of ``log_samples`` example responses with their cluster ids.

    Args:
        encoder: model name/path for :class:`~lightning_div.embedding.ResponseEncoder`, or an encoder.
        clusters: a fitted SemanticClusters, a path to a saved one, or None (fit on gold responses).
        num_clusters: k of the k-means clusters (paper: 20).
        variance_kept: explained variance the PCA keeps (paper: 0.9).
        kmeans_seed: faiss k-means seed (paper: 27).
        num_contexts: size of the fixed validation sample (None = all).
        generation_kwargs: overrides of the greedy + no_repeat_ngram_size=3 default.
        lexical_metrics: which of distinct_<n>, avg_distinct, ent_<n>, ead to add.
        vocab_size: V of EAD; default: counted from the gold training responses.
        log_samples: how many example responses go in the table (0 = none).
        val_pairs: explicit evaluation data; default: the datamodule's ``val_pairs()``.
        gold_responses: explicit gold training responses for the clusters; default: the
            datamodule's ``gold_train_responses()``.
        encoder_kwargs: extra ResponseEncoder arguments (pooling, max_length, dtype, ...).
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`.
    """

    name = "semantic_diversity"

    def __init__(self, encoder: Any = "microsoft/DialoGPT-large", clusters: Any = None, num_clusters: int = 20,
                 variance_kept: float = 0.9, kmeans_seed: int = 27, num_contexts: int | None = 256,
                 generation_kwargs: dict[str, Any] | None = None,
                 lexical_metrics: Sequence[str] = DEFAULT_LEXICAL, vocab_size: int | None = None,
                 log_samples: int = 8, val_pairs: Any = None, gold_responses: Any = None,
                 encoder_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = ClusterSpec(encoder=encoder, clusters=clusters, num_clusters=num_clusters,
                                variance_kept=variance_kept, kmeans_seed=kmeans_seed, encoder_kwargs=encoder_kwargs)
        self.num_contexts = num_contexts
        self.generation_kwargs = dict(generation_kwargs or {})
        self.lexical_metrics = check_lexical_names(lexical_metrics)
        self.vocab_size = vocab_size
        self.log_samples = log_samples
        self.val_pairs_arg = val_pairs
        self.gold_responses_arg = gold_responses
        self.clusters: Any = None
        self._indices: list[int] | None = None
        self._sample: list[DialoguePair] | None = None
        self._gold_logged = False

    # -- preparation ----------------------------------------------------------------------------

    def gold_responses(self, trainer: pl.Trainer) -> list[str] | None:
        """Gold training responses (explicit, or the datamodule's); None when neither is available."""
        if self.gold_responses_arg is not None:
            from lightning_div.datamodules.formats import read_responses

            return read_responses(self.gold_responses_arg)
        dm = getattr(trainer, "datamodule", None)
        if dm is not None and callable(getattr(dm, "gold_train_responses", None)):
            return list(dm.gold_train_responses())
        return None

    def prepare(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Fix the validation sample and load or fit the clusters (once per run)."""
        if self._sample is None:
            pairs = self.resolve_pairs(trainer, self.val_pairs_arg, "val_pairs", "val_pairs")
            if self._indices is None or (self._indices and max(self._indices) >= len(pairs)):
                self._indices = sample_indices(len(pairs), self.num_contexts, self.seed).tolist()
            self._sample = [pairs[i] for i in self._indices]
        if self.clusters is None:
            gold = None
            if self.spec.clusters is None:
                gold = self.gold_responses(trainer)
                if gold is None:
                    raise ValueError(
                        f"{type(self).__name__} needs gold training responses to fit its semantic clusters: pass "
                        "gold_responses=[...] (or a file), clusters=<a SemanticClusters or saved file>, or use a "
                        "datamodule with gold_train_responses() (lightning_div.datamodules.DialogueDataModule)")
            self.clusters = self.spec.get_clusters(pl_module, gold, self.cache_dir(trainer),
                                                   self.batch_size, self.show_progress)
        if self.vocab_size is None and "ead" in self.lexical_metrics:
            gold = self.gold_responses(trainer)
            self.vocab_size = count_vocab(gold if gold else [p.response for p in self._sample])

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        self.prepare(trainer, pl_module)

    # -- measurement ----------------------------------------------------------------------------

    def measure_validation(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        with self.measuring(trainer, pl_module, "semantic diversity") as m:
            self.prepare(trainer, pl_module)
            sample = self._sample
            responses = self.generate(self.adapter(pl_module), [p.context for p in sample], self.generation_kwargs)
            encoder = self.spec.get_encoder(pl_module, self.batch_size, self.show_progress)
            k = self.clusters.num_clusters
            ids = self.clusters.assign(encoder.encode(responses))
            gold_ids = self.clusters.assign(encoder.encode([p.response for p in sample]))
            m["val/sem_ent"] = semantic_entropy(ids, k)
            m.update({f"val/{name}": v for name, v in
                      lexical_scores(responses, self.lexical_metrics, self.vocab_size).items()})
            if not self._gold_logged:
                m["val/sem_ent_gold"] = semantic_entropy(gold_ids, k)
                self._gold_logged = True
            self.last_responses = responses
            if trainer.is_global_zero:
                self._log_artifacts(trainer, sample, responses, ids, gold_ids)

    def _log_artifacts(self, trainer: pl.Trainer, sample: Sequence[DialoguePair], responses: Sequence[str],
                       ids: np.ndarray, gold_ids: np.ndarray) -> None:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        out = self.output_dir(trainer)
        k = self.clusters.num_clusters
        gen_share = self.clusters.histogram(ids) / max(len(ids), 1)
        gold_share = self.clusters.histogram(gold_ids) / max(len(gold_ids), 1)
        fig, ax = plt.subplots(figsize=(max(6, k * 0.35), 3.5))
        x = np.arange(k)
        ax.bar(x - 0.2, gold_share, width=0.4, label="gold")
        ax.bar(x + 0.2, gen_share, width=0.4, label="generated")
        ax.set_xticks(x)
        ax.set_xlabel("semantic cluster")
        ax.set_ylabel("share of responses")
        ax.set_title(f"Semantic clusters, epoch {trainer.current_epoch}")
        ax.legend()
        log_figure(trainer, "val/cluster_histogram", fig, out)
        if self.log_samples > 0:
            rows = [[p.context[-1] if p.context else "", r, int(c), p.response, int(g)]
                    for p, r, c, g in list(zip(sample, responses, ids, gold_ids))[: self.log_samples]]
            log_table(trainer, "val/samples", ["context (last turn)", "generated", "cluster", "gold", "gold cluster"],
                      rows, out)

    # -- checkpointing --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "indices": self._indices, "clusters_path": self.spec.clusters_path,
                "gold_logged": self._gold_logged, "vocab_size": self.vocab_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._indices = state_dict.get("indices")
        self.spec.clusters_path = state_dict.get("clusters_path")
        self._gold_logged = bool(state_dict.get("gold_logged", False))
        self.vocab_size = state_dict.get("vocab_size", self.vocab_size)
        self._sample = None
        self.clusters = None
