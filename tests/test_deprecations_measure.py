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
