// SentencePieceTokenizer: a client of tenax-spm (apps/spm/tenax_spm.cc), the separate program
// that links libsentencepiece. Debian's libsentencepiece (protobuf-lite) and libtorch (full
// protobuf) crash when loaded into one process, so tenax never links sentencepiece; it pipes text
// and ids through `tenax-spm encode|decode MODEL` instead. One process per call costs a few
// milliseconds (loading the model), which is noise next to tokenizing a document.
// Non-goals: a long-lived tenax-spm server (prepare is a one-off; training never tokenizes).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tenax/core/crc32.h"
#include "tenax/core/fs.h"
#include "tenax/core/subprocess.h"
#include "tenax/data/bpe_tokenizer.h"  // SlugStem
#include "tenax/data/tokenizer.h"

namespace tenax::data {
namespace {

constexpr const char* kSpmHelp =
    "sentencepiece support lives in the helper program tenax-spm, built next to tenax when "
    "libsentencepiece-dev is installed: apt-get install libsentencepiece-dev, re-run cmake, "
    "build the tenax-spm target (or set TENAX_SPM=/path/to/tenax-spm), or use --tokenizer byte";

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string spm, std::string model, std::string slug, uint32_t vocab,
                         std::optional<uint32_t> eos)
      : spm_(std::move(spm)),
        model_(std::move(model)),
        slug_(std::move(slug)),
        vocab_(vocab),
        eos_(eos) {}

  uint32_t vocab_size() const override { return vocab_; }
  std::optional<uint32_t> eos() const override { return eos_; }
  std::string name() const override { return "sentencepiece:" + model_; }
  std::string cache_slug() const override { return slug_; }

  Result<std::vector<uint32_t>> Encode(std::string_view text) const override {
    TENAX_ASSIGN_OR_RETURN(std::string out, Run("encode", text));
    if (out.size() % 4 != 0) return Internal("tenax-spm encode returned a partial id");
    std::vector<uint32_t> ids(out.size() / 4);
    std::memcpy(ids.data(), out.data(), out.size());
    return ids;
  }

  Result<std::string> Decode(const std::vector<uint32_t>& ids) const override {
    // sentencepiece rejects out-of-range ids, so decode the valid runs between them.
    std::string text, run;
    auto flush = [&]() -> Status {
      if (run.empty()) return Status::Ok();
      TENAX_ASSIGN_OR_RETURN(std::string piece, Run("decode", run));
      text += piece;
      run.clear();
      return Status::Ok();
    };
    for (uint32_t id : ids) {
      if (eos_ && id == *eos_) continue;
      if (id < vocab_) {
        run.append(reinterpret_cast<const char*>(&id), 4);
      } else {
        TENAX_RETURN_IF_ERROR(flush());
        text += "\xEF\xBF\xBD";
      }
    }
    TENAX_RETURN_IF_ERROR(flush());
    return text;
  }

 private:
  Result<std::string> Run(const char* command, std::string_view input) const {
    TENAX_ASSIGN_OR_RETURN(ProcessResult r, RunProcess({spm_, command, model_}, input));
    if (r.exit_code != 0) {
      return Internal("tenax-spm " + std::string(command) + " " + model_ + " failed (exit " +
                      std::to_string(r.exit_code) + "): " + r.err);
    }
    return std::move(r.out);
  }

  // Constant after construction.
  const std::string spm_;
  const std::string model_;
  const std::string slug_;
  const uint32_t vocab_;
  const std::optional<uint32_t> eos_;
};

}  // namespace

Result<std::string> FindSpmBinary() {
  return FindHelperProgram("tenax-spm", "TENAX_SPM", kSpmHelp);
}

bool HaveSentencePiece() { return FindSpmBinary().ok(); }

Result<std::unique_ptr<Tokenizer>> MakeSentencePieceTokenizer(const std::string& model_path) {
  Result<std::string> bytes = LocalFs().ReadFile(model_path);
  if (!bytes.ok()) return bytes.status().WithContext("loading SentencePiece model");
  TENAX_ASSIGN_OR_RETURN(std::string spm, FindSpmBinary());
  TENAX_ASSIGN_OR_RETURN(ProcessResult info, RunProcess({spm, "info", model_path}, ""));
  if (info.exit_code != 0) {
    return DataError("cannot load SentencePiece model " + model_path +
                     " (is it a .model file "
                     "written by spm_train?): " +
                     info.err);
  }
  int64_t vocab = 0, eos = -1;
  try {
    const nlohmann::json j = nlohmann::json::parse(info.out);
    vocab = j.at("vocab_size").get<int64_t>();
    eos = j.at("eos_id").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return Internal("tenax-spm info printed something unexpected (" + std::string(e.what()) +
                    "): " + info.out);
  }
  if (vocab <= 0) return DataError("SentencePiece model " + model_path + " has no pieces");
  std::optional<uint32_t> eos_id;
  if (eos >= 0) eos_id = static_cast<uint32_t>(eos);
  // The slug hashes the model's bytes: retraining a model under the same name must not reuse
  // data prepared with the old one.
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x", Crc32(*bytes));
  return std::unique_ptr<Tokenizer>(std::make_unique<SentencePieceTokenizer>(
      spm, model_path, "sp-" + SlugStem(model_path) + "-" + crc, static_cast<uint32_t>(vocab),
      eos_id));
}

}  // namespace tenax::data
