"""The tiny models' tokenizer: one token per character, whole tokens for chat markers and tags.

``tiny_tokenizer()`` builds a ``transformers.PreTrainedTokenizerFast`` in memory, offline, with
the same ids every time (nothing is trained or sampled):

- ids 0-3: ``<pad>``, ``<unk>``, ``<|im_start|>``, ``<|im_end|>`` (EOS), special tokens, so
  ``decode(..., skip_special_tokens=True)`` drops them;
- ids 4-5: ``<answer>`` and ``</answer>``, one token each but *not* special: decoding keeps
  their text, which the env's reward reads (``answer_format="tag"``);
- then one token per character of :data:`CHARSET`, in its order: printable ASCII (letters, digits,
  punctuation, space, newline, tab) and the symbols of reasoning-gym's questions and answers
  outside ASCII (propositional_logic's connectives, collected over the paper's nine tasks and
  spell_backward) plus the maths symbols of ``sapo_env.spaces.SAMPLE_CHARSET``. Any other character
  (``\\r``, CJK, emoji) encodes to ``<unk>``, one per character.

A ChatML template frames the turns; with the empty system prompt the tiny models are trained
under (a 370-character system prompt would be 370 tokens here), ``agents.lm.generation
.chat_prompt_ids`` gives ``<|im_start|>user\\n{question}<|im_end|>\\n<|im_start|>assistant\\n``.

Round trips (tested): ``decode(encode(text)) == text`` for any text over the charset, and
every id re-encodes from its own decoded text (specials decoded with their text), so a
completion GRPO re-encodes as text gives back the ids that were sampled, except that
``<answer>`` spelled out character by character comes back as the one tag token, and a
special token's text in a completion (``<|im_end|>``, ``<unk>``, ...) is read as that token,
as every Hugging Face tokenizer reads it.

Example::

    >>> tok = tiny_tokenizer()
    >>> ids = tok("<answer>42</answer>", add_special_tokens=False)["input_ids"]
    >>> len(ids), tok.decode(ids)
    (4, '<answer>42</answer>')
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<unk>", "<|im_start|>", "<|im_end|>")
"""Special tokens, ids 0-3: padding, unknown character, turn start, turn end (EOS)."""
ANSWER_TAGS = ("<answer>", "</answer>")
"""The answer tags, ids 4-5: whole tokens that decode to their text."""
CHARSET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \n\t"
    "¬∧∨→↔⊕∀∃≠≤≥×÷π√∞αβγ"
)
"""One token per character, ids 6 on, in this order. Changing it changes every id after the
change: models saved with the old vocabulary no longer match (bump ``TOKENIZER_VERSION``)."""
TOKENIZER_VERSION = 1
"""Bumped whenever the vocabulary changes; part of the warm-start cache key."""

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Large enough that transformers never warns about long inputs; the model's own limit is
# TinyModelConfig.max_position_embeddings.
_MODEL_MAX_LENGTH = 1 << 20


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The character-level tokenizer of the tiny models; see the module docstring."""
    tokens = SPECIAL_TOKENS + ANSWER_TAGS + tuple(CHARSET)
    vocab = {token: i for i, token in enumerate(tokens)}
    # BPE without merges splits the text between added tokens into characters, and maps a
    # character outside the vocabulary to <unk>; Fuse joins decoded tokens without the spaces
    # a default decoder would put between them.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in ANSWER_TAGS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
        chat_template=CHATML_TEMPLATE, clean_up_tokenization_spaces=False,
        model_max_length=_MODEL_MAX_LENGTH,
    )
