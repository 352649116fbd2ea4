// The attention activation family of science.md, written once: the registry of
// activations (each one specialisation of Phi<A> below: its name, what it takes, phi,
// phi' and a plain float64 reference), the scale c, the per-row Frobenius-norm
// statistics, and the one dispatch from a run-time activation to compile-time code.
// Used by the CPU kernels, the CUDA kernels, the grid validation, the commands and the
// tests (the header compiles under nvcc as __host__ __device__).
//
// Adding an activation (docs/adding-an-activation.md): a value in `Activation` before
// `count`, a `Phi<>` specialisation. Everything else (grid values, the `attention`
// command, report labels, kernel instantiations, the tests' case lists) derives from it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__ __forceinline__
#else
#define ATTN_HD inline
#endif

namespace attnsweep {

// The ids are stored in no file (cells name activations by `name`), so the order is
// free; `count` must stay last.
enum class Activation : int32_t { softmax = 0, poly = 1, relu = 2, sigmoid = 3, relu2 = 4, count };
constexpr int32_t kActivationCount = static_cast<int32_t>(Activation::count);

// Scale c of the activations that take one: 1, 1/sqrt(N), 1/N, or a given number.
enum class ScaleKind : int32_t { none = 0, inv_sqrt_n = 1, inv_n = 2, value = 3 };

// Powers p of the activations that take a degree: the grid's and the command's range.
constexpr int32_t kMinDegree = 1, kMaxDegree = 16;
// Degrees the fused kernels specialise at compile time (1..kFixedDegrees); others read
// the degree at run time.
constexpr int32_t kFixedDegrees = 4;

// What a user asks for: independent of the prompt length.
struct ActivationSpec {
  Activation activation = Activation::softmax;
  int32_t degree = 1;                 // activations that take a degree
  ScaleKind scale = ScaleKind::none;  // activations that take a scale
  double scale_value = 1.0;           // ScaleKind::value only
};

// The spec resolved for N attended keys: phi(s) = c * f(s + bias).
struct PhiParams {
  Activation activation = Activation::softmax;
  int32_t degree = 1;
  float c = 1.0f;     // activations that take a scale
  float bias = 0.0f;  // activations with bias_log_n: -log N
};

template <class T>
ATTN_HD T ipow(T x, int32_t p) {
  T r = T(1);
  while (p > 0) {
    if (p & 1) r *= x;
    x *= x;
    p >>= 1;
  }
  return r;
}

// ipow with the exponent fixed at compile time (square-and-multiply, the same products
// as ipow for P <= 4), so that loops over a score row vectorise.
template <int32_t P, class T>
ATTN_HD T ipow_fixed(T x) {
  if constexpr (P <= 0) {
    return T(1);
  } else if constexpr (P == 1) {
    return x;
  } else {
    const T h = ipow_fixed<P / 2>(x);
    if constexpr (P % 2 == 1)
      return x * (h * h);
    else
      return h * h;
  }
}

// s^p with p fixed at compile time (Deg > 0) or read from the parameters (Deg == 0).
template <int32_t Deg, class T>
ATTN_HD T power_of(const PhiParams& p, T s) {
  if constexpr (Deg > 0)
    return ipow_fixed<Deg>(s);
  else
    return ipow(s, p.degree);
}

// ---- the registry: one specialisation per activation --------------------------------
// Each Phi<A> says what the activation is and takes:
//   name         the grid's and the command line's value
//   label        its name in figures
//   formula      phi in words, for --help, the docs and the JSON Schema
//   elementwise  phi acts on each score alone (softmax: on the row, with its own code)
//   takes_degree, takes_scale, bias_log_n (phi(s) = f(s - log N))
//   torch        the same phi as a PyTorch expression in s, c, b (bias) and p (degree),
//                for the independent autograd test (tests/integration/attention_torch.py)
// and, if elementwise, computes phi and phi' (Deg as in power_of; exp_fn lets a backend
// supply its own exp) plus ref_phi / ref_dphi (s, c, p, b), a plain float64 reference
// for the tests.
template <Activation A>
struct Phi;

template <>
struct Phi<Activation::softmax> {
  static constexpr const char* name = "softmax";
  static constexpr const char* label = "softmax";
  static constexpr const char* formula = "exp(s_j) / sum_k exp(s_k) over the row";
  static constexpr bool elementwise = false, takes_degree = false, takes_scale = false, bias_log_n = false;
  static constexpr const char* torch = "torch.softmax(s, dim=-1)";
};

template <>
struct Phi<Activation::poly> {
  static constexpr const char* name = "poly";
  static constexpr const char* label = "poly";
  static constexpr const char* formula = "c * s^p";
  static constexpr bool elementwise = true, takes_degree = true, takes_scale = true, bias_log_n = false;
  static constexpr const char* torch = "c * s ** p";
  template <int32_t Deg, class T, class ExpFn>
  static ATTN_HD T phi(const PhiParams& p, T s, ExpFn) {
    return T(p.c) * power_of<Deg>(p, s);
  }
  template <int32_t Deg, class T, class ExpFn>
  static ATTN_HD T dphi(const PhiParams& p, T s, ExpFn) {
    if constexpr (Deg > 0)
      return T(p.c) * T(Deg) * ipow_fixed<Deg - 1>(s);
    else
      return T(p.c) * T(p.degree) * ipow(s, p.degree - 1);
  }
  static double ref_phi(double s, double c, int32_t p, double) { return c * std::pow(s, p); }
  static double ref_dphi(double s, double c, int32_t p, double) { return c * p * std::pow(s, p - 1); }
};

template <>
struct Phi<Activation::relu> {
  static constexpr const char* name = "relu";
  static constexpr const char* label = "ReLU";
  static constexpr const char* formula = "c * max(s, 0)";
  static constexpr bool elementwise = true, takes_degree = false, takes_scale = true, bias_log_n = false;
  static constexpr const char* torch = "c * torch.relu(s)";
  template <int32_t Deg, class T, class ExpFn>
  static ATTN_HD T phi(const PhiParams& p, T s, ExpFn) {
    return s > T(0) ? T(p.c) * s : T(0);
  }
  template <int32_t Deg, class T, class ExpFn>
  static ATTN_HD T dphi(const PhiParams& p, T s, ExpFn) {
    return s > T(0) ? T(p.c) : T(0);
  }
  static double ref_phi(double s, double c, int32_t, double) { return s > 0 ? c * s : 0.0; }
  static double ref_dphi(double s, double c, int32_t, double) { return s > 0 ? c : 0.0; }
};

template <>
struct Phi<Activation::sigmoid> {
  static constexpr const char* name = "sigmoid";
  static constexpr const char* label = "sigmoid";
  static constexpr const char* formula = "1 / (1 + exp(-(s - log N)))";
  static constexpr bool elementwise = true, takes_degree = false, takes_scale = false, bias_log_n = true;
  static constexpr const char* torch = "torch.sigmoid(s + b)";
  template <int32_t Deg, class T, class ExpFn>
  static ATTN_HD T phi(const PhiParams& p, T s, ExpFn exp_fn) {
    return T(1) / (T(1) + exp_fn(-(s + T(p.bias))));
  }
  template <int32_t Deg, class T, class ExpFn>
  static ATTN_HD T dphi(const PhiParams& p, T s, ExpFn exp_fn) {
    return dphi_from_phi(phi<Deg>(p, s, exp_fn));
  }
  // phi' as a function of y = phi(s): a kernel that holds y saves the second exp.
  template <class T>
  static ATTN_HD T dphi_from_phi(T y) {
    return y * (T(1) - y);
  }
  static double ref_phi(double s, double, int32_t, double b) { return 1.0 / (1.0 + std::exp(-(s + b))); }
  static double ref_dphi(double s, double c, int32_t p, double b) {
    const double y = ref_phi(s, c, p, b);
    return y * (1.0 - y);
  }
};

template <>
struct Phi<Activation::relu2> {
  static constexpr const char* name = "relu2";
  static constexpr const char* label = "ReLU²";
  static constexpr const char* formula = "c * max(s, 0)^2";
  static constexpr bool elementwise = true, takes_degree = false, takes_scale = true, bias_log_n = false;
  static constexpr const char* torch = "c * torch.relu(s) ** 2";
  template <int32_t Deg, class T, class ExpFn>
  static ATTN_HD T phi(const PhiParams& p, T s, ExpFn) {
    return s > T(0) ? T(p.c) * (s * s) : T(0);
  }
  template <int32_t Deg, class T, class ExpFn>
  static ATTN_HD T dphi(const PhiParams& p, T s, ExpFn) {
    return s > T(0) ? T(2) * T(p.c) * s : T(0);
  }
  static double ref_phi(double s, double c, int32_t, double) { return s > 0 ? c * s * s : 0.0; }
  static double ref_dphi(double s, double c, int32_t, double) { return s > 0 ? 2.0 * c * s : 0.0; }
};

template <Activation A>
using ActivationTag = std::integral_constant<Activation, A>;
template <int32_t D>
using DegreeTag = std::integral_constant<int32_t, D>;

// The dispatch templates below are __host__ __device__ and call whatever f is: a host
// lambda from host code (the CUDA launchers), a device one from kernels. nvcc checks the
// call's execution space per instantiation only with this pragma (as CUTLASS does).
#if defined(__CUDACC__)
#define ATTN_HD_ANY_CALLEE _Pragma("nv_exec_check_disable")
#else
#define ATTN_HD_ANY_CALLEE
#endif

namespace detail {
ATTN_HD_ANY_CALLEE
template <class F, int32_t... I>
ATTN_HD void visit_activation(Activation a, F& f, std::integer_sequence<int32_t, I...>) {
  (void)((static_cast<int32_t>(a) == I ? (f(ActivationTag<static_cast<Activation>(I)>{}), true) : false) || ...);
}

template <class F>
struct WithDegree {
  const ActivationSpec& spec;
  F& f;
  ATTN_HD_ANY_CALLEE
  template <Activation A>
  ATTN_HD void operator()(ActivationTag<A> tag) const {
    if constexpr (Phi<A>::takes_degree) {
      static_assert(kFixedDegrees == 4, "WithDegree lists degrees 1..kFixedDegrees");
      const int32_t d = spec.degree;
      if (d == 1)
        f(tag, DegreeTag<1>{});
      else if (d == 2)
        f(tag, DegreeTag<2>{});
      else if (d == 3)
        f(tag, DegreeTag<3>{});
      else if (d == 4)
        f(tag, DegreeTag<4>{});
      else
        f(tag, DegreeTag<0>{});
    } else {
      f(tag, DegreeTag<0>{});
    }
  }
};
}  // namespace detail

// f(ActivationTag<A>{}) for the run-time a: the one switch over activations.
ATTN_HD_ANY_CALLEE
template <class F>
ATTN_HD void visit_activation(Activation a, F&& f) {
  detail::visit_activation(a, f, std::make_integer_sequence<int32_t, kActivationCount>{});
}

// f(ActivationTag<A>{}, DegreeTag<Deg>{}) with the degree fixed at compile time for the
// activations that take one and degrees 1..kFixedDegrees; Deg = 0: read at run time.
// The dispatch every fused kernel instantiates through (CPU and CUDA).
ATTN_HD_ANY_CALLEE
template <class F>
ATTN_HD void dispatch_activation(const ActivationSpec& spec, F&& f) {
  detail::WithDegree<F> w{spec, f};
  visit_activation(spec.activation, w);
}

ATTN_HD PhiParams resolve_phi(const ActivationSpec& spec, int64_t n_keys) {
  PhiParams p;
  p.activation = spec.activation;
  p.degree = spec.degree;
  const double n = n_keys > 0 ? static_cast<double>(n_keys) : 1.0;
  double c = 1.0;
  switch (spec.scale) {
    case ScaleKind::none: c = 1.0; break;
    case ScaleKind::inv_sqrt_n: c = 1.0 / sqrt(n); break;
    case ScaleKind::inv_n: c = 1.0 / n; break;
    case ScaleKind::value: c = spec.scale_value; break;
  }
  visit_activation(spec.activation, [&](auto tag) {
    using P = Phi<decltype(tag)::value>;
    if constexpr (P::takes_scale) p.c = static_cast<float>(c);
    if constexpr (P::bias_log_n) p.bias = static_cast<float>(-log(n));  // Apple's b = -log N
  });
  return p;
}

// The exp of the run-time forms below (the kernels pass their own).
struct StdExp {
  template <class T>
  ATTN_HD T operator()(T x) const {
    return exp(x);
  }
};

// phi and phi' with the activation (and, for Deg > 0, the degree) fixed at compile time,
// for fused kernels whose row loops must vectorise. Row-wise activations (softmax) give 0:
// their kernels have their own code.
template <Activation A, int32_t Deg, class T, class ExpFn>
ATTN_HD T phi_fixed(const PhiParams& p, T s, ExpFn exp_fn) {
  if constexpr (Phi<A>::elementwise)
    return Phi<A>::template phi<Deg>(p, s, exp_fn);
  else
    return T(0);
}

template <Activation A, int32_t Deg, class T, class ExpFn>
ATTN_HD T dphi_fixed(const PhiParams& p, T s, ExpFn exp_fn) {
  if constexpr (Phi<A>::elementwise)
    return Phi<A>::template dphi<Deg>(p, s, exp_fn);
  else
    return T(0);
}

// Whether Phi<A> offers dphi_from_phi(y), phi' from phi's own value (optional: sigmoid).
template <Activation A, class = void>
struct HasDphiFromPhi : std::false_type {};
template <Activation A>
struct HasDphiFromPhi<A, std::void_t<decltype(Phi<A>::dphi_from_phi(0.0f))>> : std::true_type {};

// phi and phi' of one score together (y, dy), phi' from y where the activation offers it.
template <Activation A, int32_t Deg, class T, class ExpFn>
ATTN_HD void phi_dphi_fixed(const PhiParams& p, T s, ExpFn exp_fn, T& y, T& dy) {
  y = phi_fixed<A, Deg>(p, s, exp_fn);
  if constexpr (HasDphiFromPhi<A>::value)
    dy = Phi<A>::dphi_from_phi(y);
  else
    dy = dphi_fixed<A, Deg>(p, s, exp_fn);
}

// The same with the activation read at run time (p.activation).
template <class T>
ATTN_HD T phi_elementwise(const PhiParams& p, T s) {
  T r = T(0);
  visit_activation(p.activation, [&](auto tag) { r = phi_fixed<decltype(tag)::value, 0>(p, s, StdExp{}); });
  return r;
}

template <class T>
ATTN_HD T dphi_elementwise(const PhiParams& p, T s) {
  T r = T(0);
  visit_activation(p.activation, [&](auto tag) { r = dphi_fixed<decltype(tag)::value, 0>(p, s, StdExp{}); });
  return r;
}

// Squared Frobenius norms of one row of phi(S) and of its Jacobian block.
struct RowNormSq {
  double attn = 0.0;  // sum_j phi(s_j)^2
  double jac = 0.0;   // ||d phi(s) / d s||_F^2 for this row
};

// Softmax row from the running sums of p~ = exp(s - m): Z = sum p~, A2 = sum p~^2,
// A3 = sum p~^3. With p = p~/Z: sum p^2 = A2/Z^2, sum p^3 = A3/Z^3 and
// ||diag(p) - p p^T||_F^2 = sum p^2 - 2 sum p^3 + (sum p^2)^2   (science.md).
ATTN_HD RowNormSq softmax_row_norms_from_sums(double z, double a2, double a3) {
  RowNormSq r;
  const double p2 = a2 / (z * z);
  const double p3 = a3 / (z * z * z);
  r.attn = p2;
  r.jac = p2 - 2.0 * p3 + p2 * p2;
  if (r.jac < 0.0) r.jac = 0.0;  // rounding when p is one-hot
  return r;
}

// Reference row norms over n scores (CPU and tests; kernels fuse the same sums).
template <class T>
ATTN_HD RowNormSq row_norms(const PhiParams& p, const T* s, int64_t n) {
  RowNormSq r;
  if (p.activation == Activation::softmax) {
    T m = s[0];
    for (int64_t j = 1; j < n; ++j) m = s[j] > m ? s[j] : m;
    double z = 0, a2 = 0, a3 = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double e = exp(static_cast<double>(s[j] - m));
      z += e;
      a2 += e * e;
      a3 += e * e * e;
    }
    return softmax_row_norms_from_sums(z, a2, a3);
  }
  for (int64_t j = 0; j < n; ++j) {
    const double v = phi_elementwise<double>(p, static_cast<double>(s[j]));
    const double g = dphi_elementwise<double>(p, static_cast<double>(s[j]));
    r.attn += v * v;
    r.jac += g * g;
  }
  return r;
}

// ---- the registry as data, for the host: validation, commands, labels, tests --------

struct ActivationInfo {
  Activation id = Activation::softmax;
  const char* name = "";
  const char* label = "";
  const char* formula = "";
  bool elementwise = false, takes_degree = false, takes_scale = false, bias_log_n = false;
  const char* torch = "";
  // Plain float64 phi and phi' (elementwise only) of (s, c, degree, bias b = -log N).
  double (*ref_phi)(double, double, int32_t, double) = nullptr;
  double (*ref_dphi)(double, double, int32_t, double) = nullptr;
};

namespace detail {
template <Activation A>
constexpr ActivationInfo info_of() {
  using P = Phi<A>;
  ActivationInfo i;
  i.id = A;
  i.name = P::name;
  i.label = P::label;
  i.formula = P::formula;
  i.elementwise = P::elementwise;
  i.takes_degree = P::takes_degree;
  i.takes_scale = P::takes_scale;
  i.bias_log_n = P::bias_log_n;
  i.torch = P::torch;
  if constexpr (P::elementwise) {
    i.ref_phi = &P::ref_phi;
    i.ref_dphi = &P::ref_dphi;
  }
  return i;
}
template <int32_t... I>
constexpr std::array<ActivationInfo, sizeof...(I)> make_registry(std::integer_sequence<int32_t, I...>) {
  return {info_of<static_cast<Activation>(I)>()...};
}
}  // namespace detail

// Every activation, in id order (kActivations[i].id == i).
inline constexpr std::array<ActivationInfo, kActivationCount> kActivations =
    detail::make_registry(std::make_integer_sequence<int32_t, kActivationCount>{});
static_assert(kActivations.size() == static_cast<size_t>(kActivationCount), "one registry row per activation");

inline const ActivationInfo& activation_info(Activation a) {
  return kActivations[static_cast<size_t>(a)];
}
inline const char* activation_name(Activation a) {
  return activation_info(a).name;
}

namespace detail {
inline std::optional<Activation> activation_from_name(std::string_view name) {
  for (const ActivationInfo& i : kActivations)
    if (name == i.name) return i.id;
  return std::nullopt;
}
}  // namespace detail

inline std::vector<std::string> activation_names() {
  std::vector<std::string> v;
  for (const ActivationInfo& i : kActivations) v.emplace_back(i.name);
  return v;
}

// The named scales (a number is the fourth kind).
struct ScaleInfo {
  ScaleKind id;
  const char* name;
  const char* label;  // in figures
};
inline constexpr std::array<ScaleInfo, 3> kScales = {
    {{ScaleKind::none, "none", ""}, {ScaleKind::inv_sqrt_n, "inv_sqrt_n", "/√N"}, {ScaleKind::inv_n, "inv_n", "/N"}}};

namespace detail {
inline std::optional<ScaleKind> scale_from_name(std::string_view name) {
  for (const ScaleInfo& s : kScales)
    if (name == s.name) return s.id;
  return std::nullopt;
}
}  // namespace detail

inline std::vector<std::string> scale_names() {
  std::vector<std::string> v;
  for (const ScaleInfo& s : kScales) v.emplace_back(s.name);
  return v;
}

// The activation is parsed here only (tests/lint/include_layers.py): a name becomes
// the registry's type through parse_activation_spec (a whole spec, strictly: the cells,
// the `attention` command, the PyTorch op) or look_up_activation (leniently, for labels,
// the order of a table and the check of one key).

// The registry's entries that a cell's keys name: nullopt where `name` names no
// activation; `scale` set where `scale_name` is a scale's name (a number written as text,
// or no scale, leaves it unset).
struct ActivationNames {
  Activation activation;
  std::optional<ScaleKind> scale;
};
inline std::optional<ActivationNames> look_up_activation(std::string_view name, std::string_view scale_name = {}) {
  const std::optional<Activation> id = detail::activation_from_name(name);
  if (!id) return std::nullopt;
  return ActivationNames{*id, detail::scale_from_name(scale_name)};
}

// A spec from the names the `attention` command and the PyTorch op take: an activation's
// name, a degree (kMinDegree..kMaxDegree; read only by those that take one) and a scale
// (a name of kScales or a positive number). "" with *out set, or the problem, naming the
// field ("activation: expected softmax, poly, ... , got \"tanh\"") for the caller to prefix.
inline std::string parse_activation_spec(const std::string& act, int64_t degree, const std::string& scale,
                                         ActivationSpec* out) {
  auto list = [](const std::vector<std::string>& v, const char* last) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? last : ", ") + v[i];
    return s;
  };
  ActivationSpec a;
  const std::optional<Activation> id = detail::activation_from_name(act);
  if (!id) return "activation: expected " + list(activation_names(), " or ") + ", got \"" + act + "\"";
  a.activation = *id;
  if (degree < kMinDegree || degree > kMaxDegree)
    return "degree: expected an integer in " + std::to_string(kMinDegree) + ".." + std::to_string(kMaxDegree) +
           ", got " + std::to_string(degree);
  a.degree = static_cast<int32_t>(degree);
  if (const std::optional<ScaleKind> kind = detail::scale_from_name(scale)) {
    a.scale = *kind;
  } else {
    char* end = nullptr;
    const double v = std::strtod(scale.c_str(), &end);
    if (scale.empty() || end != scale.c_str() + scale.size() || !std::isfinite(v) || v <= 0)
      return "scale: expected " + list(scale_names(), ", ") + " or a positive number, got \"" + scale + "\"";
    a.scale = ScaleKind::value;
    a.scale_value = v;
  }
  *out = a;
  return "";
}

// "poly3_inv_sqrt_n", "relu2_c250m", "softmax": a spec as one token, for test names.
inline std::string spec_token(const ActivationSpec& a) {
  const ActivationInfo& i = activation_info(a.activation);
  std::string s = i.name;
  if (i.takes_degree) s += std::to_string(a.degree);
  if (i.takes_scale) {
    if (a.scale == ScaleKind::value)
      s += "_c" + std::to_string(static_cast<long>(std::lround(a.scale_value * 1000))) + "m";
    else
      s += std::string("_") + kScales[static_cast<size_t>(a.scale)].name;
  }
  return s;
}

// The registry's test cases: every activation; degrees 1..3 for those that take one;
// every scale kind (the number 0.25) for those that take one. Tests that cover "every
// activation" iterate over this list, so a new activation is tested without edits.
inline std::vector<ActivationSpec> registry_test_specs() {
  std::vector<ActivationSpec> v;
  for (const ActivationInfo& i : kActivations) {
    const int32_t max_degree = i.takes_degree ? 3 : 1;
    for (int32_t p = 1; p <= max_degree; ++p) {
      if (!i.takes_scale) {
        v.push_back({i.id, p, ScaleKind::none, 1.0});
        continue;
      }
      for (ScaleKind s : {ScaleKind::none, ScaleKind::inv_sqrt_n, ScaleKind::inv_n, ScaleKind::value})
        v.push_back({i.id, p, s, 0.25});
    }
  }
  return v;
}

}  // namespace attnsweep
