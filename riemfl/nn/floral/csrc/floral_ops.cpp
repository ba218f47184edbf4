// FLoRAL fused layer: the merged weight and the base operation in one autograd node.
//
// For an adapted layer with base weight W (as an m x n matrix M(W)), bias b, factors
// A^T = [A_1 ... A_C]^T (C r x m, the "out" matrix) and B^T = [B_1 ... B_C]^T (C r x n, the "in"
// matrix), bias adaptors L_b (C x m_out) and mixture weights w (C), the forward pass computes
//
//     W' = W + K(sum_c w_c A_c B_c^T),   b' = b + L_b^T w,   y = op(x, W', b')
//
// (K: the (m, n) matrix as a kernel; op: linear or conv2d) and the backward pass maps dy to
//
//     dx, dW = dW', db = db',
//     dA_c = w_c G B_c,  dB_c = w_c G^T A_c,  dL_b,c = w_c db',
//     dw_c = <G B_c, A_c> + <db', L_b,c>,        G = M(dW'),
//
// (docs/floral.md, "The compiled layer"; the torch path is riemfl/nn/floral/fused.py). The
// weight-sized loops are plain C++ (the tensors are small: the per-operation overhead of torch,
// not arithmetic, dominates at these sizes); the base operation and its backward are ATen's. Under
// create_graph the backward pass recomputes the forward pass with differentiable ATen operations
// and differentiates it, so second derivatives are exact.
#include <torch/extension.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// spec: kind (0 linear, 1 conv2d), C, r, m, n, c_out, c_in, kh_o, kw_o, kh_i, kw_i,
//       stride (2), padding (2), dilation (2)
enum SpecIndex : int64_t {
  kKind = 0, kC, kR, kM, kN, kCout, kCin, kKhO, kKwO, kKhI, kKwI,
  kStride, kPad = kStride + 2, kDil = kPad + 2, kSpecLength = kDil + 2
};

struct Spec {
  std::vector<int64_t> v;
  explicit Spec(std::vector<int64_t> values) : v(std::move(values)) {
    TORCH_CHECK(static_cast<int64_t>(v.size()) == kSpecLength,
                "floral_op: spec needs ", static_cast<int64_t>(kSpecLength), " entries, got ",
                v.size());
  }
  bool conv() const { return v[kKind] == 1; }
  int64_t cr() const { return v[kC] * v[kR]; }
};

// [A_1 ... A_C]^T as a contiguous (C r, m) matrix (a view of lora_out for linear layers)
Tensor out_matrix(const Tensor& lora_out, const Spec& s) {
  if (!s.conv()) return lora_out.reshape({s.cr(), s.v[kM]}).contiguous();
  // lora_out (C, c_out, r, kh_o, kw_o) -> rows (c, k), columns (i, a_o, b_o)
  return lora_out.permute({0, 2, 1, 3, 4}).reshape({s.cr(), s.v[kM]}).contiguous();
}

// [B_1 ... B_C]^T as a contiguous (C r, n) matrix (lora_in is (C, r, ...) in both kinds)
Tensor in_matrix(const Tensor& lora_in, const Spec& s) {
  return lora_in.reshape({s.cr(), s.v[kN]}).contiguous();
}

// x as a (rows, cols) matrix: x itself when it is one (a view costs about half a microsecond)
Tensor as_rows(const Tensor& x, int64_t cols) {
  return x.dim() == 2 && x.size(1) == cols ? x : x.reshape({-1, cols});
}

// a (rows, cols) matrix in the shape `like` (the inverse of as_rows)
Tensor like_shape(const Tensor& y, const Tensor& like) {
  return y.sizes() == like.sizes() ? y : y.view(like.sizes());
}

// the gradient of out_matrix, in lora_out's shape
Tensor out_grad(const Tensor& d, const Tensor& lora_out, const Spec& s) {
  if (!s.conv()) return d.view(lora_out.sizes());
  return d.view({s.v[kC], s.v[kR], s.v[kCout], s.v[kKhO], s.v[kKwO]}).permute({0, 2, 1, 3, 4});
}

// the (m, n) matrix as a kernel of the weight's shape, rows (i, a_o, b_o), columns (j, a_i, b_i)
Tensor as_kernel(const Tensor& x, const Tensor& weight, const Spec& s) {
  if (!s.conv()) return x;
  return x.view({s.v[kCout], s.v[kKhO], s.v[kKwO], s.v[kCin], s.v[kKhI], s.v[kKwI]})
      .permute({0, 3, 1, 4, 2, 5})
      .reshape(weight.sizes());
}

// The weight-sized loops. Each is an always-inlined template, instantiated in overloads that
// GCC compiles for several instruction sets and picks from at load time (target_clones), so
// that one build runs everywhere and uses AVX2 / AVX-512 where the CPU has them.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define RIEMFL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RIEMFL_CLONES
#endif
#define RIEMFL_INLINE inline __attribute__((always_inline))

// out[i, :] = (base ? base[i, :] : 0) + sum_ck w_ck a[ck, i] b[ck, :]  (w_ck = w[ck / r])
template <typename T>
RIEMFL_INLINE void merge_rows(T* out, const T* base, const T* a, const T* b, const T* w,
                              int64_t cr, int64_t r, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = out + i * n;
    if (base != nullptr) {
      const T* src = base + i * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) row[j] = src[j];
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] = T(0);
    }
    for (int64_t ck = 0; ck < cr; ++ck) {
      const T coef = w[ck / r] * a[ck * m + i];
      const T* brow = b + ck * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) row[j] += coef * brow[j];
    }
  }
}

// da[ck, i] = w_ck (G b^T)[i, ck], db[ck, :] = w_ck (a G)[ck, :],
// dw[ck / r] += <(G b^T)[:, ck], a[ck]>
template <typename T>
RIEMFL_INLINE void merge_rows_backward(const T* g, const T* a, const T* b, const T* w,
                                       int64_t cr, int64_t r, int64_t m, int64_t n, T* da, T* db,
                                       double* dw) {
  for (int64_t q = 0; q < cr * n; ++q) db[q] = T(0);
  for (int64_t i = 0; i < m; ++i) {
    const T* grow = g + i * n;
    for (int64_t ck = 0; ck < cr; ++ck) {
      const T* brow = b + ck * n;
      T* dbrow = db + ck * n;
      const T ai = a[ck * m + i];
      T dot = T(0);
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < n; ++j) {
        dot += grow[j] * brow[j];
        dbrow[j] += ai * grow[j];
      }
      da[ck * m + i] = w[ck / r] * dot;
      dw[ck / r] += static_cast<double>(ai) * static_cast<double>(dot);
    }
  }
  for (int64_t ck = 0; ck < cr; ++ck) {
    T* dbrow = db + ck * n;
    const T f = w[ck / r];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dbrow[j] *= f;
  }
}

RIEMFL_CLONES void kernel_merge(float* out, const float* base, const float* a, const float* b,
                                const float* w, int64_t cr, int64_t r, int64_t m, int64_t n) {
  merge_rows<float>(out, base, a, b, w, cr, r, m, n);
}
RIEMFL_CLONES void kernel_merge(double* out, const double* base, const double* a, const double* b,
                                const double* w, int64_t cr, int64_t r, int64_t m, int64_t n) {
  merge_rows<double>(out, base, a, b, w, cr, r, m, n);
}
RIEMFL_CLONES void kernel_merge_backward(const float* g, const float* a, const float* b,
                                         const float* w, int64_t cr, int64_t r, int64_t m,
                                         int64_t n, float* da, float* db, double* dw) {
  merge_rows_backward<float>(g, a, b, w, cr, r, m, n, da, db, dw);
}
RIEMFL_CLONES void kernel_merge_backward(const double* g, const double* a, const double* b,
                                         const double* w, int64_t cr, int64_t r, int64_t m,
                                         int64_t n, double* da, double* db, double* dw) {
  merge_rows_backward<double>(g, a, b, w, cr, r, m, n, da, db, dw);
}

// The thin products of the factored pass (one side has C r columns), for small layers: in loops
// they cost no more than their multiply-adds, where each ATen call costs a few microseconds.
// h[i, q] = <x[i, :], f[q, :]>  (H = X F^T; X: rows x k, F: C r x k)
template <typename T>
RIEMFL_INLINE void thin_dots(const T* x, const T* f, int64_t rows, int64_t k, int64_t cr, T* h) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* xrow = x + i * k;
    for (int64_t q = 0; q < cr; ++q) {
      const T* frow = f + q * k;
      T dot = T(0);
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < k; ++j) dot += xrow[j] * frow[j];
      h[i * cr + q] = dot;
    }
  }
}

// out[i, :] += sum_q s[q] h[i, q] f[q, :]  (OUT += H diag(s) F)
template <typename T>
RIEMFL_INLINE void thin_axpy(T* out, const T* h, const T* s, const T* f, int64_t rows, int64_t k,
                             int64_t cr) {
  for (int64_t i = 0; i < rows; ++i) {
    T* orow = out + i * k;
    for (int64_t q = 0; q < cr; ++q) {
      const T coef = s[q] * h[i * cr + q];
      const T* frow = f + q * k;
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) orow[j] += coef * frow[j];
    }
  }
}

// d[q, :] = s[q] sum_i h[i, q] x[i, :]  (D = diag(s) H^T X)
template <typename T>
RIEMFL_INLINE void thin_outer(T* d, const T* h, const T* s, const T* x, int64_t rows, int64_t k,
                              int64_t cr) {
  for (int64_t q = 0; q < cr * k; ++q) d[q] = T(0);
  for (int64_t i = 0; i < rows; ++i) {
    const T* xrow = x + i * k;
    for (int64_t q = 0; q < cr; ++q) {
      const T coef = s[q] * h[i * cr + q];
      T* drow = d + q * k;
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) drow[j] += coef * xrow[j];
    }
  }
}

// out[j] = sum_i g[i, j], accumulated in double (the bias gradient of a small layer)
template <typename T>
RIEMFL_INLINE void row_sum(const T* g, int64_t rows, int64_t m, double* acc, T* out) {
  for (int64_t j = 0; j < m; ++j) acc[j] = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    const T* grow = g + i * m;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) acc[j] += static_cast<double>(grow[j]);
  }
  for (int64_t j = 0; j < m; ++j) out[j] = static_cast<T>(acc[j]);
}

// z = max(z, 0) in place (NaN stays NaN, as in ATen)
template <typename T>
RIEMFL_INLINE void relu_inplace(T* z, int64_t count) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) z[i] = z[i] < T(0) ? T(0) : z[i];
}

// y[i, :] += v for every row i
template <typename T>
RIEMFL_INLINE void add_to_rows(T* y, const T* v, int64_t rows, int64_t m) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = y + i * m;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) row[j] += v[j];
  }
}

// out = dh where h > 0, else 0 (ReLU's backward from its output h)
template <typename T>
RIEMFL_INLINE void relu_backward(const T* dh, const T* h, int64_t count, T* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = h[i] <= T(0) ? T(0) : dh[i];  // as ATen's
}

#define RIEMFL_THIN_KERNELS(T)                                                                   \
  RIEMFL_CLONES void kernel_thin_dots(const T* x, const T* f, int64_t rows, int64_t k,          \
                                      int64_t cr, T* h) {                                       \
    thin_dots<T>(x, f, rows, k, cr, h);                                                          \
  }                                                                                              \
  RIEMFL_CLONES void kernel_thin_axpy(T* out, const T* h, const T* s, const T* f, int64_t rows, \
                                      int64_t k, int64_t cr) {                                  \
    thin_axpy<T>(out, h, s, f, rows, k, cr);                                                     \
  }                                                                                              \
  RIEMFL_CLONES void kernel_thin_outer(T* d, const T* h, const T* s, const T* x, int64_t rows,  \
                                       int64_t k, int64_t cr) {                                 \
    thin_outer<T>(d, h, s, x, rows, k, cr);                                                      \
  }                                                                                              \
  RIEMFL_CLONES void kernel_row_sum(const T* g, int64_t rows, int64_t m, double* acc, T* out) { \
    row_sum<T>(g, rows, m, acc, out);                                                            \
  }                                                                                              \
  RIEMFL_CLONES void kernel_relu_backward(const T* dh, const T* h, int64_t count, T* out) {     \
    relu_backward<T>(dh, h, count, out);                                                         \
  }                                                                                              \
  RIEMFL_CLONES void kernel_relu_inplace(T* z, int64_t count) { relu_inplace<T>(z, count); }      \
  RIEMFL_CLONES void kernel_add_to_rows(T* y, const T* v, int64_t rows, int64_t m) {            \
    add_to_rows<T>(y, v, rows, m);                                                               \
  }
RIEMFL_THIN_KERNELS(float)
RIEMFL_THIN_KERNELS(double)
#undef RIEMFL_THIN_KERNELS

// out[i] = (bias ? bias[i] : 0) + sum_c w_c lb[c, i]
template <typename T>
void bias_merge(T* out, const T* bias, const T* lb, const T* w, int64_t c, int64_t m) {
  for (int64_t i = 0; i < m; ++i) out[i] = bias != nullptr ? bias[i] : T(0);
  for (int64_t k = 0; k < c; ++k)
    for (int64_t i = 0; i < m; ++i) out[i] += w[k] * lb[k * m + i];
}

// dlb[c, i] = w_c gb[i] (when dlb is given), dw[c] += <lb[c], gb>
template <typename T>
void bias_backward(const T* gb, const T* lb, const T* w, int64_t c, int64_t m, T* dlb,
                   double* dw) {
  for (int64_t k = 0; k < c; ++k) {
    double acc = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      if (dlb != nullptr) dlb[k * m + i] = w[k] * gb[i];
      acc += static_cast<double>(lb[k * m + i]) * static_cast<double>(gb[i]);
    }
    dw[k] += acc;
  }
}

// Visit the (m, n) matrix of a kernel: f(matrix offset, kernel offset) for every entry; rows
// (i, a_o, b_o), columns (j, a_i, b_i), kernel entry [i, j, a_o kh_i + a_i, b_o kw_i + b_i].
template <typename F>
void for_kernel_entries(const Spec& s, F f) {
  const int64_t c_out = s.v[kCout], c_in = s.v[kCin], kh_o = s.v[kKhO], kw_o = s.v[kKwO];
  const int64_t kh_i = s.v[kKhI], kw_i = s.v[kKwI], k1 = kh_o * kh_i, k2 = kw_o * kw_i;
  int64_t at = 0;
  for (int64_t i = 0; i < c_out; ++i)
    for (int64_t ao = 0; ao < kh_o; ++ao)
      for (int64_t bo = 0; bo < kw_o; ++bo)
        for (int64_t j = 0; j < c_in; ++j)
          for (int64_t ai = 0; ai < kh_i; ++ai) {
            const int64_t row = ((i * c_in + j) * k1 + ao * kh_i + ai) * k2 + bo * kw_i;
            for (int64_t bi = 0; bi < kw_i; ++bi) f(at++, row + bi);
          }
}

// merge work (C r m n multiply-adds) from which ATen's blocked, threaded products beat the loops
constexpr int64_t kBlasWork = int64_t(1) << 17;

// multiply-adds the factored pass must save to pay for its extra operations (a few us each)
constexpr int64_t kFactoredSaving = int64_t(1) << 16;

// Whether a linear layer runs factored, y = x W^T + b' + ((x B) diag(w)) A^T, rather than with
// the merged weight: for `rows` input rows the factored pass costs rows (m + n) C r
// multiply-adds, the merge m n C r (forward; the backward passes scale alike); it runs when it
// saves more than kFactoredSaving. Convolutions always merge (their rows are batch x output
// pixels). The torch path applies the same rule (riemfl/nn/floral/linear.py).
bool runs_factored(const Spec& s, int64_t rows) {
  const int64_t m = s.v[kM], n = s.v[kN];
  return !s.conv() && s.cr() * (m * n - rows * (m + n)) > kFactoredSaving;
}

// thin-product work C r rows (m + n) up to which the factored pass runs in loops
constexpr int64_t kThinWork = int64_t(1) << 17;

// How a layer runs: with the merged weight; factored with ATen's products; or factored with the
// thin products in loops, which a small linear layer does whenever that is fewer multiply-adds,
// rows (m + n) < m n (no per-call costs to pay for). Only the compiled layer has the last.
enum Pass : int64_t { kMerged = 0, kFactored = 1, kFactoredLoops = 2 };

Pass layer_pass(const Spec& s, int64_t rows) {
  if (s.conv()) return kMerged;
  const int64_t m = s.v[kM], n = s.v[kN];
  if (rows * (m + n) < m * n && s.cr() * rows * (m + n) <= kThinWork) return kFactoredLoops;
  return runs_factored(s, rows) ? kFactored : kMerged;
}

// elementwise work up to which loops beat ATen's (threaded, vectorised) kernels and their fixed
// cost of a few microseconds
constexpr int64_t kSmallElementwise = int64_t(1) << 16;

// the bias gradient sum_i g[i, :] of a linear layer (g: rows x m)
Tensor bias_gradient(const Tensor& g2) {
  if (g2.numel() > kSmallElementwise || !g2.is_contiguous()) return g2.sum(0);
  const int64_t rows = g2.size(0), m = g2.size(1);
  auto out = at::empty({m}, g2.options());
  std::vector<double> acc(m);
  AT_DISPATCH_FLOATING_TYPES(g2.scalar_type(), "floral_bias_gradient", [&] {
    kernel_row_sum(g2.data_ptr<scalar_t>(), rows, m, acc.data(), out.data_ptr<scalar_t>());
  });
  return out;
}

// whether [A_1 ... A_C]^T (C r, m) is lora_out's own memory (linear layers; conv with r = 1)
bool out_is_matrix(const Tensor& lora_out, const Spec& s) {
  return (!s.conv() || s.v[kR] == 1) && lora_out.is_contiguous();
}

// w repeated r times: (w_1 .. w_1, ..., w_C .. w_C)
Tensor weight_per_rank(const Tensor& w, const Spec& s) {
  return s.v[kR] == 1 ? w.contiguous() : w.repeat_interleave(s.v[kR]).contiguous();
}

// x W^T + b; for a matrix x the addmm that at::linear runs, without its two dispatch layers
Tensor linear_rows(const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias) {
  if (x.dim() != 2) return at::linear(x, weight, bias);
  if (bias.has_value() && bias->defined()) return at::addmm(*bias, x, weight.transpose(0, 1));
  return at::mm(x, weight.transpose(0, 1));
}

Tensor base_op(const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias,
               const Spec& s) {
  if (!s.conv()) return linear_rows(x, weight, bias);
  return at::conv2d(x, weight, bias, {s.v[kStride], s.v[kStride + 1]},
                    {s.v[kPad], s.v[kPad + 1]}, {s.v[kDil], s.v[kDil + 1]}, 1);
}

c10::optional<Tensor> opt(const Tensor& t) {
  return t.defined() ? c10::optional<Tensor>(t) : c10::nullopt;
}

// the merged bias b + L_b^T w (b or L_b may be undefined)
Tensor merged_bias(const Tensor& bias, const Tensor& lora_bias, const Tensor& w) {
  if (!lora_bias.defined()) return bias;
  auto mixed = at::mv(lora_bias.t(), w);
  return bias.defined() ? bias + mixed : mixed;
}

// the layer with differentiable ATen operations (the create_graph path and the reference)
Tensor plain_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const Tensor& lora_out, const Tensor& lora_in, const Tensor& lora_bias,
                     const Tensor& w, const Spec& s) {
  auto scaled = out_matrix(lora_out, s) * weight_per_rank(w, s).unsqueeze(1);  // (C r, m)
  auto delta = at::mm(scaled.t(), in_matrix(lora_in, s));                      // (m, n)
  auto merged = weight + as_kernel(delta, weight, s);
  return base_op(x, merged, opt(merged_bias(bias, lora_bias, w)), s);
}

// the inputs agree with the spec: CPU tensors of one floating dtype, factor sizes C r m and C r n
void check_inputs(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& lora_out, const Tensor& lora_in, const Tensor& lora_bias,
                  const Tensor& w, const Spec& s) {
  const auto dtype = weight.scalar_type();
  for (const Tensor* t : {&x, &weight, &bias, &lora_out, &lora_in, &lora_bias, &w}) {
    if (!t->defined()) continue;
    TORCH_CHECK(t->device().is_cpu(), "floral_op: every tensor must be on the CPU");
    TORCH_CHECK(t->scalar_type() == dtype, "floral_op: every tensor must have the weight's dtype ",
                dtype, ", got ", t->scalar_type());
  }
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble,
              "floral_op: float32 or float64 tensors expected, got ", dtype);
  const int64_t c = s.v[kC], m_out = s.conv() ? s.v[kCout] : s.v[kM];
  TORCH_CHECK(w.dim() == 1 && w.size(0) == c, "floral_op: mixture weights of shape (", c,
              ",) expected, got ", w.sizes());
  TORCH_CHECK(lora_out.numel() == s.cr() * s.v[kM] && lora_in.numel() == s.cr() * s.v[kN] &&
                  weight.numel() == s.v[kM] * s.v[kN],
              "floral_op: factor or weight sizes do not match the layer's spec");
  TORCH_CHECK(!lora_bias.defined() || (lora_bias.dim() == 2 && lora_bias.size(0) == c &&
                                       lora_bias.size(1) == m_out),
              "floral_op: bias adaptors of shape (", c, ", ", m_out, ") expected");
}

// One adapted layer's tensors (bias and lora_bias may be undefined).
struct LayerTensors {
  Tensor weight, bias, lora_out, lora_in, lora_bias;
};

// What the forward pass of one layer keeps for its backward: the merged weight, or, for a
// factored pass, x B.
struct Kept {
  Tensor tensor;
  Pass pass = kMerged;
};

// y = x2 W^T + b' for a linear layer with x2 (rows, n) contiguous: the product with ATen (no
// bias: addmm would first copy the bias into every row), then b' = b + L_b^T w added to the rows
// in a loop, without a tensor for b'
Tensor linear_plus_merged_bias(const Tensor& x2, const Tensor& weight, const LayerTensors& t,
                               const Tensor& w, int64_t c) {
  auto y = at::mm(x2, weight.transpose(0, 1));
  if (!t.bias.defined() && !t.lora_bias.defined()) return y;
  const int64_t rows = y.size(0), m = y.size(1);
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "floral_rows_bias", [&] {
    std::vector<scalar_t> merged_b(m, scalar_t(0));
    const auto bc = t.bias.defined() ? t.bias.contiguous() : Tensor();
    if (t.lora_bias.defined()) {
      const auto lbc = t.lora_bias.contiguous();
      const auto wc = w.contiguous();
      bias_merge<scalar_t>(merged_b.data(), bc.defined() ? bc.data_ptr<scalar_t>() : nullptr,
                           lbc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), c, m);
    } else {
      std::copy(bc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>() + m, merged_b.begin());
    }
    kernel_add_to_rows(y.data_ptr<scalar_t>(), merged_b.data(), rows, m);
  });
  return y;
}

// y in x's shape with m columns (y: (rows, m))
Tensor rows_like_input(const Tensor& y, const Tensor& x, int64_t m) {
  if (x.dim() == 2) return y;
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = m;
  return y.view(sizes);
}

// One layer's forward pass: y = op(x, W', b') (or the factored linear pass); fills `kept`.
Tensor layer_forward(const Tensor& x, const LayerTensors& t, const Tensor& w, const Spec& spec,
                     Kept& kept) {
  check_inputs(x, t.weight, t.bias, t.lora_out, t.lora_in, t.lora_bias, w, spec);
  const Tensor &weight = t.weight, &bias = t.bias, &lora_bias = t.lora_bias;
  const int64_t m = spec.v[kM], n = spec.v[kN], cr = spec.cr(), r = spec.v[kR];
  const int64_t c = spec.v[kC], m_out = spec.conv() ? spec.v[kCout] : m;
  auto a = out_is_matrix(t.lora_out, spec) ? t.lora_out : out_matrix(t.lora_out, spec);
  auto b = t.lora_in.contiguous();
  auto wc = w.contiguous();
  const int64_t rows = spec.conv() ? 0 : x.numel() / n;
  kept.pass = layer_pass(spec, rows);
  // linear layers other than the ATen-factored pass add b' to the rows of x W^T themselves
  const bool bias_in_rows = !spec.conv() && kept.pass != kFactored;
  Tensor merged_b = bias;  // b + L_b^T w, as a tensor
  if (lora_bias.defined() && !bias_in_rows) {
    merged_b = at::empty({m_out}, weight.options());
    AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "floral_bias", [&] {
      auto bc = bias.defined() ? bias.contiguous() : Tensor();
      auto lbc = lora_bias.contiguous();
      bias_merge<scalar_t>(merged_b.data_ptr<scalar_t>(),
                           bc.defined() ? bc.data_ptr<scalar_t>() : nullptr,
                           lbc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), c, m_out);
    });
  }
  if (kept.pass != kMerged) {  // y = x W^T + b' + ((x B) diag(w)) A^T, without the merged weight
    auto x2 = as_rows(x, n);
    Tensor h, y;  // h = x B: (rows, C r)
    if (kept.pass == kFactoredLoops) {
      x2 = x2.contiguous();
      h = at::empty({rows, cr}, x.options());
      y = linear_plus_merged_bias(x2, weight, t, w, c);
      AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "floral_thin_forward", [&] {
        auto wck = weight_per_rank(w, spec);
        kernel_thin_dots(x2.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), rows, n, cr,
                         h.data_ptr<scalar_t>());
        kernel_thin_axpy(y.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(),
                         wck.data_ptr<scalar_t>(), a.data_ptr<scalar_t>(), rows, m, cr);
      });
    } else {
      h = at::mm(x2, b.view({cr, n}).t());
      y = linear_rows(x2, weight, opt(merged_b));
      y.addmm_(h * weight_per_rank(w, spec), a.view({cr, m}));
    }
    kept.tensor = h;
    return rows_like_input(y, x, m);
  }
  auto base = weight.contiguous();
  Tensor merged;
  if (cr * m * n >= kBlasWork) {  // large: ATen's (blocked, threaded) products
    auto scaled = a.view({cr, m}) * weight_per_rank(w, spec).unsqueeze(1);
    merged = spec.conv() ? at::mm(scaled.t(), b.view({cr, n})).contiguous()
                         : at::addmm(base.view({m, n}), scaled.t(), b.view({cr, n}));
  } else {
    merged = at::empty({m, n}, weight.options());
    AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "floral_merge", [&] {
      kernel_merge(merged.data_ptr<scalar_t>(), spec.conv() ? nullptr : base.data_ptr<scalar_t>(),
                   a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), cr, r,
                   m, n);
    });
  }
  if (spec.conv()) {  // the delta was made as the (m, n) matrix: add it to the kernel
    auto kernel = at::empty(weight.sizes(), weight.options());
    AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "floral_kernel", [&] {
      const scalar_t* delta = merged.data_ptr<scalar_t>();
      const scalar_t* w0 = base.data_ptr<scalar_t>();
      scalar_t* out = kernel.data_ptr<scalar_t>();
      for_kernel_entries(spec, [&](int64_t q, int64_t k) { out[k] = w0[k] + delta[q]; });
    });
    merged = kernel;
  }
  kept.tensor = merged;
  if (bias_in_rows) {
    return rows_like_input(linear_plus_merged_bias(as_rows(x, n).contiguous(), merged, t, w, c),
                           x, m);
  }
  return base_op(x, merged, opt(merged_b), spec);
}

// Which gradients one layer's backward pass computes: x, weight, bias, lora_out, lora_in,
// lora_bias, w (false for an undefined tensor).
using Needs = std::array<bool, 7>;

// One layer's backward pass for the output gradient dy: fills grads[0..5] (x, weight, bias,
// lora_out, lora_in, lora_bias) where needed and adds the mixture weights' gradient to dw.
void layer_backward(const Tensor& x, const LayerTensors& t, const Tensor& w, const Spec& spec,
                    const Kept& kept, const Tensor& dy, const Needs& need, std::vector<double>& dw,
                    std::array<Tensor, 6>& grads) {
  const Tensor &bias = t.bias, &lora_out = t.lora_out, &lora_in = t.lora_in,
               &lora_bias = t.lora_bias;
  const int64_t m = spec.v[kM], n = spec.v[kN], cr = spec.cr(), c = spec.v[kC], r = spec.v[kR];
  const int64_t m_out = spec.conv() ? spec.v[kCout] : m;
  const bool need_factors = need[3] || need[4] || need[6];
  const bool need_bias_path = bias.defined() || lora_bias.defined();
  const bool direct = out_is_matrix(lora_out, spec);
  auto a = direct ? lora_out : out_matrix(lora_out, spec);
  auto b = lora_in.contiguous();
  auto wc = w.contiguous();
  Tensor dbias;
  if (kept.pass == kFactoredLoops) {
    const Tensor& h = kept.tensor;  // (rows, C r): x B
    auto g2 = as_rows(dy, m).contiguous();
    auto x2 = as_rows(x, n).contiguous();
    const int64_t rows = g2.size(0);
    if (need[1]) grads[1] = at::mm(g2.transpose(0, 1), x2);
    if (need_bias_path) dbias = bias_gradient(g2);
    AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "floral_thin_backward", [&] {
      auto wck = weight_per_rank(w, spec);
      const scalar_t* s = wck.data_ptr<scalar_t>();
      const scalar_t* hp = h.data_ptr<scalar_t>();
      Tensor ga;  // (rows, C r): dy A
      if (need[0] || need[4] || need[6]) {
        ga = at::empty({rows, cr}, h.options());
        kernel_thin_dots(g2.data_ptr<scalar_t>(), a.data_ptr<scalar_t>(), rows, m, cr,
                         ga.data_ptr<scalar_t>());
      }
      if (need[0]) {
        auto dx = at::mm(g2, t.weight);
        kernel_thin_axpy(dx.data_ptr<scalar_t>(), ga.data_ptr<scalar_t>(), s,
                         b.data_ptr<scalar_t>(), rows, n, cr);
        grads[0] = like_shape(dx, x);
      }
      if (need[3]) {  // (C r, m) rows in lora_out's (C, r, m) shape
        auto da = at::empty(lora_out.sizes(), h.options());
        kernel_thin_outer(da.data_ptr<scalar_t>(), hp, s, g2.data_ptr<scalar_t>(), rows, m, cr);
        grads[3] = da;
      }
      if (need[4]) {
        auto db = at::empty(lora_in.sizes(), lora_in.options());
        kernel_thin_outer(db.data_ptr<scalar_t>(), ga.data_ptr<scalar_t>(), s,
                          x2.data_ptr<scalar_t>(), rows, n, cr);
        grads[4] = db;
      }
      if (need[6]) {  // dw_c += sum_(i, k in c) h[i, ck] ga[i, ck]
        const scalar_t* gp = ga.data_ptr<scalar_t>();
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t q = 0; q < cr; ++q) {
            dw[q / r] += static_cast<double>(hp[i * cr + q]) * static_cast<double>(gp[i * cr + q]);
          }
        }
      }
    });
  } else if (kept.pass == kFactored) {
    const Tensor& h = kept.tensor;  // (rows, C r): x B
    auto g2 = dy.reshape({-1, m});
    auto x2 = x.reshape({-1, n});
    auto wck = weight_per_rank(w, spec);
    Tensor ga;  // (rows, C r): dy A
    if (need[0] || need[4] || need[6]) ga = at::mm(g2, a.view({cr, m}).t());
    if (need[0]) {
      auto dx = at::mm(g2, t.weight);
      dx.addmm_(ga * wck, b.view({cr, n}));
      grads[0] = dx.view(x.sizes());
    }
    if (need[1]) grads[1] = at::mm(g2.t(), x2);
    if (need_bias_path) dbias = g2.sum(0);
    if (need[3]) grads[3] = out_grad(at::mm((h * wck).t(), g2), lora_out, spec);
    if (need[4]) grads[4] = at::mm((ga * wck).t(), x2).view(lora_in.sizes());
    if (need[6]) {
      auto per_rank = (h * ga).sum(0).to(at::kDouble).contiguous();  // <x B_ck, dy A_ck>
      const double* p = per_rank.data_ptr<double>();
      for (int64_t q = 0; q < cr; ++q) dw[q / r] += p[q];
    }
  } else {
    const Tensor& merged = kept.tensor;
    // the base operation's backward with the merged weight: dx, dW', db'
    Tensor dmerged;
    if (!spec.conv()) {
      auto g2 = as_rows(dy, m);
      if (need[0]) grads[0] = like_shape(at::mm(g2, merged), x);
      dmerged = at::mm(g2.transpose(0, 1), as_rows(x, n));
      if (need_bias_path) dbias = bias_gradient(g2.contiguous());
    } else {
      auto res = at::convolution_backward(
          dy, x, merged,
          need_bias_path ? c10::OptionalIntArrayRef(at::IntArrayRef(spec.v[kCout])) : c10::nullopt,
          {spec.v[kStride], spec.v[kStride + 1]}, {spec.v[kPad], spec.v[kPad + 1]},
          {spec.v[kDil], spec.v[kDil + 1]}, false, {0, 0}, 1, {need[0], true, need_bias_path});
      if (need[0]) grads[0] = std::get<0>(res);
      dmerged = std::get<1>(res);
      dbias = std::get<2>(res);
    }
    if (need[1]) grads[1] = dmerged;
    if (need_factors) {
      AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "floral_merge_backward", [&] {
        Tensor g;  // dW' as the (m, n) matrix
        if (spec.conv()) {
          auto gk = dmerged.contiguous();
          g = at::empty({m, n}, gk.options());
          const scalar_t* src = gk.data_ptr<scalar_t>();
          scalar_t* dst = g.data_ptr<scalar_t>();
          for_kernel_entries(spec, [&](int64_t q, int64_t k) { dst[q] = src[k]; });
        } else {
          g = dmerged.contiguous();
        }
        auto da = direct ? at::empty_like(lora_out) : at::empty_like(a);
        Tensor db;
        const scalar_t* wp = wc.data_ptr<scalar_t>();
        if (cr * m * n >= kBlasWork) {  // large: (G B)^T and A^T G with ATen, then scale
          auto d = at::mm(b.view({cr, n}), g.t());  // (C r, m)
          db = at::mm(a.view({cr, m}), g).view(lora_in.sizes());
          const scalar_t* dp = d.data_ptr<scalar_t>();
          const scalar_t* ap = a.data_ptr<scalar_t>();
          scalar_t* dap = da.data_ptr<scalar_t>();
          scalar_t* dbp = db.data_ptr<scalar_t>();
          for (int64_t q = 0; q < cr; ++q) {
            const scalar_t f = wp[q / r];
            double acc = 0.0;
            for (int64_t i = 0; i < m; ++i) {
              acc += static_cast<double>(ap[q * m + i]) * static_cast<double>(dp[q * m + i]);
              dap[q * m + i] = f * dp[q * m + i];
            }
            dw[q / r] += acc;
            for (int64_t j = 0; j < n; ++j) dbp[q * n + j] *= f;
          }
        } else {
          db = at::empty(lora_in.sizes(), lora_in.options());
          kernel_merge_backward(g.data_ptr<scalar_t>(), a.data_ptr<scalar_t>(),
                                b.data_ptr<scalar_t>(), wp, cr, r, m, n, da.data_ptr<scalar_t>(),
                                db.data_ptr<scalar_t>(), dw.data());
        }
        if (need[3]) grads[3] = direct ? da : out_grad(da, lora_out, spec);
        if (need[4]) grads[4] = db;
      });
    }
  }
  if (need[2]) grads[2] = dbias;
  if (lora_bias.defined() && (need[5] || need[6])) {
    AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "floral_bias_backward", [&] {
      auto gb = dbias.contiguous();
      auto lbc = lora_bias.contiguous();
      Tensor dlb;
      if (need[5]) dlb = at::empty({c, m_out}, lora_bias.options());
      bias_backward<scalar_t>(gb.data_ptr<scalar_t>(), lbc.data_ptr<scalar_t>(),
                              wc.data_ptr<scalar_t>(), c, m_out,
                              dlb.defined() ? dlb.data_ptr<scalar_t>() : nullptr, dw.data());
      if (need[5]) grads[5] = dlb;
    });
  }
}

// the mixture weights' gradient (accumulated in double) as a tensor like w
Tensor weight_gradient(const std::vector<double>& dw, const Tensor& w) {
  auto out = at::empty({static_cast<int64_t>(dw.size())}, w.options());
  AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "floral_weight_gradient", [&] {
    scalar_t* p = out.data_ptr<scalar_t>();
    for (size_t k = 0; k < dw.size(); ++k) p[k] = static_cast<scalar_t>(dw[k]);
  });
  return out;
}

// The gradients of `y` (a differentiable recomputation) with respect to the needed ones of
// `inputs`, differentiable themselves (the create_graph paths); undefined where not needed.
variable_list recomputed_gradients(const Tensor& y, const Tensor& dy, const variable_list& inputs,
                                   const std::vector<bool>& need) {
  variable_list out(inputs.size());
  std::vector<size_t> slots;
  variable_list wanted;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (need[i]) {
      slots.push_back(i);
      wanted.push_back(inputs[i]);
    }
  }
  if (wanted.empty()) return out;
  auto got = torch::autograd::grad({y}, wanted, {dy}, /*retain_graph=*/true,
                                   /*create_graph=*/true, /*allow_unused=*/true);
  for (size_t k = 0; k < slots.size(); ++k) out[slots[k]] = got[k];
  return out;
}

struct FloralOp : public torch::autograd::Function<FloralOp> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight,
                        const c10::optional<Tensor>& bias_opt, const Tensor& lora_out,
                        const Tensor& lora_in, const c10::optional<Tensor>& lora_bias_opt,
                        const Tensor& w, const Spec& spec) {
    const LayerTensors t{weight, bias_opt.value_or(Tensor()), lora_out, lora_in,
                         lora_bias_opt.value_or(Tensor())};
    Kept kept;
    auto y = layer_forward(x, t, w, spec, kept);
    ctx->saved_data["spec"] = c10::List<int64_t>(spec.v);
    ctx->saved_data["pass"] = static_cast<int64_t>(kept.pass);
    ctx->save_for_backward({x, weight, t.bias, lora_out, lora_in, t.lora_bias, w, kept.tensor});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Spec spec(ctx->saved_data["spec"].toIntVector());
    auto saved = ctx->get_saved_variables();
    const Tensor& dy = grads[0];
    variable_list out(8);  // x, weight, bias, lora_out, lora_in, lora_bias, w, spec
    if (!dy.defined()) return out;
    // needs_input_grad counts the tensor arguments only: map the argument positions to it
    Needs need{};
    for (int64_t i = 0, v = 0; i < 7; ++i) {
      need[i] = saved[i].defined() && ctx->needs_input_grad(v++);  // v counts defined ones
    }
    const LayerTensors t{saved[1], saved[2], saved[3], saved[4], saved[5]};
    if (torch::GradMode::is_enabled()) {  // create_graph: differentiate plain_forward
      variable_list inputs(saved.begin(), saved.begin() + 7);
      auto y = plain_forward(saved[0], t.weight, t.bias, t.lora_out, t.lora_in, t.lora_bias,
                             saved[6], spec);
      auto got = recomputed_gradients(y, dy, inputs, std::vector<bool>(need.begin(), need.end()));
      std::copy(got.begin(), got.end(), out.begin());
      return out;
    }
    const Kept kept{saved[7], static_cast<Pass>(ctx->saved_data["pass"].toInt())};
    std::vector<double> dw(spec.v[kC], 0.0);
    std::array<Tensor, 6> layer_grads;
    layer_backward(saved[0], t, saved[6], spec, kept, dy, need, dw, layer_grads);
    std::copy(layer_grads.begin(), layer_grads.end(), out.begin());
    if (need[6]) out[6] = weight_gradient(dw, saved[6]);
    return out;
  }
};

// ---------------------------------------------------------------------------------------------
// A chain of adapted linear layers with elementwise activations between them, in one autograd
// node: z_l = h_{l-1} W'_l^T + b'_l, h_l = act_l(z_l), h_0 = x. The per-node and per-call fixed
// costs of torch (a few microseconds each) are paid once for the chain instead of once per
// layer and activation.

// activation after a layer
enum Activation : int64_t { kIdentity = 0, kRelu = 1, kTanh = 2, kSigmoid = 3, kActivations = 4 };

// The chain's description: per layer its spec, activation and whether it has a base bias and
// bias adaptors; the parameters come as one flat list, per layer weight, [bias], lora_out,
// lora_in, [lora_bias]. Encoded as one integer list (kept with the autograd node).
struct Chain {
  std::vector<Spec> layers;
  std::vector<int64_t> acts;
  std::vector<std::array<int64_t, 5>> slots;  // position of each layer tensor in params, or -1
  int64_t n_params = 0;

  Chain(const std::vector<std::vector<int64_t>>& specs, const std::vector<int64_t>& activations,
        const std::vector<bool>& has_bias, const std::vector<bool>& has_lora_bias) {
    const size_t count = specs.size();
    TORCH_CHECK(count > 0, "floral_chain: a chain needs at least one layer");
    TORCH_CHECK(activations.size() == count && has_bias.size() == count &&
                    has_lora_bias.size() == count,
                "floral_chain: one activation and bias flags per layer expected");
    for (size_t l = 0; l < count; ++l) {
      layers.emplace_back(specs[l]);
      TORCH_CHECK(!layers.back().conv(), "floral_chain: linear layers only");
      TORCH_CHECK(activations[l] >= 0 && activations[l] < kActivations,
                  "floral_chain: unknown activation code ", activations[l]);
      TORCH_CHECK(l == 0 || layers[l].v[kN] == layers[l - 1].v[kM],
                  "floral_chain: layer ", l, " takes ", layers[l].v[kN],
                  " features, the one before gives ", layers[l - 1].v[kM]);
      acts.push_back(activations[l]);
      std::array<int64_t, 5> at{};
      at[0] = n_params++;
      at[1] = has_bias[l] ? n_params++ : -1;
      at[2] = n_params++;
      at[3] = n_params++;
      at[4] = has_lora_bias[l] ? n_params++ : -1;
      slots.push_back(at);
    }
  }

  // the flat encoding: count, then per layer spec, activation, has_bias, has_lora_bias
  std::vector<int64_t> encode() const {
    std::vector<int64_t> e{static_cast<int64_t>(layers.size())};
    for (size_t l = 0; l < layers.size(); ++l) {
      e.insert(e.end(), layers[l].v.begin(), layers[l].v.end());
      e.push_back(acts[l]);
      e.push_back(slots[l][1] >= 0);
      e.push_back(slots[l][4] >= 0);
    }
    return e;
  }

  static Chain decode(const std::vector<int64_t>& e) {
    std::vector<std::vector<int64_t>> specs;
    std::vector<int64_t> activations;
    std::vector<bool> has_bias, has_lora_bias;
    size_t at = 1;
    for (int64_t l = 0; l < e[0]; ++l) {
      specs.emplace_back(e.begin() + at, e.begin() + at + kSpecLength);
      at += kSpecLength;
      activations.push_back(e[at++]);
      has_bias.push_back(e[at++] != 0);
      has_lora_bias.push_back(e[at++] != 0);
    }
    return Chain(specs, activations, has_bias, has_lora_bias);
  }

  size_t size() const { return layers.size(); }

  // layer l's tensors out of the flat list
  LayerTensors tensors(const variable_list& params, size_t l, size_t offset = 0) const {
    auto get = [&](int64_t i) { return i < 0 ? Tensor() : params[offset + i]; };
    const auto& s = slots[l];
    return {get(s[0]), get(s[1]), get(s[2]), get(s[3]), get(s[4])};
  }
};

// act(z) in place (z is the chain's own tensor)
void activate_(Tensor& z, int64_t act) {
  if (act == kRelu && z.numel() <= kSmallElementwise && z.is_contiguous()) {
    AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "floral_relu", [&] {
      kernel_relu_inplace(z.data_ptr<scalar_t>(), z.numel());
    });
  } else if (act == kRelu) z.relu_();
  else if (act == kTanh) z.tanh_();
  else if (act == kSigmoid) z.sigmoid_();
}

// act(z), differentiable (the create_graph path)
Tensor activate(const Tensor& z, int64_t act) {
  if (act == kRelu) return at::relu(z);
  if (act == kTanh) return at::tanh(z);
  if (act == kSigmoid) return at::sigmoid(z);
  return z;
}

// dL/dz from dL/dh and the activation's output h = act(z)
Tensor activation_backward(const Tensor& dh, const Tensor& h, int64_t act) {
  if (act == kRelu && h.numel() <= kSmallElementwise && dh.is_contiguous() &&
      h.is_contiguous() && dh.sizes() == h.sizes()) {
    auto out = at::empty_like(h);
    AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "floral_relu_backward", [&] {
      kernel_relu_backward(dh.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(), h.numel(),
                           out.data_ptr<scalar_t>());
    });
    return out;
  }
  if (act == kRelu) return at::threshold_backward(dh, h, 0);
  if (act == kTanh) return at::tanh_backward(dh, h);
  if (act == kSigmoid) return at::sigmoid_backward(dh, h);
  return dh;
}

// the chain with differentiable ATen operations (the create_graph path and the reference)
Tensor plain_chain(const Tensor& x, const Tensor& w, const variable_list& params,
                   const Chain& chain, size_t offset = 0) {
  Tensor h = x;
  for (size_t l = 0; l < chain.size(); ++l) {
    const auto t = chain.tensors(params, l, offset);
    h = activate(plain_forward(h, t.weight, t.bias, t.lora_out, t.lora_in, t.lora_bias, w,
                               chain.layers[l]),
                 chain.acts[l]);
  }
  return h;
}

// The router folded into the chain: the mixture weights of logits theta,
//     w = alpha max(softmax(theta), pi_min)       (riemfl/nn/floral/router.py, adaptor.py),
// and the logits' gradient from the weights' one: with pi = softmax(theta) and
// g_c = alpha dw_c [pi_c >= pi_min] (the clamp passes the gradient where it does not bind),
//     dtheta = pi * (g - <pi, g>).
struct Mixture {
  bool logits = false;  // false: the input is w itself
  double scale = 1.0;
  double min_prob = 0.0;
};

// softmax(theta) in double
std::vector<double> softmax_of(const Tensor& theta) {
  const int64_t c = theta.numel();
  std::vector<double> pi(c);
  AT_DISPATCH_FLOATING_TYPES(theta.scalar_type(), "floral_softmax", [&] {
    const auto t = theta.contiguous();
    const scalar_t* p = t.data_ptr<scalar_t>();
    for (int64_t k = 0; k < c; ++k) pi[k] = static_cast<double>(p[k]);
  });
  double top = pi[0], total = 0.0;
  for (int64_t k = 1; k < c; ++k) top = std::max(top, pi[k]);
  for (int64_t k = 0; k < c; ++k) total += pi[k] = std::exp(pi[k] - top);
  for (int64_t k = 0; k < c; ++k) pi[k] /= total;
  return pi;
}

Tensor mixture_weights(const Tensor& theta, const Mixture& mix) {
  const auto pi = softmax_of(theta);
  std::vector<double> w(pi.size());
  for (size_t k = 0; k < pi.size(); ++k) {
    w[k] = mix.scale * (mix.min_prob > 0.0 ? std::max(pi[k], mix.min_prob) : pi[k]);
  }
  return weight_gradient(w, theta);  // (a tensor like theta from doubles)
}

Tensor logits_gradient(const std::vector<double>& dw, const Tensor& theta, const Mixture& mix) {
  const auto pi = softmax_of(theta);
  std::vector<double> g(pi.size());
  double dot = 0.0;
  for (size_t k = 0; k < pi.size(); ++k) {
    g[k] = (mix.min_prob > 0.0 && pi[k] < mix.min_prob) ? 0.0 : mix.scale * dw[k];
    dot += pi[k] * g[k];
  }
  for (size_t k = 0; k < pi.size(); ++k) g[k] = pi[k] * (g[k] - dot);
  return weight_gradient(g, theta);
}

// the same with differentiable ATen operations (the create_graph path and the reference)
Tensor plain_mixture_weights(const Tensor& theta, const Mixture& mix) {
  auto pi = at::softmax(theta, 0);
  if (mix.min_prob > 0.0) pi = at::clamp_min(pi, mix.min_prob);
  return mix.scale == 1.0 ? pi : pi * mix.scale;
}

struct FloralChain : public torch::autograd::Function<FloralChain> {
  // `mix`: the mixture weights w, or (mix.logits) the router's logits theta
  // saved: x, mix, params (n_params), then per layer the kept tensor, then per layer h_l, then w
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& mixture,
                        at::TensorList params, const Chain& chain, const Mixture& mix) {
    TORCH_CHECK(static_cast<int64_t>(params.size()) == chain.n_params, "floral_chain: ",
                chain.n_params, " parameter tensors expected, got ", params.size());
    TORCH_CHECK(mixture.dim() == 1 && mixture.numel() > 0,
                "floral_chain: mixture weights or logits of shape (C,) expected, got ",
                mixture.sizes());
    const Tensor w = mix.logits ? mixture_weights(mixture, mix) : mixture;
    const variable_list ps(params.begin(), params.end());
    variable_list to_save{x, mixture};
    to_save.insert(to_save.end(), ps.begin(), ps.end());
    variable_list outputs;
    c10::List<int64_t> passes;
    Tensor h = x;
    for (size_t l = 0; l < chain.size(); ++l) {
      Kept kept;
      h = layer_forward(h, chain.tensors(ps, l), w, chain.layers[l], kept);
      activate_(h, chain.acts[l]);
      to_save.push_back(kept.tensor);
      passes.push_back(kept.pass);
      outputs.push_back(h);
    }
    to_save.insert(to_save.end(), outputs.begin(), outputs.end());
    to_save.push_back(w);
    ctx->saved_data["chain"] = c10::List<int64_t>(chain.encode());
    ctx->saved_data["mix"] = c10::List<double>({mix.logits ? 1.0 : 0.0, mix.scale, mix.min_prob});
    ctx->saved_data["passes"] = passes;
    ctx->save_for_backward(to_save);
    return h;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Chain chain = Chain::decode(ctx->saved_data["chain"].toIntVector());
    const auto passes = ctx->saved_data["passes"].toIntList();
    const auto mix_values = ctx->saved_data["mix"].toDoubleVector();
    const Mixture mix{mix_values[0] != 0.0, mix_values[1], mix_values[2]};
    auto saved = ctx->get_saved_variables();
    const size_t count = chain.size(), n_params = static_cast<size_t>(chain.n_params);
    const Tensor &x = saved[0], &mixture = saved[1], &w = saved.back();
    const Tensor& dy = grads[0];
    variable_list out(4 + n_params);  // x, mixture, params..., chain, mix
    if (!dy.defined()) return out;
    std::vector<bool> need(2 + n_params);
    for (size_t i = 0; i < need.size(); ++i) need[i] = ctx->needs_input_grad(i);
    if (torch::GradMode::is_enabled()) {  // create_graph: differentiate plain_chain
      variable_list inputs(saved.begin(), saved.begin() + 2 + n_params);
      auto y = plain_chain(x, mix.logits ? plain_mixture_weights(mixture, mix) : mixture, inputs,
                           chain, 2);
      auto got = recomputed_gradients(y, dy, inputs, need);
      std::copy(got.begin(), got.end(), out.begin());
      return out;
    }
    const size_t kept_at = 2 + n_params, h_at = kept_at + count;
    std::vector<double> dw(w.size(0), 0.0);
    Tensor dh = dy;
    for (size_t k = count; k-- > 0;) {
      const auto& s = chain.slots[k];
      auto dz = activation_backward(dh, saved[h_at + k], chain.acts[k]);
      Needs layer_need{};
      layer_need[0] = k > 0 || need[0];
      for (int64_t i = 0; i < 5; ++i) layer_need[1 + i] = s[i] >= 0 && need[2 + s[i]];
      layer_need[6] = need[1];
      std::array<Tensor, 6> g;
      const Tensor& input = k == 0 ? x : saved[h_at + k - 1];
      layer_backward(input, chain.tensors(saved, k, 2), w, chain.layers[k],
                     Kept{saved[kept_at + k], static_cast<Pass>(passes.get(k))}, dz, layer_need, dw, g);
      for (int64_t i = 0; i < 5; ++i) {
        if (s[i] >= 0) out[2 + s[i]] = g[1 + i];
      }
      dh = g[0];
    }
    if (need[0]) out[0] = dh;
    if (need[1]) out[1] = mix.logits ? logits_gradient(dw, mixture, mix) : weight_gradient(dw, w);
    return out;
  }
};

Tensor floral_op(const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias,
                 const Tensor& lora_out, const Tensor& lora_in,
                 const c10::optional<Tensor>& lora_bias, const Tensor& w, const Spec& spec) {
  return FloralOp::apply(x, weight, bias, lora_out, lora_in, lora_bias, w, spec);
}

Tensor floral_op_reference(const Tensor& x, const Tensor& weight,
                           const c10::optional<Tensor>& bias, const Tensor& lora_out,
                           const Tensor& lora_in, const c10::optional<Tensor>& lora_bias,
                           const Tensor& w, const Spec& spec) {
  return plain_forward(x, weight, bias.value_or(Tensor()), lora_out, lora_in,
                       lora_bias.value_or(Tensor()), w, spec);
}

Tensor floral_chain(const Tensor& x, const Tensor& mixture, const std::vector<Tensor>& params,
                    const Chain& chain, bool logits, double scale, double min_prob) {
  return FloralChain::apply(x, mixture, at::TensorList(params), chain,
                            Mixture{logits, scale, min_prob});
}

Tensor floral_chain_reference(const Tensor& x, const Tensor& mixture,
                              const std::vector<Tensor>& params, const Chain& chain, bool logits,
                              double scale, double min_prob) {
  TORCH_CHECK(static_cast<int64_t>(params.size()) == chain.n_params, "floral_chain: ",
              chain.n_params, " parameter tensors expected, got ", params.size());
  const Mixture mix{logits, scale, min_prob};
  return plain_chain(x, logits ? plain_mixture_weights(mixture, mix) : mixture,
                     variable_list(params.begin(), params.end()), chain);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  pybind11::class_<Spec>(m, "Spec").def(pybind11::init<std::vector<int64_t>>());
  pybind11::class_<Chain>(m, "Chain")
      .def(pybind11::init<const std::vector<std::vector<int64_t>>&, const std::vector<int64_t>&,
                          const std::vector<bool>&, const std::vector<bool>&>())
      .def_readonly("n_params", &Chain::n_params);
  m.def("floral_op", &floral_op, "FLoRAL fused layer (merged weight + base operation)");
  m.def("floral_op_reference", &floral_op_reference,
        "the same layer with differentiable ATen operations");
  m.def("floral_chain", &floral_chain,
        "a chain of FLoRAL linear layers and activations in one autograd node; the mixture "
        "weights w, or (logits=True) the router's logits with w = scale max(softmax, min_prob)",
        pybind11::arg("x"), pybind11::arg("mixture"), pybind11::arg("params"),
        pybind11::arg("chain"), pybind11::arg("logits") = false, pybind11::arg("scale") = 1.0,
        pybind11::arg("min_prob") = 0.0);
  m.def("floral_chain_reference", &floral_chain_reference,
        "the same chain with differentiable ATen operations", pybind11::arg("x"),
        pybind11::arg("mixture"), pybind11::arg("params"), pybind11::arg("chain"),
        pybind11::arg("logits") = false, pybind11::arg("scale") = 1.0,
        pybind11::arg("min_prob") = 0.0);
  m.def("runs_factored", &runs_factored,
        "whether a layer with this spec runs factored with ATen's products (not merged) for this "
        "many input rows, ignoring the loops (the torch path's rule)");
  m.def("layer_pass", [](const Spec& s, int64_t rows) { return static_cast<int64_t>(layer_pass(s, rows)); },
        "how a layer with this spec runs for this many input rows: 0 merged, 1 factored (ATen), "
        "2 factored (loops)");
  m.attr("SPEC_LENGTH") = static_cast<int64_t>(kSpecLength);
  m.attr("BLAS_WORK") = kBlasWork;
  m.attr("FACTORED_SAVING") = kFactoredSaving;
  m.attr("THIN_WORK") = kThinWork;
  m.attr("ACTIVATIONS") = std::vector<std::string>{"identity", "relu", "tanh", "sigmoid"};
}
