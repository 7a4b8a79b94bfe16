#include "rotary_commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <map>
#include <optional>
#include <random>
#include <ostream>
#include <sstream>
#include <thread>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "report.h"
#include "rotary_reference.h"
#include "timing.h"

namespace circlerope::cli {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string sci(double v) {
  std::ostringstream o;
  o << std::setprecision(2) << std::scientific << v;
  return o.str();
}

int resolve(int threads) {
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

int run_check(std::uint64_t seed, int rounds, std::ostream& out, std::ostream& err) {
  const CpuPath chosen = cpu_path();  // before any output: CIRCLEROPE_ISA's error
  int last_percent = -1;
  const auto results = reference::compare_every_path(seed, rounds, [&](int done, int total) {
    const int percent = 100 * done / total;
    if (percent / 10 != last_percent / 10 || done == total) {
      err << "\rcheck: " << done << "/" << total << " cases" << (done == total ? "\n" : "") << std::flush;
      last_percent = percent;
    }
  });
  struct Summary {
    int cases = 0, failed = 0;
    double worst = 0, tolerance = 0;
  };
  std::map<std::pair<int, int>, Summary> by_path;
  std::vector<const reference::ComparisonResult*> failures;
  for (const auto& r : results) {
    Summary& s = by_path[{static_cast<int>(r.c.isa), static_cast<int>(r.c.dtype)}];
    ++s.cases;
    s.worst = std::max(s.worst, r.error);
    s.tolerance = r.tolerance;
    if (!r.pass()) {
      ++s.failed;
      failures.push_back(&r);
    }
  }
  out << "circlerope check, seed " << seed << " (replay with --seed " << seed << "), " << rounds
      << " round" << (rounds == 1 ? "" : "s") << ": every code path x dtype x pairing x frequency "
      << "layout x memory layout x direction x in/out of place against the float64 reference\n";
  out << "  path        dtype     cases  worst pair error  tolerance  result\n";
  for (const auto& [key, s] : by_path) {
    // The path column fits the longest path name ("avx512bf16") and a gap.
    out << "  " << std::left << std::setw(12) << to_string(static_cast<Isa>(key.first))
        << std::setw(10) << to_string(static_cast<DType>(key.second)) << std::right
        << std::setw(5) << s.cases << "  " << std::setw(16) << sci(s.worst) << "  "
        << std::setw(9) << sci(s.tolerance) << "  "
        << (s.failed ? std::to_string(s.failed) + " FAILED" : std::string("ok")) << "\n";
  }
  out << "  paths run: ";
  for (std::size_t i = 0; i < available_isas().size(); ++i) out << (i ? ", " : "") << to_string(available_isas()[i]);
  out << " (automatic: " << to_string(chosen.isa) << ")\n";
  out << "  path chosen: " << chosen.reason << "\n";
  for (const IsaStatus& st : isa_status())
    if (!st.available) out << "  path " << to_string(st.isa) << " SKIPPED, not checked: " << st.reason << "\n";
  for (std::size_t i = 0; i < failures.size() && i < 20; ++i)
    out << "  mismatch: " << failures[i]->describe() << "\n";
  if (failures.size() > 20) out << "  ... and " << failures.size() - 20 << " more\n";
  out << (failures.empty() ? "all " + std::to_string(results.size()) + " cases match\n"
                           : std::to_string(failures.size()) + " of " +
                                 std::to_string(results.size()) + " cases MISMATCH\n");
  return failures.empty() ? 0 : 1;
}

void demo_rotation(const RopeIndexInput& input, const VisionConfig& vision,
                   const CircleConfig& circle, std::ostream& out) {
  constexpr int kLayers = 36;
  constexpr std::int64_t kQHeads = 16, kKHeads = 2, kHeadDim = 128;
  const RotaryConfig rotary;  // Qwen2.5-VL: theta 1e6, D 128, chunked [16, 24, 24], neox
  const CpuPath chosen = cpu_path();
  const AgePlan plan = make_age_plan("alternate", kLayers);
  const AgePositions positions = age_rope_index(input, vision, plan, circle);
  std::optional<RotaryPlan> built;  // a plan has no empty state (AgePlan is valid by construction)
  const double table_s = 1e-9 * median_ns([&] { built.emplace(make_rotary_plan(positions, rotary)); }, 0.05);
  const RotaryPlan& tables = *built;

  const std::int64_t B = input.batch, S = input.seq_len;
  std::mt19937_64 rng(2505'16416);
  std::normal_distribution<float> normal;
  std::vector<float> q(static_cast<std::size_t>(B * S * kQHeads * kHeadDim));
  std::vector<float> k(static_cast<std::size_t>(B * S * kKHeads * kHeadDim));
  for (float& v : q) v = normal(rng);
  for (float& v : k) v = normal(rng);
  const HeadTensor qv = bshd(q.data(), DType::float32, B, S, kQHeads, kHeadDim);
  const HeadTensor kv = bshd(k.data(), DType::float32, B, S, kKHeads, kHeadDim);

  // Layer 0 (circle) out of place against the reference, then a whole forward pass in place.
  std::vector<float> q0(q.size());
  const HeadTensor q0v = bshd(q0.data(), DType::float32, B, S, kQHeads, kHeadDim);
  const RotaryTarget first{qv, q0v};
  rotate(tables.layer(0), std::span<const RotaryTarget>(&first, 1));
  const auto expected = reference::rotate(rotary, positions.layer(0).position_ids.data(), qv,
                                          Pairing::neox, Direction::forward);
  const double error = reference::max_error(expected, qv, q0v, rotary.rotary_dim, Pairing::neox);

  const RotaryTarget targets[2] = {{qv, qv}, {kv, kv}};
  const double pass_s = 1e-9 * median_ns([&] {
    for (int l = 0; l < kLayers; ++l) rotate(tables.layer(l), targets);
  }, 0.1);

  out << "Rotation (kernels): AGE plan 'alternate' over " << kLayers << " layers = " << plan.pattern().substr(0, 8)
      << "..., " << tables.tables.size() << " angle tables (one per geometry) built in "
      << fixed(table_s * 1e6, 1) << " us\n"
      << "  q [" << B << ", " << S << ", " << kQHeads << ", " << kHeadDim << "] and k [" << B << ", " << S << ", "
      << kKHeads << ", " << kHeadDim << "] fp32, neox, path " << to_string(chosen.isa) << "\n"
      << "  path chosen: " << chosen.reason << "\n"
      << "  layer 0 (circle) against the float64 reference: worst pair error " << sci(error)
      << " (tolerance " << sci(reference::kFloat32Tolerance) << ")\n"
      << "  q and k of all " << kLayers << " layers rotated in place: " << fixed(pass_s * 1e3, 3) << " ms ("
      << fixed(pass_s * 1e6 / kLayers, 1) << " us per layer)\n\n";
}

namespace {

// This machine's copy bandwidth, read + write counted, GB/s. memcpy alone understates it
// here (glibc's memcpy reaches ~20 GB/s where a streaming-store loop reaches ~24-35 and an
// in-place pass ~30-38), so the reference figure is the best of the three.
struct CopyBandwidth {
  double memcpy_gbps = 0, stream_copy_gbps = 0, in_place_gbps = 0;
  double copy_gbps = 0;  // the best of the three
};

// Buffers allocated and touched once, then measured as often as needed.
class CopyMeter {
 public:
  CopyMeter(std::size_t bytes, int threads)
      : threads_(resolve(threads)),
        n_(bytes / sizeof(float) / 64 * 64),
        a_(n_ + 16, 1.0f),  // touched here: no page faults in any measurement
        b_(n_ + 16, 2.0f),
        src_(align(a_)),
        dst_(align(b_)),
        part_(n_ / static_cast<std::size_t>(threads_) / 64 * 64) {}

  CopyBandwidth measure(int passes) {
    CopyBandwidth out;
    out.memcpy_gbps = run(passes, [&](std::size_t b, std::size_t e) {
      std::memcpy(dst_ + b, src_ + b, (e - b) * sizeof(float));
    });
    out.stream_copy_gbps = run(passes, [&](std::size_t b, std::size_t e) {
#if defined(__SSE2__)
      for (std::size_t i = b; i < e; i += 4) _mm_stream_ps(dst_ + i, _mm_load_ps(src_ + i));
      _mm_sfence();
#else
      for (std::size_t i = b; i < e; ++i) dst_[i] = src_[i];
#endif
    });
    volatile float one = 1.0f;  // not foldable: the loop must read and write every element
    const float factor = one;
    out.in_place_gbps = run(passes, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) dst_[i] *= factor;
    });
    out.copy_gbps = std::max({out.memcpy_gbps, out.stream_copy_gbps, out.in_place_gbps});
    warm_ = true;
    return out;
  }

 private:
  static float* align(std::vector<float>& v) {
    const auto p = reinterpret_cast<std::uintptr_t>(v.data());
    return reinterpret_cast<float*>((p + 63) / 64 * 64);
  }

  // body(begin, end) on every thread, a warm-up on the first measurement only, then the best
  // of `passes`; GB/s, read + write.
  template <class Body>
  double run(int passes, const Body& body) {
    auto once = [&] {
      std::vector<std::thread> pool;
      for (int t = 1; t < threads_; ++t)
        pool.emplace_back([&, t] {
          const std::size_t at = part_ * static_cast<std::size_t>(t);
          body(at, t == threads_ - 1 ? n_ : at + part_);
        });
      body(std::size_t{0}, threads_ == 1 ? n_ : part_);
      for (auto& th : pool) th.join();
    };
    if (!warm_) once();
    double best = 1e30;
    for (int r = 0; r < passes; ++r) {
      const auto t = Clock::now();
      once();
      best = std::min(best, seconds_since(t));
    }
    return 2.0 * static_cast<double>(n_ * sizeof(float)) / best / 1e9;
  }

  int threads_;
  std::size_t n_;
  std::vector<float> a_, b_;
  float* src_;
  float* dst_;
  std::size_t part_;
  bool warm_ = false;
};

}  // namespace


// The fair baselines of one row: the rotation's own q and k buffers moved by the cheapest
// code that reads and writes the same bytes, on the same OpenMP threads, each thread taking
// one contiguous share of the bytes (as the kernels' static schedule does).
class BufferBaseline {
 public:
  struct Span {
    const unsigned char* src;
    unsigned char* dst;
    std::size_t bytes;
  };

  BufferBaseline(const std::vector<Span>& spans, int threads) : parts_(static_cast<std::size_t>(threads)) {
    std::size_t total = 0;
    for (const Span& sp : spans) total += sp.bytes;
    const std::size_t share = (total / static_cast<std::size_t>(threads) + 63) / 64 * 64;
    std::size_t part = 0, room = share;
    for (const Span& sp : spans)
      for (std::size_t at = 0; at < sp.bytes;) {
        const std::size_t n = std::min(sp.bytes - at, part + 1 == parts_.size() ? sp.bytes - at : room);
        parts_[part].push_back({sp.src + at, sp.dst + at, n});
        at += n;
        room -= std::min(room, n);
        if (room == 0 && part + 1 < parts_.size()) {
          ++part;
          room = share;
        }
      }
  }

  // Adds a zero read at run time to every 32-bit word of the sources, in place.
  void read_modify_write() {
    volatile std::uint32_t zero_source = 0;
    const std::uint32_t zero = zero_source;
    run([zero](const Span& sp) {
      auto* w = reinterpret_cast<std::uint32_t*>(sp.dst);  // in place: dst == src
      for (std::size_t i = 0; i < sp.bytes / 4; ++i) w[i] += zero;
    });
  }
  void copy() {
    run([](const Span& sp) { std::memcpy(sp.dst, sp.src, sp.bytes); });
  }
  // Non-temporal stores (16-byte aligned destinations; the rest by memcpy).
  void stream_copy() {
    run([](const Span& sp) {
#if defined(__SSE2__)
      std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(sp.dst) % 16) % 16;
      head = std::min(head, sp.bytes);
      std::memcpy(sp.dst, sp.src, head);
      std::size_t i = head;
      for (; i + 16 <= sp.bytes; i += 16)
        _mm_stream_si128(reinterpret_cast<__m128i*>(sp.dst + i),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(sp.src + i)));
      std::memcpy(sp.dst + i, sp.src + i, sp.bytes - i);
      _mm_sfence();
#else
      std::memcpy(sp.dst, sp.src, sp.bytes);
#endif
    });
  }

 private:
  template <class F>
  void run(const F& f) {
    const auto n = static_cast<std::int64_t>(parts_.size());
#if defined(_OPENMP)
#pragma omp parallel for num_threads(static_cast<int>(n)) schedule(static, 1)
#endif
    for (std::int64_t p = 0; p < n; ++p)
      for (const Span& sp : parts_[static_cast<std::size_t>(p)]) f(sp);
  }

  std::vector<std::vector<Span>> parts_;
};

json bench_rotary(const RotaryBenchOptions& o, std::ostream& err) {
  constexpr std::int64_t kQHeads = 16, kKHeads = 2, kHeadDim = 128;
  RotaryConfig config;  // theta 1e6, rotary dim 128, chunked [16, 24, 24]: Qwen2.5-VL
  const int threads = resolve(o.threads);
  for (std::int64_t seq : o.seq_lens)  // before any output: a bad value is a one-line error
    if (seq < 1 || seq > (1 << 20)) throw Error("--seq-lens: " + std::to_string(seq) + " is not in [1, 1048576]");
  if (o.seq_lens.empty() || o.dtypes.empty()) throw Error("--seq-lens and --dtypes need at least one value");
  if (o.copy_mib < 1 || o.copy_mib > 4096) throw Error("--copy-mib " + std::to_string(o.copy_mib) + " is not in [1, 4096]");
  const CpuPath chosen = cpu_path();  // before any output: CIRCLEROPE_ISA's error
  json skipped = json::object();
  std::vector<Isa> isas;
  for (const IsaStatus& st : isa_status()) {
    const bool wanted = o.isas.empty() || std::find(o.isas.begin(), o.isas.end(), st.isa) != o.isas.end();
    if (!wanted) continue;
    if (!st.available) {
      if (!o.isas.empty())
        throw Error("code path '" + std::string(to_string(st.isa)) + "' is not available: " + st.reason);
      skipped[std::string(to_string(st.isa))] = st.reason;
      err << "bench rotary: skipping path " << to_string(st.isa) << ": " << st.reason << "\n";
      continue;
    }
    isas.push_back(st.isa);
  }
  if (std::find(o.isas.begin(), o.isas.end(), Isa::automatic) != o.isas.end()) isas.push_back(chosen.isa);
  err << "bench rotary: path " << to_string(chosen.isa) << ": " << chosen.reason << "\n";
  err << "bench rotary: measuring copy bandwidth (" << o.copy_mib << " MiB streams, " << threads << " threads)\n";
  CopyMeter meter(static_cast<std::size_t>(o.copy_mib) << 20, threads);
  const CopyBandwidth copy = meter.measure(5);

  json rows = json::array();
  for (std::int64_t seq : o.seq_lens) {
    // Fractional, negative and large positions, as Circle-RoPE produces.
    std::vector<float> positions(static_cast<std::size_t>(3 * seq));
    for (std::int64_t i = 0; i < 3 * seq; ++i)
      positions[static_cast<std::size_t>(i)] = static_cast<float>(i % seq) * 0.731f - 9.5f;
    RotaryTable table;
    const double table_s = 1e-9 * median_ns(
        [&] { table = make_rotary_table(config, positions.data(), 1, seq, o.threads); }, 0.05);
    for (DType dtype : o.dtypes) {
      const std::size_t size = dtype_size(dtype);
      const auto q_elems = static_cast<std::size_t>(seq * kQHeads * kHeadDim);
      const auto k_elems = static_cast<std::size_t>(seq * kKHeads * kHeadDim);
      std::vector<unsigned char> q(q_elems * size), k(k_elems * size), q_out(q.size()), k_out(k.size());
      // Small finite values in every storage type: 0x3C00 is 1.0 in fp16, ~1.0 in bf16.
      const std::uint16_t one16 = dtype == DType::float16 ? 0x3C00 : 0x3F80;
      const float one32 = 1.0f;
      for (std::size_t i = 0; i < q.size(); i += size) std::memcpy(&q[i], size == 4 ? static_cast<const void*>(&one32) : &one16, size);
      for (std::size_t i = 0; i < k.size(); i += size) std::memcpy(&k[i], size == 4 ? static_cast<const void*>(&one32) : &one16, size);
      std::memset(q_out.data(), 0, q_out.size());
      std::memset(k_out.data(), 0, k_out.size());
      const HeadTensor qv = bshd(q.data(), dtype, 1, seq, kQHeads, kHeadDim);
      const HeadTensor kv = bshd(k.data(), dtype, 1, seq, kKHeads, kHeadDim);
      const HeadTensor qo = bshd(q_out.data(), dtype, 1, seq, kQHeads, kHeadDim);
      const HeadTensor ko = bshd(k_out.data(), dtype, 1, seq, kKHeads, kHeadDim);
      const double bytes = 2.0 * static_cast<double>(q.size() + k.size()) + static_cast<double>(table.bytes());
      // rotate() runs calls of under 256 KiB of traffic on one thread (dispatch.cpp): so do these.
      const int base_threads = 2 * (q.size() + k.size()) < 256 * 1024 ? 1 : threads;
      BufferBaseline in_place_base({{q.data(), q.data(), q.size()}, {k.data(), k.data(), k.size()}}, base_threads);
      BufferBaseline copy_base({{q.data(), q_out.data(), q.size()}, {k.data(), k_out.data(), k.size()}}, base_threads);
      for (Isa isa : isas)
        for (Direction direction : {Direction::forward, Direction::backward})
          for (bool in_place : {true, false}) {
            const RotaryTarget targets[2] = {{qv, in_place ? qv : qo}, {kv, in_place ? kv : ko}};
            // This shared machine's bandwidth drifts by tens of percent within a minute, so a
            // row alternates baseline and rotation measurements and reports the median ratio;
            // --prefetch compare measures the rotation without and with prefetch in each round.
            const std::size_t variants = o.prefetch_compare ? 2 : 1;
            constexpr int kRounds = 5;
            const double slice = o.min_seconds / kRounds / static_cast<double>((in_place ? 1 : 2) + variants);
            std::vector<double> bases, memcpys, streams, rmws;
            std::vector<double> times[2], ratios[2], gains;
            int memcpy_wins = 0;
            for (int round = 0; round < kRounds; ++round) {
              double base_s;
              if (in_place) {
                base_s = 1e-9 * median_ns([&] { in_place_base.read_modify_write(); }, slice);
                rmws.push_back(bytes / base_s / 1e9);
              } else {
                const double m = 1e-9 * median_ns([&] { copy_base.copy(); }, slice);
                const double st = 1e-9 * median_ns([&] { copy_base.stream_copy(); }, slice);
                memcpys.push_back(bytes / m / 1e9);
                streams.push_back(bytes / st / 1e9);
                memcpy_wins += m <= st;
                base_s = std::min(m, st);
              }
              bases.push_back(bytes / base_s / 1e9);
              for (std::size_t v = 0; v < variants; ++v) {
                RotaryParams params;
                params.direction = direction;
                params.threads = o.threads;
                params.isa = isa;
                params.pairing = o.pairing;
                params.prefetch = o.prefetch_compare ? (v == 0 ? Prefetch::off : Prefetch::on) : o.prefetch;
                times[v].push_back(1e-9 * median_ns([&] { rotate(table, targets, params); }, slice));
                ratios[v].push_back(base_s / times[v].back());
              }
              if (o.prefetch_compare) gains.push_back(times[0].back() / times[1].back());
            }
            for (std::size_t v = 0; v < variants; ++v) {
              const double s = median(times[v]);
              const double gbps = bytes / s / 1e9;
              const Prefetch prefetch = o.prefetch_compare ? (v == 0 ? Prefetch::off : Prefetch::on) : o.prefetch;
              json row = {{"path", to_string(isa)},
                          {"dtype", to_string(dtype)},
                          {"pairing", to_string(o.pairing)},
                          {"seq_len", seq},
                          {"direction", to_string(direction)},
                          {"mode", in_place ? "in-place" : "out-of-place"},
                          {"prefetch", to_string(prefetch)},
                          {"ms", s * 1e3},
                          {"gbps", gbps},
                          {"copy_gbps", median(bases)},
                          {"baseline", in_place ? "in-place read-modify-write"
                                       : 2 * memcpy_wins > kRounds ? "memcpy" : "streaming copy"},
                          {"fraction", median(ratios[v])},
                          {"tokens_per_s", static_cast<double>(seq) / s},
                          {"table_ms", table_s * 1e3},
                          {"bytes", bytes}};
              if (in_place) {
                row["read_modify_write_gbps"] = median(rmws);
              } else {
                row["memcpy_gbps"] = median(memcpys);
                row["streaming_copy_gbps"] = median(streams);
              }
              // The median of per-round ratios of the time without prefetch to the time with it.
              if (v == 1) row["prefetch_gain"] = median(gains);
              err << "bench rotary: " << to_string(isa) << " " << to_string(dtype) << " S=" << seq << " "
                  << to_string(direction) << " " << row["mode"].get<std::string>() << " prefetch "
                  << to_string(prefetch) << ": " << fixed(s * 1e3, 3) << " ms, " << fixed(gbps, 1) << " GB/s, "
                  << fixed(100 * row["fraction"].get<double>(), 0) << "% of " << row["baseline"].get<std::string>()
                  << (v == 1 ? ", " + fixed(median(gains), 2) + "x of no prefetch" : std::string()) << "\n";
              rows.push_back(std::move(row));
            }
          }
    }
  }
  json paths = json::array();
  for (Isa isa : isas) paths.push_back(to_string(isa));
  return json{{"benchmark", "rotary"},
              {"shape", "Qwen2.5-VL-3B: batch 1, Hq 16, Hk 2, head dim 128, sections 16/24/24, theta 1e6, chunked " +
                            std::string(to_string(o.pairing))},
              {"pairing", to_string(o.pairing)},
              {"paths", paths},
              {"automatic", to_string(chosen.isa)},
              {"automatic_reason", chosen.reason},
              {"skipped_paths", skipped},
              {"threads", threads},
              {"prefetch", o.prefetch_compare ? "compare" : std::string(to_string(o.prefetch))},
              {"copy_gbps", copy.copy_gbps},
              {"copy_streams_gbps", {{"memcpy", copy.memcpy_gbps},
                                     {"streaming_copy", copy.stream_copy_gbps},
                                     {"in_place_read_write", copy.in_place_gbps}}},
              {"results", rows}};
}

std::string render_bandwidth_svg(const json& r) {
  // One group of four bars per (dtype, seq_len); each bar is the row's GB/s drawn inside a
  // grey bar of the copy bandwidth measured just before it, so the filled share is the
  // fraction. A dashed line marks 75% of each bar's baseline (the AVX2 target).
  struct Group {
    std::string label;
    std::vector<const json*> rows;
  };
  std::vector<Group> groups;
  double top = 1;
  for (const json& row : r["results"]) {
    const std::string label = row["path"].get<std::string>() + " " + row["dtype"].get<std::string>() + " S=" +
                              std::to_string(row["seq_len"].get<std::int64_t>());
    if (groups.empty() || groups.back().label != label) groups.push_back({label, {}});
    groups.back().rows.push_back(&row);
    top = std::max({top, row["gbps"].get<double>(), row["copy_gbps"].get<double>()});
  }
  const double step = top <= 60 ? 10 : top <= 120 ? 20 : 50;  // round grid lines
  const int ticks = static_cast<int>(std::ceil(top * 1.05 / step));
  top = step * ticks;
  const char* colours[] = {"#1f77b4", "#aec7e8", "#d62728", "#ff9896"};
  const double left = 60, bottom = 330, height = 270, bar = 16, gap = 4, group_gap = 26;
  double width = left + 20;
  for (const Group& g : groups) width += static_cast<double>(g.rows.size()) * (bar + gap) + group_gap;
  width = std::max(width, 720.0);
  std::ostringstream o;
  o << std::fixed << std::setprecision(1);
  auto y = [&](double v) { return bottom - height * v / top; };
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << width
    << "\" height=\"420\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"22\" font-size=\"14\">Rotation GB/s (colour) inside its fair copy baseline "
       "measured alternately with it (grey)</text>\n"
    << "<text x=\"" << left << "\" y=\"40\">Qwen2.5-VL-3B q/k shapes, " << r["threads"].get<int>()
    << " threads; baseline: in place, a read-modify-write of q and k; out of place, the better of memcpy and a "
       "streaming copy; dashed line: 75% of it</text>\n";
  for (int t = 0; t <= ticks; ++t) {  // y grid
    const double v = step * t;
    o << "<line x1=\"" << left << "\" x2=\"" << width - 10 << "\" y1=\"" << y(v) << "\" y2=\"" << y(v)
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << left - 6 << "\" y=\"" << y(v) + 4
      << "\" text-anchor=\"end\">" << std::setprecision(0) << v << std::setprecision(1) << "</text>\n";
  }
  o << "<text transform=\"translate(16," << bottom - height / 2 << ") rotate(-90)\" text-anchor=\"middle\">GB/s</text>\n";
  double x = left + 12;
  for (const Group& g : groups) {
    const double start = x;
    for (std::size_t i = 0; i < g.rows.size(); ++i) {
      const json& row = *g.rows[i];
      const double copy = row["copy_gbps"].get<double>(), gbps = row["gbps"].get<double>();
      o << "<rect x=\"" << x << "\" y=\"" << y(copy) << "\" width=\"" << bar << "\" height=\"" << bottom - y(copy)
        << "\" fill=\"#e6e6e6\"/>\n"
        << "<rect x=\"" << x + 3 << "\" y=\"" << y(gbps) << "\" width=\"" << bar - 6 << "\" height=\""
        << bottom - y(gbps) << "\" fill=\"" << colours[i % 4] << "\"><title>"
        << row["direction"].get<std::string>() << " " << row["mode"].get<std::string>() << ": "
        << gbps << " GB/s, " << std::setprecision(0) << 100 * row["fraction"].get<double>() << std::setprecision(1)
        << "% of " << row["baseline"].get<std::string>() << "</title></rect>\n"
        << "<line x1=\"" << x << "\" x2=\"" << x + bar << "\" y1=\"" << y(0.75 * copy) << "\" y2=\"" << y(0.75 * copy)
        << "\" stroke=\"black\" stroke-dasharray=\"2,2\"/>\n";
      x += bar + gap;
    }
    o << "<text x=\"" << (start + x - gap) / 2 << "\" y=\"" << bottom + 16 << "\" text-anchor=\"middle\">"
      << g.label << "</text>\n";
    x += group_gap;
  }
  const char* names[] = {"forward in place", "forward out of place", "backward in place", "backward out of place"};
  for (int i = 0; i < 4; ++i)
    o << "<rect x=\"" << left + 150 * i << "\" y=\"" << bottom + 34 << "\" width=\"12\" height=\"12\" fill=\""
      << colours[i] << "\"/>\n<text x=\"" << left + 150 * i + 16 << "\" y=\"" << bottom + 44 << "\">" << names[i]
      << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

void print_bench_rotary_table(const json& r, std::ostream& out) {
  out << "rotary, " << r["shape"].get<std::string>() << "\n" << r["threads"].get<int>() << " threads; paths";
  for (const json& p : r["paths"]) out << " " << p.get<std::string>();
  out << " (automatic: " << r["automatic"].get<std::string>() << ")";
  for (const auto& [path, reason] : r["skipped_paths"].items())
    out << "; skipped " << path << ": " << reason.get<std::string>();
  if (r.contains("automatic_reason")) out << "\npath chosen: " << r["automatic_reason"].get<std::string>();
  out << "\nmachine copy bandwidth " << fixed(r["copy_gbps"].get<double>(), 1)
      << " GB/s at the start, read + write, the best of memcpy " << fixed(r["copy_streams_gbps"]["memcpy"].get<double>(), 1)
      << ", a streaming-store copy " << fixed(r["copy_streams_gbps"]["streaming_copy"].get<double>(), 1)
      << " and an in-place read-modify-write " << fixed(r["copy_streams_gbps"]["in_place_read_write"].get<double>(), 1)
      << "\nbytes = q and k read and written once + the table. Each row alternates 5 measurements of the rotation and "
         "of its fair baseline on the same buffers (in place: a read-modify-write of q and k; out of place: the "
         "better of memcpy and a streaming-store copy into the outputs): 'base GB/s' is their median, 'of base' "
         "the median ratio\n";
  out << "  path        dtype     seq_len  direction  mode          prefetch        ms     GB/s  base GB/s  of base  baseline\n";
  for (const json& row : r["results"]) {
    out << "  " << std::left << std::setw(12) << row["path"].get<std::string>() << std::setw(10)
        << row["dtype"].get<std::string>() << std::right << std::setw(7) << row["seq_len"].get<std::int64_t>() << "  "
        << std::left << std::setw(9) << row["direction"].get<std::string>() << "  " << std::setw(14)
        << row["mode"].get<std::string>() << std::setw(9) << row["prefetch"].get<std::string>() << std::right
        << std::setw(9) << fixed(row["ms"].get<double>(), 3)
        << std::setw(9) << fixed(row["gbps"].get<double>(), 1) << std::setw(11)
        << fixed(row["copy_gbps"].get<double>(), 1) << std::setw(8) << fixed(100 * row["fraction"].get<double>(), 0)
        << "%  " << row["baseline"].get<std::string>();
    if (row.contains("prefetch_gain")) out << ", " << fixed(row["prefetch_gain"].get<double>(), 2) << "x of no prefetch";
    out << "\n";
  }
}

}  // namespace circlerope::cli
