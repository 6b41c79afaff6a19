#include "tenax/model/fused_layers.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tenax/core/check.h"
#include "tenax/model/cpu_kernels.h"
#include "tenax/model/cpu_parallel.h"

namespace tenax::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Statistics and pointwise math run in fp32 at least; fp64 stays fp64.
at::ScalarType Widen(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// bf16 on the CPU: the one-pass loops of cpu_kernels.h, split over libtorch's threads.
bool UseCpuLoops(const at::Tensor& a, const at::Tensor& b) {
  return a.device().is_cpu() && a.scalar_type() == at::kBFloat16 &&
         b.scalar_type() == at::kBFloat16;
}
// fp32 on the CPU: the fp32 loops of cpu_kernels.h (SwiGLU's gate).
bool UseCpuFp32Loops(const at::Tensor& a, const at::Tensor& b) {
  return a.device().is_cpu() && a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
         a.sizes() == b.sizes();
}
const uint16_t* Bits(const at::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
uint16_t* MutableBits(at::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}
// The gate's loops for either element type: bf16 read as its raw bits, fp32 as floats.
template <typename T>
const T* Elements(const at::Tensor& t);
template <>
const uint16_t* Elements(const at::Tensor& t) {
  return Bits(t);
}
template <>
const float* Elements(const at::Tensor& t) {
  return t.data_ptr<float>();
}
template <typename T>
T* MutableElements(at::Tensor& t);
template <>
uint16_t* MutableElements(at::Tensor& t) {
  return MutableBits(t);
}
template <>
float* MutableElements(at::Tensor& t) {
  return t.data_ptr<float>();
}

template <typename T>
at::Tensor SiluMulLoopsForward(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor out = at::empty_like(ac, at::MemoryFormat::Contiguous);
  const T *pa = Elements<T>(ac), *pb = Elements<T>(bc);
  T* po = MutableElements<T>(out);
  ParallelFor(0, ac.numel(), kLoopGrain, [&](int64_t begin, int64_t end) {
    cpu::SiluMulForward(pa + begin, pb + begin, po + begin, end - begin);
  });
  return out;
}

template <typename T>
variable_list SiluMulLoopsBackward(const at::Tensor& a_in, const at::Tensor& b_in,
                                   const at::Tensor& g_in) {
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous(), g = g_in.contiguous();
  at::Tensor ga = at::empty_like(a, at::MemoryFormat::Contiguous);
  at::Tensor gb = at::empty_like(a, at::MemoryFormat::Contiguous);
  const T *pa = Elements<T>(a), *pb = Elements<T>(b), *pg = Elements<T>(g);
  T *pga = MutableElements<T>(ga), *pgb = MutableElements<T>(gb);
  ParallelFor(0, a.numel(), kLoopGrain, [&](int64_t begin, int64_t end) {
    cpu::SiluMulBackward(pa + begin, pb + begin, pg + begin, pga + begin, pgb + begin, end - begin);
  });
  return {ga, gb};
}

constexpr int64_t kRmsNormRowsPerBlock = 64;
// RMSNorm's loops also need the fp32 master weight (the model's; a bf16 weight takes the
// composition).
bool UseRmsNormLoops(const at::Tensor& x, const at::Tensor& weight) {
  return x.device().is_cpu() && x.scalar_type() == at::kBFloat16 &&
         weight.scalar_type() == at::kFloat && weight.dim() == 1;
}

// RMSNorm. Saves x (its own dtype) and the per-row scale r = 1 / sqrt(mean(x^2) + eps) (fp32);
// backward recomputes n = x r and uses d/dx = r (gn - n mean(gn n)), gn = g w.
struct RmsNormFn : public torch::autograd::Function<RmsNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    if (UseRmsNormLoops(x, weight)) {
      const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
      const int64_t cols = x.size(-1), rows = xc.numel() / cols;
      at::Tensor out = at::empty_like(xc, at::MemoryFormat::Contiguous);
      std::vector<int64_t> per_row = x.sizes().vec();
      per_row.back() = 1;
      at::Tensor r = at::empty(per_row, x.options().dtype(at::kFloat));
      const uint16_t* px = Bits(xc);
      const float* pw = wc.data_ptr<float>();
      uint16_t* po = MutableBits(out);
      float* pr = r.data_ptr<float>();
      ParallelFor(0, rows, std::max<int64_t>(1, kLoopGrain / cols), [&](int64_t b, int64_t e) {
        cpu::RmsNormForward(px, pw, po, pr, b, e, cols, static_cast<float>(eps));
      });
      ctx->save_for_backward({x, weight, r});
      return out;
    }
    const at::ScalarType dt = x.scalar_type();
    const at::Tensor xf = x.to(Widen(dt));
    const at::Tensor r = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);  // (..., 1)
    ctx->save_for_backward({x, weight, r});
    return (xf * r).to(dt) * weight.to(dt);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &r = saved[2];
    if (UseRmsNormLoops(x, weight) && grads[0].scalar_type() == at::kBFloat16) {
      const at::Tensor xc = x.contiguous(), wc = weight.contiguous(), g = grads[0].contiguous();
      const int64_t cols = x.size(-1), rows = xc.numel() / cols;
      const int64_t blocks = (rows + kRmsNormRowsPerBlock - 1) / kRmsNormRowsPerBlock;
      at::Tensor gx = at::empty_like(xc, at::MemoryFormat::Contiguous);
      // The weight's gradient summed per block of rows, then over the blocks in order: the same
      // bits at any thread count.
      at::Tensor per_block = at::zeros({blocks, cols}, weight.options());
      const uint16_t *px = Bits(xc), *pg = Bits(g);
      const float *pw = wc.data_ptr<float>(), *pr = r.data_ptr<float>();
      uint16_t* pgx = MutableBits(gx);
      float* pb = per_block.data_ptr<float>();
      ParallelFor(0, blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t first = blk * kRmsNormRowsPerBlock;
          cpu::RmsNormBackward(px, pw, pr, pg, pgx, pb + blk * cols, first,
                               std::min(rows, first + kRmsNormRowsPerBlock), cols);
        }
      });
      at::Tensor gw = at::zeros({cols}, weight.options());
      float* sum = gw.data_ptr<float>();
      for (int64_t blk = 0; blk < blocks; ++blk) {
        for (int64_t c = 0; c < cols; ++c) sum[c] += pb[blk * cols + c];
      }
      return {gx, gw, at::Tensor()};
    }
    const at::ScalarType f = Widen(x.scalar_type());
    at::Tensor n = x.to(f) * r;            // (..., C)
    const at::Tensor gf = grads[0].to(f);  // may alias grads[0]: never written
    at::Tensor gw = (gf * n).reshape({-1, n.size(-1)}).sum(0).to(weight.scalar_type());
    at::Tensor gn = gf * weight.to(f);                           // (..., C)
    const at::Tensor dot = (gn * n).mean(-1, /*keepdim=*/true);  // (..., 1)
    gn.sub_(n.mul_(dot)).mul_(r);
    return {gn.to(x.scalar_type()), gw, at::Tensor()};
  }
};

// x * c + swap(x) * s, swap exchanging the two members of each pair; with c = (c, c) and
// s = (-sin, sin) interleaved this is the rotation, with s = (sin, -sin) its transpose. The
// multiplications and the one addition are those of the plain composition, so fp32 results match
// it bit for bit (x1 * -s == -(x1 * s) and a + -b == a - b exactly).
at::Tensor RotatePairs(const at::Tensor& x, const at::Tensor& c, const at::Tensor& s) {
  const int64_t d = x.size(-1);
  std::vector<int64_t> pairs = x.sizes().vec();
  pairs.back() = d / 2;
  pairs.push_back(2);
  at::Tensor swapped = x.reshape(pairs).flip(-1).reshape(x.sizes());
  at::Tensor out = x * c;
  return out.add_(swapped.mul_(s));
}

// RoPE, a rotation: backward rotates the gradient by the opposite angle; nothing is saved but the
// two (1, T, 1, D) tables.
// bf16 on the CPU with fp32 tables: cpu_kernels.h's RopeRotate over the (B*T*H) rows of x.
bool UseRopeLoops(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x.device().is_cpu() && x.scalar_type() == at::kBFloat16 &&
         cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat;
}
at::Tensor RopeLoops(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     bool transposed) {
  const at::Tensor xc = x.contiguous(), c = cos.contiguous(), s = sin.contiguous();
  at::Tensor out = at::empty_like(xc, at::MemoryFormat::Contiguous);
  const int64_t t = x.size(1), h = x.size(2), d = x.size(3), rows = xc.numel() / d;
  const uint16_t* px = Bits(xc);
  const float *pc = c.data_ptr<float>(), *ps = s.data_ptr<float>();
  uint16_t* po = MutableBits(out);
  ParallelFor(0, rows, std::max<int64_t>(1, kLoopGrain / d), [&](int64_t b, int64_t e) {
    cpu::RopeRotate(px, pc, ps, po, b, e, t, h, d, transposed);
  });
  return out;
}

struct RopeFn : public torch::autograd::Function<RopeFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    if (UseRopeLoops(x, cos, sin)) {
      ctx->saved_data["cos"] = cos;
      ctx->saved_data["sin"] = sin;
      return RopeLoops(x, cos, sin, /*transposed=*/false);
    }
    const at::ScalarType dt = x.scalar_type(), f = Widen(dt);
    const int64_t t = x.size(1);
    const at::Tensor c = cos.narrow(0, 0, t).to(f), s = sin.narrow(0, 0, t).to(f);  // (T, D/2)
    const std::vector<int64_t> table = {1, t, 1, x.size(3)};
    const at::Tensor cc = at::stack({c, c}, -1).view(table);
    ctx->saved_data["c"] = cc;
    ctx->saved_data["s"] = at::stack({s, -s}, -1).view(table);  // transposed rotation
    return RotatePairs(x.to(f), cc, at::stack({-s, s}, -1).view(table)).to(dt);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (ctx->saved_data.count("cos") > 0) {  // the loops' forward: bf16 on the CPU
      return {RopeLoops(grads[0].to(at::kBFloat16), ctx->saved_data["cos"].toTensor(),
                        ctx->saved_data["sin"].toTensor(), /*transposed=*/true),
              at::Tensor(), at::Tensor()};
    }
    const at::Tensor c = ctx->saved_data["c"].toTensor(), s = ctx->saved_data["s"].toTensor();
    const at::Tensor& g = grads[0];
    return {RotatePairs(g.to(c.scalar_type()), c, s).to(g.scalar_type()), at::Tensor(),
            at::Tensor()};
  }
};

// silu(a) * b. Saves a and b only (the plain composition also keeps silu(a)). bf16 and fp32 on
// the CPU run the loops of cpu_kernels.h; elsewhere bf16 is widened to fp32 for the math
// (libtorch 1.13 runs its bf16 silu element by element on CPU, 2-3x slower than widened).
struct SiluMulFn : public torch::autograd::Function<SiluMulFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    const at::ScalarType dt = a.scalar_type(), f = Widen(dt);
    if (UseCpuFp32Loops(a, b)) return SiluMulLoopsForward<float>(a, b);
    if (dt == f) return at::silu(a) * b;
    if (UseCpuLoops(a, b)) return SiluMulLoopsForward<uint16_t>(a, b);
    return (at::silu(a.to(f)) * b.to(f)).to(dt);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::ScalarType dt = saved[0].scalar_type(), f = Widen(dt);
    if (UseCpuLoops(saved[0], saved[1]) && grads[0].scalar_type() == at::kBFloat16) {
      return SiluMulLoopsBackward<uint16_t>(saved[0], saved[1], grads[0]);
    }
    if (UseCpuFp32Loops(saved[0], saved[1]) && grads[0].scalar_type() == at::kFloat) {
      return SiluMulLoopsBackward<float>(saved[0], saved[1], grads[0]);
    }
    const at::Tensor a = saved[0].to(f), b = saved[1].to(f), g = grads[0].to(f);
    at::Tensor ga = at::silu_backward(g * b, a);
    at::Tensor gb = g * at::silu(a);
    return {ga.to(dt), gb.to(saved[1].scalar_type())};
  }
};

// Attention's scale, causal mask and softmax in one node (bf16, CPU): the loops of cpu_kernels.h
// over (BK, R*G, T) scores of queries first_position..T-1, each row only up to its query's
// position. Saves the probabilities (as at::softmax does).
struct CausalSoftmaxFn : public torch::autograd::Function<CausalSoftmaxFn> {
  static constexpr int64_t kRowsPerTask = 64;

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& scores, int64_t group,
                            int64_t first_position, double scale) {
    const at::Tensor s = scores.contiguous();
    at::Tensor p = at::empty_like(s, at::MemoryFormat::Contiguous);
    const int64_t rows_per_slab = s.size(1), cols = s.size(2);
    const uint16_t* in = Bits(s);
    uint16_t* out = MutableBits(p);
    ParallelFor(0, s.size(0) * rows_per_slab, kRowsPerTask, [&](int64_t b, int64_t e) {
      cpu::CausalSoftmaxForward(in, out, b, e, rows_per_slab, cols, group, first_position,
                                static_cast<float>(scale));
    });
    ctx->save_for_backward({p});
    ctx->saved_data["group"] = group;
    ctx->saved_data["first_position"] = first_position;
    ctx->saved_data["scale"] = scale;
    return p;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor p = ctx->get_saved_variables()[0];
    const int64_t group = ctx->saved_data["group"].toInt();
    const int64_t first_position = ctx->saved_data["first_position"].toInt();
    const double scale = ctx->saved_data["scale"].toDouble();
    const at::Tensor g = grads[0].to(at::kBFloat16).contiguous();
    at::Tensor ds = at::empty_like(p, at::MemoryFormat::Contiguous);
    const int64_t rows_per_slab = p.size(1), cols = p.size(2);
    const uint16_t *pp = Bits(p), *pg = Bits(g);
    uint16_t* out = MutableBits(ds);
    ParallelFor(0, p.size(0) * rows_per_slab, kRowsPerTask, [&](int64_t b, int64_t e) {
      cpu::CausalSoftmaxBackward(pp, pg, out, b, e, rows_per_slab, cols, group, first_position,
                                 static_cast<float>(scale));
    });
    return {ds, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TENAX_CHECK(weight.dim() == 1 && x.size(-1) == weight.size(0));
  return RmsNormFn::apply(x, weight, eps);
}

at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  TENAX_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && cos.size(0) >= x.size(1) &&
              cos.size(1) * 2 == x.size(3));
  return RopeFn::apply(x, cos, sin);
}

at::Tensor Bf16CpuCausalSoftmax(const at::Tensor& scores, int64_t group, double scale,
                                int64_t first_position) {
  TENAX_CHECK(scores.dim() == 3 && scores.device().is_cpu() &&
              scores.scalar_type() == at::kBFloat16 && group > 0 && first_position >= 0 &&
              scores.size(1) + first_position * group == scores.size(2) * group);
  return CausalSoftmaxFn::apply(scores, group, first_position, scale);
}

at::Tensor SiluMul(const at::Tensor& a, const at::Tensor& b) {
  TENAX_CHECK(a.sizes() == b.sizes());
  return SiluMulFn::apply(a, b);
}

}  // namespace tenax::model
