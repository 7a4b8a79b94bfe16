// The one grammar of configuration values (options.h): every front end calls these.
#include "circlerope/options.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "circlerope/detail/fail.h"

namespace circlerope {

using detail::fail;
using detail::quoted;

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// number := [+|-] ( digits [ "." [digits] ] | "." digits ) [ (e|E) [+|-] digits ]
// Returns the decimal exponent of the first nonzero digit (for telling an underflow from
// an overflow), or INT64_MIN when every digit is 0; `ok` is false for any other text.
struct Decimal {
  bool ok = false;
  bool zero = true;
  std::int64_t magnitude = 0;  // floor(log10(|value|)), roughly, when !zero
};

Decimal scan_decimal(std::string_view s) {
  Decimal d;
  std::size_t i = 0;
  const std::size_t n = s.size();
  if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
  std::int64_t int_digits = 0, frac_digits = 0, first_nonzero = 0;  // position of the digit
  bool seen = false;
  while (i < n && is_digit(s[i])) {
    if (!seen && s[i] != '0') seen = true, first_nonzero = int_digits;
    ++int_digits, ++i;
  }
  if (i < n && s[i] == '.') {
    ++i;
    while (i < n && is_digit(s[i])) {
      if (!seen && s[i] != '0') seen = true, first_nonzero = int_digits + frac_digits;
      ++frac_digits, ++i;
    }
  }
  if (int_digits + frac_digits == 0) return d;
  std::int64_t exponent = 0;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    std::int64_t digits = 0;
    while (i < n && is_digit(s[i])) {
      if (exponent < 100000) exponent = exponent * 10 + (s[i] - '0');  // saturates: far beyond any double
      ++digits, ++i;
    }
    if (digits == 0) return d;
    if (negative) exponent = -exponent;
  }
  if (i != n) return d;
  d.ok = true;
  d.zero = !seen;
  d.magnitude = int_digits - 1 - first_nonzero + exponent;
  return d;
}

std::string number_shown(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buffer[32];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return ec == std::errc() ? std::string(buffer, end) : "?";
}

[[noreturn]] void expected(std::string_view name, std::string_view what, const OptionValue& v) {
  fail(name, " must be ", what, " (got ", v.shown(), ")");
}

double finite(double v, std::string_view name, const OptionValue& shown_value, std::string_view what) {
  if (!std::isfinite(v)) expected(name, what, shown_value);
  return v;
}

// A number from a number, an integer or untyped text; `what` names the expectation.
double number_of(const OptionValue& v, std::string_view name, std::string_view what) {
  switch (v.kind()) {
    case OptionValue::Kind::number: return finite(v.as_number(), name, v, what);
    case OptionValue::Kind::integer: return static_cast<double>(v.as_integer());
    case OptionValue::Kind::big_integer:
    case OptionValue::Kind::text: return parse_number(v.as_text(), name);
    default: expected(name, what, v);
  }
}

std::int64_t integer_of(const OptionValue& v, std::string_view name, std::string_view what) {
  switch (v.kind()) {
    case OptionValue::Kind::integer: return v.as_integer();
    case OptionValue::Kind::big_integer:
    case OptionValue::Kind::text: return parse_integer(v.as_text(), name);
    default: expected(name, what, v);
  }
}

bool boolean_of(const OptionValue& v, std::string_view name) {
  switch (v.kind()) {
    case OptionValue::Kind::boolean: return v.as_boolean();
    case OptionValue::Kind::integer:  // the reference's configs sometimes say 0 / 1
      if (v.as_integer() == 0 || v.as_integer() == 1) return v.as_integer() == 1;
      break;
    case OptionValue::Kind::text: return parse_boolean(v.as_text(), name);
    default: break;
  }
  expected(name, "true or false", v);
}

// A name: a typed string or untyped text.
const std::string& name_of(const OptionValue& v, std::string_view name, std::string_view what) {
  if (v.kind() != OptionValue::Kind::string && v.kind() != OptionValue::Kind::text) expected(name, what, v);
  return v.as_text();
}

// A name read by `parse` (parse_time_mode, parse_compat, ...), its message prefixed by `name`.
template <class Parse>
auto parse_name(const OptionValue& v, std::string_view name, std::string_view what, Parse parse) {
  const std::string& text = name_of(v, name, what);
  try {
    return parse(text);
  } catch (const Error& e) {
    fail(name, ": ", e.what());
  }
}

bool is_text_like(const OptionValue& v) {
  return v.kind() == OptionValue::Kind::string || v.kind() == OptionValue::Kind::text;
}

double unit_interval(const OptionValue& v, std::string_view name) {
  const double x = number_of(v, name, "a number in [0, 1]");
  if (!(x >= 0 && x <= 1)) fail(name, " must be in [0, 1] (got ", number_shown(x), ")");
  return x;
}

// An unknown key in a message. The C APIs name a value by its key, which is then the user's
// text: shown by the one rule (detail/quote.h). Other callers' names are their own labels.
std::string key_named(std::string_view name, std::string_view key) {
  return name == key ? detail::shown_name(key) : std::string(name);
}

int int_of(std::int64_t v, std::string_view name, std::int64_t low, std::int64_t high) {
  if (v < low || v > high) fail(name, " must be in [", low, ", ", high, "] (got ", v, ")");
  return static_cast<int>(v);
}

std::array<int, 3> sections_of(const OptionValue& v, std::string_view name) {
  constexpr std::string_view forms = "three integers t,h,w";
  std::vector<std::int64_t> values;
  if (v.kind() == OptionValue::Kind::integers) {
    values = v.as_integers();
  } else if (v.kind() == OptionValue::Kind::text) {
    std::string_view s = v.as_text();
    while (true) {
      const std::size_t comma = s.find(',');
      try {
        values.push_back(parse_integer(s.substr(0, comma), name));
      } catch (const Error&) {
        expected(name, forms, v);
      }
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
  } else {
    expected(name, forms, v);
  }
  if (values.size() != 3) expected(name, forms, v);
  std::array<int, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    if (values[i] < 0 || values[i] > std::numeric_limits<int>::max())
      fail(name, " must be ", forms, " each in [0, 2^31) (got ", v.shown(), ")");
    out[i] = static_cast<int>(values[i]);
  }
  return out;
}

}  // namespace

// ------------------------------------------------------------------ grammar ---

double parse_number(std::string_view text, std::string_view name) {
  const Decimal d = scan_decimal(text);
  if (!d.ok) fail(name, " must be a decimal number (got ", quoted(text), ")");
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);  // from_chars takes no '+'
  double value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range) {
    if (d.zero || d.magnitude < 0) return digits.front() == '-' ? -0.0 : 0.0;  // underflow: rounds to 0
    fail(name, " must be a finite number (got ", quoted(text), ", beyond the range of a double)");
  }
  if (ec != std::errc() || end != digits.data() + digits.size() || !std::isfinite(value))
    fail(name, " must be a decimal number (got ", quoted(text), ")");
  return value;
}

std::int64_t parse_integer(std::string_view text, std::string_view name) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  bool ok = !digits.empty() && !(digits.size() < text.size() && digits.front() == '-');  // not "+-1"
  for (std::size_t i = 0; i < digits.size() && ok; ++i)
    ok = is_digit(digits[i]) || (i == 0 && digits[i] == '-' && digits.size() > 1);
  if (!ok) fail(name, " must be an integer (got ", quoted(text), ")");
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range)
    fail(name, " must be an integer in [-2^63, 2^63) (got ", quoted(text), ")");
  if (ec != std::errc() || end != digits.data() + digits.size())
    fail(name, " must be an integer (got ", quoted(text), ")");
  return value;
}

std::uint64_t parse_unsigned(std::string_view text, std::string_view name, std::uint64_t low,
                             std::uint64_t high) {
  std::uint64_t value = 0;
  bool ok = !text.empty();
  for (const char c : text) ok = ok && is_digit(c);
  if (ok) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    ok = ec == std::errc() && end == text.data() + text.size() && value >= low && value <= high;
  }
  if (!ok) fail(name, " must be an integer in [", low, ", ", high, "] (got ", quoted(text), ")");
  return value;
}

bool parse_boolean(std::string_view text, std::string_view name) {
  if (text == "true") return true;
  if (text == "false") return false;
  fail(name, " must be true or false (got ", quoted(text), ")");
}

TimeMode parse_time_mode(std::string_view text) {
  if (text == "seconds") return TimeMode::seconds;
  if (text == "index") return TimeMode::index;
  fail("unknown time mode ", quoted(text), " (expected \"seconds\" (Qwen2.5-VL) or \"index\" (Qwen2-VL))");
}

std::string_view to_string(TimeMode mode) { return mode == TimeMode::index ? "index" : "seconds"; }

// --------------------------------------------------------------- one value ---

OptionValue OptionValue::boolean(bool v) {
  OptionValue o(Kind::boolean);
  o.boolean_ = v;
  return o;
}

OptionValue OptionValue::integer(std::int64_t v) {
  OptionValue o(Kind::integer);
  o.integer_ = v;
  return o;
}

OptionValue OptionValue::big_integer(std::string_view digits) {
  OptionValue o(Kind::big_integer);
  o.text_ = digits;
  return o;
}

OptionValue OptionValue::number(double v) {
  OptionValue o(Kind::number);
  o.number_ = v;
  return o;
}

OptionValue OptionValue::string(std::string_view v) {
  OptionValue o(Kind::string);
  o.text_ = v;
  return o;
}

OptionValue OptionValue::text(std::string_view v) {
  OptionValue o(Kind::text);
  o.text_ = v;
  return o;
}

OptionValue OptionValue::integers(std::vector<std::int64_t> v) {
  OptionValue o(Kind::integers);
  o.list_ = std::move(v);
  return o;
}

OptionValue OptionValue::other(std::string_view shown) {
  OptionValue o(Kind::other);
  o.text_ = detail::escaped(shown);
  return o;
}

OptionValue& OptionValue::shown_as(std::string_view display) {
  display_ = detail::escaped(display);
  return *this;
}

std::string OptionValue::shown() const {
  if (!display_.empty()) return display_;
  switch (kind_) {
    case Kind::null: return "null";
    case Kind::boolean: return boolean_ ? "true" : "false";
    case Kind::integer: return std::to_string(integer_);
    case Kind::big_integer: return detail::escaped(text_);
    case Kind::number: return number_shown(number_);
    case Kind::string:
    case Kind::text: return quoted(text_);
    case Kind::integers: {
      std::string s = "[";
      for (std::size_t i = 0; i < list_.size(); ++i) {
        if (i == 8) {
          s += ", ...";
          break;
        }
        s += (i ? ", " : "") + std::to_string(list_[i]);
      }
      return s + "]";
    }
    case Kind::other: return text_;
  }
  return "?";
}

std::int64_t integer_option(const OptionValue& v, std::string_view name) {
  return integer_of(v, name, "an integer");
}

double number_option(const OptionValue& v, std::string_view name) {
  return number_of(v, name, "a finite number");
}

bool boolean_option(const OptionValue& v, std::string_view name) { return boolean_of(v, name); }

double unit_option(const OptionValue& v, std::string_view name) { return unit_interval(v, name); }

std::string option_text(const OptionValue& v) {
  switch (v.kind()) {
    case OptionValue::Kind::null: return "false";
    case OptionValue::Kind::boolean: return v.as_boolean() ? "true" : "false";
    case OptionValue::Kind::integer: return std::to_string(v.as_integer());
    case OptionValue::Kind::number: return number_shown(v.as_number());
    case OptionValue::Kind::big_integer:
    case OptionValue::Kind::string:
    case OptionValue::Kind::text: return v.as_text();
    case OptionValue::Kind::integers: {
      std::string text;
      for (const std::int64_t x : v.as_integers()) {
        if (!text.empty()) text += ',';
        text += std::to_string(x);
      }
      return text;
    }
    default: return v.shown();
  }
}

// ------------------------------------------------------ Circle-RoPE options ---

constexpr std::string_view kRadiusForms = "a finite number > 0, \"auto\" or \"auto-k\" with a number k > 0";

void detail::set_radius(CircleConfig& c, const OptionValue& v, std::string_view name) {
  if (is_text_like(v) && v.as_text().starts_with("auto")) {
    const std::string& s = v.as_text();
    if (s == "auto") {
      c.radius_mode = RadiusMode::automatic;
      c.radius_scale = 1.0;
      return;
    }
    if (!s.starts_with("auto-")) expected(name, kRadiusForms, v);
    double k = 0;
    try {
      k = parse_number(std::string_view(s).substr(5), name);
    } catch (const Error&) {
      expected(name, kRadiusForms, v);
    }
    if (!(k > 0)) fail(name, ": the scale k of \"auto-k\" must be a finite number > 0 (got ", quoted(s), ")");
    c.radius_mode = RadiusMode::automatic;
    c.radius_scale = k;
    return;
  }
  if (v.kind() == OptionValue::Kind::string) expected(name, kRadiusForms, v);  // typed: not a number
  double r = 0;
  try {
    r = number_of(v, name, kRadiusForms);
  } catch (const Error&) {
    expected(name, kRadiusForms, v);
  }
  if (!(r > 0)) fail(name, " must be ", kRadiusForms, " (got ", number_shown(r), ")");
  c.radius_mode = RadiusMode::fixed;
  c.radius = r;
}

void detail::set_move_to_positive(CircleConfig& c, const OptionValue& v, std::string_view name) {
  constexpr std::string_view forms = "false, \"auto\" or a finite number (an offset)";
  const bool off = v.kind() == OptionValue::Kind::null ||
                   (v.kind() == OptionValue::Kind::boolean && !v.as_boolean()) ||
                   (is_text_like(v) && v.as_text() == "false");
  if (off) {
    c.move_to_positive = PositiveShift::none;
    c.positive_offset = 0;
    return;
  }
  if (is_text_like(v) && v.as_text() == "auto") {
    c.move_to_positive = PositiveShift::automatic;
    c.positive_offset = 0;
    return;
  }
  if (v.kind() == OptionValue::Kind::string || v.kind() == OptionValue::Kind::boolean) expected(name, forms, v);
  double offset = 0;
  try {
    offset = number_of(v, name, forms);
  } catch (const Error&) {
    expected(name, forms, v);
  }
  // the reference's `if move_to_positive:` skips an offset of 0 entirely
  c.move_to_positive = offset == 0 ? PositiveShift::none : PositiveShift::offset;
  c.positive_offset = offset;
}

OptionValue detail::radius_value(const CircleConfig& c) {
  if (c.radius_mode == RadiusMode::fixed) return OptionValue::number(c.radius);
  return OptionValue::string(c.radius_scale == 1.0 ? "auto" : "auto-" + number_shown(c.radius_scale));
}

// absent / null / false: off; true: beta = 1 (the reference's `dff_rate: true`)
void detail::set_dff_rate(CircleConfig& c, const OptionValue& v, std::string_view name) {
  const bool boolean = v.kind() == OptionValue::Kind::boolean ||
                       (v.kind() == OptionValue::Kind::text && (v.as_text() == "true" || v.as_text() == "false"));
  if (v.kind() == OptionValue::Kind::null) c.dff_rate = 0;
  else if (boolean) c.dff_rate = boolean_of(v, name) ? 1.0 : 0.0;
  else c.dff_rate = unit_interval(v, name);
}

OptionValue detail::move_to_positive_value(const CircleConfig& c) {
  switch (c.move_to_positive) {
    case PositiveShift::none: return OptionValue::null();
    case PositiveShift::automatic: return OptionValue::string("auto");
    case PositiveShift::offset: return OptionValue::number(c.positive_offset);
  }
  return OptionValue::null();
}

// ----------------------------------------------------------- vision options ---

void detail::set_spatial_merge_size(VisionConfig& c, const OptionValue& v, std::string_view name) {
  const std::int64_t m = integer_of(v, name, "an integer >= 1");
  if (m < 1) fail(name, " must be an integer >= 1 (got ", m, ")");
  c.spatial_merge_size = m;
}

void detail::set_tokens_per_second(VisionConfig& c, const OptionValue& v, std::string_view name) {
  const double tps = number_of(v, name, "a number > 0");
  // Read in float32, like the reference: it must be finite there too.
  if (!(std::isfinite(static_cast<float>(tps)) && tps > 0))
    fail(name, " must be finite (in float32) and > 0 (got ", number_shown(tps), ")");
  c.tokens_per_second = tps;
}

void detail::set_time(VisionConfig& c, const OptionValue& v, std::string_view name) {
  c.time = parse_name(v, name, "\"seconds\" or \"index\"", parse_time_mode);
}

void detail::set_compat(VisionConfig& c, const OptionValue& v, std::string_view name) {
  c.compat = parse_name(v, name, compat_names(), parse_compat);
}

// ----------------------------------------------------------- rotary options ---

void detail::set_theta(RotaryConfig& c, const OptionValue& v, std::string_view name) {
  const double theta = number_of(v, name, "a finite number > 0");
  if (!(theta > 0)) fail(name, " must be a finite number > 0 (got ", number_shown(theta), ")");
  c.theta = theta;
}

void detail::set_rotary_dim(RotaryConfig& c, const OptionValue& v, std::string_view name) {
  const int dim = int_of(integer_of(v, name, "an even integer in [2, 1024]"), name, 2, 1024);
  if (dim % 2 != 0) fail(name, " must be an even integer in [2, 1024] (got ", dim, ")");
  c.rotary_dim = dim;
}

void detail::set_frequency_layout(RotaryConfig& c, const OptionValue& v, std::string_view name) {
  c.layout = parse_name(v, name, "chunked, interleaved or single", parse_frequency_layout);
}

void detail::set_sections(RotaryConfig& c, const OptionValue& v, std::string_view name) {
  c.sections = sections_of(v, name);
}

// ------------------------------------------------------------------ setters ---

namespace {

template <class Config, std::size_t N>
const Option<Config>* find_option(const std::array<Option<Config>, N>& options, std::string_view key) {
  for (const Option<Config>& option : options)
    if (option.key == key) return &option;
  return nullptr;
}

// The keys of a table for a message: "a, b, c or d"; `last`, when given, comes after them all.
template <class Config, std::size_t N>
std::string keys_of(const std::array<Option<Config>, N>& options, std::string_view last = {}) {
  std::vector<std::string_view> keys;
  for (const Option<Config>& option : options) keys.push_back(option.key);
  if (!last.empty()) keys.push_back(last);
  std::string text;
  for (std::size_t i = 0; i < keys.size(); ++i)
    text.append(i == 0 ? "" : i + 1 == keys.size() ? " or " : ", ").append(keys[i]);
  return text;
}

}  // namespace

const CircleOption* find_circle_option(std::string_view key) { return find_option(kCircleOptions, key); }
const VisionOption* find_vision_option(std::string_view key) { return find_option(kVisionOptions, key); }
const RotaryOption* find_rotary_option(std::string_view key) { return find_option(kRotaryOptions, key); }

void set_circle_option(CircleConfig& c, std::string_view key, const OptionValue& v, std::string_view name) {
  if (const CircleOption* option = find_circle_option(key)) {
    option->set(c, v, name);
  } else if (key == "method") {
    if (name_of(v, name, "\"circle\"") != "circle")
      fail(name, ": only \"circle\" is supported (got ", v.shown(), ")");
  } else {
    fail(key_named(name, key), " is not a Circle-RoPE option (expected ", keys_of(kCircleOptions, "method"), ")");
  }
}

void set_vision_option(VisionConfig& c, std::string_view key, const OptionValue& v, std::string_view name) {
  const VisionOption* option = find_vision_option(key);
  if (!option) fail(key_named(name, key), " is not a vision option (expected ", keys_of(kVisionOptions), ")");
  option->set(c, v, name);
}

void set_rotary_option(RotaryConfig& c, std::string_view key, const OptionValue& v, std::string_view name) {
  const RotaryOption* option = find_rotary_option(key);
  if (!option) fail(key_named(name, key), " is not a rotary option (expected ", keys_of(kRotaryOptions), ")");
  option->set(c, v, name);
}

Scheme scheme_option(const OptionValue& v, std::string_view name) {
  return parse_name(v, name, "a scheme name (vanilla, unordered, mrope or circle)", parse_scheme);
}

std::string radius_text(const CircleConfig& c) { return option_text(detail::radius_value(c)); }

std::string move_to_positive_text(const CircleConfig& c) { return option_text(detail::move_to_positive_value(c)); }

}  // namespace circlerope
