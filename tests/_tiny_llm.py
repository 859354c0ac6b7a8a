"""A tiny random-weight causal LM saved as a local HF folder, for fast real-backend tests."""

from __future__ import annotations

WORDS = ["canberra", "paris", "everest", "nile", "leonardo", "da", "vinci", "the", "is", "of",
         "capital", "australia", "mountain", "river", "painting", "answer", "document", "question"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<s> {{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<s> assistant : {% endif %}"
)


def save_word_tokenizer(folder, vocab: dict[str, int]) -> None:
    """A whitespace word-level tokenizer over ``vocab`` (which holds <unk>, <pad>, <s>, </s>) with
    `CHAT_TEMPLATE`, saved into ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)


def save_tiny_llm(folder, seed: int = 0, max_positions: int = 2048) -> None:
    """Write a 2-layer Llama with a word-level tokenizer and a chat template into ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = {t: i for i, t in enumerate(["<unk>", "<pad>", "<s>", "</s>", *WORDS, "user", "assistant", "system", ":"])}
    save_word_tokenizer(folder, vocab)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
                         bos_token_id=2, eos_token_id=3, pad_token_id=1, tie_word_embeddings=True)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)


BIGRAM_WORDS = ["<unk>", "<pad>", "<s>", "</s>", "<think>", "</think>", "<search>", "</search>",
                "<information>", "</information>", "<answer>", "</answer>", "plan", "bm25:", "capital",
                "canberra", "Doc", "1:", "2:", "system", "user", "assistant", ":"]
# each token's successor; any other token is followed by the end of sequence
BIGRAM_NEXT = {":": "<think>", "<think>": "plan", "plan": "</think>", "</think>": "<search>",
               "<search>": "bm25:", "bm25:": "capital", "capital": "</search>",
               "</information>": "<answer>", "<answer>": "canberra", "canberra": "</answer>"}


def save_bigram_llm(folder, logit: float = 5.0) -> None:
    """Write a one-layer Llama whose attention and MLP outputs are zeroed, so each next token
    depends on the current one only, and whose output head gives each token's `BIGRAM_NEXT` the
    logit ``logit`` (every other token 0): greedy, it writes a search, reads the injected block,
    then answers. The final RMSNorm scales the one-hot state to sqrt(32), so the logits are
    ``5.66 * logit``: with ``logit = 1`` each token follows its successor with probability 0.93
    at temperature 1, and about half the sampled rollouts stray somewhere."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = {w: i for i, w in enumerate(BIGRAM_WORDS)}
    save_word_tokenizer(folder, vocab)
    n = len(vocab)
    config = LlamaConfig(vocab_size=n, hidden_size=32, intermediate_size=8, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         bos_token_id=2, eos_token_id=3, pad_token_id=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, :n] = torch.eye(n)
        model.lm_head.weight.zero_()
        for word, i in vocab.items():
            model.lm_head.weight[vocab[BIGRAM_NEXT.get(word, "</s>")], i] = logit
    model.save_pretrained(folder)
