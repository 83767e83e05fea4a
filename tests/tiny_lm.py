"""Tiny language models for tests: built from a config in memory, offline, ~0.2 s per 64x64 tokens.

- :func:`char_tokenizer`: one token per printable ASCII character (a byte-level vocabulary
  restricted to printable bytes, so every generated token decodes to text that re-encodes to
  the same tokens), ChatML-style chat template, ``<|im_end|>`` as EOS.
- :func:`bpe_tokenizer`: a different tokenizer (GPT-2 style byte-level BPE trained on a few
  sentences, its own template and EOS) for heterogeneous swarms.
- :func:`tiny_llama`: a 2-layer Llama sized to a tokenizer, weights from a seed.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PLAIN_TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[ASSISTANT] {% endif %}"
)


def char_tokenizer() -> PreTrainedTokenizerFast:
    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    vocab = {token: i for i, token in enumerate(specials + chars)}
    # BPE without merges splits every word into characters; Fuse joins them back without the
    # spaces a default decoder would insert.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>",
        chat_template=CHATML_TEMPLATE,
    )


def bpe_tokenizer() -> PreTrainedTokenizerFast:
    specials = ["<eos>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    corpus = ["What is 3 + 4? The answer is 7.", "<answer>12</answer>", "1 2 3 4 5 6 7 8 9 0"] * 4
    tok.train_from_iterator(corpus, trainer=trainer)
    # pad shares the EOS id, as with many real models (SmolLM2, Qwen2.5)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>", chat_template=PLAIN_TEMPLATE,
    )


def tiny_llama(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, hidden: int = 64
) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=1024, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None, tie_word_embeddings=False,
    )
    # Weight init uses the global generator; fork it so tests leave no trace on it.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval()
