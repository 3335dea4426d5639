"""The GRPO group alert: collapse told from breakdown, on synthetic rollouts (no training), in the core and the callback."""

from __future__ import annotations

import math
import warnings

import pytest
from ddp_utils import run_distributed
from grpo_setup import EOS, TOPICS, StubTrainer, begin, rollout_step, topic_encoder

from lightning_div.integrations.trl import GroupDiversityMonitor
from lightning_div.measure.group import GroupAlert, group_metrics, reference_nll
from lightning_div.metrics.group import group_top_word_share, length_cut_share
from lightning_div.semantic.space import SemanticSpace

G = 4


def fluent(topic: str, i: int) -> str:
    """A fluent 9-word reply starting with its topic word (the topic is its cluster)."""
    return f"{topic} we could walk to the park after lunch{i}"


def diverse_step(step: int) -> list[str]:
    """2 groups of 4, each with the 4 topics: group Sem-Ent ln 4."""
    return [fluent(t, 10 * step + g) for g in range(2) for t in TOPICS]


def collapsed_step(step: int) -> list[str]:
    """Each group says one fluent thing 4 ways: group Sem-Ent 0, the words as fluent as before."""
    return [fluent(TOPICS[g], 10 * step + j) for g in range(2) for j in range(G)]


def broken_step(step: int) -> list[str]:
    """Text fallen apart into one repeated word (the pilot's "you your you your ..."), all in one topic."""
    return ["yes you your you your you your you" for _ in range(2 * G)]


def labels(texts: list[str]) -> list[int]:
    return [TOPICS.index(t.split()[0]) for t in texts]


def metrics(texts: list[str]) -> dict[str, float]:
    return group_metrics(texts, labels(texts), G, len(TOPICS), vocab_size=50)


def test_degeneration_signals_by_hand():
    assert group_top_word_share(diverse_step(0), G) == pytest.approx(4 / 36)  # "we", "could" ... 4 of 36 words
    assert group_top_word_share(broken_step(0), G) == pytest.approx(4 * 4 / 32)  # "you" is 4 of each 8 words
    assert group_top_word_share(["...", "!", "?", ""], G) == 0.0  # no word in the group
    # a collapse to one short answer is not a breakdown: replies under 4 words are left out
    assert group_top_word_share(["Yes."] * 4 + ["yes you your you"] * 4, G) == pytest.approx(0.5)
    assert length_cut_share([16, 16, 3, 16], 16) == 0.75
    assert length_cut_share([], 16) == 0.0
    with pytest.raises(ValueError, match="max_length must be an integer >= 1"):
        length_cut_share([3], 0)
    with pytest.raises(ValueError, match="lengths must be integers >= 0"):
        length_cut_share([3.5, 2], 16)
    assert metrics(broken_step(0))["group_top_word_share"] == pytest.approx(0.5)


def test_a_collapse_is_named_collapse_and_a_breakdown_breakdown():
    collapse = GroupAlert(start_steps=2)
    seen = [collapse.update(metrics(step(i))) for i, step in enumerate([diverse_step] * 2 + [collapsed_step] * 2)]
    # the start is steps 0-1 (ln 4); step 2's window (ln 4 + 0) / 2 is down 50 % > warn_drop 25 %
    assert [kind for kind, _ in seen] == [None, None, "collapse", "collapse"]
    assert seen[2][1] == ["group Sem-Ent is 0.693, down 50% from 1.386 at the start (warn_drop = 0.25)"]
    # the same fall of Sem-Ent, but the text fell apart: breakdown, with the collapse reason kept beside it
    breakdown = GroupAlert(start_steps=2)
    seen = [breakdown.update(metrics(step(i))) for i, step in enumerate([diverse_step] * 2 + [broken_step] * 2)]
    assert [kind for kind, _ in seen] == [None, None, "breakdown", "breakdown"]
    assert seen[2][1] == [
        "the most frequent word is 50% of the words within a group, averaged over groups (top_word_share = 0.4)",
        "group Sem-Ent is 0.693, down 50% from 1.386 at the start (warn_drop = 0.25)",
    ]


def test_breakdown_by_the_length_limit_and_the_reference_nll():
    # byte-level garbage that never ends: the clusters still look diverse (no collapse), every completion is cut
    cut = GroupAlert(start_steps=2)
    kinds = [
        cut.update({**metrics(diverse_step(i)), "length_cut_share": share})[0]
        for i, share in enumerate([0.2, 0.3, 1.0])
    ]
    assert kinds == [None, None, "breakdown"]  # 1.0, up 0.75 from 0.25 (steps 0-1) >= cut_rise 0.3
    assert cut.update({**metrics(diverse_step(3)), "length_cut_share": 0.5}) == (
        None,
        [],
    )  # up 0.25 only
    nll = GroupAlert(start_steps=1, nll_rise=1.0)
    assert [nll.update({**metrics(diverse_step(i)), "reference_nll": v})[0] for i, v in enumerate([3.0, 3.5, 4.2])] == [
        None,
        None,
        "breakdown",
    ]
    # every threshold off: no alert whatever happens
    off = GroupAlert(warn_drop=None, top_word_share=None, cut_rise=None, nll_rise=None, start_steps=1)
    assert {off.update(metrics(step(0)))[0] for step in (diverse_step, broken_step, collapsed_step)} == {None}
    below = GroupAlert(warn_drop=None, warn_below=0.5, start_steps=1)
    assert below.update(metrics(collapsed_step(0))) == ("collapse", ["group Sem-Ent is 0.000, below warn_below = 0.5"])


def test_the_alerts_state_round_trips_and_is_checked():
    alert = GroupAlert(start_steps=2)
    for i in range(3):
        alert.update({**metrics(diverse_step(i)), "reference_nll": 3.0})
    alert.warned.add("collapse")
    again = GroupAlert(start_steps=2)
    again.load_state_dict(alert.state_dict())
    assert again.values == alert.values and again.warned == {"collapse"}
    assert again.start("group_sem_ent") == pytest.approx(math.log(4))
    for bad, match in [
        ([], "must be a dict with 'values'"),
        ({"values": {"nope": []}}, "unknown signal"),
        ({"values": {"group_sem_ent": [float("nan")]}}, "not a finite number"),
        ({"values": {}, "warned": ["panic"]}, "'warned' must list"),
    ]:
        with pytest.raises(ValueError, match=match):
            GroupAlert().load_state_dict(bad)
    for kwargs, match in [
        ({"warn_drop": 1.5}, r"warn_drop must be a finite number in \[0.0, 1.0\]"),
        ({"warn_drop": "0.2"}, "warn_drop must be a number or None"),
        ({"warn_below": float("nan")}, "warn_below must be a finite number"),
        ({"start_steps": 0}, "start_steps must be an integer >= 1"),
        ({"nll_rise": -1}, "nll_rise must be a finite number >= 0.0"),
    ]:
        with pytest.raises(ValueError, match=match):
            GroupAlert(**kwargs)
    with pytest.raises(ValueError, match="needs a finite group_sem_ent"):
        GroupAlert().update({"group_top_word_share": 0.1})


def _run(cb, trainer, steps, cut=None):
    """Each step: TRL's reward call with a new generation batch (with token ids, ``cut[n]`` of them without an EOS
    at the end, when given)."""
    for n, texts in enumerate(steps, start=1):
        ids = None
        if cut is not None:
            ids = [[5, 6] if i < cut[n - 1] else [5, EOS] for i in range(len(texts))]
        rollout_step(cb, trainer, texts, step=n, ids=ids)


def test_the_callback_logs_the_alert_and_warns_once_naming_the_step(tmp_path):
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    trainer = StubTrainer(tmp_path)
    cb = trainer.with_callback(
        GroupDiversityMonitor(
            space=space, cluster_texts=[f"{t} {i}" for t in TOPICS for i in range(12)], alert=GroupAlert(start_steps=2)
        )
    )
    begin(cb, trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(cb, trainer, [diverse_step(1), diverse_step(2), collapsed_step(3), collapsed_step(4)])
    said = [str(w.message) for w in caught if "collapsed" in str(w.message)]
    assert said == [
        "GroupDiversityMonitor: step 3: group diversity collapsed: "
        "group Sem-Ent is 0.693, down 50% from 1.386 at the start (warn_drop = 0.25)"
    ]
    logged = trainer.logged
    assert logged["diversity/collapse_alert"] == [0.0, 0.0, 1.0, 1.0]
    assert logged["diversity/breakdown_alert"] == [0.0] * 4
    assert logged["diversity/group_top_word_share"] == pytest.approx([4 / 36] * 4)
    assert "diversity/length_cut_share" not in logged  # no completion_ids given: the share is unknown


def test_the_callback_names_a_breakdown_from_the_completions_cut_at_the_length_limit(tmp_path):
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    trainer = StubTrainer(tmp_path)
    cb = trainer.with_callback(GroupDiversityMonitor(space=space, alert=GroupAlert(start_steps=2), name="run"))
    begin(cb, trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # step 3: text that never ends (every completion cut) while the clusters still look diverse; step 4 also
        # collapses into one repeated word: still the one breakdown warning, and never called a collapse
        steps = [diverse_step(1), diverse_step(2), diverse_step(3), broken_step(4)]
        _run(cb, trainer, steps, cut=[2, 2, 8, 8])  # of 8 completions: shares 0.25, 0.25, 1.0, 1.0
    said = [str(w.message) for w in caught if "GroupDiversityMonitor: step" in str(w.message)]
    assert said == [
        "GroupDiversityMonitor: step 3: the text broke down (degeneration, not a collapse of diversity among good "
        "answers): 100% of the completions are cut at the length limit, up from 25% at the start "
        "(cut_rise = 0.3)"  # the GroupAlert's own argument, as the user gave it
    ]
    logged = trainer.logged
    assert logged["diversity/run/length_cut_share"] == [0.25, 0.25, 1.0, 1.0]
    assert logged["diversity/run/breakdown_alert"] == [0.0, 0.0, 1.0, 1.0]
    assert logged["diversity/run/collapse_alert"] == [0.0] * 4  # not called a collapse
    assert cb.alert.warned == {"breakdown"}


def _reference_nll_on(rank: int, world_size: int) -> tuple[float, int, float, int]:
    """The reference NLL of fixed pairs on this process and how many pairs it scored itself: with a plain
    model, then with the same model marked as DeepSpeed ZeRO-3 marks its partitioned parameters."""
    from helpers import causal_model, chitchat_pairs, tokenizer

    import lightning_div.model.scoring as scoring

    scored = [0]
    real = scoring.token_logprobs_batched

    def counting(model, tok, contexts, responses, **kwargs):
        scored[0] += len(responses)
        return real(model, tok, contexts, responses, **kwargs)

    pairs = chitchat_pairs("train", 10)[:10]
    prompts, replies = [p.context[-1] for p in pairs], [p.response for p in pairs]
    model = causal_model()
    scoring.token_logprobs_batched = counting
    try:
        plain = reference_nll(model, tokenizer(), prompts, replies, batch_size=3), scored[0]
        next(model.parameters()).ds_id = 0  # a forward is now a collective: every process scores every batch
        scored[0] = 0
        sharded = reference_nll(model, tokenizer(), prompts, replies, batch_size=3), scored[0]
    finally:
        scoring.token_logprobs_batched = real  # the single-process call runs in the test's own process
    return (*plain, *sharded)


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_the_reference_nll_is_split_across_processes_and_equals_one_process():
    """Every process measures the whole batch: each scores its share of the batches, and all get one process's value."""
    single, scored, single_sharded, _ = _reference_nll_on(0, 1)
    assert scored == 10 and single > 0 and single_sharded == single
    per_rank = run_distributed(_reference_nll_on, 2, timeout_s=120)
    assert [r[0] for r in per_rank] == [single, single] and [r[2] for r in per_rank] == [single, single]
    assert [r[1] for r in per_rank] == [6, 4]  # batches of 3, 3, 3, 1: rank 0 the first and third, rank 1 the others
    assert [r[3] for r in per_rank] == [10, 10]  # a sharded reference model: the same forwards on every process


def test_a_negative_group_sem_ent_and_a_boolean_signal_are_refused_before_anything_is_kept():
    """Issue 64 L07: -1.0 after a start of 0 raised ZeroDivisionError while wording the reason; a True
    top-word share raised a breakdown although load_state_dict refuses booleans."""
    alert = GroupAlert(warn_drop=0.25, start_steps=1)
    assert alert.update({"group_sem_ent": 0.0}) == (None, [])
    with pytest.raises(ValueError, match=r"needs a finite group_sem_ent >= 0 \(an entropy\), got -1\.0"):
        alert.update({"group_sem_ent": -1.0})
    with pytest.raises(ValueError, match=r"GroupAlert.update: group_top_word_share must be a number, got True"):
        alert.update({"group_sem_ent": 1.0, "group_top_word_share": True})
    with pytest.raises(ValueError, match=r"needs a finite group_sem_ent >= 0 \(an entropy\), got True"):
        alert.update({"group_sem_ent": True})
    assert alert.values["group_sem_ent"] == [0.0] and alert.values["group_top_word_share"] == []
    assert alert.update({"group_sem_ent": 0.0}) == (None, [])  # a start of 0 that stays 0: no alert, no error
