#!/usr/bin/env python3
"""Component measurements of one NVIDIA GPU for the planner's hardware profiles
(configs/hardware/*.toml, docs/planner.md "Calibration"): the pieces `tenax plan` adds up, each
timed alone, and one eager Llama layer timed whole so that the sum can be checked against it.

  gpu_components.py [--out FILE.json] [--seconds-sustained 30] [--smoke]

What it measures (bf16 unless said; CUDA events; the median of timed repetitions after warm-up):
  gemm       torch.matmul on the planner's calibration shapes and on the forward, input-gradient
             and weight-gradient GEMMs of Llama 3 8B / 70B and GPT-3 175B layers cut by tensor
             parallelism, with the operand layouts nn.Linear uses (x W^T, dY W, dY^T X).
  sustained  one 8192^3 GEMM back to back for --seconds-sustained: TFLOP/s in the first second
             against the last third (the clock held at the power limit), with nvidia-smi's SM
             clock and power beside it.
  attention  scaled_dot_product_attention, causal, head dim 128, 16 heads, 16K tokens per call
             (FlashAttention-2's benchmark shape), forward and backward, per backend (flash,
             cuDNN), TFLOP/s in the FlashAttention papers' FLOP convention.
  stream     the eager elementwise ops of a Llama layer (torchtitan's modules: fp32 RMSNorm, complex
             rotary, repeat_kv, SwiGLU, residual add) forward and backward, and a device copy:
             seconds and bytes per element as the planner counts them (plan/cost_model.cc).
  layer      a whole eager Llama 3 layer (torchtitan's formulation, bf16 weights) forward and
             backward at sequence 8192, batch 1 and 2, for 8B and 70B widths: seconds per layer,
             from a stack of layers so that launch gaps between layers count; the same 8B layer
             compiled (torch.compile), batch 1, when time allows.

Written for the planner's calibration; not a training benchmark. No number here comes from an
end-to-end training run. Runs on the CPU with --smoke (tiny shapes) to check the script itself.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from llama_eager import RMSNorm  # torchtitan's fp32 RMSNorm, as the CPU baseline writes it

START = time.time()


def log(*a):
    print(f"[{time.time() - START:6.1f}s]", *a, flush=True)


class Timer:
    """Median seconds of fn() over repetitions, CUDA events on the GPU, perf_counter on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def chain(self, fn, reps=50, warmup=3):
        """Seconds per call of `reps` calls launched back to back between two events: the
        kernel's own time, without the gap a single launch from Python leaves before it."""
        for _ in range(warmup):
            fn()
        if not self.cuda:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - t) / reps
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3 / reps

    def __call__(self, fn, warmup=3, reps=None, target_s=0.05, max_reps=200):
        for _ in range(warmup):
            fn()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        once = max(time.perf_counter() - t0, 1e-6)
        if reps is None:
            reps = int(min(max_reps, max(3, target_s / once)))
        times = []
        for _ in range(reps):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            else:
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
        return statistics.median(times)


def nvidia_smi(query):
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()
    except Exception as e:  # no nvidia-smi (CPU smoke run)
        return f"unavailable: {e}"


# ---------------------------------------------------------------------------------------------
# GEMMs

CALIBRATION_SHAPES = [  # (batch, M, N, K): the profile's [calibration] gemm_bf16 shapes
    (1, 2048, 2048, 13312), (1, 6144, 17920, 2816), (1, 1024, 2048, 256), (2, 256, 2048, 2048),
    (1, 256, 2048, 256), (1, 4096, 512, 512), (4, 4096, 256, 2048), (1, 512, 256, 512),
    (2, 1024, 2048, 1024), (1, 256, 2048, 4096), (4, 1024, 2048, 2048), (1, 4096, 1024, 512),
    (1, 2048, 2048, 2048), (1, 4096, 4096, 256), (2, 2048, 4096, 1024), (2, 4096, 4096, 2048),
    (1, 2048, 512, 2048), (1, 4096, 4096, 4096), (1, 512, 4096, 1024), (1, 4096, 2048, 512),
    (2, 4096, 1024, 4096), (1, 512, 512, 512), (1, 1024, 1024, 2048), (1, 1024, 2048, 2048),
    (1, 2048, 4096, 2048), (1, 1024, 4096, 2048), (1, 2048, 1024, 4096), (1, 512, 4096, 4096),
    (1, 1024, 1024, 4096), (2, 2048, 4096, 4096), (1, 4096, 4096, 1024), (1, 1024, 512, 4096),
    (1, 1024, 1024, 256), (4, 2048, 2048, 4096), (2, 1024, 1024, 1024), (1, 8192, 8192, 8192),
]

# Layer widths (h, q = H d, kv = n_kv d, f) of the validation set's models.
LAYER_WIDTHS = {
    "llama3-8b": (4096, 4096, 1024, 14336),
    "llama3-70b": (8192, 8192, 1024, 28672),
    "gpt3-175b": (12288, 12288, 12288, 49152),
}


def linear_gemms(name, tokens, tp):
    """The projections of one layer on one tensor-parallel rank: (label, in, out)."""
    h, q, kv, f = LAYER_WIDTHS[name]
    kvt = max(kv // tp, 128)
    if name.startswith("gpt"):
        return [("qkv", h, (q + 2 * kv) // tp), ("wo", q // tp, h), ("fc1", h, f // tp), ("fc2", f // tp, h)]
    return [("wq", h, q // tp), ("wk", h, kvt), ("wo", q // tp, h), ("w1", h, f // tp), ("w2", f // tp, h)]


def run_gemms(dev, timer, smoke):
    rows = []
    shapes = CALIBRATION_SHAPES if not smoke else [(1, 64, 64, 64), (2, 32, 64, 128)]
    dt = torch.bfloat16
    for (b, m, n, k) in shapes:
        a = torch.randn(b, m, k, device=dev, dtype=dt)
        w = torch.randn(b, k, n, device=dev, dtype=dt)
        sec = timer(lambda: torch.matmul(a, w))
        once = timer.chain(lambda: torch.matmul(a, w), reps=1, warmup=0)
        reps = int(min(200, max(5, 0.03 / max(once, 1e-6))))
        chained = statistics.median(timer.chain(lambda: torch.matmul(a, w), reps=reps) for _ in range(3))
        rows.append({"kind": "plain", "batch": b, "m": m, "n": n, "k": k, "s": sec,
                     "tflops": 2 * b * m * n * k / sec / 1e12, "chained_s": chained,
                     "chained_tflops": 2 * b * m * n * k / chained / 1e12})
        del a, w
    # nn.Linear's three GEMMs per projection: forward x W^T (NT), input gradient dY W (NN), weight
    # gradient dY^T X (TN).
    cases = [] if smoke else [
        ("llama3-8b", 8192, 1), ("llama3-8b", 16384, 1), ("llama3-8b", 8192, 8),
        ("llama3-70b", 8192, 1), ("llama3-70b", 8192, 4), ("llama3-70b", 8192, 8),
        ("llama3-70b", 16384, 8), ("gpt3-175b", 2048, 8),
    ]
    if smoke:
        LAYER_WIDTHS["tiny"] = (64, 64, 32, 128)
        cases = [("tiny", 32, 1)]
    for name, tokens, tp in cases:
        for label, fin, fout in linear_gemms(name, tokens, tp):
            x = torch.randn(tokens, fin, device=dev, dtype=dt)
            W = torch.randn(fout, fin, device=dev, dtype=dt)
            dy = torch.randn(tokens, fout, device=dev, dtype=dt)
            for which, fn, (m, n, k) in (
                ("fwd", lambda: torch.matmul(x, W.t()), (tokens, fout, fin)),
                ("dgrad", lambda: torch.matmul(dy, W), (tokens, fin, fout)),
                ("wgrad", lambda: torch.matmul(dy.t(), x), (fout, fin, tokens)),
            ):
                sec = timer(fn)
                rows.append({"kind": which, "model": name, "tokens": tokens, "tp": tp, "proj": label,
                             "batch": 1, "m": m, "n": n, "k": k, "s": sec,
                             "tflops": 2 * m * n * k / sec / 1e12})
            del x, W, dy
    return rows


def run_burst(dev, timer, smoke):
    """The same 8192^3 GEMM timed one product at a time from a cool, idle GPU: the first products
    run at the boost clock (kernel benchmarks' burst), before the power limit pulls the clock down."""
    n = 8192 if not smoke else 256
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    torch.matmul(a, b, out=c)  # cuBLAS handle and kernel choice
    timer.sync()
    times = [timer.chain(lambda: torch.matmul(a, b, out=c), reps=1, warmup=0) for _ in range(12)]
    return {"n": n, "tflops": [2.0 * n ** 3 / t / 1e12 for t in times]}


def run_sustained(dev, seconds, smoke):
    """One large GEMM back to back: throughput per second of wall time, and the clock and power."""
    n = 8192 if not smoke else 256
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    flops = 2.0 * n ** 3
    samples, smi = [], []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            smi.append((time.time(), nvidia_smi("clocks.sm,power.draw,temperature.gpu")))
            stop.wait(1.0)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    t_end = time.time() + seconds
    cuda = dev.type == "cuda"
    while time.time() < t_end:
        t0 = time.perf_counter()
        count = 0
        while time.perf_counter() - t0 < 0.5:
            for _ in range(20 if not smoke else 1):
                torch.matmul(a, b, out=c)
                count += 1
            if cuda:
                torch.cuda.synchronize()
        samples.append((time.time() - (t_end - seconds), count * flops / (time.perf_counter() - t0) / 1e12))
    stop.set()
    th.join()
    first = [s for t, s in samples if t <= 1.0] or [samples[0][1]]
    last = [s for t, s in samples if t >= seconds * 2 / 3] or [samples[-1][1]]
    return {"n": n, "seconds": seconds, "samples": samples, "smi": smi,
            "first_s_tflops": statistics.mean(first), "last_third_tflops": statistics.mean(last),
            "ratio": statistics.mean(last) / statistics.mean(first)}


# ---------------------------------------------------------------------------------------------
# Attention

def run_attention(dev, timer, smoke):
    rows = []
    if not hasattr(F, "scaled_dot_product_attention"):
        return [{"skipped": "torch has no scaled_dot_product_attention"}]
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    if smoke:
        backends = {"math": SDPBackend.MATH}
    d, heads, total = 128, 16, 16384
    seqs = [512, 1024, 2048, 4096, 8192, 16384] if not smoke else [64]
    for name, be in backends.items():
        for s in seqs:
            b = max(1, total // s) if not smoke else 1
            q = torch.randn(b, heads, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn_like(q, requires_grad=True)
            v = torch.randn_like(q, requires_grad=True)
            fwd_flops = 4.0 * b * s * s * d * heads / 2  # causal
            try:
                with sdpa_kernel([be]):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    g = torch.randn_like(out)
                    t_fwd = timer(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))

                    def fb():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        o.backward(g)

                    t_fb = timer(fb)
                t_bwd = t_fb - t_fwd
                rows.append({"backend": name, "seq": s, "batch": b, "heads": heads, "d": d,
                             "fwd_s": t_fwd, "bwd_s": t_bwd, "fwd_tflops": fwd_flops / t_fwd / 1e12,
                             "bwd_tflops": 2.5 * fwd_flops / t_bwd / 1e12,
                             "fwd_bwd_tflops": 3.5 * fwd_flops / t_fb / 1e12})
            except Exception as e:  # a backend this build or GPU lacks
                rows.append({"backend": name, "seq": s, "error": str(e).splitlines()[0][:200]})
            del q, k, v
    return rows


# ---------------------------------------------------------------------------------------------
# torchtitan's Llama 3 layer (its formulation, written here for the measurement)

def rope_freqs(d, s, dev, theta=500000.0):
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d)
    ang = torch.outer(torch.arange(s, device=dev, dtype=torch.float32), inv)
    return torch.polar(torch.ones_like(ang), ang)  # complex64 (S, d/2)


def apply_rotary(xq, xk, freqs):  # (B, S, H, d), complex multiplication as torchtitan does
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs.view(1, xq.shape[1], 1, -1)
    return (torch.view_as_real(xq_ * f).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * f).flatten(3).type_as(xk))


def repeat_kv(x, n):
    if n == 1:
        return x
    b, s, kvh, d = x.shape
    return x[:, :, :, None, :].expand(b, s, kvh, n, d).reshape(b, s, kvh * n, d)


class Block(nn.Module):
    def __init__(self, h, heads, kv_heads, f):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, h // heads
        self.wq = nn.Linear(h, heads * self.d, bias=False)
        self.wk = nn.Linear(h, kv_heads * self.d, bias=False)
        self.wv = nn.Linear(h, kv_heads * self.d, bias=False)
        self.wo = nn.Linear(heads * self.d, h, bias=False)
        self.w1 = nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)
        self.w3 = nn.Linear(h, f, bias=False)
        self.attention_norm = RMSNorm(h)
        self.ffn_norm = RMSNorm(h)

    def forward(self, x, freqs):
        b, s, _ = x.shape
        y = self.attention_norm(x)
        xq = self.wq(y).view(b, s, self.heads, self.d)
        xk = self.wk(y).view(b, s, self.kv_heads, self.d)
        xv = self.wv(y).view(b, s, self.kv_heads, self.d)
        xq, xk = apply_rotary(xq, xk, freqs)
        rep = self.heads // self.kv_heads
        keys, values = repeat_kv(xk, rep), repeat_kv(xv, rep)
        q, k, v = (t.transpose(1, 2) for t in (xq, keys, values))
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the CPU smoke run on an old torch
            sc = (q @ k.transpose(-1, -2)) / math.sqrt(self.d)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            o = sc.masked_fill(mask, float("-inf")).softmax(-1) @ v
        o = o.transpose(1, 2).contiguous().view(b, s, -1)
        h = x + self.wo(o)
        z = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(z)) * self.w3(z))


class GptBlock(nn.Module):
    """Megatron-LM's GPT layer of 2021 written with eager PyTorch ops: LayerNorm, biases, fused QKV
    projection, scores materialized (scale, causal mask, softmax, dropout on the probabilities),
    GELU MLP, dropout on both residual branches."""

    def __init__(self, h, heads, f, p=0.1):
        super().__init__()
        self.heads, self.d, self.p = heads, h // heads, p
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, f), nn.Linear(f, h)

    def forward(self, x, mask):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, self.d).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.d))
        probs = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), self.p, True)
        o = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(o), self.p, True)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, True)


LAYER_SHAPES = {  # h, heads, kv_heads, f
    "llama3-8b": (4096, 32, 8, 14336),
    "llama3-70b": (8192, 64, 8, 28672),
    "gpt-1.7b": (2304, 24, 24, 9216),  # Megatron-LM 2021's 1.7B: 24 layers, seq 2048
    "tiny": (64, 4, 2, 128),
    "gpt-tiny": (64, 4, 4, 256),
}


def make_stack(name, depth, s, b, dev, dt):
    """`depth` layers of `name`, an input and an output gradient, and the per-call argument."""
    h, heads, kvh, f = LAYER_SHAPES[name]
    if name.startswith("gpt"):
        layers = nn.ModuleList([GptBlock(h, heads, f) for _ in range(depth)]).to(dev, dt)
        extra = torch.ones(s, s, dtype=torch.bool, device=dev).triu(1)
    else:
        layers = nn.ModuleList([Block(h, heads, kvh, f) for _ in range(depth)]).to(dev, dt)
        extra = rope_freqs(h // heads, s, dev)
    x = torch.randn(b, s, h, device=dev, dtype=dt, requires_grad=True)
    g = torch.randn(b, s, h, device=dev, dtype=dt)
    return layers, extra, x, g


def hold(step, seconds):
    """Runs `step` for `seconds` (at least once): training's steady state, the clock held at the
    power limit, before anything is timed."""
    t_end = time.time() + seconds
    step()
    while time.time() < t_end:
        step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def stack_step(layers, extra, x, g, ac="none"):
    """Forward and backward through the stack; ac = "full" recomputes each layer's forward in
    backward (torch.utils.checkpoint)."""
    y = x
    for layer in layers:
        if ac == "full":
            y = torch.utils.checkpoint.checkpoint(layer, y, extra, use_reentrant=False)
        else:
            y = layer(y, extra)
    y.backward(g)


def run_layers(dev, timer, smoke, compile_ok, warm_s=0.0):
    rows = []
    dt = torch.bfloat16
    cases = [("llama3-8b", 8192, 1, 4), ("llama3-8b", 8192, 2, 4), ("llama3-70b", 8192, 1, 2)]
    if smoke:
        cases = [("tiny", 32, 1, 2)]
    for name, s, b, depth in cases:
        layers, freqs, x, g = make_stack(name, depth, s, b, dev, dt)
        step = lambda: stack_step(layers, freqs, x, g)  # noqa: E731

        def fwd():
            with torch.no_grad():
                y = x
                for layer in layers:
                    y = layer(y, freqs)

        hold(step, warm_s)
        sec = timer(step, warmup=2, target_s=1.0, max_reps=10)
        sec_fwd = timer(fwd, warmup=1, target_s=0.5, max_reps=10)
        rows.append({"model": name, "seq": s, "batch": b, "layers": depth, "compiled": False, "warm_s": warm_s,
                     "s_per_layer": sec / depth, "fwd_s_per_layer": sec_fwd / depth})
        log(f"layer {name} S={s} b={b}: {sec / depth * 1e3:.2f} ms fwd+bwd per layer "
            f"(fwd {sec_fwd / depth * 1e3:.2f})")
        if name == "llama3-8b" and b == 1 and not smoke and hasattr(torch, "compile") and compile_ok:
            # One compiled layer applied `depth` times (one compilation, forward and backward).
            try:
                compiled = torch.compile(layers[0])
                cstep = lambda: stack_step([compiled] * depth, freqs, x, g)  # noqa: E731
                sec_c = timer(cstep, warmup=3, target_s=1.0, max_reps=10)
                rows.append({"model": name, "seq": s, "batch": b, "layers": depth, "compiled": True,
                             "s_per_layer": sec_c / depth})
                log(f"layer {name} S={s} b={b} compiled: {sec_c / depth * 1e3:.2f} ms per layer")
            except Exception as e:
                rows.append({"model": name, "compiled": True, "error": str(e).splitlines()[0][:300]})
        del layers, x, g
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def run_layers_more(dev, timer, smoke, warm_s):
    """Recomputation and Megatron-style GPT layers, each timed at the held clock: the eager 8B
    layer with full recomputation, and GPT 1.7B's layer (scores materialized, dropout 0.1) without
    and with it."""
    rows = []
    cases = [("llama3-8b", 8192, 1, 4, "full"), ("gpt-1.7b", 2048, 8, 4, "none"),
             ("gpt-1.7b", 2048, 8, 4, "full")]
    if smoke:
        cases = [("tiny", 32, 1, 2, "full"), ("gpt-tiny", 32, 2, 2, "none"), ("gpt-tiny", 32, 2, 2, "full")]
    for name, s, b, depth, ac in cases:
        layers, extra, x, g = make_stack(name, depth, s, b, dev, torch.bfloat16)
        step = lambda: stack_step(layers, extra, x, g, ac)  # noqa: E731
        hold(step, warm_s)
        sec = timer(step, warmup=2, target_s=1.0, max_reps=10)
        rows.append({"model": name, "seq": s, "batch": b, "layers": depth, "ac": ac,
                     "warm_s": warm_s, "s_per_layer": sec / depth})
        log(f"layer {name} S={s} b={b} ac={ac}: {sec / depth * 1e3:.2f} ms fwd+bwd per layer")
        del layers, x, g, extra
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def kernel_kind(name):
    n = name.lower()
    if any(k in n for k in ("flash", "fmha", "attention", "cudnn")):  # cuDNN SDPA's helpers too
        return "attention"
    if any(k in n for k in ("gemm", "xmma", "cutlass", "nvjet", "cublas", "sm90_", "wgmma")):
        return "matmul"
    return "elementwise"


def run_profile(dev, smoke, warm_s, only=""):
    """The eager layers under torch.profiler after `warm_s` of the same work: the GPU time of
    every kernel in place (the sum of parts as the layer runs them, L2 and clock included), by
    kind (matmul, attention, the rest) and the top kernels."""
    from torch.profiler import ProfilerActivity, profile
    rows = []
    dt = torch.bfloat16
    cases = [("llama3-8b", 8192, 1, 4), ("llama3-70b", 8192, 1, 2), ("gpt-1.7b", 2048, 8, 4)]
    if smoke:
        cases = [("tiny", 32, 1, 2), ("gpt-tiny", 32, 2, 2)]
    if only:
        cases = [c for c in cases if c[0] in only.split(",")]
    for name, s, b, depth in cases:
        layers, extra, x, g = make_stack(name, depth, s, b, dev, dt)
        step = lambda: stack_step(layers, extra, x, g)  # noqa: E731
        hold(step, warm_s)
        steps = 3
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            for _ in range(steps):
                step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
        by_kind, kernels = {}, {}
        for e in prof.events():
            if dev.type == "cuda":
                if e.device_type != torch.autograd.DeviceType.CUDA:
                    continue
            us = e.time_range.elapsed_us()
            k = kernel_kind(e.name)
            by_kind[k] = by_kind.get(k, 0.0) + us
            kernels[e.name] = kernels.get(e.name, 0.0) + us
        per = steps * depth * 1e3  # us -> ms per layer
        top = sorted(kernels.items(), key=lambda kv: -kv[1])[:30]
        rows.append({"model": name, "seq": s, "batch": b, "layers": depth,
                     "ms_per_layer": {k: v / per for k, v in by_kind.items()},
                     "top_ms_per_layer": [(n[:120], v / per) for n, v in top]})
        log(f"profile {name}: " + ", ".join(f"{k} {v / per:.2f} ms" for k, v in by_kind.items()))
        del layers, x, g
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


# ---------------------------------------------------------------------------------------------
# Elementwise (memory-bound) ops of the eager layer

def run_stream(dev, timer, smoke):
    rows = []
    n, h, heads, kvh, f = (16384, 4096, 32, 8, 14336) if not smoke else (64, 64, 4, 2, 128)
    d = h // heads
    dt = torch.bfloat16
    big = torch.empty(n * f, device=dev, dtype=dt)
    out = torch.empty_like(big)
    sec = timer(lambda: out.copy_(big))
    rows.append({"op": "copy", "elements": big.numel(), "s": sec,
                 "gbytes_per_s": 4 * big.numel() / sec / 1e9})
    del big, out

    def measure(op, inputs, fwd_fn, elements, planner_bytes_fwd):
        ins = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
        y = fwd_fn(*ins)
        gy = torch.randn_like(y)
        t_f = timer(lambda: fwd_fn(*ins))

        def fb():
            for t in ins:  # no accumulation into an earlier call's gradient (an extra pass)
                t.grad = None
            fwd_fn(*ins).backward(gy)

        t_fb = timer(fb)
        rows.append({"op": op, "elements": elements, "fwd_s": t_f, "bwd_s": t_fb - t_f,
                     "planner_fwd_bytes_per_element": planner_bytes_fwd,
                     "fwd_bytes_per_element_at_copy_speed": t_f * rows[0]["gbytes_per_s"] * 1e9 / elements,
                     "bwd_over_fwd": (t_fb - t_f) / t_f})

    x = torch.randn(1, n, h, device=dev, dtype=dt)
    norm = RMSNorm(h).to(dev, dt)  # bf16 weight, as FSDP's mixed precision hands it to the layer
    measure("rmsnorm (fp32, torchtitan)", [x], lambda a: norm(a), n * h, 36)
    r = torch.randn_like(x)
    measure("residual add", [x, r], lambda a, b: a + b, n * h, 6)
    a1 = torch.randn(1, n, f, device=dev, dtype=dt)
    a3 = torch.randn_like(a1)
    measure("swiglu silu(a) * b", [a1, a3], lambda p, q: F.silu(p) * q, n * f, 10)
    del a1, a3
    xq = torch.randn(1, n, heads, d, device=dev, dtype=dt)
    xk = torch.randn(1, n, kvh, d, device=dev, dtype=dt)
    freqs = rope_freqs(d, n, dev)
    measure("rotary (complex, q and k)", [xq, xk],
            lambda p, q: torch.cat([t.flatten(2) for t in apply_rotary(p, q, freqs)], -1),
            n * (heads + kvh) * d, 20)
    measure("repeat_kv (k)", [xk], lambda p: repeat_kv(p, heads // kvh), n * heads * d, 4)
    o = torch.randn(1, heads, n, d, device=dev, dtype=dt)
    measure("transpose copy", [o], lambda p: p.transpose(1, 2).contiguous(), n * h, 4)
    return rows


class ClockLog:
    """nvidia-smi's SM clock, power and temperature once a second, tagged with the section."""

    def __init__(self):
        self.section = "start"
        self.rows = []
        self.stop = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        while not self.stop.is_set():
            self.rows.append((round(time.time() - START, 2), self.section,
                              nvidia_smi("clocks.sm,power.draw,temperature.gpu")))
            self.stop.wait(1.0)

    def close(self):
        self.stop.set()
        self.th.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu_components.json"))
    ap.add_argument("--seconds-sustained", type=float, default=30)
    ap.add_argument("--budget-s", type=float, default=200,
                    help="compile the 8B layer only if the layers start within this many seconds")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, CPU allowed")
    ap.add_argument("--layer-warm-s", type=float, default=0.0,
                    help="run each layer this long before timing it (the held clock)")
    ap.add_argument("--profile-only", default="", help="profile only these layers (e.g. gpt-1.7b)")
    ap.add_argument("--sections", default="gemm,attention,stream,sustained,layer",
                    help="comma-separated, in order; a section may repeat (attention before and "
                         "after sustained: burst against held clock)")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type != "cuda" and not args.smoke:
        sys.exit("gpu_components.py: no CUDA device; use --smoke to check the script on the CPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    timer = Timer(dev)
    res = {"torch": torch.__version__, "device": str(dev), "started_unix": START}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(0)
        res["gpu"] = {"name": p.name, "sms": p.multi_processor_count, "memory_gib": p.total_memory / 2**30,
                      "smi": nvidia_smi("name,driver_version,power.limit,clocks.max.sm,clocks.sm,memory.total")}
        log("gpu", res["gpu"])

    def save():
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)

    sections = {
        "gemm": lambda: run_gemms(dev, timer, args.smoke),
        "attention": lambda: run_attention(dev, timer, args.smoke),
        "stream": lambda: run_stream(dev, timer, args.smoke),
        "sustained": lambda: run_sustained(dev, args.seconds_sustained if not args.smoke else 1.5, args.smoke),
        "layer": lambda: run_layers(dev, timer, args.smoke, time.time() < START + args.budget_s,
                                    args.layer_warm_s),
        "burst": lambda: run_burst(dev, timer, args.smoke),
        "profile": lambda: run_profile(dev, args.smoke, args.layer_warm_s, args.profile_only),
        "layer_more": lambda: run_layers_more(dev, timer, args.smoke, args.layer_warm_s),
    }
    clocks = ClockLog()
    for i, name in enumerate(args.sections.split(",")):
        key = name if name not in res else f"{name}_{i}"
        clocks.section = key
        t0 = time.time()
        try:
            res[key] = sections[name]()
        except Exception as e:
            res[key] = {"error": repr(e)[:500]}
        log(f"{key}: {time.time() - t0:.1f}s")
        res["clocks"] = clocks.rows
        save()
    clocks.close()
    res["clocks"] = clocks.rows
    save()
    for r in res.get("gemm", []) if isinstance(res.get("gemm"), list) else []:
        print("gemm", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    for sect in [k for k in res if k.split("_")[0] in ("attention", "stream", "layer", "profile")]:
        for r in res.get(sect, []) if isinstance(res.get(sect), list) else [res.get(sect)]:
            print(sect, {k: (round(v, 6) if isinstance(v, float) else v) for k, v in (r or {}).items()})
    for t, sect, smi in res["clocks"]:
        print("clock", t, sect, smi)
    s = res.get("sustained", {})
    print("burst", res.get("burst"))
    print("sustained", {k: v for k, v in s.items() if k not in ("samples", "smi")})
    print("sustained smi first/last", (s.get("smi") or [None])[:2], (s.get("smi") or [None])[-2:])
    log("done", args.out)


if __name__ == "__main__":
    main()
