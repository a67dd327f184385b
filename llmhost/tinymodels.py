"""Build the sandbox's tiny models on the guest, with nothing downloaded.

Runs with the vLLM venv's python (torch, transformers and tokenizers come with vLLM). A
byte-level BPE tokenizer is trained on text every Debian guest has (licence texts and the
Python standard library), then random-weight Llamas are saved with fixed seeds, so a
rebuild gives the same weights and a served completion can be checked against transformers.
This file is uploaded as a script: it imports nothing from llmhost.

    python tinymodels.py --kind tiny-llama --out /srv/llmhost/models/tiny-llama
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import sysconfig
from pathlib import Path

VOCAB_SIZE = 4096
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# kind -> (layers, hidden, heads, kv heads, intermediate, seed)
SHAPES: dict[str, tuple[int, int, int, int, int, int]] = {
    "tiny-llama": (2, 128, 4, 2, 512, 0),
    "tiny-llama-draft": (1, 64, 2, 1, 256, 1),
}


def corpus_files() -> list[Path]:
    licences = sorted(Path("/usr/share/common-licenses").glob("*"))
    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:200]
    return [p for p in licences + stdlib if p.is_file()]


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [p.read_text(errors="replace") for p in corpus_files()]
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_model(kind: str, out: Path, tokenizer_dir: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    layers, hidden, heads, kv_heads, inter, seed = SHAPES[kind]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config.do_sample = False
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "llmhost-build.json").write_text(json.dumps({"kind": kind, "seed": seed}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(SHAPES), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    tokenizer_dir = args.out.parent / ".tiny-tokenizer"
    if not (tokenizer_dir / "tokenizer.json").exists():
        print(f"training tokenizer into {tokenizer_dir}", flush=True)
        build_tokenizer(tokenizer_dir)
    print(f"building {args.kind} into {args.out}", flush=True)
    build_model(args.kind, args.out, tokenizer_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
