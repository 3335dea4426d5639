"""The small typed settings objects the front ends take, instead of one flat argument per setting.

Each groups what belongs together and has defaults, so a one-line use stays one line and a
changed default is changed in one place. They are plain dataclasses: LightningCLI (jsonargparse)
configures them as nested mappings (``generation: {batch_size: 16}``), and so does a YAML file.

* :class:`ModelAccess`: where a Lightning callback finds the Hugging Face model and tokenizer, and their layout;
* :class:`Generation`: how a monitor generates the responses it measures;
* :class:`Lexical`: the lexical metrics measured beside Sem-Ent, their options and EAD's vocabulary size;
* :class:`Outputs`: what a front end shows and writes besides the logged values;
* :class:`Mining`: DRESS's negative mining;
* :class:`RUQPlot`: RUQ's per-position plot, one class for the Lightning and the Hugging Face monitors.

The semantic space (encoder + clusters) is an object of its own,
:class:`~lightning_div.semantic.space.SemanticSpace`, given as ``space=`` to every front end.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_div._internal.counts import check_required_count
from lightning_div.dress.schedule import MINE_AT
from lightning_div.dress.weights import check_head_threshold, check_negative_weight
from lightning_div.keys import DEFAULT_LEXICAL, NEGATIVE_LOSSES
from lightning_div.model.formatting import DialogueLayout
from lightning_div.reweighting import NEGATIVE_BATCHES
from lightning_div.types import Options

__all__ = ["Generation", "Lexical", "Mining", "ModelAccess", "Outputs", "RUQPlot"]


def _positive_int(owner: str, name: str, value: Any) -> int:
    return check_required_count(f"{owner}.{name}", value)


def _choice(owner: str, name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{owner}.{name} must be one of {list(choices)}, got {value!r}")
    return str(value)


@dataclass(frozen=True)
class ModelAccess:
    """Where a Lightning callback finds the Hugging Face model and its tokenizer, and how dialogues become tokens.

    Attributes:
        model_attr: the LightningModule's attribute holding the Hugging Face model.
        tokenizer_attr: the LightningModule's attribute holding its tokenizer.
        layout: the turn separator and the turns kept, shared with training; None: the datamodule's
            ``layout`` when it has one (a :class:`~lightning_div.datamodules.DialogueDataModule`), else
            ``DialogueLayout()``.

    Raises:
        ValueError: an attribute name that is not a non-empty string, or a layout that is not a ``DialogueLayout``.
    """

    model_attr: str = "model"
    tokenizer_attr: str = "tokenizer"
    layout: DialogueLayout | None = None

    def __post_init__(self) -> None:
        for name in ("model_attr", "tokenizer_attr"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"ModelAccess.{name} must be an attribute name, got {value!r}")
        if self.layout is not None and not isinstance(self.layout, DialogueLayout):
            raise ValueError(f"ModelAccess.layout must be a DialogueLayout or None, got {self.layout!r}")


@dataclass(frozen=True)
class Generation:
    """How a monitor generates the responses it measures.

    Attributes:
        batch_size: contexts per generation (and scoring, embedding) batch.
        max_new_tokens: the length limit of a generated response, in tokens.
        options: overrides of the generation a monitor uses (greedy with 3-gram blocking for
            Sem-Ent and DRESS; nucleus sampling for NLI), passed to ``generate``, e.g.
            ``{"do_sample": True, "top_p": 0.9}``.

    Raises:
        ValueError: a batch size or length that is not an integer >= 1, or options that are not a mapping.
    """

    batch_size: int = 32
    max_new_tokens: int = 32
    options: Options = field(default_factory=dict)  # plain values: a config cannot class_path an object in

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_size", _positive_int("Generation", "batch_size", self.batch_size))
        object.__setattr__(self, "max_new_tokens", _positive_int("Generation", "max_new_tokens", self.max_new_tokens))
        if self.options is None:
            object.__setattr__(self, "options", {})
        if not isinstance(self.options, Mapping):
            raise ValueError(f"Generation.options must be a mapping of generate() arguments, got {self.options!r}")
        object.__setattr__(self, "options", dict(self.options))


@dataclass(frozen=True)
class Lexical:
    """The lexical metrics measured beside Sem-Ent, their options and EAD's vocabulary size.

    Attributes:
        metrics: names of the lexical metrics (see :func:`~lightning_div.metrics.lexical_scores`).
        options: ``tokenizer`` / ``lowercase`` / ``base`` of the lexical metrics.
        vocab_size: V of EAD; None: counted from the clustering corpus when the monitor starts.

    The names and options are checked where they are used (:func:`~lightning_div.metrics.check_lexical_names`).
    """

    metrics: Sequence[str] = DEFAULT_LEXICAL
    options: Options = field(default_factory=dict)  # plain values: a config cannot class_path an object in
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.metrics, str):  # "ead" would read as the metrics "e", "a", "d"
            raise ValueError(f"Lexical.metrics must be a list of metric names, got the string {self.metrics!r}")
        object.__setattr__(self, "metrics", tuple(self.metrics))
        object.__setattr__(self, "options", dict(self.options or {}))


@dataclass(frozen=True)
class Outputs:
    """What a front end shows and writes besides the values it logs.

    Attributes:
        log_samples: responses logged as a table at each measurement (0: none).
        cluster_views: write the cluster heatmap and the embedding map.
        show_progress: progress bars (plain progress lines when the output is a file).
        dirpath: cache directory (clusters); default ``<default_root_dir>/lightning_div_cache``
            (Lightning) or ``<output_dir>/lightning_div_cache`` (Hugging Face). Figures and tables go
            beside the first logger's files, or to ``<dirpath>/plots`` without a logger.

    Raises:
        ValueError: a negative ``log_samples``.
    """

    log_samples: int = 8
    cluster_views: bool = True
    show_progress: bool = True
    dirpath: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.log_samples, bool) or not isinstance(self.log_samples, numbers.Integral):
            raise ValueError(f"Outputs.log_samples must be an integer >= 0, got {self.log_samples!r}")
        if self.log_samples < 0:
            raise ValueError(f"Outputs.log_samples must be an integer >= 0, got {self.log_samples!r}")
        if self.dirpath is not None:
            object.__setattr__(self, "dirpath", str(self.dirpath))


@dataclass(frozen=True)
class Mining:
    """DRESS's negative mining: the model's own responses in head clusters, trained away from.

    Attributes:
        num_contexts: training contexts generated for at each mining round (the fixed sample's size).
        head_threshold: a cluster whose share of the mined responses is above this is a head cluster
            (a share in [0, 1)).
        weight: the negatives' weight in the loss, a finite number < 0 (pushed away; the paper: -1).
        at: ``"start"`` (the authors: every round's start, greedy without n-gram blocking) or
            ``"end"`` (every round's end).
        loss: ``"unlikelihood"`` (|weight| x -log(1 - p) a token, bounded) or ``"nll"`` (the
            authors' negative-weighted NLL).
        batches: ``"separate"`` (the authors: the negatives in batches of their own) or ``"mixed"``.

    Raises:
        ValueError: an unknown ``at`` / ``loss`` / ``batches``, or a size or threshold out of range.
    """

    num_contexts: int = 5000
    head_threshold: float = 0.1
    weight: float = -1.0
    at: str = "start"
    loss: str = "unlikelihood"
    batches: str = "separate"

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_contexts", _positive_int("Mining", "num_contexts", self.num_contexts))
        object.__setattr__(self, "head_threshold", check_head_threshold(self.head_threshold, "Mining.head_threshold"))
        object.__setattr__(self, "weight", check_negative_weight(self.weight, "Mining.weight"))
        _choice("Mining", "at", self.at, MINE_AT)
        _choice("Mining", "loss", self.loss, NEGATIVE_LOSSES)
        _choice("Mining", "batches", self.batches, NEGATIVE_BATCHES)


@dataclass(frozen=True)
class RUQPlot:
    """RUQ's per-position plot (the paper's Figure 1), drawn at every measured validation / evaluation.

    Attributes:
        num_contexts: the contexts plotted, the first of RUQ's fixed sample (their beam search is the
            costly part: 64 took most of a quick-start epoch, hence 16).
        num_beams: the beam size of the plot's "model output" line.

    Raises:
        ValueError: a number that is not an integer >= 1.
    """

    num_contexts: int = 16
    num_beams: int = 5

    def __post_init__(self) -> None:
        for name in ("num_contexts", "num_beams"):
            object.__setattr__(self, name, _positive_int("RUQPlot", name, getattr(self, name)))
