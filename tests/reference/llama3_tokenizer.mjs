// The independent Llama 3 tokenizer tenax's C++ one is checked against: the npm package
// llama3-tokenizer-js (its own JavaScript BPE over Hugging Face-style merges, its own regex
// engine). Nothing of the package is committed; ./scripts/setup installs it into .deps/.
//
//   node llama3_tokenizer.mjs derive OUTDIR
//       Writes the package's vocabulary in the two formats tenax reads:
//         OUTDIR/tokenizer.model           tiktoken ("BASE64 RANK" per line, 128,000 lines)
//         OUTDIR/hf/tokenizer.json         Hugging Face byte-level BPE (vocab, merges, specials)
//         OUTDIR/hf/tokenizer_config.json  bos/eos as Meta's Llama 3 base model names them
//   node llama3_tokenizer.mjs encode
//       stdin: one JSON string per line; stdout: one JSON list of ids per line (no BOS/EOS).
//       The package recognises special-token text (<|eot_id|>) in its input.
//
// The package is found at $LLAMA3_TOKENIZER_JS, else .deps/node_modules/llama3-tokenizer-js
// beside this repository's root.
import { createInterface } from 'node:readline';
import { mkdirSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const pkg = process.env.LLAMA3_TOKENIZER_JS ||
    join(root, '.deps', 'node_modules', 'llama3-tokenizer-js');
const bundle = join(pkg, 'bundle', 'llama3-tokenizer-with-baked-data.js');
if (!existsSync(bundle)) {
  console.error(`llama3-tokenizer-js not found at ${pkg}; run ./scripts/setup`);
  process.exit(3);
}
const tokenizer = (await import(pathToFileURL(bundle).href)).default;

// GPT-2's byte <-> character mapping used by byte-level vocabularies (written out here from its
// definition so this file does not depend on the package's private helpers).
function byteLevelDecoder() {
  const printable = [];
  for (let b = 0; b < 256; b++) {
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae) printable.push(b);
  }
  const map = new Map();
  let next = 256;
  for (let b = 0; b < 256; b++) {
    map.set(String.fromCodePoint(printable.includes(b) ? b : next++), b);
  }
  return map;
}

function derive(outDir) {
  const decoder = byteLevelDecoder();
  const NUM_BASE = 128000;
  const vocab = tokenizer.vocabById;
  if (vocab.length !== NUM_BASE + 256) throw new Error(`unexpected vocabulary size ${vocab.length}`);
  const lines = [];
  for (let id = 0; id < NUM_BASE; id++) {
    const bytes = [...vocab[id]].map((c) => {
      if (!decoder.has(c)) throw new Error(`token ${id} has a non-byte-level character`);
      return decoder.get(c);
    });
    lines.push(`${Buffer.from(bytes).toString('base64')} ${id}`);
  }
  mkdirSync(join(outDir, 'hf'), { recursive: true });
  writeFileSync(join(outDir, 'tokenizer.model'), lines.join('\n') + '\n');

  const vocabObj = {};
  for (let id = 0; id < NUM_BASE; id++) vocabObj[vocab[id]] = id;
  const merges = [...tokenizer.merges.keys()];  // insertion order is priority order
  const added = [];
  for (let id = NUM_BASE; id < vocab.length; id++) {
    added.push({ id, content: vocab[id], single_word: false, lstrip: false, rstrip: false,
                 normalized: false, special: true });
  }
  const pattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " +
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const tokenizerJson = {
    version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false } ] },
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } },
               { Sequence: { id: 'A', type_id: 0 } }],
      pair: [], special_tokens: {} },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true,
             vocab: vocabObj, merges },
  };
  writeFileSync(join(outDir, 'hf', 'tokenizer.json'), JSON.stringify(tokenizerJson));
  writeFileSync(join(outDir, 'hf', 'tokenizer_config.json'), JSON.stringify(
      { bos_token: '<|begin_of_text|>', eos_token: '<|end_of_text|>' }, null, 2) + '\n');
  console.log(`wrote ${NUM_BASE} tokens and ${merges.length} merges to ${outDir}`);
}

async function encode() {
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  const out = [];
  for await (const line of rl) {
    if (line === '') continue;
    out.push(JSON.stringify(tokenizer.encode(JSON.parse(line), { bos: false, eos: false })));
    if (out.length >= 256) process.stdout.write(out.splice(0).join('\n') + '\n');
  }
  if (out.length) process.stdout.write(out.join('\n') + '\n');
}

const [cmd, arg] = process.argv.slice(2);
if (cmd === 'derive' && arg) derive(arg);
else if (cmd === 'encode') await encode();
else {
  console.error('usage: node llama3_tokenizer.mjs derive OUTDIR | encode');
  process.exit(2);
}
