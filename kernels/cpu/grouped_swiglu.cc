#include "kernels/cpu/grouped_swiglu.h"

#include <omp.h>

#include <algorithm>

namespace moe::kernels::cpu {
namespace {

// Rows per task: a multiple of both micro-kernels' tile heights, small enough
// that the packed A rows stay in L2 while a panel streams past.
constexpr int64_t kRowBlock = 96;
// Tasks per thread the plan aims for, so dynamic scheduling can balance.
constexpr int64_t kTasksPerThread = 8;

struct PhaseShape {
  int64_t panels;
  int64_t k;
};

PhaseShape Shape(const GroupedSwiglu& p, int phase) {
  const int64_t ip = PaddedInter(p.inter);
  const int64_t up_panels = p.gated ? 2 * ip / kPanelWidth : NumPanels(ip);
  return phase == 0 ? PhaseShape{up_panels, p.hidden}
                    : PhaseShape{NumPanels(p.hidden), ip};
}

}  // namespace

int64_t PlanGroupedSwiglu(const GroupedSwiglu& p, int num_threads,
                          SwigluTask* tasks, int64_t capacity) {
  const int64_t total_rows = p.group_offsets[p.num_groups];
  int64_t count = 0;
  for (int phase = 0; phase < 2; ++phase) {
    const PhaseShape s = Shape(p, phase);
    const double work = static_cast<double>(total_rows) * s.panels * s.k;
    const double target = work / (std::max(num_threads, 1) *
                                  static_cast<double>(kTasksPerThread));
    for (int64_t g = 0; g < p.num_groups; ++g) {
      for (int64_t r0 = p.group_offsets[g]; r0 < p.group_offsets[g + 1];
           r0 += kRowBlock) {
        const int64_t r1 = std::min(r0 + kRowBlock, p.group_offsets[g + 1]);
        const double per_panel = static_cast<double>(r1 - r0) * s.k;
        const int64_t chunk = std::clamp<int64_t>(
            static_cast<int64_t>(target / per_panel + 0.999), 1, s.panels);
        for (int64_t p0 = 0; p0 < s.panels; p0 += chunk) {
          if (count < capacity) {
            tasks[count] = {phase, static_cast<int32_t>(g),       r0, r1,
                            p0,    std::min(p0 + chunk, s.panels)};
          }
          ++count;
        }
      }
    }
  }
  return count;
}

namespace {

// The unfused gate/up epilogue: rows' g and u of panels [p0, p1) (stored
// interleaved as the fused weight packs them: panel p holds gate columns
// [16p, 16p + 16) then the matching up columns), plus biases, through the
// activation into h. Padding columns (>= inter) are written 0.
void ActivatePanels(const GroupedSwiglu& p, int32_t group,
                    float* const* gu_rows, float* const* h_rows, int64_t rows,
                    int64_t p0, int64_t p1) {
  const float* b1 = p.b1 != nullptr ? p.b1[group] : nullptr;
  const float* b3 = p.b3 != nullptr ? p.b3[group] : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const float* gu = gu_rows[r];
    float* h = h_rows[r];
    for (int64_t panel = p0; panel < p1; ++panel) {
      for (int64_t j = 0; j < kHalfPanel; ++j) {
        const int64_t c = panel * kHalfPanel + j;
        if (c >= p.inter) {
          h[c] = 0.0f;
          continue;
        }
        float g = gu[panel * kPanelWidth + j];
        float u = gu[panel * kPanelWidth + kHalfPanel + j];
        if (b1 != nullptr) g += b1[c];
        if (b3 != nullptr) u += b3[c];
        h[c] = GatedAct(p.act, g, u, p.act_alpha, p.act_limit, p.act_beta,
                        p.act_linear_beta);
      }
    }
  }
}

// The non-gated epilogue: rows' u of panels [p0, p1) (stored in h by the
// GEMM, 32 columns a panel), plus b3, through the activation in place.
// Padding columns (>= inter) are written 0.
void ActivateUpPanels(const GroupedSwiglu& p, int32_t group,
                      float* const* h_rows, int64_t rows, int64_t p0,
                      int64_t p1) {
  const float* b3 = p.b3 != nullptr ? p.b3[group] : nullptr;
  const int64_t c0 = p0 * kPanelWidth;
  const int64_t c1 = std::min(p1 * kPanelWidth, PaddedInter(p.inter));
  for (int64_t r = 0; r < rows; ++r) {
    float* h = h_rows[r];
    for (int64_t c = c0; c < c1; ++c) {
      if (c >= p.inter) {
        h[c] = 0.0f;
        continue;
      }
      const float u = b3 != nullptr ? h[c] + b3[c] : h[c];
      h[c] = GatedAct(p.act, 0.0f, u, p.act_alpha, p.act_limit, p.act_beta,
                      p.act_linear_beta);
    }
  }
}

// out columns of panels [p0, p1) += b2.
void AddDownBias(const float* b2, int64_t hidden, float* const* out_rows,
                 int64_t rows, int64_t p0, int64_t p1) {
  const int64_t c0 = p0 * kPanelWidth;
  const int64_t c1 = std::min(p1 * kPanelWidth, hidden);
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out_rows[r];
    for (int64_t c = c0; c < c1; ++c) o[c] += b2[c];
  }
}

}  // namespace

int RunGroupedSwiglu(const GroupedSwiglu& p, const SwigluTask* tasks,
                     int64_t num_tasks, float* h, float** h_rows,
                     int num_threads, float* gu, float** gu_rows) {
  const int64_t total_rows = p.group_offsets[p.num_groups];
  if (total_rows == 0 || num_tasks == 0) return 0;
  const int64_t ip = PaddedInter(p.inter);
  for (int64_t r = 0; r < total_rows; ++r) h_rows[r] = h + r * ip;
  const bool plain = p.plain();
  if (!plain && p.gated) {
    for (int64_t r = 0; r < total_rows; ++r) gu_rows[r] = gu + r * 2 * ip;
  }
  const int64_t first_down =
      std::find_if(tasks, tasks + num_tasks,
                   [](const SwigluTask& t) { return t.phase == 1; }) -
      tasks;
  auto run = [&](const SwigluTask& t) {
    const int64_t rows = t.row_end - t.row_begin;
    if (t.phase == 0 && !p.gated) {
      GemmPanels(p.in_rows + t.row_begin, rows, p.hidden, p.w13[t.group],
                 p.format, t.panel_begin, t.panel_end, Epilogue::kStore, ip,
                 h_rows + t.row_begin);
      ActivateUpPanels(p, t.group, h_rows + t.row_begin, rows, t.panel_begin,
                       t.panel_end);
    } else if (t.phase == 0 && plain) {
      GemmPanels(p.in_rows + t.row_begin, rows, p.hidden, p.w13[t.group],
                 p.format, t.panel_begin, t.panel_end, Epilogue::kSwiGLU,
                 2 * ip, h_rows + t.row_begin);
    } else if (t.phase == 0) {
      GemmPanels(p.in_rows + t.row_begin, rows, p.hidden, p.w13[t.group],
                 p.format, t.panel_begin, t.panel_end, Epilogue::kStore, 2 * ip,
                 gu_rows + t.row_begin);
      ActivatePanels(p, t.group, gu_rows + t.row_begin, h_rows + t.row_begin,
                     rows, t.panel_begin, t.panel_end);
    } else {
      GemmPanels(h_rows + t.row_begin, rows, ip, p.w2[t.group], p.format,
                 t.panel_begin, t.panel_end, Epilogue::kStore, p.hidden,
                 p.out_rows + t.row_begin);
      if (p.b2 != nullptr) {
        AddDownBias(p.b2[t.group], p.hidden, p.out_rows + t.row_begin, rows,
                    t.panel_begin, t.panel_end);
      }
    }
  };
#pragma omp parallel num_threads(std::max(num_threads, 1))
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < first_down; ++i) run(tasks[i]);
      // The implicit barrier: every h row is complete before the down pass.
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = first_down; i < num_tasks; ++i) run(tasks[i]);
  }
  return 0;
}

void ParallelGemm(const float* const* a_rows, int64_t m, int64_t k,
                  const void* packed, WeightFormat format, int64_t n_out,
                  float* const* out_rows, int num_threads) {
  if (m <= 0) return;
  const int64_t panels = NumPanels(n_out);
  const int64_t row_blocks = (m + kRowBlock - 1) / kRowBlock;
  // Each task packs its rows of A once: give it as many panels as still
  // leaves kTasksPerThread tasks a thread (all of them for tall GEMMs such
  // as the gate's; one each for a decode step's few rows). Which panels a
  // call computes does not change any output bit.
  const int64_t chunk = std::clamp<int64_t>(
      row_blocks * panels / (std::max(num_threads, 1) * kTasksPerThread), 1,
      panels);
  const int64_t chunks = (panels + chunk - 1) / chunk;
  const int64_t tasks = row_blocks * chunks;
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(std::max(1, std::min <int>(num_threads, tasks)))
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t rb = t / chunks, p0 = t % chunks * chunk;
    const int64_t r0 = rb * kRowBlock, r1 = std::min(m, r0 + kRowBlock);
    GemmPanels(a_rows + r0, r1 - r0, k, packed, format, p0,
               std::min(p0 + chunk, panels), Epilogue::kStore, n_out,
               out_rows + r0);
  }
}

}  // namespace moe::kernels::cpu
