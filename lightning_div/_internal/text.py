"""The tokenisers the lexical metrics share, by name.

Default: lowercase, then sacrebleu's 13a splitting (punctuation becomes its own
token, contractions stay whole: "I don't know." -> ["i", "don't", "know", "."]).
The papers' own tokenisations are available by name, with the libraries they used:

=====================  ==============================================================  ==========
name                   what                                                            lowercase
=====================  ==============================================================  ==========
``"13a"``              sacrebleu 13a (our default)                                     yes
``"whitespace"``       ``str.split()``                                                 yes
``"casual"``           nltk ``casual_tokenize`` (Han et al.'s Sem-Ent code: Ent-n,     no
                       Dist-n; "Hello!!" -> "Hello", "!", "!")
``"diversity_eval"``   Tevet & Berant's diversity-eval: delete every ".", split on     no
                       single spaces, drop empty strings
``"13a_cased"``        sacrebleu 13a, case kept (EAD, Liu et al. 2022)                 no
=====================  ==============================================================  ==========

``lowercase=None`` (the default everywhere) means the tokeniser's own setting from the
table (yes for callables and Hugging Face tokenizers); ``True`` / ``False`` overrides it.
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


def _split_casual(text: str) -> list[str]:
    from nltk.tokenize.casual import casual_tokenize  # imported on use: nltk is only needed for this name

    return list(casual_tokenize(text))


def _split_diversity_eval(text: str) -> list[str]:
    # diversity-eval's utils.lines_to_ngrams: periods and newlines deleted, split on " ", empty strings dropped.
    return [w for w in text.replace(".", "").replace("\n", "").split(" ") if w != ""]


_BUILTIN: dict[str, Callable[[str], list[str]]] = {
    "13a": _split_13a,
    "whitespace": _split_whitespace,
    "casual": _split_casual,
    "diversity_eval": _split_diversity_eval,
    "13a_cased": _split_13a,
}
#: Whether each named tokeniser lowercases when ``lowercase=None``: the authors' own settings keep case.
LOWERCASE_BY_DEFAULT: dict[str, bool] = {
    "13a": True,
    "whitespace": True,
    "casual": False,
    "diversity_eval": False,
    "13a_cased": False,
}
TOKENIZER_NAMES = tuple(_BUILTIN)


def resolve_lowercase(spec: TokenizerSpec, lowercase: bool | None) -> bool:
    """``lowercase`` if given, else the named tokeniser's own setting (True for anything not named)."""
    if lowercase is not None:
        return bool(lowercase)
    return LOWERCASE_BY_DEFAULT.get(spec, True) if isinstance(spec, str) else True


def get_tokenizer(spec: TokenizerSpec = "13a", lowercase: bool | None = None) -> Callable[[str], list[str]]:
    """Return a function ``str -> list[str]`` for the lexical metrics.

    ``spec`` is one of :data:`TOKENIZER_NAMES` (see the module docstring), any callable
    returning a list of tokens, or a Hugging Face tokenizer (anything with a ``tokenize``
    method).

    Args:
        spec: the tokeniser, as above.
        lowercase: lowercase the text first; None = the tokeniser's own setting.

    Returns:
        The tokenising function.

    Raises:
        ValueError: an unknown name.
        TypeError: a spec that is neither a name, a callable nor a tokenizer.

    Examples:
        >>> get_tokenizer()("I don't know.")
        ['i', "don't", 'know', '.']
    """
    split: Callable[[str], Sequence[str]]
    if isinstance(spec, str):
        if spec not in _BUILTIN:
            raise ValueError(
                f"tokenizer={spec!r} is unknown; use one of {sorted(_BUILTIN)}, a callable, or a Hugging Face tokenizer"
            )
        split = _BUILTIN[spec]
    elif hasattr(spec, "tokenize"):
        split = spec.tokenize
    elif callable(spec):
        split = spec
    else:
        raise TypeError(f"tokenizer must be a name, a callable or a Hugging Face tokenizer, got {type(spec).__name__}")

    if not resolve_lowercase(spec, lowercase):
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


def tokenize_all(
    texts: Sequence[str], tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None, name: str = "texts"
) -> list[list[str]]:
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
