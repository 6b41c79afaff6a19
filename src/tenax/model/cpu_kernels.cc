#include "tenax/model/cpu_kernels.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tenax/core/cpu_clones.h"

namespace tenax::model::cpu {
namespace {

// The helpers are inlined into each clone and compiled for its instruction set.
#define TENAX_INLINE inline __attribute__((always_inline))

TENAX_INLINE float Widen(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TENAX_INLINE uint16_t Narrow(float f) {  // round to nearest even; NaN stays a quiet NaN
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return f != f ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
}

TENAX_INLINE float Exp(float x) {
  // A NaN compares false both ways and becomes -87 here: the callers multiply by the input,
  // which carries the NaN to the result.
  float xc = x > -87.0f ? x : -87.0f;
  xc = xc < 88.0f ? xc : 88.0f;
  // n = x / ln 2 rounded to the nearest integer: adding and taking away 1.5 * 2^23 leaves no
  // fraction bits (floorf would not vectorize).
  const float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
  // ln 2 in two parts, the first with few enough bits that n * it is exact.
  const float r = (xc - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

TENAX_INLINE float Sigmoid(float x) { return 1.0f / (1.0f + Exp(-x)); }

// Reductions over n floats in kLanes independent partial results (so that they vectorize without
// reassociating), combined in a fixed order: the same bits on every run.
constexpr int kLanes = 16;

TENAX_INLINE float Max(const float* v, int64_t n) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = v[j + l] > acc[l] ? v[j + l] : acc[l];
  }
  float m = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  for (; j < n; ++j) m = v[j] > m ? v[j] : m;
  return m;
}

TENAX_INLINE float Sum(const float* v, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += v[j + l];
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; j < n; ++j) s += v[j];
  return s;
}

TENAX_INLINE int64_t Visible(int64_t row, int64_t rows_per_slab, int64_t cols, int64_t group,
                             int64_t first_position) {
  const int64_t position = first_position + (row % rows_per_slab) / group;
  return position + 1 < cols ? position + 1 : cols;
}

}  // namespace

float ExpForSigmoid(float x) { return Exp(x); }

TENAX_CPU_CLONES void SiluMulForward(const uint16_t* a, const uint16_t* b, uint16_t* out,
                                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = Widen(a[i]);
    out[i] = Narrow(x * Sigmoid(x) * Widen(b[i]));
  }
}

TENAX_CPU_CLONES void SiluMulBackward(const uint16_t* a, const uint16_t* b, const uint16_t* g,
                                      uint16_t* ga, uint16_t* gb, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = Widen(a[i]), y = Widen(b[i]), d = Widen(g[i]);
    const float s = Sigmoid(x);
    ga[i] = Narrow(d * y * (s * (1.0f + x * (1.0f - s))));
    gb[i] = Narrow(d * (x * s));
  }
}

TENAX_CPU_CLONES void SiluMulForward(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    out[i] = x * Sigmoid(x) * b[i];
  }
}

TENAX_CPU_CLONES void SiluMulBackward(const float* a, const float* b, const float* g, float* ga,
                                      float* gb, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i], y = b[i], d = g[i];
    const float s = Sigmoid(x);
    ga[i] = d * y * (s * (1.0f + x * (1.0f - s)));
    gb[i] = d * (x * s);
  }
}

TENAX_CPU_CLONES void CausalSoftmaxForward(const uint16_t* scores, uint16_t* probs,
                                           int64_t row_begin, int64_t row_end,
                                           int64_t rows_per_slab, int64_t cols, int64_t group,
                                           int64_t first_position, float scale) {
  std::vector<float> e(cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint16_t* s = scores + r * cols;
    uint16_t* p = probs + r * cols;
    const int64_t n = Visible(r, rows_per_slab, cols, group, first_position);
    for (int64_t j = 0; j < n; ++j) e[j] = Widen(s[j]) * scale;
    const float m = Max(e.data(), n);
    for (int64_t j = 0; j < n; ++j) e[j] = Exp(e[j] - m);
    const float inv = 1.0f / Sum(e.data(), n);
    for (int64_t j = 0; j < n; ++j) p[j] = Narrow(e[j] * inv);
    for (int64_t j = n; j < cols; ++j) p[j] = 0;
  }
}

TENAX_CPU_CLONES void CausalSoftmaxBackward(const uint16_t* probs, const uint16_t* grad,
                                            uint16_t* grad_scores, int64_t row_begin,
                                            int64_t row_end, int64_t rows_per_slab, int64_t cols,
                                            int64_t group, int64_t first_position, float scale) {
  std::vector<float> gp(cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint16_t *p = probs + r * cols, *g = grad + r * cols;
    uint16_t* out = grad_scores + r * cols;
    const int64_t n = Visible(r, rows_per_slab, cols, group, first_position);
    for (int64_t j = 0; j < n; ++j) gp[j] = Widen(g[j]) * Widen(p[j]);
    const float dot = Sum(gp.data(), n);
    for (int64_t j = 0; j < n; ++j) out[j] = Narrow(scale * (gp[j] - Widen(p[j]) * dot));
    for (int64_t j = n; j < cols; ++j) out[j] = 0;
  }
}

TENAX_CPU_CLONES void RmsNormForward(const uint16_t* x, const float* weight, uint16_t* out,
                                     float* rscale, int64_t row_begin, int64_t row_end,
                                     int64_t cols, float eps) {
  std::vector<float> w(cols), v(cols);
  for (int64_t c = 0; c < cols; ++c) w[c] = Widen(Narrow(weight[c]));  // the weight in bf16
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint16_t* xr = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float f = Widen(xr[c]);
      v[c] = f * f;
    }
    const float scale =
        1.0f / __builtin_sqrtf(Sum(v.data(), cols) / static_cast<float>(cols) + eps);
    rscale[r] = scale;
    uint16_t* o = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = Narrow(Widen(Narrow(Widen(xr[c]) * scale)) * w[c]);
  }
}

TENAX_CPU_CLONES void RmsNormBackward(const uint16_t* x, const float* weight, const float* rscale,
                                      const uint16_t* grad, uint16_t* grad_x, float* gw_rows,
                                      int64_t row_begin, int64_t row_end, int64_t cols) {
  std::vector<float> n(cols), gn(cols), prod(cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint16_t *xr = x + r * cols, *gr = grad + r * cols;
    const float scale = rscale[r];
    for (int64_t c = 0; c < cols; ++c) {
      n[c] = Widen(xr[c]) * scale;
      const float g = Widen(gr[c]);
      gw_rows[c] += g * n[c];
      gn[c] = g * weight[c];
      prod[c] = gn[c] * n[c];
    }
    const float dot = Sum(prod.data(), cols) / static_cast<float>(cols);
    uint16_t* o = grad_x + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = Narrow((gn[c] - n[c] * dot) * scale);
  }
}

TENAX_CPU_CLONES void RopeRotate(const uint16_t* x, const float* cos, const float* sin,
                                 uint16_t* out, int64_t row_begin, int64_t row_end,
                                 int64_t positions, int64_t heads, int64_t dim, bool transposed) {
  const int64_t half = dim / 2;
  const float sign = transposed ? -1.0f : 1.0f;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t t = (r / heads) % positions;
    const float *c = cos + t * half, *s = sin + t * half;
    const uint16_t* xr = x + r * dim;
    uint16_t* o = out + r * dim;
    for (int64_t i = 0; i < half; ++i) {
      const float x0 = Widen(xr[2 * i]), x1 = Widen(xr[2 * i + 1]), si = sign * s[i];
      o[2 * i] = Narrow(x0 * c[i] - x1 * si);
      o[2 * i + 1] = Narrow(x0 * si + x1 * c[i]);
    }
  }
}

TENAX_CPU_CLONES void CrossEntropyRows(uint16_t* logits, const int64_t* targets, float* row_loss,
                                       int64_t row_begin, int64_t row_end, int64_t vocab,
                                       bool write_grad, float grad_scale) {
  std::vector<float> e(vocab);
  for (int64_t r = row_begin; r < row_end; ++r) {
    uint16_t* l = logits + r * vocab;
    const int64_t t = targets[r];
    for (int64_t j = 0; j < vocab; ++j) e[j] = Widen(l[j]);
    const float m = Max(e.data(), vocab);
    const float picked = e[t];
    for (int64_t j = 0; j < vocab; ++j) e[j] = Exp(e[j] - m);
    const float sum = Sum(e.data(), vocab);
    row_loss[r] = (std::log(sum) + m) - picked;
    if (!write_grad) continue;
    for (int64_t j = 0; j < vocab; ++j) l[j] = Narrow((e[j] / sum) * grad_scale);
    l[t] = Narrow((e[t] / sum - 1.0f) * grad_scale);
  }
}

}  // namespace tenax::model::cpu
