// circlerope._core: the parts of the core the Python package needs besides the tensor
// operators (those live in the TORCH_LIBRARY library, torch/ops.cpp): config validation,
// AGE plans, coupling metrics (PTD, RoPE kernel deviation) and token-free layouts.
// No torch here: arrays arrive as NumPy arrays, configs as the scalar tuples of
// torch/config_args.h. circlerope::Error derives from std::invalid_argument, which pybind11
// raises as ValueError with the core's message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "circlerope/age.h"
#include "circlerope/positions.h"
#include "circlerope/ptd.h"
#include "config_args.h"

namespace py = pybind11;
namespace cr = circlerope;

namespace {

using Int64Array = py::array_t<std::int64_t, py::array::c_style>;
using DoubleArray = py::array_t<double, py::array::c_style>;

// The tuples' element types are the argument types of the config_args.h functions;
// pybind11 checks the length and each element's type.
cr::CircleConfig circle_from(const py::tuple& t) {
  return std::apply(&cr::args::circle,
                    t.cast<std::tuple<std::string, double, double, double, bool, double, std::string, double>>());
}

cr::VisionConfig vision_from(const py::tuple& t) {
  return std::apply(&cr::args::vision,
                    t.cast<std::tuple<std::int64_t, double, std::int64_t, std::int64_t, std::int64_t, std::string>>());
}

cr::RotaryConfig rotary_from(const py::tuple& t) {
  return std::apply(&cr::args::rotary,
                    t.cast<std::tuple<double, std::int64_t, std::string, std::vector<std::int64_t>>>());
}

std::vector<cr::GridTHW> grids_from(const std::optional<Int64Array>& a, const char* name) {
  if (!a) return {};
  if (a->ndim() != 2 || a->shape(1) != 3)
    throw cr::Error(std::string(name) + " must have shape [N, 3] (t, h, w)");
  std::vector<cr::GridTHW> out(static_cast<std::size_t>(a->shape(0)));
  const std::int64_t* p = a->data();
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = {p[3 * i], p[3 * i + 1], p[3 * i + 2]};
  return out;
}

py::dict metrics_dict(const cr::CouplingMetrics& m) {
  py::list blocks, rows;
  for (const cr::BlockMetrics& b : m.blocks) {
    py::dict d;
    d["row"] = b.row;
    d["block"] = b.block;
    d["text_tokens"] = b.text_tokens;
    d["vision_tokens"] = b.vision_tokens;
    d["ptd"] = b.ptd;
    d["rope_kernel_deviation"] = b.rope_kernel_deviation;
    blocks.append(d);
  }
  for (const cr::RowMetrics& r : m.rows) {
    py::dict d;
    d["row"] = r.row;
    d["blocks"] = r.blocks;
    d["ptd"] = r.ptd;
    d["rope_kernel_deviation"] = r.rope_kernel_deviation;
    rows.append(d);
  }
  py::dict out;
  out["ptd"] = m.ptd;
  out["rope_kernel_deviation"] = m.rope_kernel_deviation;
  out["blocks"] = blocks;
  out["rows"] = rows;
  return out;
}

py::dict batch_metrics(const Int64Array& input_ids, const std::optional<Int64Array>& attention_mask,
                       const std::optional<Int64Array>& image_grid_thw,
                       const std::optional<Int64Array>& video_grid_thw,
                       const std::optional<DoubleArray>& second_per_grid_ts,
                       const std::string& scheme, const py::tuple& circle,
                       const py::tuple& vision, const py::tuple& rotary) {
  if (input_ids.ndim() != 2) throw cr::Error("input_ids must be 2-D [batch, seq_len]");
  const std::int64_t batch = input_ids.shape(0), seq_len = input_ids.shape(1);
  std::span<const std::int64_t> mask;
  if (attention_mask) {
    if (attention_mask->ndim() != 2 || attention_mask->shape(0) != batch ||
        attention_mask->shape(1) != seq_len)
      throw cr::Error("attention_mask must have the shape of input_ids [" + std::to_string(batch) +
                      ", " + std::to_string(seq_len) + "]");
    mask = {attention_mask->data(), static_cast<std::size_t>(attention_mask->size())};
  }
  const auto images = grids_from(image_grid_thw, "image_grid_thw");
  const auto videos = grids_from(video_grid_thw, "video_grid_thw");
  std::span<const double> seconds;
  if (second_per_grid_ts)
    seconds = {second_per_grid_ts->data(), static_cast<std::size_t>(second_per_grid_ts->size())};
  const cr::Geometry geometry{cr::parse_scheme(scheme), circle_from(circle)};
  const cr::RotaryConfig rot = rotary_from(rotary);
  const cr::RopeIndexInput in{{input_ids.data(), static_cast<std::size_t>(input_ids.size())},
                              batch, seq_len, mask, images, videos, seconds};
  cr::Positions positions;
  {
    py::gil_scoped_release released;
    positions = cr::rope_index(in, vision_from(vision), geometry);
  }
  return metrics_dict(cr::coupling_metrics(positions, geometry.scheme, rot));
}

py::tuple layout_positions(const std::string& layout, const std::string& scheme,
                           const py::tuple& circle, const py::tuple& vision) {
  const cr::Geometry geometry{cr::parse_scheme(scheme), circle_from(circle)};
  const cr::Positions p = cr::layout_positions(cr::parse_layout(layout), vision_from(vision), geometry);
  py::array_t<float> pos({std::int64_t{3}, std::int64_t{1}, p.seq_len});
  std::copy(p.position_ids.begin(), p.position_ids.end(), pos.mutable_data());
  py::array_t<float> deltas({std::int64_t{1}, std::int64_t{1}});
  deltas.mutable_data()[0] = p.rope_deltas[0];
  return py::make_tuple(pos, deltas);
}

py::dict layout_metrics(const std::string& layout, const std::string& scheme,
                        const py::tuple& circle, const py::tuple& vision, const py::tuple& rotary) {
  const cr::Geometry geometry{cr::parse_scheme(scheme), circle_from(circle)};
  const cr::Positions p = cr::layout_positions(cr::parse_layout(layout), vision_from(vision), geometry);
  return metrics_dict(cr::coupling_metrics(p, geometry.scheme, rotary_from(rotary)));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "circlerope core: configs, AGE plans and coupling metrics (no torch)";
  m.attr("__version__") = CIRCLEROPE_VERSION;
  m.def("validate_circle", [](const py::tuple& t) { circle_from(t); });
  m.def("validate_vision", [](const py::tuple& t) { vision_from(t); });
  m.def("validate_rotary", [](const py::tuple& t) { rotary_from(t); });
  m.def("validate_scheme", [](const std::string& s) { cr::parse_scheme(s); });
  m.def(
      "age_plan",
      [](const std::string& spec, int layers) {
        const cr::AgePlan plan = cr::make_age_plan(spec, layers);
        std::vector<std::string> schemes;
        for (cr::Scheme s : plan.schemes) schemes.emplace_back(cr::to_string(s));
        return py::make_tuple(plan.pattern(), schemes, plan.layer_geometry);
      },
      py::arg("spec"), py::arg("layers"));
  m.def("batch_metrics", &batch_metrics);
  m.def("layout_metrics", &layout_metrics);
  m.def("layout_positions", &layout_positions);
  m.def("decode_positions", [](const py::array_t<float, py::array::c_style>& deltas,
                                std::int64_t first, std::int64_t count) {
    const std::vector<float> v = cr::decode_positions(
        {deltas.data(), static_cast<std::size_t>(deltas.size())}, first, count);
    py::array_t<float> out({std::int64_t{3}, static_cast<std::int64_t>(deltas.size()), count});
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
  });
  m.def("format_layout", [](const std::string& layout) {
    return cr::format_layout(cr::parse_layout(layout));
  });
}
