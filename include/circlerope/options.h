// circlerope — one grammar for every configuration value, shared by every front end.
//
// The command line (flags), JSON requests, the C API and the Python module hand the values
// they received to the functions below, so "auto-2", "1e-3" or "16,24,24" mean the same
// thing everywhere and are refused everywhere with the same words. Nothing else parses a
// configuration value, nor any number the command line reads (its counts, seeds and times
// too: "010" is ten, "0x24", " 36" and "-1" for a count are refused).
//
//   number           := [+|-] ( digits [ "." [digits] ] | "." digits ) [ (e|E) [+|-] digits ]
//                       decimal only: no hex, no inf/nan, no spaces, no '_'; the whole text is
//                       read and the value must be a finite double
//   integer          := [+|-] digits                       (fits in int64)
//   unsigned         := digits                              (a count, an index, a seed: no sign;
//                                                           in a range the caller gives, <= 2^64-1)
//   boolean          := true | false                       (typed sources may also give 0 / 1)
//   radius           := number | "auto" | "auto-" number   (the number > 0; "auto" is k = 1)
//   alpha, dff_rate  := number in [0, 1]                   (dff_rate also false / true = 1)
//   move_to_positive := false | "auto" | number            (absent or null: false; 0: no shift)
//   sections         := integer "," integer "," integer    (t, h, w; each >= 0)
//   scheme, time, layout := their names (positions.h, rotary_config.h)
//
// Typed sources (JSON, Python) give numbers as numbers and names as strings: a string is
// never read as a number there ({"alpha": "0.5"} is an error). Untyped sources (a flag, a C
// string) give text, which is read with the grammar above ("--alpha 0.5", "--radius auto").
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "circlerope/positions.h"
#include "circlerope/rotary_config.h"

namespace circlerope {

// ------------------------------------------------------------------ grammar ---

// `name` is how the caller's user knows the value ("--alpha", "request.circle.alpha"); it
// starts every message, e.g. "--alpha must be a decimal number (got '0x1p1')".
double parse_number(std::string_view text, std::string_view name);
std::int64_t parse_integer(std::string_view text, std::string_view name);
// "--layers must be an integer in [1, 100000] (got '0x24')" for anything else, out of range too.
std::uint64_t parse_unsigned(std::string_view text, std::string_view name, std::uint64_t low,
                             std::uint64_t high);
bool parse_boolean(std::string_view text, std::string_view name);

// Names (the inverse of to_string).
TimeMode parse_time_mode(std::string_view text);  // "seconds" | "index"
std::string_view to_string(TimeMode mode);

// --------------------------------------------------------------- one value ---

// A value as a front end received it.
class OptionValue {
 public:
  enum class Kind {
    null,         // JSON null, Python None
    boolean,
    integer,      // fits in int64
    big_integer,  // an integer literal beyond int64 (JSON, Python): its decimal digits
    number,       // a double
    string,       // a typed string: a name or keyword, never read as a number
    text,         // untyped text (a flag, a C string): read with the grammar
    integers,     // a list of integers (Python tuple, JSON array)
    other,        // anything else (an object, a nested list): `shown` says what it was
  };

  static OptionValue null() { return OptionValue(Kind::null); }
  static OptionValue boolean(bool v);
  static OptionValue integer(std::int64_t v);
  static OptionValue big_integer(std::string_view digits);
  static OptionValue number(double v);
  static OptionValue string(std::string_view v);
  static OptionValue text(std::string_view v);
  static OptionValue integers(std::vector<std::int64_t> v);
  static OptionValue other(std::string_view shown);

  Kind kind() const { return kind_; }
  bool as_boolean() const { return boolean_; }
  std::int64_t as_integer() const { return integer_; }
  double as_number() const { return number_; }
  const std::string& as_text() const { return text_; }  // string, text, big_integer, other
  const std::vector<std::int64_t>& as_integers() const { return list_; }

  // The value for a message, by the one rule of detail/quote.h: strings quoted, at most 40
  // characters of a value, bytes outside printable ASCII escaped; or what shown_as() set (Python
  // says None and True where JSON says null and true), bounded and escaped by the same rule.
  std::string shown() const;
  OptionValue& shown_as(std::string_view display);

 private:
  explicit OptionValue(Kind k) : kind_(k) {}
  Kind kind_;
  bool boolean_ = false;
  std::int64_t integer_ = 0;
  double number_ = 0;
  std::string text_;
  std::vector<std::int64_t> list_;
  std::string display_;
};

// One value of a given type, for front ends' own integer, number and flag arguments (an
// AGE layer count, a decode count): the same reading as the options below.
std::int64_t integer_option(const OptionValue& value, std::string_view name);
double number_option(const OptionValue& value, std::string_view name);
bool boolean_option(const OptionValue& value, std::string_view name);
// A number in [0, 1].
double unit_option(const OptionValue& value, std::string_view name);

// A typed value as the grammar's text, which the setters read back to the same value: a number
// in its shortest exact form ("10", "0.30000000000000004"), true / false, a string as it is, a
// list of integers separated by commas ("16,24,24"), null as "false" (an option that is off).
std::string option_text(const OptionValue& value);

// ------------------------------------------------------------------ options ---
// Every option is declared once, in the table of its config: kCircleOptions (CircleConfig,
// positions.h), kVisionOptions (VisionConfig, positions.h) and kRotaryOptions (RotaryConfig,
// rotary_config.h). The front ends derive theirs from the tables:
//   - set_circle_option, set_vision_option and set_rotary_option read the keys of their table
//     (and the message that lists them); through them, the JSON request's "circle" and "vision"
//     keys and its top-level "compat" (cli/request.cpp), and the keys of the C API's
//     crp_circle_config_set, crp_vision_config_set and crp_rotary_config_set;
//   - the command line's flags (cli/option_flags.h, cli/main.cpp): one per circle and rotary
//     option, and --compat for layouts: "--" + the key with '-' for '_' (the rotary layout is
//     --freq-layout: --layout is the token layout), a value in the grammar, the doc and the
//     default as help; a boolean that defaults to true is "--no-" + the key, with no value;
//   - the Python module: the CircleConfig dataclass (its fields, their order and defaults,
//     python/bindings.cpp, circlerope/config.py); the values of VisionConfig and RotaryConfig, which _core
//     reads by key through the tables, and the canonical tuples all three keep, in table order;
//   - the PyTorch op rope_index: the names and types of its circle and vision arguments in its
//     schema (torch/ops.cpp), and its reading of them.
// Some front ends spell the options out, and tests check them against the tables, giving every
// option's example through each and comparing with the core: the C structs crp_circle_config,
// crp_vision_config and crp_rotary_config (tests/test_option_table.cpp); the Python
// VisionConfig and RotaryConfig fields and defaults, the op rope_index's C++ signature and the op
// rotary_table's arguments (python/tests/test_option_table.py; rope_index's counts are also
// static_asserts in torch/ops.cpp).
// A new option touches:
//   - its config: a field (positions.h, rotary_config.h) and its range in validate() (config.cpp);
//   - its table here: an entry, and a setter in options.cpp when reading it is more than a call;
//   - the C API: a field of crp_circle_config or crp_vision_config (c_api.h) and the conversions
//     in src/core/c_api.cpp, or of crp_rotary_config (c_kernels.h) and src/cpu/c_convert.h and
//     c_kernels.cpp;
//   - Python: a field of VisionConfig or RotaryConfig (circlerope/config.py; CircleConfig's fields come from
//     its table);
//   - the ops: a parameter of rope_index's C++ function (circle, vision: torch/ops.cpp); for a
//     rotary option, rotary_table's schema and functions (torch/ops.cpp, ops_cuda.cpp,
//     op_common.h), its fake kernel (_registration.py) and the package's call of it (circlerope/rotary.py);
//   - and its use.
// Where the C structs, the dataclasses or the ops' arguments miss it, the tests above fail
// naming the option (and rope_index's C++ signature does not compile).

// The type of an option where values are typed: the op's argument (str, float, bool, int,
// int[]) and the canonical tuple. A text option travels as the grammar's text ("auto-2",
// "false") or as its name ("index", "chunked").
enum class OptionType { text, number, boolean, integer, integers };

template <class Config>
struct Option {
  std::string_view key;      // "move_to_origin"
  OptionType type;
  std::string_view doc;      // what it means and its range, one line (help texts, docstrings);
                             // a boolean's is a verb phrase, which "do not " negates
  std::string_view example;  // a valid value as text, not the default, that changes what the
                             // config gives (tests; rotary_dim's goes with sections that fit it)
  // Reads `value` into the config, range checked; `name` starts the messages.
  void (*set)(Config& config, const OptionValue& value, std::string_view name);
  // The option's value in `config`, typed as a Python or JSON user would give it (a number, a
  // string, true / false, a list of integers, or null for off); `set` reads it back to the same
  // config, as it is and as option_text of it. The default is get(Config{}).
  OptionValue (*get)(const Config& config);
};

using CircleOption = Option<CircleConfig>;
using VisionOption = Option<VisionConfig>;
using RotaryOption = Option<RotaryConfig>;

// The setters of the options whose reading is more than one call (options.cpp).
namespace detail {
void set_radius(CircleConfig& config, const OptionValue& value, std::string_view name);
OptionValue radius_value(const CircleConfig& config);
void set_dff_rate(CircleConfig& config, const OptionValue& value, std::string_view name);
void set_move_to_positive(CircleConfig& config, const OptionValue& value, std::string_view name);
OptionValue move_to_positive_value(const CircleConfig& config);
void set_spatial_merge_size(VisionConfig& config, const OptionValue& value, std::string_view name);
void set_tokens_per_second(VisionConfig& config, const OptionValue& value, std::string_view name);
void set_time(VisionConfig& config, const OptionValue& value, std::string_view name);
void set_compat(VisionConfig& config, const OptionValue& value, std::string_view name);
void set_theta(RotaryConfig& config, const OptionValue& value, std::string_view name);
void set_rotary_dim(RotaryConfig& config, const OptionValue& value, std::string_view name);
void set_frequency_layout(RotaryConfig& config, const OptionValue& value, std::string_view name);
void set_sections(RotaryConfig& config, const OptionValue& value, std::string_view name);
}  // namespace detail

inline constexpr std::array<CircleOption, 5> kCircleOptions = {{
    {"radius", OptionType::text, "Circle-RoPE radius: a number > 0, auto or auto-k (k x the largest centred coordinate)",
     "auto-2", detail::set_radius, detail::radius_value},
    {"alpha", OptionType::number, "weight of the polar angle vs the raster angle, 0..1", "0.25",
     [](CircleConfig& c, const OptionValue& v, std::string_view name) { c.alpha = unit_option(v, name); },
     [](const CircleConfig& c) { return OptionValue::number(c.alpha); }},
    {"move_to_origin", OptionType::boolean, "centre the grid before taking angles", "false",
     [](CircleConfig& c, const OptionValue& v, std::string_view name) { c.move_to_origin = boolean_option(v, name); },
     [](const CircleConfig& c) { return OptionValue::boolean(c.move_to_origin); }},
    {"dff_rate", OptionType::number, "blend towards the un-ringed grid, 0..1 (0 = off, true = 1)", "0.5",
     detail::set_dff_rate, [](const CircleConfig& c) { return OptionValue::number(c.dff_rate); }},
    {"move_to_positive", OptionType::text, "shift the ring to positive values: false, auto or an offset", "3",
     detail::set_move_to_positive, detail::move_to_positive_value},
}};

// The model constants of the token convention, and the transformers behaviour to reproduce.
// (validate() checks that the three ids are distinct.)
inline constexpr std::array<VisionOption, 7> kVisionOptions = {{
    {"spatial_merge_size", OptionType::integer, "patches merged per token along h and w, an integer >= 1", "1",
     detail::set_spatial_merge_size, [](const VisionConfig& c) { return OptionValue::integer(c.spatial_merge_size); }},
    {"tokens_per_second", OptionType::number, "temporal positions per second of video (time seconds), > 0 and finite in float32",
     "4", detail::set_tokens_per_second,
     [](const VisionConfig& c) { return OptionValue::number(c.tokens_per_second); }},
    {"vision_start_token_id", OptionType::integer, "the token id that opens a vision block", "100",
     [](VisionConfig& c, const OptionValue& v, std::string_view name) { c.vision_start_token_id = integer_option(v, name); },
     [](const VisionConfig& c) { return OptionValue::integer(c.vision_start_token_id); }},
    {"image_token_id", OptionType::integer, "the token id of an image's tokens", "200",
     [](VisionConfig& c, const OptionValue& v, std::string_view name) { c.image_token_id = integer_option(v, name); },
     [](const VisionConfig& c) { return OptionValue::integer(c.image_token_id); }},
    {"video_token_id", OptionType::integer, "the token id of a video's tokens", "300",
     [](VisionConfig& c, const OptionValue& v, std::string_view name) { c.video_token_id = integer_option(v, name); },
     [](const VisionConfig& c) { return OptionValue::integer(c.video_token_id); }},
    {"time", OptionType::text, "video frame time: seconds (Qwen2.5-VL) or index (Qwen2-VL)", "index",
     detail::set_time, [](const VisionConfig& c) { return OptionValue::string(to_string(c.time)); }},
    {"compat", OptionType::text,
     "reproduce a transformers behaviour: none, hf-4.49, hf-4.52, hf-5.2, hf-5.3-5.5.3, hf-5.5.4, hf-5.6 "
     "(or hf-5.3), hf-5.18 (docs/guides/compat.md)",
     "hf-4.52", detail::set_compat, [](const VisionConfig& c) { return OptionValue::string(to_string(c.compat)); }},
}};

// The rotary frequencies. (validate() checks rotary_dim against the sections.)
inline constexpr std::array<RotaryOption, 4> kRotaryOptions = {{
    {"theta", OptionType::number, "rope_theta, the base of the frequencies theta^(-2i/D), in [1, 2^126]", "10000",
     detail::set_theta, [](const RotaryConfig& c) { return OptionValue::number(c.theta); }},
    {"rotary_dim", OptionType::integer, "rotary dimension D, even, 2..1024 (twice the sum of the sections)", "96",
     detail::set_rotary_dim, [](const RotaryConfig& c) { return OptionValue::integer(c.rotary_dim); }},
    {"layout", OptionType::text, "which axis each frequency reads: chunked, interleaved or single", "interleaved",
     detail::set_frequency_layout, [](const RotaryConfig& c) { return OptionValue::string(to_string(c.layout)); }},
    {"sections", OptionType::integers, "frequencies per axis t,h,w, summing to D/2 (not read by single)", "24,20,20",
     detail::set_sections,
     [](const RotaryConfig& c) { return OptionValue::integers({c.sections[0], c.sections[1], c.sections[2]}); }},
}};

// The option of that key, or nullptr.
const CircleOption* find_circle_option(std::string_view key);
const VisionOption* find_vision_option(std::string_view key);
const RotaryOption* find_rotary_option(std::string_view key);

// ------------------------------------------------------------------ setters ---
// Each sets one option and checks its range; an unknown key is an error naming the keys.
// `name` starts the messages, as above: a label of the caller's, shown as it is. A caller that
// names a value by the key its user gave (the C APIs) passes that key as `name`; an unknown one
// is then shown by the quoting rule of detail/quote.h. The structs' other fields are left as
// they are.

// The keys of kCircleOptions, and method (must be "circle", as in the reference's configs).
void set_circle_option(CircleConfig& config, std::string_view key, const OptionValue& value,
                       std::string_view name);
// The keys of kVisionOptions (compat: compat_names(), positions.h).
void set_vision_option(VisionConfig& config, std::string_view key, const OptionValue& value,
                       std::string_view name);
// The keys of kRotaryOptions.
void set_rotary_option(RotaryConfig& config, std::string_view key, const OptionValue& value,
                       std::string_view name);
// A scheme name from a typed string or text.
Scheme scheme_option(const OptionValue& value, std::string_view name);

// The canonical text of the radius and move_to_positive options (option_text of their values),
// which set_circle_option reads back to the same config: "10", "auto", "auto-2.5"; "false",
// "auto", "3.5".
std::string radius_text(const CircleConfig& config);
std::string move_to_positive_text(const CircleConfig& config);

}  // namespace circlerope
