"""PyTorch's own training loop for tests/cli/torchscript.sh (Debian's python3-torch).

    torchscript_reference.py MODEL.pt TEXT SEED STEPS GLOBAL MICRO LR WD BLOCK OUT.json [EXPORTED.pt]

Trains the TorchScript module at MODEL.pt with torch.optim.AdamW on the data
Sluice's text dataset defines (launcher/data/Dataset.h: the window offsets of
step s (windows of BLOCK + 1 bytes) are torch.randint(0, bytes - BLOCK - 1, (GLOBAL,)) from a CPU generator
seeded with SEED * 1000003 + s), in micro-batches of MICRO rows in order, each
micro-batch's mean cross-entropy scaled by 1 / micro-batches, one optimizer
step per global batch. Writes the per-step losses (before each update) and,
with EXPORTED.pt (Sluice's model.pt after the same steps), the largest
difference between its logits and the reference model's on step 0's batch,
the same for the initial file, and the exported model's loss on that batch.
"""
import json
import sys

import torch
import torch.nn.functional as F

path, text, seed, steps, glob, micro, lr, wd, T, out = sys.argv[1:11]
exported = sys.argv[11] if len(sys.argv) > 11 else None
seed, steps, glob, micro, lr, wd, T = int(seed), int(steps), int(glob), int(micro), float(lr), float(wd), int(T)
torch.set_num_threads(1)
model = torch.jit.load(path)
model.train()
data = torch.tensor(list(open(text, "rb").read()), dtype=torch.uint8)


def batch(step):
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    offsets = torch.randint(0, data.numel() - T - 1, (glob,), generator=g, dtype=torch.long)
    idx = offsets.unsqueeze(1) + torch.arange(T + 1).unsqueeze(0)
    w = data.index_select(0, idx.reshape(-1)).reshape(glob, T + 1).long()
    return w[:, :T].contiguous(), w[:, 1:].contiguous()


def loss_of(m, x, y):
    logits = m(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
losses = []
for step in range(steps):
    x, y = batch(step)
    opt.zero_grad()
    n = glob // micro
    total = 0.0
    for i in range(n):
        loss = loss_of(model, x[i * micro:(i + 1) * micro], y[i * micro:(i + 1) * micro])
        (loss / n).backward()
        total += loss.item()
    losses.append(total / n)
    opt.step()
result = {"losses": losses}
if exported:
    x, y = batch(0)
    with torch.no_grad():
        ref = model(x[:micro])
        got = torch.jit.load(exported)
        got.train()
        start = torch.jit.load(path)
        start.train()
        result["exported_vs_reference"] = (got(x[:micro]) - ref).abs().max().item()
        result["initial_vs_reference"] = (start(x[:micro]) - ref).abs().max().item()
        result["exported_loss_step0"] = sum(loss_of(got, x[i * micro:(i + 1) * micro], y[i * micro:(i + 1) * micro]).item()
                                            for i in range(glob // micro)) / (glob // micro)
json.dump(result, open(out, "w"))
