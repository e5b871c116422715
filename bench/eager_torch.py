"""PyTorch peer for bench/schedules.sh: the quickstart GPT (bench/gpt_torch.py)
trained in plain PyTorch eager mode in one process with --threads intra-op
threads, AdamW, on the same global batch (split into --microbatches
gradient-accumulation steps; 1 = the whole batch at once). Random tokens.
Prints `step_time_s=<median after 3 warm-up steps>`."""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from gpt_torch import GPT


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("embd", 192), ("heads", 6), ("block", 128), ("vocab", 256),
                          ("batch", 16), ("microbatches", 1), ("steps", 20), ("threads", 2), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(a.seed)
    mb = a.batch // a.microbatches
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        for _ in range(a.microbatches):
            tokens = torch.randint(0, a.vocab, (mb, a.block + 1), generator=gen)
            logits = model(tokens[:, :-1])
            (F.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1)) / a.microbatches).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    print(f"step_time_s={statistics.median(times[3:]):.6f}", flush=True)


if __name__ == "__main__":
    main()
