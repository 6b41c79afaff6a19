#!/usr/bin/env python3
"""scripts/gpu-check: the one command to run on a lent GPU machine (see scripts/gpu-check).

Steps, each timed, each with its own result in OUTDIR/gpu-check.json (the log beside it):
  machine     GPU, driver, torch, CUDA and NCCL versions, CPU cores
  build       tenax against the machine's own torch (cmake + make), or a build carried in
              (--prebuilt DIR); seconds either way
  gpu_tests   ctest -L gpu: passed / failed / skipped, by name
  throughput  Llama 3 8B layer shapes, 8 layers, seq 8192, bf16, random tokens: `tenax train`
              (tokens/s, MFU, peak memory from its metrics.jsonl) beside PyTorch eager
              (bench/llama_eager.py) on the same shape in the same call
  hf_logits   a small model trained on the device, exported with `tenax export-hf`; its logits
              from tenax (bench_logits) against transformers' on the device (bench/hf_logits.py)
--dry-run runs the same steps on the CPU with tiny shapes (no GPU, the existing build/): what CI
runs, so the plumbing cannot rot between loans. Exit code 0 when every step is ok (in a dry run
the GPU tests must all skip, none pass).
"""
import argparse
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


def build(args):
    if args.prebuilt:
        if not os.path.exists(os.path.join(args.prebuilt, "tenax")):
            return {"ok": False, "error": f"--prebuilt {args.prebuilt} has no tenax binary"}
        return {"ok": True, "mode": "prebuilt", "dir": args.prebuilt, "seconds": 0}
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
    bdir = args.prebuilt
    junit = os.path.join(args.out, "gpu-tests.xml")
    code, out, dt = run(["ctest", "--test-dir", bdir, "-L", "gpu", "--output-on-failure",
                         "--timeout", "300", "--output-junit", junit], 900)
    if not os.path.exists(junit):
        return {"ok": False, "error": "ctest wrote no results (were the GPU tests built?)",
                "tail": out[-3000:]}
    cases, reasons = {}, set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        status = case.get("status", "run")
        failed = case.find("failure") is not None or status == "fail"
        skipped = case.find("skipped") is not None or status in ("notrun", "disabled")
        cases[case.get("name")] = "failed" if failed else "skipped" if skipped else "passed"
        if skipped:  # the test's own line: "skipped: <why>"
            reasons.update(re.findall(r"skipped: ([^\n]+)", case.findtext("system-out") or ""))
    counts = {k: sum(1 for v in cases.values() if v == k) for k in ("passed", "failed", "skipped")}
    reasons = sorted(reasons)
    if args.dry_run:
        # No GPU here: every GPU test must skip and say why; one that passes would be a fake.
        ok = (counts["passed"] == 0 and counts["failed"] == 0 and
              counts["skipped"] == len(cases) > 0 and len(reasons) > 0)
    else:
        ok = code == 0 and counts["failed"] == 0 and counts["passed"] == len(cases) > 0
    return {"ok": ok, "seconds": round(dt, 1), **counts, "tests": cases, "skip_reasons": reasons}


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
                batch=1, steps=args.steps, device="cuda")


def throughput(args):
    s = shape(args)
    data = os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    tokens = s["seq"] * s["batch"] * (s["steps"] + 4) + 1
    write_tokens(os.path.join(data, "train.bin"), tokens, s["vocab"], 1)
    write_tokens(os.path.join(data, "val.bin"), s["seq"] * 2 + 1, s["vocab"], 2)
    tenax = os.path.join(args.prebuilt, "tenax")
    sets = {
        "job.name": "throughput", "job.dump_folder": os.path.join(args.out, "runs"),
        "data.source": "tokens", "data.path": os.path.join(data, "train.bin"),
        "data.val_path": os.path.join(data, "val.bin"),
        "model.preset": "debug-tiny", "model.dim": s["dim"], "model.n_layers": s["layers"],
        "model.n_heads": s["heads"], "model.n_kv_heads": s["kv_heads"],
        "model.ffn_hidden_dim": s["ffn"], "model.vocab_size": s["vocab"],
        "model.max_seq_len": s["seq"], "training.seq_len": s["seq"],
        "training.local_batch_size": s["batch"], "training.steps": s["steps"],
        "training.device": s["device"], "training.mixed_precision": "bf16",
        "checkpoint.enable": "false", "metrics.eval_interval": 0, "metrics.log_interval": 1,
        "metrics.eval_tokens": s["seq"],
        "metrics.progress": "never", "metrics.tensorboard": "false",
    }
    cmd = [tenax, "train", "--defaults"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    code, out, dt = run(cmd, args.bench_timeout)
    result = {"ok": False, "shape": s, "tenax": {"exit_code": code, "seconds": round(dt, 1)}}
    metrics = os.path.join(args.out, "runs", "throughput", "metrics.jsonl")
    steps = []
    if os.path.exists(metrics):
        steps = [json.loads(l) for l in open(metrics) if '"tokens_per_s"' in l]
    if code != 0 or not steps:
        result["tenax"]["tail"] = out[-3000:]
        return result
    timed = steps[2:] if len(steps) > 3 else steps[-1:]  # the first steps warm up
    tps = statistics.median(st["tokens_per_s"] for st in timed)
    flops_per_token = timed[-1]["flops_per_s"] / timed[-1]["tokens_per_s"]
    mfu = [st["mfu"] for st in timed if st.get("mfu") is not None]
    result["tenax"].update({
        "tokens_per_s": round(tps), "mfu": round(statistics.median(mfu), 4) if mfu else None,
        "model_tflops": round(tps * flops_per_token / 1e12, 1),
        "peak_allocated_gib": round(max(st["mem_peak_bytes"] for st in steps) / 2**30, 2),
        "peak_reserved_gib": round(max(st.get("mem_peak_reserved_bytes", 0) for st in steps)
                                   / 2**30, 2),
        "steps_timed": len(timed), "loss_last": timed[-1]["loss"]})
    # PyTorch eager, same shape, same process layout (one process, one device).
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    ecmd = [sys.executable, os.path.join(ROOT, "bench", "llama_eager.py")] + [
        str(s[k]) for k in ("dim", "layers", "heads", "kv_heads", "ffn", "vocab")] + [
        "bf16", str(s["seq"]), str(s["batch"]), str(max(2, s["steps"] - 2)), "0", s["device"]]
    code, out, dt = run(ecmd, args.bench_timeout, env=env)
    eager = {"exit_code": code, "seconds": round(dt, 1)}
    m = re.search(r"impl=eager .*", out)
    if code == 0 and m:
        kv = dict(p.split("=", 1) for p in m.group(0).split() if "=" in p)
        eager.update({k: float(v) if re.fullmatch(r"[-0-9.e]+", v) else v for k, v in kv.items()})
        e_tps = float(kv["tokens_per_s"])
        peak = result["tenax"]["mfu"] and (tps * flops_per_token / result["tenax"]["mfu"])
        eager["mfu"] = round(e_tps * flops_per_token / peak, 4) if peak else None
        result["tenax_over_eager"] = round(tps / e_tps, 3)
    else:
        eager["error"] = "out of memory" if "out of memory" in out.lower() else "failed"
        eager["tail"] = out[-2000:]
    result["eager"] = eager
    result["ok"] = True
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


STEPS = [("machine", machine), ("build", build), ("gpu_tests", gpu_tests),
         ("throughput", throughput), ("hf_logits", hf_logits)]


def main():
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="folder for gpu-check.json and gpu-check.log")
    ap.add_argument("--dry-run", action="store_true", help="the CPU parts, tiny shapes (CI)")
    ap.add_argument("--prebuilt", help="a build folder to use instead of building here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--steps", type=int, default=8, help="training steps of the throughput run")
    ap.add_argument("--only", default="", help="comma-separated steps (machine is always run)")
    ap.add_argument("--build-timeout", type=int, default=330)
    ap.add_argument("--bench-timeout", type=int, default=150)
    args = ap.parse_args()
    if args.dry_run and not args.prebuilt:
        args.prebuilt = os.path.join(ROOT, "build")
    args.out = os.path.abspath(args.out)
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
        if only and name not in only and name != "machine":
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
    if tp.get("tenax"):
        log(f"throughput: tenax {tp['tenax'].get('tokens_per_s')} tokens/s "
            f"(MFU {tp['tenax'].get('mfu')}), eager {tp.get('eager', {}).get('tokens_per_s')} "
            f"tokens/s, ratio {tp.get('tenax_over_eager')}")
    log(f"{'ok' if report['ok'] else 'FAILED'} in {report['seconds']} s; {path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
