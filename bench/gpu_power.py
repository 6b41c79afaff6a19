#!/usr/bin/env python3
"""How a training workload's throughput depends on the power it may draw, measured on one NVIDIA
GPU without changing any of its settings (the power limit stays where it is).

  gpu_power.py [--out FILE.json] [--phase-s 8] [--duties 1,0.8,0.65,0.5] [--smoke]
  gpu_power.py --analyze FILE.json [FILE.json ...] [--limit-w 500]

At its power limit a GPU runs the highest clock whose power fits under the limit. Idle gaps of
known length between the steps of a workload lower its average power, so the clock rises: each
duty cycle d (the busy share of the time) gives one point of the workload's own power curve,

  P_busy(f) = (P_avg - (1 - d) P_gap) / d,

with P_avg from NVML's energy counter over the phase, f the mean SM clock (NVML, every 20 ms),
d from CUDA events around each step and each gap, and P_gap the power of the gap kernel alone
(torch.cuda._sleep: one thread spinning, the clock held). From the points the clock at which the
busy power would be a lower limit (e.g. 500 W) can be estimated. --analyze does it for throughput,
which is what the planner needs: over the points where the GPU was held at its limit (average power
within 5% of it) it fits throughput = k P_busy^e by least squares in logs, and extrapolates to
--limit-w: the ratio (limit / enforced limit)^e, for each workload and, for the sustained clock of
compute-bound kernels, the mean elasticity of the GEMMs and attention. `tenax plan`'s
h100-hbm2e-500w profile takes its sustained clock from it (docs/planner.md, "Power").

Workloads: eager Llama 3 8B and 70B layers forward + backward (bench/gpu_components.py's stack,
8192 tokens), 8192^3 bf16 and fp8 GEMMs, and causal attention (SDPA, 16K tokens, 16 heads) forward and
backward. Step times are recorded with the clock, so the share of a step that scales with the
clock can be read off as well. --smoke runs tiny shapes on the CPU to check the script.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import threading
import time

import torch
import torch.nn.functional as F

from gpu_components import Timer, log, make_stack, stack_step


class Nvml:
    """The few NVML calls needed, through ctypes (no pynvml on the image)."""

    SM_CLOCK = 1

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.h = ctypes.c_void_p()
        if self.lib.nvmlInit_v2() != 0 or self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.h)) != 0:
            raise RuntimeError("NVML could not open GPU 0")

    def _read(self, fn, ctype, *args):
        """One NVML getter: fn(device, *args, &value) into a ctype."""
        v = ctype()
        rc = getattr(self.lib, fn)(self.h, *args, ctypes.byref(v))
        if rc != 0:
            raise RuntimeError(f"{fn} failed with NVML status {rc}")
        return v.value

    def energy_j(self):  # NVML counts millijoules since the driver loaded
        return self._read("nvmlDeviceGetTotalEnergyConsumption", ctypes.c_ulonglong) / 1000.0

    def sm_mhz(self):
        return self._read("nvmlDeviceGetClockInfo", ctypes.c_uint, self.SM_CLOCK)

    def power_w(self):
        return self._read("nvmlDeviceGetPowerUsage", ctypes.c_uint) / 1000.0

    def limit_w(self):
        return self._read("nvmlDeviceGetEnforcedPowerLimit", ctypes.c_uint) / 1000.0

    def temp_c(self):
        return self._read("nvmlDeviceGetTemperature", ctypes.c_uint, 0)  # 0: the GPU die


class Sampler:
    """SM clock and power every 20 ms in a thread; phases read their window of samples."""

    def __init__(self, nvml):
        self.nvml, self.rows, self.stop = nvml, [], threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        while not self.stop.is_set():
            if self.nvml:
                self.rows.append((time.time(), self.nvml.sm_mhz(), self.nvml.power_w()))
            self.stop.wait(0.02)

    def window(self, t0, t1):
        return [r for r in self.rows if t0 <= r[0] <= t1]

    def close(self):
        self.stop.set()
        self.th.join()


def measure_phase(name, step, step_s, duty, seconds, nvml, sampler, settle_s, cuda):
    """Runs step() with a gap after each so that the busy share is about `duty`, for `seconds`;
    measures the last (seconds - settle_s)."""
    gap_s = step_s * (1.0 - duty) / duty
    events = []
    t_start = time.time()
    t_meas = t_start + settle_s
    measuring = False
    while True:
        now = time.time()
        if not measuring and now >= t_meas:
            if cuda:
                torch.cuda.synchronize()
            measuring = True
            t0, j0 = time.time(), nvml.energy_j() if nvml else 0.0
        if now >= t_start + seconds and measuring:
            break
        if cuda:
            a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            a.record()
        step()
        if cuda:
            b.record()
            if gap_s > 0:
                # _sleep spins for a number of cycles: at the clock of the moment this is about
                # gap_s; the events measure what it really was.
                torch.cuda._sleep(int(gap_s * 1.98e9))
            c.record()
            if measuring:
                events.append((a, b, c))
            if len(events) % 8 == 0:
                torch.cuda.synchronize()  # keep the queue short, so time.time() tracks the GPU
        elif gap_s > 0:
            time.sleep(gap_s)
    if cuda:
        torch.cuda.synchronize()
    t1, j1 = time.time(), nvml.energy_j() if nvml else 0.0
    busy = sum(a.elapsed_time(b) for a, b, _ in events) / 1e3 if cuda else 0.0
    gap = sum(b.elapsed_time(c) for _, b, c in events) / 1e3 if cuda else 0.0
    samples = sampler.window(t0, t1)
    row = {
        "workload": name, "duty_target": duty, "seconds": t1 - t0, "steps": len(events),
        # Anything not busy (the gap kernel, launch gaps after a synchronize) counts as gap: the
        # clock stays up and the GPU draws about the gap kernel's power.
        "busy_s": busy, "gap_s": gap, "duty": busy / (t1 - t0) if cuda else None,
        "step_s": busy / len(events) if events else None,
        "power_w": (j1 - j0) / (t1 - t0) if nvml else None,
        "sm_mhz": statistics.mean(s[1] for s in samples) if samples else None,
        "sm_mhz_min": min((s[1] for s in samples), default=None),
        "sm_mhz_max": max((s[1] for s in samples), default=None),
        "temp_c": nvml.temp_c() if nvml else None,
    }
    log(f"{name} duty {duty:.2f}: measured duty {row['duty'] if row['duty'] is not None else 0:.3f}, "
        f"{row['power_w'] or 0:.1f} W, {row['sm_mhz'] or 0:.0f} MHz "
        f"({row['sm_mhz_min']}-{row['sm_mhz_max']}), step {1e3 * (row['step_s'] or 0):.2f} ms, "
        f"{row['temp_c']} C")
    return row


def workloads(dev, smoke):
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    out = []
    cases = [("llama3-8b", 8192, 1, 4), ("llama3-70b", 8192, 1, 2)]
    if smoke:
        cases = [("tiny", 32, 1, 2)]
    for name, s, b, depth in cases:
        def make(name=name, s=s, b=b, depth=depth):
            layers, freqs, x, g = make_stack(name, depth, s, b, dev, dt)
            return lambda: stack_step(layers, freqs, x, g)
        out.append((f"{name} eager layer x{depth}, {b}x{s} tokens", make))
    n = 256 if smoke else 8192

    def gemm():
        a = torch.randn(n, n, device=dev, dtype=dt)
        w = torch.randn(n, n, device=dev, dtype=dt)
        def step():
            for _ in range(4):
                torch.mm(a, w)
        return step
    out.append((f"bf16 GEMM {n}^3 x4", gemm))
    if dev.type == "cuda" and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
        def gemm_fp8():
            a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
            w = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
            one = torch.ones((), device=dev)

            def step():
                for _ in range(8):
                    torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            return step
        out.append((f"fp8 GEMM {n}^3 x8", gemm_fp8))
    if hasattr(F, "scaled_dot_product_attention"):
        def attention():
            s, heads = (64, 2) if smoke else (16384, 16)
            q, k, v = (torch.randn(1, heads, s, 128, device=dev, dtype=dt, requires_grad=True)
                       for _ in range(3))
            go = torch.randn(1, heads, s, 128, device=dev, dtype=dt)

            def step():
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(go)
            return step
        out.append(("SDPA causal 16x16K fwd+bwd", attention))
    return out


def fit_line(xs, ys):
    """Least-squares slope and intercept of ys against xs."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def analyze(paths, limit_w):
    """Throughput against busy power, per workload and file; prints the extrapolation to limit_w."""
    compute, caps = [], set()
    print(f"{'file':18} {'workload':42} {'points':>6} {'busy W':>11} {'elasticity':>10} {'at ' + str(int(limit_w)) + ' W':>8}")
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        cap, p_gap = d["power_limit_w"], d["gap"]["power_w"]
        caps.add(cap)
        by = {}
        for r in d["rows"]:
            by.setdefault(r["workload"], []).append(r)
        for name, rows in by.items():
            held = [r for r in rows if r["power_w"] >= 0.95 * cap]
            if len(held) < 2:
                continue
            busy_w = [(r["power_w"] - (1 - r["duty"]) * p_gap) / r["duty"] for r in held]
            # log busy power against log throughput, lowest power first
            pts = sorted((math.log(p), -math.log(r["step_s"])) for p, r in zip(busy_w, held))
            e, _ = fit_line([x for x, _ in pts], [y for _, y in pts])
            ratio = (limit_w / cap) ** e
            if "GEMM" in name or "SDPA" in name:
                compute.append(e)
            check = ""
            if len(held) >= 3:
                # The extrapolation checked inside the data: fitted without the lowest point (the
                # one at full duty), what does the power law say there?
                lo, hi = pts[0], pts[1:]
                e_hi, a_hi = fit_line([x for x, _ in hi], [y for _, y in hi])
                check = (f"  (fitted above {math.exp(hi[0][0]):.0f} W, the law is off by "
                         f"{math.exp(a_hi + e_hi * lo[0] - lo[1]) - 1:+.1%} at {math.exp(lo[0]):.0f} W)")
            print(f"{os.path.basename(path)[:18]:18} {name[:42]:42} {len(held):6d} "
                  f"{min(busy_w):5.0f}-{max(busy_w):<5.0f} {e:10.3f} {ratio:8.3f}{check}")
    if compute:
        if len(caps) > 1:
            raise SystemExit(f"the files were measured at different power limits {sorted(caps)}: "
                             "analyze one limit at a time")
        e = statistics.mean(compute)
        print(f"compute-bound kernels (GEMMs, attention): mean elasticity {e:.3f} over {len(compute)}: "
              f"throughput at {limit_w:.0f} W = {(limit_w / cap) ** e:.3f} of the enforced limit's")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="")
    ap.add_argument("--phase-s", type=float, default=8.0)
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument("--duties", default="1,0.8,0.65,0.5")
    ap.add_argument("--only", default="", help="comma-separated workload name prefixes")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--analyze", nargs="+", metavar="FILE.json", help="fit measured files, no GPU")
    ap.add_argument("--limit-w", type=float, default=500.0)
    args = ap.parse_args()
    if args.analyze:
        analyze(args.analyze, args.limit_w)
        return
    cuda = torch.cuda.is_available() and not args.smoke
    dev = torch.device("cuda" if cuda else "cpu")
    nvml = Nvml() if cuda else None
    sampler = Sampler(nvml)
    duties = [float(d) for d in args.duties.split(",")]
    phase_s = 0.5 if args.smoke else args.phase_s
    settle_s = 0.1 if args.smoke else args.settle_s
    result = {"torch": torch.__version__, "started_unix": time.time(), "rows": []}
    if cuda:
        result["gpu"] = torch.cuda.get_device_name(0)
        result["power_limit_w"] = nvml.limit_w()
        log(f"{result['gpu']}, enforced power limit {result['power_limit_w']:.0f} W")

    def save():
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)

    # The gap kernel alone: its power is what a gap costs (the clock stays up).
    if cuda:
        gap = measure_phase("gap kernel alone", lambda: torch.cuda._sleep(int(2e-3 * 1.98e9)), 2e-3,
                            1.0, 4.0, nvml, sampler, 1.0, cuda)
        result["gap"] = gap
        save()
    for name, make in workloads(dev, args.smoke):
        if args.only and not any(name.startswith(p) for p in args.only.split(",")):
            continue
        try:
            step = make()
            step()
        except Exception as e:  # e.g. no fp8 GEMM in this build
            log(f"{name}: skipped ({str(e).splitlines()[0][:200]})")
            continue
        step_s = Timer(dev)(step, target_s=2.0)  # at the held clock, for sizing the gaps
        for d in duties:
            result["rows"].append(measure_phase(name, step, step_s, d, phase_s, nvml, sampler,
                                                settle_s, cuda))
            save()
        del step
        if cuda:
            torch.cuda.empty_cache()
    sampler.close()
    save()
    log("done")


if __name__ == "__main__":
    main()
