"""PyTorch peer for bench/gpu.sh: one model trained on one GPU in PyTorch,
eager or under torch.compile, with the same micro-batches and AdamW as
Sluice's run. Models:
  gpt  bench/gpt_torch.py's GPT (the layers and module paths of Sluice's
       native GPT; attention written out, as Sluice's graph has it)
  hf   Hugging Face's GPT2LMHeadModel (attn_implementation sdpa), the model
       models/export_hf.py exports for Sluice; needs transformers
bf16 autocast (training.precision: bf16 in Sluice), AdamW (lr 1e-3, weight
decay 0.01), dropout 0, random tokens below --token-max. Prints
`step_time_s=<median after 3 warm-up steps> peak_bytes=<max allocated>
parameters=<count>`."""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def build(a):
    if a.model == "hf":
        from transformers import GPT2Config, GPT2LMHeadModel
        config = GPT2Config(vocab_size=a.vocab, n_positions=a.block, n_embd=a.embd, n_layer=a.layers, n_head=a.heads,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
        model = GPT2LMHeadModel(config)
        model.config._attn_implementation = "sdpa"
        return model, lambda m, x: m(x, use_cache=False, return_dict=False)[0]
    from gpt_torch import GPT
    return GPT(a), lambda m, x: m(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt", "hf"], default="gpt")
    p.add_argument("--compile", action="store_true")
    for name, default in [("layers", 12), ("embd", 768), ("heads", 12), ("block", 1024), ("vocab", 256),
                          ("token-max", 256), ("batch", 8), ("microbatches", 2), ("steps", 12), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    model, forward = build(a)
    model = model.to(dev).train()
    run = torch.compile(forward) if a.compile else forward
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    mb = a.batch // a.microbatches
    times = []
    torch.cuda.reset_peak_memory_stats()
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(a.microbatches):
            tokens = torch.randint(0, a.token_max, (mb, a.block + 1), generator=gen, device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = run(model, tokens[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
            (loss / a.microbatches).backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    params = sum(t.numel() for t in model.parameters())
    print(f"step_time_s={statistics.median(times[3:]):.6f} peak_bytes={torch.cuda.max_memory_allocated()} "
          f"parameters={params}", flush=True)


if __name__ == "__main__":
    main()
