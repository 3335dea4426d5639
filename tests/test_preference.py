"""DivPO / DPO preference pairs: selection on hand-made pools, pools built from a model (seeded, resumable), bad input."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest

from lightning_div.preference import (
    Pool,
    build_pools,
    diverse_preference_pairs,
    likelihood_diversity,
    quality_bands,
    read_pools,
    select_preference_pairs,
    semantic_rarity,
    write_pools,
)
from lightning_div.preference.pairs import NOTHING_BELOW, SAME_QUALITY
from lightning_div.preference.pools import read_pool_lines


def given(*scores):
    """A criterion returning fixed diversity scores, one list per pool in call order."""
    it = iter(scores)

    def criterion(prompt, responses):
        return next(it)

    return criterion


RESPONSES = ["r0", "r1", "r2", "r3", "r4"]


def _one(quality, diversity, **kwargs):
    sel = select_preference_pairs([Pool("p", RESPONSES[: len(quality)], quality)], criterion=given(diversity), **kwargs)
    return sel


# -- the rule ----------------------------------------------------------------------------------------


def test_divpo_picks_the_most_diverse_above_and_the_least_diverse_below_the_threshold():
    # quality 0..4, rho 0.25: chosen band q >= 3 (r3, r4), rejected band q <= 1 (r0, r1)
    sel = _one([0, 1, 2, 3, 4], [0.9, 0.1, 0.99, 0.5, 0.2], rho=0.25)
    (pair,) = sel.pairs
    # r2 is the most diverse of the pool but below the chosen band; r3 beats r4 on diversity
    assert (pair.chosen, pair.rejected) == ("r3", "r1")
    assert (pair.chosen_quality, pair.rejected_quality, pair.chosen_diversity, pair.rejected_diversity) == (
        3.0,
        1.0,
        0.5,
        0.1,
    )
    # just under the edge, q = 3 and q = 1 fall out of the bands: r4 and r0 are left
    pair = _one([0, 1, 2, 3, 4], [0.9, 0.1, 0.99, 0.5, 0.2], rho=0.2499).pairs[0]
    assert (pair.chosen, pair.rejected) == ("r4", "r0")
    # the standard pair from the same pool: best vs worst quality, diversity not asked
    pair = _one([0, 1, 2, 3, 4], [0.9, 0.1, 0.99, 0.5, 0.2], rule="dpo").pairs[0]
    assert (pair.chosen, pair.rejected, pair.chosen_diversity) == ("r4", "r0", None)


def test_bands_by_range_and_by_rank():
    q = [0.0, 0.0, 0.0, 0.0, 10.0]
    up, down = quality_bands(q, 0.5)  # range: chosen from 5, rejected up to 5
    assert up.tolist() == [False] * 4 + [True] and down.tolist() == [True] * 4 + [False]
    up, down = quality_bands([1, 2, 3, 4], 0.5, split="rank")  # ceil(0.5 * 4) = 2 each side
    assert up.tolist() == [False, False, True, True] and down.tolist() == [True, True, False, False]
    up, down = quality_bands([1, 2, 2, 4], 0.25, split="rank")  # 1 each side; no tie at the cut
    assert up.tolist() == [False, False, False, True] and down.tolist() == [True, False, False, False]
    up, _ = quality_bands([1, 3, 3, 3], 0.25, split="rank")  # a tie with the last one in is in too
    assert up.tolist() == [False, True, True, True]
    assert quality_bands([0.0] * 10, 0.3, split="rank")[0].sum() == 10  # 0.3 * 10 is 3, not 4, by rounding


def test_overlapping_bands_keep_the_chosen_above_the_rejected():
    # rho 0.9: every response is in both bands; the least diverse one below the chosen is taken
    pair = _one([0, 1, 2], [0.0, 0.5, 1.0], rho=0.9).pairs[0]
    assert (pair.chosen, pair.rejected) == ("r2", "r0")
    pair = _one([0, 1, 2], [1.0, 0.5, 0.0], rho=0.9).pairs[0]  # r0 most diverse but nothing is below it
    assert pair.chosen == "r0" or pair.chosen_quality > pair.rejected_quality
    assert pair.chosen_quality > pair.rejected_quality


def test_ties_go_to_quality_then_to_a_seeded_order():
    # r3 and r4 equally diverse: the higher quality wins the chosen side; r0 / r1 likewise lower wins rejected
    pair = _one([0, 1, 2, 3, 4], [0.3, 0.3, 0.0, 0.7, 0.7], rho=0.25).pairs[0]
    assert (pair.chosen, pair.rejected) == ("r4", "r0")
    # r2, r3, r4 of equal quality and diversity: the seeded order decides, the same for the same seed
    q, d = [0, 0, 5, 5, 5], [0.0, 0.0, 1.0, 1.0, 1.0]
    picks = {}
    for seed in range(12):
        pair = _one(q, d, seed=seed).pairs[0]
        perm = np.random.default_rng([seed, 0]).permutation(5)
        first_in_order = next(int(i) for i in perm if i in (2, 3, 4))
        assert pair.chosen == f"r{first_in_order}", seed
        assert pair.rejected == f"r{next(int(i) for i in perm if i in (0, 1))}"
        assert _one(q, d, seed=seed).pairs[0] == pair
        picks[seed] = pair.chosen
    assert len(set(picks.values())) > 1  # the order really depends on the seed


def test_pools_without_a_preference_are_skipped_counted_and_warned_about():
    pools = [
        Pool("a", ["x", "y", "z"], [1.0, 1.0, 1.0]),  # nothing above / below: all equal
        Pool("b", ["x", "y"], [1.0, 0.0]),
        Pool("c", ["same", "same"], [1.0, 0.0]),  # the only lower reply is the chosen text again
    ]
    for rule in ("divpo", "dpo"):
        with pytest.warns(UserWarning, match=r"2 of 3 pools gave no preference pair and were skipped .*pools 0, 2"):
            sel = select_preference_pairs(pools, rule=rule, criterion="frequency")
        assert [p.pool for p in sel.pairs] == [1]
        assert sel.skipped == {0: SAME_QUALITY, 2: NOTHING_BELOW}
        assert sel.stats == {
            "pools": 3,
            "pairs": 1,
            "skipped": 2,
            "skipped_by_reason": {SAME_QUALITY: 1, NOTHING_BELOW: 1},
        }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped: no warning
        select_preference_pairs(pools[1:2], criterion="frequency")


def test_a_dataset_in_text_or_conversational_form_for_dpo_trainer():
    messages = [{"role": "user", "content": "Hi!"}]
    pools = [Pool("Hi!<eos>", ["a", "b c"], [0.0, 1.0]), Pool(messages, ["d", "e"], [1.0, 0.0])]
    text = diverse_preference_pairs(pools[:1], criterion="frequency")
    assert text.column_names == ["prompt", "chosen", "rejected"]
    assert text[0] == {"prompt": "Hi!<eos>", "chosen": "b c", "rejected": "a"}
    chat = diverse_preference_pairs(pools[1:], criterion="frequency")
    assert chat[0] == {
        "prompt": messages,
        "chosen": [{"role": "assistant", "content": "d"}],
        "rejected": [{"role": "assistant", "content": "e"}],
    }
    empty = diverse_preference_pairs([], rule="dpo")
    assert len(empty) == 0 and empty.column_names == ["prompt", "chosen", "rejected"]


def test_the_dataset_passes_every_option_on_to_select_preference_pairs():
    pools = [Pool("p", ["a", "b", "a b", "c"], [1.0, 0.5, 0.9, 0.0]), Pool("q", ["x", "y", "x y"], [0.2, 0.8, 0.8])]
    options = {"rule": "divpo", "criterion": "frequency", "rho": 0.6, "split": "rank", "seed": 3}
    given = diverse_preference_pairs(pools, **options).to_list()
    assert given == select_preference_pairs(pools, **options).records()
    # pool q: y and x y tie on quality (0.8) and on word-frequency diversity (0.5 each), so the seeded tie
    # order decides: seed 3's picks y, the default seed 0's picks x y (the options did reach the rule)
    assert given[1] == {"prompt": "q", "chosen": "y", "rejected": "x"}
    assert diverse_preference_pairs(pools, criterion="frequency")[1]["chosen"] == "x y"
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'temperature'"):
        diverse_preference_pairs(pools, temperature=0.7)


def test_quality_as_a_trl_reward_function_or_lists():
    calls = []

    def reward(prompts, completions, **kwargs):
        calls.append((prompts, completions))
        return [len(c if isinstance(c, str) else c[0]["content"]) for c in completions]

    messages = [{"role": "user", "content": "Hi!"}]
    pools = [Pool("p", ["aa", "b"]), Pool("q", ["c", "ddd"])]
    sel = select_preference_pairs(pools, quality=reward, rule="dpo")
    assert [(p.chosen, p.rejected) for p in sel.pairs] == [("aa", "b"), ("ddd", "c")]
    ((prompts, completions),) = calls  # one call over every pool's responses
    assert prompts == ["p", "p", "q", "q"] and completions == ["aa", "b", "c", "ddd"]
    chat = [Pool(messages, ["c", "ddd"])]
    sel = select_preference_pairs(chat, quality=reward, rule="dpo")  # completions as TRL gives them for chat
    assert [(p.chosen, p.rejected) for p in sel.pairs] == [("ddd", "c")]
    assert calls[1] == ([messages, messages], [[{"role": "assistant", "content": r}] for r in ("c", "ddd")])
    sel = select_preference_pairs(pools, quality=[[0, 1], [1, 0]], rule="dpo")
    assert [(p.chosen, p.rejected) for p in sel.pairs] == [("b", "aa"), ("c", "ddd")]


def test_semantic_rarity_is_the_share_of_the_pool_in_other_clusters():
    class Space:
        fitted = True
        dirpath = None

        def assign(self, texts):
            return np.array([{"yes": 0, "yeah": 0, "sure": 0, "no way": 1, "pizza": 2}[t] for t in texts])

    pools = [Pool("p", ["yes", "yeah", "sure", "no way"]), Pool("q", ["pizza", "yes"])]
    # 3 in cluster 0: each has 1 of 3 others elsewhere; "no way" 3 of 3
    assert semantic_rarity(pools, Space()) == [[1 / 3, 1 / 3, 1 / 3, 1.0], [1.0, 1.0]]
    pools[0].quality = [1.0, 1.0, 0.0, 1.0]
    pair = select_preference_pairs(pools[:1], space=Space()).pairs[0]
    assert (pair.chosen, pair.rejected) == ("no way", "sure")


def test_likelihood_is_minus_the_mean_log_probability_per_token():
    import torch
    from helpers import causal_model, tokenizer

    tok, model = tokenizer(), causal_model()
    pools = [Pool("hello there" + tok.eos_token, ["how are you", "fine"])]
    sel = select_preference_pairs(pools, quality=[[1, 0]], criterion="likelihood", model=model, tokenizer=tok)
    got = likelihood_diversity(pools, model, tok)[0]
    prompt = tok("hello there" + tok.eos_token)["input_ids"]
    for response, value in zip(pools[0].responses, got):
        ids = prompt + tok(response)["input_ids"] + [tok.eos_token_id]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)
        picked = logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])][len(prompt) - 1 :]
        assert value == pytest.approx(float(-picked.mean()), abs=1e-5)
    assert (sel.pairs[0].chosen_diversity, sel.pairs[0].rejected_diversity) == pytest.approx(got)


# -- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pools", "kwargs", "match"),
    [
        ([Pool("p", ["a", "b"], [0, 1]), Pool("q", ["only"], [1])], {}, r"pools\[1\] has 1 response\(s\)"),
        ([Pool("p", ["a", "b", "c"], [0, 1])], {}, r"pools\[0\]: quality has 2 scores for 3 responses"),
        ([Pool("p", ["a", "b"], [0, math.nan])], {}, r"pools\[0\]: quality\[1\] is nan"),
        ([Pool("p", ["a", "b"], [math.inf, 0])], {}, r"pools\[0\]: quality\[0\] is inf"),
        ([Pool("p", ["a", "b"])], {}, r"pools\[0\] has no quality scores and no quality= was given"),
        ([Pool("p", ["a", "b"])], {"quality": [[1, 0], [1, 0]]}, r"quality= has 2 score lists for 1 pools"),
        ([Pool("p", ["a", "b"])], {"quality": lambda **k: [1]}, r"quality= returned 1 scores for the pools' 2"),
        ([Pool("p", ["a", "b"], [0, 1])], {"rho": 0}, r"rho \(the quality threshold\) must be a number in \(0, 1\)"),
        ([Pool("p", ["a", "b"], [0, 1])], {"rho": 1.0}, r"rho .* in \(0, 1\), got 1.0"),
        ([Pool("p", ["a", "b"], [0, 1])], {"rho": math.nan}, r"rho .* in \(0, 1\), got nan"),
        ([Pool("p", ["a", "b"], [0, 1])], {"rule": "ipo"}, r"rule must be one of \('divpo', 'dpo'\)"),
        ([Pool("p", ["a", "b"], [0, 1])], {"split": "median"}, r"split must be one of"),
        ([Pool("p", ["a", "b"], [0, 1])], {"criterion": "vibes"}, r"criterion must be one of"),
        ([Pool("p", ["a", "b"], [0, 1])], {}, r"criterion='semantic' needs space="),
        ([Pool("p", ["a", "b"], [0, 1])], {"criterion": "likelihood"}, r"needs model= and tokenizer="),
        ([Pool("p", ["a", "b"], [0, 1])], {"criterion": lambda p, r: [1.0]}, r"pools\[0\]: diversity has 1 scores"),
        ([{"prompt": "p", "responses": "ab"}], {}, r"pools\[0\]: responses must be a list of strings"),
        ([{"prompt": 3, "responses": ["a", "b"]}], {}, r"pools\[0\]: prompt must be a string or a non-empty list"),
        ([{"responses": ["a", "b"]}], {}, r"pools\[0\]: no 'prompt' field"),
    ],
)
def test_bad_input_is_named(pools, kwargs, match):
    with pytest.raises(ValueError, match=match):
        select_preference_pairs(pools, **kwargs)


def test_read_pools_names_the_file_and_line(tmp_path):
    path = tmp_path / "pools.jsonl"
    good = json.dumps({"prompt": "p", "responses": ["a", "b"], "quality": [1, 0]})
    path.write_text(good + "\n\n" + good + "\n", encoding="utf-8")
    assert read_pools(path) == [Pool("p", ["a", "b"], [1.0, 0.0])] * 2
    assert read_pool_lines(path)[2] == [1, 3]
    for line, match in [
        ("{not json", r"pools.jsonl line 2: not valid JSON"),
        (json.dumps({"prompt": "p", "responses": ["a", "b"], "quality": [1, float("nan")]}), r"line 2: quality\[1\]"),
        (json.dumps({"prompt": "p", "response": ["a"]}), r"line 2: no 'responses' field"),
        (json.dumps([1, 2]), r"line 2: expected a Pool or a mapping, got list"),
    ]:
        path.write_text(good + "\n" + line + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            read_pools(path)
    path.write_bytes(b'{"prompt": "\xff"}\n')
    with pytest.raises(ValueError, match="not UTF-8"):
        read_pools(path)


# -- pools from a model ---------------------------------------------------------------------------------


PROMPTS = [f"turn {i} about music<|endoftext|>" for i in range(5)]


def test_build_pools_is_seeded_and_a_resumed_build_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    from helpers import causal_model, tokenizer

    tok, model = tokenizer(), causal_model()
    kwargs = {"chunk_size": 2, "max_new_tokens": 6, "seed": 3, "show_progress": False}
    whole = build_pools(model, tok, PROMPTS, 3, path=tmp_path / "whole.jsonl", **kwargs)
    assert [len(p.responses) for p in whole] == [3] * 5 and [p.prompt for p in whole] == PROMPTS
    assert len({r for p in whole for r in p.responses}) > 5  # sampled, not one greedy reply
    assert read_pools(tmp_path / "whole.jsonl") == whole
    assert build_pools(model, tok, PROMPTS, 3, **kwargs) == whole  # no file: the same pools
    assert build_pools(model, tok, PROMPTS, 3, **{**kwargs, "seed": 4}) != whole

    # killed while sampling the second chunk: the file holds the first chunk's pools, whole lines only
    calls = {"n": 0}
    generate = model.generate

    def dies_on_the_second_chunk(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return generate(*args, **kw)

    monkeypatch.setattr(model, "generate", dies_on_the_second_chunk)
    path = tmp_path / "resumed.jsonl"
    with pytest.raises(KeyboardInterrupt, match=r"^$"):  # the one the test raised, not another
        build_pools(model, tok, PROMPTS, 3, path=path, **kwargs)
    assert read_pools(path) == whole[:2]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    calls["n"] = -100
    resumed = build_pools(model, tok, PROMPTS, 3, path=path, **kwargs)
    assert resumed == whole and calls["n"] == -100 + 2  # chunks 1 and 2 sampled, chunk 0 read back
    assert path.read_text(encoding="utf-8") == (tmp_path / "whole.jsonl").read_text(encoding="utf-8")
    # a finished file is read back whole, nothing sampled again (the last chunk, one prompt, included)
    assert build_pools(model, tok, PROMPTS, 3, path=path, **kwargs) == whole and calls["n"] == -98

    with pytest.raises(ValueError, match=r"resumed.jsonl: made with other settings"):
        build_pools(model, tok, PROMPTS, 4, path=path, **kwargs)
    with pytest.raises(ValueError, match=r"pool 0 answers another prompt than prompts\[0\]"):
        build_pools(model, tok, ["other"] + PROMPTS[1:], 3, path=path, **kwargs)
    with pytest.raises(ValueError, match="num_responses must be an integer >= 2"):
        build_pools(model, tok, PROMPTS, 1)
    with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
        build_pools(model, tok, [[{"role": "user", "content": "hi"}]], 2)


def test_write_pools_round_trips_with_settings(tmp_path):
    for pools in (
        [Pool("p", ["a", "b"], [0.5, 1.0]), Pool("q", ["c", "d"])],
        [Pool([{"role": "user", "content": "hi"}], ["c", "d"]), Pool([{"role": "user", "content": "yo"}], ["e", "f"])],
    ):
        write_pools(tmp_path / "sub" / "pools.jsonl", pools, {"seed": 1})
        settings, back, lines = read_pool_lines(tmp_path / "sub" / "pools.jsonl")
        assert settings == {"seed": 1} and back == pools and lines == [2, 3]


# -- the command line ---------------------------------------------------------------------------------


def _pools_file(path, pools):
    path.write_text("".join(json.dumps(p) + "\n" for p in pools), encoding="utf-8")
    return path


CLI_POOLS = [
    {"prompt": "p0", "responses": ["ok", "ok", "good thanks", "hm"], "quality": [1, 1, 1, 0]},
    {"prompt": "p1", "responses": ["a", "b"], "quality": [0.5, 0.5]},  # no preference: skipped
    {"prompt": "p2", "responses": ["x y", "x", "z"], "quality": [0.2, 0.9, 0.1]},
]


def test_the_pairs_command_writes_pairs_and_details(tmp_path, capsys):
    from lightning_div.cli.main import main

    pools = _pools_file(tmp_path / "pools.jsonl", CLI_POOLS)
    out, details = tmp_path / "pairs.jsonl", tmp_path / "details.jsonl"
    argv = ["pairs", str(pools), "--out", str(out), "--criterion", "frequency", "--details", str(details)]
    assert main(argv) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    # p0: "good thanks" shares no word (frequency diversity 1); p2: the chosen band q >= 0.5 is "x" alone, and
    # below it "x y" (which repeats "x": diversity 1 - (1/2 + 0) / 2) is less diverse than "z" (1)
    assert rows == [
        {"prompt": "p0", "chosen": "good thanks", "rejected": "hm"},
        {"prompt": "p2", "chosen": "x", "rejected": "x y"},
    ]
    captured = capsys.readouterr()
    # issue 63: the skipped pool is named by its line in the file (from 1), as the errors name it, not as "pools 1"
    assert (
        "1 of 3 pools gave no preference pair and were skipped (1 x every response has the same quality): "
        f"{pools} line 2"
    ) in captured.err
    assert "2 pairs from 3 pools (divpo, criterion frequency, rho 0.5; 1 skipped)" in captured.out
    info = [json.loads(line) for line in details.read_text(encoding="utf-8").splitlines()]
    assert info[1] == {
        "pool": 1,
        "line": 2,
        "skipped": "every response has the same quality",
        "diversity": [1.0, 1.0],  # each reply's diversity, the skipped pool's too
    }
    assert info[2] == {
        "pool": 2,
        "line": 3,
        "chosen_index": 1,
        "rejected_index": 0,
        "chosen_quality": 0.9,
        "rejected_quality": 0.2,
        "chosen_diversity": 0.5,
        "rejected_diversity": 0.75,
        "diversity": [0.75, 0.5, 1.0],  # "x y", "x", "z": the rarity of every reply, not only the two chosen
    }
    assert main(["pairs", str(pools), "--out", str(out), "--rule", "dpo", "--details", str(details)]) == 0
    assert "2 pairs from 3 pools (dpo; 1 skipped)" in capsys.readouterr().out  # no rho: DPO's rule has none
    assert "diversity" not in json.loads(details.read_text(encoding="utf-8").splitlines()[0])
    assert json.loads(out.read_text(encoding="utf-8").splitlines()[0])["chosen"] in ("ok", "good thanks")


@pytest.mark.parametrize(
    ("lines", "extra", "match"),
    [
        (CLI_POOLS, ["--rho", "1"], r"--rho must be in \(0, 1\), got 1.0"),
        (CLI_POOLS, ["--rho", "nan"], r"--rho must be in \(0, 1\), got nan"),
        (CLI_POOLS, ["--criterion", "likelihood"], r"--criterion likelihood needs --model"),
        (CLI_POOLS, ["--out", "{pools}"], r"--out .*pools.jsonl is the input"),
        ([{"prompt": "p", "responses": ["a", "b"]}], [], r"pools.jsonl line 1: no 'quality' list"),
        ([CLI_POOLS[0], {"prompt": "p", "responses": ["a"], "quality": [1]}], [], r"line 2: 1 response\(s\)"),
        ([CLI_POOLS[0], {"prompt": "p", "responses": ["a", "b"], "quality": [1]}], [], r"line 2: quality has 1"),
        (CLI_POOLS, ["--num-clusters", "9"], r"--num-clusters 9 is more than the pools' 8 distinct responses"),
    ],
)
def test_the_pairs_command_says_each_mistake_in_one_line(tmp_path, capsys, lines, extra, match):
    from lightning_div.cli.main import main

    pools = _pools_file(tmp_path / "pools.jsonl", lines)
    extra = [e.replace("{pools}", str(pools)) for e in extra]
    assert main(["pairs", str(pools), "--out", str(tmp_path / "pairs.jsonl"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lightning-div pairs: error: ")
    assert __import__("re").search(match, err), err
    assert not (tmp_path / "pairs.jsonl").exists()
    assert main(["pairs", str(tmp_path / "missing.jsonl"), "--out", "x.jsonl"]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err


def _build_on_ranks(rank, world, model, tok, path):
    from lightning_div._internal.distributed import barrier

    pools = build_pools(model, tok, PROMPTS, 3, path=path, chunk_size=2, max_new_tokens=6, seed=3, show_progress=False)
    barrier()  # rank 0 wrote the file; every rank reads it after the last round
    return pools, read_pools(path)


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_two_processes_sample_the_pools_one_process_samples(tmp_path):
    from ddp_utils import run_distributed
    from helpers import causal_model, tokenizer

    tok, model = tokenizer(), causal_model()
    single = build_pools(model, tok, PROMPTS, 3, chunk_size=2, max_new_tokens=6, seed=3, show_progress=False)
    # 3 chunks: rank 0 samples chunks 0 and 2, rank 1 chunk 1; both return all the pools, rank 0 writes them
    for pools, written in run_distributed(_build_on_ranks, 2, model, tok, str(tmp_path / "ddp.jsonl")):
        assert pools == single and written == single


def test_the_pairs_command_fits_the_semantic_criterions_clusters_on_the_pools(tmp_path, capsys):
    from helpers import causal_model, tokenizer

    from lightning_div.cli.main import main

    # a test-sized encoder (the wiring is checked, not the embeddings): the tiny causal LM, saved as a folder
    causal_model().save_pretrained(tmp_path / "encoder")
    tokenizer().save_pretrained(tmp_path / "encoder")
    pools = _pools_file(tmp_path / "pools.jsonl", CLI_POOLS)
    out, details = tmp_path / "pairs.jsonl", tmp_path / "details.jsonl"
    argv = ["pairs", str(pools), "--out", str(out), "--encoder", str(tmp_path / "encoder"), "--num-clusters", "2"]
    argv += ["--details", str(details), "--quiet"]
    assert main(argv) == 0
    info = [json.loads(line) for line in details.read_text(encoding="utf-8").splitlines()]
    assert [row["pool"] for row in info] == [0, 1, 2] and info[1]["skipped"]
    for row, pool in zip((info[0], info[2]), (CLI_POOLS[0], CLI_POOLS[2])):
        n = len(pool["responses"])
        # rarity = (n - size of the reply's cluster) / (n - 1), one of n values
        for key in ("chosen_diversity", "rejected_diversity"):
            assert any(row[key] == pytest.approx((n - size) / (n - 1)) for size in range(1, n + 1))
        assert row["chosen_quality"] > row["rejected_quality"]
    assert "2 pairs from 3 pools (divpo, criterion semantic" in capsys.readouterr().out
    assert not list(tmp_path.glob("lightning_div_pairs_*"))  # the fit's cache went to a temporary folder


# -- hardening, round six (issue 64: M3, M4, M5, L01-L04, L10, L11) ----------------------------------------


def test_likelihood_keeps_a_reply_longer_than_the_window_to_its_first_tokens(tmp_path, capsys):
    """M3: a reply past the model's window is cut as the package's scoring cuts it (its first window - 1 tokens,
    the prompt's last token before them); it was torch's ``IndexError`` (the pairs command: a traceback)."""
    import torch
    from helpers import causal_model, tokenizer

    from lightning_div.cli.main import main

    tok, model = tokenizer(), causal_model(n_positions=16)
    long_reply = " ".join(["music"] * 40)
    pools = [Pool("hello there" + tok.eos_token, [long_reply, "fine"])]
    got = likelihood_diversity(pools, model, tok)[0]
    prompt = tok("hello there" + tok.eos_token)["input_ids"]
    reply = tok(long_reply)["input_ids"] + [tok.eos_token_id]
    assert len(prompt) + len(reply) > 16  # the case: prompt and reply do not fit the window of 16
    ids = prompt[-1:] + reply[:15]  # the reply's first 15 tokens, after the prompt's last one: 16 positions
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)
    expected = -logp[torch.arange(15), torch.tensor(ids[1:])].mean()
    assert got[0] == pytest.approx(float(expected), abs=1e-5)
    # the short reply is scored whole, as before
    ids = prompt + tok("fine")["input_ids"] + [tok.eos_token_id]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)
    picked = logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])][len(prompt) - 1 :]
    assert got[1] == pytest.approx(float(-picked.mean()), abs=1e-5)

    # the command: pairs written, exit 0, no traceback
    model.save_pretrained(tmp_path / "policy")
    tok.save_pretrained(tmp_path / "policy")
    path = _pools_file(tmp_path / "pools.jsonl", [{**pools[0].to_json(), "quality": [1, 0]}])
    argv = ["pairs", str(path), "--out", str(tmp_path / "pairs.jsonl"), "--criterion", "likelihood"]
    assert main([*argv, "--model", str(tmp_path / "policy"), "--quiet"]) == 0
    (row,) = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert row["chosen"] == long_reply and row["rejected"] == "fine"


MESSAGES = [{"role": "user", "content": "Hi!"}]


def test_pools_of_text_and_of_chat_prompts_do_not_mix(tmp_path):
    """M4: a pools file mixing text and chat-message prompts is refused naming the file and both lines (TRL's
    DPOTrainer reads one form; pyarrow said ``cannot mix list and non-list``); the same rule in memory."""
    path = tmp_path / "pools.jsonl"
    text = {"prompt": "p", "responses": ["a", "b"], "quality": [1, 0]}
    chat = {"prompt": MESSAGES, "responses": ["c", "d"], "quality": [0, 1]}
    _pools_file(path, [text, text, chat])
    with pytest.raises(ValueError, match=r"pools\.jsonl line 3: a prompt of chat messages, but line 1's is text"):
        read_pools(path)
    _pools_file(path, [chat, text])
    with pytest.raises(ValueError, match=r"pools\.jsonl line 2: a prompt of text, but line 1's is chat messages"):
        read_pools(path)
    mixed = [Pool("p", ["a", "b"], [1, 0]), Pool(MESSAGES, ["c", "d"], [0, 1])]
    with pytest.raises(ValueError, match=r"pools\[1\]: a prompt of chat messages, but pools\[0\]'s is text"):
        select_preference_pairs(mixed, rule="dpo")
    with pytest.raises(ValueError, match=r"pools\[1\]: a prompt of chat messages, but pools\[0\]'s is text"):
        write_pools(tmp_path / "out.jsonl", mixed)
    assert not (tmp_path / "out.jsonl").exists()
    with pytest.raises(ValueError, match=r"prompts\[1\]: a prompt of chat messages, but prompts\[0\]'s is text"):
        build_pools(None, None, ["p", MESSAGES], 2)
    # one form throughout is fine, each read back as it was written
    for pools in ([Pool("p", ["a", "b"], [1, 0])] * 2, [Pool(MESSAGES, ["c", "d"], [0, 1])] * 2):
        assert read_pools(write_pools(tmp_path / "one.jsonl", pools)) == pools


def test_build_pools_refuses_one_string_as_its_prompts():
    """M5: a string is not a list of prompts (it was 11 pools of one character each, each sampled)."""

    class Model:
        config = None

        def generate(self, *args, **kwargs):
            raise AssertionError("nothing is sampled for a refused call")

    for prompts in ("Hello there", b"Hello there"):
        with pytest.raises(TypeError, match=r"^prompts must be a list of prompts .*got (str|bytes)"):
            build_pools(Model(), None, prompts, 2)


def test_a_space_that_is_not_a_semantic_space_is_named():
    """L01: ``space="minilm"`` is a TypeError naming ``space=`` (it was ``'str' object has no attribute 'fitted'``)."""
    with pytest.raises(TypeError, match=r"space= must be a SemanticSpace .*got str 'minilm'"):
        select_preference_pairs([Pool("p", ["a", "b"], [1, 0])], space="minilm")


@pytest.mark.parametrize(
    ("quality", "match"),
    [
        ("10", r"pools\[0\]: quality must be a list of numbers, got str"),
        ({"a": 1, "b": 0}, r"pools\[0\]: quality must be a list of numbers, got dict"),
        (np.zeros((2, 2)), r"pools\[0\]: quality must be one number per response, got an array of shape \(2, 2\)"),
        ([np.zeros(2), 1.0], r"pools\[0\]: quality\[0\] is an array of shape \(2,\), not a number"),
    ],
)
def test_quality_of_the_wrong_shape_is_named_whole(quality, match):
    """L02: a string or a mapping is not split into its characters or keys before the check; an array of
    another shape is named by its shape (numpy's ``only length-1 arrays`` before)."""
    with pytest.raises(ValueError, match=match):
        select_preference_pairs([{"prompt": "p", "responses": ["a", "b"], "quality": quality}], rule="dpo")


def test_quality_as_one_array_row_per_pool():
    """L02: ``quality=`` as a 2-D array (one row per pool) is read as the list of its rows; a 1-D one is named."""
    pools = [Pool("p", ["a", "b"]), Pool("q", ["c", "d"])]
    sel = select_preference_pairs(pools, quality=np.array([[0.0, 1.0], [1.0, 0.0]]), rule="dpo")
    assert [(p.chosen, p.rejected) for p in sel.pairs] == [("b", "a"), ("c", "d")]
    with pytest.raises(ValueError, match=r"quality= as an array must have one row per pool \(2-D\), got shape \(4,\)"):
        select_preference_pairs(pools, quality=np.zeros(4), rule="dpo")


def test_the_pairs_command_checks_its_outputs_before_any_work(tmp_path, capsys, monkeypatch):
    """L03: ``--out`` a folder (``.`` included) or under a file is refused before the pools are read or a pair is
    selected (it failed after the whole selection, with ``PosixPath('.') has an empty name``); a missing folder
    is made."""
    import lightning_div.preference.pairs as pairs_module
    from lightning_div.cli.main import main

    pools = _pools_file(tmp_path / "pools.jsonl", CLI_POOLS)
    selected = []
    select = pairs_module.select_preference_pairs
    monkeypatch.setattr(pairs_module, "select_preference_pairs", lambda *a, **k: selected.append(1) or select(*a, **k))
    monkeypatch.chdir(tmp_path)
    for option, value, match in [
        ("--out", ".", r"--out \.: is a folder; give the file to write"),
        ("--out", str(tmp_path), r"--out .*: is a folder; give the file to write"),
        ("--out", str(pools / "pairs.jsonl"), r"--out .*pools\.jsonl/pairs\.jsonl: .*pools\.jsonl is a file, not"),
        ("--details", ".", r"--details \.: is a folder; give the file to write"),
    ]:
        argv = ["pairs", str(pools), "--criterion", "frequency", "--out", "pairs.jsonl", option, value]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(match, err), err
    assert selected == [] and not (tmp_path / "pairs.jsonl").exists()
    assert main(["pairs", str(pools), "--criterion", "frequency", "--out", "new/sub/pairs.jsonl"]) == 0
    assert selected == [1] and len((tmp_path / "new" / "sub" / "pairs.jsonl").read_text().splitlines()) == 2


def test_a_lone_surrogate_is_named_where_it_is_read(tmp_path, capsys):
    """L04: ``"\\ud800x"`` (valid JSON, not Unicode text) is refused by ``read_pools`` naming the file, line and
    field (``write_pools`` and the pairs command failed later, naming nothing)."""
    from lightning_div.cli.main import main

    path = tmp_path / "pools.jsonl"
    good = json.dumps({"prompt": "p", "responses": ["a", "b"], "quality": [1, 0]})
    for record, field in [
        ('{"prompt": "p", "responses": ["a", "\\ud800x"], "quality": [1, 0]}', r"responses\[1\]"),
        ('{"prompt": "p\\udfff", "responses": ["a", "b"], "quality": [1, 0]}', "prompt"),
        ('{"prompt": [{"role": "user", "content": "\\ud83d"}], "responses": ["a", "b"]}', r"prompt\[0\]\['content'\]"),
    ]:
        path.write_text(good + "\n" + record + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=rf"pools\.jsonl line 2: {field} holds a lone surrogate"):
            read_pools(path)
    path.write_text(good + "\n" + '{"prompt": "p", "responses": ["a", "\\ud800x"], "quality": [1, 0]}\n')
    assert main(["pairs", str(path), "--out", str(tmp_path / "pairs.jsonl"), "--rule", "dpo"]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(r"pools\.jsonl line 2: responses\[1\] holds a lone surrogate", err) and len(err.splitlines()) == 1
    with pytest.raises(ValueError, match=r"pools\[0\]: responses\[0\] holds a lone surrogate"):
        write_pools(tmp_path / "out.jsonl", [Pool("p", ["\ud800", "b"])])


def test_a_space_fitted_for_the_pairs_names_no_deleted_file(tmp_path):
    """L10: an unfitted space without ``dirpath`` is fitted in a temporary folder; afterwards it holds its clusters
    in memory and its state names no file (it named the deleted temporary file)."""
    from helpers import causal_model, tokenizer

    from lightning_div.semantic.encoder import ResponseEncoder
    from lightning_div.semantic.space import SemanticSpace

    encoder = ResponseEncoder.from_model(causal_model(), tokenizer(), batch_size=8, show_progress=False)
    space = SemanticSpace(encoder=encoder, num_clusters=2, show_progress=False)
    pools = [Pool("p", ["yes", "yes sure", "no", "pizza tonight"], [1, 0, 1, 0])]
    first = select_preference_pairs(pools, space=space)
    assert space.fitted and space.state_dict() == {"clusters_path": None}
    again = select_preference_pairs(pools, space=space)  # the clusters in memory serve again
    assert again.pairs == first.pairs


def test_qualities_near_the_float_limit_keep_their_bands():
    """L11: ``[1e308, -1e308, 0]``: the range overflowed to inf, every reply was in both bands and the reply of
    quality 0 could be chosen over the best."""
    up, down = quality_bands([1e308, -1e308, 0.0], 0.1)
    assert up.tolist() == [True, False, False] and down.tolist() == [False, True, False]
    up, down = quality_bands([1e308, -1e308, 0.0], 0.5)  # the middle, 0, is at both thresholds: in both bands
    assert up.tolist() == [True, False, True] and down.tolist() == [False, True, True]
    for rho in (0.1, 0.3):
        pair = _one([1e308, -1e308, 0.0], [0.0, 0.0, 1.0], rho=rho).pairs[0]
        assert (pair.chosen, pair.rejected) == ("r0", "r1")
    # ordinary ranges keep their exact thresholds
    assert [m.tolist() for m in quality_bands([0, 1, 2, 3, 4], 0.25)] == [[0, 0, 0, 1, 1], [1, 1, 0, 0, 0]]
