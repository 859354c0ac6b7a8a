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
