// The Circle-RoPE options as declared once (circlerope/options.h, kCircleOptions) against the
// front ends: for every option, its example value given through the C API (whose struct spells
// the options out) and through the command line (whose flags are derived) must give the positions
// the core gives for the same value. A front end that drops or misreads an option fails here by
// the option's name. python/tests/test_option_table.py checks the Python package and the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "circlerope/c_api.h"
#include "circlerope/options.h"
#include "circlerope/positions.h"

#ifdef CIRCLEROPE_CLI_PATH
#include <unistd.h>
#include <sys/wait.h>

#include "golden_support.h"
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

CircleConfig with_example(const CircleOption& option) {
  CircleConfig config;
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

#ifdef CIRCLEROPE_CLI_PATH
// `circlerope positions --layout ... --format json` with one option's flag, byte for byte the
// JSON the front end writes for the core's positions of that option's example.
TEST(OptionTable, TheCommandLineHasAFlagForEveryCircleOption) {
  namespace fs = std::filesystem;
  const std::string layout = "text:2,image:4x4,text:2";
  const fs::path out = fs::temp_directory_path() / ("circlerope_option_table_" + std::to_string(::getpid()));
  for (const CircleOption& option : kCircleOptions) {
    SCOPED_TRACE(option.key);
    std::string flag(option.key);
    std::replace(flag.begin(), flag.end(), '_', '-');
    std::string arguments;
    if (option.type == OptionType::boolean) {
      const bool on = option.get(CircleConfig{}).as_boolean();
      ASSERT_EQ(std::string(option.example), on ? "false" : "true") << "a flag can only switch a boolean";
      arguments = (on ? "--no-" : "--") + flag;
    } else {
      arguments = "--" + flag + " '" + std::string(option.example) + "'";
    }
    const std::string command = std::string("'") + CIRCLEROPE_CLI_PATH + "' positions --format json --layout " +
                                layout + " " + arguments + " >'" + out.string() + "'";
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
    std::ostringstream expected;
    cli::write_positions_json(
        expected, layout_positions(parse_layout(layout), VisionConfig{}, {Scheme::circle, with_example(option)}));
    EXPECT_EQ(test::slurp(out), expected.str()) << command;
  }
  fs::remove(out);
}
#endif

}  // namespace
