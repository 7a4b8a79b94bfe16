// circlerope PyTorch operators: torch.ops.circlerope.* (TORCH_LIBRARY "circlerope").
//
//   rope_index(input_ids, grids..., mask, scheme, circle..., vision...) -> (position_ids, deltas)
//     (circle and vision: one argument per option of circlerope/options.h's kCircleOptions
//      (radius "10" | "auto" | "auto-k", alpha, move_to_origin, dff_rate, move_to_positive
//      "false" | "auto" | offset, in the grammar of options.h) and of kVisionOptions
//      (spatial_merge_size, tokens_per_second, the three token ids, time, compat = "none"))
//   rotary_table(position_ids, rotary_dim, sections, theta, layout)     -> table [B, S, D]
//   rotary_apply(q, k, table, pairing, qk_layout, backward)             -> (q', k')
//
//   rotary_apply_(q, k, table, pairing, qk_layout, backward)            -> () (in place)
//
// rotary_apply is differentiable in q and k (the table is a constant: positions are indices,
// not parameters); its autograd formula (circlerope/_registration.py) is the same op with
// `backward` flipped, the rotation by -phi, so double backward works too. The table is the
// kernels' own layout (per token D/2 cos then D/2 sin, float32), built once per geometry and
// forward pass and shared by every layer that uses it (AGE).
//
// Every invalid input raises ValueError with the core's one-line message. This file holds the
// CPU kernels (float64 q/k take a scalar path, for gradcheck); ops_cuda.cpp the CUDA ones.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/version.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "circlerope/rotary.h"
#include "circlerope/positions.h"
#include "circlerope/options.h"
#include "op_common.h"

namespace {

using at::Tensor;
namespace cr = circlerope;

using cr::torch_ops::shape_of;

// torch's thread count for the kernels, within their limit (torch may be set to more).
int kernel_threads() { return std::min(at::get_num_threads(), cr::kMaxThreads); }

// Runs body; a circlerope::Error becomes a Python ValueError carrying the same message.
template <class Body>
auto guarded(const Body& body) -> decltype(body()) {
  try {
    return body();
  } catch (const cr::Error& e) {
    C10_THROW_ERROR(ValueError, e.what());
  }
}

void require_cpu(const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, " is on ", t.device(),
                    "; this operator's CPU kernel takes CPU tensors (the rotation has CUDA kernels where "
                    "circlerope.has_cuda_kernels() is True)");
}

// An integer tensor of exactly `dims` dimensions as int64 row-major: the tensor itself when
// it already is one (no copy), else a converted copy that `holder` keeps alive.
struct Int64Data {
  Tensor holder;
  std::span<const std::int64_t> values;
};

// `limit` elements at most, checked on the sizes before the conversion.
Int64Data integers(const Tensor& t, const char* name, int dims, std::int64_t limit, const char* what) {
  cr::torch_ops::check_strided(t, name);
  require_cpu(t, name);
  TORCH_CHECK_VALUE(t.dim() == dims, name, " must have ", dims, " dimension(s), got shape ",
                    shape_of(t));
  TORCH_CHECK_VALUE(at::isIntegralType(t.scalar_type(), /*includeBool=*/true), name,
                    " must hold integers, got ", t.scalar_type());
  if (dims == 2 && std::string_view(what) == "tokens") cr::torch_ops::check_tokens(name, t.size(0), t.size(1));
  else cr::torch_ops::check_count(t, name, limit, what);
  Tensor c = t.scalar_type() == at::kLong && t.is_contiguous() ? t : t.to(at::kLong).contiguous();
  const auto* data = c.data_ptr<std::int64_t>();
  return {c, {data, static_cast<std::size_t>(c.numel())}};
}

std::vector<cr::GridTHW> grids(const c10::optional<Tensor>& t, const char* name) {
  if (!t.has_value() || !t->defined()) return {};
  TORCH_CHECK_VALUE(t->dim() == 2 && t->size(1) == 3, name, " must have shape [N, 3] (t, h, w), got ",
                    shape_of(*t));
  // named: a converted copy must outlive the loop
  const Int64Data data = integers(*t, name, 2, 3 * cr::kMaxTokens, "values (three per grid, a grid per token at most)");
  const std::span<const std::int64_t> v = data.values;
  std::vector<cr::GridTHW> out(v.size() / 3);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = {v[3 * i], v[3 * i + 1], v[3 * i + 2]};
  return out;
}

// The op's circle and vision arguments: one per option of kCircleOptions and of kVisionOptions
// (options.h), in their order, named and typed by them in the schema (rope_index_schema);
// TORCH_LIBRARY checks the types of the C++ signature against the schema when the library loads.
const char* schema_type(cr::OptionType type) {
  switch (type) {
    case cr::OptionType::text: return "str";
    case cr::OptionType::number: return "float";
    case cr::OptionType::boolean: return "bool";
    case cr::OptionType::integer: return "int";
    case cr::OptionType::integers: return "int[]";
  }
  return "?";
}

cr::OptionValue argument_value(const std::string& v) { return cr::OptionValue::text(v); }
cr::OptionValue argument_value(double v) { return cr::OptionValue::number(v); }
cr::OptionValue argument_value(bool v) { return cr::OptionValue::boolean(v); }
cr::OptionValue argument_value(std::int64_t v) { return cr::OptionValue::integer(v); }

// The config of the op's arguments for the options of `options`, each read by its option and
// named by its key in messages.
template <class Config, std::size_t N, class... Arguments>
Config config_of(const std::array<cr::Option<Config>, N>& options, const Arguments&... arguments) {
  static_assert(sizeof...(Arguments) == N, "rope_index takes one argument per option of the table");
  const cr::OptionValue values[] = {argument_value(arguments)...};
  Config config;
  for (std::size_t i = 0; i < N; ++i) options[i].set(config, values[i], options[i].key);
  return config;
}

template <class Config, std::size_t N>
std::string schema_arguments(const std::array<cr::Option<Config>, N>& options) {
  std::string arguments;
  for (const cr::Option<Config>& o : options) {
    arguments += std::string(schema_type(o.type)) + " " + std::string(o.key);
    // compat has a default, its own (none): a call that leaves it out reproduces no
    // transformers release.
    if constexpr (std::is_same_v<Config, cr::VisionConfig>)
      if (o.key == "compat") arguments += "=\"" + cr::option_text(o.get(Config{})) + "\"";
    arguments += ", ";
  }
  return arguments;
}

std::string rope_index_schema() {
  std::string vision = schema_arguments(cr::kVisionOptions);
  vision.resize(vision.size() - 2);  // the last ", "
  return "rope_index(Tensor input_ids, Tensor? image_grid_thw, Tensor? video_grid_thw, "
         "Tensor? second_per_grid_ts, Tensor? attention_mask, str scheme, " +
         schema_arguments(cr::kCircleOptions) + vision + ") -> (Tensor position_ids, Tensor rope_deltas)";
}

std::tuple<Tensor, Tensor> rope_index(
    const Tensor& input_ids, const c10::optional<Tensor>& image_grid_thw,
    const c10::optional<Tensor>& video_grid_thw, const c10::optional<Tensor>& second_per_grid_ts,
    const c10::optional<Tensor>& attention_mask, const std::string& scheme,
    const std::string& radius, double alpha, bool move_to_origin, double dff_rate,
    const std::string& move_to_positive, std::int64_t spatial_merge_size, double tokens_per_second,
    std::int64_t vision_start_token_id, std::int64_t image_token_id, std::int64_t video_token_id,
    const std::string& time, const std::string& compat) {
  return guarded([&] {
    const Int64Data ids = integers(input_ids, "input_ids", 2, cr::kMaxTokens, "tokens");
    const std::int64_t batch = input_ids.size(0), seq_len = input_ids.size(1);
    Int64Data mask;
    if (attention_mask.has_value() && attention_mask->defined()) {
      TORCH_CHECK_VALUE(attention_mask->sizes() == input_ids.sizes(), "attention_mask has shape ",
                        shape_of(*attention_mask), " but input_ids has shape ", shape_of(input_ids));
      mask = integers(*attention_mask, "attention_mask", 2, cr::kMaxTokens, "tokens");
    }
    const std::vector<cr::GridTHW> images = grids(image_grid_thw, "image_grid_thw");
    const std::vector<cr::GridTHW> videos = grids(video_grid_thw, "video_grid_thw");
    std::vector<double> seconds;
    if (second_per_grid_ts.has_value() && second_per_grid_ts->defined()) {
      const Tensor& s = *second_per_grid_ts;
      cr::torch_ops::check_strided(s, "second_per_grid_ts");
      require_cpu(s, "second_per_grid_ts");
      TORCH_CHECK_VALUE(s.dim() == 1, "second_per_grid_ts must be 1-D (one value per video), got shape ",
                        shape_of(s));
      TORCH_CHECK_VALUE(!s.is_complex() && s.scalar_type() != at::kBool,
                        "second_per_grid_ts must hold real numbers, got ", s.scalar_type());
      cr::torch_ops::check_count(s, "second_per_grid_ts", cr::kMaxTokens, "values (one per video)");
      const Tensor c = s.to(at::kDouble).contiguous();
      seconds.assign(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
      // The core reads an empty list as "not given" (1.0 s each); a tensor that was given
      // but is empty is the caller's mistake, as it is in the reference (an IndexError there).
      TORCH_CHECK_VALUE(!seconds.empty() || videos.empty(), "second_per_grid_ts has 0 entries but video_grid_thw has ",
                        videos.size(), " (one value per video, or None for 1.0 s each)");
    }

    // The options are read with the grammar every front end shares (circlerope/options.h).
    cr::Geometry geometry;
    geometry.scheme = cr::scheme_option(cr::OptionValue::string(scheme), "scheme");
    geometry.circle = config_of(cr::kCircleOptions, radius, alpha, move_to_origin, dff_rate, move_to_positive);
    const cr::VisionConfig vision = config_of(cr::kVisionOptions, spatial_merge_size, tokens_per_second,
                                              vision_start_token_id, image_token_id, video_token_id, time, compat);
    cr::validate(vision);
    const cr::RopeIndexInput in{ids.values, batch, seq_len, mask.values, images, videos, seconds};

    Tensor positions = at::empty({3, batch, seq_len}, at::kFloat);
    Tensor deltas = at::empty({batch, 1}, at::kFloat);
    cr::rope_index_into(in, vision, geometry, {positions.data_ptr<float>(), static_cast<std::size_t>(positions.numel())},
                        {deltas.data_ptr<float>(), static_cast<std::size_t>(batch)});
    return std::make_tuple(positions, deltas);
  });
}

Tensor rotary_table(const Tensor& position_ids, std::int64_t rotary_dim,
                    const std::vector<std::int64_t>& sections, double theta,
                    const std::string& layout) {
  return guarded([&] {
    cr::torch_ops::check_position_ids(position_ids);
    require_cpu(position_ids, "position_ids");
    const cr::RotaryConfig config = cr::torch_ops::rotary_config_of(rotary_dim, sections, theta, layout);
    const Tensor pos = position_ids.to(at::kFloat).contiguous();
    const std::int64_t batch = pos.size(1), seq_len = pos.size(2);
    Tensor table = at::empty({batch, seq_len, rotary_dim}, at::kFloat);
    cr::make_rotary_table_into(config, pos.data_ptr<float>(), batch, seq_len,
                               {table.data_ptr<float>(), static_cast<std::size_t>(table.numel())},
                               kernel_threads());
    return table;
  });
}

// ---------------------------------------------------------------- rotation ---

// A fresh output of several MiB comes from mmap and is faulted in 4 KiB at a time on its
// first write: filling 32 MiB took 19 ms here against 4.3 ms when the range may use 2 MiB
// pages (transparent huge pages in `madvise` mode, Debian's default). So the op asks for
// huge pages on the 2 MiB-aligned interior of each large output before writing it. It is
// only a hint about memory this call owns; refusal or failure changes nothing.
void prefer_huge_pages(const Tensor& t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t{1} << 21;
  const auto bytes = static_cast<std::uintptr_t>(t.numel()) * t.element_size();
  if (bytes < 2 * kHuge) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t last = (begin + bytes) & ~(kHuge - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)t;
#endif
}

// Whether two distinct elements of t may share memory. has_internal_overlap answers "too hard"
// for any non-dense view; a view whose dimensions, ordered by stride, each step past the whole
// extent of the smaller ones (q[..., ::2], HF's transposed q) cannot overlap itself.
bool elements_may_share_memory(const Tensor& t) {
  const at::MemOverlap status = at::has_internal_overlap(t);
  if (status != at::MemOverlap::TooHard) return status == at::MemOverlap::Yes;
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, size) of dims of size > 1
  for (std::int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  std::int64_t extent = 0;  // the largest offset the smaller dimensions reach
  for (const auto& [stride, size] : dims) {
    if (stride <= extent) return true;
    extent += stride * (size - 1);
  }
  return false;
}

// float64: element by element with the table's angles. Not fast; it exists so that
// torch.autograd.gradcheck can check the op (and its backward) in double precision. Each pair
// is read before it is written, so `out` may be `in` (the in-place op).
void rotate_double(const cr::RotaryTableView& table, const cr::HeadTensor& in,
                   const cr::HeadTensor& out, cr::Pairing pairing, bool backward) {
  const int half = table.rotary_dim / 2;
  const double sign = backward ? -1.0 : 1.0;
  const auto* src = static_cast<const double*>(in.data);
  auto* dst = static_cast<double*>(out.data);
  at::parallel_for(0, in.shape[0] * in.shape[1], 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t b = t / in.shape[1], s = t % in.shape[1];
      const float* row = table.values + t * table.rotary_dim;
      for (std::int64_t h = 0; h < in.shape[2]; ++h) {
        const double* x = src + b * in.strides[0] + s * in.strides[1] + h * in.strides[2];
        double* y = dst + b * out.strides[0] + s * out.strides[1] + h * out.strides[2];
        if (x != y)
          for (std::int64_t d = table.rotary_dim; d < in.shape[3]; ++d)
            y[d * out.strides[3]] = x[d * in.strides[3]];
        for (int i = 0; i < half; ++i) {
          const std::int64_t i0 = pairing == cr::Pairing::neox ? i : 2 * i;
          const std::int64_t i1 = pairing == cr::Pairing::neox ? i + half : 2 * i + 1;
          const double c = row[i], sn = sign * row[half + i];
          const double x0 = x[i0 * in.strides[3]], x1 = x[i1 * in.strides[3]];
          y[i0 * out.strides[3]] = x0 * c - x1 * sn;
          y[i1 * out.strides[3]] = x1 * c + x0 * sn;
        }
      }
    }
  });
}

// Rotates q into q_out and k into k_out (the same tensors for the in-place op), after
// check_rotary_apply. The kernels check what only they can: overlaps between the four views.
void rotate_cpu(const cr::torch_ops::RotaryCall& call, const Tensor& table, const Tensor& q,
                const Tensor& k, const Tensor& q_out, const Tensor& k_out, bool backward) {
  require_cpu(q, "q");  // one device for all three was checked; this names the device rule
  const Tensor values = table.contiguous();
  const cr::RotaryTableView view = cr::torch_ops::table_view(values);
  // float64 has no kernel dtype; its views only carry shapes and strides to the scalar path.
  const cr::DType kd = call.dtype.value_or(cr::DType::float32);
  using cr::torch_ops::head_view;
  const cr::RotaryTarget targets[] = {
      {head_view(q, call.heads_first, kd), head_view(q_out, call.heads_first, kd)},
      {head_view(k, call.heads_first, kd), head_view(k_out, call.heads_first, kd)}};
  if (!call.dtype) {
    // The scalar path has no overlap check of its own. Out of place its outputs are fresh;
    // in place, q and k are its outputs and must not share memory, within or between them,
    // nor with the table, whose angles they would overwrite while it is read.
    if (q_out.is_same(q)) {
      for (const auto& [name, x] : {std::pair<const char*, const Tensor&>{"q", q}, {"k", k}}) {
        TORCH_CHECK_VALUE(!elements_may_share_memory(x), name,
                          " has elements that share memory (an expanded or stride-0 view); "
                          "it cannot be rotated in place");
        TORCH_CHECK_VALUE(!x.storage().is_alias_of(table.storage()) ||
                              at::get_overlap_status(x, table) == at::MemOverlapStatus::No,
                          "float64 ", name, " shares memory with the table; in place the rotation "
                          "would overwrite the angles it reads (rotate out of place, or give the table "
                          "its own memory)");
      }
      TORCH_CHECK_VALUE(!q.storage().is_alias_of(k.storage()) || at::get_overlap_status(q, k) == at::MemOverlapStatus::No,
                        "float64 q and k share memory; in place they must not overlap "
                        "(or rotate out of place)");
    }
    for (const cr::RotaryTarget& t : targets) rotate_double(view, t.in, t.out, call.pairing, backward);
    return;
  }
  cr::RotaryParams params;
  params.pairing = call.pairing;
  params.direction = backward ? cr::Direction::backward : cr::Direction::forward;
  params.threads = kernel_threads();
  cr::rotate(view, targets, params);
}

std::tuple<Tensor, Tensor> rotary_apply_cpu(const Tensor& q, const Tensor& k, const Tensor& table,
                                            const std::string& pairing, const std::string& qk_layout,
                                            bool backward) {
  return guarded([&] {
    const cr::torch_ops::RotaryCall call = cr::torch_ops::check_rotary_apply(q, k, table, pairing, qk_layout);
    // empty_like keeps a dense input's strides (HF's transposed q stays transposed), so the
    // output is written in the order the input is read.
    Tensor q_out = at::empty_like(q);
    Tensor k_out = at::empty_like(k);
    prefer_huge_pages(q_out);
    prefer_huge_pages(k_out);
    rotate_cpu(call, table, q, k, q_out, k_out, backward);
    return std::make_tuple(q_out, k_out);
  });
}

void rotary_apply_inplace_cpu(const Tensor& q, const Tensor& k, const Tensor& table,
                              const std::string& pairing, const std::string& qk_layout, bool backward) {
  guarded([&] {
    const cr::torch_ops::RotaryCall call = cr::torch_ops::check_rotary_apply(q, k, table, pairing, qk_layout);
    rotate_cpu(call, table, q, k, q, k, backward);
  });
}

}  // namespace

// Schemas here, kernels per device below and in ops_cuda.cpp, the autograd formula of
// rotary_apply in autograd.cpp; the fake (meta) kernels are registered from Python
// (circlerope/_registration.py, imported by the package right after it loads this library),
// as PyTorch's custom-operator guide has it. set_python_module names that module, so that torch imports it when a fake
// tensor reaches an operator before the package was imported.
TORCH_LIBRARY(circlerope, m) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  m.set_python_module("circlerope._registration");
#else
  m.impl_abstract_pystub("circlerope._registration");
#endif
  m.def(rope_index_schema().c_str());
  m.def("rotary_table(Tensor position_ids, int rotary_dim, int[] sections, float theta, "
        "str layout) -> Tensor");
  m.def("rotary_apply(Tensor q, Tensor k, Tensor table, str pairing, str qk_layout, "
        "bool backward) -> (Tensor, Tensor)");
  m.def("rotary_apply_(Tensor(a!) q, Tensor(b!) k, Tensor table, str pairing, str qk_layout, "
        "bool backward) -> ()");
}

TORCH_LIBRARY_IMPL(circlerope, CPU, m) {
  m.impl("rope_index", &rope_index);
  m.impl("rotary_table", &rotary_table);
  m.impl("rotary_apply", &rotary_apply_cpu);
  m.impl("rotary_apply_", &rotary_apply_inplace_cpu);
}

// A sparse, mkldnn, quantized or nested argument sends a call to its own dispatch key, where
// without a kernel it failed with NotImplementedError and a page about backends. The CPU
// kernels are registered there too: each checks every tensor's kind first (op_common.h,
// check_strided) and refuses with a ValueError naming the argument and what it is.
#define CIRCLEROPE_REFUSE_LAYOUT(key)                  \
  TORCH_LIBRARY_IMPL(circlerope, key, m) {             \
    m.impl("rope_index", &rope_index);                 \
    m.impl("rotary_table", &rotary_table);             \
    m.impl("rotary_apply", &rotary_apply_cpu);         \
    m.impl("rotary_apply_", &rotary_apply_inplace_cpu); \
  }
CIRCLEROPE_REFUSE_LAYOUT(SparseCPU)
CIRCLEROPE_REFUSE_LAYOUT(SparseCsrCPU)
CIRCLEROPE_REFUSE_LAYOUT(MkldnnCPU)
CIRCLEROPE_REFUSE_LAYOUT(QuantizedCPU)
CIRCLEROPE_REFUSE_LAYOUT(NestedTensorCPU)
#undef CIRCLEROPE_REFUSE_LAYOUT

// rope_index computes on the CPU: a CUDA input_ids reaches its CPU kernel, which names the
// device rule, instead of the dispatcher's NotImplementedError.
TORCH_LIBRARY_IMPL(circlerope, CUDA, m) { m.impl("rope_index", &rope_index); }

// A nested tensor meets its own autograd key first, where the operators without an autograd
// formula have no fallback: they are registered there too, and refuse it by name (the
// rotation's autograd kernel, registered for every autograd key, passes it on to them).
TORCH_LIBRARY_IMPL(circlerope, AutogradNestedTensor, m) {
  m.impl("rope_index", &rope_index);
  m.impl("rotary_table", &rotary_table);
  m.impl("rotary_apply_", &rotary_apply_inplace_cpu);
}
