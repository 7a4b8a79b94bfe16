// The options as declared once (circlerope/options.h: kCircleOptions, kVisionOptions,
// kRotaryOptions) against the front ends: for every option, its example value given through the
// C API (whose structs spell the options out) and through the command line (whose flags are
// derived; vision options through a JSON request) must give what the core gives for the same
// value: positions, rotary tables, metrics. A front end that drops or misreads an option fails
// here by the option's name. python/tests/test_option_table.py checks the Python package and the
// ops.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "circlerope/c_api.h"
#include "circlerope/c_kernels.h"
#include "circlerope/options.h"
#include "circlerope/positions.h"
#include "circlerope/ptd.h"
#include "circlerope/rotary.h"

#ifdef CIRCLEROPE_CLI_PATH
#include <unistd.h>
#include <sys/wait.h>

#include "golden_support.h"
#include "option_flags.h"
#include "report.h"
#include "request.h"
#endif

namespace {

using namespace circlerope;

// One row: text, a 4x4 merged image (an 8x8 patch grid), text. Every example moves some
// position of the ring (KeysAreDistinctAndExamplesMovePositions).
constexpr int64_t kImage[3] = {1, 8, 8};

std::vector<int64_t> input_ids() {
  const VisionConfig v;
  std::vector<int64_t> ids = {11, 12, v.vision_start_token_id};
  ids.insert(ids.end(), 16, v.image_token_id);
  ids.insert(ids.end(), {v.vision_start_token_id + 1, 13, 14});
  return ids;
}

std::vector<float> core_positions(const CircleConfig& circle) {
  const std::vector<int64_t> ids = input_ids();
  const GridTHW image{kImage[0], kImage[1], kImage[2]};
  const RopeIndexInput in{ids, 1, static_cast<int64_t>(ids.size()), {}, {&image, 1}, {}, {}};
  return rope_index(in, VisionConfig{}, {Scheme::circle, circle}).position_ids;
}

std::vector<float> c_api_positions(const crp_circle_config& circle) {
  const std::vector<int64_t> ids = input_ids();
  crp_vision_config vision;
  crp_vision_config_default(&vision);
  const crp_rope_index_input in{ids.data(), 1, static_cast<int64_t>(ids.size()), nullptr, kImage, 1, nullptr, 0,
                                nullptr};
  std::vector<float> positions(3 * ids.size()), deltas(1);
  char error[256] = "";
  EXPECT_EQ(crp_rope_index(&in, &vision, CRP_SCHEME_CIRCLE, &circle, positions.data(), deltas.data(), error,
                           sizeof error),
            CRP_OK)
      << error;
  return positions;
}

// The default config with the option's example, read as text (as the C APIs and flags give it).
template <class Config>
Config with_example(const Option<Config>& option) {
  Config config;
  option.set(config, OptionValue::text(option.example), option.key);
  return config;
}

TEST(OptionTable, KeysAreDistinctAndExamplesMovePositions) {
  std::set<std::string_view> keys;
  const std::vector<float> defaults = core_positions(CircleConfig{});
  for (const CircleOption& option : kCircleOptions) {
    SCOPED_TRACE(option.key);
    EXPECT_TRUE(keys.insert(option.key).second) << "declared twice";
    EXPECT_EQ(find_circle_option(option.key), &option);
    EXPECT_FALSE(option.doc.empty());
    const CircleConfig changed = with_example(option);
    EXPECT_NE(option_text(option.get(changed)), option_text(option.get(CircleConfig{})));
    EXPECT_NE(core_positions(changed), defaults) << "the example " << option.example << " moves no position";
    // get() reads back to the same config, as text and typed
    for (const OptionValue& value : {option.get(changed), OptionValue::text(option_text(option.get(changed)))}) {
      CircleConfig again;
      option.set(again, value, option.key);
      EXPECT_EQ(core_positions(again), core_positions(changed)) << value.shown();
    }
  }
}

TEST(OptionTable, TheCApiCarriesEveryCircleOption) {
  crp_circle_config defaults;
  ASSERT_EQ(crp_circle_config_default(&defaults), CRP_OK);
  EXPECT_EQ(c_api_positions(defaults), core_positions(CircleConfig{}));
  for (const CircleOption& option : kCircleOptions) {
    SCOPED_TRACE(option.key);
    crp_circle_config c = defaults;
    char error[256] = "";
    const std::string key(option.key), example(option.example);
    ASSERT_EQ(crp_circle_config_set(&c, key.c_str(), example.c_str(), error, sizeof error), CRP_OK) << error;
    EXPECT_EQ(c_api_positions(c), core_positions(with_example(option)))
        << "crp_circle_config does not carry " << option.key;
  }
}

// ----------------------------------------------------------- vision options ---

// A row with an image (1x8x8 patches) and a video (2x4x4 patches, 1.5 s per grid: the frame
// times of seconds, index and hf-4.52 all differ) under `vision`: its token ids, and as many
// tokens per block as its merge size makes.
constexpr int64_t kVisionImage[3] = {1, 8, 8};
constexpr int64_t kVisionVideo[3] = {2, 4, 4};
constexpr double kVisionSeconds = 1.5;

std::vector<int64_t> vision_ids(const VisionConfig& v) {
  const int64_t m = v.spatial_merge_size;
  std::vector<int64_t> ids = {11, 12, v.vision_start_token_id};
  ids.insert(ids.end(), kVisionImage[0] * (kVisionImage[1] / m) * (kVisionImage[2] / m), v.image_token_id);
  ids.insert(ids.end(), {13, v.vision_start_token_id});
  ids.insert(ids.end(), kVisionVideo[0] * (kVisionVideo[1] / m) * (kVisionVideo[2] / m), v.video_token_id);
  ids.insert(ids.end(), {14, 15});
  return ids;
}

// The core's positions (circle, the paper's setting) of the row made for `made` read under `read`.
std::vector<float> vision_positions(const VisionConfig& made, const VisionConfig& read) {
  const std::vector<int64_t> ids = vision_ids(made);
  const GridTHW image{kVisionImage[0], kVisionImage[1], kVisionImage[2]};
  const GridTHW video{kVisionVideo[0], kVisionVideo[1], kVisionVideo[2]};
  const RopeIndexInput in{ids, 1, static_cast<int64_t>(ids.size()), {}, {&image, 1}, {&video, 1}, {&kVisionSeconds, 1}};
  return rope_index(in, read, {Scheme::circle, CircleConfig{}}).position_ids;
}

TEST(OptionTable, VisionKeysAreDistinctAndExamplesMatter) {
  std::set<std::string_view> keys;
  for (const VisionOption& option : kVisionOptions) {
    SCOPED_TRACE(option.key);
    EXPECT_TRUE(keys.insert(option.key).second) << "declared twice";
    EXPECT_EQ(find_vision_option(option.key), &option);
    EXPECT_FALSE(option.doc.empty());
    const VisionConfig changed = with_example(option);
    EXPECT_NO_THROW(validate(changed));
    EXPECT_NE(option_text(option.get(changed)), option_text(option.get(VisionConfig{})));
    // The row made for the example reads differently under the defaults (or is refused there).
    std::vector<float> under_defaults;
    try {
      under_defaults = vision_positions(changed, VisionConfig{});
    } catch (const Error&) {
    }
    EXPECT_NE(vision_positions(changed, changed), under_defaults)
        << "the example " << option.example << " changes no position";
    for (const OptionValue& value : {option.get(changed), OptionValue::text(option_text(option.get(changed)))}) {
      VisionConfig again;
      option.set(again, value, option.key);
      EXPECT_EQ(vision_positions(changed, again), vision_positions(changed, changed)) << value.shown();
    }
  }
}

TEST(OptionTable, TheCApiCarriesEveryVisionOption) {
  crp_vision_config defaults;
  ASSERT_EQ(crp_vision_config_default(&defaults), CRP_OK);
  crp_circle_config circle;
  ASSERT_EQ(crp_circle_config_default(&circle), CRP_OK);
  for (const VisionOption& option : kVisionOptions) {
    SCOPED_TRACE(option.key);
    crp_vision_config v = defaults;
    char error[256] = "";
    const std::string key(option.key), example(option.example);
    ASSERT_EQ(crp_vision_config_set(&v, key.c_str(), example.c_str(), error, sizeof error), CRP_OK) << error;
    const VisionConfig changed = with_example(option);
    const std::vector<int64_t> ids = vision_ids(changed);
    const crp_rope_index_input in{ids.data(), 1, static_cast<int64_t>(ids.size()), nullptr, kVisionImage, 1,
                                  kVisionVideo, 1, &kVisionSeconds};
    std::vector<float> positions(3 * ids.size()), deltas(1);
    EXPECT_EQ(crp_rope_index(&in, &v, CRP_SCHEME_CIRCLE, &circle, positions.data(), deltas.data(), error, sizeof error),
              CRP_OK)
        << error << " (crp_vision_config does not carry " << option.key << ")";
    EXPECT_EQ(positions, vision_positions(changed, changed)) << "crp_vision_config does not carry " << option.key;
  }
}

// ----------------------------------------------------------- rotary options ---

// An option's example as a front end is given it: (key, text) pairs. validate() checks
// rotary_dim against the sections (twice their sum, under chunked and interleaved), so
// rotary_dim's example comes with sections that fit it; every other example is valid on the
// default config.
std::vector<std::pair<std::string, std::string>> rotary_given(const RotaryOption& option) {
  std::vector<std::pair<std::string, std::string>> given = {{std::string(option.key), std::string(option.example)}};
  if (option.key == "rotary_dim") {
    const int64_t half = parse_integer(option.example, "rotary_dim") / 2;
    given.emplace_back("sections", std::to_string(half - 2 * (half / 3)) + "," + std::to_string(half / 3) + "," +
                                       std::to_string(half / 3));
  }
  return given;
}

RotaryConfig rotary_with(const RotaryOption& option) {
  RotaryConfig config;
  for (const auto& [key, text] : rotary_given(option)) set_rotary_option(config, key, OptionValue::text(text), key);
  return config;
}

// One row of positions whose three axes differ: t = s, h = 2s + 1, w = s / 2.
constexpr int64_t kRotaryTokens = 12;

std::vector<float> rotary_positions() {
  std::vector<float> p(3 * kRotaryTokens);
  for (int64_t s = 0; s < kRotaryTokens; ++s) {
    p[static_cast<std::size_t>(s)] = static_cast<float>(s);
    p[static_cast<std::size_t>(kRotaryTokens + s)] = static_cast<float>(2 * s + 1);
    p[static_cast<std::size_t>(2 * kRotaryTokens + s)] = static_cast<float>(s) / 2;
  }
  return p;
}

std::vector<float> core_table(const RotaryConfig& config) {
  const std::vector<float> positions = rotary_positions();
  std::vector<float> values(static_cast<std::size_t>(kRotaryTokens * config.rotary_dim));
  make_rotary_table_into(config, positions.data(), 1, kRotaryTokens, values);
  return values;
}

TEST(OptionTable, RotaryKeysAreDistinctAndExamplesMatter) {
  std::set<std::string_view> keys;
  for (const RotaryOption& option : kRotaryOptions) {
    SCOPED_TRACE(option.key);
    EXPECT_TRUE(keys.insert(option.key).second) << "declared twice";
    EXPECT_EQ(find_rotary_option(option.key), &option);
    EXPECT_FALSE(option.doc.empty());
    const RotaryConfig changed = rotary_with(option);
    ASSERT_NO_THROW(validate(changed));
    EXPECT_NE(option_text(option.get(changed)), option_text(option.get(RotaryConfig{})));
    EXPECT_NE(core_table(changed), core_table(RotaryConfig{})) << "the example " << option.example << " changes no angle";
    for (const OptionValue& value : {option.get(changed), OptionValue::text(option_text(option.get(changed)))}) {
      RotaryConfig again;
      option.set(again, value, option.key);
      EXPECT_EQ(option_text(option.get(again)), option_text(option.get(changed))) << value.shown();
    }
  }
}

TEST(OptionTable, TheCApiCarriesEveryRotaryOption) {
  crp_rotary_config defaults;
  ASSERT_EQ(crp_rotary_config_default(&defaults), CRP_OK);
  const std::vector<float> positions = rotary_positions();
  for (const RotaryOption& option : kRotaryOptions) {
    SCOPED_TRACE(option.key);
    crp_rotary_config c = defaults;
    char error[256] = "";
    for (const auto& [key, text] : rotary_given(option))
      ASSERT_EQ(crp_rotary_config_set(&c, key.c_str(), text.c_str(), error, sizeof error), CRP_OK) << error;
    const RotaryConfig changed = rotary_with(option);
    std::vector<float> values(static_cast<std::size_t>(kRotaryTokens * changed.rotary_dim));
    const crp_table_view table = {values.data(), 1, kRotaryTokens, c.rotary_dim};
    EXPECT_EQ(crp_table_fill(&c, positions.data(), &table, nullptr, error, sizeof error), CRP_OK)
        << error << " (crp_rotary_config does not carry " << option.key << ")";
    EXPECT_EQ(values, core_table(changed)) << "crp_rotary_config does not carry " << option.key;
  }
}

// ------------------------------------------------------------- every table ---

template <class Config, std::size_t N>
void expect_unknown_key_lists_the_keys(const std::array<Option<Config>, N>& options,
                                       void (*set)(Config&, std::string_view, const OptionValue&, std::string_view)) {
  Config config;
  std::string message;
  try {
    set(config, "colour", OptionValue::text("1"), "colour");
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_THAT(message, ::testing::StartsWith("colour is not a"));
  for (const Option<Config>& option : options) EXPECT_THAT(message, ::testing::HasSubstr(option.key));
}

TEST(OptionTable, AnUnknownKeyIsRefusedWithEveryKeyOfItsTable) {
  expect_unknown_key_lists_the_keys(kCircleOptions, set_circle_option);
  expect_unknown_key_lists_the_keys(kVisionOptions, set_vision_option);
  expect_unknown_key_lists_the_keys(kRotaryOptions, set_rotary_option);
}

// The options that take a name list every name in their doc (the help texts and docstrings).
TEST(OptionTable, TheDocOfANameOptionListsItsNames) {
  for (const Compat compat : kAllCompats)
    EXPECT_THAT(std::string(find_vision_option("compat")->doc), ::testing::HasSubstr(std::string(to_string(compat))));
  for (const TimeMode time : {TimeMode::seconds, TimeMode::index})
    EXPECT_THAT(std::string(find_vision_option("time")->doc), ::testing::HasSubstr(std::string(to_string(time))));
  for (const FrequencyLayout layout : {FrequencyLayout::chunked, FrequencyLayout::interleaved, FrequencyLayout::single})
    EXPECT_THAT(std::string(find_rotary_option("layout")->doc), ::testing::HasSubstr(std::string(to_string(layout))));
}

// ------------------------------------------------------------ command line ---

#ifdef CIRCLEROPE_CLI_PATH
// What `circlerope ARGUMENTS` writes to stdout; a failure (exit status other than 0) is a test
// failure that names the command.
std::string cli_output(const std::string& arguments) {
  namespace fs = std::filesystem;
  const fs::path out = fs::temp_directory_path() / ("circlerope_option_table_" + std::to_string(::getpid()));
  const std::string command = std::string("'") + CIRCLEROPE_CLI_PATH + "' " + arguments + " >'" + out.string() + "'";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  const std::string text = test::slurp(out);
  fs::remove(out);
  return text;
}

// `circlerope positions --layout ... --format json` with one option's flag, byte for byte the
// JSON the front end writes for the core's positions of that option's example.
TEST(OptionTable, TheCommandLineHasAFlagForEveryCircleOption) {
  const std::string layout = "text:2,image:4x4,text:2";
  for (const CircleOption& option : kCircleOptions) {
    SCOPED_TRACE(option.key);
    std::string arguments;
    if (option.type == OptionType::boolean) {
      const bool on = option.get(CircleConfig{}).as_boolean();
      ASSERT_EQ(std::string(option.example), on ? "false" : "true") << "a flag can only switch a boolean";
      ASSERT_EQ(cli::option_flag_negated(option), on);
      arguments = cli::option_flag(option);
    } else {
      arguments = cli::option_flag(option) + " '" + std::string(option.example) + "'";
    }
    std::ostringstream expected;
    cli::write_positions_json(
        expected, layout_positions(parse_layout(layout), VisionConfig{}, {Scheme::circle, with_example(option)}));
    EXPECT_EQ(cli_output("positions --format json --layout " + layout + " " + arguments), expected.str())
        << "the command line does not carry " << option.key;
  }
}

// `circlerope ptd --format json` with one option's flags, byte for byte the JSON of the core's
// metrics under that option's example.
TEST(OptionTable, TheCommandLineHasAFlagForEveryRotaryOption) {
  const std::string layout = "text:2,image:4x4,text:2";
  const auto metrics = [&](const RotaryConfig& rotary) {
    std::vector<cli::SchemeMetrics> rows;
    for (const Scheme scheme : {Scheme::mrope, Scheme::circle}) {
      const Geometry geometry{scheme, CircleConfig{}};
      Positions p = layout_positions(parse_layout(layout), VisionConfig{}, geometry);
      CouplingMetrics m = coupling_metrics(p, rotary);
      rows.push_back({geometry, std::move(p), std::move(m)});
    }
    return cli::metrics_json(rows).dump(2) + "\n";
  };
  for (const RotaryOption& option : kRotaryOptions) {
    SCOPED_TRACE(option.key);
    std::string arguments;
    for (const auto& [key, text] : rotary_given(option))
      arguments.append(" ").append(cli::option_flag(*find_rotary_option(key))).append(" '").append(text).append("'");
    const std::string expected = metrics(rotary_with(option));
    ASSERT_NE(expected, metrics(RotaryConfig{})) << "the example " << option.example << " changes no metric";
    EXPECT_EQ(cli_output("ptd --format json --schemes mrope,circle --layout " + layout + arguments), expected)
        << "the command line does not carry " << option.key;
  }
}

// `circlerope positions --request FILE` with one vision option set in the request, byte for
// byte the JSON of the core's positions under that option's example. The request holds compat
// at its top level (a behaviour the request asks for), the other options in its "vision" object.
TEST(OptionTable, TheJsonRequestCarriesEveryVisionOption) {
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() / ("circlerope_option_table_request_" + std::to_string(::getpid()));
  for (const VisionOption& option : kVisionOptions) {
    SCOPED_TRACE(option.key);
    const VisionConfig changed = with_example(option);
    const OptionValue typed = option.get(changed);
    nlohmann::json value;
    switch (typed.kind()) {
      case OptionValue::Kind::integer: value = typed.as_integer(); break;
      case OptionValue::Kind::number: value = typed.as_number(); break;
      case OptionValue::Kind::string: value = typed.as_text(); break;
      default: FAIL() << "a vision option's value is an integer, a number or a name (got " << typed.shown() << ")";
    }
    nlohmann::json request = {{"input_ids", nlohmann::json::array({vision_ids(changed)})},
                              {"image_grid_thw", nlohmann::json::array({nlohmann::json::array({1, 8, 8})})},
                              {"video_grid_thw", nlohmann::json::array({nlohmann::json::array({2, 4, 4})})},
                              {"second_per_grid_ts", nlohmann::json::array({kVisionSeconds})}};
    if (option.key == "compat") request["compat"] = value;
    else request["vision"][std::string(option.key)] = value;
    std::ofstream(file) << request.dump();
    std::ostringstream expected;
    const std::vector<int64_t> ids = vision_ids(changed);
    const GridTHW image{kVisionImage[0], kVisionImage[1], kVisionImage[2]};
    const GridTHW video{kVisionVideo[0], kVisionVideo[1], kVisionVideo[2]};
    const RopeIndexInput in{ids, 1, static_cast<int64_t>(ids.size()), {}, {&image, 1}, {&video, 1}, {&kVisionSeconds, 1}};
    cli::write_positions_json(expected, rope_index(in, changed, {Scheme::circle, CircleConfig{}}));
    EXPECT_EQ(cli_output("positions --request '" + file.string() + "'"), expected.str())
        << "the JSON request does not carry " << option.key;
  }
  fs::remove(file);
}
#endif

}  // namespace
