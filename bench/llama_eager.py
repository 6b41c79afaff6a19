#!/usr/bin/env python3
"""The PyTorch-eager baseline of bench/side_by_side.sh: the Llama 3 training step a user would
write instead of tenax (nn.Modules, torch.autocast for bf16, torch.optim.AdamW,
clip_grad_norm_), on the same shape, random tokens, two warm-up steps. Prints one line of
key=value pairs in bench_train_step's format. Written for this benchmark, not a reference: the
correctness reference is tests/reference/llama_reference.py.

  llama_eager.py DIM LAYERS HEADS KV_HEADS FFN VOCAB fp32|bf16 [seq] [batch] [steps] [threads]
                 [cpu|cuda] [eager|compile] [PROFILE_TABLE]
  llama_eager.py matmul [threads]     # 2048^3 matmul rates, fp32 and bf16
threads 0 (default): every core for bf16 (as the issue's baseline: autocast, all cores), torch's
default for fp32. On cuda (scripts/gpu-check's baseline) attention is
F.scaled_dot_product_attention(is_causal=True), as a user writes it on a GPU (the explicit
(T, T) scores of the CPU path would not fit at 8K tokens), autocast runs on "cuda", steps are
timed between synchronizations, and peak memory is torch.cuda.max_memory_allocated (printed as
peak_mem_mib; with tokens/s and the achieved model TFLOP/s, 6N + 12 L T d per token).
compile: torchtitan's recipe on one GPU instead of the plain user's: each block compiled by
itself (torch.compile, fullgraph) and AdamW's fused implementation; the first two steps, which
compile, are the warm-up and are not timed (their seconds are printed as compile_s).
PROFILE_TABLE: after the timed steps, two more under torch.profiler; the GPU kernels' time per
step by name and kind written there, in the format of tenax's metrics.profile_step table
(train/profiler.cc, whose KernelKind the kinds below follow), for a side-by-side reading.
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


def kernel_kind(name):
    """train/profiler.cc's KernelKind, for tables that read side by side with tenax's."""
    has = lambda *parts: any(p in name for p in parts)
    if has("flash", "fmha", "attention", "Attention", "cudnn::fusion", "sdpa"):
        return "attention"
    if has("nccl", "NCCL"):
        return "communication"
    if has("gemm", "Gemm", "GEMM", "cutlass", "xmma", "nvjet", "cublas", "wgmma"):
        return "matmul"
    if has("Memcpy", "Memset", "memcpy", "memset"):
        return "memory"
    return "other"


def profile_table(step, sync, steps, path):
    from torch.profiler import ProfilerActivity, profile
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync()
    wall_ms = (time.perf_counter() - t0) * 1e3
    names, kinds = {}, {}
    events = prof.events()
    kernels = [(e.name, e.time_range.elapsed_us()) for e in events
               if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:  # versions that attach kernels to their launching operator only
        kernels = [(k.name, k.duration) for e in events for k in getattr(e, "kernels", [])]
    for name, us in kernels:
        for rows, key in ((names, name), (kinds, kernel_kind(name))):
            r = rows.setdefault(key, [0.0, 0, kernel_kind(name)])
            r[0] += us / 1e3
            r[1] += 1
    busy = sum(r[0] for r in kinds.values())
    out = [f"{steps} step(s), {wall_ms / steps:.1f} ms per step (host clock)",
           f"GPU busy {busy / steps:.1f} ms per step ({100 * busy / wall_ms:.1f}% of the step)", "",
           f"{'kind':<14} {'ms/step':>12} {'share':>8} {'calls/step':>10}"]
    for k, (ms, n, _) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        out.append(f"{k:<14} {ms / steps:>12.2f} {100 * ms / max(busy, 1e-9):>7.1f}% {n / steps:>10.1f}")
    out += ["", f"{'ms/step':>10} {'calls/step':>10} {'kind':<14} name"]
    for name, (ms, n, kind) in sorted(names.items(), key=lambda kv: -kv[1][0])[:40]:
        name = name if len(name) <= 160 else name[:157] + "..."
        out.append(f"{ms / steps:>10.3f} {n / steps:>10.1f} {kind:<14} {name}")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


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
    impl = argv[12] if len(argv) > 12 else "eager"
    table = argv[13] if len(argv) > 13 else None
    if impl not in ("eager", "compile"):
        print(f"unknown implementation {impl!r}: eager or compile", file=sys.stderr)
        return 2
    if threads > 0:
        torch.set_num_threads(threads)
    elif precision == "bf16":
        torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    model = Llama(dim, layers, heads, kv_heads, hidden, vocab, seq).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = {"fused": True} if impl == "compile" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, **fused)
    if impl == "compile":
        for layer in model.layers:
            layer.compile(fullgraph=True)
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
    t_warm = time.perf_counter()
    step()
    step()
    sync()
    warm_s = time.perf_counter() - t_warm
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    dt = (time.perf_counter() - t0) / steps
    if table:
        profile_table(step, sync, 2, table)
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_s = batch * seq / dt
    # Model FLOPs per token: 6 per non-embedding-lookup parameter, plus causal attention's
    # 12 * layers * seq * dim / 2 * 2 (forward and backward of QK^T and PV, half masked).
    flops = 6 * (n_params - vocab * dim) + 6 * layers * seq * dim
    mem = (f"peak_mem_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}" if device == "cuda"
           else f"peak_rss_mib={peak_rss_mib():.0f}")
    print(f"impl={impl} device={device} precision={precision} threads={torch.get_num_threads()} "
          f"params={n_params / 1e6:.2f}M tokens_per_s={tokens_per_s:.0f} "
          f"tflops={tokens_per_s * flops / 1e12:.1f} {mem} loss={loss:.4f} "
          f"{'compile_s' if impl == 'compile' else 'warmup_s'}={warm_s:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
