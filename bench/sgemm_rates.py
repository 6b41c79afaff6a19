#!/usr/bin/env python3
"""fp32 matrix products on the CPU: at::mm (libtorch -> libblas.so.3, OpenBLAS here) against
oneDNN's dnnl_sgemm (the libdnnl.so.2 libtorch links; what tenax's fp32 Linear calls since
model/cpu_gemm.h), on the 29M shape's products and a 2048^3 one: forward x W^T, input gradient
dy W, weight gradient dy^T x. Prints GFLOP/s per product and the largest difference from at::mm.

  .deps/venv/bin/python bench/sgemm_rates.py [threads=0: every core] [repeats=10]

Run it as the training run would be: tenax sets OpenBLAS to one thread only for its own process,
so at::mm here uses OpenBLAS's default (its own thread pool).
"""
import ctypes
import os
import sys
import time

import torch


def main(argv):
    threads = int(argv[0]) if argv else 0
    repeats = int(argv[1]) if len(argv) > 1 else 10
    torch.set_num_threads(threads or os.cpu_count())
    lib = ctypes.CDLL("libdnnl.so.2")
    sgemm = lib.dnnl_sgemm
    i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    sgemm.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, f32, ptr, i64, ptr, i64, f32,
                      ptr, i64]

    def dnnl(ta, tb, m, n, k, a, lda, b, ldb, c):
        status = sgemm(ta, tb, m, n, k, 1.0, a.data_ptr(), lda, b.data_ptr(), ldb, 0.0,
                       c.data_ptr(), n)
        assert status == 0, f"dnnl_sgemm status {status}"

    def rate(fn, flops):
        fn()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return flops * repeats / (time.perf_counter() - start) / 1e9

    print(f"threads {torch.get_num_threads()}, OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, {repeats} repeats")
    print("| M x N x K | product | at::mm GFLOP/s | dnnl_sgemm GFLOP/s | ratio | max diff |")
    print("|---|---|---|---|---|---|")
    torch.manual_seed(0)
    # (tokens, out features, in features): q/o projections, k/v, w1/w3, w2, head; then 2048^3.
    for m, n, k in [(2048, 512, 512), (2048, 256, 512), (2048, 1536, 512), (2048, 512, 1536),
                    (2048, 4000, 512), (2048, 2048, 2048)]:
        x, w, dy = torch.randn(m, k), torch.randn(n, k), torch.randn(m, n)
        y, dx, dw = torch.empty(m, n), torch.empty(m, k), torch.empty(n, k)
        flops = 2 * m * n * k
        cases = [
            ("forward x W^T", lambda: torch.mm(x, w.t()),
             lambda: dnnl(b"N", b"T", m, n, k, x, k, w, k, y), y, lambda: x @ w.t()),
            ("input grad dy W", lambda: torch.mm(dy, w),
             lambda: dnnl(b"N", b"N", m, k, n, dy, n, w, k, dx), dx, lambda: dy @ w),
            ("weight grad dy^T x", lambda: torch.mm(dy.t(), x),
             lambda: dnnl(b"T", b"N", n, k, m, dy, n, x, k, dw), dw, lambda: dy.t() @ x),
        ]
        for name, blas, onednn, out, ref in cases:
            r_blas, r_dnnl = rate(blas, flops), rate(onednn, flops)
            diff = (out - ref()).abs().max().item()
            print(f"| {m} x {n} x {k} | {name} | {r_blas:.0f} | {r_dnnl:.0f} | "
                  f"{r_dnnl / r_blas:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main(sys.argv[1:])
