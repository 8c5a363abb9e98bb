"""A character-level tokenizer built in code, saved as a normal Hugging Face tokenizer.

Characters, not subwords: the tiny model has to learn digit-by-digit arithmetic, and nothing has to be
downloaded. The chat template keeps only the user turn (the tiny model would spend most of its context
on the system prompt otherwise) and ends the prompt with a newline as the generation cue.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerFast

CHARS = " 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ?.,:;!+-*=/\\{}()\n"
PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '\\n' }}{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate([*SPECIALS, *CHARS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
