#include "tenax/plan/layout.h"

#include <fmt/format.h>

#include <sstream>

#include "tenax/plan/units.h"

namespace tenax::plan {

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kOp:
      return "op";
    case Recompute::kAlternate:
      return "alternate";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

const char* PipeScheduleName(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::k1F1B:
      return "1f1b";
    case PipeSchedule::kZbv:
      return "zbv";
    case PipeSchedule::kDualPipeV:
      return "dualpipev";
  }
  return "?";
}

std::string LayoutName(const Layout& l) {
  std::string s = fmt::format("tp{}", l.tp);
  if (l.cp > 1) s += fmt::format(" cp{}", l.cp);
  s += fmt::format(" pp{}", l.pp);
  if (l.vpp > 1) s += fmt::format("v{}", l.vpp);
  if (l.schedule != PipeSchedule::k1F1B) s += fmt::format(" {}", PipeScheduleName(l.schedule));
  if (l.first_layers > 0 || l.last_layers > 0) {
    s += fmt::format(" split{}/{}", l.first_layers, l.last_layers);
  }
  // FSDP (ZeRO-3) reshards parameters after forward; the distributed optimizer (ZeRO-1/2,
  // Megatron's --use-distributed-optimizer) shards only optimizer state and gradients. Either
  // shards over dp_shard x cp (Layout::shard), so "cp8 fsdp1" is FSDP over the 8 CP ranks.
  const char* shard = l.reshard ? "fsdp" : "dopt";
  if (l.dp_replicate > 1 && l.shard() > 1) {
    s += fmt::format(" h{}{}x{}", shard, l.dp_replicate, l.dp_shard);
  } else if (l.shard() > 1) {
    s += fmt::format(" {}{}", shard, l.dp_shard);
  } else if (l.dp_replicate > 1) {
    s += fmt::format(" ddp{}", l.dp_replicate);
  } else {
    s += " dp1";
  }
  if (l.ep > 1) s += fmt::format(" ep{}", l.ep);
  s += fmt::format(" mbs{}x{}", l.micro_batch, l.micro_batches);
  s += fmt::format(" ac={}", RecomputeName(l.recompute));
  s += l.fp8 ? " fp8" : " bf16";
  return s;
}

bool LayoutConstraints::Allows(const Layout& l) const {
  auto ok = [](const auto& pin, auto v) { return !pin || *pin == v; };
  return ok(tp, l.tp) && ok(cp, l.cp) && ok(pp, l.pp) && ok(vpp, l.vpp) && ok(dp, l.dp()) &&
         ok(dp_replicate, l.dp_replicate) && ok(dp_shard, l.dp_shard) &&
         ok(micro_batch, l.micro_batch) && ok(recompute, l.recompute) && ok(fp8, l.fp8) &&
         ok(reshard, l.reshard) && ok(first_layers, l.first_layers) &&
         ok(last_layers, l.last_layers) && ok(ep, l.ep);
}

Result<LayoutConstraints> ParseLayoutConstraints(const std::string& text) {
  LayoutConstraints c;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument(fmt::format("--fix '{}': expected key=value, e.g. tp=8", item));
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto integer = [&](std::optional<int64_t>* out) -> Status {
      TENAX_ASSIGN_OR_RETURN(int64_t v, ParsePositiveInt(value, "--fix " + key));
      *out = v;
      return Status::Ok();
    };
    auto count = [&](std::optional<int64_t>* out) -> Status {  // >= 0
      if (value == "0") {
        *out = 0;
        return Status::Ok();
      }
      return integer(out);
    };
    auto boolean = [&](std::optional<bool>* out) -> Status {
      if (value == "yes" || value == "true" || value == "on" || value == "1")
        *out = true;
      else if (value == "no" || value == "false" || value == "off" || value == "0")
        *out = false;
      else
        return InvalidArgument(fmt::format("--fix {}={}: expected yes or no", key, value));
      return Status::Ok();
    };
    if (key == "tp")
      TENAX_RETURN_IF_ERROR(integer(&c.tp));
    else if (key == "cp")
      TENAX_RETURN_IF_ERROR(integer(&c.cp));
    else if (key == "pp")
      TENAX_RETURN_IF_ERROR(integer(&c.pp));
    else if (key == "v" || key == "vpp")
      TENAX_RETURN_IF_ERROR(integer(&c.vpp));
    else if (key == "dp")
      TENAX_RETURN_IF_ERROR(integer(&c.dp));
    else if (key == "dp_replicate")
      TENAX_RETURN_IF_ERROR(integer(&c.dp_replicate));
    else if (key == "dp_shard" || key == "fsdp")
      TENAX_RETURN_IF_ERROR(integer(&c.dp_shard));
    else if (key == "mbs")
      TENAX_RETURN_IF_ERROR(integer(&c.micro_batch));
    else if (key == "ep")
      TENAX_RETURN_IF_ERROR(integer(&c.ep));
    else if (key == "fp8")
      TENAX_RETURN_IF_ERROR(boolean(&c.fp8));
    else if (key == "reshard")
      TENAX_RETURN_IF_ERROR(boolean(&c.reshard));
    else if (key == "first")
      TENAX_RETURN_IF_ERROR(count(&c.first_layers));
    else if (key == "last")
      TENAX_RETURN_IF_ERROR(count(&c.last_layers));
    else if (key == "ac") {
      bool found = false;
      for (Recompute r : kAllRecompute) {
        if (value == RecomputeName(r)) {
          c.recompute = r;
          found = true;
        }
      }
      if (value == "sel") {
        c.recompute = Recompute::kSelective;
        found = true;
      }
      if (!found) {
        return InvalidArgument("--fix ac=" + value +
                               ": expected none, selective (Megatron: the attention core), op "
                               "(torchtitan's per-op policy), alternate (every second layer) or "
                               "full");
      }
    } else {
      return InvalidArgument(fmt::format(
          "--fix: unknown key '{}'; keys: tp cp pp v dp dp_replicate dp_shard ep mbs ac fp8 "
          "reshard first last",
          key));
    }
  }
  return c;
}

}  // namespace tenax::plan
