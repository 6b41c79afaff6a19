#!/usr/bin/env python3
"""What the libraries users use say about tenax's files: the tests run this with .deps/venv's
python and compare its answers with tenax's own (tests/transformers_interop_test.cc,
tests/llama3_tokenizer_test.cc, tests/train_e2e_test.cc). Nothing here reimplements a format: every
answer comes from the library itself.

Usage:
  interop_libs.py versions
      {"transformers": "5.24.0", ...}: the versions of the libraries below, one JSON line.
  interop_libs.py tokenizers TOKENIZER_JSON < TEXTS.jsonl > IDS.jsonl
      tokenizers.Tokenizer.from_file, encode(text, add_special_tokens=False): one JSON list of ids
      per input line (a JSON string).
  interop_libs.py tiktoken TOKENIZER_MODEL < TEXTS.jsonl > IDS.jsonl
      tiktoken.Encoding over the ranks file (load_tiktoken_bpe) with Llama 3's pattern (Meta's
      tokenizer.py), encode_ordinary(text).
  interop_libs.py tensorboard TB_DIR > SCALARS.jsonl
      tensorboard's EventAccumulator over the folder (every event, no sampling): one line
      {"tag", "step", "value"} per scalar, in the order it returns them.
  interop_libs.py prometheus SCRAPE_1 SCRAPE_2
      Parses two scrapes of /metrics (bodies, in order) with prometheus_client's parser and checks
      its conventions: every family typed, counters named *_total in the exposition, counters never
      lower in the second scrape. Prints {"families": N, "samples": N, "counters": [...]}; exits 1
      naming the first problem.
  interop_libs.py hf-load HF_DIR REQUEST.json OUT.safetensors
      AutoTokenizer and AutoModelForCausalLM (fp32) from the folder. REQUEST: {"texts": [...],
      "window": T, "prompt": [ids], "new_tokens": N}. OUT: "ids_<i>" (the tokenizer's ids of text i,
      with its BOS), "tokens" (B, T: the first T ids of each text), "logits" (B, T, V float32),
      "generated" (the N ids generate() adds to the prompt, greedy) and "margins" (float32: how far
      each generated token's logit lies above the runner-up's).
  interop_libs.py hf-save KIND SEED DTYPE MAX_SHARD_SIZE OUT_DIR TOKENS.safetensors LOGITS.safetensors
      A small random model made by transformers itself (KIND llama or mixtral, torch.manual_seed(SEED)),
      saved with save_pretrained in DTYPE (float32 or bfloat16; MAX_SHARD_SIZE e.g. 5GB or 20KB).
      Then the saved folder is loaded back in float32 and its logits on TOKENS' "tokens" (B, T
      int64) are written as "logits".
  interop_libs.py parquet-write DOCS.jsonl OUT.parquet ROW_GROUP_SIZE COMPRESSION TYPE
      A Parquet file written by pyarrow as the Hugging Face hub serves datasets: an int64 "id"
      column, then "text" holding DOCS' lines (each a JSON string, or null) as TYPE (string or
      large_string; int64 writes the row numbers instead, a column that is not text), in row
      groups of ROW_GROUP_SIZE rows, COMPRESSION one of pyarrow's codecs (snappy, zstd, none);
      every page carries its CRC.
"""
import json
import sys

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                  r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The models hf-save makes: shapes tenax's importer must map (GQA, untied head, a vocabulary that
# is not a power of two), small enough to save and load in a second.
SMALL = dict(vocab_size=301, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
             rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
             bos_token_id=1, eos_token_id=2, initializer_range=0.1)


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def read_texts():
    return [json.loads(line) for line in sys.stdin if line.strip()]


def versions():
    import importlib.metadata as md
    names = ["transformers", "tokenizers", "tiktoken", "tensorboard", "prometheus_client",
             "safetensors", "pyarrow", "torch"]
    out = {}
    for n in names:
        try:
            out[n] = md.version(n.replace("_", "-"))
        except md.PackageNotFoundError:
            out[n] = None
    print(json.dumps(out))


def encode_tokenizers(path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    for text in read_texts():
        print(json.dumps(tok.encode(text, add_special_tokens=False).ids))


def encode_tiktoken(path):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    enc = tiktoken.Encoding(name="tenax-test", pat_str=LLAMA3_PATTERN,
                            mergeable_ranks=load_tiktoken_bpe(path), special_tokens={})
    for text in read_texts():
        print(json.dumps(enc.encode_ordinary(text)))


def tensorboard_scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            print(json.dumps({"tag": tag, "step": e.step, "value": e.value}))


def prometheus(first, second):
    from prometheus_client.parser import text_string_to_metric_families
    scrapes = []
    for path in (first, second):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            families = list(text_string_to_metric_families(text))
        except Exception as e:  # the parser raises ValueError (and others) on bad input
            fail(f"{path}: prometheus_client cannot parse it: {e!r}")
        samples = {}
        for fam in families:
            if fam.type == "unknown":
                fail(f"{path}: family {fam.name} has no TYPE line")
            if not fam.documentation:
                fail(f"{path}: family {fam.name} has no HELP text")
            for s in fam.samples:
                if fam.type == "counter" and not s.name.endswith(("_total", "_created")):
                    fail(f"{path}: counter sample {s.name} does not end in _total")
                samples[(s.name, tuple(sorted(s.labels.items())))] = (fam.type, s.value)
        scrapes.append((families, samples))
    (fams1, before), (fams2, after) = scrapes
    counters = sorted({k[0] for k, (t, _) in after.items() if t == "counter"})
    for key, (kind, value) in before.items():
        if kind != "counter" or key not in after:
            continue
        if after[key][1] < value:
            fail(f"counter {key[0]}{dict(key[1])} went down: {value} then {after[key][1]}")
    print(json.dumps({"families": len(fams2), "samples": len(after), "counters": counters}))


def hf_load(folder, request_path, out_path):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    with open(request_path, encoding="utf-8") as f:
        req = json.load(f)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    out = {}
    windows = []
    for i, text in enumerate(req["texts"]):
        ids = tok(text)["input_ids"]
        out[f"ids_{i}"] = torch.tensor(ids, dtype=torch.int64)
        if len(ids) < req["window"]:
            fail(f"text {i} has {len(ids)} tokens, fewer than the window {req['window']}")
        windows.append(ids[:req["window"]])
    tokens = torch.tensor(windows, dtype=torch.int64)
    with torch.no_grad():
        out["tokens"] = tokens
        out["logits"] = model(input_ids=tokens).logits.float().contiguous()
        prompt = torch.tensor([req["prompt"]], dtype=torch.int64)
        gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=req["new_tokens"], min_new_tokens=req["new_tokens"],
                             output_scores=True, return_dict_in_generate=True,
                             pad_token_id=tok.eos_token_id)
    out["generated"] = gen.sequences[0, prompt.shape[1]:].contiguous()
    margins = []
    for scores in gen.scores:  # raw logits under greedy decoding with no processors
        top = torch.topk(scores[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    out["margins"] = torch.tensor(margins, dtype=torch.float32)
    save_file(out, out_path)


def hf_save(kind, seed, dtype, max_shard_size, folder, tokens_path, logits_path):
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM
    torch.manual_seed(int(seed))
    if kind == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        config = LlamaConfig(**SMALL)
        model = LlamaForCausalLM(config)
    elif kind == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM
        config = MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2)
        model = MixtralForCausalLM(config)
    else:
        fail(f"unknown model kind {kind!r} (llama or mixtral)")
    # The default init leaves norms at 1; random norms make a mixed-up norm weight show.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model = model.to({"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype])
    model.save_pretrained(folder, max_shard_size=max_shard_size)
    back = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    back.eval()
    tokens = load_file(tokens_path)["tokens"]
    with torch.no_grad():
        logits = back(input_ids=tokens).logits.float().contiguous()
    save_file({"logits": logits}, logits_path)


def parquet_write(docs_path, out, row_group_size, compression, type_name):
    import pyarrow as pa
    import pyarrow.parquet as pq
    with open(docs_path, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    if type_name == "int64":
        text = pa.array(range(len(docs)), pa.int64())
    else:
        text = pa.array(docs, {"string": pa.string(), "large_string": pa.large_string()}[type_name])
    table = pa.table({"id": pa.array(range(len(docs)), pa.int64()), "text": text})
    pq.write_table(table, out, row_group_size=int(row_group_size), compression=compression,
                   write_page_checksum=True)


def main(argv):
    commands = {
        "versions": (versions, 0),
        "tokenizers": (encode_tokenizers, 1),
        "tiktoken": (encode_tiktoken, 1),
        "tensorboard": (tensorboard_scalars, 1),
        "prometheus": (prometheus, 2),
        "hf-load": (hf_load, 3),
        "hf-save": (hf_save, 7),
        "parquet-write": (parquet_write, 5),
    }
    if len(argv) < 2 or argv[1] not in commands or len(argv) - 2 != commands[argv[1]][1]:
        fail(__doc__)
    commands[argv[1]][0](*argv[2:])


if __name__ == "__main__":
    main(sys.argv)
