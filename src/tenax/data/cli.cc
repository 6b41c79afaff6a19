#include "tenax/data/cli.h"

#include <CLI/CLI.hpp>
#include <memory>

#include "tenax/data/prepare.h"
#include "tenax/data/tokenize_command.h"

namespace tenax::data {

void AddCommands(CLI::App& app, cli::Commands& commands) {
  struct PrepareFlags {
    std::vector<std::string> inputs;
    std::string tokenizer = "byte", out;
    PrepareOptions options;
    bool quiet = false;
  };
  auto p = std::make_shared<PrepareFlags>();
  auto* prepare =
      app.add_subcommand("prepare", "tokenize text, JSON Lines or Parquet into token shards");
  prepare
      ->add_option("--input", p->inputs,
                   "input files: .txt (one document each), .jsonl (one per line), optionally "
                   ".gz/.zst, or .parquet (one per row)")
      ->required();
  prepare->add_option("--tokenizer", p->tokenizer,
                      "byte | tiktoken:FILE | hf:TOKENIZER_JSON | sentencepiece:MODEL");
  prepare->add_option("--out", p->out, "output folder")->required();
  prepare->add_option("--text-field,--text-column", p->options.text_field,
                      "the JSON Lines field or Parquet column holding the text (default text)");
  prepare->add_option("--threads", p->options.threads,
                      "tokenizing threads (default: one per core)");
  prepare->add_flag("--quiet", p->quiet, "no progress line");
  commands.Add(prepare, cli::FromStatus([p] {
                 p->options.progress = !p->quiet;
                 return PrepareCommand(p->inputs, p->tokenizer, p->out, p->options);
               }));

  struct TokenizeFlags {
    std::string tokenizer;
    TokenizeOptions options;
  };
  auto t = std::make_shared<TokenizeFlags>();
  auto* tokenize = app.add_subcommand("tokenize", "token ids of stdin lines, one JSON list each");
  tokenize
      ->add_option("--tokenizer", t->tokenizer,
                   "byte | tiktoken:FILE | hf:TOKENIZER_JSON | sentencepiece:MODEL")
      ->required();
  tokenize->add_flag("--json-input", t->options.json_input,
                     "each line is a JSON string (texts with newlines)");
  tokenize->add_flag("--special", t->options.special,
                     "special-token text (<|eot_id|>) becomes the special token");
  tokenize->add_flag("--bos-eos", t->options.bos_eos, "frame each text with BOS/EOS");
  commands.Add(tokenize,
               cli::FromStatus([t] { return TokenizeCommand(t->tokenizer, t->options); }));
}

}  // namespace tenax::data
