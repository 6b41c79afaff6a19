#!/usr/bin/env python3
"""bf16 weight gradients on the CPU: at::mm of bf16 operands, rounded to bf16 and widened to fp32
(what at::matmul's autograd gave tenax's fp32 master weights before), against oneDNN's
dnnl_gemm_bf16bf16f32 writing fp32 directly (what model/cpu_gemm.h's CpuLinearBf16 calls), on the
29M shape's weight-gradient products dy^T x. Prints milliseconds per product, the ratio, and each
result's largest difference from the fp64 product of the same bf16 operands.

  .deps/venv/bin/python bench/bf16_gemm_rates.py [threads=0: every core] [repeats=20]

libdnnl.so.2 exports dnnl_gemm_bf16bf16f32 without declaring it in oneDNN 2.x's header; this
script, like tenax, looks it up by name.
"""
import ctypes
import os
import sys
import time

import torch


def best_ms(fn, repeats):
    fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best * 1e3


def main(argv):
    threads = int(argv[0]) if argv else 0
    repeats = int(argv[1]) if len(argv) > 1 else 20
    torch.set_num_threads(threads or os.cpu_count())
    gemm = ctypes.CDLL("libdnnl.so.2").dnnl_gemm_bf16bf16f32
    i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    gemm.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, f32, ptr, i64, ptr, i64, f32,
                     ptr, i64]
    print(f"threads {torch.get_num_threads()}, best of 5 x {repeats} repeats")
    print("| tokens x out x in | at::mm + widen ms | dnnl bf16 gemm ms | ratio | "
          "max diff at::mm | max diff dnnl |")
    print("|---|---|---|---|---|---|")
    torch.manual_seed(0)
    # (tokens, out features, in features): wq/wo, wk/wv, w1/w3, w2, the head; then 2048^3.
    for m, n, k in [(2048, 512, 512), (2048, 256, 512), (2048, 1536, 512), (2048, 512, 1536),
                    (2048, 4000, 512), (2048, 2048, 2048)]:
        x = torch.randn(m, k).bfloat16()
        dy = torch.randn(m, n).bfloat16()
        dw = torch.empty(n, k)

        def dnnl():
            # dW (n x k) = dy^T (n x m) x (m x k), row-major: dy read transposed.
            status = gemm(b"T", b"N", n, k, m, 1.0, dy.data_ptr(), n, x.data_ptr(), k, 0.0,
                          dw.data_ptr(), k)
            assert status == 0, f"dnnl_gemm_bf16bf16f32 status {status}"

        aten_ms = best_ms(lambda: torch.mm(dy.t(), x).float(), repeats)
        dnnl_ms = best_ms(dnnl, repeats)
        exact = torch.mm(dy.t().double(), x.double())
        aten_diff = (torch.mm(dy.t(), x).double() - exact).abs().max().item()
        dnnl_diff = (dw.double() - exact).abs().max().item()
        print(f"| {m} x {n} x {k} | {aten_ms:.2f} | {dnnl_ms:.2f} | {aten_ms / dnnl_ms:.2f} | "
              f"{aten_diff:.1e} | {dnnl_diff:.1e} |")


if __name__ == "__main__":
    main(sys.argv[1:])
