#!/usr/bin/env python3
"""An independent Llama 3 / Mixtral forward pass in Hugging Face's conventions, for
tests/reference_test.cc.

Usage: llama_reference.py HF_DIR TOKENS.safetensors OUT.safetensors
       llama_reference.py generate HF_DIR PROMPT_IDS N OUT.json

HF_DIR holds config.json and model.safetensors (or the shards model.safetensors.index.json names)
as transformers writes them (e.g. by `tenax export-hf`). TOKENS holds int64 "tokens" (B, T) and
"targets" (B, T). OUT receives "logits" (B, T, V) float32 and "loss" (scalar float32, mean
cross-entropy of logits vs targets); for Mixtral also "aux_loss" (the mean over layers of
E * sum_e f_e P_e, f_e the fraction of the token-to-expert assignments going to expert e, P_e its
mean routing probability: Switch Transformer's balancing loss, as tenax defines it per layer) and
"router_margin" (the smallest gap between a token's k-th and (k+1)-th routing probability: where it
is tiny, fp32 and fp64 may pick different experts and a comparison would not mean anything).
`generate` continues PROMPT_IDS (comma-separated) by N greedy tokens, recomputing the whole
sequence for each (no cache), and writes {"ids": [...], "margins": [...]}: the new ids and, for
each, how far its logit lies above the runner-up's (a near-tie may legitimately flip under another
implementation's rounding; the test only trusts tokens with a clear margin).

It follows transformers' LlamaForCausalLM (modeling_llama.py) and MixtralForCausalLM
(modeling_mixtral.py: MixtralSparseMoeBlock's per-expert loop) and shares nothing with tenax: HF
tensor names, rotate_half RoPE (pairs (i, i + D/2)), Llama 3.1 "llama3" rope scaling, GQA by
repeat_kv, RMSNorm, SwiGLU, tied lm_head; Mixtral's softmax router, top-k experts with their
probabilities renormalised, experts as w2(silu(w1 x) * w3 x). Everything runs in float64 so this side's rounding is
far below tenax's fp32 rounding and a mismatch points at tenax. If transformers is importable
(the GPU machine may have it) its own model is loaded too and must agree within 1e-4.
Non-goals: KV caches, attention masks other than causal, sampling, speed.
Needs PyTorch >= 1.13 only: safetensors is parsed by hand, attention is written out.
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    """safetensors: u64 LE header length N, N bytes of JSON, then the tensors' raw bytes."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        # A fresh, writable copy per tensor: the format packs tensors without alignment.
        raw = bytearray(body[begin:end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    """Writes atomically (temp file + rename) so a killed run never leaves a half-written OUT."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def inverse_frequencies(cfg, head_dim):
    """RoPE inverse frequencies, with Llama 3.1's scaling (transformers'
    _compute_llama3_parameters): long wavelengths are divided by `factor`, short ones kept,
    and the band between is interpolated linearly in 1/wavelength."""
    base = float(cfg.get("rope_theta", 10000.0))
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    kind = rs.get("rope_type", rs.get("type"))
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r} is not implemented here")
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rms_norm(x, weight, eps):
    # transformers upcasts to fp32 at least; here x is already fp64.
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def sparse_moe(cfg, w, p, x, stats):
    """Mixtral's block: x (B, T, C) -> (B, T, C); appends (aux, margin) of the layer to stats."""
    E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    B, T, C = x.shape
    flat = x.reshape(-1, C)
    probs = (flat @ w[p + "block_sparse_moe.gate.weight"].T).softmax(-1)   # (N, E)
    ranked = probs.sort(-1, descending=True).values
    margin = (ranked[:, k - 1] - ranked[:, k]).min().item() if k < E else float("inf")
    top, chosen = probs.topk(k, -1)                                        # (N, k)
    top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(flat)
    for e in range(E):  # like transformers: each expert over the tokens that chose it
        token, slot = (chosen == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        q = f"{p}block_sparse_moe.experts.{e}."
        xe = flat[token]
        ye = (torch.nn.functional.silu(xe @ w[q + "w1.weight"].T) * (xe @ w[q + "w3.weight"].T)) \
            @ w[q + "w2.weight"].T
        out.index_add_(0, token, ye * top[token, slot].unsqueeze(-1))
    counts = torch.bincount(chosen.reshape(-1), minlength=E).to(torch.float64)
    stats.append((E * (counts / counts.sum() * probs.mean(0)).sum().item(), margin))
    return out.view(B, T, C)


def forward(cfg, w, tokens, stats=None):
    """tokens (B, T) int64 -> logits (B, T, V) float64. Mixtral layers append (aux, router
    margin) to `stats`."""
    stats = [] if stats is None else stats
    H, K = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    C, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
    D = cfg.get("head_dim") or C // H
    B, T = tokens.shape
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inverse_frequencies(cfg, D))
    emb = torch.cat((freqs, freqs), dim=-1)                # (T, D): HF's half-split layout
    cos, sin = emb.cos(), emb.sin()
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    h = w["model.embed_tokens.weight"][tokens]            # (B, T, C)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(B, T, K, D).transpose(1, 2)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(B, T, K, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # repeat_kv: query head j reads kv head j // (H / K).
        k = k.repeat_interleave(H // K, dim=1)
        v = v.repeat_interleave(H // K, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)  # (B, H, T, T)
        scores = scores.masked_fill(causal, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        h = h + y @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        if cfg.get("model_type") == "mixtral":
            h = h + sparse_moe(cfg, w, p, x, stats)
            continue
        gate = torch.nn.functional.silu(x @ w[p + "mlp.gate_proj.weight"].T)
        h = h + (gate * (x @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, w["model.norm.weight"], eps)
    tied = cfg.get("tie_word_embeddings", False)
    lm_head = w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]
    return h @ lm_head.T


def check_against_transformers(hf_dir, tokens, logits, mixtral):
    """Optional second opinion: transformers' own LlamaForCausalLM / MixtralForCausalLM, when it
    is installed."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return
    version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
    if version < (4, 43):  # rope_type "llama3" arrived in 4.43; older releases reject the config
        print(f"transformers {transformers.__version__} predates Llama 3.1; not compared",
              file=sys.stderr)
        return
    cls = transformers.MixtralForCausalLM if mixtral else transformers.LlamaForCausalLM
    # `dtype` replaced `torch_dtype` in 4.56. From 5.0 Mixtral's experts run as one grouped
    # matmul, which has no float64 kernel: the per-expert loop ("eager") is asked for instead.
    kwargs = {"dtype" if version >= (4, 56) else "torch_dtype": torch.float64}
    if mixtral and version >= (5, 0):
        kwargs["experts_implementation"] = "eager"
    model = cls.from_pretrained(hf_dir, **kwargs)
    model.eval()
    with torch.no_grad():
        theirs = model(tokens).logits
    diff = (theirs - logits).abs().max().item()
    if diff > 1e-4:
        raise AssertionError(f"transformers {transformers.__version__} disagrees with this "
                             f"reference: max |logits diff| = {diff:.3g}")
    print(f"transformers {transformers.__version__} agrees: max |logits diff| = {diff:.3g}",
          file=sys.stderr)


def read_weights(hf_dir):
    """model.safetensors, or every shard model.safetensors.index.json names."""
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(index) and not os.path.exists(os.path.join(hf_dir, "model.safetensors")):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(hf_dir, name)))
    return {name: t.to(torch.float64) for name, t in weights.items()}


def generate(argv):
    if len(argv) != 6:
        raise ValueError("usage: llama_reference.py generate HF_DIR PROMPT_IDS N OUT.json")
    hf_dir, prompt, n, out_path = argv[2], argv[3], int(argv[4]), argv[5]
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    weights = read_weights(hf_dir)
    seq = [int(x) for x in prompt.split(",")]
    ids, margins = [], []
    with torch.no_grad():
        for _ in range(n):
            logits = forward(cfg, weights, torch.tensor([seq]))[0, -1]
            top2 = torch.topk(logits, 2)
            ids.append(int(top2.indices[0]))
            margins.append(float(top2.values[0] - top2.values[1]))
            seq.append(ids[-1])
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"ids": ids, "margins": margins}, f)
    os.replace(tmp, out_path)


def main(argv):
    if len(argv) > 1 and argv[1] == "generate":
        return generate(argv)
    if len(argv) != 4:
        raise ValueError("usage: llama_reference.py HF_DIR TOKENS.safetensors OUT.safetensors")
    hf_dir, tokens_path, out_path = argv[1:]
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    weights = read_weights(hf_dir)
    batch = read_safetensors(tokens_path)
    tokens, targets = batch["tokens"].long(), batch["targets"].long()
    stats = []
    with torch.no_grad():
        logits = forward(cfg, weights, tokens, stats)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1))
    mixtral = cfg.get("model_type") == "mixtral"
    check_against_transformers(hf_dir, tokens, logits, mixtral)
    out = {"logits": logits.float(), "loss": loss.float().reshape(())}
    if mixtral:
        out["aux_loss"] = torch.tensor(sum(a for a, _ in stats) / len(stats), dtype=torch.float64)
        out["router_margin"] = torch.tensor(min(m for _, m in stats), dtype=torch.float64)
    write_safetensors(out_path, out)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except Exception as e:  # any failure must be a non-zero exit the C++ test can see
        print(f"llama_reference.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
