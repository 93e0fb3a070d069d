#include "tests/testutil/compare.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/dtype.h"
#include "tests/testutil/reference_moe.h"

namespace moe::testing {

::testing::AssertionResult AllClose(const std::vector<float>& got,
                                    const std::vector<float>& want,
                                    Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != expected " << want.size();
  }
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double lim = tol.atol + tol.rtol * std::fabs(want[i]);
    if (!(err <= lim)) {
      ++bad;
      if (!(err - lim <= worst_excess)) {
        worst_excess = std::isnan(err) ? 1e300 : err - lim;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements out of tolerance; worst ["
         << worst << "] got " << got[worst] << " want " << want[worst];
}

RmsError MeasureRmsError(const std::vector<float>& got,
                         const std::vector<float>& want) {
  double se = 0, sw = 0, worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    se += err * err;
    sw += static_cast<double>(want[i]) * want[i];
    if (!(err <= worst)) worst = std::isnan(err) ? 1e300 : err;
  }
  const double rms = want.empty() ? 0 : std::sqrt(sw / want.size());
  return {sw > 0 ? std::sqrt(se / sw) : std::sqrt(se),
          rms > 0 ? worst / rms : worst};
}

::testing::AssertionResult RmsClose(const std::vector<float>& got,
                                    const std::vector<float>& want,
                                    RmsTolerance tol) {
  if (got.size() != want.size() || want.empty()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs expected " << want.size();
  }
  double se = 0, sw = 0, worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    se += err * err;
    sw += static_cast<double>(want[i]) * want[i];
    if (!(err <= worst)) {  // NaN wins
      worst = std::isnan(err) ? 1e300 : err;
      at = i;
    }
  }
  const double rms = std::sqrt(sw / want.size());
  const double rel = sw > 0 ? std::sqrt(se / sw) : std::sqrt(se);
  const double max_units = rms > 0 ? worst / rms : worst;
  auto r = rel <= tol.rel_rms && max_units <= tol.max_over_rms
               ? ::testing::AssertionSuccess()
               : ::testing::AssertionFailure();
  return r << "relative RMS error " << rel << " (at most " << tol.rel_rms
           << "), largest error " << max_units << " rms (at most "
           << tol.max_over_rms << ") at [" << at << "] got " << got[at]
           << " want " << want[at];
}

::testing::AssertionResult SameTokenRouting(
    const std::vector<int64_t>& want_idx, const std::vector<float>& want_w,
    const std::vector<int32_t>& got_idx, const std::vector<float>& got_w,
    int64_t n, int64_t k, int64_t got_slots) {
  if (got_slots != k) {
    return ::testing::AssertionFailure()
           << "got " << got_slots << " slots per token, expected " << k;
  }
  for (int64_t t = 0; t < n; ++t) {
    std::map<int64_t, double> want, got;
    for (int64_t j = 0; j < k; ++j) {
      want[want_idx[t * k + j]] += want_w[t * k + j];
      got[got_idx[t * k + j]] += got_w[t * k + j];
    }
    if (want.size() != got.size()) {
      return ::testing::AssertionFailure()
             << "token " << t << ": duplicate ids";
    }
    for (const auto& [e, w] : want) {
      auto it = got.find(e);
      if (it == got.end()) {
        return ::testing::AssertionFailure()
               << "token " << t << ": expert " << e << " not chosen";
      }
      if (std::fabs(it->second - w) > 1e-5 + 1e-4 * std::fabs(w)) {
        return ::testing::AssertionFailure()
               << "token " << t << " expert " << e << ": weight " << it->second
               << " want " << w;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameExpertChoice(const GoldenCase& c,
                                            const std::vector<int32_t>& got_idx,
                                            const std::vector<float>& got_w,
                                            int64_t tokens, int64_t slots) {
  const int64_t E = c.config.num_experts, C = c.top_shape[1];
  std::map<int64_t, double> sum;  // token -> sum of raw probabilities
  for (int64_t i = 0; i < E * C; ++i) sum[c.top_idx[i]] += c.top_w[i];
  for (int64_t e = 0; e < E; ++e) {
    std::map<int64_t, double> want, got;
    for (int64_t j = 0; j < C; ++j) {
      const int64_t t = c.top_idx[e * C + j];
      want[t] = c.top_w[e * C + j] / (sum[t] + 1e-9) * c.config.route_scale;
    }
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t s = 0; s < slots; ++s) {
        if (got_idx[t * slots + s] == e) got[t] = got_w[t * slots + s];
      }
    }
    if (want.size() != got.size()) {
      return ::testing::AssertionFailure()
             << "expert " << e << " took " << got.size() << " tokens, want "
             << want.size();
    }
    for (const auto& [t, w] : want) {
      if (!got.count(t)) {
        return ::testing::AssertionFailure()
               << "expert " << e << " did not take token " << t;
      }
      if (std::fabs(got[t] - w) > 1e-5 + 1e-4 * std::fabs(w)) {
        return ::testing::AssertionFailure()
               << "token " << t << " expert " << e << " weight " << got[t]
               << " want " << w;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CpuBf16Close(const GoldenCase& c,
                                        const std::vector<float>& y) {
  ::testing::AssertionResult close = AllClose(y, c.y, kBf16Tol);
  if (close) return close;
  GoldenCase rounded = c;
  for (std::vector<float>* w : {&rounded.w1, &rounded.w3, &rounded.w2,
                                &rounded.sw1, &rounded.sw3, &rounded.sw2}) {
    for (float& v : *w) v = Bf16ToF32(F32ToBf16(v));
  }
  RunReferenceMoe(rounded);
  if (AllClose(rounded.y, c.y, kBf16Tol)) {
    return close << " (the reference on bf16-rounded weights meets the "
                    "bound, so the engine's error is its own)";
  }
  return RmsClose(y, c.y, kBf16GpuTol)
         << " (rounding this case's weights to bf16 alone breaks the "
            "per-element bound: held to the RMS bound)";
}

}  // namespace moe::testing
