"""Every 0.2 name and keyword argument 1.0 renamed still works for one release, with a warning naming the new form."""

from __future__ import annotations

import pytest

from lightning_div._internal.deprecation import moved_names, regrouped_into, take_deprecated
from lightning_div.datamodules.dialogue import DialogueDataModule
from lightning_div.model import formatting
from lightning_div.reweighting import train_responses_of


def test_dialogue_format_is_dialogue_layout_with_a_warning():
    with pytest.warns(
        DeprecationWarning,
        match=r"DialogueFormat is deprecated .* use lightning_div\.model\.formatting\.DialogueLayout",
    ):
        old = formatting.DialogueFormat
    assert old is formatting.DialogueLayout
    with pytest.raises(AttributeError, match="has no attribute 'DialogueFormats'"):
        formatting.DialogueFormats  # noqa: B018 - an attribute that never existed is still an error


def test_gold_train_responses_is_train_responses_with_a_warning():
    dm = DialogueDataModule(train=[("hi", "hello"), ("how are you", "fine")], val=[("a", "b")])
    with pytest.warns(
        DeprecationWarning,
        match=r"DialogueDataModule\.gold_train_responses\(\) is deprecated .* use train_responses\(\)",
    ):
        old = dm.gold_train_responses()
    assert old == dm.train_responses() == ["hello", "fine"]


def test_a_datamodule_of_0_2_still_gives_its_responses():
    class Old:
        def gold_train_responses(self) -> list[str]:
            return ["a", "b"]

    class New:
        def train_responses(self) -> list[str]:
            return ["c"]

    with pytest.warns(
        DeprecationWarning,
        match=r"Monitor: a datamodule's gold_train_responses\(\) is deprecated .* use train_responses\(\)",
    ):
        assert train_responses_of(Old(), "Monitor") == ["a", "b"]
    assert train_responses_of(New(), "Monitor") == ["c"]
    assert train_responses_of(object(), "Monitor") is None


def test_take_deprecated_renames_regroups_and_refuses_the_unknown():
    kwargs = {"gold_responses": ["x"], "batch_size": 8, "max_new_tokens": 4}
    with pytest.warns(DeprecationWarning) as caught:
        values, groups = take_deprecated(
            "Monitor",
            kwargs,
            renamed={"gold_responses": "cluster_texts"},
            regrouped={"batch_size": ("generation", "batch_size"), "max_new_tokens": ("generation", "max_new_tokens")},
        )
    assert values == {"cluster_texts": ["x"]}
    assert groups == {"generation": {"batch_size": 8, "max_new_tokens": 4}}
    assert kwargs == {}
    messages = [str(w.message) for w in caught]
    assert messages[0].startswith("Monitor(gold_responses=...) is deprecated") and messages[0].endswith(
        "use cluster_texts=..."
    )
    assert messages[1].endswith("use generation=...(batch_size=...)")
    with pytest.raises(TypeError, match=r"Monitor\(\) got an unexpected keyword argument 'nope'"):
        take_deprecated("Monitor", {"nope": 1}, renamed={"old": "new"})


def test_moved_names_is_a_module_getattr_that_warns_for_old_names_only():
    getattr_ = moved_names("pkg.mod", {"Old": ("lightning_div.settings", "Outputs")})
    with pytest.warns(DeprecationWarning, match=r"pkg\.mod\.Old is deprecated .* use lightning_div\.settings\.Outputs"):
        old = getattr_("Old")
    from lightning_div.settings import Outputs

    assert old is Outputs
    with pytest.raises(AttributeError, match=r"module 'pkg\.mod' has no attribute 'New'"):
        getattr_("New")


def test_regrouped_into_maps_each_kept_name_to_its_settings_field():
    assert regrouped_into("outputs", "dirpath", "log_samples") == {
        "dirpath": ("outputs", "dirpath"),
        "log_samples": ("outputs", "log_samples"),
    }
    assert regrouped_into("alert") == {}
