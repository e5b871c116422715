#!/usr/bin/env python3
"""A Hugging Face causal language model as a torch.export program for Sluice.

    python models/export_hf.py OUT_DIR --arch gpt2 --vocab 256 --block 32 --embd 32 --layers 2 --heads 4 --batch 2
    python models/export_hf.py OUT_DIR --arch llama --kv-heads 2 --tie ...   (gpt2: --no-tie unties)
    python models/export_hf.py OUT_DIR --config my/config.json [--weights my/model.safetensors] --block 256 --batch 8

Builds the model from a config (nothing is downloaded): GPT2LMHeadModel or
LlamaForCausalLM from the flags, or any AutoModelForCausalLM from --config;
random initial weights from --seed, or the user's --weights (safetensors).
Writes to OUT_DIR:
- model.pt2: torch.export.export(model, (ids,), kwargs use_cache=False,
  return_dict=False) in training mode, saved with torch.export.save. Shapes
  are static: ids is --batch rows (Sluice's training.micro_batch_size) of
  --block tokens; the program returns the logits alone. Sluice reads it with
  model.name: exported, model.path: OUT_DIR/model.pt2.
- config.json and model.safetensors (save_pretrained): the initial model, so
  PyTorch can start from the same weights, and `sluice export --format
  safetensors -o DIR` copies config.json next to the trained weights for
  AutoModelForCausalLM.from_pretrained(DIR).
Run with the torch environment scripts/setup.sh makes ($SLUICE_PYTHON).
"""
import argparse
import os

import torch


def build(a):
    from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, LlamaConfig
    if a.config:
        config = AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(a.config)))
    elif a.arch == "gpt2":
        config = GPT2Config(vocab_size=a.vocab, n_positions=a.block, n_embd=a.embd, n_layer=a.layers, n_head=a.heads,
                            resid_pdrop=a.dropout, embd_pdrop=a.dropout, attn_pdrop=a.dropout,
                            tie_word_embeddings=a.tie is not False, bos_token_id=0, eos_token_id=0)
    else:
        config = LlamaConfig(vocab_size=a.vocab, hidden_size=a.embd, intermediate_size=a.ffn or 4 * a.embd,
                             num_hidden_layers=a.layers, num_attention_heads=a.heads,
                             num_key_value_heads=a.kv_heads or a.heads, max_position_embeddings=a.block,
                             attention_dropout=a.dropout, tie_word_embeddings=bool(a.tie), bos_token_id=0, eos_token_id=0)
    config.use_cache = False
    torch.manual_seed(a.seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    if a.weights:
        from safetensors.torch import load_file
        missing, unexpected = model.load_state_dict(load_file(a.weights), strict=False)
        tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise SystemExit(f"export_hf.py: --weights {a.weights} does not match the model: missing "
                             f"{sorted(set(missing) - tied)}, unexpected {sorted(unexpected)}")
    return model


def main(argv=None):
    """Exports one model: argv as on the command line (None: sys.argv[1:])."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--config", help="a Hugging Face config.json (instead of --arch and the sizes)")
    p.add_argument("--weights", help="a safetensors file with the model's initial weights")
    for name, default in [("vocab", 256), ("block", 64), ("embd", 64), ("layers", 2), ("heads", 4), ("kv-heads", 0),
                          ("ffn", 0), ("batch", 2), ("seed", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--tie", action=argparse.BooleanOptionalAction, default=None,
                   help="tie the output projection to the token embedding (default: gpt2 tied, llama not)")
    a = p.parse_args(argv)
    model = build(a)
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.block))
    program = torch.export.export(model, (ids,), kwargs={"use_cache": False, "return_dict": False})
    os.makedirs(a.out, exist_ok=True)
    torch.export.save(program, os.path.join(a.out, "model.pt2"))
    model.save_pretrained(a.out)
    params = sum(t.numel() for t in model.parameters())
    print(f"wrote {a.out}/model.pt2 ({type(model).__name__}, {params} parameters, input [{a.batch}, {a.block}]), "
          f"config.json and model.safetensors")


if __name__ == "__main__":
    main()
