#!/usr/bin/env python3
"""A small PyTorch transformer language model, saved as TorchScript for Sluice.

    python3 models/export_example.py models/example_transformer.pt

The model is plain PyTorch (nn.Embedding, nn.TransformerEncoderLayer,
nn.Linear); nothing in it knows about Sluice. configs/torchscript_transformer.yaml
trains it. Run with Debian's python3-torch (scripts/setup.sh installs it).
"""
import argparse

import torch
import torch.nn as nn


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, block: int, embd: int, heads: int, layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, embd)
        self.pos = nn.Parameter(torch.randn(block, embd) * 0.02)
        self.blocks = nn.ModuleList(
            [nn.TransformerEncoderLayer(embd, heads, 4 * embd, dropout=0.0, batch_first=True, norm_first=True)
             for _ in range(layers)])
        self.norm = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab)
        self.register_buffer("mask", torch.triu(torch.full((block, block), float("-inf")), diagonal=1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x, src_mask=self.mask)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="where to write the TorchScript file")
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--embd", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    model = TinyTransformer(256, a.block, a.embd, a.heads, a.layers)
    torch.jit.script(model).save(a.out)
    n = sum(t.numel() for t in model.parameters())
    print(f"wrote {a.out}: TinyTransformer, {n} parameters, input tokens [batch, {a.block}] int64")


if __name__ == "__main__":
    main()
