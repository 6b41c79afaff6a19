#include "tenax/parallel/pipeline.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <utility>

#include "tenax/core/check.h"
#include "tenax/core/torch_errors.h"
#include "tenax/protocol/exit_report.h"

namespace tenax::parallel {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

using torch::autograd::Edge;
using torch::autograd::Node;
using torch::autograd::variable_list;

// What a split backward's W needs from its I (zbv, dualpipev; pipeline_schedule.h). The I pass
// computes only the stage input's gradient: autograd skips every branch that leads only to
// parameters, so the weight-gradient GEMMs do not run. Before it, each node where a parameter's
// branch leaves the input's path (the matmul of a linear layer, the product of a norm's weight)
// gets a hook that keeps the gradient arriving at it; W then runs autograd from those nodes, one
// group at a time, to their parameters only, which computes the weight gradients alone
// (torch.distributed.pipelining's stage_backward_input / stage_backward_weight do the same).
struct WeightGroup {
  std::shared_ptr<Node> node;            // where the parameters' branch leaves the input path
  std::shared_ptr<variable_list> grads;  // the gradients that reached it in the I pass
  torch::autograd::edge_list params;     // the parameters' gradient edges below it
  std::vector<size_t> param_index;       // into model.params(), in the order of `params`
};
struct DeferredWeights {
  at::Tensor root, root_grad;  // the output whose graph W walks (kept alive until W); stage 0:
                               // the whole backward runs in W, from root with root_grad
  std::vector<WeightGroup> groups;
};

// Keeps the first gradients a node receives.
struct KeepGradients : torch::autograd::FunctionPreHook {
  explicit KeepGradients(std::shared_ptr<variable_list> into) : into_(std::move(into)) {}
  variable_list operator()(const variable_list& grads) override {
    if (into_->empty()) *into_ = grads;
    return grads;
  }
  std::shared_ptr<variable_list> into_;
};

// The weight groups of the graph below `root` whose stage input is the leaf `input`, for the
// parameters params[i], i in `owned` (see WeightGroup).
std::vector<WeightGroup> FindWeightGroups(const at::Tensor& root, const at::Tensor& input,
                                          const std::vector<model::NamedTensor>& params,
                                          const std::vector<size_t>& owned) {
  std::unordered_map<Node*, size_t> param_of;  // a parameter's gradient accumulator -> index
  for (size_t i : owned) {
    const at::Tensor& t = params[i].tensor;
    if (t.requires_grad()) param_of[torch::autograd::impl::grad_accumulator(t).get()] = i;
  }
  const Node* input_node = torch::autograd::impl::grad_accumulator(input).get();
  // Whether a node leads to the input (bit 1) and to a parameter (bit 2), post-order.
  std::unordered_map<Node*, uint8_t> reach;
  std::vector<std::pair<Node*, size_t>> stack;
  Node* top = root.grad_fn().get();
  TENAX_CHECK(top != nullptr);
  stack.push_back({top, 0});
  reach[top] = 0;
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->num_outputs()) {
      Node* child = node->next_edge(next++).function.get();
      if (child != nullptr && reach.emplace(child, 0).second) stack.push_back({child, 0});
      continue;
    }
    uint8_t r = node == input_node ? 1 : param_of.count(node) ? 2 : 0;
    for (const Edge& e : node->next_edges()) {
      if (e.function) r |= reach[e.function.get()];
    }
    reach[node] = r;
    stack.pop_back();
  }
  std::vector<WeightGroup> groups;
  for (const auto& [node, r] : reach) {
    if (!(r & 1) || node == input_node) continue;
    WeightGroup g;
    std::vector<Node*> todo;
    for (const Edge& e : node->next_edges()) {
      if (e.function && reach[e.function.get()] == 2) todo.push_back(e.function.get());
    }
    if (todo.empty()) continue;
    // The parameters below the branches that leave the input path here.
    std::unordered_map<Node*, bool> seen;
    while (!todo.empty()) {
      Node* n = todo.back();
      todo.pop_back();
      if (!seen.emplace(n, true).second) continue;
      if (auto it = param_of.find(n); it != param_of.end()) {
        g.params.push_back(torch::autograd::impl::gradient_edge(params[it->second].tensor));
        g.param_index.push_back(it->second);
      }
      for (const Edge& e : n->next_edges()) {
        if (e.function && reach[e.function.get()] == 2) todo.push_back(e.function.get());
      }
    }
    g.node = node->getptr();
    g.grads = std::make_shared<variable_list>();
    node->add_pre_hook(std::make_unique<KeepGradients>(g.grads));
    groups.push_back(std::move(g));
  }
  // A fixed order (the graph's sequence numbers: the order of the forward) so that every run and
  // every rank accumulates the weight gradients alike.
  std::sort(groups.begin(), groups.end(), [](const WeightGroup& a, const WeightGroup& b) {
    return a.node->sequence_nr() > b.node->sequence_nr();
  });
  return groups;
}

void AccumulateInto(at::Tensor& param, const at::Tensor& g) {
  if (!g.defined()) return;
  at::Tensor& grad = param.mutable_grad();
  if (grad.defined()) {
    grad.add_(g);
  } else {
    grad = g.detach().clone();
  }
}

// A split backward's W: the weight gradients of each group, accumulated into .grad.
void RunWeightGradients(DeferredWeights& d, std::vector<model::NamedTensor>& params) {
  TENAX_CHECK(d.root.defined());
  if (d.root_grad.defined()) {  // stage 0: the whole backward
    torch::autograd::backward({d.root}, {d.root_grad});
    return;
  }
  for (WeightGroup& g : d.groups) {
    torch::autograd::edge_list roots;
    variable_list grads;
    for (size_t k = 0; k < g.grads->size(); ++k) {
      if ((*g.grads)[k].defined()) {
        roots.emplace_back(g.node, static_cast<uint32_t>(k));
        grads.push_back((*g.grads)[k]);
      }
    }
    if (roots.empty() || g.params.empty()) continue;
    variable_list dw = torch::autograd::Engine::get_default_engine().execute(
        roots, grads, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false,
        g.params);
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < dw.size(); ++i) AccumulateInto(params[g.param_index[i]].tensor, dw[i]);
  }
}

}  // namespace

// Everything one step allocates, indexed by Slot(kind, micro-batch, chunk) of this rank.
struct PipelineExecutor::StepState {
  std::vector<at::Tensor> tokens, targets;  // [micro-batch] (B / m, T)
  std::vector<at::Tensor> inputs;   // [slot of F] received activation, a leaf (B / m, T, C);
                                    // undefined on stage 0, which embeds tokens instead
  std::vector<at::Tensor> outputs;  // [slot of F] stage output (B / m, T, C), or the loss () on
                                    // the last stage; kept with its graph until the backward
  std::vector<at::Tensor> inbox;    // [slot of consumer] received or handed-over tensor
  std::vector<at::Tensor> outbox;   // [slot of producer] tensor waiting for its Send
  std::vector<PendingCollective> receiving;  // [slot of consumer] posted, not yet waited for
  std::vector<DeferredWeights> deferred;     // [slot of F] between a split backward's I and W
  at::Tensor loss_sum;                       // () fp64, last stage only
  int in_flight = 0;
  StepTimeline timeline;
  int64_t rows = 0, seq = 0;  // micro-batch shape (B / m, T)
};

namespace {

// A pipeline step's failure as the rest of the trainer reports one: a send or receive whose peer
// went away is secondary (another rank failed first), as an exception from a collective is.
Status PipelineFailure(const Status& st) {
  if (st.ok() || !protocol::IsPeerLostError(st.message())) return st;
  return protocol::PeerLostError(st.message());
}

// B, I and W of a (micro-batch, chunk) share one slot: the gradient's.
size_t Slot(const PipelinePlan& plan, ActionKind kind, int mb, int chunk) {
  const int m = plan.microbatches, v = plan.virtual_stages;
  return static_cast<size_t>(((kind == ActionKind::kForward ? 0 : 1) * m + mb) * v + chunk);
}

}  // namespace

Result<std::unique_ptr<PipelineExecutor>> PipelineExecutor::Create(StageModel& model,
                                                                   Communicator& comm,
                                                                   PipelineOptions options) {
  TENAX_ASSIGN_OR_RETURN(
      PipelinePlan plan,
      BuildSchedule(options.schedule, comm.size(), options.microbatches, options.virtual_stages));
  TENAX_ASSIGN_OR_RETURN(std::vector<LayerRange> layers,
                         SplitLayers(model.spec().n_layers, comm.size(), options.virtual_stages));
  // The order of sends and receives that keeps blocking point-to-point calls deadlock-free; every
  // rank derives the same programs from the same plan (see BuildPrograms).
  TENAX_ASSIGN_OR_RETURN(auto programs, BuildPrograms(plan));
  std::unique_ptr<PipelineExecutor> ex(
      new PipelineExecutor(model, comm, std::move(options), std::move(plan), std::move(layers)));
  ex->program_ = std::move(programs[static_cast<size_t>(comm.rank())]);
  return ex;
}

PipelineExecutor::PipelineExecutor(StageModel& model, Communicator& comm, PipelineOptions options,
                                   PipelinePlan plan, std::vector<LayerRange> stage_layers)
    : model_(model),
      comm_(comm),
      options_(std::move(options)),
      plan_(std::move(plan)),
      stage_layers_(std::move(stage_layers)) {
  const int r = comm_.rank();
  for (int c = 0; c < plan_.virtual_stages; ++c) {
    chunk_layers_.push_back(stage_layers_[static_cast<size_t>(plan_.StageOf(r, c))]);
  }
  const auto& params = model_.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<int> owners = OwningRanks(params[i].name);
    if (std::find(owners.begin(), owners.end(), r) != owners.end()) owned_.push_back(i);
  }
}

PipelineExecutor::~PipelineExecutor() = default;

std::vector<int> PipelineExecutor::OwningRanks(const std::string& name) const {
  const int last = plan_.RankOf(plan_.num_stages() - 1), first = plan_.RankOf(0);
  std::vector<int> out;
  if (name == "tok_embeddings.weight") {
    out.push_back(first);
    if (model_.spec().tie_embeddings && last != first) out.push_back(last);
  } else if (name == "norm.weight" || name == "output.weight") {
    out.push_back(last);
  } else if (name.rfind("layers.", 0) == 0) {
    const int64_t layer = std::stoll(name.substr(7));
    for (int s = 0; s < plan_.num_stages(); ++s) {
      const LayerRange& lr = stage_layers_[static_cast<size_t>(s)];
      if (lr.begin <= layer && layer < lr.end) out.push_back(plan_.RankOf(s));
    }
  }
  return out;
}

void PipelineExecutor::RunCompute(StepState& st, const Action& a) {
  const int me = comm_.rank(), S = plan_.num_stages(), m = plan_.microbatches;
  const int stage = plan_.StageOf(me, a.chunk);
  const LayerRange& layers = stage_layers_[static_cast<size_t>(stage)];
  const size_t f = Slot(plan_, ActionKind::kForward, a.microbatch, a.chunk);
  if (a.kind == ActionKind::kForward) {
    at::Tensor h;
    if (stage == 0) {
      h = model_.Embed(st.tokens[static_cast<size_t>(a.microbatch)], options_.compute_dtype);
    } else {
      // A fresh leaf: the backward stops here and leaves the gradient in input.grad() for the
      // previous stage.
      at::Tensor input = std::move(st.inbox[f]);
      TENAX_CHECK(input.defined());
      input.requires_grad_(true);
      st.inputs[f] = input;
      h = input;
    }
    h = model_.Blocks(h, layers.begin, layers.end);  // (B / m, T / tp, C)
    if (stage == S - 1) {
      at::Tensor loss = model_.HeadLoss(h, st.targets[static_cast<size_t>(a.microbatch)]);  // ()
      st.outputs[f] = loss;
      at::Tensor l = loss.detach().to(at::kDouble);
      st.loss_sum = st.loss_sum.defined() ? st.loss_sum + l : l;
    } else {
      st.outputs[f] = h;
      const int next = plan_.RankOf(stage + 1);
      const size_t dst = Slot(plan_, ActionKind::kForward, a.microbatch, plan_.ChunkOf(stage + 1));
      if (next == me) {
        st.inbox[dst] = h.detach();  // p == 1: the next chunk is ours
      } else {
        st.outbox[f] = h.detach();
      }
    }
    st.timeline.peak_in_flight = std::max(st.timeline.peak_in_flight, ++st.in_flight);
    return;
  }

  const size_t b = Slot(plan_, ActionKind::kBackward, a.microbatch, a.chunk);
  if (a.kind == ActionKind::kBackwardWeight) {
    RunWeightGradients(st.deferred[f], model_.params());
    st.deferred[f] = DeferredWeights();
    --st.in_flight;
    return;
  }
  at::Tensor out = std::move(st.outputs[f]);
  TENAX_CHECK(out.defined());
  // Each micro-batch's loss is a mean over its B / m * T tokens; dividing by m makes the sum of
  // the micro-batch gradients the gradient of the full batch's mean.
  at::Tensor root = stage == S - 1 ? out / static_cast<double>(m) : out;
  at::Tensor root_grad = stage == S - 1 ? at::ones_like(root) : std::move(st.inbox[b]);
  TENAX_CHECK(root_grad.defined());  // dL/d(output) (B / m, T, C) from the next stage
  const bool split = a.kind == ActionKind::kBackwardInput;
  if (split && stage == 0) {
    // Nothing waits for stage 0's input gradient: its whole backward is weight gradients.
    st.deferred[f] = {root, root_grad, {}};
    return;
  }
  at::Tensor g;  // dL/d(input) (B / m, T, C), stages > 0
  if (!split) {
    torch::autograd::backward({root}, {root_grad});
    if (stage > 0) g = std::move(st.inputs[f]).grad();
  } else {
    at::Tensor input = std::move(st.inputs[f]);
    DeferredWeights d{root, at::Tensor(), FindWeightGroups(root, input, model_.params(), owned_)};
    variable_list gi = torch::autograd::Engine::get_default_engine().execute(
        {torch::autograd::impl::gradient_edge(root)}, {root_grad}, /*keep_graph=*/true,
        /*create_graph=*/false, /*accumulate_grad=*/false,
        {torch::autograd::impl::gradient_edge(input)});
    g = gi[0];
    st.deferred[f] = std::move(d);
  }
  if (stage > 0) {
    TENAX_CHECK(g.defined());
    const int prev = plan_.RankOf(stage - 1);
    if (prev == me) {
      st.inbox[Slot(plan_, ActionKind::kBackward, a.microbatch, plan_.ChunkOf(stage - 1))] = g;
    } else {
      st.outbox[b] = g;
    }
  }
  if (!split) --st.in_flight;
}

// The slot of the message a compute action consumes, if it receives one: a forward's activation
// (stages after the first) or a B / I's output gradient (stages before the last). A W consumes
// nothing.
std::optional<size_t> PipelineExecutor::InputSlot(const Action& a) const {
  const int stage = plan_.StageOf(comm_.rank(), a.chunk);
  if (a.kind == ActionKind::kForward) {
    if (stage == 0) return std::nullopt;
    return Slot(plan_, a.kind, a.microbatch, a.chunk);
  }
  if (a.kind == ActionKind::kBackwardWeight || stage == plan_.num_stages() - 1) return std::nullopt;
  return Slot(plan_, ActionKind::kBackward, a.microbatch, a.chunk);
}

void PipelineExecutor::RunStep(StepState& st) {
  const at::TensorOptions act =
      at::TensorOptions().dtype(options_.compute_dtype).device(model_.device());
  const Clock::time_point t0 = Clock::now();
  std::vector<PendingCollective> sends;  // waited for at the end of the step
  auto record = [&](StepType type, const ProgramStep& e, Clock::time_point start) {
    TimelineEvent rec{type, e.action, e.stage, Seconds(t0, start), Seconds(t0, Clock::now())};
    const double d = rec.end_s - rec.start_s;
    (type == StepType::kCompute ? st.timeline.compute_s
     : type == StepType::kSend  ? st.timeline.send_s
                                : st.timeline.recv_s) += d;
    st.timeline.events.push_back(rec);
  };
  for (const ProgramStep& e : program_) {
    if (e.type == StepType::kCompute) {
      // Receives are posted where the program pairs them and waited for only here, by the
      // compute that uses the message: a rank never blocks on a message its next compute does
      // not need (the wait is the timeline's receive span, not compute).
      if (std::optional<size_t> in = InputSlot(e.action); in && st.receiving[*in].pending()) {
        const Clock::time_point start = Clock::now();
        st.receiving[*in].Wait();
        record(StepType::kRecv, e, start);
      }
    }
    const Clock::time_point start = Clock::now();
    switch (e.type) {
      case StepType::kCompute:
        RunCompute(st, e.action);
        if (options_.on_action) options_.on_action(e.action);
        break;
      case StepType::kSend: {
        at::Tensor& t = st.outbox[Slot(plan_, e.action.kind, e.action.microbatch, e.action.chunk)];
        TENAX_CHECK(t.defined());  // the ordering rule guarantees the producer ran
        // Not waited for here: a blocking send would hold this rank until its peer reaches the
        // matching receive, which the program may place after that peer's next compute.
        sends.push_back(comm_.SendAsync(t, e.peer, e.tag));
        t = at::Tensor();
        break;
      }
      case StepType::kRecv: {
        // (B / m, T / tp, C): with tensor parallelism each rank passes its sequence shard.
        at::Tensor buf =
            at::empty({st.rows, st.seq / model_.sequence_shards(), model_.spec().dim}, act);
        const size_t slot = Slot(plan_, e.action.kind, e.action.microbatch, e.action.chunk);
        st.receiving[slot] = comm_.RecvAsync(buf, e.peer, e.tag);
        st.inbox[slot] = buf;
        break;
      }
    }
    record(e.type, e, start);
  }
  for (PendingCollective& r : st.receiving) TENAX_CHECK(!r.pending());  // every one consumed
  for (PendingCollective& s : sends) s.Wait();
  TENAX_CHECK(st.in_flight == 0);
  if (options_.barrier_for_timing) comm_.Barrier();
  st.timeline.step_s = Seconds(t0, Clock::now());
}

// With tied embeddings the table is used by stage 0 (lookup) and by the last stage (output
// projection), each of which accumulated only its own part of this step's gradient. Exchange the
// step's parts (not the whole .grad, so gradient accumulation over several steps stays right).
void PipelineExecutor::SumTiedEmbeddingGrad(const at::Tensor& grad_before) {
  const int first = plan_.RankOf(0), last = plan_.RankOf(plan_.num_stages() - 1);
  const int me = comm_.rank();
  at::Tensor& table = model_.params()[0].tensor;  // tok_embeddings.weight, first by contract
  TENAX_CHECK(model_.params()[0].name == "tok_embeddings.weight");
  at::NoGradGuard no_grad;
  at::Tensor grad = table.mutable_grad();
  TENAX_CHECK(grad.defined());
  at::Tensor mine = grad_before.defined() ? grad - grad_before : grad.clone();  // (V, C)
  at::Tensor theirs = at::empty_like(mine);
  const int tag = 2 * plan_.num_stages() * plan_.microbatches;  // above every activation tag
  // The first stage sends first and the last receives first: the two calls pair up.
  if (me == first) {
    comm_.Send(mine, last, tag);
    comm_.Recv(theirs, last, tag + 1);
  } else {
    comm_.Recv(theirs, first, tag);
    comm_.Send(mine, first, tag + 1);
  }
  grad.add_(theirs);
}

Result<PipelineStepResult> PipelineExecutor::Step(const at::Tensor& tokens,
                                                  const at::Tensor& targets) {
  const int m = plan_.microbatches, me = comm_.rank();
  if (tokens.dim() != 2 || targets.sizes() != tokens.sizes()) {
    return InvalidArgument(
        fmt::format("pipeline step: tokens ({}) and targets ({}) must both be (batch, seq)",
                    fmt::join(tokens.sizes(), "x"), fmt::join(targets.sizes(), "x")));
  }
  if (tokens.size(0) % m != 0) {
    return InvalidArgument(fmt::format(
        "pipeline step: batch size {} is not divisible by microbatches ({})", tokens.size(0), m));
  }
  const int last = plan_.RankOf(plan_.num_stages() - 1), first = plan_.RankOf(0);
  const bool sync_tied =
      model_.spec().tie_embeddings && first != last && (me == first || me == last);
  StepState st;
  const size_t slots = static_cast<size_t>(2 * m * plan_.virtual_stages);
  st.inputs.resize(slots);
  st.outputs.resize(slots);
  st.inbox.resize(slots);
  st.outbox.resize(slots);
  st.receiving.resize(slots);
  st.deferred.resize(slots);
  st.rows = tokens.size(0) / m;
  st.seq = tokens.size(1);
  PipelineStepResult result;
  Status status = TorchCall("pipeline step", [&] {
    st.tokens = tokens.split(st.rows, 0);
    st.targets = targets.split(st.rows, 0);
    at::Tensor tied_before;
    if (sync_tied) {
      const at::Tensor& g = model_.params()[0].tensor.grad();
      if (g.defined()) tied_before = g.clone();
    }
    if (options_.barrier_for_timing) comm_.Barrier();
    RunStep(st);
    if (sync_tied) SumTiedEmbeddingGrad(tied_before);
    // Only the last stage knows the loss; one broadcast gives every rank the same number.
    at::Tensor loss =
        me == last ? st.loss_sum.reshape({1})
                   : at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(model_.device()));
    comm_.Broadcast(loss, last);
    result.loss = loss.item<double>() / m;
  });
  if (!status.ok()) return PipelineFailure(status);
  result.timeline = std::move(st.timeline);
  return result;
}

Result<double> PipelineExecutor::EvalLoss(const at::Tensor& tokens, const at::Tensor& targets) {
  if (tokens.dim() != 2 || targets.sizes() != tokens.sizes()) {
    return InvalidArgument("pipeline evaluation: tokens and targets must both be (batch, seq)");
  }
  const int me = comm_.rank(), S = plan_.num_stages();
  const int last = plan_.RankOf(S - 1);
  // Tags above every tag Step uses (activations, then the tied-embedding pair).
  const int tag0 = 2 * S * plan_.microbatches + 2;
  double loss = 0;
  Status status = TorchCall("pipeline evaluation", [&] {
    at::NoGradGuard no_grad;
    const at::TensorOptions act =
        at::TensorOptions().dtype(options_.compute_dtype).device(model_.device());
    at::Tensor h;
    // Stages in order: each rank's stages come in increasing order, so the blocking pairs below
    // form one chain and cannot deadlock.
    for (int s = 0; s < S; ++s) {
      const int owner = plan_.RankOf(s);
      if (owner != me) continue;
      if (s == 0) {
        h = model_.Embed(tokens, options_.compute_dtype);
      } else if (plan_.RankOf(s - 1) != me) {
        h = at::empty(
            {tokens.size(0), tokens.size(1) / model_.sequence_shards(), model_.spec().dim}, act);
        comm_.Recv(h, plan_.RankOf(s - 1), tag0 + s);
      }
      const LayerRange& layers = stage_layers_[static_cast<size_t>(s)];
      h = model_.Blocks(h, layers.begin, layers.end);
      if (s == S - 1) {
        loss = model_.HeadLoss(h, targets).item<double>();
      } else if (plan_.RankOf(s + 1) != me) {
        comm_.Send(h.contiguous(), plan_.RankOf(s + 1), tag0 + s + 1);
      }
    }
    at::Tensor l =
        at::full({1}, loss, at::TensorOptions().dtype(at::kDouble).device(model_.device()));
    comm_.Broadcast(l, last);
    loss = l.item<double>();
  });
  if (!status.ok()) return PipelineFailure(status);
  return loss;
}

}  // namespace tenax::parallel
