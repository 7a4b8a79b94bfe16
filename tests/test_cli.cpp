// The `circlerope` command, run as a process: outputs, exit codes, messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "circlerope/rotary.h"
#include "golden_support.h"
#include "message_check.h"
#include "test_support.h"

namespace {

using namespace circlerope::test;
using nlohmann::json;
using testing::HasSubstr;
using testing::Not;
namespace fs = std::filesystem;

struct Outcome {
  int code = -1;
  std::string out, err;
};

class Cli : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("circlerope_cli_" + std::to_string(::getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path file(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

  // Runs `circlerope ARGS` (ARGS already shell-quoted), optionally with stdin, with
  // CIRCLEROPE_ISA unset or, when `isa` is not empty, set to it.
  Outcome run(const std::string& args, const std::string& stdin_text = "", const std::string& isa = "") {
    const fs::path in = file("stdin.txt", stdin_text), out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string env = isa.empty() ? "env -u CIRCLEROPE_ISA " : "env CIRCLEROPE_ISA='" + isa + "' ";
    const std::string cmd = std::string("cd '") + dir_.string() + "' && " + env + "'" + CIRCLEROPE_CLI_PATH + "' " + args +
                            " <'" + in.string() + "' >'" + out.string() + "' 2>'" + err.string() + "'";
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  }

  // Invalid input: exit 2, nothing on stdout, exactly one line on stderr.
  void expect_rejected(const Outcome& r, const std::string& fragment) {
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_THAT(r.err, HasSubstr(fragment));
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
    EXPECT_EQ(r.err.rfind("circlerope: ", 0), 0u) << r.err;
  }

  fs::path dir_;
};

void expect_positions_match(const json& expected, const json& got) {
  ASSERT_EQ(got["position_ids"].size(), 3u);
  for (size_t a = 0; a < 3; ++a)
    for (size_t b = 0; b < expected["position_ids"][a].size(); ++b)
      for (size_t s = 0; s < expected["position_ids"][a][b].size(); ++s) {
        const double e = expected["position_ids"][a][b][s], g = got["position_ids"][a][b][s];
        ASSERT_PRED2(golden_close, e, g) << "axis " << a << " row " << b << " token " << s;
      }
  for (size_t b = 0; b < expected["rope_deltas"].size(); ++b)
    EXPECT_NEAR(expected["rope_deltas"][b].get<double>(), got["rope_deltas"][b].get<double>(), kGoldenTolerance);
}

TEST_F(Cli, PositionsRequestMatchesEveryGoldenCase) {
  for (const json& c : golden_cases()) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const fs::path request = file("request.json", c["request"].dump());
    const Outcome r = run("positions --request '" + request.string() + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    expect_positions_match(c["expected"], json::parse(r.out));
  }
}

// Every Hugging Face case in every behaviour, through the command: the integers
// transformers returned, written as JSON integers.
TEST_F(Cli, CompatRequestsReproduceEveryTransformersBehaviourExactly) {
  const json cases = json::parse(slurp(CIRCLEROPE_HF_GOLDEN_FILE))["cases"];
  int checked = 0;
  for (const json& c : cases)
    for (const auto& [mode, expected] : c["expected"].items()) {
      SCOPED_TRACE(c["name"].get<std::string>() + " " + mode);
      json request = c["request"];
      request["compat"] = mode;
      const Outcome r = run("positions --request -", request.dump());
      ASSERT_EQ(r.code, 0) << r.err;
      const json out = json::parse(r.out);
      ASSERT_TRUE(out["position_ids"][0][0][0].is_number_integer()) << r.out.substr(0, 80);
      EXPECT_EQ(out["position_ids"], expected["position_ids"]);
      json deltas = json::array();
      for (const json& d : expected["rope_deltas"]) deltas.push_back(d.is_array() ? d[0] : d);
      EXPECT_EQ(out["rope_deltas"], deltas);
      ++checked;
    }
  EXPECT_EQ(checked, 72);
}

TEST_F(Cli, CompatFlagForLayoutsAndItsErrors) {
  // A video of 3 frames (tau 0, 4, 8) then text: 5.3 continues from the first frame.
  const Outcome r = run("positions --layout text:2,video:3x1x1@2,text:1 --scheme mrope --compat hf-5.3 "
                        "--format json --decode 1");
  ASSERT_EQ(r.code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["position_ids"][0][0], json({0, 1, 2, 6, 10, 3}));
  EXPECT_EQ(out["rope_deltas"], json({5}));
  EXPECT_EQ(out["decode_position_ids"][0][0], json({11}));  // last prompt position (10) + 1
  // Circle-RoPE stays fractional under a compat mode.
  const Outcome c = run("positions --layout text:2,image:2x2 --compat hf-4.52 --format json");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(json::parse(c.out)["position_ids"][0][0][2].is_number_float());
  expect_rejected(run("positions --layout text:2 --compat hf-4.50"), "--compat: unknown compat mode 'hf-4.50'");
  const json request = golden_cases()[0]["request"];
  expect_rejected(run("positions --request - --compat hf-5.3", request.dump()),
                  "--compat cannot be combined with --request");
  json bad = request;
  bad["compat"] = 5.3;
  expect_rejected(run("positions --request -", bad.dump()), "request.compat");
  bad = request;
  bad["vision"]["compat"] = "hf-5.3";
  expect_rejected(run("positions --request -", bad.dump()), "give \"compat\" at the top level");
}

TEST_F(Cli, PositionsRequestFromStdin) {
  const json c = golden_cases()[0];
  const Outcome r = run("positions --request -", c["request"].dump());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_positions_match(c["expected"], json::parse(r.out));
}

TEST_F(Cli, PositionsDecodeContinuesAfterThePrompt) {
  const json c = golden_cases()[0];
  const Outcome r = run("positions --request - --decode 3", c["request"].dump());
  ASSERT_EQ(r.code, 0) << r.err;
  const json out = json::parse(r.out);
  double last_max = 0;
  for (const json& axis : out["position_ids"])
    for (const json& v : axis[0]) last_max = std::max(last_max, v.get<double>());
  // Only float32 rounding of values up to S + max separates them (test_support.h).
  const double seq_len = static_cast<double>(c["request"]["input_ids"][0].size());
  const double tolerance = circlerope::test::kFloatRoundings * (seq_len + last_max + 3);
  for (size_t a = 0; a < 3; ++a)
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(out["decode_position_ids"][a][0][i].get<double>(), last_max + 1 + static_cast<double>(i), tolerance);
}

TEST_F(Cli, PositionsLayoutTableAndJson) {
  Outcome r = run("positions --layout text:2,image:2x2,text:1 --scheme mrope");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("image 0 (1,1)"));
  EXPECT_THAT(r.out, HasSubstr("rope_delta"));
  // mrope: max position 3 (image row/col 1 at anchor 2), then text at 4.
  r = run("positions --layout text:2,image:2x2,text:1 --scheme mrope --decode 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("# next 2 decoded tokens (all three axes): 5.0000 6.0000\n"));
  r = run("positions --layout text:2,image:2x2,text:1 --scheme mrope --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json out = json::parse(r.out);
  // text 0,1; image at anchor 2: (2,2,2) (2,2,3) (2,3,2) (2,3,3); text at 4.
  const std::vector<double> h = {0, 1, 2, 2, 3, 3, 4}, w = {0, 1, 2, 3, 2, 3, 4};
  for (size_t s = 0; s < 7; ++s) {
    EXPECT_EQ(out["position_ids"][1][0][s].get<double>(), h[s]);
    EXPECT_EQ(out["position_ids"][2][0][s].get<double>(), w[s]);
  }
  EXPECT_EQ(out["rope_deltas"][0].get<double>(), -2.0);
}

TEST_F(Cli, TableNamesBlockCellsAcrossPaddingInsideABlock) {
  // A masked token inside the image run: cells follow the token map, not the
  // distance from the block's first token.
  const json request = {{"scheme", "mrope"},
                        {"input_ids", {{7, 151652, 151655, 151655, 0, 151655, 151655, 151653}}},
                        {"attention_mask", {{1, 1, 1, 1, 0, 1, 1, 1}}},
                        {"image_grid_thw", {{1, 4, 4}}}};
  const Outcome r = run("positions --request - --format table", request.dump());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("     4  (padding)"));
  EXPECT_THAT(r.out, HasSubstr("     5  image 0 (1,0)"));
  EXPECT_THAT(r.out, HasSubstr("     6  image 0 (1,1)"));
}

TEST_F(Cli, PtdPaperToyAllSchemes) {
  const Outcome r = run("ptd --layout text:5,image:3x3 --schemes all --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json m = json::parse(r.out);
  EXPECT_NEAR(m["vanilla"]["ptd"].get<double>(), 20.0 / 9.0, 1e-9);
  EXPECT_NEAR(m["unordered"]["ptd"].get<double>(), 0.0, 1e-12);
  // float32 positions of magnitude <= 5 + R: distances agree to a few ulps of that.
  EXPECT_NEAR(m["circle"]["ptd"].get<double>(), 0.0, circlerope::test::kFloatRoundings * (5 + 10));
  EXPECT_GT(m["mrope"]["ptd"].get<double>(), 0.4);
  EXPECT_NEAR(m["unordered"]["rope_kernel_deviation"].get<double>(), 0.0, 1e-12);
  EXPECT_GT(m["circle"]["rope_kernel_deviation"].get<double>(), 0.0);
  EXPECT_EQ(m["circle"]["blocks"].size(), 1u);
}

TEST_F(Cli, PtdTableFromRequest) {
  const fs::path request = file("request.json", golden_cases()[0]["request"].dump());
  const Outcome r = run("ptd --request '" + request.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"vanilla", "unordered", "mrope", "circle", "PTD"}) EXPECT_THAT(r.out, HasSubstr(s));
}

TEST_F(Cli, PlotWritesSvgWithOnePanelPerScheme) {
  Outcome r = run("plot --layout text:5,image:6x6,text:4 --scheme circle --out one.svg");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string one = slurp(dir_ / "one.svg");
  EXPECT_THAT(one, HasSubstr("<svg"));
  EXPECT_THAT(one, HasSubstr("</svg>"));
  r = run("plot --layout text:5,image:6x6,text:4 --schemes all --out all.svg");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string all = slurp(dir_ / "all.svg");
  for (const char* s : {"vanilla", "unordered", "mrope", "circle"}) EXPECT_THAT(all, HasSubstr(s));
}

TEST_F(Cli, DemoRunsAndWritesItsPicture) {
  const Outcome r = run("demo --out demo.svg");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"video 0", "image 1", "PTD", "demo.svg", " us"}) EXPECT_THAT(r.out, HasSubstr(s));
  EXPECT_THAT(slurp(dir_ / "demo.svg"), HasSubstr("</svg>"));
}

TEST_F(Cli, BenchPositionsJson) {
  const Outcome r = run("bench positions --format json --min-seconds 0.01");
  ASSERT_EQ(r.code, 0) << r.err;
  const json b = json::parse(r.out);
  // circle and mrope, each on the path this CPU picks and on the portable path (the scalar
  // reference loops), timed alternately; the fast row carries the ratio.
  ASSERT_EQ(b["results"].size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const json& row = b["results"][i];
    EXPECT_EQ(row["scheme"], i < 2 ? "circle" : "mrope");
    EXPECT_GT(row["ns_per_batch"].get<double>(), 0);
    EXPECT_EQ(row["batch"].get<int>(), 8);
    EXPECT_EQ(row["seq_len"].get<int>(), 814);
    if (i % 2 == 1) {
      EXPECT_EQ(row["path"], "portable");
      EXPECT_FALSE(row.contains("speedup_over_portable"));
    } else {
      EXPECT_EQ(row["path"], b["path"]);
      EXPECT_GT(row["speedup_over_portable"].get<double>(), 0);
    }
  }
  EXPECT_THAT(b["path_reason"].get<std::string>(), testing::StartsWith("automatic: "));
}

TEST_F(Cli, BenchRotaryJsonHasEveryRowAndField) {
  const Outcome r = run("bench rotary --seq-lens 8 --dtypes float32 bfloat16 float16 --min-seconds 0.001 --copy-mib 1 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json b = json::parse(r.out);
  // Every path this machine runs, and the others named with the reason.
  const auto available = circlerope::available_isas();
  ASSERT_EQ(b["paths"].size(), available.size());
  for (std::size_t i = 0; i < available.size(); ++i) EXPECT_EQ(b["paths"][i], circlerope::to_string(available[i]));
  EXPECT_EQ(b["automatic"], circlerope::to_string(circlerope::automatic_isa()));
  for (const auto& st : circlerope::isa_status())
    if (!st.available) {
      EXPECT_EQ(b["skipped_paths"][std::string(circlerope::to_string(st.isa))], st.reason);
      EXPECT_THAT(r.err, HasSubstr("skipping path " + std::string(circlerope::to_string(st.isa))));
    }
  // paths x 3 dtypes x forward/backward x in place/out of place
  ASSERT_EQ(b["results"].size(), 12u * available.size());
  EXPECT_EQ(b["prefetch"], "automatic");
  EXPECT_EQ(b["pairing"], "neox");
  for (const json& row : b["results"]) {
    EXPECT_EQ(row["prefetch"], "automatic");
    EXPECT_EQ(row["pairing"], "neox");
    for (const char* key : {"path", "dtype", "seq_len", "direction", "mode", "ms", "gbps", "copy_gbps", "baseline", "fraction"})
      EXPECT_TRUE(row.contains(key)) << key;
    EXPECT_GT(row["ms"].get<double>(), 0);
    // the median of per-round ratios: close to, not equal to, the ratio of the medians
    EXPECT_GT(row["fraction"].get<double>(), 0);
    EXPECT_GT(row["copy_gbps"].get<double>(), 0);
    EXPECT_EQ(row["seq_len"].get<int>(), 8);
    // The fair baseline of each mode, with the figures it was chosen from.
    if (row["mode"] == "in-place") {
      EXPECT_EQ(row["baseline"], "in-place read-modify-write");
      EXPECT_GT(row["read_modify_write_gbps"].get<double>(), 0);
    } else {
      EXPECT_THAT(row["baseline"].get<std::string>(), testing::AnyOf("memcpy", "streaming copy"));
      EXPECT_GT(row["memcpy_gbps"].get<double>(), 0);
      EXPECT_GT(row["streaming_copy_gbps"].get<double>(), 0);
    }
  }
  EXPECT_GT(b["copy_gbps"].get<double>(), 0);
}

// --pairing gptj times the adjacent-pairs rotation and says so in the shape and every row.
TEST_F(Cli, BenchRotaryTimesTheChosenPairing) {
  const Outcome r = run("bench rotary --seq-lens 8 --dtypes float32 bfloat16 float16 --min-seconds 0.001 --copy-mib 1 "
                        "--path automatic --pairing gptj --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json b = json::parse(r.out);
  EXPECT_EQ(b["pairing"], "gptj");
  EXPECT_THAT(b["shape"].get<std::string>(), HasSubstr("chunked gptj"));
  ASSERT_EQ(b["results"].size(), 12u);
  for (const json& row : b["results"]) EXPECT_EQ(row["pairing"], "gptj");
  const Outcome table = run("bench rotary --seq-lens 8 --dtypes float32 --min-seconds 0.001 --copy-mib 1 "
                            "--path automatic --pairing gptj");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("chunked gptj"));
}

// --prefetch compare: each row twice, without and with prefetch, measured in the same rounds
// against the same baseline; the second carries the median ratio of the two times.
TEST_F(Cli, BenchRotaryComparesPrefetchOffAndOn) {
  const Outcome r = run("bench rotary --seq-lens 8 --dtypes bfloat16 --min-seconds 0.001 --copy-mib 1 --path automatic "
                        "--prefetch compare --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json b = json::parse(r.out);
  EXPECT_EQ(b["prefetch"], "compare");
  ASSERT_EQ(b["results"].size(), 8u);  // forward/backward x in place/out of place x off/on
  for (std::size_t i = 0; i < 8; i += 2) {
    const json& off = b["results"][i];
    const json& on = b["results"][i + 1];
    EXPECT_EQ(off["prefetch"], "off");
    EXPECT_EQ(on["prefetch"], "on");
    EXPECT_EQ(off["mode"], on["mode"]);
    EXPECT_EQ(off["copy_gbps"], on["copy_gbps"]) << "one baseline for both";
    EXPECT_FALSE(off.contains("prefetch_gain"));
    EXPECT_GT(on["prefetch_gain"].get<double>(), 0);
  }
}

TEST_F(Cli, BenchRotaryForcedMissingPathIsAOneLineError) {
  bool tested = false;
  for (const auto& st : circlerope::isa_status())
    if (!st.available) {
      const std::string name(circlerope::to_string(st.isa));
      expect_rejected(run("bench rotary --seq-lens 8 --path " + name), "code path '" + name + "' is not available: " + st.reason);
      tested = true;
    }
  if (!tested) GTEST_SKIP() << "every path runs on this machine";
}

TEST_F(Cli, CheckNamesThePathsItSkipped) {
  const Outcome r = run("check --seed 5 --rounds 1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const auto& st : circlerope::isa_status()) {
    const std::string name(circlerope::to_string(st.isa));
    if (st.available) EXPECT_THAT(r.out, HasSubstr("  " + name + " ")) << "a table row for " << name;
    else EXPECT_THAT(r.out, HasSubstr("path " + name + " SKIPPED, not checked: " + st.reason));
  }
}

// CIRCLEROPE_ISA, read by the process's one probe (cpu_path.h), rules every command: the
// path it forces is what runs and what each command reports, with the reason.
TEST_F(Cli, EveryCommandRunsAndReportsTheForcedPath) {
  const std::string kForced = "forced by CIRCLEROPE_ISA=portable";
  const Outcome check = run("check --seed 5 --rounds 1", "", "portable");
  ASSERT_EQ(check.code, 0) << check.err;
  EXPECT_THAT(check.out, HasSubstr("paths run: portable (automatic: portable)\n  path chosen: " + kForced + "\n"));
  for (const char* path : {"avx2", "avx512", "avx512bf16"})
    EXPECT_THAT(check.out, HasSubstr("path " + std::string(path) + " SKIPPED, not checked: "));

  const Outcome bench = run("bench rotary --seq-lens 8 --dtypes float32 --min-seconds 0.001 --copy-mib 1 --format json",
                            "", "portable");
  ASSERT_EQ(bench.code, 0) << bench.err;
  const json b = json::parse(bench.out);
  EXPECT_EQ(b["paths"], json::array({"portable"}));
  EXPECT_EQ(b["automatic"], "portable");
  EXPECT_EQ(b["automatic_reason"], kForced);
  EXPECT_THAT(bench.err, HasSubstr("bench rotary: path portable: " + kForced + "\n"));
  const Outcome table = run("bench rotary --seq-lens 8 --dtypes float32 --min-seconds 0.001 --copy-mib 1", "", "portable");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("\npath chosen: " + kForced + "\n"));

  const Outcome positions = run("bench positions --format json --min-seconds 0.01", "", "portable");
  ASSERT_EQ(positions.code, 0) << positions.err;
  const json p = json::parse(positions.out);
  EXPECT_EQ(p["path"], "portable");
  EXPECT_EQ(p["path_reason"], kForced);
  for (const json& row : p["results"]) EXPECT_EQ(row["path"], "portable");

  const Outcome demo = run("demo --out demo.svg", "", "portable");
  ASSERT_EQ(demo.code, 0) << demo.err;
  EXPECT_THAT(demo.out, HasSubstr("fp32, neox, path portable\n  path chosen: " + kForced + "\n"));
}

// A path after the forced one is refused by name, with the variable as the reason.
TEST_F(Cli, APathAfterTheForcedOneIsAOneLineError) {
  const circlerope::IsaStatus avx2 = circlerope::isa_status()[1];
  if (!avx2.available) GTEST_SKIP() << "avx2 NOT AVAILABLE here, so it cannot be ruled out: " << avx2.reason;
  expect_rejected(run("bench rotary --seq-lens 8 --path avx2", "", "portable"),
                  "code path 'avx2' is not available: ruled out by CIRCLEROPE_ISA=portable");
  const Outcome r = run("bench rotary --seq-lens 8 --dtypes float32 --min-seconds 0.001 --copy-mib 1 --format json", "", "avx2");
  ASSERT_EQ(r.code, 0) << r.err;
  const json b = json::parse(r.out);
  EXPECT_EQ(b["paths"], json::array({"portable", "avx2"}));
  EXPECT_EQ(b["automatic_reason"], "forced by CIRCLEROPE_ISA=avx2");
}

// A value that is no path is one line, exit 2, before any output, from every command that
// chooses a path (the positions' commands too); so is a path this CPU lacks, where there is one.
TEST_F(Cli, AnUnusableIsaVariableIsAOneLineErrorEverywhere) {
  const std::string kUnknown = "CIRCLEROPE_ISA='avx1024' is not a code path (expected portable, avx2, avx512, avx512bf16 or automatic)";
  for (const std::string args : {"check --seed 5 --rounds 1", "bench rotary --seq-lens 8", "bench positions",
                                 "demo --out demo.svg", "positions --layout text:3"})
    expect_rejected(run(args, "", "avx1024"), kUnknown);
  expect_rejected(run("check", "", "AVX2"), "CIRCLEROPE_ISA='AVX2' is not a code path");
  for (const circlerope::IsaStatus& st : circlerope::isa_status())
    if (!st.available) {
      const std::string name(circlerope::to_string(st.isa));
      expect_rejected(run("check --seed 5 --rounds 1", "", name), "CIRCLEROPE_ISA=" + name + " cannot be run here: " + st.reason);
    }
}

TEST_F(Cli, BenchRotaryPlotsOneBarPerRow) {
  const Outcome r = run("bench rotary --seq-lens 8 --dtypes bfloat16 --min-seconds 0.001 --copy-mib 1 --path automatic --plot bars.svg");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string svg = slurp(dir_ / "bars.svg");
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_THAT(svg, HasSubstr("bfloat16 S=8"));
  std::size_t bars = 0;
  for (std::size_t at = svg.find("<title>"); at != std::string::npos; at = svg.find("<title>", at + 1)) ++bars;
  EXPECT_EQ(bars, 4u);  // forward/backward x in place/out of place
  expect_rejected(run("bench rotary --plot bars.png"), "ending in .svg");
}

TEST_F(Cli, CheckPassesAndNamesItsSeed) {
  const Outcome r = run("check --seed 11 --rounds 1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("replay with --seed 11"));
  EXPECT_THAT(r.out, HasSubstr("cases match"));
  EXPECT_THAT(r.out, Not(HasSubstr("FAILED")));
}

TEST_F(Cli, PlanPrintsEveryLayer) {
  const Outcome r = run("plan --plan alternate --layers 5 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["pattern"], "CMCMC");
}

TEST_F(Cli, WarnsWhenAlphaOneMakesCellsCollide) {
  // 3x3 centred grid, alpha 1: the centre cell's polar angle (0) equals the
  // angle of the cell right of it, so both land on the same ring point.
  const Outcome r = run("positions --layout text:1,image:3x3 --alpha 1");
  ASSERT_EQ(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("warning"));
}

TEST_F(Cli, HelpExitsZero) {
  const Outcome r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("positions"));
}

// ---------------------------------------------------------------- errors ---

json request_with(const std::function<void(json&)>& edit) {
  json r = golden_cases()[2]["request"];  // mrope: an image and a video
  edit(r);
  return r;
}

struct BadRequest {
  const char* name;
  std::function<void(json&)> edit;
  const char* fragment;
};

TEST_F(Cli, EveryInvalidRequestGetsItsOwnMessage) {
  const std::vector<BadRequest> cases = {
      {"h not divisible", [](json& r) { r["image_grid_thw"][0][1] = 5; }, "h=5 is not divisible by spatial_merge_size=2"},
      {"w not divisible", [](json& r) { r["video_grid_thw"][0][2] = 7; }, "w=7 is not divisible"},
      {"zero side", [](json& r) { r["image_grid_thw"][0][0] = 0; }, "every side must be >= 1"},
      {"negative side", [](json& r) { r["image_grid_thw"][0][2] = -4; }, "every side must be >= 1"},
      {"more blocks than grids", [](json& r) { r["video_grid_thw"] = json::array(); r["second_per_grid_ts"] = nullptr; }, "video_grid_thw has only 0 entries"},
      {"fewer blocks than grids", [](json& r) { r["image_grid_thw"].push_back({1, 2, 2}); }, "image_grid_thw has 2 entries but input_ids hold 1 image block"},
      {"too few tokens", [](json& r) { r["image_grid_thw"][0] = {1, 4, 8}; }, "too few tokens"},
      {"too many tokens", [](json& r) { r["image_grid_thw"][0] = {1, 2, 8}; }, "too small"},
      {"second_per_grid_ts short", [](json& r) { r["second_per_grid_ts"] = json::array(); }, "second_per_grid_ts: has 0 entries but video_grid_thw has 1"},
      {"second_per_grid_ts negative", [](json& r) { r["second_per_grid_ts"] = {-1.0}; }, "second_per_grid_ts[0] must be finite and >= 0"},
      {"mask shape", [](json& r) { r["attention_mask"][0].erase(0); }, "shape [1, 30] does not match input_ids [1, 31]"},
      {"mask rows", [](json& r) { r["attention_mask"].push_back(r["attention_mask"][0]); }, "does not match input_ids"},
      {"mask value", [](json& r) { r["attention_mask"][0][3] = 2; }, "attention_mask[0][3] = 2"},
      {"ragged input_ids", [](json& r) { r["input_ids"].push_back({1, 2}); }, "input_ids[1]: has 2 values"},
      {"stray image token", [](json& r) { r["input_ids"][0][0] = 151655; }, "outside a vision block"},
      {"unknown scheme", [](json& r) { r["scheme"] = "spiral"; }, "unknown scheme 'spiral'"},
      {"unknown key", [](json& r) { r["image_grid"] = json::array(); }, "request.image_grid: unknown key"},
      {"alpha out of range", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"radius", 10}, {"alpha", 1.5}}; }, "alpha must be in [0, 1] (got 1.5)"},
      {"radius zero", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"radius", 0}}; }, "radius must be a finite number > 0"},
      {"radius infinite", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"radius", "__INF__"}}; }, "number overflow parsing '1e999'"},
      {"radius word", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"radius", "automatic"}}; }, "\"auto-k\""},
      {"radius missing", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"alpha", 0.5}}; }, "request.circle.radius: missing"},
      {"auto-k zero", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"radius", "auto-0"}}; }, "scale k"},
      {"dff out of range", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"radius", 10}, {"dff_rate", 2}}; }, "dff_rate must be in [0, 1]"},
      {"positive word", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"radius", 10}, {"move_to_positive", "yes"}}; }, "move_to_positive"},
      {"method", [](json& r) { r["scheme"] = "circle"; r["circle"] = {{"radius", 10}, {"method", "no_circle"}}; }, "only \"circle\""},
      {"merge size", [](json& r) { r["vision"]["spatial_merge_size"] = 0; }, "request.vision.spatial_merge_size must be an integer >= 1 (got 0)"},
      {"tokens per second", [](json& r) { r["vision"]["tokens_per_second"] = -2; }, "tokens_per_second must be finite (in float32) and > 0 (got -2)"},
      {"time mode", [](json& r) { r["vision"]["time"] = "frames"; }, "vision.time"},
      {"grid not a triple", [](json& r) { r["image_grid_thw"][0] = {1, 4}; }, "image_grid_thw[0]: expected [t, h, w]"},
      {"float token", [](json& r) { r["input_ids"][0][1] = 1.5; }, "input_ids[0][1]: expected an integer"},
  };
  for (const BadRequest& c : cases) {
    SCOPED_TRACE(c.name);
    std::string text = request_with(c.edit).dump();
    // JSON has no infinity; an overflowing literal is how one arrives.
    if (const size_t at = text.find("\"__INF__\""); at != std::string::npos) text.replace(at, 9, "1e999");
    expect_rejected(run("positions --request -", text), c.fragment);
  }
}

// Flags and requests share the core's one grammar: std::stod would read "auto-0x1p1" and
// "auto- 2" as scales 2, and refuse "auto-2_0" only by luck.
TEST_F(Cli, RadiusFormsOutsideTheGrammarAreRejectedByFlagsAndRequests) {
  for (const char* radius : {"auto-0x1p1", "auto- 2", "auto-2_0", "0x1p3", "inf"}) {
    SCOPED_TRACE(radius);
    expect_rejected(run(std::string("positions --layout text:2,image:2x2 --radius '") + radius + "'"),
                    "--radius must be a finite number > 0, \"auto\" or \"auto-k\"");
    const json request = {{"scheme", "circle"}, {"circle", {{"radius", radius}}}, {"input_ids", {{1, 2}}}};
    expect_rejected(run("positions --request -", request.dump()), "request.circle.radius must be");
  }
  // and what the grammar allows still works through both
  EXPECT_EQ(run("positions --layout text:2,image:2x2 --radius auto-2.5").code, 0);
  const json ok = {{"scheme", "circle"}, {"circle", {{"radius", "auto-2.5"}}}, {"input_ids", {{1, 2}}}};
  EXPECT_EQ(run("positions --request -", ok.dump()).code, 0);
}

// A section sum that wraps in int (2147483647 + 2147483647 + 66 == 64) is not taken for rotary
// dim 128.
TEST_F(Cli, SectionsWhoseSumWrapsInIntAreRejected) {
  expect_rejected(run("ptd --layout text:5,image:3x3 --sections 2147483647,2147483647,66"),
                  "sections [2147483647, 2147483647, 66] must be >= 0 and sum to rotary_dim/2 = 64");
  expect_rejected(run("plot --layout text:5,image:3x3 --out p.svg --sections 2147483647,2147483647,66"),
                  "[2147483647, 2147483647, 66]");
}

// Requests that could crash the reader, be accepted by a lenient one, or be read without
// limit, through the command.
TEST_F(Cli, RequestReaderRefusesWhatItUsedToMisreadOrCrashOn) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_rejected(run("positions --request -", deep), "deeper than 32 levels");  // was SIGSEGV
  expect_rejected(run("positions --request -", "{\"scheme\": " + deep + "}"), "deeper than 32 levels");
  expect_rejected(run("positions --request -", "{\"input_ids\": [[1, " + deep + "]]}"), "deeper than 32 levels");
  expect_rejected(run("positions --request -", std::string("{\"input_ids\": [[1]]}") + '\0' + "garbage"),
                  "NUL byte at offset 20");
  expect_rejected(run("positions --request -", R"({"input_ids": [[1]], "input_ids": [[2]]})"), "twice in one object");
  expect_rejected(run("positions --request -", R"({"input_ids": [[18446744073709551615]]})"),
                  "18446744073709551615 is beyond the int64 range");
  const Outcome long_value = run("positions --request -", "{\"scheme\": \"" + std::string(1000000, 'x') + "\"}");
  expect_rejected(long_value, "unknown scheme 'xxxxxxxx");
  EXPECT_LT(long_value.err.size(), 300u);
}

TEST_F(Cli, RequestSizeIsLimitedWhileReading) {
  // /dev/zero was read until memory ran out; a NUL is now refused in the first block.
  expect_rejected(run("positions --request /dev/zero"), "request '/dev/zero' has a NUL byte at offset 0");
  // More than 64 MiB is refused once 64 MiB have been read, not after reading everything.
  const Outcome big = run("positions --request -", std::string((std::size_t{64} << 20) + 4096, ' '));
  expect_rejected(big, "request on stdin is more than 67108864 bytes (64 MiB), the limit");
}

TEST_F(Cli, LayoutsLargerThanTheTokenLimitAreRefusedBeforeAllocating) {
  // text:2147483648 passed the old 2^31 limit and then asked for 24 GiB.
  expect_rejected(run("positions --layout text:2147483648"),
                  "layout has more than 16777216 tokens, the limit of one call (segment 0 adds 2147483648 to 0)");
  expect_rejected(run("ptd --layout text:16777216,image:2x2"), "segment 1 adds 4 to 16777216");
}

// `bench rotary --threads 40000` would abort (std::thread and libgomp): refused.
TEST_F(Cli, ThreadCountsAboveTheLimitAreRefused) {
  for (const char* threads : {"40000", "1025", "2147483647"})
    expect_rejected(run(std::string("bench rotary --seq-lens 8 --min-seconds 0.001 --copy-mib 1 --threads ") + threads),
                    std::string("--threads must be an integer in [0, 1024] (got '") + threads + "')");
}

// On an error stdout stays empty, and a failed write to stdout is an error.
TEST_F(Cli, StdoutStaysEmptyOnErrorsFoundAfterTheFirstResults) {
  // The table used to be printed before --decode was found out of range, and the demo's
  // tables before its picture failed to write.
  expect_rejected(run("positions --request - --decode 16777216 --format table", R"({"input_ids": [[1, 2], [3, 4]]})"),
                  "batch 2 x count 16777216 is more than 16777216 tokens");
  expect_rejected(run("demo --out /proc/x.svg"), "--out: cannot write '/proc/x.svg'");
  expect_rejected(run("ptd --layout text:5,image:3x3 --format json --schemes circle,spiral"), "spiral");
}

TEST_F(Cli, AFailedWriteToStdoutIsAnErrorWithStatus1) {
  auto shell = [&](const std::string& command) {  // command sends the CLI's stderr to stderr.txt
    const std::string cmd = "cd '" + dir_.string() + "' && " + command;
    const int status = std::system(cmd.c_str());
    return std::pair<int, std::string>{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir_ / "stderr.txt")};
  };
  const std::string cli = std::string("'") + CIRCLEROPE_CLI_PATH + "'";
  auto [full, full_err] = shell(cli + " positions --layout text:300 >/dev/full 2>stderr.txt");
  EXPECT_EQ(full, 1) << full_err;  // was 0
  EXPECT_THAT(full_err, HasSubstr("circlerope: cannot write to standard output: No space left on device"));
  // A reader that goes away: the rest of the output cannot be written (EPIPE, not a kill).
  auto [piped, piped_err] = shell("(" + cli + " positions --layout text:200000 --format json 2>stderr.txt; echo $? >status.txt) | head -c 1 >/dev/null");
  EXPECT_EQ(piped, 0);
  EXPECT_EQ(slurp(dir_ / "status.txt"), "1\n") << piped_err;
  EXPECT_THAT(piped_err, HasSubstr("cannot write to standard output: Broken pipe"));
  // and a successful run still exits 0 with its output
  const Outcome ok = run("positions --layout text:3");
  EXPECT_EQ(ok.code, 0);
  EXPECT_THAT(ok.out, HasSubstr("rope_delta"));
}

// The alpha = 1 warning counts cells, not padding inside a block (both padded tokens sit at
// 1.0, so two of them would "collide" under any alpha).
TEST_F(Cli, CollisionWarningCountsCellsNotPadding) {
  const std::vector<int64_t> ids = {7, 151652, 151655, 0, 0, 151655, 151655, 151655, 151653};
  const std::vector<int64_t> mask = {1, 1, 1, 0, 0, 1, 1, 1, 1};
  json request = {{"scheme", "circle"}, {"circle", {{"radius", 10}, {"alpha", 0.5}, {"move_to_origin", true}}},
                  {"input_ids", {ids}}, {"attention_mask", {mask}}, {"image_grid_thw", {{1, 4, 4}}}};
  Outcome r = run("positions --request -", request.dump());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // no collision at alpha 0.5
  // A 3x3 ring at alpha 1 has 2 cells on another's point (7 distinct of 9, as
  // `positions --layout text:1,image:3x3 --alpha 1` says), padding inside the block or not.
  std::vector<int64_t> ids9 = {7, 151652}, mask9 = {1, 1};
  for (int c = 0; c < 9; ++c) {
    if (c == 4) ids9.insert(ids9.end(), {0, 0}), mask9.insert(mask9.end(), {0, 0});
    ids9.push_back(151655);
    mask9.push_back(1);
  }
  request["circle"]["alpha"] = 1;
  request["input_ids"] = {ids9};
  request["attention_mask"] = {mask9};
  request["image_grid_thw"] = {{1, 6, 6}};
  r = run("positions --request -", request.dump());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(3x3): 2 cells share a position"));
}

// {"input_ids": []} gives empty outputs, not "--row 0 is out of range", with JSON too.
TEST_F(Cli, AnEmptyBatchGivesEmptyOutputs) {
  Outcome r = run("positions --request -", R"({"input_ids": []})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"position_ids": [[], [], []], "rope_deltas": []})"));
  r = run("positions --request - --format table", R"({"input_ids": []})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("empty batch (0 rows)"));
  r = run("positions --request - --decode 2", R"({"input_ids": []})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["decode_position_ids"], json::parse("[[], [], []]"));
  expect_rejected(run("positions --request - --row 1", R"({"input_ids": []})"), "--row 1 is out of range (batch 0)");
}

struct BadInvocation {
  const char* args;
  const char* fragment;
  std::string stdin_text = "";
};

TEST_F(Cli, InvalidInvocationsAreRejectedOnOneLine) {
  const std::vector<BadInvocation> cases = {
      {"positions --request -", "not valid JSON", "{\"input_ids\": [[1, 2"},
      {"positions --request missing.json", "cannot read request file 'missing.json'"},
      {"positions --layout text:5,image:6", "layout item 1 'image:6'"},
      {"positions --layout text:5 --scheme spiral", "unknown scheme 'spiral'"},
      {"positions --layout text:5 --alpha 3", "alpha must be in [0, 1] (got 3)"},
      {"positions --layout text:5 --radius -2", "radius must be a finite number > 0"},
      {"positions --layout text:5 --format xml", "--format 'xml'"},
      {"positions --request - --scheme mrope", "cannot be combined", golden_cases()[0]["request"].dump()},
      {"positions", "give --request FILE or --layout LAYOUT"},
      {"ptd --layout text:5,image:3x3 --rotary-dim 7", "--rotary-dim must be an even integer in [2, 1024] (got 7)"},
      {"ptd --layout text:5,image:3x3 --sections 1,2", "--sections must be three integers t,h,w (got '1,2')"},
      {"ptd --layout text:5,image:3x3 --schemes circle,spiral", "unknown scheme 'spiral'"},
      {"plot --layout text:5,image:3x3 --out x.png", "ending in .svg"},
      {"plot --layout text:5,image:3x3", "--out"},
      {"plan --plan CMX --layers 4", "letter 2 'X'"},
      {"plan --layers 0", "--layers must be an integer in [1, 100000] (got '0')"},
      {"positions --layout text:5 --alpha nan", "--alpha must be a decimal number (got 'nan')"},
      {"positions --layout text:5 --row 1", "--row 1 is out of range (batch 1)"},
      {"positions --layout text:5 --decode -1", "--decode must be an integer in [0, 16777216] (got '-1')"},
      {"plot --layout text:5,image:3x3 --out x.svg --rotary-dim 3", "--rotary-dim must be an even integer"},
      {"bench rotary --dtypes fp64", "unknown dtype 'fp64'"},
      {"bench rotary --path avx9", "unknown code path 'avx9'"},
      {"bench rotary --seq-lens 0", "--seq-lens must be an integer in [1, 1048576] (got '0')"},
      {"bench rotary --threads -1", "--threads must be an integer in [0, 1024] (got '-1')"},
      {"bench rotary --format xml", "--format 'xml'"},
      {"check --rounds 0", "--rounds must be an integer in [1, 1000] (got '0')"},
      {"bench rotary --copy-mib 0", "--copy-mib must be an integer in [1, 4096] (got '0')"},
      {"bench rotary --prefetch always", "--prefetch 'always' is not one of automatic, on, off, compare"},
      {"bench rotary --pairing rope", "unknown pairing 'rope' (expected neox or gptj)"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"", "subcommand"},
  };
  for (const BadInvocation& c : cases) {
    SCOPED_TRACE(std::string("circlerope ") + c.args);
    expect_rejected(run(c.args, c.stdin_text), c.fragment);
  }
}

// ------------------------------------- every flag: its grammar, empty values ---

// A shell word holding `text` (any bytes but NUL).
std::string shell_word(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Whether `text` is an unsigned decimal in [low, high], read without the library: a regular
// expression, then the digits compared as text.
bool unsigned_in(const std::string& text, std::uint64_t low, std::uint64_t high) {
  if (!std::regex_match(text, std::regex("[0-9]+"))) return false;
  const std::string digits = text.substr(std::min(text.find_first_not_of('0'), text.size() - 1));
  const auto at_most = [&](std::uint64_t bound) {
    const std::string b = std::to_string(bound);
    return digits.size() < b.size() || (digits.size() == b.size() && digits <= b);
  };
  return at_most(high) && !(low > 0 && at_most(low - 1));
}

struct IntegerFlag {
  const char* args;  // the flag's value goes where {} is
  const char* flag;
  std::uint64_t low, high;
  const char* accepted;  // a fragment of the error that follows when the value is accepted ("" for success)
};

// A command per integer flag of the CLI, set up so that an accepted value leads to a known
// later error (or a fast success) instead of a long run.
const std::vector<IntegerFlag>& integer_flags() {
  static const std::vector<IntegerFlag> flags = {
      {"plan --plan CMX --layers={}", "--layers", 1, 100000, "AGE plan 'CMX'"},
      {"positions --layout text:1 --row 5 --decode={}", "--decode", 0, 16777216, "--row 5 is out of range"},
      {"positions --layout text:1 --row={}", "--row", 0, 16777216, "is out of range (batch 1)"},
      {"plot --layout text:1 --out p.svg --rotary-dim 3 --row={}", "--row", 0, 16777216, "--rotary-dim"},
      {"check --rounds 0 --seed={}", "--seed", 0, UINT64_MAX, "--rounds must be"},
      {"bench rotary --seq-lens 0 --threads={}", "--threads", 0, 1024, "--seq-lens must be"},
      {"bench rotary --dtypes fp64 --seq-lens={}", "--seq-lens", 1, 1 << 20, "unknown dtype 'fp64'"},
      {"bench rotary --plot p.png --copy-mib={}", "--copy-mib", 1, 4096, "ending in .svg"},
  };
  return flags;
}

std::string with_value(const std::string& args, const std::string& value) {
  std::string out = args;
  return out.replace(out.find("{}"), 2, shell_word(value));
}

std::string unsigned_error(const IntegerFlag& f, const std::string& value) {
  return std::string(f.flag) + " must be an integer in [" + std::to_string(f.low) + ", " + std::to_string(f.high) +
         "] (got " + circlerope::detail::quoted(value) + ")";
}

// CLI11 read the integer flags with base 0 and its own whitespace rules: `plan --layers 010`
// gave 8 layers, "0x24" and " 36" were 36, `--decode 010` decoded 8 tokens, and
// `check --seed -1` ran with seed 2^64-1. Every integer flag now reads the one grammar.
TEST_F(Cli, IntegerFlagsAreDecimalUnsignedAndInRange) {
  Outcome r = run("plan --layers 010");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("plan alternate, 10 layers"));
  r = run("positions --layout text:2 --decode 010");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("next 10 decoded tokens"));
  for (const IntegerFlag& f : integer_flags())
    for (const std::string value : {"0x24", " 36", "36 ", "+36", "-1", "-0", "1e3", "3.0", "1_0", "\xd9\xa3"}) {
      SCOPED_TRACE(with_value(f.args, value));
      expect_rejected(run(with_value(f.args, value)), unsigned_error(f, value));
    }
  for (const char* value : {"0x1p-3", " 1", "inf", "1,5"})
    for (const char* command : {"bench positions", "bench rotary"})
      expect_rejected(run(std::string(command) + " --min-seconds " + shell_word(value)),
                      std::string("--min-seconds must be a decimal number (got '") + value + "')");
  expect_rejected(run("bench rotary --min-seconds 600"), "--min-seconds must be in (0, 600) (got '600')");
}

// Random text through every integer flag: accepted exactly when a regular expression and a
// digit-string comparison accept it, and otherwise refused naming the flag and the value.
TEST_F(Cli, RandomTextThroughEveryIntegerFlagFollowsTheGrammar) {
  std::mt19937_64 random(19);
  const std::string alphabet = "0123456789012345678901234567890123456789+- x.e_";
  int accepted = 0, refused = 0;
  for (const IntegerFlag& f : integer_flags())
    for (int i = 0; i < 24; ++i) {
      std::string value;
      const auto length = 1 + random() % (i % 6 == 5 ? 22 : 5);
      for (std::uint64_t k = 0; k < length; ++k) value += alphabet[random() % alphabet.size()];
      if (i % 6 == 5) value.erase(std::remove_if(value.begin(), value.end(), [](char c) { return !std::isdigit(c); }), value.end());
      if (value.empty()) value.push_back('0');
      SCOPED_TRACE(with_value(f.args, value));
      const Outcome r = run(with_value(f.args, value));
      if (unsigned_in(value, f.low, f.high)) {
        ++accepted;
        if (r.code == 0) continue;
        expect_rejected(r, f.accepted);
        EXPECT_THAT(r.err, Not(HasSubstr(f.flag + std::string(" must be"))));
      } else {
        ++refused;
        expect_rejected(r, unsigned_error(f, value));
      }
    }
  EXPECT_GT(accepted, 20);
  EXPECT_GT(refused, 20);
}

// `--scheme ""` and `--format ""` took the default, `--plot ""` skipped the picture, and a
// trailing comma in --schemes was dropped.
TEST_F(Cli, EmptyValuesAndEmptyListItemsAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"positions --layout text:2 --scheme ''", "--scheme is empty"},
      {"positions --layout text:2 --format ''", "--format is empty"},
      {"positions --layout text:2 --format=", "--format"},
      {"positions --layout text:2 --compat ''", "--compat is empty"},
      {"positions --request ''", "--request is empty"},
      {"positions --layout ''", "--layout is empty"},
      {"positions --layout text:2 --radius ''", "--radius is empty"},
      {"ptd --layout text:2,image:2x2 --format ''", "--format is empty"},
      {"ptd --layout text:2,image:2x2 --schemes ''", "--schemes is empty"},
      {"ptd --layout text:2,image:2x2 --schemes circle,", "--schemes 'circle,': scheme 2 is empty"},
      {"ptd --layout text:2,image:2x2 --schemes ,circle", "--schemes ',circle': scheme 1 is empty"},
      {"ptd --layout text:2,image:2x2 --schemes circle,,mrope", "--schemes 'circle,,mrope': scheme 2 is empty"},
      {"ptd --layout text:2,image:2x2 --schemes ,", "scheme 1 is empty"},
      {"plot --layout text:2 --out p.svg --schemes circle,", "--schemes 'circle,': scheme 2 is empty"},
      {"plot --layout text:2 --out p.svg --scheme ''", "--scheme is empty"},
      {"plot --layout text:2 --out ''", "--out is empty"},
      {"plan --plan ''", "--plan is empty"},
      {"plan --format ''", "--format is empty"},
      {"plan --layers ''", "--layers is empty"},
      {"bench positions --format ''", "--format is empty"},
      {"bench rotary --plot ''", "--plot is empty"},
      {"bench rotary --dtypes ''", "--dtypes is empty"},
      {"bench rotary --path ''", "--path is empty"},
      {"bench rotary --pairing ''", "--pairing is empty"},
      {"demo --out ''", "--out is empty"},
      {"check --seed ''", "--seed is empty"},
  };
  for (const auto& [args, fragment] : cases) {
    SCOPED_TRACE(args);
    expect_rejected(run(args), fragment);
  }
}

// The command quoted whole what CLI11 or nlohmann quoted (up to the 1000-character cut) where
// docs/reference/limits.md promises 40 characters, let ESC and BEL of a JSON key reach the terminal, and
// printed a benchmark's progress lines before `--plot` found it could not write its file.
TEST_F(Cli, EchoedTextIsBoundedEscapedAndOnOneLine) {
  const std::string nines(1000, '9'), xs(1000, 'x');
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"plan --layers " + nines, nines},
      {"plan --plan " + xs, xs},
      {"positions --layout text:2 --scheme " + xs, xs},
      {"positions --layout text:2 --format " + xs, xs},
      {"positions --layout text:2," + xs, xs},
      {"positions --request " + xs + ".json", xs},
      {"positions " + xs, xs},
      {xs, xs},
      {"plot --layout text:2 --out " + xs + ".svg", xs},
      {"plot --layout text:2 --out " + xs, xs},
      {"check --seed " + nines, nines},
      {"ptd --layout text:2,image:2x2 --schemes circle," + xs, xs},
  };
  for (const auto& [args, value] : flags) {
    SCOPED_TRACE(args.substr(0, 60));
    const Outcome r = run(args);
    expect_rejected(r, "");
    EXPECT_TRUE(clean_message(r.err, value));
  }
  const std::vector<std::string> control_flags = {
      "positions --layout text:2 --scheme ", "positions --layout ", "plan --plan ", "positions --request ",
      "plot --layout text:2 --out ", "positions --layout text:2 --compat ", "bench rotary --path "};
  const std::string control = "a\x1b[31m\x07\x1b]0;title\x07" "b";
  for (const std::string& args : control_flags) {
    SCOPED_TRACE(args);
    const Outcome r = run(args + shell_word(control));
    expect_rejected(r, "\\x1b[31m\\x07\\x1b]0;title\\x07");
    EXPECT_TRUE(clean_message(r.err, ""));
  }
  // JSON: keys at every level, string values, a syntax error, a long literal
  const std::string esc = "\u001b[31m\u0007";
  const std::vector<std::string> requests = {
      R"({"input_ids": [[1]], ")" + esc + R"(": 1})",
      R"({"input_ids": [[1]], "circle": {"radius": 10, ")" + esc + R"(": 1}})",
      R"({"input_ids": [[1]], "vision": {")" + esc + R"(": 1}})",
      R"({"input_ids": [[1]], "scheme": ")" + esc + R"("})",
      R"({"input_ids": [[1]], "compat": ")" + esc + R"("})",
      R"({"input_ids": [[1]], ")" + xs + R"(": 1})",
      R"({"input_ids": [[1]], "circle": {")" + xs + R"(": 1}})",
      R"({"input_ids": [[1]], "scheme": ")" + xs + R"("})",
      R"({"input_ids": [[")" + xs + R"("]]})",
      R"({"input_ids": [[1]], "a": tru)" + xs + "}",
      R"({"input_ids": [[1]], "a": 1e9)" + nines + "}",
      "{\"input_ids\": [[1]], \"a\": \"\x1b\x07\"}",
  };
  for (const std::string& request : requests) {
    SCOPED_TRACE(request.substr(0, 60));
    const Outcome r = run("positions --request -", request);
    expect_rejected(r, "");
    EXPECT_TRUE(clean_message(r.err, xs));
    EXPECT_TRUE(clean_message(r.err, nines));
  }
  // The picture's file is tried before the benchmark starts: one line, no progress.
  const Outcome plot = run("bench rotary --seq-lens 8 --min-seconds 0.001 --copy-mib 1 --plot /nonexistent/x.svg");
  expect_rejected(plot, "--plot: cannot write '/nonexistent/x.svg'");
  EXPECT_THAT(plot.err, Not(HasSubstr("bench rotary:")));
  // and trying it leaves no file behind, nor changes one that exists
  expect_rejected(run("bench rotary --format xml --plot made.svg"), "--format 'xml'");
  expect_rejected(run("bench rotary --dtypes fp64 --plot made.svg"), "unknown dtype");
  EXPECT_FALSE(fs::exists(dir_ / "made.svg"));
  file("kept.svg", "<svg/>");
  expect_rejected(run("bench rotary --dtypes fp64 --plot kept.svg"), "unknown dtype");
  EXPECT_EQ(slurp(dir_ / "kept.svg"), "<svg/>");
}

// Random bytes through every flag that takes text, and as JSON keys and strings: refused (or
// accepted) on one line of printable ASCII holding at most 40 bytes of the value in a row.
TEST_F(Cli, RandomBytesThroughEveryTextFlagGiveOneCleanLine) {
  const std::vector<std::string> commands = {
      "positions --layout {}", "positions --layout text:2 --scheme {}", "positions --layout text:2 --format {}",
      "positions --layout text:2 --compat {}", "positions --layout text:2 --radius {}",
      "positions --layout text:2 --alpha {}", "positions --layout text:2 --dff-rate {}",
      "positions --layout text:2 --move-to-positive {}", "positions --request {}", "plan --plan {} --layers 4",
      "plan --layers {}", "ptd --layout text:2,image:2x2 --schemes {}", "ptd --layout text:2 --sections {}",
      "ptd --layout text:2 --freq-layout {}", "ptd --layout text:2 --theta {}", "ptd --layout text:2 --rotary-dim {}",
      "plot --layout text:2 --out {}", "bench rotary --dtypes {}", "bench rotary --path {}", "bench rotary --pairing {}", "check --seed {}",
      "{}"};
  std::mt19937_64 random(1919);
  for (const std::string& command : commands)
    for (int i = 0; i < 6; ++i) {
      std::string value;
      const auto length = 1 + random() % (i < 3 ? 12 : 300);
      for (std::uint64_t k = 0; k < length; ++k) value += static_cast<char>(1 + random() % 255);
      if (i == 0) value = "-" + value;  // what CLI11 may take for an option
      SCOPED_TRACE(command + " #" + std::to_string(i));
      const Outcome r = run(with_value(command, value));
      EXPECT_NE(r.code, -1);
      if (r.code == 0) continue;
      expect_rejected(r, "");
      EXPECT_TRUE(clean_message(r.err, value));
    }
  for (int i = 0; i < 24; ++i) {
    std::string text;
    const auto length = 1 + random() % 300;
    for (std::uint64_t k = 0; k < length; ++k) text += static_cast<char>(random() % 128);  // valid UTF-8 for JSON
    json request = {{"input_ids", {{1, 2}}}};
    if (i % 3 == 0) request[text] = 1;
    if (i % 3 == 1) request["circle"] = {{"radius", 10}, {text, 1}};
    if (i % 3 == 2) request["scheme"] = text;
    SCOPED_TRACE(i);
    const Outcome r = run("positions --request -", request.dump());
    expect_rejected(r, "");
    EXPECT_TRUE(clean_message(r.err, text));
  }
}

}  // namespace
