"""Every measurement of the core has the one Measure shape, and is usable without a trainer."""

from __future__ import annotations

import json

import pytest

from lightning_div.measure.base import Measure
from lightning_div.measure.ruq import RUQMeasure
from lightning_div.measure.semantic import SemanticMeasure
from lightning_div.semantic.space import SemanticSpace

#: One cheap instance of every Measure of the core (nothing is loaded or fitted to build them).
MEASURES = {
    "semantic": lambda: SemanticMeasure(SemanticSpace(encoder="minilm", num_clusters=4), vocab_size=50),
    "ruq": lambda: RUQMeasure(("I don't know.",)),
}


@pytest.mark.parametrize("make", MEASURES.values(), ids=list(MEASURES))
def test_every_measure_has_the_shape_and_its_state_round_trips(make):
    measure = make()
    assert isinstance(measure, Measure)
    settings = measure.settings()
    assert isinstance(settings, dict) and json.loads(json.dumps(settings)) == settings
    state = measure.state_dict()
    assert json.loads(json.dumps(state)) == state  # checkpointed as JSON (trainer_state.json)
    fresh = make()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state and fresh.settings() == settings
    with pytest.raises(ValueError, match="state must be a dict"):
        fresh.load_state_dict("garbage")  # type: ignore[arg-type]


def test_the_settings_say_what_was_measured_with():
    semantic = MEASURES["semantic"]().settings()
    assert semantic["space"] == {"encoder": "minilm", "num_clusters": 4, "variance_kept": 0.9, "kmeans_seed": 27}
    assert semantic["vocab_size"] == 50 and semantic["lexical_metrics"][0] == "distinct_1"
    assert RUQMeasure(("I don't know.",), reference="first").settings() == {
        "idk_responses": ["I don't know."],
        "reference": "first",
        "shared_contexts": True,
        "batch_size": 32,
    }
