#!/usr/bin/env python3
"""Small PyTorch models saved as TorchScript for Sluice.

    python3 models/export_example.py models/example_transformer.pt          # a transformer language model
    python3 models/export_example.py models/example_cnn.pt --model cnn      # a CNN with BatchNorm (28x28 images)

The model is plain PyTorch (nn.Embedding, nn.TransformerEncoderLayer,
nn.Linear); nothing in it knows about Sluice. configs/torchscript_transformer.yaml
trains it. Run with the torch 2.11 environment scripts/setup.sh makes ($SLUICE_PYTHON).
"""
import argparse

import torch
import torch.nn as nn


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, block: int, embd: int, heads: int, layers: int, tie: bool = False):
        super().__init__()
        self.tok = nn.Embedding(vocab, embd)
        self.pos = nn.Parameter(torch.randn(block, embd) * 0.02)
        self.blocks = nn.ModuleList(
            [nn.TransformerEncoderLayer(embd, heads, 4 * embd, dropout=0.0, batch_first=True, norm_first=True)
             for _ in range(layers)])
        self.norm = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab)
        if tie:  # input and output embeddings tied, as in GPT-2 and Llama
            self.head.weight = self.tok.weight
        self.register_buffer("mask", torch.triu(torch.full((block, block), float("-inf")), diagonal=1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x, src_mask=self.mask)
        return self.head(self.norm(x))


class SmallCnn(nn.Module):
    # Convolutions before BatchNorm have no bias: BatchNorm subtracts the mean, so a bias would get only
    # rounding noise as gradient (which Adam would amplify into steps of size lr).
    def __init__(self, channels: int, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1, bias=False), nn.BatchNorm2d(2 * channels), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(2 * channels * 7 * 7, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images).flatten(1))


class WithLoss(nn.Module):
    """The model computing its own loss: forward(inputs, targets) -> mean cross-entropy (model.loss: none)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        out = self.model(inputs)
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))


def main(argv=None):
    """Writes one model: argv as on the command line (None: sys.argv[1:])."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="where to write the TorchScript file")
    p.add_argument("--model", choices=["transformer", "cnn"], default="transformer")
    p.add_argument("--channels", type=int, default=8, help="cnn: channels of the first block (the second has twice)")
    p.add_argument("--with-loss", action="store_true", help="forward(inputs, targets) returns the loss (model.loss: none)")
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--embd", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tie", action="store_true", help="transformer: the head's weight is the token embedding's")
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    if a.model == "cnn":
        model, what = SmallCnn(a.channels), "input images [batch, 1, 28, 28] float32"
    else:
        model, what = TinyTransformer(256, a.block, a.embd, a.heads, a.layers, a.tie), f"input tokens [batch, {a.block}] int64"
    if a.with_loss:
        model, what = WithLoss(model), what + " and targets; returns the mean cross-entropy"
    torch.jit.script(model).save(a.out)
    n = sum(t.numel() for t in model.parameters())
    print(f"wrote {a.out}: {type(model).__name__}, {n} parameters, {what}")


if __name__ == "__main__":
    main()
