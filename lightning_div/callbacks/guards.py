"""Checks the callbacks share: missing inputs, a diverged model, optional extras, changed settings on resume.

Each function here says one thing to the user, in one place, so that every callback says it
the same way:

* :func:`require_inputs`: every missing input of a callback in one error, not one per run;
* :func:`check_finite_model` / :func:`warn_if_all_empty`: a model whose weights or output are
  NaN or inf is named, instead of logging 0.0 diversity computed from its empty output;
* :func:`optional_part`: an extra (a plot, Diversity Threshold Generation) that fails costs
  a warning; what was measured before it is still logged;
* :func:`settings_changed`: a checkpoint made under other settings is detected on resume;
* :data:`MEASUREMENT_ERRORS`: the errors a measurement may fail with and training survive.
"""

from __future__ import annotations

import os
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lightning_div._internal.tracking import warn_once

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


class MissingInputsError(ValueError):
    """A callback lacks data it needs; the message lists every missing input and how to give it."""


class ModelDivergedError(ValueError):
    """The model's weights or output hold NaN or inf: what it generates says nothing about diversity."""


def require_inputs(callback: Any, trainer: Any, needs: Sequence[tuple[str, Any, str]]) -> None:
    """Raise one :class:`MissingInputsError` naming every input that is neither given nor on the datamodule.

    Args:
        callback: the callback (named in the message).
        trainer: its Trainer (``trainer.datamodule`` is searched for each method).
        needs: ``(argument name, value given, datamodule method)`` for each input the callback needs.
    """
    dm = getattr(trainer, "datamodule", None)
    missing = [
        (arg, method)
        for arg, value, method in needs
        if value is None and not (dm is not None and callable(getattr(dm, method, None)))
    ]
    if not missing:
        return
    listed = "; ".join(
        f"{arg}=[{'response' if arg == 'gold_responses' else '(context, reference)'}, ...] or a path any "
        f"lightning_div reader understands, or use a datamodule with a `{method}()` method"
        for arg, method in missing
    )
    raise MissingInputsError(
        f"{type(callback).__name__} is missing {len(missing)} input(s): {listed} "
        "(lightning_div.datamodules.DialogueDataModule has all of these methods)"
    )


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


def warn_if_all_empty(responses: Sequence[str], who: str, what: str) -> None:
    """Warn when every generated response is empty or whitespace (the values are still logged)."""
    if responses and not any(r.strip() for r in responses):
        warn_once(
            f"{who}:empty:{what}",
            f"{who}: all {len(responses)} responses generated for {what} are empty: "
            "the model only produces its end token (diverged, or not trained yet); "
            "the diversity logged for them is that of empty text",
        )


@contextmanager
def optional_part(callback: Any, trainer: Any, what: str) -> Iterator[None]:
    """Run an optional part of a measurement: its failure warns, and the values measured before it stay.

    Only the :data:`MEASUREMENT_ERRORS` are caught; a programming error propagates. With
    ``on_error="raise"`` every error propagates.
    """
    try:
        yield
    except MEASUREMENT_ERRORS as err:
        if getattr(callback, "on_error", "warn") == "raise":
            raise
        warn_once(
            f"{callback.kind}:{callback.name}:{what}:{type(err).__name__}",
            f"{type(callback).__name__}: {what} failed at epoch {trainer.current_epoch}: {err!r}; the values "
            f"measured before it are logged (on_error='raise' to stop)\n{traceback.format_exc(limit=3)}",
        )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def settings_changed(
    callback: Any, saved: Mapping[str, Any] | None, current: Mapping[str, Any], consequence: str
) -> bool:
    """Compare the settings a checkpoint was made with to the current ones; warn naming each change.

    Returns True when a setting changed (the caller then discards the restored state and
    recomputes it under the current settings). A checkpoint from before settings were saved
    (``saved`` None) is trusted, as before.
    """
    if saved is None:
        return False
    changes = [
        f"{name} {saved.get(name)!r} -> {value!r}"
        for name, value in current.items()
        if name in saved and not _same(saved.get(name), value)
    ]
    if changes:
        # not warn_once: a resume happens once per run, and each one must say it
        warnings.warn(
            f"{type(callback).__name__}: the checkpoint was made with other settings "
            f"({'; '.join(changes)}): {consequence}",
            RuntimeWarning,
            stacklevel=2,
        )
    return bool(changes)


def encoder_label(encoder: Any) -> str:
    """What identifies an encoder argument in the saved settings: the name or path given, else its ``name``."""
    if isinstance(encoder, (str, os.PathLike)):
        return str(encoder)
    return str(getattr(encoder, "name", type(encoder).__name__))
