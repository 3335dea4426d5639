"""What the callbacks' and the datamodule's data and model arguments accept, as types.

LightningCLI (jsonargparse) instantiates a ``class_path`` given in a YAML config for any
argument typed ``Any``: ``encoder: {class_path: subprocess.run, init_args: ...}`` would run a
command while the config is parsed. Typed with these aliases, an argument accepts only
plain values (a path or name, a list of pairs or strings) or the classes named here (and
their subclasses), so such a config is refused before anything runs. Python callers are
not restricted by annotations: a duck-typed encoder object still works there.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerBase

from lightning_div.nli.scorer import NLIScorer
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.encoder import ResponseEncoder

Scalar = None | bool | int | float | str
PlainValue = Scalar | list[Scalar] | list[list[Scalar]] | dict[str, Scalar]
Options = dict[str, PlainValue]
"""Keyword options (generation, encoder, scorer, model config): plain values only, never a ``class_path``."""

# One item of a list of pairs: [context, response], [context, [references]] or
# [context, response, [references]] (context: a string or a list of turns), or a record dict.
PairItem = list[str | list[str]] | tuple[str | list[str], ...] | dict[str, str | list[str] | None]
PairsSource = str | Path | list[PairItem]
"""A path any reader understands, ``"chitchat"``, or a list of pairs."""

TokenizerSource = str | Path | PreTrainedTokenizerBase
"""A tokenizer name or path for ``AutoTokenizer`` (or ``"local:chitchat"``), or a tokenizer."""

ResponsesSource = str | Path | list[str]
"""A path (one response a line, JSONL, CSV, ...) or a list of responses."""

EncoderSource = str | Path | ResponseEncoder
"""A model name or path (``"minilm"`` for the offline all-MiniLM-L6-v2), or a ResponseEncoder."""

ClustersSource = str | Path | SemanticClusters
"""A saved SemanticClusters file, or a fitted SemanticClusters."""

ScorerSource = str | Path | NLIScorer
"""An NLI model name or path, or an NLIScorer."""
