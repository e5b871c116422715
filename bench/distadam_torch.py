"""PyTorch peer for bench/distadam.sh: the same GPT trained data-parallel on 2
processes with DistributedDataParallel + ZeroRedundancyOptimizer(AdamW) over
Gloo (torch 2.11, scripts/setup.sh's environment), gradient accumulation with no_sync(). Prints
`step_time_s=<median> optimizer_bytes=<per rank>` from rank 0. Spawns both
processes here, or with --rank runs one of them (on two hosts: --master names
rank 0's host; GLOO_SOCKET_IFNAME picks the interface)."""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from gpt_torch import GPT
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, a):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}:{a.port}", world_size=2, rank=rank)
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
                          ("seed", 1234), ("port", 29561), ("rank", -1)]:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--master", default="127.0.0.1")
    args = p.parse_args()
    if args.rank >= 0:
        worker(args.rank, args)
    else:
        mp.spawn(worker, args=(args,), nprocs=2)
