"""The peer for bench/peers.sh: the quickstart GPT (bench/gpt_torch.py) trained
by torch.distributed.pipelining on --ranks processes x 1 thread (gloo), under
one of its schedules, on the batches Sluice's text dataset defines.

    peers_torch.py init --weights W.safetensors [--seed S]
        writes the GPT's initial state_dict (module paths as models/Gpt.cpp) for both sides;
    peers_torch.py train --schedule NAME --weights W.safetensors --text FILE --steps N [--microbatches M]
        [--precision fp32|bf16] [--seed S] [--lr LR] [--wd WD]
        [--ranks P] [--nodes K --node-rank N --master HOST [--port PORT]]
        prints `step_time_s=<median after 3 warm-up steps>` and `losses=<per-step losses, comma-separated>`
        (rank 0's process); with --nodes, run it once per host, each spawning P / K ranks.

Schedules (the placement of the layer-balanced stages in brackets, p = ranks):
gpipe, 1f1b (p stages, one per rank); interleaved = Interleaved1F1B,
interleaved-zb = InterleavedZeroBubble (2p stages, rank r holds r and r + p);
zbv = ZBVZeroBubble, dualpipev = DualPipeV (2p stages in a V: rank r holds r
and 2p - 1 - r). Stage 0 also holds the embeddings, the last stage ln_f and
lm_head. The data: global batch G of windows of T + 1 bytes at offsets
torch.randint(0, bytes - T - 1, (G,)) from a generator seeded with
S * 1000003 + step (data/Dataset.h), split into M micro-batches of
G / M rows in order; each micro-batch's mean cross-entropy, gradients scaled
by 1 / M (the schedules' scale_grads), one AdamW step per global batch.
bf16: each stage's forward under CPU autocast (bfloat16 matrix products;
float32 weights, boundaries, gradients, optimizer state and loss).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from gpt_torch import GPT
from safetensors.torch import load_file, save_file
from torch.distributed import pipelining as pp

SCHEDULES = {  # name -> (schedule class, stages per rank, placement)
    "gpipe": (pp.ScheduleGPipe, 1, "loop"),
    "1f1b": (pp.Schedule1F1B, 1, "loop"),
    "interleaved": (pp.ScheduleInterleaved1F1B, 2, "loop"),
    "interleaved-zb": (pp.ScheduleInterleavedZeroBubble, 2, "loop"),
    "zbv": (pp.ScheduleZBVZeroBubble, 2, "v"),
    "dualpipev": (pp.ScheduleDualPipeV, 2, "v"),
}


class Stage(nn.Module):
    """Layers [first, last) of the GPT, with the embeddings on stage 0 and the head on the last."""

    def __init__(self, gpt, first, last, is_first, is_last, autocast):
        super().__init__()
        self.embed = nn.ModuleDict(dict(wte=gpt.wte, wpe=gpt.wpe)) if is_first else None
        self.blocks = nn.ModuleList(gpt.h[first:last])
        self.head = nn.ModuleList([gpt.ln_f, gpt.lm_head]) if is_last else None
        self.autocast = autocast

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            if self.embed is not None:
                x = self.embed.wte(x) + self.embed.wpe(torch.arange(x.shape[1]))
            for b in self.blocks:
                x = b(x)
            if self.head is not None:
                x = self.head[1](self.head[0](x))
        return x


def batches(a):
    data = torch.frombuffer(bytearray(open(a.text, "rb").read()), dtype=torch.uint8)
    T = a.block
    for step in range(a.steps):
        g = torch.Generator().manual_seed(a.seed * 1000003 + step)
        offsets = torch.randint(0, data.numel() - T - 1, (a.batch,), generator=g, dtype=torch.long)
        w = data.index_select(0, (offsets.unsqueeze(1) + torch.arange(T + 1)).reshape(-1)).reshape(a.batch, T + 1).long()
        yield w[:, :T].contiguous(), w[:, 1:].contiguous()


def skip_self_p2p():
    """The V schedules place stages p - 1 and p on one rank, and PipelineStage's
    first-step handshake sends a tensor from each stage to its neighbours' ranks,
    to itself there; gloo has no send to self ("Pair is not connected"). The
    handshake only warms up connections, and activations between stages on one
    rank are passed locally, so the peer leaves the self-sends out."""
    original = pp.stage._PipelineStageBase._get_init_p2p_neighbors_ops

    def ops(self):
        return [op for op in original(self) if op.group_peer != self.group_rank]

    pp.stage._PipelineStageBase._get_init_p2p_neighbors_ops = ops


def worker(local, a, store):
    torch.set_num_threads(1)
    skip_self_p2p()
    rank = a.node_rank * (a.ranks // a.nodes) + local
    init = f"tcp://{a.master}:{a.port}" if a.master else "file://" + store
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=a.ranks)
    kind, per_rank, placement = SCHEDULES[a.schedule]
    p = a.ranks
    n_stages = p * per_rank
    if placement == "loop":
        mine = [rank + c * p for c in range(per_rank)]
    else:
        mine = [rank, 2 * p - 1 - rank]
    gpt = GPT(a)
    gpt.load_state_dict(load_file(a.weights))
    per_stage = a.layers // n_stages
    stages = []
    for s in mine:
        module = Stage(gpt, s * per_stage, (s + 1) * per_stage, s == 0, s == n_stages - 1, a.precision == "bf16")
        stages.append(pp.PipelineStage(module, s, n_stages, torch.device("cpu")))
    params = [q for st in stages for q in st.submod.parameters()]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.wd)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.float().reshape(-1, a.vocab), target.reshape(-1))

    schedule = kind(stages[0] if per_rank == 1 else stages, n_microbatches=a.microbatches, loss_fn=loss_fn)
    has_first, has_last = 0 in mine, n_stages - 1 in mine
    times, losses = [], []
    for x, y in batches(a):
        mb_losses = []
        t0 = time.perf_counter()
        opt.zero_grad()
        args = (x,) if has_first else ()
        schedule.step(*args, target=y if has_last else None, losses=mb_losses if has_last else None)
        opt.step()
        times.append(time.perf_counter() - t0)
        if has_last:
            losses.append(float(torch.stack([m.detach().float() for m in mb_losses]).mean()))
    # The step time of a step: the slowest rank's; the losses: the last stage's rank's.
    all_times = [None] * p
    all_losses = [None] * p
    dist.all_gather_object(all_times, times)
    dist.all_gather_object(all_losses, losses)
    if rank == 0:
        step = [max(ts) for ts in zip(*all_times)]
        loss = next(ls for ls in all_losses if ls)
        print(f"step_time_s={statistics.median(step[3:]):.6f}")
        print("losses=" + ",".join(f"{v:.9g}" for v in loss), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["init", "train"])
    p.add_argument("--weights", required=True)
    p.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    p.add_argument("--text")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--wd", type=float, default=0.01)
    # Several hosts: this process spawns ranks / nodes ranks, global ranks from node_rank x that.
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master", help="host of rank 0 (required with --nodes > 1)")
    p.add_argument("--port", type=int, default=29571)
    for name, default in [("layers", 4), ("embd", 192), ("heads", 6), ("block", 128), ("vocab", 256),
                          ("batch", 16), ("microbatches", 4), ("steps", 15), ("ranks", 2), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    if a.command == "init":
        torch.manual_seed(a.seed)
        save_file({k: v.contiguous() for k, v in GPT(a).state_dict().items()}, a.weights)
        return
    if not a.text:
        p.error("train needs --text")
    if a.steps < 4:
        p.error("--steps must be at least 4 (3 warm-up steps)")
    per_rank = SCHEDULES[a.schedule][1]
    if a.layers % (a.ranks * per_rank):
        p.error(f"--layers {a.layers} does not split evenly into {a.ranks * per_rank} stages")
    if a.nodes > 1 and (not a.master or a.ranks % a.nodes):
        p.error("--nodes > 1 needs --master and --ranks a multiple of --nodes")
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(a, os.path.join(d, "store")), nprocs=a.ranks // a.nodes)


if __name__ == "__main__":
    sys.exit(main())
