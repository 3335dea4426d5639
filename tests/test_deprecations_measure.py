"""The measures', spaces' and summary's 0.2 names still work for one release, with a warning naming the new form."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from lightning_div import summary


def test_summary_measurement_is_summary_line_with_a_warning():
    with pytest.warns(
        DeprecationWarning,
        match=r"lightning_div\.summary\.Measurement is deprecated .* use lightning_div\.summary\.SummaryLine",
    ):
        old = summary.Measurement
    assert old is summary.SummaryLine
    line = old("val/ruq", 12.5, "%")
    assert line.shown() == summary.SummaryLine("val/ruq", 12.5, "%").shown() == "12.5 %"
    with pytest.raises(AttributeError, match="has no attribute 'Measurements'"):
        summary.Measurements  # noqa: B018 - a name that never existed is still an error


@pytest.mark.parametrize(
    "name,replacement",
    [
        ("DistinctN", "distinct_n"),
        ("AveragedDistinct", "averaged_distinct"),
        ("NGramEntropy", "ngram_entropy"),
        ("ExpectationAdjustedDistinct", "expectation_adjusted_distinct"),
        ("SemanticEntropy", "semantic_entropy"),
        ("RUQ", "ruq_score"),
    ],
)
def test_the_torchmetrics_states_are_deprecated_from_both_places(name, replacement):
    import lightning_div.metrics as metrics
    from lightning_div.metrics import _states, states

    for module in (metrics, states):
        with pytest.warns(
            DeprecationWarning,
            match=rf"{module.__name__}\.{name} \(a torchmetrics state\) is deprecated .* use "
            rf"lightning_div\.metrics\.{replacement} on what every process gathered",
        ):
            assert getattr(module, name) is getattr(_states, name)
    assert name not in metrics.__all__ and callable(getattr(metrics, replacement))
    with pytest.raises(AttributeError, match="has no attribute 'DistinctM'"):
        states.DistinctM  # noqa: B018 - a name that never existed is still an error


def test_a_deprecated_state_still_gives_the_function_s_value():
    from lightning_div.metrics import distinct_n

    texts = ["I do not know.", "I do not care!"]
    with pytest.warns(DeprecationWarning, match=r"lightning_div\.metrics\.DistinctN"):
        from lightning_div.metrics import DistinctN
    metric = DistinctN(2)
    metric.update(texts)
    assert float(metric.compute()) == distinct_n(texts, 2) == 0.75


TEXTS = ["apple pie", "avocado", "banana split", "blueberry", "cherry", "coconut", "date", "durian"]


def _space(tmp_path):
    from fakes import first_letter_encoder

    from lightning_div.semantic.space import SemanticSpace

    return SemanticSpace(encoder=first_letter_encoder(), num_clusters=4, kmeans_seed=3, dirpath=tmp_path)


def test_space_fit_texts_is_cluster_texts_with_a_warning(tmp_path):
    new = _space(tmp_path / "new").fit(cluster_texts=TEXTS)
    with pytest.warns(
        DeprecationWarning, match=r"SemanticSpace\.fit\(texts=\.\.\.\) is deprecated .* use cluster_texts=\.\.\."
    ):
        old = _space(tmp_path / "old").fit(texts=TEXTS)
    np.testing.assert_array_equal(old.assign(TEXTS), new.assign(TEXTS))
    assert old.gold_assignments(TEXTS).tolist() == new.gold_assignments(TEXTS).tolist()
    assert len(set(new.assign(TEXTS).tolist())) == 4  # four first letters, four clusters
    with pytest.raises(TypeError, match=r"SemanticSpace\.fit\(\) got an unexpected keyword argument 'textz'"):
        _space(tmp_path).fit(textz=TEXTS)


def test_space_config_and_identity_are_deprecated_for_settings_and_identity_of(tmp_path):
    from lightning_div.semantic.space import identity_of

    space = _space(tmp_path)
    with pytest.warns(
        DeprecationWarning, match=r"SemanticSpace\.config\(\) is deprecated .* use SemanticSpace\.settings\(\)"
    ):
        config = space.config()
    settings = space.settings()
    assert config == {"num_clusters": 4, "variance_kept": 0.9, "seed": 3}
    assert settings["kmeans_seed"] == config["seed"] and settings["num_clusters"] == config["num_clusters"]
    with pytest.warns(
        DeprecationWarning,
        match=r"SemanticSpace\.identity\(\) is deprecated .* use lightning_div\.semantic\.space\.identity_of\(space\)",
    ):
        identity = space.identity()
    assert identity == identity_of(space) == {"encoder": "topic-encoder"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # what the front ends use warns of nothing
        space.fit(TEXTS)
        assert identity_of(space) == {"encoder": "topic-encoder"} and space.settings()["kmeans_seed"] == 3


class _RecordingSpace:
    """A stand-in space: records the texts its clusters are fitted on."""

    clusters_source = None

    def __init__(self):
        self.fitted, self.fitted_on = False, None

    def fit(self, texts, **where):
        self.fitted, self.fitted_on = True, list(texts)
        return self


def test_the_measures_prepare_on_cluster_texts_and_take_0_2_s_keywords_with_a_warning():
    from lightning_div.measure.group import GroupMeasure
    from lightning_div.measure.semantic import SemanticMeasure
    from lightning_div.pairs import DialoguePair

    sample = [DialoguePair(("hi",), "hello there")]
    new, old = (SemanticMeasure(_RecordingSpace(), lexical_metrics=["ead"]) for _ in range(2))
    new.prepare(cluster_texts=TEXTS, sample=sample)
    with pytest.warns(
        DeprecationWarning, match=r"SemanticMeasure\.prepare\(gold=\.\.\.\) is deprecated .* use cluster_texts=\.\.\."
    ):
        old.prepare(gold=TEXTS, sample=sample)
    assert old.space.fitted_on == new.space.fitted_on == TEXTS
    assert old.vocab_size == new.vocab_size == 10  # EAD's V counted on the cluster texts: 10 words
    group_new, group_old = (GroupMeasure(_RecordingSpace(), lexical_metrics=["ead"]) for _ in range(2))
    group_new.prepare(cluster_texts=TEXTS)
    with pytest.warns(
        DeprecationWarning, match=r"GroupMeasure\.prepare\(texts=\.\.\.\) is deprecated .* use cluster_texts=\.\.\."
    ):
        group_old.prepare(texts=TEXTS)
    assert group_old.space.fitted_on == group_new.space.fitted_on == TEXTS
    assert group_old.vocab_size == group_new.vocab_size == 10


def test_group_measure_reference_model_is_ref_model_with_a_warning():
    from lightning_div.measure import GroupMeasure
    from lightning_div.semantic.space import SemanticSpace

    model, tokenizer = object(), object()
    new = GroupMeasure(SemanticSpace(num_clusters=2), ref_model=model, ref_tokenizer=tokenizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = GroupMeasure(SemanticSpace(num_clusters=2), reference_model=model, reference_tokenizer=tokenizer)
    assert [(w.category, str(w.message).split(" is deprecated")[0]) for w in caught] == [
        (DeprecationWarning, "GroupMeasure(reference_model=...)"),
        (DeprecationWarning, "GroupMeasure(reference_tokenizer=...)"),
    ]
    assert str(caught[0].message).endswith("use ref_model=...")
    assert (old.ref_model, old.ref_tokenizer) == (new.ref_model, new.ref_tokenizer) == (model, tokenizer)
    assert old.settings() == new.settings()
    assert new.settings()["ref_model"] == "object"


def test_nli_measure_takes_threshold_generation_and_0_2_s_flat_fields_with_a_warning():
    from lightning_div.measure.nli import NLIMeasure, ThresholdGeneration

    new = NLIMeasure(threshold_generation=ThresholdGeneration(threshold=5, max_samples=8, rank_by="threshold"))
    with pytest.warns(DeprecationWarning) as caught:
        old = NLIMeasure(threshold=5, max_samples=8, threshold_rank_by="threshold", threshold_generation=True)
    said = " | ".join(str(w.message) for w in caught)
    assert "NLIMeasure(threshold=...) is deprecated" in said and "use threshold_generation=...(threshold=...)" in said
    assert "NLIMeasure(threshold_rank_by=...) is deprecated" in said and "(rank_by=...)" in said
    assert "NLIMeasure(threshold_generation=True) is deprecated" in said and "ThresholdGeneration(...)" in said
    assert {w.filename for w in caught} == {__file__}  # each warning points at the user's line
    assert old.threshold_generation == new.threshold_generation
    assert old.settings() == new.settings()
    # 0.2's attributes read the settings in use
    assert (old.threshold, old.max_samples, old.threshold_rank_by, old.threshold_metric) == (
        5,
        8,
        "threshold",
        "contradictions",
    )
    assert (NLIMeasure().threshold, NLIMeasure().max_samples, NLIMeasure().threshold_diversity_metric) == (10, 20, None)
    # the record keeps 0.2's flat keys, so a 0.2 run's record and a 1.0 one compare
    assert {
        k: new.settings()[k] for k in ("threshold", "max_samples", "threshold_rank_by", "threshold_generation")
    } == {
        "threshold": 5,
        "max_samples": 8,
        "threshold_rank_by": "threshold",
        "threshold_generation": True,
    }
    # 0.2's measure ran measure_threshold with the flat fields it was given, flag or not: so does 1.0's
    with pytest.warns(DeprecationWarning, match=r"NLIMeasure\(threshold_metric=\.\.\.\)"):
        assert NLIMeasure(threshold_metric="baseline").threshold_generation == ThresholdGeneration(metric="baseline")
    with pytest.warns(
        DeprecationWarning, match=r"NLIMeasure\(threshold_generation=False\) .* use threshold_generation=None"
    ):
        assert NLIMeasure(threshold_generation=False).threshold_generation is None
    with pytest.raises(ValueError, match=r"threshold_generation= and the deprecated threshold= were both given"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            NLIMeasure(threshold_generation=ThresholdGeneration(), threshold=3)


def test_nli_measure_threshold_without_settings_runs_the_paper_s_with_a_warning():
    """0.2's NLIMeasure().measure_threshold(...) ran the paper's settings: for one release it still does, warning."""
    from fakes import EchoSets, EqualityScorer

    from lightning_div.measure.nli import NLIMeasure, ThresholdGeneration

    given = NLIMeasure(scorer=EqualityScorer(), n=2, threshold_generation=ThresholdGeneration())
    bare = NLIMeasure(scorer=EqualityScorer(), n=2)
    given.prepare()
    bare.prepare()
    expected = given.measure_threshold(EchoSets(), [["a"], ["b"]])
    with pytest.warns(
        DeprecationWarning,
        match=r"measure_threshold\(\) without threshold_generation= .* "
        r"NLIMeasure\(threshold_generation=ThresholdGeneration\(\)\)",
    ):
        got = bare.measure_threshold(EchoSets(), [["a"], ["b"]])
    assert got == expected and got["threshold_samples_drawn"] == 20  # the paper's budget, spent: never diverse enough
