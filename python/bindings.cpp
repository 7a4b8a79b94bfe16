// circlerope._core: the parts of the core the Python package needs besides the tensor
// operators (those live in the TORCH_LIBRARY library, torch/ops.cpp): config validation,
// AGE plans, coupling metrics (PTD, RoPE kernel deviation) and token-free layouts.
// No torch here: arrays arrive as NumPy arrays; configs arrive as the user's raw values, which
// the core's setters read (circlerope/options.h), and live on as canonical tuples that the
// operators read back with the same setters. circlerope::Error derives from std::invalid_argument, which pybind11
// raises as ValueError with the core's message; the package raises that message as a TypeError
// where the value's Python type is not one the argument takes (config.py, _checks.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <vector>

#include "circlerope/age.h"
#include "circlerope/detail/quote.h"
#include "circlerope/rotary.h"
#include "circlerope/options.h"
#include "circlerope/positions.h"
#include "circlerope/ptd.h"

namespace py = pybind11;
namespace cr = circlerope;

namespace {

using Int64Array = py::array_t<std::int64_t, py::array::c_style>;
using DoubleArray = py::array_t<double, py::array::c_style>;

// A Python str (or bytes) as UTF-8 bytes. Lone surrogates ("\ud800") are kept as the bytes
// of surrogatepass, not an encoding error: the core then refuses or quotes them like any
// other bytes it does not know.
std::string utf8(py::handle text) {
  if (PyBytes_Check(text.ptr())) return text.cast<std::string>();
  const py::object bytes = py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(text.ptr(), "utf-8", "surrogatepass"));
  if (!bytes) throw py::error_already_set();
  return bytes.cast<std::string>();
}

// repr(v) for a message; a __repr__ that fails or returns a non-str shows the type's name.
std::string repr_of(py::handle v) {
  PyObject* r = PyObject_Repr(v.ptr());
  if (!r || !PyUnicode_Check(r)) {
    Py_XDECREF(r);
    PyErr_Clear();
    return std::string("<") + Py_TYPE(v.ptr())->tp_name + ">";
  }
  return utf8(py::reinterpret_steal<py::object>(r));
}

// The one quoting rule (circlerope/detail/quote.h) for Python's messages: str or bytes in.
std::string text_arg(py::handle text, const char* function) {
  if (!py::isinstance<py::str>(text) && !PyBytes_Check(text.ptr()))
    throw cr::Error(std::string(function) + ": expected str or bytes (got " + cr::detail::escaped(repr_of(text)) + ")");
  return utf8(text);
}

// A Python value as the core's OptionValue: telling the types apart is all the binding does;
// the core reads and judges every value (circlerope/options.h). Numpy scalars and one-element
// tensors arrive as Python scalars (_checks.py calls .item()).
cr::OptionValue option_value(py::handle v) {
  const std::string shown = repr_of(v);
  cr::OptionValue out = cr::OptionValue::null();
  if (v.is_none()) {
  } else if (py::isinstance<py::bool_>(v)) {
    out = cr::OptionValue::boolean(v.cast<bool>());
  } else if (PyLong_Check(v.ptr())) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    out = overflow ? cr::OptionValue::big_integer(py::str(v).cast<std::string>()) : cr::OptionValue::integer(x);
  } else if (PyFloat_Check(v.ptr())) {
    out = cr::OptionValue::number(PyFloat_AsDouble(v.ptr()));
  } else if (py::isinstance<py::str>(v)) {
    out = cr::OptionValue::string(utf8(v));
  } else if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v)) {
    std::vector<std::int64_t> values;
    bool integers = true;
    for (py::handle item : v) {
      int overflow = 0;
      if (!PyLong_Check(item.ptr()) || py::isinstance<py::bool_>(item)) {
        integers = false;
        break;
      }
      values.push_back(PyLong_AsLongLongAndOverflow(item.ptr(), &overflow));
      if (overflow) {
        integers = false;
        break;
      }
    }
    out = integers ? cr::OptionValue::integers(std::move(values)) : cr::OptionValue::other(shown);
  } else {
    out = cr::OptionValue::other(shown);
  }
  out.shown_as(shown);
  return out;
}

// A typed value of the core as the Python value a user would give: None, bool, int, float, str,
// a tuple of ints.
py::object python_value(const cr::OptionValue& v) {
  switch (v.kind()) {
    case cr::OptionValue::Kind::null: return py::none();
    case cr::OptionValue::Kind::boolean: return py::bool_(v.as_boolean());
    case cr::OptionValue::Kind::integer: return py::int_(v.as_integer());
    case cr::OptionValue::Kind::number: return py::float_(v.as_number());
    case cr::OptionValue::Kind::integers: return py::tuple(py::cast(v.as_integers()));
    default: return py::str(v.as_text());
  }
}

// The declaration of a table of options (circlerope/options.h): (key, default, doc, example
// text) in order. config.py takes the defaults and docs of CircleConfig, VisionConfig and
// RotaryConfig from them; the tests check the dataclasses' fields against them.
template <class Config, std::size_t N>
py::list options_of(const std::array<cr::Option<Config>, N>& options) {
  py::list out;
  for (const cr::Option<Config>& o : options)
    out.append(py::make_tuple(std::string(o.key), python_value(o.get(Config{})), std::string(o.doc),
                              std::string(o.example)));
  return out;
}

// The canonical tuples the Python classes keep and pass to the operators (torch/ops.cpp reads
// them with the same options): the values of the options of a table in its order, text options
// of the circle as the grammar's text (the op's circle arguments), the others as get() gives
// them (vision: the op's vision arguments but compat; rotary: theta, rotary_dim, layout,
// sections).
py::tuple circle_args(const cr::CircleConfig& c) {
  py::tuple out(cr::kCircleOptions.size());
  for (std::size_t i = 0; i < cr::kCircleOptions.size(); ++i) {
    const cr::CircleOption& o = cr::kCircleOptions[i];
    out[i] = o.type == cr::OptionType::text ? py::str(cr::option_text(o.get(c))) : python_value(o.get(c));
  }
  return out;
}

// The user's values of the options in declaration order.
cr::CircleConfig circle_config(const py::sequence& values) {
  if (values.size() != cr::kCircleOptions.size())
    throw cr::Error("circle_config: expected " + std::to_string(cr::kCircleOptions.size()) + " values");
  cr::CircleConfig c;
  for (std::size_t i = 0; i < cr::kCircleOptions.size(); ++i) {
    const cr::CircleOption& o = cr::kCircleOptions[i];
    o.set(c, option_value(values[i]), "CircleConfig." + std::string(o.key));
  }
  cr::validate(c);
  return c;
}

// The canonical tuple back, as the operators read it: text options are text.
cr::CircleConfig circle_from(const py::tuple& t) {
  if (t.size() != cr::kCircleOptions.size())
    throw cr::Error("circle: expected the " + std::to_string(cr::kCircleOptions.size()) +
                    " values of CircleConfig._args()");
  cr::CircleConfig c;
  for (std::size_t i = 0; i < cr::kCircleOptions.size(); ++i) {
    const cr::CircleOption& o = cr::kCircleOptions[i];
    o.set(c, o.type == cr::OptionType::text ? cr::OptionValue::text(t[i].cast<std::string>()) : option_value(t[i]),
          o.key);
  }
  cr::validate(c);
  return c;
}

// Python's VisionConfig holds every vision option but compat, which get_rope_index takes as an
// argument of its own (the behaviour of a call, not a constant of the model); the op takes it
// after the others.
bool in_vision_config(const cr::VisionOption& o) { return o.key != "compat"; }

// How a message names the value of option `key`: names[key] where the caller gives one (a Python
// field or argument named otherwise than the key), else "<prefix><key>".
std::string named(const py::dict& names, const std::string& key, const char* prefix) {
  if (names.contains(key)) return names[py::str(key)].cast<std::string>();
  return prefix + key;
}

// A dataclass's fields {key: the user's value}, in its order, each read by the option of that key
// and named "VisionConfig.<key>" ("RotaryConfig.<key>") in messages, or as `names` says; a key that
// is no option is refused with the list of the keys.
cr::VisionConfig vision_config(const py::dict& fields, const py::dict& names = {}) {
  cr::VisionConfig v;
  for (const auto& [key, value] : fields) {
    const std::string k = key.cast<std::string>();
    cr::set_vision_option(v, k, option_value(value), named(names, k, "VisionConfig."));
  }
  cr::validate(v);
  return v;
}

py::tuple vision_args(const cr::VisionConfig& v) {
  py::list out;
  for (const cr::VisionOption& o : cr::kVisionOptions)
    if (in_vision_config(o)) out.append(python_value(o.get(v)));
  return py::tuple(out);
}

cr::VisionConfig vision_from(const py::tuple& t) {
  const auto count = static_cast<std::size_t>(
      std::count_if(cr::kVisionOptions.begin(), cr::kVisionOptions.end(), in_vision_config));
  if (t.size() != count)
    throw cr::Error("vision: expected the " + std::to_string(count) + " values of VisionConfig._args()");
  py::dict fields;
  std::size_t i = 0;
  for (const cr::VisionOption& o : cr::kVisionOptions)
    if (in_vision_config(o)) fields[py::str(std::string(o.key))] = t[i++];
  return vision_config(fields);
}

// rotary_dim None means 2 * sum(sections), the Python API's default.
cr::RotaryConfig rotary_config(const py::dict& fields, const py::dict& names = {}) {
  cr::RotaryConfig r;
  bool dim_given = false;
  for (const auto& [key, value] : fields) {
    const std::string k = key.cast<std::string>();
    if (k == "rotary_dim" && value.is_none()) continue;
    dim_given = dim_given || k == "rotary_dim";
    cr::set_rotary_option(r, k, option_value(value), named(names, k, "RotaryConfig."));
  }
  if (!dim_given) {
    const std::int64_t sum = std::int64_t{r.sections[0]} + r.sections[1] + r.sections[2];
    cr::set_rotary_option(r, "rotary_dim", cr::OptionValue::integer(2 * sum), "RotaryConfig.rotary_dim");
  }
  cr::validate(r);
  return r;
}

py::tuple rotary_args(const cr::RotaryConfig& r) {
  py::tuple out(cr::kRotaryOptions.size());
  for (std::size_t i = 0; i < cr::kRotaryOptions.size(); ++i) out[i] = python_value(cr::kRotaryOptions[i].get(r));
  return out;
}

cr::RotaryConfig rotary_from(const py::tuple& t) {
  if (t.size() != cr::kRotaryOptions.size())
    throw cr::Error("rotary: expected the " + std::to_string(cr::kRotaryOptions.size()) +
                    " values of RotaryConfig._args()");
  py::dict fields;
  for (std::size_t i = 0; i < cr::kRotaryOptions.size(); ++i)
    fields[py::str(std::string(cr::kRotaryOptions[i].key))] = t[i];
  return rotary_config(fields);
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
                       py::handle scheme, const py::tuple& circle,
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
  // Every Python object is read before the GIL is released: vision_from() touches Python
  // objects, which without the GIL would crash.
  const cr::Geometry geometry{cr::scheme_option(option_value(scheme), "scheme"), circle_from(circle)};
  const cr::VisionConfig vision_config = vision_from(vision);
  const cr::RotaryConfig rot = rotary_from(rotary);
  const cr::RopeIndexInput in{{input_ids.data(), static_cast<std::size_t>(input_ids.size())},
                              batch, seq_len, mask, images, videos, seconds};
  cr::Positions positions;
  {
    py::gil_scoped_release released;  // only C++ values from here on
    positions = cr::rope_index(in, vision_config, geometry);
  }
  return metrics_dict(cr::coupling_metrics(positions, rot));
}

// Strings arrive as Python objects (a str parameter would make pybind11 raise its own TypeError,
// with pybind11's words, for anything else; the package chooses the exception class).
std::string text_of(py::handle v, const char* name) {
  if (!py::isinstance<py::str>(v)) throw cr::Error(std::string(name) + " must be a string (got " + option_value(v).shown() + ")");
  return utf8(v);
}

py::tuple layout_positions(py::handle layout, py::handle scheme, const py::tuple& circle, const py::tuple& vision) {
  const cr::Geometry geometry{cr::scheme_option(option_value(scheme), "scheme"), circle_from(circle)};
  const cr::Positions p =
      cr::layout_positions(cr::parse_layout(text_of(layout, "layout")), vision_from(vision), geometry);
  py::array_t<float> pos({std::int64_t{3}, std::int64_t{1}, p.seq_len});
  std::copy(p.position_ids.begin(), p.position_ids.end(), pos.mutable_data());
  py::array_t<float> deltas({std::int64_t{1}, std::int64_t{1}});
  deltas.mutable_data()[0] = p.rope_deltas[0];
  return py::make_tuple(pos, deltas);
}

py::dict layout_metrics(py::handle layout, py::handle scheme, const py::tuple& circle, const py::tuple& vision,
                        const py::tuple& rotary) {
  const cr::Geometry geometry{cr::scheme_option(option_value(scheme), "scheme"), circle_from(circle)};
  const cr::Positions p =
      cr::layout_positions(cr::parse_layout(text_of(layout, "layout")), vision_from(vision), geometry);
  return metrics_dict(cr::coupling_metrics(p, rotary_from(rotary)));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "circlerope core: configs, AGE plans and coupling metrics (no torch)";
  m.attr("__version__") = CIRCLEROPE_VERSION;
  // Raw Python values in, the canonical tuple out (or ValueError naming the value).
  m.def("circle_options", [] { return options_of(cr::kCircleOptions); });
  m.def("vision_options", [] { return options_of(cr::kVisionOptions); });
  m.def("rotary_options", [] { return options_of(cr::kRotaryOptions); });
  m.def("circle_config", [](const py::sequence& values) { return circle_args(circle_config(values)); });
  // A dataclass's fields by key ({"spatial_merge_size": 2, ...}), read by the options of those keys;
  // names: {key: how a message names that value} where it is not "<Class>.<key>".
  m.def("vision_config", [](const py::dict& fields, const py::dict& names) {
    return vision_args(vision_config(fields, names));
  }, py::arg("fields"), py::arg("names") = py::dict());
  m.def("rotary_config", [](const py::dict& fields, const py::dict& names) {
    return rotary_args(rotary_config(fields, names));
  }, py::arg("fields"), py::arg("names") = py::dict());
  // One vision option's value as the core reads it (its canonical typed value), named `name` in
  // messages: get_rope_index's and decode_position_ids' compat.
  m.def("vision_option", [](py::handle key, py::handle value, py::handle name) {
    const std::string k = text_of(key, "key");
    cr::VisionConfig v;
    cr::set_vision_option(v, k, option_value(value), text_of(name, "name"));
    for (const cr::VisionOption& o : cr::kVisionOptions)
      if (o.key == k) return python_value(o.get(v));
    return py::object(py::none());  // unreachable: set_vision_option refused an unknown key
  });
  // A front end's own integer and number arguments (a layer index, a cache position, a scale), read
  // as the options are and named `name` in messages.
  m.def("integer_option", [](py::handle value, py::handle name) {
    return cr::integer_option(option_value(value), text_of(name, "name"));
  });
  m.def("number_option", [](py::handle value, py::handle name) {
    return cr::number_option(option_value(value), text_of(name, "name"));
  });
  // The rotation's pairing by the kernels' own reading (rotary.h parse_pairing), named `name`.
  m.def("pairing", [](py::handle value, py::handle name) {
    const std::string n = text_of(name, "name");
    if (!py::isinstance<py::str>(value))
      throw cr::Error(n + " must be \"neox\" or \"gptj\" (got " + option_value(value).shown() + ")");
    try {
      return std::string(cr::to_string(cr::parse_pairing(utf8(value))));
    } catch (const cr::Error& e) {
      throw cr::Error(n + ": " + e.what());
    }
  });
  // The CPU path the process runs and why (circlerope::cpu_path: the kernels' view, the one
  // the operators use); an unusable CIRCLEROPE_ISA is a ValueError naming the value.
  m.def("cpu_path", [] {
    const cr::CpuPath p = cr::cpu_path();
    return py::make_tuple(std::string(cr::to_string(p.isa)), p.reason);
  });
  // The core's limit of one call (circlerope::kMaxTokens), which Python checks against a
  // tensor's shape before anything reads or copies the tensor.
  m.attr("MAX_TOKENS") = cr::kMaxTokens;
  // The one quoting rule of every front end's messages (circlerope/detail/quote.h).
  m.def("quoted", [](py::handle text) { return cr::detail::quoted(text_arg(text, "quoted")); });
  m.def("escaped", [](py::handle text) { return cr::detail::escaped(text_arg(text, "escaped")); });
  m.def("one_line", [](py::handle text, std::size_t limit) {
    return cr::detail::one_line(text_arg(text, "one_line"), std::max<std::size_t>(limit, 3));
  }, py::arg("text"), py::arg("limit") = cr::detail::kLongestMessage);
  m.def(
      "age_plan",
      [](py::object spec, py::object layers) {
        if (!py::isinstance<py::str>(spec))
          throw cr::Error("AgePlan spec must be a string (got " + option_value(spec).shown() + ")");
        const cr::AgePlan plan(utf8(spec), cr::integer_option(option_value(layers), "AgePlan layers"));
        std::vector<std::string> schemes;
        std::vector<int> geometry;
        for (cr::Scheme s : plan.schemes()) schemes.emplace_back(cr::to_string(s));
        for (int l = 0; l < plan.layers(); ++l) geometry.push_back(plan.layer_geometry(l));
        return py::make_tuple(plan.pattern(), schemes, geometry);
      },
      py::arg("spec"), py::arg("layers"));
  m.def("batch_metrics", &batch_metrics);
  m.def("layout_metrics", &layout_metrics);
  m.def("layout_positions", &layout_positions);
  m.def("decode_positions", [](const py::array_t<float, py::array::c_style>& deltas, py::handle first,
                                py::handle count) {
    const std::int64_t f = cr::integer_option(option_value(first), "cache_position");
    const std::int64_t n = cr::integer_option(option_value(count), "count");
    const std::span<const float> d(deltas.data(), static_cast<std::size_t>(deltas.size()));
    const std::vector<float> v = cr::decode_positions(d, f, n);  // checks (and names) the sizes first
    py::array_t<float> out({std::int64_t{3}, static_cast<std::int64_t>(deltas.size()), n});
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
  });
  m.def("format_layout", [](py::handle layout) { return cr::format_layout(cr::parse_layout(text_of(layout, "layout"))); });
}
