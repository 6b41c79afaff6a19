// tenax-spm: the sentencepiece half of tenax, in its own process. Debian's libsentencepiece
// (protobuf-lite) and libtorch (full protobuf) cannot share an address space, so the data layer
// talks to this program over pipes instead of linking sentencepiece.
//
//   tenax-spm info MODEL     prints {"vocab_size": N, "eos_id": E, "bos_id": B} (-1 = none)
//   tenax-spm encode MODEL   stdin: UTF-8 text; stdout: token ids as uint32 little-endian
//   tenax-spm decode MODEL   stdin: uint32 ids; stdout: UTF-8 text
// Exit codes: 0 ok, 2 usage, 3 the model could not be loaded.
#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tenax-spm info|encode|decode MODEL\n");
    return 2;
  }
  const std::string cmd = argv[1];
  sentencepiece::SentencePieceProcessor sp;
  const auto st = sp.Load(argv[2]);
  if (!st.ok()) {
    std::fprintf(stderr, "tenax-spm: cannot load sentencepiece model %s: %s\n", argv[2],
                 st.ToString().c_str());
    return 3;
  }
  std::ios::sync_with_stdio(false);
  if (cmd == "info") {
    std::printf("{\"vocab_size\": %d, \"eos_id\": %d, \"bos_id\": %d}\n", sp.GetPieceSize(),
                sp.eos_id(), sp.bos_id());
    return 0;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (cmd == "encode") {
    std::vector<int> ids;
    sp.Encode(input, &ids);
    std::vector<uint32_t> out(ids.begin(), ids.end());
    std::fwrite(out.data(), sizeof(uint32_t), out.size(), stdout);
    return 0;
  }
  if (cmd == "decode") {
    std::vector<int> ids(input.size() / 4);
    for (size_t i = 0; i < ids.size(); ++i) {
      uint32_t v;
      std::memcpy(&v, input.data() + 4 * i, 4);
      ids[i] = static_cast<int>(v);
    }
    std::string text;
    sp.Decode(ids, &text);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::fprintf(stderr, "tenax-spm: unknown command '%s' (info, encode, decode)\n", cmd.c_str());
  return 2;
}
