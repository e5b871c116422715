"""The quickstart GPT in PyTorch, shared by the PyTorch peers in bench/: the
same layers, sizes and module paths as models/Gpt.cpp (h.0.attn.c_attn,
h.0.mlp.c_proj, ...), so a state_dict saved as safetensors starts Sluice's
native GPT from the same weights (model.weights)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, embd, heads, block):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(embd, 3 * embd)
        self.c_proj = nn.Linear(embd, embd)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, 2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, embd, heads, block):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embd)
        self.attn = CausalSelfAttention(embd, heads, block)
        self.ln_2 = nn.LayerNorm(embd)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(embd, 4 * embd)
        self.mlp.c_proj = nn.Linear(4 * embd, embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.embd)
        self.wpe = nn.Embedding(a.block, a.embd)
        self.h = nn.ModuleList(Block(a.embd, a.heads, a.block) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.embd)
        self.lm_head = nn.Linear(a.embd, a.vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))
