#!/usr/bin/env python3
"""Runs PyTorch's own pipeline schedules, as PyTorch builds them, through a dependency simulation:
how long one step takes when each rank executes its action list in order, each stage's forward
and backward take the given time, and a stage waits for the stage before it (forward) or after it
(backward), plus a point-to-point hop between ranks. No GPU and no process group: the action lists
come from torch.distributed.pipelining's schedule visualizer (mocked stages).

  pipeline_schedule_sim.py [--pp 8] [--hop-ms 1.6] [--json]

It checks `tenax plan`'s pipeline model (slowest rank x (micro-batches + (pp - 1) / v), fill and
drain at the slowest rank's pace) on the case where the planner is furthest from a published run:
torchtitan's Llama 3.1 405B on 512 H100 (TP 8, PP 8, FSDP 8, Table 5 of
benchmarks/llama3_h100_202412_torchtitan.md), 1F1B with 8 micro-batches of 4 sequences against
Interleaved1F1B with 16 micro-batches of 2 and two stages per rank, which torchtitan measured at
100 and 128 tokens/s per GPU (a 1.28x gain) and the planner predicts at a 1.53x gain. The stage
times are the planner's (`tenax plan ... --explain` of those two rows: one layer forward+backward
161.09 ms at micro-batch 4 and 81.56 ms at 2, output layer and loss 100.17 / 50.19 ms, embedding
6.52 / 3.27 ms) with torchtitan's layer split (generate_split_points at 9dec370: 15/16.../15 for
1F1B, 7/8.../7 for two stages per rank), a quarter of each layer's time forward (full
recomputation: the forward again in backward, whose own work is twice the forward).

The 1F1B lists are the textbook ones (PyTorch's Schedule1F1B runs that order on one stage per
rank); the interleaved ones are ScheduleInterleaved1F1B's `_calculate_single_rank_operations`.
docs/planner.md ("Reading the tables") records what it showed.
"""
import argparse
import json
import sys


def simulate(ops, n_stages, t_fwd, t_bwd, hop):
    """Makespan and the busiest rank's work (same unit as the times) of per-rank action lists
    [(kind, stage, micro-batch)], each rank running its list in order."""
    ranks = len(ops)
    stage_rank = {s: r for r, lst in enumerate(ops) for (_, s, _) in lst}
    done, free, busy, at = {}, [0.0] * ranks, [0.0] * ranks, [0] * ranks
    moved = True
    while moved:
        moved = False
        for r in range(ranks):
            while at[r] < len(ops[r]):
                kind, s, i = ops[r][at[r]]
                if kind == "F":
                    deps = [(s - 1, "F", i)] if s > 0 else []
                    key, cost = (s, "F", i), t_fwd[s]
                else:
                    deps = [(s + 1, "B", i)] if s < n_stages - 1 else [(s, "F", i)]
                    key, cost = (s, "B", i), t_bwd[s]
                if any(d not in done for d in deps):
                    break
                ready = [done[d] + (hop if stage_rank[d[0]] != r else 0.0) for d in deps]
                start = max([free[r]] + ready)
                done[key] = free[r] = start + cost
                busy[r] += cost
                at[r] += 1
                moved = True
    if any(at[r] != len(ops[r]) for r in range(ranks)):
        sys.exit("the schedule deadlocked: an action waits for one that never runs")
    return max(free), max(busy)


def one_f_one_b(pp, m):
    ops = []
    for r in range(pp):
        warm = min(pp - 1 - r, m)
        lst = [("F", r, i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                lst.append(("F", r, f))
                f += 1
            lst.append(("B", r, b))
            b += 1
        ops.append(lst)
    return ops


def interleaved(pp, m, v):
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    from torch.distributed.pipelining.schedules import _ComputationType as C

    kinds = {C.FORWARD: "F", C.FULL_BACKWARD: "B"}
    return [[(kinds[a.computation_type], a.stage_index, a.microbatch_index)
             for a in rank if a is not None and a.computation_type in kinds]
            for rank in get_schedule_ops("Interleaved1F1B", pp, m, v)]


def stage_times(layers, layer_ms, out_ms, emb_ms, fwd_share=0.25):
    t_fwd = [n * layer_ms * fwd_share for n in layers]
    t_bwd = [n * layer_ms * (1 - fwd_share) for n in layers]
    t_fwd[0] += emb_ms / 3
    t_bwd[0] += emb_ms * 2 / 3
    t_fwd[-1] += out_ms / 3
    t_bwd[-1] += out_ms * 2 / 3
    return t_fwd, t_bwd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--hop-ms", type=float, default=1.6,
                    help="point-to-point time per hop between ranks (ms); the planner's send of "
                         "one micro-batch-2 activation shard across nodes is ~1.6 ms")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    pp = a.pp
    rows = []
    # Equal stages, no hop: the schedules' own bubbles.
    for name, ops, n_stages, m, v in (("1F1B", one_f_one_b(pp, pp), pp, pp, 1),
                                      ("Interleaved1F1B", interleaved(pp, 2 * pp, 2), 2 * pp,
                                       2 * pp, 2)):
        unit = 1.0 / v  # one micro-batch through one rank's share of the model: forward 1 / v
        span, work = simulate(ops, n_stages, [unit] * n_stages, [2 * unit] * n_stages, 0.0)
        rows.append({"case": "equal stages", "schedule": name, "microbatches": m,
                     "bubble": (span - work) / work, "textbook_bubble": (pp - 1) / v / m})
    # torchtitan's 405B rows, with the planner's stage times.
    n_layers = 126
    cases = {}
    for name, m, v, layer_ms, out_ms, emb_ms in (("1F1B", pp, 1, 161.09, 100.17, 6.52),
                                                 ("Interleaved1F1B", 2 * pp, 2, 81.56, 50.19,
                                                  3.27)):
        n_stages = pp * v
        base, extra = divmod(n_layers, n_stages)
        layers = [base] + [base + 1] * extra + [base] * (n_stages - 1 - extra)
        layers[-1] = n_layers - sum(layers[:-1])
        t_fwd, t_bwd = stage_times(layers, layer_ms, out_ms, emb_ms)
        ops = one_f_one_b(pp, m) if v == 1 else interleaved(pp, m, v)
        span, work = simulate(ops, n_stages, t_fwd, t_bwd, a.hop_ms)
        cases[name] = span
        rows.append({"case": "torchtitan 405B, Table 5", "schedule": name, "microbatches": m,
                     "stage_layers": f"{layers[0]}/{layers[1]}.../{layers[-1]}",
                     "step_s": span / 1e3, "busiest_rank_s": work / 1e3})
    gain = cases["1F1B"] / cases["Interleaved1F1B"]
    if a.json:
        print(json.dumps({"rows": rows, "interleaving_gain": gain, "measured_gain": 128 / 100},
                         indent=1))
        return
    for r in rows:
        print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in r.items()))
    print(f"interleaving gain, simulated: {gain:.3f}x; torchtitan measured 1.28x (128 / 100)")


if __name__ == "__main__":
    main()
