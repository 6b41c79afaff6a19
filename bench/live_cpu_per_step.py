#!/usr/bin/env python3
"""Where a live-recovery bench run's time went: the rank processes' CPU seconds per step.

bench/live_recovery.sh with KEEP=DIR keeps each run's metrics.jsonl and a once-a-second sample of
every rank process's CPU time (<run>.cpu). Given that folder and the bench's JSON (OUT), this
prints, for the unfailed live-mode run and the one with kills:
  - the calm steps' median wall time and the ranks' CPU seconds per step (all rank processes
    together) before the first kill and after the last kill's window;
  - in the run with kills, each rank process's CPU seconds per step after the last kill's window,
    the ranks started with the run first, the replacements after them.
A gap between the two runs that is there before the first kill, in CPU seconds per step as in
wall time, is the machine's speed from one run to the next, not the recovery's; replacements
that compute as fast as the ranks they joined leave no lasting cost.

BENCH.json is the bench's OUT: its kill steps and the calm steps' medians are taken from there.

Usage: bench/live_cpu_per_step.py KEEP_DIR BENCH.json [OUT.json]
"""
import bisect
import collections
import json
import sys


def load(keep, name):
    steps = {}
    for line in open(f"{keep}/{name}.metrics.jsonl"):
        r = json.loads(line)
        if "step_time_s" in r:
            steps[r["step"]] = r["time"]
    samples = collections.defaultdict(list)  # pid -> [(time, CPU seconds)]
    for line in open(f"{keep}/{name}.cpu"):
        t, pid, user, system, _threads, comm = line.split()[:6]
        if comm == "(tenax-torch)":
            samples[int(pid)].append((float(t), (int(user) + int(system)) / 100.0))
    return steps, samples


def cpu_at(samples, t):
    """A process's CPU seconds at time t, interpolated between its samples (0 before it began)."""
    times = [x[0] for x in samples]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return samples[0][1] if t >= times[0] - 1.5 else 0.0
    if i >= len(times):
        return samples[-1][1]
    (t0, c0), (t1, c1) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0)


def summarize(keep, bench):
    # The kills' steps and windows, and the calm steps' medians between kills (before the first,
    # after each), as the bench computed them for its within-run figure.
    kills, window = bench["kill_steps"], bench["kill_window_steps"]
    within = bench["live_within_run"]
    calm = {"live": within["calm_step_s_between_kills"],
            "clean-live": within["control"]["calm_step_s_between_kills"]}
    out = {}
    for name in ("clean-live", "live"):
        steps, samples = load(keep, name)

        def cpu_per_step(a, b):
            return sum(cpu_at(p, steps[b]) - cpu_at(p, steps[a]) for p in samples.values()) / (b - a)

        last = max(steps)
        after = kills[-1] + window
        row = {"calm_step_s_before": calm[name][0],
               "calm_step_s_after": calm[name][-1],
               "cpu_s_per_step_before": cpu_per_step(min(steps) + 1, kills[0] - 1),
               "cpu_s_per_step_after": cpu_per_step(after, last)}
        if name == "live":
            start = steps[min(steps)]
            per = []
            for p in sorted(samples.values(), key=lambda p: p[0][0]):
                if p[0][0] > steps[after] or p[-1][0] < steps[last] - 2:
                    continue  # not training through the whole window (a standby, a killed rank)
                c = (cpu_at(p, steps[last]) - cpu_at(p, steps[after])) / (last - after)
                if c > 0.1:
                    per.append({"started": "with the run" if p[0][0] < start else "replacement",
                                "cpu_s_per_step": c})
            row["ranks_after"] = per
        out[name] = row
    return out


def main():
    keep, bench_path = sys.argv[1], sys.argv[2]
    s = summarize(keep, json.load(open(bench_path)))
    u, v = s["clean-live"], s["live"]
    for when in ("before", "after"):
        print(f"{'before the first kill' if when == 'before' else 'after the last kill'}: calm step "
              f"{v[f'calm_step_s_{when}']:.3f} s with kills against {u[f'calm_step_s_{when}']:.3f} s "
              f"unfailed ({v[f'calm_step_s_{when}'] / u[f'calm_step_s_{when}']:.3f}); the ranks' CPU "
              f"{v[f'cpu_s_per_step_{when}']:.3f} s per step against "
              f"{u[f'cpu_s_per_step_{when}']:.3f} s "
              f"({v[f'cpu_s_per_step_{when}'] / u[f'cpu_s_per_step_{when}']:.3f})")
    print("each rank after the last kill, CPU s per step: "
          + "; ".join(f"{r['started']} {r['cpu_s_per_step']:.3f}" for r in v["ranks_after"]))
    if len(sys.argv) > 3:
        json.dump(s, open(sys.argv[3], "w"), indent=1)


if __name__ == "__main__":
    main()
