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
//   scheme, time, layout := their names (positions.h, rotary.h)
//
// Typed sources (JSON, Python) give numbers as numbers and names as strings: a string is
// never read as a number there ({"alpha": "0.5"} is an error). Untyped sources (a flag, a C
// string) give text, which is read with the grammar above ("--alpha 0.5", "--radius auto").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "circlerope/positions.h"
#include "circlerope/rotary.h"

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

// ------------------------------------------------------------------ setters ---
// Each sets one option and checks its range; an unknown key is an error naming the keys.
// `name` starts the messages, as above: a label of the caller's, shown as it is. A caller that
// names a value by the key its user gave (the C APIs) passes that key as `name`; an unknown one
// is then shown by the quoting rule of detail/quote.h. The structs' other fields are left as
// they are.

// radius, alpha, move_to_origin, dff_rate, move_to_positive, method (must be "circle").
void set_circle_option(CircleConfig& config, std::string_view key, const OptionValue& value,
                       std::string_view name);
// spatial_merge_size, tokens_per_second, vision_start_token_id, image_token_id,
// video_token_id, time, compat (compat_names(): none | hf-4.49 | ... | hf-5.18; positions.h). (validate() still checks that the three ids are distinct.)
void set_vision_option(VisionConfig& config, std::string_view key, const OptionValue& value,
                       std::string_view name);
// theta, rotary_dim, layout, sections. (validate() checks rotary_dim against the sections.)
void set_rotary_option(RotaryConfig& config, std::string_view key, const OptionValue& value,
                       std::string_view name);
// A scheme name from a typed string or text.
Scheme scheme_option(const OptionValue& value, std::string_view name);

// The canonical text of the radius and move_to_positive options, which set_circle_option
// reads back to the same config: "10", "auto", "auto-2.5"; "false", "auto", "3.5".
std::string radius_text(const CircleConfig& config);
std::string move_to_positive_text(const CircleConfig& config);

}  // namespace circlerope
