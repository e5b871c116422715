"""PyTorch peer for bench/distadam.sh: the same GPT trained data-parallel on 2
processes with DistributedDataParallel + ZeroRedundancyOptimizer(AdamW) over
Gloo (Debian's python3-torch), gradient accumulation with no_sync(). Prints
`step_time_s=<median> optimizer_bytes=<per rank>` from rank 0."""
import argparse
import math
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, embd, heads, block):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(embd)
        self.c_attn = nn.Linear(embd, 3 * embd)
        self.c_proj = nn.Linear(embd, embd)
        self.ln_2 = nn.LayerNorm(embd)
        self.c_fc = nn.Linear(embd, 4 * embd)
        self.mlp_proj = nn.Linear(4 * embd, embd)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, 2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, -1e9).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.embd)
        self.wpe = nn.Embedding(a.block, a.embd)
        self.h = nn.ModuleList(Block(a.embd, a.heads, a.block) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.embd)
        self.lm_head = nn.Linear(a.embd, a.vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def worker(rank, a):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", world_size=2, rank=rank)
    torch.manual_seed(a.seed)
    model = DDP(GPT(a))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=a.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(a.seed + rank)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        for m in range(a.microbatches):
            tokens = torch.randint(0, a.vocab, (a.micro_batch, a.block + 1), generator=gen)
            x, y = tokens[:, :-1], tokens[:, 1:]
            if m < a.microbatches - 1:
                with model.no_sync():
                    (F.cross_entropy(model(x).reshape(-1, a.vocab), y.reshape(-1)) / a.microbatches).backward()
            else:
                (F.cross_entropy(model(x).reshape(-1, a.vocab), y.reshape(-1)) / a.microbatches).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    state = sum(t.numel() * t.element_size() for s in opt.optim.state.values() for t in s.values()
                if torch.is_tensor(t) and t.dim() > 0)
    if rank == 0:
        print(f"step_time_s={statistics.median(times[3:]):.6f} optimizer_bytes={state}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("embd", 192), ("heads", 6), ("block", 128), ("vocab", 256),
                          ("micro_batch", 4), ("microbatches", 4), ("steps", 15), ("threads", 1),
                          ("seed", 1234), ("port", 29561)]:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-3)
    mp.spawn(worker, args=(p.parse_args(),), nprocs=2)
