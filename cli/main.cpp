// The `circlerope` command. Exit 0 on success; exit 2 with one line on stderr
// (and nothing on stdout) for any invalid input.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "circlerope/age.h"
#include "circlerope/circle.h"
#include "circlerope/detail/positions_path.h"
#include "circlerope/detail/quote.h"
#include "circlerope/options.h"
#include "circlerope/ptd.h"
#include "option_flags.h"
#include "report.h"
#include "request.h"
#include "rotary_commands.h"
#include "svg_plot.h"
#include "timing.h"
#include "workload.h"

namespace {

using namespace circlerope;
using namespace circlerope::cli;
using nlohmann::json;

// ------------------------------------------------------------ options ---

// The flags of the options of a table (options.h), named and described by cli/option_flags.h.
// Flags are untyped text: the core reads each with the grammar every front end shares and names
// the flag in its messages.
template <class Config>
class OptionFlags {
 public:
  // A flag for each option of `options`, or for those of `keys` when given.
  template <std::size_t N>
  void add(CLI::App* app, const std::array<Option<Config>, N>& options,
           std::initializer_list<std::string_view> keys = {}) {
    flags_.reserve(N);  // CLI11 binds to the members: no reallocation
    for (const Option<Config>& option : options) {
      if (keys.size() > 0 && std::find(keys.begin(), keys.end(), option.key) == keys.end()) continue;
      Flag& f = flags_.emplace_back(Flag{&option, option_flag(option), option_flag_negated(option), {}, false, nullptr});
      f.parsed = option.type == OptionType::boolean ? app->add_flag(f.flag, f.switched, option_help(option))
                                                    : app->add_option(f.flag, f.value, option_help(option));
    }
  }
  bool any() const {
    return std::any_of(flags_.begin(), flags_.end(), [](const Flag& f) { return f.parsed->count() > 0; });
  }
  // `config` with the flags given read into it.
  Config apply(Config config) const {
    for (const Flag& f : flags_)
      if (f.parsed->count() > 0)
        f.option->set(config,
                      f.option->type == OptionType::boolean ? OptionValue::boolean(f.switched != f.negated)
                                                            : OptionValue::text(f.value),
                      f.flag);
    return config;
  }

 private:
  struct Flag {
    const Option<Config>* option;
    std::string flag;  // "--dff-rate", "--no-move-to-origin"
    bool negated;      // a boolean that is on by default: the flag turns it off
    std::string value;
    bool switched = false;  // a boolean's flag was given
    CLI::Option* parsed = nullptr;
  };
  std::vector<Flag> flags_;
};

// The Circle-RoPE flags, one per option of kCircleOptions.
struct CircleFlags {
  OptionFlags<CircleConfig> flags;

  void add(CLI::App* app) { flags.add(app, kCircleOptions); }
  bool any() const { return flags.any(); }
  // The paper's setting, overridden by the flags given.
  CircleConfig config() const {
    const CircleConfig c = flags.apply(CircleConfig{});
    validate(c);
    return c;
  }
};

// The rotary flags, one per option of kRotaryOptions.
struct RotaryFlags {
  OptionFlags<RotaryConfig> flags;

  void add(CLI::App* app) { flags.add(app, kRotaryOptions); }
  // Qwen2.5-VL's rotary, overridden by the flags given.
  RotaryConfig config() const {
    const RotaryConfig r = flags.apply(RotaryConfig{});
    validate(r);
    return r;
  }
};

// Where the tokens come from: a JSON request or a token-free layout.
struct Source {
  std::string request_path;
  std::string layout;
  // The vision options a layout takes as flags: compat (a request holds its own, and a layout
  // has no token ids).
  OptionFlags<VisionConfig> vision;

  void add(CLI::App* app) {
    auto* r = app->add_option("--request", request_path, "request JSON file (format: docs/spec.md, 'Requests'), - for stdin");
    auto* l = app->add_option("--layout", layout, "token-free layout, e.g. text:5,image:6x6,video:4x6x6@0.5,text:4");
    r->excludes(l);
    vision.add(app, kVisionOptions, {"compat"});
  }
  bool from_request() const { return !request_path.empty(); }

  Request request() const {
    if (vision.any()) throw Error("--compat cannot be combined with --request (put \"compat\" in the request)");
    if (request_path == "-") return parse_request_text(read_request(std::cin, "on stdin"));
    std::ifstream in(request_path, std::ios::binary);
    if (!in) throw Error("cannot read request file " + detail::quoted(request_path));
    return parse_request_text(read_request(in, detail::quoted(request_path)));
  }

  // The model constants of a layout: Qwen2.5-VL's, in the --compat behaviour.
  VisionConfig layout_vision() const { return vision.apply(VisionConfig{}); }

  // Positions of the source under `geometry`; for a request, its own arrays.
  Positions positions(const Geometry& geometry, const Request* request) const {
    if (request) return rope_index(request->input(), request->vision, geometry);
    if (layout.empty()) throw Error("give --request FILE or --layout LAYOUT");
    return layout_positions(parse_layout(layout), layout_vision(), geometry);
  }
};

// "all" or names separated by commas; an empty name (",circle", "circle,", "a,,b") is an
// error, not skipped.
std::vector<Scheme> parse_scheme_list(const std::string& text) {
  if (text == "all") return {kAllSchemes.begin(), kAllSchemes.end()};
  std::vector<Scheme> out;
  for (std::size_t begin = 0;;) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    if (comma == begin)
      throw Error("--schemes " + detail::quoted(text) + ": scheme " + std::to_string(out.size() + 1) +
                  " is empty (use all or a list like circle,mrope)");
    out.push_back(scheme_option(OptionValue::text(std::string_view(text).substr(begin, comma - begin)), "--schemes"));
    if (comma == text.size()) return out;
    begin = comma + 1;
  }
}

void check_format(const std::string& format) {
  if (format != "table" && format != "json")
    throw Error("--format " + detail::quoted(format) + ": expected table or json");
}

// docs/spec.md §3: with alpha = 1 distinct cells can land on the same point. We keep
// the reference's behaviour but say so.
void warn_collisions(const Positions& p, const Geometry& g) {
  if (g.scheme != Scheme::circle) return;
  for (std::size_t k = 0; k < p.blocks.size(); ++k) {
    const BlockInfo& b = p.blocks[k];
    // The first frame's cells (later frames are translations), found through the token map:
    // padding inside a block is not a cell (it sits at 1.0 and made collisions up).
    const int64_t cells = b.hm * b.wm;
    std::vector<std::array<float, 3>> pts;
    for (int64_t s = b.begin; s < p.seq_len && static_cast<int64_t>(pts.size()) < cells; ++s)
      if (p.token_block[static_cast<std::size_t>(b.row * p.seq_len + s)] == static_cast<int32_t>(k))
        pts.push_back({p.at(0, b.row, s), p.at(1, b.row, s), p.at(2, b.row, s)});
    std::sort(pts.begin(), pts.end());
    const auto same = [](const auto& x, const auto& y) {
      return std::fabs(x[0] - y[0]) < 1e-4f && std::fabs(x[1] - y[1]) < 1e-4f && std::fabs(x[2] - y[2]) < 1e-4f;
    };
    const auto distinct = std::unique(pts.begin(), pts.end(), same) - pts.begin();
    if (distinct < static_cast<long>(cells))
      std::cerr << "circlerope: warning: " << (b.is_video ? "video " : "image ") << b.grid_index << " of row "
                << b.row << " (" << b.hm << "x" << b.wm << "): " << cells - distinct
                << " cells share a position with another cell (alpha=" << g.circle.alpha
                << "; the reference does the same)\n";
  }
}

// The request (when there is one) and the circle options that ptd/plot use for
// the circle scheme: the request's own, or the flags' for a layout.
struct Resolved {
  std::optional<Request> request;
  CircleConfig circle;
  const Request* get() const { return request ? &*request : nullptr; }
};

Resolved resolve(const Source& source, const CircleFlags& flags) {
  if (!source.from_request()) return {std::nullopt, flags.config()};
  if (flags.any()) throw Error("circle options cannot be combined with --request (its \"circle\" object holds them)");
  Request request = source.request();
  const CircleConfig circle = request.geometry.circle;
  return {std::move(request), circle};
}

void print_positions(const Positions& p, const Geometry& g, const std::string& format, int64_t decode,
                     int64_t row) {
  check_format(format);
  // --row 0 is the default and also names no row of an empty batch, which gives empty
  // outputs as it does in Python.
  if (row < 0 || (row >= p.batch && !(row == 0 && p.batch == 0)))
    throw Error("--row " + std::to_string(row) + " is out of range (batch " + std::to_string(p.batch) + ")");
  if (decode < 0) throw Error("--decode " + std::to_string(decode) + " must be >= 0");
  // Everything that can fail, before the first byte of output.
  const std::vector<float> next = decode > 0 ? next_positions(p, decode) : std::vector<float>{};
  warn_collisions(p, g);
  if (format == "json") {
    write_positions_json(std::cout, p, decode);
    return;
  }
  if (p.batch == 0) {
    std::cout << "# " << describe(g) << ", empty batch (0 rows)\n";
    return;
  }
  std::cout << positions_table(p, g, row);
  if (decode > 0) {
    std::cout << "# next " << decode << " decoded tokens (all three axes):";
    for (int64_t i = 0; i < decode; ++i) std::cout << " " << fixed(next[static_cast<size_t>(row * decode + i)], 4);
    std::cout << "\n";
  }
}

// ------------------------------------------------------------ commands ---

// Positions and metrics of the source under every scheme: computed once and
// shared by the table, the JSON and the picture.
std::vector<SchemeMetrics> all_metrics(const std::vector<Scheme>& schemes, const CircleConfig& circle,
                                       const Source& source, const Request* request,
                                       const RotaryConfig& rotary) {
  std::vector<SchemeMetrics> out;
  for (Scheme s : schemes) {
    const Geometry g{s, circle};
    Positions p = source.positions(g, request);
    CouplingMetrics m = coupling_metrics(p, rotary);
    out.push_back({g, std::move(p), std::move(m)});
  }
  return out;
}

void write_plot(const std::string& path, const std::vector<SchemeMetrics>& runs, int64_t row) {
  check_svg_path("--out", path);
  std::vector<PlotPanel> panels;
  for (const SchemeMetrics& r : runs) {
    if (row < 0 || row >= r.positions.batch)
      throw Error("--row " + std::to_string(row) + " is out of range (batch " + std::to_string(r.positions.batch) + ")");
    panels.push_back({describe(r.geometry),
                      "PTD " + fixed(r.metrics.ptd, 3) + "  ·  RoPE kernel dev " + fixed(r.metrics.rope_kernel_deviation, 4),
                      &r.positions, row});
  }
  write_svg("--out", path, render_svg(panels));
}

// Median time of rope_index_into on `request` (outputs preallocated).
double time_positions_ns(const Request& request, const Geometry& g, double min_seconds = 0.2) {
  std::vector<float> ids(static_cast<size_t>(3 * request.batch * request.seq_len));
  std::vector<float> deltas(static_cast<size_t>(request.batch));
  return median_ns([&] { rope_index_into(request.input(), request.vision, g, ids, deltas); }, min_seconds);
}

int run_demo(const std::string& out_path) {
  const CircleConfig circle;  // the paper's setting
  const Request request = demo_request({Scheme::circle, circle});
  const Geometry g{Scheme::circle, circle};
  const Source source;  // positions come from `request`
  const RotaryConfig rotary;
  const std::vector<SchemeMetrics> runs =
      all_metrics({kAllSchemes.begin(), kAllSchemes.end()}, circle, source, &request, rotary);
  const Positions& p =
      std::find_if(runs.begin(), runs.end(), [](const SchemeMetrics& r) { return r.geometry.scheme == Scheme::circle; })
          ->positions;
  std::cout << "circlerope demo — " << kDemoDescription << "\n"
            << request.seq_len << " tokens; geometry " << describe(g) << "\n\n"
            << "Vision blocks (positions are anchor + ring; every text token is equidistant from a ring):\n"
            << blocks_table(p, g) << "\n";

  std::cout << "Text around the blocks (first/last text token, next decode position):\n";
  const int64_t last = p.seq_len - 1;
  std::cout << "  token 0: " << fixed(p.at(0, 0, 0), 3) << ", token " << last << ": ("
            << fixed(p.at(0, 0, last), 3) << ", " << fixed(p.at(1, 0, last), 3) << ", " << fixed(p.at(2, 0, last), 3)
            << "), rope_delta " << fixed(p.rope_deltas[0], 4) << ", next token (cache position " << p.seq_len
            << ") at " << fixed(decode_positions(p.rope_deltas, p.seq_len, 1)[0], 4) << "\n\n";

  std::cout << "Coupling of text to each block (PTD: index-space distance spread; RoPE kernel dev: "
               "what attention logits see; Qwen2.5-VL rotary, theta 1e6, D 128, sections 16/24/24):\n"
            << metrics_table(runs)
            << "(circle: each video frame is its own ring, moved along the text axis by its frame time, so\n"
               " a text token is equidistant from each frame but not from all frames at once: the video's PTD\n"
               " is not 0 by design; the images' is.)\n\n";

  write_plot(out_path, runs, 0);
  std::cout << "Picture of the four geometries: " << out_path << "\n\n";

  cli::demo_rotation(request.input(), request.vision, circle, std::cout);

  const double demo_ns = time_positions_ns(request, g);
  const double batch_ns = time_positions_ns(benchmark_batch(g), g);
  std::cout << "Position computation time (median, this machine):\n"
            << "  this prompt (" << request.seq_len << " tokens, circle): " << fixed(demo_ns / 1000, 2) << " us\n"
            << "  benchmark batch (" << kBenchmarkShape << ", circle): " << fixed(batch_ns / 1000, 2) << " us\n";
  return 0;
}

// Each scheme on the path this process runs (cpu_path.h) and on the portable path, the
// scalar reference loops (positions_simd.h: libm ring, one-token loops), alternately in one
// run: this shared machine's speed drifts by tens of percent within a minute, so the ratio is
// the median of per-round ratios.
int run_bench_positions(const std::string& format, double min_seconds) {
  const CpuPath chosen = detail::positions_cpu_path();  // before any output: CIRCLEROPE_ISA's error
  const Isa fast = chosen.isa;
  json rows = json::array();
  for (Scheme s : {Scheme::circle, Scheme::mrope}) {
    const Geometry g{s, CircleConfig{}};
    const Request batch = benchmark_batch(g);
    constexpr int kRounds = 5;
    std::vector<double> fast_ns, portable_ns, ratios;
    for (int round = 0; round < kRounds; ++round) {
      detail::set_positions_path(Isa::portable);
      portable_ns.push_back(time_positions_ns(batch, g, min_seconds / (2 * kRounds)));
      detail::set_positions_path(fast);
      fast_ns.push_back(time_positions_ns(batch, g, min_seconds / (2 * kRounds)));
      ratios.push_back(portable_ns.back() / fast_ns.back());
    }
    detail::set_positions_path(Isa::automatic);
    const double tokens = static_cast<double>(batch.batch * batch.seq_len);
    for (const bool portable : {false, true}) {
      const double ns = median(portable ? portable_ns : fast_ns);
      json row = {{"scheme", to_string(s)},
                  {"path", to_string(portable ? Isa::portable : fast)},
                  {"batch", batch.batch},
                  {"seq_len", batch.seq_len},
                  {"ns_per_batch", ns},
                  {"ns_per_token", ns / tokens}};
      if (!portable) row["speedup_over_portable"] = median(ratios);
      rows.push_back(row);
    }
  }
  if (format == "json") {
    std::cout << json{{"benchmark", "positions"}, {"shape", kBenchmarkShape}, {"path", to_string(fast)},
                      {"path_reason", chosen.reason}, {"results", rows}}.dump(2) << "\n";
  } else {
    std::cout << "positions for " << kBenchmarkShape << " (median; the two paths measured alternately)\n"
              << "path " << to_string(fast) << ": " << chosen.reason << "\n";
    for (const json& r : rows) {
      std::cout << "  " << std::left << std::setw(7) << r["scheme"].get<std::string>() << std::setw(10)
                << r["path"].get<std::string>() << std::right << std::setw(8) << fixed(r["ns_per_batch"].get<double>(), 0)
                << " ns per batch (" << fixed(r["ns_per_batch"].get<double>() / 1000, 2) << " us, "
                << fixed(r["ns_per_token"].get<double>(), 2) << " ns per token)";
      if (r.contains("speedup_over_portable"))
        std::cout << ", " << fixed(r["speedup_over_portable"].get<double>(), 2) << "x the portable path";
      std::cout << "\n";
    }
  }
  return 0;
}

// Every flag is bound to text and read by the one grammar (options.h), never by CLI11, which
// reads integers with base 0 ("010" was 8, "0x24" 36, " 36" 36, and a seed of -1 was 2^64-1):
// counts, indices and seeds with parse_unsigned, times here.
double seconds_flag(const std::string& text, const char* flag) {
  const double seconds = parse_number(text, flag);
  if (!(seconds > 0 && seconds < 600)) throw Error(std::string(flag) + " must be in (0, 600) (got " + detail::quoted(text) + ")");
  return seconds;
}

// A flag given an empty value ("--scheme ''", "--plot=") is an error: it used to select the
// default silently. Every option of every subcommand that ran is looked at.
void refuse_empty_values(const CLI::App& app) {
  for (const CLI::Option* option : app.get_options())
    for (const std::string& value : option->results())
      if (value.empty() && option->get_type_size_max() > 0)
        throw Error(option->get_name() + " is empty (give a value)");
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->parsed()) refuse_empty_values(*sub);
}

// CLI11's message for arguments it did not expect lists them whole: this one shows the first
// by the quoting rule.
std::string extras_message(const CLI::App& app) {
  std::vector<std::string> extras = app.remaining(true);
  if (extras.empty()) return "unexpected arguments";
  std::string message = "unexpected argument " + detail::quoted(extras.front());
  if (extras.size() > 1) message += " (and " + std::to_string(extras.size() - 1) + " more)";
  return message;
}

// ----------------------------------------------------------- subcommands ---
// One struct per subcommand: add() declares it and its flags under `parent`, run() does its work
// with them once the command line is parsed and returns the exit status.

struct Command {
  CLI::App* app = nullptr;
  virtual ~Command() = default;
  virtual int run() = 0;
};

// A subcommand that reads a source of tokens and takes the Circle-RoPE flags.
struct SourceCommand : Command {
  Source source;
  CircleFlags circle;

  void add_source(CLI::App& parent, const char* name, const char* description) {
    app = parent.add_subcommand(name, description);
    source.add(app);
    circle.add(app);
  }
};

struct PositionsCommand : SourceCommand {
  std::string scheme, format, decode = "0", row = "0";
  CLI::Option* scheme_given = nullptr;
  CLI::Option* format_given = nullptr;

  void add(CLI::App& parent) {
    add_source(parent, "positions", "3-axis positions and rope_deltas of a request or layout");
    scheme_given = app->add_option("--scheme", scheme, "vanilla | unordered | mrope | circle (layouts; default circle)");
    format_given =
        app->add_option("--format", format, "table | json (default: json for --request, table for --layout)");
    app->add_option("--decode", decode, "also give the positions of the next N decoded tokens");
    app->add_option("--row", row, "row of the batch for the table [0]");
  }

  int run() override {
    const auto decode_count = static_cast<int64_t>(parse_unsigned(decode, "--decode", 0, kMaxTokens));
    const auto row_index = static_cast<int64_t>(parse_unsigned(row, "--row", 0, kMaxTokens));
    const bool formatted = format_given->count() > 0;
    if (source.from_request()) {
      if (scheme_given->count() > 0 || circle.any())
        throw Error("--scheme and circle options cannot be combined with --request (the request holds them)");
      const Request r = source.request();
      print_positions(rope_index(r.input(), r.vision, r.geometry), r.geometry, formatted ? format : "json",
                      decode_count, row_index);
    } else {
      const Geometry g{scheme_given->count() > 0 ? scheme_option(OptionValue::text(scheme), "--scheme")
                                                 : Scheme::circle,
                       circle.config()};
      print_positions(source.positions(g, nullptr), g, formatted ? format : "table", decode_count, row_index);
    }
    return 0;
  }
};

struct PtdCommand : SourceCommand {
  RotaryFlags rotary;
  std::string schemes = "all", format = "table";

  void add(CLI::App& parent) {
    add_source(parent, "ptd", "PTD and RoPE kernel deviation for every scheme, side by side");
    rotary.add(app);
    app->add_option("--schemes", schemes, "all or a comma list [all]");
    app->add_option("--format", format, "table | json [table]");
  }

  int run() override {
    check_format(format);
    const std::vector<Scheme> list = parse_scheme_list(schemes);
    const RotaryConfig rotary_config = rotary.config();
    const Resolved in = resolve(source, circle);
    const auto metrics = all_metrics(list, in.circle, source, in.get(), rotary_config);
    if (format == "json") std::cout << metrics_json(metrics).dump(2) << "\n";
    else std::cout << metrics_table(metrics);
    return 0;
  }
};

struct PlotCommand : SourceCommand {
  RotaryFlags rotary;  // for the metrics in each panel's subtitle
  std::string scheme, schemes, out, row = "0";
  CLI::Option* scheme_given = nullptr;
  CLI::Option* schemes_given = nullptr;

  void add(CLI::App& parent) {
    add_source(parent, "plot", "an SVG picture of the 3-D positions (text axis, rings, cones)");
    rotary.add(app);
    scheme_given = app->add_option("--scheme", scheme, "one scheme [circle]");
    schemes_given =
        app->add_option("--schemes", schemes, "all or a comma list: one panel each")->excludes(scheme_given);
    app->add_option("--out", out, "output file (.svg)")->required();
    app->add_option("--row", row, "row of the batch [0]");
  }

  int run() override {
    const std::vector<Scheme> list =
        schemes_given->count() > 0 ? parse_scheme_list(schemes)
        : scheme_given->count() > 0 ? std::vector<Scheme>{scheme_option(OptionValue::text(scheme), "--scheme")}
                                    : std::vector<Scheme>{Scheme::circle};
    const auto row_index = static_cast<int64_t>(parse_unsigned(row, "--row", 0, kMaxTokens));
    const RotaryConfig rotary_config = rotary.config();
    const Resolved in = resolve(source, circle);
    write_plot(out, all_metrics(list, in.circle, source, in.get(), rotary_config), row_index);
    std::cout << "wrote " << out << " (" << list.size() << " panel" << (list.size() == 1 ? "" : "s") << ")\n";
    return 0;
  }
};

struct PlanCommand : Command {
  std::string spec = "alternate", format = "table", layers = "36";

  void add(CLI::App& parent) {
    app = parent.add_subcommand("plan", "the geometry of every layer under an AGE plan");
    app->add_option("--plan", spec, "all | lower | upper | alternate | strategy_1..4 | a C/M/V/U pattern [alternate]");
    app->add_option("--layers", layers, "number of layers [36, Qwen2.5-VL-3B]");
    app->add_option("--format", format, "table | json [table]");
  }

  int run() override {
    check_format(format);
    const AgePlan p = make_age_plan(spec, static_cast<int>(parse_unsigned(layers, "--layers", 1, kMaxLayers)));
    if (format == "json") {
      json per_layer = json::array();
      for (int l = 0; l < p.layers(); ++l) per_layer.push_back(to_string(p.layer_scheme(l)));
      json distinct = json::array();
      for (Scheme s : p.schemes()) distinct.push_back(to_string(s));
      std::cout << json{{"plan", spec}, {"pattern", p.pattern()}, {"layers", per_layer},
                        {"distinct_geometries", distinct}}.dump() << "\n";
    } else {
      std::cout << "plan " << spec << ", " << p.layers() << " layers: " << p.pattern() << "\n"
                << p.schemes().size() << " distinct geometr" << (p.schemes().size() == 1 ? "y" : "ies")
                << " (positions computed once each):";
      for (Scheme s : p.schemes()) std::cout << " " << to_string(s);
      std::cout << "\n";
    }
    return 0;
  }
};

struct DemoCommand : Command {
  std::string out = "circlerope-demo.svg";

  void add(CLI::App& parent) {
    app = parent.add_subcommand("demo", "the main job on an embedded Qwen-style prompt with two images and a video");
    app->add_option("--out", out, "where to write the picture [circlerope-demo.svg]");
  }

  int run() override { return run_demo(out); }
};

struct BenchPositionsCommand : Command {
  std::string format = "table", seconds = "0.5";

  void add(CLI::App& bench) {
    app = bench.add_subcommand("positions", "positions for the benchmark batch, circle and mrope");
    app->add_option("--format", format, "table | json [table]");
    app->add_option("--min-seconds", seconds, "time spent per scheme [0.5]");
  }

  int run() override {
    check_format(format);
    return run_bench_positions(format, seconds_flag(seconds, "--min-seconds"));
  }
};

struct BenchRotaryCommand : Command {
  std::string format = "table", isa = "all", seconds = "0.25", threads = "0";
  std::vector<std::string> seq_lens = {"1024", "4096", "16384"};
  std::vector<std::string> dtypes = {"float32", "bfloat16"};
  std::string plot, copy_mib = "256", prefetch = "automatic", pairing = "neox";

  void add(CLI::App& bench) {
    app = bench.add_subcommand("rotary", "rotation on Qwen2.5-VL-3B shapes: GB/s against this machine's copy bandwidth");
    app->add_option("--format", format, "table | json [table]");
    app->add_option("--seq-lens", seq_lens, "sequence lengths [1024 4096 16384]");
    app->add_option("--dtypes", dtypes, "float32 bfloat16 float16 [float32 bfloat16]");
    app->add_option("--min-seconds", seconds, "time spent per row [0.25]");
    app->add_option("--threads", threads, "threads, 0 = all cores [0]");
    app->add_option("--path", isa, "code path: all (every path this machine runs), automatic, portable, avx2, avx512, avx512bf16 [all]");
    app->add_option("--copy-mib", copy_mib, "size of the copy-bandwidth streams in MiB [256]");
    app->add_option("--plot", plot, "also write a bar chart (SVG file)");
    app->add_option("--prefetch", prefetch,
                    "software prefetch: automatic (by size), on, off, or compare (off and on alternately) [automatic]");
    app->add_option("--pairing", pairing, "rotation pairs: neox (Qwen's, halves) or gptj (adjacent elements) [neox]");
  }

  int run() override {
    check_format(format);
    cli::RotaryBenchOptions options;
    options.min_seconds = seconds_flag(seconds, "--min-seconds");
    // The copy meter starts this many std::threads and the kernels as many OpenMP threads:
    // 40000 aborted the process. (0 = all cores.)
    options.threads = static_cast<int>(parse_unsigned(threads, "--threads", 0, kMaxThreads));
    options.seq_lens.clear();
    for (const std::string& seq : seq_lens)
      options.seq_lens.push_back(static_cast<std::int64_t>(parse_unsigned(seq, "--seq-lens", 1, 1 << 20)));
    options.dtypes.clear();
    for (const std::string& d : dtypes) options.dtypes.push_back(parse_dtype(d));
    options.pairing = parse_pairing(pairing);
    if (isa != "all") options.isas = {parse_isa(isa)};
    options.copy_mib = static_cast<int>(parse_unsigned(copy_mib, "--copy-mib", 1, 4096));
    options.prefetch_compare = prefetch == "compare";
    if (!options.prefetch_compare) {
      try {
        options.prefetch = parse_prefetch(prefetch);
      } catch (const Error&) {  // the library's list lacks the CLI's own "compare"
        throw Error("--prefetch " + detail::quoted(prefetch) + " is not one of automatic, on, off, compare");
      }
    }
    if (!plot.empty()) check_svg_path("--plot", plot);
    const auto result = cli::bench_rotary(options, std::cerr);
    if (!plot.empty()) {
      write_svg("--plot", plot, cli::render_bandwidth_svg(result));
      std::cerr << "bench rotary: wrote " << plot << "\n";
    }
    if (format == "json") std::cout << result.dump(2) << "\n";
    else cli::print_bench_rotary_table(result, std::cout);
    return 0;
  }
};

struct CheckCommand : Command {
  std::string seed = std::to_string(std::random_device{}()), rounds = "2";

  void add(CLI::App& parent) {
    app = parent.add_subcommand("check", "every rotary fast path against the float64 reference on fresh random inputs");
    app->add_option("--seed", seed, "random seed (printed, to replay a run) [fresh]");
    app->add_option("--rounds", rounds, "random cases per combination [2]");
  }

  int run() override {
    const std::uint64_t seed_value = parse_unsigned(seed, "--seed", 0, std::numeric_limits<std::uint64_t>::max());
    const auto round_count = static_cast<int>(parse_unsigned(rounds, "--rounds", 1, 1000));
    return cli::run_check(seed_value, round_count, std::cout, std::cerr);
  }
};

int run(int argc, char** argv);

}  // namespace

// stdout is held in memory until the command has succeeded: on an error it stays empty (a
// demo whose `--out /proc/x.svg` fails prints none of its tables). A write that then fails (a closed pipe, a full disk) is an error with exit status 1.
int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe is a write error (EPIPE) to report, not a kill
  std::ostringstream held;
  std::streambuf* const stdout_buffer = std::cout.rdbuf(held.rdbuf());
  const int status = run(argc, argv);
  std::cout.rdbuf(stdout_buffer);
  if (status == 2) return status;  // invalid input: nothing on stdout
  const std::string_view text = held.view();
  errno = 0;
  const bool written = std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0;
  if (!written || std::ferror(stdout)) {
    std::fprintf(stderr, "circlerope: cannot write to standard output: %s\n",
                 errno ? std::strerror(errno) : "write error");
    return 1;
  }
  return status;
}

namespace {

int run(int argc, char** argv) {
  CLI::App app{"circlerope: Circle-RoPE positions, metrics and pictures for vision-language models"};
  app.require_subcommand(1);
  PositionsCommand positions;
  PtdCommand ptd;
  PlotCommand plot;
  PlanCommand plan;
  DemoCommand demo;
  BenchPositionsCommand bench_positions;
  BenchRotaryCommand bench_rotary;
  CheckCommand check;
  positions.add(app);
  ptd.add(app);
  plot.add(app);
  plan.add(app);
  demo.add(app);
  CLI::App* bench = app.add_subcommand("bench", "timings on this machine");
  bench->require_subcommand(1);
  bench_positions.add(*bench);
  bench_rotary.add(*bench);
  check.add(app);
  Command* const commands[] = {&positions, &ptd, &plot, &plan, &demo, &bench_positions, &bench_rotary, &check};

  try {
    if (argc > 1 && argv[1][0] != '-') {
      bool known = false;
      for (const CLI::App* sub : app.get_subcommands({})) known = known || sub->check_name(argv[1]);
      if (!known)
          throw Error("unknown command " + detail::quoted(argv[1]) +
                    " (expected positions, ptd, plot, plan, demo, check or bench)");
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::ExtrasError&) {
      throw Error(extras_message(app));
    } catch (const CLI::ParseError& e) {
      throw Error(e.what());
    }
    refuse_empty_values(app);

    for (Command* command : commands)
      if (command->app->parsed()) return command->run();
  } catch (const std::exception& e) {  // Error, and std::bad_alloc / JSON errors just in case
    std::cerr << "circlerope: " << detail::one_line(e.what()) << "\n";
    return 2;
  }
  return 0;
}

}  // namespace
