#!/usr/bin/env python3
"""tenax against PyTorch eager, side by side: for each shape and precision, runs
build/bench/bench_train_step (tenax) and bench/llama_eager.py (the eager script a user would
write) in turn, A B A B ..., each run its own process, and prints the median tokens/s and peak
RSS of each, the ratio of medians and the median of the pair-by-pair ratios (which holds when the
machine's speed drifts during the run), plus the machine's 2048^3 matmul rates before and after.
Both sides use their defaults for threads unless --threads is given. tenax keeps freed memory
in glibc's heap (src/tenax/train/device.h); --eager-keeps-memory gives the eager script the same
malloc settings through the environment, to show what the rest of tenax's step is worth. Timing
goals live here, never in tests.

  bench/side_by_side.py [--rounds 3] [--steps 4] [--shapes medium,29m] [--precisions fp32,bf16]
                        [--threads N] [--eager-keeps-memory] [--build build]
                        [--python .deps/venv/bin/python]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

SHAPES = {  # name -> DIM LAYERS HEADS KV_HEADS FFN VOCAB
    "medium": (256, 6, 8, 4, 768, 257),     # debug-medium (4.85M) on the byte vocabulary
    "29m": (512, 8, 8, 4, 1536, 4000),      # the 29M shape
    "bigvocab": (256, 2, 8, 4, 768, 128256),  # Llama 3's vocabulary: the head dominates
}


# What tenax sets with mallopt (KeepFreedCpuMemory), as glibc's environment variables.
KEEP_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}


# CPU families whose matrix units decide the comparison (bf16 products against everything else):
# (vendor, family) -> [(first model, last model, name)].
MICROARCHITECTURES = {
    ("AuthenticAMD", 25): [(0x00, 0x0F, "Zen 3"), (0x10, 0x1F, "Zen 4"), (0x20, 0x2F, "Zen 3"),
                           (0x40, 0x4F, "Zen 3+"), (0x50, 0x5F, "Zen 3"), (0x60, 0xAF, "Zen 4")],
    ("AuthenticAMD", 26): [(0x00, 0xFF, "Zen 5")],
    ("GenuineIntel", 6): [(85, 85, "Skylake/Cascade Lake/Cooper Lake"), (106, 106, "Ice Lake"),
                          (143, 143, "Sapphire Rapids"), (173, 173, "Granite Rapids"),
                          (207, 207, "Emerald Rapids")],
}


def cpu_identity():
    """One line naming the CPU: the ratio against eager depends on its balance of bf16 matrix
    throughput and memory bandwidth (docs/performance.md), so every result says which it was."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        return "cpu: unknown (no /proc/cpuinfo)"
    vendor = info.get("vendor_id", "?")
    family, model = int(info.get("cpu family", "-1")), int(info.get("model", "-1"))
    arch = next((name for lo, hi, name in MICROARCHITECTURES.get((vendor, family), [])
                 if lo <= model <= hi), "unknown microarchitecture")
    flags = set(info.get("flags", "").split())
    units = [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    env = [f"{k}={os.environ[k]}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS")
           if k in os.environ]
    return (f"cpu: {info.get('model name', '?')}, {vendor} family {family} model {model} ({arch}); "
            f"{', '.join(units) or 'no AVX-512'}" + ("" if "amx_bf16" in flags else ", no AMX")
            + (f"; {' '.join(env)}" if env else ""))


def run(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=None if env is None else {**os.environ, **env}).stdout
    for line in out.splitlines():
        if line.startswith("impl="):
            return dict(kv.split("=", 1) for kv in line.split())
    raise RuntimeError(f"no result line from {cmd}: {out}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--shapes", default="medium,29m")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--eager-keeps-memory", action="store_true")
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    # The eager baseline runs on the torch tenax is built against (scripts/setup's .deps/venv).
    ap.add_argument("--python", default=os.path.join(os.path.dirname(here), ".deps", "venv", "bin",
                                                     "python"))
    a = ap.parse_args()
    tenax = os.path.join(a.build, "bench", "bench_train_step")
    eager = [a.python, os.path.join(here, "llama_eager.py")]
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.2f} at start; seq {a.seq}, batch {a.batch}, "
          f"{a.steps} timed steps per run, {a.rounds} rounds (tenax, eager in turn)"
          + ("; eager with tenax's malloc settings" if a.eager_keeps_memory else ""))
    print(cpu_identity())
    eager_env = KEEP_MEMORY if a.eager_keeps_memory else None
    mm = run(eager + ["matmul", str(a.threads)])
    print(f"matmul 2048^3 ({mm['threads']} threads): fp32 {mm['float32_gflops']} GFLOP/s, "
          f"bf16 {mm['bfloat16_gflops']} GFLOP/s")
    print("| shape | precision | threads tenax/eager | eager tok/s | tenax tok/s | ratio of medians "
          "| pair ratios min/median/max | eager peak MiB | tenax peak MiB | tenax model GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in a.shapes.split(","):
        dims = [str(d) for d in SHAPES[shape]]
        for prec in a.precisions.split(","):
            args = dims + [prec, str(a.seq), str(a.batch), str(a.steps), str(a.threads)]
            t_runs, e_runs = [], []
            for _ in range(a.rounds):
                t_runs.append(run([tenax] + args))
                e_runs.append(run(eager + args, eager_env))
            tt = [float(r["tokens_per_s"]) for r in t_runs]
            et = [float(r["tokens_per_s"]) for r in e_runs]
            pairs = sorted(x / y for x, y in zip(tt, et))
            med = statistics.median
            print(f"| {shape} | {prec} | {t_runs[0]['threads']}/{e_runs[0]['threads']} | "
                  f"{med(et):.0f} | {med(tt):.0f} | {med(tt) / med(et):.2f} | "
                  f"{pairs[0]:.2f}/{med(pairs):.2f}/{pairs[-1]:.2f} | "
                  f"{med(float(r['peak_rss_mib']) for r in e_runs):.0f} | "
                  f"{med(float(r['peak_rss_mib']) for r in t_runs):.0f} | "
                  f"{med(float(r['model_gflops']) for r in t_runs):.1f} |", flush=True)
    mm = run(eager + ["matmul", str(a.threads)])
    print(f"matmul 2048^3 after: fp32 {mm['float32_gflops']} GFLOP/s, bf16 "
          f"{mm['bfloat16_gflops']} GFLOP/s; load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
