// rotary_torch's C++ half: a PyTorch extension (torch/extension.h) that #includes rotary. CPU tensors of
// float32, float64, float16 and bfloat16; rows [tokens, heads, head_dim] or [batch, tokens, heads,
// head_dim] with a unit last stride (anything else is copied once); positions int32 or int64. The
// Python half (rotary_torch.py) adds the modules and autograd. rotary::error becomes ValueError.
#include <torch/extension.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <rotary/hf_json.hpp>
#include <rotary/rotary.hpp>

namespace {

namespace py = pybind11;

// Runs f, turning rotary's refusals into Python's ValueError (with rotary's message).
template <class F>
auto checked(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const rotary::error& e) {
    throw py::value_error(e.what());
  }
}

void require(bool ok, const std::string& what) {
  if (!ok) throw py::value_error("rotary_torch: " + what);
}

rotary::Pairing pairing_of(const std::string& name) {
  if (name == "half_split") return rotary::Pairing::half_split;
  if (name == "interleaved") return rotary::Pairing::interleaved;
  throw py::value_error("rotary_torch: pairing must be \"half_split\" or \"interleaved\", not \"" + name + "\"");
}

// A tensor of rows: its first token at data, token t, head h at t * token_stride + h * head_stride.
struct Rows {
  torch::Tensor x;  // x itself, or the copy rotary reads
  rotary::StridedLayout layout;
  std::int64_t head_dim = 0;
  std::vector<std::int64_t> batch_shape;  // [tokens] or [batch, tokens]
};

Rows rows_of(const torch::Tensor& t, const char* name) {
  require(t.device().is_cpu(), std::string(name) + " is on " + t.device().str() + ": rotary_torch takes CPU tensors");
  require(t.dim() == 3 || t.dim() == 4, std::string(name) + " must be [tokens, heads, head_dim] or [batch, tokens, "
                                             "heads, head_dim], not " + std::to_string(t.dim()) + "-D");
  const auto st = t.scalar_type();
  require(st == torch::kFloat32 || st == torch::kFloat64 || st == torch::kFloat16 || st == torch::kBFloat16,
          std::string(name) + " must be float32, float64, float16 or bfloat16, not " + std::string(c10::toString(st)));
  Rows r;
  r.x = t;
  const std::int64_t d = t.dim();
  // The rows rotary walks: a unit last stride, and (4-D) batch and tokens that flatten into one axis.
  const bool flat = t.stride(d - 1) == 1 && (d == 3 || t.size(0) <= 1 || t.stride(0) == t.size(1) * t.stride(1));
  if (!flat) r.x = t.contiguous();
  r.head_dim = t.size(d - 1);
  r.layout.heads = t.size(d - 2);
  r.layout.head_stride = r.x.stride(d - 2);
  r.layout.token_stride = r.x.stride(d - 3);
  r.layout.tokens = d == 3 ? t.size(0) : t.size(0) * t.size(1);
  r.batch_shape = d == 3 ? std::vector<std::int64_t>{t.size(0)} : std::vector<std::int64_t>{t.size(0), t.size(1)};
  return r;
}

// positions as rotary reads them: int32 or int64, one per token of `rows` ([tokens] broadcast over a batch).
struct PositionBuffer {
  torch::Tensor p;
  rotary::Positions view() const {
    if (p.scalar_type() == torch::kInt32) return rotary::Positions(p.data_ptr<std::int32_t>(), p.numel());
    return rotary::Positions(p.data_ptr<std::int64_t>(), p.numel());
  }
};

PositionBuffer positions_of(const torch::Tensor& positions, const Rows& rows) {
  require(positions.device().is_cpu(), "positions must be a CPU tensor");
  require(positions.scalar_type() == torch::kInt32 || positions.scalar_type() == torch::kInt64,
          "positions must be int32 or int64, not " + std::string(c10::toString(positions.scalar_type())));
  torch::Tensor p = positions;
  const auto& bs = rows.batch_shape;
  if (bs.size() == 2 && p.dim() == 1) p = p.unsqueeze(0).expand({bs[0], p.size(0)});
  require(p.sizes().vec() == bs, "positions has shape " + c10::str(positions.sizes()) + "; the rows need " +
                                     c10::str(c10::IntArrayRef(bs)));
  return {p.contiguous()};
}

template <class T>
T* data_of(const torch::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) return t.data_ptr<float>();
  if constexpr (std::is_same_v<T, double>) return t.data_ptr<double>();
  if constexpr (std::is_same_v<T, rotary::f16>) return reinterpret_cast<rotary::f16*>(t.data_ptr<at::Half>());
  if constexpr (std::is_same_v<T, rotary::bf16>) return reinterpret_cast<rotary::bf16*>(t.data_ptr<at::BFloat16>());
}

// Calls f.template operator()<T>() with T the rotary type of `st`.
template <class F>
auto by_dtype(torch::ScalarType st, F&& f) {
  switch (st) {
    case torch::kFloat32: return f(float{});
    case torch::kFloat64: return f(double{});
    case torch::kFloat16: return f(rotary::f16{});
    default: return f(rotary::bf16{});
  }
}

rotary::StridedLayout contiguous_layout(const Rows& r) {
  return {r.layout.tokens, r.layout.heads, r.layout.heads * r.head_dim, r.head_dim};
}

// One RoPE (a spec), with its Ropes built on first use per dtype: a cos/sin table of max_positions rows,
// or cache-free (exact cos/sin at any position) when max_positions is 0.
class TorchRope {
 public:
  TorchRope(rotary::RotarySpec spec, std::int64_t max_positions) : spec_(std::move(spec)), max_(max_positions) {
    checked([&] {
      spec_.validate();
      if (max_ < 0) throw rotary::error("max_positions (" + std::to_string(max_) + ") must be >= 0 (0: cache-free)");
      return 0;
    });
  }

  const rotary::RotarySpec& spec() const { return spec_; }

  torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& positions, bool inverse) {
    const Rows in = rows_of(x, "x");
    require(in.head_dim == spec_.head_dim, "x has head_dim " + std::to_string(in.head_dim) + "; this Rope's is " +
                                               std::to_string(spec_.head_dim));
    const PositionBuffer pos = positions_of(positions, in);
    torch::Tensor out = torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
    const rotary::ApplyOptions opts(inverse ? rotary::Direction::inverse : rotary::Direction::forward);
    by_dtype(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      return checked([&] {
        rotary::apply_strided(rope<T>(), data_of<T>(in.x), in.layout, data_of<T>(out), contiguous_layout(in),
                              pos.view(), opts);
        return 0;
      });
    });
    return out;
  }

  std::pair<torch::Tensor, torch::Tensor> apply_qk(const torch::Tensor& q, const torch::Tensor& k,
                                                   const torch::Tensor& positions, bool inverse) {
    const Rows qi = rows_of(q, "q");
    const Rows ki = rows_of(k, "k");
    require(q.scalar_type() == k.scalar_type(), "q and k must have one dtype");
    require(qi.batch_shape == ki.batch_shape, "q and k must have the same batch and token counts");
    require(qi.head_dim == spec_.head_dim && ki.head_dim == spec_.head_dim,
            "q and k must have this Rope's head_dim (" + std::to_string(spec_.head_dim) + ")");
    const PositionBuffer pos = positions_of(positions, qi);
    torch::Tensor qo = torch::empty(q.sizes(), q.options().memory_format(torch::MemoryFormat::Contiguous));
    torch::Tensor ko = torch::empty(k.sizes(), k.options().memory_format(torch::MemoryFormat::Contiguous));
    const rotary::ApplyOptions opts(inverse ? rotary::Direction::inverse : rotary::Direction::forward);
    by_dtype(q.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      return checked([&] {
        rotary::apply_qk_strided(rope<T>(), data_of<T>(qi.x), qi.layout, data_of<T>(qo), contiguous_layout(qi),
                                 data_of<T>(ki.x), ki.layout, data_of<T>(ko), contiguous_layout(ki), pos.view(), opts);
        return 0;
      });
    });
    return {qo, ko};
  }

  // dL/dtheta*_j (the frequencies the rotation used) from outputs y and their gradients dy, summed over
  // every (y, dy) pair given (q and k share theta).
  torch::Tensor theta_grad(const std::vector<torch::Tensor>& ys, const std::vector<torch::Tensor>& dys,
                           const torch::Tensor& positions) const {
    require(ys.size() == dys.size(), "as many gradients as outputs");
    std::vector<double> grad(static_cast<std::size_t>(spec_.effective_rotary_dim() / 2), 0.0);
    for (std::size_t i = 0; i < ys.size(); ++i) {
      const Rows y = rows_of(ys[i], "y");
      const Rows dy = rows_of(dys[i].to(ys[i].scalar_type()), "dy");
      const PositionBuffer pos = positions_of(positions, y);
      by_dtype(ys[i].scalar_type(), [&](auto tag) {
        using T = decltype(tag);
        return checked([&] {
          rotary::accumulate_theta_gradient_strided(spec_, data_of<T>(y.x), y.layout, data_of<T>(dy.x), dy.layout,
                                                    pos.view(), grad);
          return 0;
        });
      });
    }
    return torch::tensor(grad, torch::kFloat64);
  }

  // dL/dalpha, dL/drho of the spec's alpha/rho variant, given G = dL/dtheta*.
  std::pair<double, double> receptive_field_grad(const torch::Tensor& g) const {
    const torch::Tensor gd = g.to(torch::kFloat64).contiguous();
    const std::vector<double> gv(gd.data_ptr<double>(), gd.data_ptr<double>() + gd.numel());
    return checked([&] {
      const rotary::ReceptiveFieldGradient r = rotary::receptive_field_gradient(spec_, gv);
      return std::make_pair(r.d_alpha, r.d_rho);
    });
  }

  // theta_j the rotation uses (after the variant), float64.
  torch::Tensor theta() const {
    return checked([&] { return torch::tensor(rotary::compute_frequencies(spec_).theta, torch::kFloat64); });
  }

 private:
  template <class T>
  const rotary::Rope<T>& rope() {
    std::optional<rotary::Rope<T>>& r = slot(T{});
    if (!r) {
      if (max_ > 0)
        r.emplace(spec_, max_);
      else
        r.emplace(spec_, rotary::OnTheFly{});
    }
    return *r;
  }
  std::optional<rotary::Rope<float>>& slot(float) { return f32_; }
  std::optional<rotary::Rope<double>>& slot(double) { return f64_; }
  std::optional<rotary::Rope<rotary::f16>>& slot(rotary::f16) { return f16_; }
  std::optional<rotary::Rope<rotary::bf16>>& slot(rotary::bf16) { return bf16_; }

  rotary::RotarySpec spec_;
  std::int64_t max_ = 0;
  std::optional<rotary::Rope<float>> f32_;
  std::optional<rotary::Rope<double>> f64_;
  std::optional<rotary::Rope<rotary::f16>> f16_;
  std::optional<rotary::Rope<rotary::bf16>> bf16_;
};

TorchRope make_rope(std::int64_t head_dim, double base, const std::string& pairing, std::int64_t rotary_dim,
                    std::int64_t max_positions, std::optional<std::vector<double>> theta, std::optional<double> alpha,
                    std::optional<double> rho) {
  rotary::RotarySpec spec(head_dim, pairing_of(pairing), base, rotary_dim);
  if (theta) spec.frequencies.theta = *theta;
  if (alpha || rho) spec.receptive_field = rotary::ReceptiveField{alpha.value_or(0.0), rho.value_or(1.0)};
  return TorchRope(std::move(spec), max_positions);
}

// rotary::resolve on config.json text: head_dim, rotary_dim, base, pairing and the scaled theta.
TorchRope rope_from_hf_config(const std::string& json_text, std::int64_t max_positions, const std::string& layer_type) {
  return checked([&] {
    rotary::ResolveOptions o;
    o.layer_type = layer_type;
    const rotary::ResolvedRope r = rotary::resolve(rotary::parse_hf_config(json_text), o);
    return TorchRope(r.spec, max_positions);
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "rotary (exact RoPE kernels) for PyTorch CPU tensors";
  py::class_<TorchRope>(m, "_Rope")
      .def(py::init(&make_rope), py::arg("head_dim"), py::arg("base"), py::arg("pairing"), py::arg("rotary_dim"),
           py::arg("max_positions"), py::arg("theta") = py::none(), py::arg("alpha") = py::none(),
           py::arg("rho") = py::none())
      .def("apply", &TorchRope::apply, py::arg("x"), py::arg("positions"), py::arg("inverse") = false)
      .def("apply_qk", &TorchRope::apply_qk, py::arg("q"), py::arg("k"), py::arg("positions"),
           py::arg("inverse") = false)
      .def("theta_grad", &TorchRope::theta_grad)
      .def("receptive_field_grad", &TorchRope::receptive_field_grad)
      .def("theta", &TorchRope::theta)
      .def_property_readonly("head_dim", [](const TorchRope& r) { return r.spec().head_dim; })
      .def_property_readonly("rotary_dim", [](const TorchRope& r) { return r.spec().effective_rotary_dim(); })
      .def_property_readonly("base", [](const TorchRope& r) { return r.spec().base; })
      .def_property_readonly("pairing",
                             [](const TorchRope& r) { return std::string(rotary::to_string(r.spec().pairing)); });
  m.def("_rope_from_hf_config", &rope_from_hf_config, py::arg("json_text"), py::arg("max_positions"),
        py::arg("layer_type") = "");
}
