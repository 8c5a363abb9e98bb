"""Tokenizers the suite builds for the paper's backbones: a byte-level BPE vocabulary (every byte one
token, so any text encodes) plus each model family's real special tokens, and the REAL chat template of
each backbone (tests/fixtures/chat_templates/, sources in SOURCES.md there).

Llama 3 has a BOS token and a post-processor that prepends it to every encoding made with special tokens
(as the real `meta-llama/Llama-3.2-3B-Instruct` tokenizer.json's TemplateProcessing does); its chat
template writes `{{- bos_token }}` too. Qwen has no BOS and no post-processor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).parent / "fixtures" / "chat_templates"


@dataclass(frozen=True)
class Family:
    template_file: str
    special: tuple[str, ...]  # the real special tokens of the family (the ones its chat template writes)
    bos: str | None
    eos: str
    pad: str | None
    model_type: str
    positions: int  # the real config.json's max_position_embeddings
    model_max_length: int  # the real tokenizer_config.json's


FAMILIES = {
    # meta-llama/Llama-3.2-3B-Instruct: bos <|begin_of_text|>, eos <|eot_id|>, no pad token
    "llama-3.2-3b-instruct": Family(
        "llama-3.2-instruct.jinja",
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        "<|begin_of_text|>", "<|eot_id|>", None, "llama", 131072, 131072,
    ),
    # Qwen/Qwen2.5-Math-1.5B (and -7B): no bos, eos and pad <|endoftext|>
    "qwen2.5-math-1.5b": Family(
        "qwen2.5-math.jinja", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        None, "<|endoftext|>", "<|endoftext|>", "qwen2", 4096, 131072,
    ),
    # Qwen/Qwen3-4B-Instruct-2507: no bos, eos <|im_end|>, pad <|endoftext|>
    "qwen3-4b-instruct": Family(
        "qwen3-instruct-2507.jinja", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        None, "<|im_end|>", "<|endoftext|>", "qwen3", 262144, 1010000,
    ),
}  # fmt: skip


def chat_template(backbone: str) -> str:
    return (TEMPLATES / FAMILIES[backbone].template_file).read_text()


def build_tokenizer(backbone: str):
    """A transformers fast tokenizer for `backbone`'s family, with its real chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    family = FAMILIES[backbone]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(family.special))
    if family.bos is not None:  # Llama 3: TemplateProcessing prepends BOS, as the real tokenizer.json does
        bos_id = tok.token_to_id(family.bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{family.bos}:0 $A:0", pair=f"{family.bos}:0 $A:0 {family.bos}:1 $B:1",
            special_tokens=[(family.bos, bos_id)],
        )  # fmt: skip
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=family.bos,
        eos_token=family.eos,
        pad_token=family.pad,
        model_max_length=family.model_max_length,
    )
    hf.chat_template = chat_template(backbone)
    return hf


def model_folder(root: Path, backbone: str, positions: int | None = None) -> Path:
    """A model folder vLLM (the fake) and transformers can read: config.json and the built tokenizer."""
    family = FAMILIES[backbone]
    folder = root / backbone
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(backbone)
    tokenizer.save_pretrained(folder)
    config = {
        "model_type": family.model_type,
        "max_position_embeddings": positions if positions is not None else family.positions,
        "vocab_size": len(tokenizer),
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder
