"""The one tokeniser every lexical metric shares.

Default: lowercase, then sacrebleu's 13a splitting (punctuation becomes its own
token, contractions stay whole: "I don't know." -> ["i", "don't", "know", "."]).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

TokenizerSpec = Union[str, Callable[[str], Sequence[str]], Any]

_13A = Tokenizer13a()


def _split_13a(text: str) -> list[str]:
    return _13A(text).split()


def _split_whitespace(text: str) -> list[str]:
    return text.split()


_BUILTIN: dict[str, Callable[[str], list[str]]] = {
    "13a": _split_13a,
    "whitespace": _split_whitespace,
}


def get_tokenizer(spec: TokenizerSpec = "13a", lowercase: bool = True) -> Callable[[str], list[str]]:
    """Return a function ``str -> list[str]`` for the lexical metrics.

    ``spec`` is ``"13a"`` (default), ``"whitespace"``, any callable returning a list of
    tokens, or a Hugging Face tokenizer (anything with a ``tokenize`` method).

    Args:
        spec: the tokeniser, as above.
        lowercase: lowercase the text before tokenising.

    Returns:
        The tokenising function.

    Raises:
        ValueError: an unknown name.
        TypeError: a spec that is neither a name, a callable nor a tokenizer.

    Examples:
        >>> get_tokenizer()("I don't know.")
        ['i', "don't", 'know', '.']
    """
    if isinstance(spec, str):
        if spec not in _BUILTIN:
            raise ValueError(f"tokenizer={spec!r} is unknown; use one of {sorted(_BUILTIN)}, a callable, "
                             "or a Hugging Face tokenizer")
        split = _BUILTIN[spec]
    elif hasattr(spec, "tokenize"):
        split = spec.tokenize
    elif callable(spec):
        split = spec
    else:
        raise TypeError(f"tokenizer must be a name, a callable or a Hugging Face tokenizer, got {type(spec).__name__}")

    if not lowercase:
        return lambda text: list(split(text))
    return lambda text: list(split(text.lower()))


def check_texts(texts: Sequence[str], name: str = "texts") -> list[str]:
    """Validate a list of strings; the error names the offending index.

    Args:
        texts: the texts.
        name: how the error message names them.

    Returns:
        The texts, as a list.

    Raises:
        TypeError: ``texts`` is a single string, or an element is not a string (named by index).
    """
    if isinstance(texts, str):
        raise TypeError(f"{name} must be a sequence of strings, not a single string")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] is {type(t).__name__}, expected str")
    return out


def tokenize_all(texts: Sequence[str], tokenizer: TokenizerSpec = "13a", lowercase: bool = True,
                 name: str = "texts") -> list[list[str]]:
    """Tokenise every text with :func:`get_tokenizer` after validating the input.

    Args:
        texts: the texts.
        tokenizer: the tokeniser spec (see :func:`get_tokenizer`).
        lowercase: lowercase first.
        name: how error messages name ``texts``.

    Returns:
        One token list per text.

    Raises:
        TypeError: ``texts`` is a single string, or an element is not a string (named by index).
    """
    split = get_tokenizer(tokenizer, lowercase)
    return [split(t) for t in check_texts(texts, name)]
