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

#include <array>
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

// whether [A_1 ... A_C]^T (C r, m) is lora_out's own memory (linear layers; conv with r = 1)
bool out_is_matrix(const Tensor& lora_out, const Spec& s) {
  return (!s.conv() || s.v[kR] == 1) && lora_out.is_contiguous();
}

// w repeated r times: (w_1 .. w_1, ..., w_C .. w_C)
Tensor weight_per_rank(const Tensor& w, const Spec& s) {
  return s.v[kR] == 1 ? w.contiguous() : w.repeat_interleave(s.v[kR]).contiguous();
}

Tensor base_op(const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias,
               const Spec& s) {
  if (!s.conv()) return at::linear(x, weight, bias);
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

struct FloralOp : public torch::autograd::Function<FloralOp> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight,
                        const c10::optional<Tensor>& bias_opt, const Tensor& lora_out,
                        const Tensor& lora_in, const c10::optional<Tensor>& lora_bias_opt,
                        const Tensor& w, const Spec& spec) {
    const Tensor bias = bias_opt.value_or(Tensor());
    const Tensor lora_bias = lora_bias_opt.value_or(Tensor());
    check_inputs(x, weight, bias, lora_out, lora_in, lora_bias, w, spec);
    const int64_t m = spec.v[kM], n = spec.v[kN], cr = spec.cr(), r = spec.v[kR];
    const int64_t c = spec.v[kC], m_out = spec.conv() ? spec.v[kCout] : m;
    auto a = out_is_matrix(lora_out, spec) ? lora_out : out_matrix(lora_out, spec);
    auto b = lora_in.contiguous();
    auto wc = w.contiguous();
    Tensor merged_b = bias;  // b + L_b^T w
    if (lora_bias.defined()) {
      merged_b = at::empty({m_out}, weight.options());
      AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "floral_bias", [&] {
        auto bc = bias.defined() ? bias.contiguous() : Tensor();
        auto lbc = lora_bias.contiguous();
        bias_merge<scalar_t>(merged_b.data_ptr<scalar_t>(),
                             bc.defined() ? bc.data_ptr<scalar_t>() : nullptr,
                             lbc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), c, m_out);
      });
    }
    ctx->saved_data["spec"] = c10::List<int64_t>(spec.v);
    const int64_t rows = spec.conv() ? 0 : x.numel() / n;
    const bool factored = runs_factored(spec, rows);
    ctx->saved_data["factored"] = factored;
    if (factored) {  // y = x W^T + b' + ((x B) diag(w)) A^T, without the merged weight
      auto x2 = x.reshape({rows, n});
      auto h = at::mm(x2, b.view({cr, n}).t());  // (rows, C r): x B
      auto y = at::linear(x2, weight, opt(merged_b));
      y.addmm_(h * weight_per_rank(w, spec), a.view({cr, m}));
      ctx->save_for_backward({x, weight, bias, lora_out, lora_in, lora_bias, w, h});
      std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
      sizes.back() = m;
      return y.view(sizes);
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
        kernel_merge(merged.data_ptr<scalar_t>(),
                     spec.conv() ? nullptr : base.data_ptr<scalar_t>(), a.data_ptr<scalar_t>(),
                     b.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), cr, r, m, n);
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
    ctx->save_for_backward({x, weight, bias, lora_out, lora_in, lora_bias, w, merged});
    return base_op(x, merged, opt(merged_b), spec);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Spec spec(ctx->saved_data["spec"].toIntVector());
    const bool factored = ctx->saved_data["factored"].toBool();
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &lora_out = saved[3],
                 &lora_in = saved[4], &lora_bias = saved[5], &w = saved[6];
    // saved[7]: the merged weight, or (factored) x B
    const Tensor& dy = grads[0];
    variable_list out(8);  // x, weight, bias, lora_out, lora_in, lora_bias, w, spec
    if (!dy.defined()) return out;
    // needs_input_grad counts the tensor arguments only: map the argument positions to it
    std::array<bool, 7> need{};
    for (int64_t i = 0, v = 0; i < 7; ++i) {
      need[i] = saved[i].defined() && ctx->needs_input_grad(v++);  // v counts defined ones
    }
    if (torch::GradMode::is_enabled()) return differentiable_backward(saved, need, dy, spec);

    const int64_t m = spec.v[kM], n = spec.v[kN], cr = spec.cr(), c = spec.v[kC], r = spec.v[kR];
    const int64_t m_out = spec.conv() ? spec.v[kCout] : m;
    const bool need_factors = need[3] || need[4] || need[6];
    const bool need_bias_path = bias.defined() || lora_bias.defined();
    const bool direct = out_is_matrix(lora_out, spec);
    auto a = direct ? lora_out : out_matrix(lora_out, spec);
    auto b = lora_in.contiguous();
    auto wc = w.contiguous();
    std::vector<double> dw(c, 0.0);
    Tensor dbias;
    if (factored) {
      const Tensor& h = saved[7];  // (rows, C r): x B
      auto g2 = dy.reshape({-1, m});
      auto x2 = x.reshape({-1, n});
      auto wck = weight_per_rank(w, spec);
      Tensor ga;  // (rows, C r): dy A
      if (need[0] || need[4] || need[6]) ga = at::mm(g2, a.view({cr, m}).t());
      if (need[0]) {
        auto dx = at::mm(g2, weight);
        dx.addmm_(ga * wck, b.view({cr, n}));
        out[0] = dx.view(x.sizes());
      }
      if (need[1]) out[1] = at::mm(g2.t(), x2);
      if (need_bias_path) dbias = g2.sum(0);
      if (need[3]) out[3] = out_grad(at::mm((h * wck).t(), g2), lora_out, spec);
      if (need[4]) out[4] = at::mm((ga * wck).t(), x2).view(lora_in.sizes());
      if (need[6]) {
        auto per_rank = (h * ga).sum(0).to(at::kDouble).contiguous();  // <x B_ck, dy A_ck>
        const double* p = per_rank.data_ptr<double>();
        for (int64_t q = 0; q < cr; ++q) dw[q / r] += p[q];
      }
    } else {
      const Tensor& merged = saved[7];
      // the base operation's backward with the merged weight: dx, dW', db'
      Tensor dmerged;
      if (!spec.conv()) {
        auto g2 = dy.reshape({-1, m});
        if (need[0]) out[0] = at::mm(g2, merged).view(x.sizes());
        dmerged = at::mm(g2.t(), x.reshape({-1, n}));
        if (need_bias_path) dbias = g2.sum(0);
      } else {
        auto res = at::convolution_backward(
            dy, x, merged,
            need_bias_path ? c10::OptionalIntArrayRef(at::IntArrayRef(spec.v[kCout]))
                           : c10::nullopt,
            {spec.v[kStride], spec.v[kStride + 1]}, {spec.v[kPad], spec.v[kPad + 1]},
            {spec.v[kDil], spec.v[kDil + 1]}, false, {0, 0}, 1, {need[0], true, need_bias_path});
        if (need[0]) out[0] = std::get<0>(res);
        dmerged = std::get<1>(res);
        dbias = std::get<2>(res);
      }
      if (need[1]) out[1] = dmerged;
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
          if (need[3]) out[3] = direct ? da : out_grad(da, lora_out, spec);
          if (need[4]) out[4] = db;
        });
      }
    }
    if (need[2]) out[2] = dbias;
    if (!(need[5] || need[6])) return out;
    AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "floral_bias_backward", [&] {
      if (lora_bias.defined()) {
        auto gb = dbias.contiguous();
        auto lbc = lora_bias.contiguous();
        Tensor dlb;
        if (need[5]) dlb = at::empty({c, m_out}, lora_bias.options());
        bias_backward<scalar_t>(gb.data_ptr<scalar_t>(), lbc.data_ptr<scalar_t>(),
                                wc.data_ptr<scalar_t>(), c, m_out,
                                dlb.defined() ? dlb.data_ptr<scalar_t>() : nullptr, dw.data());
        if (need[5]) out[5] = dlb;
      }
      if (need[6]) {
        auto dwt = at::empty({c}, w.options());
        scalar_t* p = dwt.data_ptr<scalar_t>();
        for (int64_t k = 0; k < c; ++k) p[k] = static_cast<scalar_t>(dw[k]);
        out[6] = dwt;
      }
    });
    return out;
  }

  // create_graph: the gradients of plain_forward, themselves differentiable
  static variable_list differentiable_backward(const variable_list& saved,
                                               const std::array<bool, 7>& need, const Tensor& dy,
                                               const Spec& spec) {
    variable_list out(8);
    std::vector<int64_t> slots;
    variable_list inputs;
    for (int64_t i = 0; i < 7; ++i) {
      if (need[i]) {
        slots.push_back(i);
        inputs.push_back(saved[i]);
      }
    }
    if (inputs.empty()) return out;
    auto y = plain_forward(saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], saved[6],
                           spec);
    auto got = torch::autograd::grad({y}, inputs, {dy}, /*retain_graph=*/true,
                                     /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t k = 0; k < slots.size(); ++k) out[slots[k]] = got[k];
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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  pybind11::class_<Spec>(m, "Spec").def(pybind11::init<std::vector<int64_t>>());
  m.def("floral_op", &floral_op, "FLoRAL fused layer (merged weight + base operation)");
  m.def("floral_op_reference", &floral_op_reference,
        "the same layer with differentiable ATen operations");
  m.def("runs_factored", &runs_factored,
        "whether a layer with this spec runs factored (not merged) for this many input rows");
  m.attr("SPEC_LENGTH") = static_cast<int64_t>(kSpecLength);
  m.attr("BLAS_WORK") = kBlasWork;
  m.attr("FACTORED_SAVING") = kFactoredSaving;
}
