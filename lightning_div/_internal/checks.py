"""The checks around a measurement that every front end makes (Lightning's callbacks, the Hugging Face callback).

* :func:`check_finite_model` / :func:`warn_if_mostly_empty`: a model whose weights or output are
  NaN or inf is named, instead of logging 0.0 diversity computed from its empty output;
* :data:`MEASUREMENT_ERRORS`: the errors a measurement may fail with and training survive.

No Lightning here (:mod:`lightning_div.callbacks.checks` holds the Lightning callbacks' own checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightning_div._internal.tracking import warn_once

__all__ = ["MEASUREMENT_ERRORS", "PROBE", "ModelDivergedError", "check_finite_model", "warn_if_mostly_empty"]

#: What a measurement (or an optional part of one) can meet and survive, so training goes on:
#: the model and torch (RuntimeError, which torch's out-of-memory and CUDA errors are; MemoryError;
#: ArithmeticError), bad or missing data (ValueError, which DataFormatError, UnicodeDecodeError
#: and a diverged model's ModelDivergedError are), files, caches and trackers (OSError), and an
#: optional package that is not installed (ModuleNotFoundError). Anything else (TypeError,
#: AttributeError, NameError, KeyError, IndexError, AssertionError, an ImportError of a name that
#: is not there ...) is a programming error and propagates, so that tests see it.
MEASUREMENT_ERRORS: tuple[type[BaseException], ...] = (
    RuntimeError,
    ValueError,
    OSError,
    MemoryError,
    ArithmeticError,
    ModuleNotFoundError,
)


class ModelDivergedError(ValueError):
    """The model's weights or output hold NaN or inf: what it generates says nothing about diversity."""


#: What :func:`check_finite_model` scores to see the model's output: one ordinary exchange.
PROBE = (("Hello, how are you?",), "I am fine, thank you.")


def check_finite_model(pl_module: Any, who: str, adapter: Any = None) -> None:
    """Raise :class:`ModelDivergedError` when the model has diverged: NaN or inf in its weights or its output.

    The weights are checked first (the first parameters holding NaN or inf are named). A model
    can also diverge with finite weights (a NaN buffer, an overflow in half precision): with an
    ``adapter`` (a :class:`~lightning_div.model.adapters.DialogueModelAdapter`), one probe
    response (:data:`PROBE`) is scored too, and non-finite log-probabilities are named the same
    way, instead of measuring the empty text such a model generates.

    Args:
        pl_module: the LightningModule (its parameters are checked).
        who: the callback, named in the message.
        adapter: the module's adapter; None checks the weights only.
    """
    import torch

    bad = []
    with torch.no_grad():
        for name, param in pl_module.named_parameters():
            if param.is_floating_point() and not bool(torch.isfinite(param).all()):
                bad.append(name)
                if len(bad) == 3:
                    break
    if bad:
        raise ModelDivergedError(
            f"{who}: the model has diverged: its weights hold NaN or inf ({', '.join(bad)}"
            f"{', ...' if len(bad) == 3 else ''}); nothing it generates is measured. Lower the "
            "learning rate, clip gradients, or resume from an earlier checkpoint"
        )
    if adapter is None:
        return
    context, response = PROBE
    (logprobs,) = adapter.token_logprobs([list(context)], [response])
    if not bool(torch.isfinite(torch.as_tensor(logprobs, dtype=torch.float64)).all()):
        raise ModelDivergedError(
            f"{who}: the model has diverged: its weights are finite but its output is not (the log-probabilities "
            f"of the probe response {response!r} hold NaN or inf); nothing it generates is measured. Look for a "
            "NaN buffer or an overflow (half precision), lower the learning rate, or resume from an earlier checkpoint"
        )


def warn_if_mostly_empty(responses: Sequence[str], who: str, what: str, threshold: float) -> None:
    """Warn (once per run) when at least ``threshold`` of the responses are empty or whitespace.

    The values are still logged: the share itself is logged as ``empty_share`` beside them, and the
    summary marks the metrics of mostly empty text. One non-empty reply among twelve has a perfect
    distinct-n, which would otherwise read as a diverse model.

    Args:
        responses: the generated responses (special tokens already removed).
        who: the front end, named in the warning.
        what: what they were generated for ("the evaluation sample", "step 9's completions").
        threshold: the share of empty responses from which it warns (0 to 1).
    """
    empty = sum(1 for r in responses if not r.strip())
    if not responses or empty / len(responses) < threshold:
        return
    if empty == len(responses):
        message = (
            f"{who}: all {len(responses)} responses generated for {what} are empty: "
            "the model only produces its end token (diverged, or not trained yet); "
            "the diversity logged for them is that of empty text"
        )
    else:
        message = (
            f"{who}: {empty} of {len(responses)} responses generated for {what} are empty "
            f"({empty / len(responses):.0%}; the warning is from {threshold:.0%}): the model mostly produces its end "
            "token (diverged, or not trained yet); the lexical metrics logged for them describe the few non-empty "
            "replies (their empty_share is logged beside them)"
        )
    warn_once(f"{who}:empty:{what}", message)


def optional_texts(texts: Sequence[str] | None, who: str, name: str) -> list[str] | None:
    """``texts`` as a list, or None; an empty list or one string is refused naming the argument.

    An empty list given for texts to fit clusters on would otherwise fail later with a message that
    names no argument ("no gold training responses"); None means "not given" and is the way to say it.

    Raises:
        ValueError: one string, or no texts.
    """
    if texts is None:
        return None
    if isinstance(texts, str):
        raise ValueError(f"{who}({name}=...) must be a list of texts, got one string: pass [{texts[:40]!r}]")
    out = list(texts)
    if not out:
        raise ValueError(f"{who}({name}=[]) has no texts to fit the clusters on: give some, or leave {name}=None")
    return out
