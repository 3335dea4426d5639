"""What the callbacks' and the datamodule's data and model arguments accept, as types.

LightningCLI (jsonargparse) instantiates a ``class_path`` given in a YAML config for any
argument typed ``Any``: ``encoder: {class_path: subprocess.run, init_args: ...}`` would run a
command while the config is parsed. Typed with these aliases, an argument accepts only
plain values (a path or name, a list of pairs or strings) or the classes named here (and
their subclasses), so such a config is refused before anything runs. Python callers are
not restricted by annotations: a duck-typed encoder object still works there.

The aliases that name a class of a part live beside that class, so that this module imports no
part: :data:`~lightning_div.semantic.encoder.EncoderSource`,
:data:`~lightning_div.semantic.clusters.ClustersSource` and
:data:`~lightning_div.nli.scorer.ScorerSource`.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerBase

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
