"""PyTorch's own training loop for tests/cli/torchscript.sh and hf.sh (torch 2.11, $SLUICE_PYTHON).

    torchscript_reference.py --model M.pt --data text|fashion_mnist --path P --seed S --steps N
        --global G --micro B --lr LR --wd WD [--block T] [--clip C] [--exported OUT.pt] [--eval-samples E] --out R.json

or, several references in one process (a torch import is 2-4 s), from Python:
`import torchscript_reference as ref; ref.run([...the same arguments...])`.

Trains the TorchScript module at M.pt (with --hf: the Hugging Face model in
directory M, models/export_hf.py) with torch.optim.AdamW on the batches
Sluice's datasets define (data/Dataset.h, FashionMnist.h):
- text: the window offsets of step s are torch.randint(0, bytes - T - 1, (G,))
  from a CPU generator seeded with S * 1000003 + s;
- fashion_mnist: pixels / 255 normalised with (0.2860, 0.3530); global sample
  g = s * G + i is perm_e[g % 60000], perm_e = torch.randperm(60000) from a
  generator seeded with S * 1000003 + 1000000 + e, e = g // 60000;
in micro-batches of B rows in order, each micro-batch's mean cross-entropy
scaled by 1 / (G / B), one optimizer step per global batch; with --clip C,
torch.nn.utils.clip_grad_norm_(parameters, C) before each step (the norms it
returns are written as grad_norms). Writes the per-step losses (before each
update) and, with --exported (Sluice's model.pt
after the same steps): the largest difference between its outputs and the
reference model's on a batch (train mode for text; eval mode for images),
the same for the initial file, the exported model's loss on step 0's batch,
and (images, --eval-samples) the reference model's eval-mode loss and
accuracy on the first E test images.
"""
import argparse
import gzip
import json

import torch
import torch.nn.functional as F


def parse(argv):
    p = argparse.ArgumentParser()
    for name, kind in [("model", str), ("data", str), ("path", str), ("seed", int), ("steps", int), ("global", int),
                       ("micro", int), ("lr", float), ("wd", float), ("out", str)]:
        p.add_argument("--" + name, type=kind, required=True)
    p.add_argument("--block", type=int, default=0)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--exported")
    p.add_argument("--eval-samples", type=int, default=0)
    p.add_argument("--hf", action="store_true",
                   help="--model and --exported are Hugging Face model directories (models/export_hf.py, sluice export)")
    a = p.parse_args(argv)
    a.glob = getattr(a, "global")
    return a


class Logits(torch.nn.Module):
    """A Hugging Face causal LM returning its logits alone, as models/export_hf.py exports it."""

    def __init__(self, directory):
        super().__init__()
        from transformers import AutoModelForCausalLM
        self.m = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="sdpa")

    def forward(self, ids):
        return self.m(input_ids=ids, use_cache=False, return_dict=False)[0]


def idx(path, offset):
    with gzip.open(path) as f:
        return torch.frombuffer(bytearray(f.read()[offset:]), dtype=torch.uint8)


def text_batches(a):
    data = torch.tensor(list(open(a.path, "rb").read()), dtype=torch.uint8)
    T = a.block

    def batch(step):
        g = torch.Generator().manual_seed(a.seed * 1000003 + step)
        offsets = torch.randint(0, data.numel() - T - 1, (a.glob,), generator=g, dtype=torch.long)
        i = offsets.unsqueeze(1) + torch.arange(T + 1).unsqueeze(0)
        w = data.index_select(0, i.reshape(-1)).reshape(a.glob, T + 1).long()
        return w[:, :T].contiguous(), w[:, 1:].contiguous()
    return batch


def image_split(a, name):
    images = idx(f"{a.path}/{name}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    labels = idx(f"{a.path}/{name}-labels-idx1-ubyte.gz", 8).long()
    return (images.float() / 255.0 - 0.2860) / 0.3530, labels


def image_batches(a):
    train_x, train_y = image_split(a, "train")
    n = train_y.numel()

    def batch(step):
        index = []
        for i in range(a.glob):
            g = step * a.glob + i
            e = g // n
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(a.seed * 1000003 + 1000000 + e))
            index.append(int(perm[g % n]))
        index = torch.tensor(index)
        return train_x.index_select(0, index), train_y.index_select(0, index)
    return batch


def loss_of(m, x, y):
    out = m(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def run(argv):
    """One reference: trains, writes --out, and returns what it wrote."""
    a = parse(argv)
    torch.set_num_threads(1)
    load = (lambda path: Logits(path)) if a.hf else torch.jit.load
    model = load(a.model)
    model.train()
    batch = text_batches(a) if a.data == "text" else image_batches(a)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.wd)
    losses, norms = [], []
    n_micro = a.glob // a.micro
    for step in range(a.steps):
        x, y = batch(step)
        opt.zero_grad()
        total = 0.0
        for i in range(n_micro):
            loss = loss_of(model, x[i * a.micro:(i + 1) * a.micro], y[i * a.micro:(i + 1) * a.micro])
            (loss / n_micro).backward()
            total += loss.item()
        losses.append(total / n_micro)
        if a.clip > 0:
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip).item())
        opt.step()
    result = {"losses": losses, "grad_norms": norms}
    if a.exported:
        compare_exported(a, model, load, batch, n_micro, result)
    json.dump(result, open(a.out, "w"))
    return result


def compare_exported(a, model, load, batch, n_micro, result):
    images = a.data != "text"
    x, y = batch(0)
    got, start = load(a.exported), load(a.model)
    for m in (model, got, start):
        m.train(not images)
    with torch.no_grad():
        ref = model(x[:a.micro])
        result["exported_vs_reference"] = (got(x[:a.micro]) - ref).abs().max().item()
        result["initial_vs_reference"] = (start(x[:a.micro]) - ref).abs().max().item()
        got.train()
        result["exported_loss_step0"] = sum(loss_of(got, x[i * a.micro:(i + 1) * a.micro], y[i * a.micro:(i + 1) * a.micro]).item()
                                            for i in range(n_micro)) / n_micro
        if images and a.eval_samples:
            test_x, test_y = image_split(a, "t10k")
            model.eval()
            total, correct = 0.0, 0
            for i in range(0, a.eval_samples // a.micro * a.micro, a.micro):
                out = model(test_x[i:i + a.micro])
                total += F.cross_entropy(out, test_y[i:i + a.micro]).item() * a.micro
                correct += int((out.argmax(-1) == test_y[i:i + a.micro]).sum())
            count = a.eval_samples // a.micro * a.micro
            result["eval_loss"], result["eval_accuracy"] = total / count, correct / count


if __name__ == "__main__":
    import sys
    run(sys.argv[1:])
