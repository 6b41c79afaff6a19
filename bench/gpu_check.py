#!/usr/bin/env python3
"""scripts/gpu-check: the one command to run on a lent GPU machine (see scripts/gpu-check).

Steps, each timed, each with its own result in OUTDIR/gpu-check.json (the log beside it):
  machine     GPU, driver, torch, CUDA and NCCL versions, CPU cores
  build       tenax against the machine's own torch (cmake + make), or a build carried in
              (--prebuilt DIR, made here by --pack DIR: the binaries and the shared libraries
              of this machine they need; on the GPU machine only those it lacks are used, and a
              pack that does not start there falls back to building); seconds either way
  gpu_tests   ctest -L gpu (or, in a pack, the test binary itself): passed / failed /
              skipped, by name
  hf_logits   a small model trained on the device, exported with `tenax export-hf`; its logits
              from tenax (bench_logits) against transformers' on the device (bench/hf_logits.py)
  throughput  Llama 3 8B layer shapes, 8 layers, seq 8192, local batch 2 (issue 33's shape),
              bf16, random tokens: `tenax train` (its GPU paths on, off with
              training.fused_kernels = false, in fp8 (training.mixed_precision, float8 block
              matmuls), and on with selective activation checkpointing;
              tokens/s, MFU, peak memory from its metrics.jsonl) beside PyTorch eager and
              PyTorch with torch.compile per block and fused AdamW (torchtitan's recipe;
              bench/llama_eager.py) on the same shape in the same call; then two more steps
              of the first tenax run under its profiler (metrics.profile_step) and of eager
              under torch.profiler, untimed: OUTDIR/profile-tenax.txt, profile-eager.txt (each
              kernel's time per step, side by side) and tenax's Chrome trace
--dry-run runs the same steps on the CPU with tiny shapes (no GPU, the existing build/): what CI
runs, so the plumbing cannot rot between loans. Exit code 0 when every step is ok (in a dry run
the GPU tests must all skip, none pass).
"""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG = None


def log(msg):
    line = f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


def run(cmd, timeout, cwd=ROOT, env=None):
    """Runs cmd (a list), appending its output to the log; returns (exit code, output, seconds)."""
    log("$ " + " ".join(cmd))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        code, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        code, out = 124, (e.stdout or b"").decode(errors="replace") if isinstance(
            e.stdout, bytes) else (e.stdout or "")
        out += f"\n(timed out after {timeout} s)"
    dt = time.time() - t0
    if LOG:
        LOG.write(out if out.endswith("\n") else out + "\n")
        LOG.flush()
    return code, out, dt


def machine(args):
    info = {"python": sys.executable, "platform": platform.platform(), "cpu_cores": os.cpu_count()}
    import torch
    info["torch"] = torch.__version__
    info["cuda_runtime"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        props = torch.cuda.get_device_properties(0)
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["compute_capability"] = f"{props.major}.{props.minor}"
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            info["nccl"] = f"unknown ({e})"
    if shutil.which("nvidia-smi"):
        code, out, _ = run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,"
                            "clocks.max.sm,memory.total", "--format=csv,noheader"], 30)
        if code == 0:
            info["nvidia_smi"] = out.strip()
    return {"ok": True, **info}


# What a GPU run needs of a build folder, as --pack lays it out (the same relative paths).
PACKED = ("tenax", "tenax-torch", "bench/bench_logits", "tests/tenax_gpu_tests")
# Libraries every Linux machine has in a compatible version: never carried.
SYSTEM_LIBS = ("linux-vdso", "ld-linux", "libc.so", "libm.so", "libdl.so", "libpthread.so",
               "librt.so", "libgcc_s.so", "libstdc++.so")


def ldd(path, env=None):
    """{soname: resolved path or None} of what path loads."""
    p = subprocess.run(["ldd", path], capture_output=True, text=True, env=env)
    libs = {}
    for line in p.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+))", line)
        if m:
            libs[m.group(1)] = m.group(3)
    return libs


def pack(args):
    """Here, before a lease: build/'s binaries a GPU run needs (stripped) and the shared libraries
    they load from this machine, other than the C and C++ runtimes and the wheel's own (libtorch,
    CUDA, NCCL: the GPU machine's torch brings those). --prebuilt DIR there uses the pack, taking
    of the carried libraries only those the machine lacks. Saves the build's minutes of device
    time on every call (~2-3 min on 16 cores)."""
    out = os.path.abspath(args.pack)
    src = os.path.join(ROOT, "build")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "lib"))
    libs = {}
    for rel in PACKED:
        if not os.path.exists(os.path.join(src, rel)):
            print(f"gpu-check --pack: build/{rel} is missing: scripts/build --target "
                  f"{os.path.basename(rel)} first", file=sys.stderr)
            return 1
        dst = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), dst)
        subprocess.run(["strip", "--strip-unneeded", dst], check=True)
        for name, path in ldd(dst).items():
            if path is None:
                print(f"gpu-check --pack: build/{rel} needs {name}, which this machine lacks",
                      file=sys.stderr)
                return 1
            if "site-packages" in path or name.startswith(SYSTEM_LIBS):
                continue
            libs[name] = path
    for name, path in sorted(libs.items()):
        shutil.copy2(os.path.realpath(path), os.path.join(out, "lib", name))
    # What was built: the device machine's copy of the tree has no git history.
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout
    info = {"commit": git("rev-parse", "HEAD").strip() or None,
            "uncommitted": sorted(l[3:] for l in git("status", "--porcelain").splitlines()),
            "packed_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(os.path.join(out, "build-info.json"), "w") as f:
        json.dump(info, f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    print(f"gpu-check --pack: {out}: {', '.join(PACKED)} and {len(libs)} libraries "
          f"({', '.join(sorted(libs))}), {size / 2**20:.1f} MiB")
    return 0


def use_pack(bdir):
    """Makes a pack runnable on this machine: libtorch from this python's torch, and each carried
    library that this machine does not have (ldd says 'not found') from the pack. Sets
    LD_LIBRARY_PATH for every step's children; returns None or why the pack cannot run here."""
    import torch
    xlib = os.path.join(bdir, "lib-used")
    shutil.rmtree(xlib, ignore_errors=True)
    os.makedirs(xlib)
    # libtorch, and the CUDA and NCCL wheels beside it (the binaries name libcudart directly).
    site = os.path.dirname(os.path.dirname(torch.__file__))
    wheels = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))
    os.environ["LD_LIBRARY_PATH"] = ":".join(
        [os.path.join(os.path.dirname(torch.__file__), "lib")] + wheels + [xlib] +
        [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p])
    used = set()
    for _ in range(5):  # a carried library may itself need another carried one
        missing = set()
        for rel in PACKED:
            if os.path.exists(os.path.join(bdir, rel)):
                missing |= {n for n, p in ldd(os.path.join(bdir, rel)).items() if p is None}
        for name in list(missing):
            if os.path.exists(os.path.join(bdir, "lib", name)) and name not in used:
                os.symlink(os.path.join(bdir, "lib", name), os.path.join(xlib, name))
                used.add(name)
                missing.discard(name)
        if not missing:
            break
    if missing:
        return f"libraries missing here and not in the pack: {', '.join(sorted(missing))}"
    code, out, _ = run([os.path.join(bdir, "tenax"), "model", "--preset", "llama3-8b"], 60)
    if code != 0:
        return f"the packed tenax does not run here (exit {code}): {out[-500:]}"
    log(f"pack {bdir}: carried libraries used here: {', '.join(sorted(used)) or 'none'}")
    return None


def build(args):
    fallback = None
    if args.prebuilt:
        if not os.path.exists(os.path.join(args.prebuilt, "tenax")):
            return {"ok": False, "error": f"--prebuilt {args.prebuilt} has no tenax binary"}
        if args.dry_run or not os.path.isdir(os.path.join(args.prebuilt, "lib")):
            return {"ok": True, "mode": "prebuilt", "dir": args.prebuilt, "seconds": 0}
        why = use_pack(args.prebuilt)
        if why is None:
            with open(os.path.join(args.prebuilt, "build-info.json")) as f:
                info = json.load(f)
            return {"ok": True, "mode": "pack", "dir": args.prebuilt, "seconds": 0, **info}
        log(f"the pack cannot be used ({why}); building here instead")
        fallback = why
        args.prebuilt = None
    result = build_here(args)
    if fallback:
        result["pack_unusable"] = fallback
    return result


def build_here(args):
    bdir = os.path.join(ROOT, "build-gpu")
    cfg = ["cmake", "-S", ROOT, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
           f"-DTENAX_PYTHON={sys.executable}", "-DTORCH_CUDA_ARCH_LIST=9.0"]
    gtest = os.path.join(ROOT, ".deps", "gtest")
    if os.path.isdir(gtest):  # scripts/setup's copy of Debian's GoogleTest, carried to the machine
        cfg.append(f"-DGTEST_ROOT={gtest}")
    code, out, t_cfg = run(cfg, 300)
    if code != 0:
        return {"ok": False, "error": "cmake configure failed", "tail": out[-3000:]}
    targets = ["tenax", "tenax-torch", "bench_logits"]
    has_tests = "GTest not found" not in out
    if has_tests:
        targets.append("tenax_gpu_tests")
    code, out, t_build = run(["cmake", "--build", bdir, "-j", str(args.jobs), "--target"] + targets,
                             args.build_timeout)
    result = {"ok": code == 0, "mode": "built here", "dir": bdir, "configure_s": round(t_cfg, 1),
              "build_s": round(t_build, 1), "seconds": round(t_cfg + t_build, 1),
              "jobs": args.jobs, "gpu_tests_built": has_tests}
    if code != 0:
        result["error"] = "build failed"
        result["tail"] = out[-4000:]
    args.prebuilt = bdir
    return result


def gpu_tests(args):
    """ctest -L gpu in a build folder; in a pack (no CTest files), the test binary itself with
    GoogleTest's XML report, told where tenax, the sources and python are."""
    bdir = args.prebuilt
    junit = os.path.join(args.out, "gpu-tests.xml")
    if os.path.exists(junit):
        os.remove(junit)
    direct = not os.path.exists(os.path.join(bdir, "CTestTestfile.cmake"))
    if direct:
        env = dict(os.environ, TENAX_BINARY=os.path.join(bdir, "tenax"), TENAX_SOURCE_DIR=ROOT,
                   TENAX_PYTHON=sys.executable)
        code, out, dt = run([os.path.join(bdir, "tests", "tenax_gpu_tests"),
                             f"--gtest_output=xml:{junit}"], 900, env=env)
    else:
        code, out, dt = run(["ctest", "--test-dir", bdir, "-L", "gpu", "--output-on-failure",
                             "--timeout", "300", "--output-junit", junit], 900)
    if not os.path.exists(junit):
        return {"ok": False, "error": "no test results were written (were the GPU tests built?)",
                "tail": out[-3000:]}
    cases, reasons = {}, set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        status, result = case.get("status", "run"), case.get("result", "")
        if status == "disabled" or result == "suppressed":
            continue  # DISABLED_ helpers that other tests run as subprocesses
        failed = case.find("failure") is not None or status == "fail"
        skip = case.find("skipped")
        skipped = skip is not None or status == "notrun"
        name = f"{case.get('classname')}.{case.get('name')}" if direct else case.get("name")
        cases[name] = "failed" if failed else "skipped" if skipped else "passed"
        if skipped:  # the test's own line: "skipped: <why>"
            text = (case.findtext("system-out") or "") + (skip.get("message", "") if skip is not
                                                           None else "")
            reasons.update(re.findall(r"skipped: ([^\n]+)", text))
    counts = {k: sum(1 for v in cases.values() if v == k) for k in ("passed", "failed", "skipped")}
    reasons = sorted(reasons)
    if args.dry_run:
        # No GPU here: every GPU test must skip and say why; one that passes would be a fake.
        ok = (counts["passed"] == 0 and counts["failed"] == 0 and
              counts["skipped"] == len(cases) > 0 and len(reasons) > 0)
    else:
        ok = code == 0 and counts["failed"] == 0 and counts["passed"] == len(cases) > 0
    result = {"ok": ok, "seconds": round(dt, 1), "runner": "gtest" if direct else "ctest",
              **counts, "tests": cases, "skip_reasons": reasons}
    if counts["failed"] or not ok:
        result["tail"] = out[-4000:]
    # What the tests printed that a reader of the JSON wants (e.g. the GPU's replay noise).
    result["printed"] = [l for l in out.splitlines() if l.startswith("sdc statistics")][:4]
    return result


def write_tokens(path, n, vocab, seed):
    """A version-2 tenax shard of n random ids (docs/data_format.md)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int64)
    width = 2 if vocab <= 65536 else 4
    body = ids.numpy().astype("<u4" if width == 4 else "<u2").tobytes()
    none = 0xFFFFFFFF
    header = struct.pack("<8sIIQIIII", b"TENAXTOK", 2, width, n, vocab, none, none,
                         zlib.crc32(body)).ljust(60, b"\0")
    with open(path, "wb") as f:
        f.write(header + struct.pack("<I", zlib.crc32(header)) + body)


def shape(args):
    if args.dry_run:
        return dict(dim=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=512, seq=128, batch=2,
                    steps=4, device="cpu")
    return dict(dim=4096, layers=8, heads=32, kv_heads=8, ffn=14336, vocab=128256, seq=8192,
                batch=2, steps=args.steps, device="cuda")


def tenax_throughput(args, s, name, sets_extra, profile=False):
    """One `tenax train` run on the shape; tokens/s, MFU and peak memory from its metrics.jsonl.
    profile: two more steps after the timed ones, under tenax's profiler; the table and the
    trace copied to OUTDIR/profile-tenax.{txt,json}."""
    data = os.path.join(args.out, "data")
    n_steps = s["steps"] + (2 if profile else 0)
    if profile:
        sets_extra = dict(sets_extra, **{"metrics.profile_step": s["steps"] + 1,
                                         "metrics.profile_steps": 2})
    tenax = os.path.join(args.prebuilt, "tenax")
    sets = {
        "job.name": name, "job.dump_folder": os.path.join(args.out, "runs"),
        "data.source": "tokens", "data.path": os.path.join(data, "train.bin"),
        "data.val_path": os.path.join(data, "val.bin"),
        "model.preset": "debug-tiny", "model.dim": s["dim"], "model.n_layers": s["layers"],
        "model.n_heads": s["heads"], "model.n_kv_heads": s["kv_heads"],
        "model.ffn_hidden_dim": s["ffn"], "model.vocab_size": s["vocab"],
        "model.max_seq_len": s["seq"], "training.seq_len": s["seq"],
        "training.local_batch_size": s["batch"], "training.steps": n_steps,
        "training.device": s["device"], "training.mixed_precision": "bf16",
        "checkpoint.enable": "false", "metrics.eval_interval": 0, "metrics.log_interval": 1,
        "metrics.eval_tokens": s["seq"],
        "metrics.progress": "never", "metrics.tensorboard": "false", **sets_extra,
    }
    cmd = [tenax, "train", "--defaults"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    code, out, dt = run(cmd, args.bench_timeout)
    r = {"ok": False, "exit_code": code, "seconds": round(dt, 1), "settings": sets_extra}
    metrics = os.path.join(args.out, "runs", name, "metrics.jsonl")
    steps = []
    if os.path.exists(metrics):
        steps = [json.loads(l) for l in open(metrics) if '"tokens_per_s"' in l]
    if code != 0 or not steps:
        r["error"] = "out of memory" if "out of memory" in out.lower() else "failed"
        r["tail"] = out[-3000:]
        return r
    if profile:
        base = os.path.join(args.out, "runs", name, "profile",
                            f"rank0-steps{s['steps'] + 1}-{s['steps'] + 2}")
        for ext in ("txt", "json"):
            if os.path.exists(f"{base}.{ext}"):
                shutil.copy(f"{base}.{ext}", os.path.join(args.out, f"profile-tenax.{ext}"))
                r[f"profile_{ext}"] = os.path.join(args.out, f"profile-tenax.{ext}")
        steps = [st for st in steps if st["step"] <= s["steps"]]  # the profiled ones are slower
    timed = steps[2:] if len(steps) > 3 else steps[-1:]  # the first steps warm up
    tps = statistics.median(st["tokens_per_s"] for st in timed)
    mfu = [st["mfu"] for st in timed if st.get("mfu") is not None]
    r.update({
        "ok": True, "tokens_per_s": round(tps),
        "mfu": round(statistics.median(mfu), 4) if mfu else None,
        "flops_per_token": timed[-1]["flops_per_s"] / timed[-1]["tokens_per_s"],
        "peak_allocated_gib": round(max(st["mem_peak_bytes"] for st in steps) / 2**30, 2),
        "peak_reserved_gib": round(max(st.get("mem_peak_reserved_bytes", 0) for st in steps)
                                   / 2**30, 2),
        "steps_timed": len(timed), "step_time_s": [round(st.get("step_time_s", 0), 4) for st in steps],
        "loss_last": timed[-1]["loss"]})
    r["model_tflops"] = round(tps * r["flops_per_token"] / 1e12, 1)
    return r


def torch_throughput(args, s, impl, timeout, table=None):
    """bench/llama_eager.py on the shape: PyTorch eager, or compiled per block (torchtitan's
    recipe). Peak memory is torch.cuda.max_memory_allocated."""
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "llama_eager.py")] + [
        str(s[k]) for k in ("dim", "layers", "heads", "kv_heads", "ffn", "vocab")] + [
        "bf16", str(s["seq"]), str(s["batch"]), str(max(2, s["steps"] - 2)), "0", s["device"],
        impl] + ([table] if table else [])
    code, out, dt = run(cmd, timeout, env=env)
    r = {"ok": False, "exit_code": code, "seconds": round(dt, 1)}
    m = re.search(r"impl=%s .*" % impl, out)
    if code == 0 and m:
        kv = dict(p.split("=", 1) for p in m.group(0).split() if "=" in p)
        r.update({k: float(v) if re.fullmatch(r"[-0-9.e]+", v) else v for k, v in kv.items()})
        r["ok"] = True
        if "peak_mem_mib" in r:
            r["peak_allocated_gib"] = round(r["peak_mem_mib"] / 1024, 2)
    else:
        r["error"] = "out of memory" if "out of memory" in out.lower() else "failed"
        r["tail"] = out[-2000:]
    return r


def throughput(args):
    """tenax (no recomputation, then selective as issue 33's anchor) beside PyTorch eager and
    compiled, one after another in this call; the ratios against the best tenax run."""
    s = shape(args)
    data = os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    tokens = s["seq"] * s["batch"] * (s["steps"] + 6) + 1
    write_tokens(os.path.join(data, "train.bin"), tokens, s["vocab"], 1)
    write_tokens(os.path.join(data, "val.bin"), s["seq"] * 2 + 1, s["vocab"], 2)
    result = {"ok": False, "shape": s}
    result["tenax"] = tenax_throughput(args, s, "throughput", {}, profile=True)
    # The same with tenax's GPU paths off (training.fused_kernels): what they buy, in this call.
    result["tenax_plain"] = tenax_throughput(args, s, "throughput-plain",
                                             {"training.fused_kernels": "false"})
    # Float8 block matmuls (training.mixed_precision = "fp8", issue 33's 1.30x goal) against the
    # bf16 run above. Not part of `ok` until it has run once on a GPU: its error is kept.
    result["tenax_fp8"] = tenax_throughput(args, s, "throughput-fp8",
                                           {"training.mixed_precision": "fp8"})
    if result["tenax"].get("ok") and result["tenax_fp8"].get("ok"):
        result["fp8_over_bf16"] = round(result["tenax_fp8"]["tokens_per_s"] /
                                        result["tenax"]["tokens_per_s"], 3)
    if args.tenax_only:  # a short lease: tenax's A/B alone, the baselines from an earlier call
        result["ok"] = result["tenax"].get("ok", False) and result["tenax_plain"].get("ok", False)
        if result["ok"]:
            result["fused_over_plain"] = round(result["tenax"]["tokens_per_s"] /
                                               result["tenax_plain"]["tokens_per_s"], 3)
        return result
    result["tenax_selective_ac"] = tenax_throughput(
        args, s, "throughput-sac", {"parallelism.activation_checkpoint": "selective"})
    result["eager"] = torch_throughput(args, s, "eager", args.bench_timeout,
                                       table=os.path.join(args.out, "profile-eager.txt"))
    if args.dry_run:
        result["compile"] = {"ok": False, "skipped": "dry run: inductor's CPU compile is slow"}
    else:
        result["compile"] = torch_throughput(args, s, "compile", args.compile_timeout)
    good = {k: result[k] for k in ("tenax", "tenax_selective_ac") if result[k].get("ok")}
    if result["tenax"].get("ok") and result["tenax_plain"].get("ok"):
        result["fused_over_plain"] = round(result["tenax"]["tokens_per_s"] /
                                           result["tenax_plain"]["tokens_per_s"], 3)
    if not good:
        return result
    best = max(good, key=lambda k: good[k]["tokens_per_s"])
    result["best_tenax"] = best
    fpt = good[best]["flops_per_token"]
    peak = good[best]["mfu"] and good[best]["tokens_per_s"] * fpt / good[best]["mfu"]
    for k in ("eager", "compile"):
        r = result[k]
        if r.get("ok"):
            r["mfu"] = round(r["tokens_per_s"] * fpt / peak, 4) if peak else None
            result[f"tenax_over_{k}"] = round(good[best]["tokens_per_s"] / r["tokens_per_s"], 3)
    # Every tenax run and the eager baseline must have run; the compiled one may fail (its
    # error is kept): it is a baseline, not tenax.
    result["ok"] = (len(good) == 2 and result["tenax_plain"].get("ok", False) and
                    result["eager"].get("ok", False))
    return result


def hf_logits(args):
    s = shape(args)
    tenax = os.path.join(args.prebuilt, "tenax")
    runs = os.path.join(args.out, "runs")
    cmd = [tenax, "train", "--defaults", "--set", "data.source=synthetic",
           "--set", f"training.device={s['device']}", "--set", "training.steps=20",
           "--set", "job.name=hf", "--set", f"job.dump_folder={runs}",
           "--set", "metrics.progress=never", "--set", "checkpoint.async=false"]
    code, out, dt = run(cmd, 300)
    if code != 0:
        return {"ok": False, "error": "training the small model failed", "tail": out[-3000:]}
    ckpt = os.path.join(runs, "hf", "checkpoints")
    hf = os.path.join(args.out, "hf")
    shutil.rmtree(hf, ignore_errors=True)
    code, out, _ = run([tenax, "export-hf", ckpt, "--out", hf], 300)
    if code != 0:
        return {"ok": False, "error": "export-hf failed", "tail": out[-3000:]}
    vocab = json.load(open(os.path.join(hf, "config.json")))["vocab_size"]
    import torch
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, vocab, (2, 32), generator=g)
    tokens = os.path.join(args.out, "hf-tokens.txt")
    with open(tokens, "w") as f:
        for row in ids.tolist():
            f.write(" ".join(map(str, row)) + "\n")
    logits = os.path.join(args.out, "hf-tenax-logits.safetensors")
    code, out, _ = run([os.path.join(args.prebuilt, "bench", "bench_logits"), ckpt, tokens, logits,
                        s["device"]], 300)
    if code != 0:
        return {"ok": False, "error": "bench_logits failed", "tail": out[-3000:]}
    code, out, dt = run([sys.executable, os.path.join(ROOT, "bench", "hf_logits.py"), hf, tokens,
                         logits, s["device"]], 300)
    try:
        result = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "error": "hf_logits.py printed no result", "tail": out[-3000:]}
    return result


# Cheap checks before the long measurement, whose torch.compile baseline comes last of all: a run
# cut short by the lease loses the least.
STEPS = [("machine", machine), ("build", build), ("gpu_tests", gpu_tests),
         ("hf_logits", hf_logits), ("throughput", throughput)]


def main():
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="folder for gpu-check.json and gpu-check.log")
    ap.add_argument("--dry-run", action="store_true", help="the CPU parts, tiny shapes (CI)")
    ap.add_argument("--prebuilt", help="a build folder to use instead of building here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--steps", type=int, default=8, help="training steps of the throughput run")
    ap.add_argument("--only", default="", help="comma-separated steps (machine is always run, "
                    "and build with --prebuilt)")
    ap.add_argument("--build-timeout", type=int, default=330)
    ap.add_argument("--bench-timeout", type=int, default=150)
    ap.add_argument("--compile-timeout", type=int, default=240)
    ap.add_argument("--tenax-only", action="store_true",
                    help="throughput: tenax with its GPU paths on and off only (no baselines, "
                    "no recomputation run), for a lease too short for the whole comparison")
    ap.add_argument("--pack", metavar="DIR", help="here: lay build/'s binaries and the libraries "
                    "they need into DIR, for --prebuilt DIR on the GPU machine; then exit")
    args = ap.parse_args()
    if args.pack:
        return pack(args)
    if not args.out:
        ap.error("OUTDIR is required (unless --pack DIR)")
    if args.dry_run and not args.prebuilt:
        args.prebuilt = os.path.join(ROOT, "build")
    args.out = os.path.abspath(args.out)
    if args.prebuilt:
        args.prebuilt = os.path.abspath(args.prebuilt)
    os.makedirs(args.out, exist_ok=True)
    LOG = open(os.path.join(args.out, "gpu-check.log"), "a")
    report = {"format": "tenax-gpu-check", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                      time.gmtime()),
              "dry_run": args.dry_run, "steps": {}}
    try:
        report["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                          capture_output=True).stdout.strip() or None
    except OSError:
        report["commit"] = None
    only = set(filter(None, args.only.split(",")))
    t_all = time.time()
    path = os.path.join(args.out, "gpu-check.json")

    def save():  # after every step: a run cut short by the lease still leaves what it measured
        report["seconds"] = round(time.time() - t_all, 1)
        report["ok"] = all(r.get("ok") for r in report["steps"].values())
        with open(path + ".tmp", "w") as f:
            json.dump(report, f, indent=2)
        os.replace(path + ".tmp", path)

    for name, fn in STEPS:
        # machine always; build too with --prebuilt (free, and a pack is made runnable there:
        # skipping it left the binaries without their libraries)
        if only and name not in only and name != "machine" and not (
                name == "build" and args.prebuilt):
            continue
        log(f"{name} ...")
        t0 = time.time()
        try:
            result = fn(args)
        except Exception as e:  # noqa: BLE001 - a failed step is recorded, the rest still run
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        result.setdefault("seconds", round(time.time() - t0, 1))
        report["steps"][name] = result
        log(f"{name}: {'ok' if result.get('ok') else 'FAILED'} in {result['seconds']} s"
            + (f" ({result.get('error')})" if result.get("error") else ""))
        save()
        if name == "build" and not result.get("ok"):
            break  # nothing else can run without binaries
    tp = report["steps"].get("throughput", {})
    for k in ("tenax", "tenax_plain", "tenax_fp8", "tenax_selective_ac", "eager", "compile"):
        r = tp.get(k)
        if r:
            log(f"throughput {k}: {r.get('tokens_per_s')} tokens/s, MFU {r.get('mfu')}, peak "
                f"{r.get('peak_allocated_gib')} GiB{'' if r.get('ok') else ' ' + str(r.get('error') or r.get('skipped'))}")
    if tp:
        log(f"tenax/eager {tp.get('tenax_over_eager')}, tenax/compile {tp.get('tenax_over_compile')}, "
            f"fp8/bf16 {tp.get('fp8_over_bf16')}")
    log(f"{'ok' if report['ok'] else 'FAILED'} in {report['seconds']} s; {path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
