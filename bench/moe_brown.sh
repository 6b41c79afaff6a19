#!/usr/bin/env bash
# debug-moe (8 experts, 2 per token, both layers MoE) on the Brown corpus (byte tokenizer), one
# CPU process: does it learn, and how balanced are the experts at the end, with Switch
# Transformer's balancing loss (the preset's coefficient 0.01), without it, and with DeepSeek-V3's
# sigmoid router and selection-bias balancing instead. Prints a Markdown table: the loss at the
# first and last step, the validation loss at the end, and the expert imbalance (tokens of the
# busiest expert / mean tokens per expert; 1 is balanced, 4 = E / k means every token goes to the
# same 2 experts) of the most unbalanced layer at the last step and averaged over the last 50.
#   bench/moe_brown.sh [steps=300]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
tenax=build/tenax
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common="--defaults --set data.source=brown --set model.preset=debug-moe --set training.seq_len=128
  --set training.local_batch_size=8 --set training.steps=$steps --set optimizer.lr=3e-3
  --set lr_scheduler.warmup_steps=20 --set metrics.eval_interval=$steps --set metrics.progress=never
  --set checkpoint.enable=false --set job.dump_folder=$work"
echo "debug-moe on Brown (byte tokens), $steps steps x 8 x 128 tokens, one CPU process, $(date -u +%F)"
echo
echo "| balancing | loss step 1 | loss step $steps | validation loss | imbalance at the end | imbalance, last 50 steps | aux loss at the end |"
echo "|---|---:|---:|---:|---:|---:|---:|"
run() {  # name, description, settings
  $tenax train $common --set job.name=$1 $3 > "$work/$1.log" 2>&1 || { tail -20 "$work/$1.log" >&2; exit 1; }
  python3 - "$work/$1/metrics.jsonl" "$2" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "loss" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
tail = train[-50:]
print(f"| {sys.argv[2]} | {train[0]['loss']:.3f} | {train[-1]['loss']:.3f} | {val[-1]:.3f} | "
      f"{train[-1]['moe_max_imbalance']:.2f} | "
      f"{sum(r['moe_max_imbalance'] for r in tail) / len(tail):.2f} | {train[-1]['moe_aux_loss']:.3f} |")
EOF
}
run aux "softmax router, aux loss coef 0.01 (preset)" ""
run none "softmax router, no balancing (coef 0)" "--set model.moe_aux_loss_coef=0"
run bias "sigmoid router, selection bias rate 0.01, coef 0" \
  "--set model.moe_router=sigmoid --set model.moe_bias_update_rate=0.01 --set model.moe_aux_loss_coef=0"
