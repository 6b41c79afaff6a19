#!/usr/bin/env python3
"""The PyTorch-eager baseline of bench/side_by_side.sh: the Llama 3 training step a user would
write instead of tenax (nn.Modules, torch.autocast for bf16, torch.optim.AdamW,
clip_grad_norm_), on the same shape, random tokens, two warm-up steps. Prints one line of
key=value pairs in bench_train_step's format. Written for this benchmark, not a reference: the
correctness reference is tests/reference/llama_reference.py.

  llama_eager.py DIM LAYERS HEADS KV_HEADS FFN VOCAB fp32|bf16 [seq] [batch] [steps] [threads]
                 [cpu|cuda]
  llama_eager.py matmul [threads]     # 2048^3 matmul rates, fp32 and bf16
threads 0 (default): every core for bf16 (as the issue's baseline: autocast, all cores), torch's
default for fp32. On cuda (scripts/gpu-check's baseline) attention is
F.scaled_dot_product_attention(is_causal=True), as a user writes it on a GPU (the explicit
(T, T) scores of the CPU path would not fit at 8K tokens), autocast runs on "cuda", steps are
timed between synchronizations, and peak memory is torch.cuda.max_memory_allocated (printed as
peak_mem_mib; with tokens/s and the achieved model TFLOP/s, 6N + 12 L T d per token).
"""
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(head_dim, seq, theta=500000.0):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):  # x (B, T, H, D), interleaved pairs
    b, t, h, d = x.shape
    xf = x.float().reshape(b, t, h, d // 2, 2)
    x0, x1 = xf[..., 0], xf[..., 1]
    c, s = cos[:t].view(1, t, 1, -1), sin[:t].view(1, t, 1, -1)
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.h, self.k, self.d = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.d, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.d, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.d, bias=False)
        self.wo = nn.Linear(heads * self.d, dim, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = apply_rope(self.wq(x).view(b, t, self.h, self.d), cos, sin).transpose(1, 2)
        k = apply_rope(self.wk(x).view(b, t, self.k, self.d), cos, sin).transpose(1, 2)
        v = self.wv(x).view(b, t, self.k, self.d).transpose(1, 2)
        rep = self.h // self.k
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        if q.is_cuda:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(y.transpose(1, 2).reshape(b, t, -1))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        scores = scores.masked_fill(mask[:t, :t], float("-inf"))
        y = F.softmax(scores.float(), dim=-1).type_as(q) @ v
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, heads, kv_heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, dim, layers, heads, kv_heads, hidden, vocab, seq):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        cos, sin = rope_tables(dim // heads, seq)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin, self.mask)
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def matmul_rates(threads):
    torch.set_num_threads(threads or os.cpu_count())
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(2048, 2048).to(dtype)
        b = torch.randn(2048, 2048).to(dtype)
        a @ b
        reps, t0 = 3, time.perf_counter()
        for _ in range(reps):
            a @ b
        dt = (time.perf_counter() - t0) / reps
        out.append(f"{str(dtype).split('.')[-1]}_gflops={2 * 2048 ** 3 / dt / 1e9:.0f}")
    print(f"impl=matmul threads={torch.get_num_threads()} " + " ".join(out))


def main(argv):
    if len(argv) >= 1 and argv[0] == "matmul":
        matmul_rates(int(argv[1]) if len(argv) > 1 else 0)
        return 0
    if len(argv) < 7:
        print(__doc__, file=sys.stderr)
        return 2
    dim, layers, heads, kv_heads, hidden, vocab = (int(a) for a in argv[:6])
    precision = argv[6]
    seq = int(argv[7]) if len(argv) > 7 else 256
    batch = int(argv[8]) if len(argv) > 8 else 8
    steps = int(argv[9]) if len(argv) > 9 else 4
    threads = int(argv[10]) if len(argv) > 10 else 0
    device = argv[11] if len(argv) > 11 else "cpu"
    if threads > 0:
        torch.set_num_threads(threads)
    elif precision == "bf16":
        torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    model = Llama(dim, layers, heads, kv_heads, hidden, vocab, seq).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4)
    tokens = torch.randint(0, vocab, (batch, seq + 1)).to(device)
    x, y = tokens[:, :-1], tokens[:, 1:]
    loss = None

    def step():
        nonlocal loss
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            l = model(x, y)
        l.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = l.item()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    step()
    step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    dt = (time.perf_counter() - t0) / steps
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_s = batch * seq / dt
    # Model FLOPs per token: 6 per non-embedding-lookup parameter, plus causal attention's
    # 12 * layers * seq * dim / 2 * 2 (forward and backward of QK^T and PV, half masked).
    flops = 6 * (n_params - vocab * dim) + 6 * layers * seq * dim
    mem = (f"peak_mem_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}" if device == "cuda"
           else f"peak_rss_mib={peak_rss_mib():.0f}")
    print(f"impl=eager device={device} precision={precision} threads={torch.get_num_threads()} "
          f"params={n_params / 1e6:.2f}M tokens_per_s={tokens_per_s:.0f} "
          f"tflops={tokens_per_s * flops / 1e12:.1f} {mem} loss={loss:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
