#!/usr/bin/env python3
"""An exported Hugging Face folder's logits in transformers against tenax's own (scripts/gpu-check).

  hf_logits.py HF_DIR TOKENS.txt TENAX_LOGITS.safetensors [cpu|cuda]

TOKENS.txt holds one sequence of ids per line (bench_logits read the same file); the tenax logits
come from build/bench/bench_logits on the same checkpoint. transformers loads the folder as a
user would (AutoModelForCausalLM, fp32, TF32 off) on the device and runs the same tokens. Prints
one JSON object: the largest absolute difference, the same relative to the largest logit, whether
every position's argmax agrees, and "ok": the relative difference is within 1e-4 (fp32 both
sides, only the summation order differs) and every argmax agrees. Exit code 0 when ok.
"""
import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    hf_dir, tokens_path, tenax_path = argv[:3]
    device = argv[3] if len(argv) > 3 else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = [[int(t) for t in line.split()] for line in open(tokens_path) if line.strip()]
    tokens = torch.tensor(rows, dtype=torch.long, device=device)
    import transformers
    version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
    # `dtype` replaced `torch_dtype` in 4.56; the GPU machines may have an older release.
    kwargs = {"dtype" if version >= (4, 56) else "torch_dtype": torch.float32}
    model = AutoModelForCausalLM.from_pretrained(hf_dir, **kwargs).to(device).eval()
    with torch.no_grad():
        got = model(tokens).logits.float().cpu()
    want = load_file(tenax_path)["logits"].float()
    if got.shape != want.shape:
        print(json.dumps({"ok": False, "error": f"shapes differ: transformers {list(got.shape)}, "
                                                f"tenax {list(want.shape)}"}))
        return 1
    diff = (got - want).abs().max().item()
    scale = max(want.abs().max().item(), 1e-30)
    argmax = bool((got.argmax(-1) == want.argmax(-1)).all().item())
    result = {"ok": diff / scale <= 1e-4 and argmax, "device": device,
              "transformers": __import__("transformers").__version__,
              "shape": list(want.shape), "max_abs_diff": diff, "max_rel_diff": diff / scale,
              "argmax_agrees": argmax}
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
