"""A character-level tokenizer built in code, saved as an ordinary Qwen2-style tokenizer.

Characters, not subwords: the tiny model has to learn digit-by-digit arithmetic, and nothing may be
downloaded. It is a byte-level BPE with an empty merge list, i.e. the format Qwen2 tokenizers use,
because transformers (and vLLM, verl) load any `model_type: qwen2` folder through `Qwen2Tokenizer`,
which rebuilds the pre-tokenizer as byte-level: a plain character vocabulary would silently lose its
spaces on reload, while this one tokenizes identically either way.

The chat template keeps only the user turn (the tiny model would spend most of its context on the
system prompt otherwise) and ends the prompt with a newline as the generation cue.
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


def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-character map, which byte-level BPE vocabularies are written in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def build_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = byte_level_alphabet()
    units = [alphabet[ord(c)] for c in CHARS]
    vocab = {token: i for i, token in enumerate([*SPECIALS, *units])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
