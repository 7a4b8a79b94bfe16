// circlerope front end — the command line's flag of an option declared in circlerope/options.h
// (kCircleOptions, kVisionOptions, kRotaryOptions). cli/main.cpp adds the flags; the tests
// (test_option_table.cpp) give every option's example through them.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <type_traits>

#include "circlerope/options.h"

namespace circlerope::cli {

// Whether the option's flag is "--no-" + the key: a boolean that is on by default.
template <class Config>
bool option_flag_negated(const Option<Config>& option) {
  return option.type == OptionType::boolean && option.get(Config{}).as_boolean();
}

// "--" + the key with '-' for '_'; a boolean that defaults to true is "--no-" + the key (the
// flag turns it off and takes no value). The rotary layout is "--freq-layout": "--layout" is
// the token layout that every command reading a source takes.
template <class Config>
std::string option_flag(const Option<Config>& option) {
  if (std::is_same_v<Config, RotaryConfig> && option.key == "layout") return "--freq-layout";
  std::string name(option.key);
  std::replace(name.begin(), name.end(), '_', '-');
  return (option_flag_negated(option) ? "--no-" : "--") + name;
}

// The flag's help: the doc and the default ("[1e+06]"); a negated boolean's doc after "do not ".
template <class Config>
std::string option_help(const Option<Config>& option) {
  if (option.type == OptionType::boolean)
    return (option_flag_negated(option) ? "do not " : "") + std::string(option.doc);
  return std::string(option.doc) + " [" + option_text(option.get(Config{})) + "]";
}

}  // namespace circlerope::cli
