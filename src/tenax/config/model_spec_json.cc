#include "tenax/config/model_spec_json.h"

namespace tenax {

nlohmann::json ModelSpecToJson(const ModelSpec& s) {
  nlohmann::json j = {{"name", s.name},
                      {"dim", s.dim},
                      {"n_layers", s.n_layers},
                      {"n_heads", s.n_heads},
                      {"n_kv_heads", s.n_kv_heads},
                      {"ffn_hidden_dim", s.ffn_hidden_dim},
                      {"vocab_size", s.vocab_size},
                      {"norm_eps", s.norm_eps},
                      {"rope_theta", s.rope_theta},
                      {"rope_scaling",
                       {{"enabled", s.rope_scaling.enabled},
                        {"factor", s.rope_scaling.factor},
                        {"low_freq_factor", s.rope_scaling.low_freq_factor},
                        {"high_freq_factor", s.rope_scaling.high_freq_factor},
                        {"original_max_position", s.rope_scaling.original_max_position}}},
                      {"tie_embeddings", s.tie_embeddings},
                      {"max_seq_len", s.max_seq_len},
                      {"init_std", s.init_std}};
  if (s.moe.enabled()) {  // absent for dense models, so their files are as before
    j["moe"] = {{"n_experts", s.moe.n_experts},
                {"top_k", s.moe.top_k},
                {"n_shared", s.moe.n_shared},
                {"ffn_hidden_dim", s.moe.ffn_hidden_dim},
                {"router", s.moe.router},
                {"aux_loss_coef", s.moe.aux_loss_coef},
                {"bias_update_rate", s.moe.bias_update_rate},
                {"layer_start", s.moe.layer_start},
                {"layer_interval", s.moe.layer_interval}};
  }
  return j;
}

Result<ModelSpec> ModelSpecFromJson(const nlohmann::json& j) {
  try {
    ModelSpec s;
    s.name = j.at("name").get<std::string>();
    s.dim = j.at("dim").get<int64_t>();
    s.n_layers = j.at("n_layers").get<int64_t>();
    s.n_heads = j.at("n_heads").get<int64_t>();
    s.n_kv_heads = j.at("n_kv_heads").get<int64_t>();
    s.ffn_hidden_dim = j.at("ffn_hidden_dim").get<int64_t>();
    s.vocab_size = j.at("vocab_size").get<int64_t>();
    s.norm_eps = j.at("norm_eps").get<double>();
    s.rope_theta = j.at("rope_theta").get<double>();
    const auto& rs = j.at("rope_scaling");
    s.rope_scaling.enabled = rs.at("enabled").get<bool>();
    s.rope_scaling.factor = rs.at("factor").get<double>();
    s.rope_scaling.low_freq_factor = rs.at("low_freq_factor").get<double>();
    s.rope_scaling.high_freq_factor = rs.at("high_freq_factor").get<double>();
    s.rope_scaling.original_max_position = rs.at("original_max_position").get<int64_t>();
    s.tie_embeddings = j.at("tie_embeddings").get<bool>();
    s.max_seq_len = j.at("max_seq_len").get<int64_t>();
    s.init_std = j.value("init_std", 0.02);
    if (j.contains("moe")) {
      const auto& m = j.at("moe");
      s.moe.n_experts = m.at("n_experts").get<int64_t>();
      s.moe.top_k = m.at("top_k").get<int64_t>();
      s.moe.n_shared = m.at("n_shared").get<int64_t>();
      s.moe.ffn_hidden_dim = m.at("ffn_hidden_dim").get<int64_t>();
      s.moe.router = m.at("router").get<std::string>();
      s.moe.aux_loss_coef = m.at("aux_loss_coef").get<double>();
      s.moe.bias_update_rate = m.at("bias_update_rate").get<double>();
      s.moe.layer_start = m.at("layer_start").get<int64_t>();
      s.moe.layer_interval = m.at("layer_interval").get<int64_t>();
      if (s.moe.n_experts <= 0 || s.moe.top_k <= 0 || s.moe.top_k > s.moe.n_experts ||
          s.moe.n_shared < 0 || s.moe.ffn_hidden_dim <= 0 || s.moe.layer_interval <= 0 ||
          s.moe.layer_start < 0 || (s.moe.router != "softmax" && s.moe.router != "sigmoid")) {
        return DataError("model description has inconsistent mixture-of-experts settings: " +
                         m.dump());
      }
    }
    if (s.dim <= 0 || s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 ||
        s.ffn_hidden_dim <= 0 || s.vocab_size <= 0 || s.dim % s.n_heads != 0 ||
        s.n_heads % s.n_kv_heads != 0) {
      return DataError("model description has inconsistent sizes: " + j.dump());
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    return DataError(std::string("model description is incomplete: ") + e.what());
  }
}

}  // namespace tenax
