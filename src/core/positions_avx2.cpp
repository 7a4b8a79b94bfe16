// The positions' hot loops in AVX2 (positions_simd.h): the ring in four-lane double vectors
// (ring_impl.h), the token scans and the float32 placement. Flags set per file in
// CMakeLists.txt; chosen at run time (positions_path.cpp).
#include <immintrin.h>

#include "ring_impl.h"

namespace circlerope::detail {

void ring_avx2(RingJob& job) { ring_vector<4>(job); }

namespace {

std::int64_t scan(const std::int64_t* ids, std::int64_t from, std::int64_t n, std::uint64_t lowest,
                  std::uint64_t span) {
  // (id - lowest) <= span as unsigned 64-bit: AVX2 compares signed, so both sides are biased
  // by 2^63. Sixteen ids per step: no hit among them is one test.
  const __m256i bias = _mm256_set1_epi64x(static_cast<long long>(0x8000000000000000ull));
  const __m256i low = _mm256_set1_epi64x(static_cast<long long>(lowest));
  const __m256i limit = _mm256_xor_si256(_mm256_set1_epi64x(static_cast<long long>(span)), bias);
  auto outside = [&](const std::int64_t* p) {  // all ones where the id is NOT in the range
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_cmpgt_epi64(_mm256_xor_si256(_mm256_sub_epi64(v, low), bias), limit);
  };
  std::int64_t k = from;
  for (; k + 16 <= n; k += 16) {
    const __m256i all = _mm256_and_si256(_mm256_and_si256(outside(ids + k), outside(ids + k + 4)),
                                         _mm256_and_si256(outside(ids + k + 8), outside(ids + k + 12)));
    if (_mm256_movemask_pd(_mm256_castsi256_pd(all)) != 0xF) break;
  }
  for (; k < n; ++k)
    if (static_cast<std::uint64_t>(ids[k]) - lowest <= span) return k;
  return n;
}

std::int64_t run_end(const std::int64_t* ids, std::int64_t from, std::int64_t n, std::int64_t value) {
  const __m256i v = _mm256_set1_epi64x(static_cast<long long>(value));
  auto same = [&](const std::int64_t* p) {
    return _mm256_cmpeq_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), v);
  };
  std::int64_t k = from;
  for (; k + 16 <= n; k += 16) {
    const __m256i all = _mm256_and_si256(_mm256_and_si256(same(ids + k), same(ids + k + 4)),
                                         _mm256_and_si256(same(ids + k + 8), same(ids + k + 12)));
    if (_mm256_movemask_pd(_mm256_castsi256_pd(all)) != 0xF) break;
  }
  for (; k < n; ++k)
    if (ids[k] != value) return k;
  return n;
}

void place_cells(const double* p, double base, float* out, std::int64_t n) {
  const __m256d b = _mm256_set1_pd(base);
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m128 lo = _mm256_cvtpd_ps(_mm256_add_pd(b, _mm256_loadu_pd(p + j)));
    const __m128 hi = _mm256_cvtpd_ps(_mm256_add_pd(b, _mm256_loadu_pd(p + j + 4)));
    _mm256_storeu_ps(out + j, _mm256_set_m128(hi, lo));
  }
  for (; j < n; ++j) out[j] = static_cast<float>(base + p[j]);
}

void place_text(double first, std::int64_t n, float* t, float* h, float* w) {
  // float(first + i) with one rounding each, as the scalar loop: i + lane is an exact double.
  const __m256d f = _mm256_set1_pd(first);
  const __m256d lanes_lo = _mm256_setr_pd(0, 1, 2, 3), lanes_hi = _mm256_setr_pd(4, 5, 6, 7);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d at = _mm256_set1_pd(static_cast<double>(i));
    const __m128 lo = _mm256_cvtpd_ps(_mm256_add_pd(f, _mm256_add_pd(at, lanes_lo)));
    const __m128 hi = _mm256_cvtpd_ps(_mm256_add_pd(f, _mm256_add_pd(at, lanes_hi)));
    const __m256 v = _mm256_set_m128(hi, lo);
    _mm256_storeu_ps(t + i, v);
    _mm256_storeu_ps(h + i, v);
    _mm256_storeu_ps(w + i, v);
  }
  for (; i < n; ++i) t[i] = h[i] = w[i] = static_cast<float>(first + static_cast<double>(i));
}

}  // namespace

const PositionsKernels kPositionsAvx2 = {&ring_avx2, &scan, &run_end, &place_cells, &place_text};

}  // namespace circlerope::detail
