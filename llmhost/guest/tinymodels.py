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
    # Same shape and seed as tiny-llama: byte-identical weights, a draft accepted 100%.
    "tiny-llama-draft-same": (2, 128, 4, 2, 512, 0),
    # tiny-llama's shape, other weights, and a tokenizer that is custom code (CUSTOM_TOKENIZER):
    # like Kimi's, it loads only with trust_remote_code, in the server and in every proof.
    "tiny-llama-custom-tokenizer": (2, 128, 4, 2, 512, 3),
}
# The tokenizer class of our own, loaded through tokenizer_config.json's auto_map.
CUSTOM_TOKENIZER_KINDS = {"tiny-llama-custom-tokenizer"}
CUSTOM_TOKENIZER_MODULE = "tokenization_llmhost_tiny"
CUSTOM_TOKENIZER_CLASS = "LlmhostTinyTokenizer"
CUSTOM_TOKENIZER_CODE = f'''"""The sandbox's tokenizer as custom code (llmhost's test bed): loaded
through auto_map, so only with trust_remote_code, as Kimi-K2.5's tokenizer is."""

from transformers import PreTrainedTokenizerFast


class {CUSTOM_TOKENIZER_CLASS}(PreTrainedTokenizerFast):
    """The shared byte-level BPE tokenizer under a class of its own."""

    slow_tokenizer_class = None
'''
# An EAGLE-3 head for tiny-llama with random weights: it must never pay (0% acceptance).
EAGLE3_KIND = "tiny-eagle3"
EAGLE3_TARGET = "tiny-llama"
EAGLE3_SEED = 2


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


def llama_config(tokenizer, layers: int, hidden: int, heads: int, kv_heads: int, inter: int):  # noqa: ANN001, ANN201
    """The Llama shape every tiny model shares, sized to the shared tokenizer."""
    from transformers import LlamaConfig

    return LlamaConfig(
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


def build_model(kind: str, out: Path, tokenizer_dir: Path) -> None:
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    layers, hidden, heads, kv_heads, inter, seed = SHAPES[kind]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    config = llama_config(tokenizer, layers, hidden, heads, kv_heads, inter)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config.do_sample = False
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if kind in CUSTOM_TOKENIZER_KINDS:
        make_tokenizer_custom_code(tmp)
    (tmp / "llmhost-build.json").write_text(json.dumps({"kind": kind, "seed": seed}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def make_tokenizer_custom_code(model_dir: Path) -> None:
    """Point tokenizer_config.json at a tokenizer class of our own (auto_map): transformers
    then refuses to load it without trust_remote_code, whatever loads it."""
    (model_dir / f"{CUSTOM_TOKENIZER_MODULE}.py").write_text(CUSTOM_TOKENIZER_CODE)
    path = model_dir / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = CUSTOM_TOKENIZER_CLASS
    fast = f"{CUSTOM_TOKENIZER_MODULE}.{CUSTOM_TOKENIZER_CLASS}"
    config["auto_map"] = {"AutoTokenizer": [None, fast]}
    path.write_text(json.dumps(config, indent=2) + "\n")


def build_eagle3(out: Path, tokenizer_dir: Path) -> None:
    """A random EAGLE-3 head in the checkpoint layout vLLM's llama_eagle3 loads.

    One decoder layer ("midlayer") whose attention reads [embeddings, hidden] (2H wide), an
    `fc` folding three auxiliary hidden states (3H) to H, its own norm and lm_head; the
    token embeddings are shared with the target. The target has only 2 layers, so the aux
    layer ids must be given: vLLM's default (2, L//2, L-3) is invalid for it.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import PreTrainedTokenizerFast

    layers, hidden, heads, kv_heads, inter, _ = SHAPES[EAGLE3_TARGET]
    head_dim = hidden // heads
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    vocab = len(tokenizer)
    config = llama_config(tokenizer, 1, hidden, heads, kv_heads, inter)
    config.architectures = ["LlamaForCausalLMEagle3"]
    config.eagle_aux_hidden_state_layer_ids = list(range(layers + 1))
    config.draft_vocab_size = vocab
    gen = torch.Generator().manual_seed(EAGLE3_SEED)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.bfloat16)

    weights = {
        "midlayer.input_layernorm.weight": ones(hidden),
        "midlayer.hidden_norm.weight": ones(hidden),
        "midlayer.post_attention_layernorm.weight": ones(hidden),
        "midlayer.self_attn.q_proj.weight": rand(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": rand(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": rand(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": rand(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": rand(inter, hidden),
        "midlayer.mlp.up_proj.weight": rand(inter, hidden),
        "midlayer.mlp.down_proj.weight": rand(hidden, inter),
        "fc.weight": rand(hidden, 3 * hidden),
        "norm.weight": ones(hidden),
        "lm_head.weight": rand(vocab, hidden),
    }
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config.save_pretrained(tmp)
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(tmp)
    (tmp / "llmhost-build.json").write_text(
        json.dumps({"kind": EAGLE3_KIND, "seed": EAGLE3_SEED}) + "\n"
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted([*SHAPES, EAGLE3_KIND]), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    tokenizer_dir = args.out.parent / ".tiny-tokenizer"
    if not (tokenizer_dir / "tokenizer.json").exists():
        print(f"training tokenizer into {tokenizer_dir}", flush=True)
        build_tokenizer(tokenizer_dir)
    print(f"building {args.kind} into {args.out}", flush=True)
    if args.kind == EAGLE3_KIND:
        build_eagle3(args.out, tokenizer_dir)
    else:
        build_model(args.kind, args.out, tokenizer_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
