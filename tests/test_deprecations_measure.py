"""The measures', spaces' and summary's 0.2 names still work for one release, with a warning naming the new form."""

from __future__ import annotations

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
