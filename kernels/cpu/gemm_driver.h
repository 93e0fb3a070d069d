// Internal: the blocking loop shared by the per-ISA micro-kernels. Each ISA
// translation unit includes this inside its anonymous namespace, so every
// copy has internal linkage and is compiled for that unit's instruction set
// only (a shared inline copy could be resolved to the wrong one).
//
// Requires, in the including namespace:
//   kTileRows, kKBlock (a multiple of kFp8BlockK and kMxBlock), and
//   kTiles<W>[rows - 1](ap, kc, w, tile, first, prefetch, scale) computing a
//   rows x 32 tile over kc steps; `scale` (FP8, W = uint8_t, MXFP4, W =
//   Mxfp4Byte, and NVFP4, W = Nvfp4Byte) points at the block scales of the
//   first of those steps (NVFP4's column scales are applied here, after the
//   K sum: ApplyColumnScales); and
//   for those two Decode(w, kc, scale, prefetch, out) writing kc x 32 fp32
//   dequantised weights.
// Not a standalone header: no include guard on purpose.

// Weights up to this size (a short-K GEMM's panels) are read from L2.
constexpr int64_t kShortKWeightBytes = 256 << 10;

// W elements between consecutive panels: FP8 and MXFP4 panels carry their
// scales.
template <typename W>
int64_t PanelStride(int64_t k) {
  if constexpr (kIsMxfp4<W>) {
    return Mxfp4PanelBytes(k);
  } else if constexpr (kIsNvfp4<W>) {
    return Nvfp4PanelBytes(k);
  } else if constexpr (sizeof(W) == 1) {
    return Fp8PanelBytes(k);
  } else {
    return kPanelWidth * k;
  }
}

template <typename W>
void Run(const float* const* a_rows, int64_t m, int64_t k, const W* packed,
         int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
         int64_t n_out, float* const* out_rows) {
  static_assert(kKBlock % kFp8BlockK == 0 && kKBlock % kMxBlock == 0 &&
                    kKBlock % kNvBlock == 0,
                "K blocks must hold whole scales");
  float* apack = ThreadScratch(kScratchA, static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; i += kTileRows) {
    const int rows = static_cast<int>(m - i < kTileRows ? m - i : kTileRows);
    PackATile(a_rows + i, rows, k, apack + i * k);
  }
  const int64_t tiles = (m + kTileRows - 1) / kTileRows;
  if constexpr (!kBlockScaled<W>) {
    // Short K (the down projection at small I): all the panels' weights sit
    // in L2, and the cost is writing C. Row tile outer, panel inner, so each
    // output row is written front to back instead of 128 bytes every n_out
    // columns across all m rows. The same tile calls: the same bits.
    if (k <= kKBlock && (panel_end - panel_begin) * PanelStride<W>(k) *
                                static_cast<int64_t>(sizeof(W)) <=
                            kShortKWeightBytes) {
      float* ctile = ThreadScratch(kScratchC, kTileRows * kPanelWidth);
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t i = t * kTileRows;
        const int rows =
            static_cast<int>(m - i < kTileRows ? m - i : kTileRows);
        for (int64_t p = panel_begin; p < panel_end; ++p) {
          const W* w = packed + p * PanelStride<W>(k);
          kTiles<W>[rows - 1](apack + i * k, k, w, ctile, true, w, nullptr);
          StoreTile(ctile, rows, p, epilogue, n_out, out_rows + i);
        }
      }
      return;
    }
  }
  // Partial C tiles of all m rows for one panel: [tile][kTileRows][32].
  float* ctile = ThreadScratch(kScratchC, tiles * kTileRows * kPanelWidth);
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const W* w = packed + p * PanelStride<W>(k);
    const ScaleOf<W>* scales =
        kBlockScaled<W>
            ? reinterpret_cast<const ScaleOf<W>*>(w + kStepElems<W> * k)
            : nullptr;
    // K blocks: a kKBlock x 32 slice of the panel stays in L1 while every
    // row tile streams past it.
    for (int64_t kb = 0; kb < k; kb += kKBlock) {
      const int64_t kc = k - kb < kKBlock ? k - kb : kKBlock;
      // While the first row tile works on this block, prefetch the next one
      // (the rest of this panel, or the start of the next panel): weights
      // come from DRAM and the hardware prefetcher alone leaves it idle.
      // Later tiles "prefetch" the block they read, which is in L1 already.
      const W* block = w + kb * kStepElems<W>;
      const W* next = kb + kKBlock < k    ? w + (kb + kKBlock) * kStepElems<W>
                      : p + 1 < panel_end ? w + PanelStride<W>(k)
                                          : block;
      if constexpr (kBlockScaled<W>) {
        // Several row tiles: decode the FP8 or MXFP4 block to fp32 once, in
        // L1, and run the fp32 tiles over it, rather than convert it in
        // every tile (the conversion shares the FMA ports: a quarter of the
        // compute).
        if (tiles > 1) {
          float* wf = ThreadScratch(kScratchW, kKBlock * kPanelWidth);
          Decode(block, kc, scales + kb / kScaleBlockK<W> * kPanelWidth, next,
                 wf);
          for (int64_t t = 0; t < tiles; ++t) {
            const int64_t i = t * kTileRows;
            const int rows =
                static_cast<int>(m - i < kTileRows ? m - i : kTileRows);
            kTiles<float>[rows - 1](apack + i * k + kb * rows, kc, wf,
                                    ctile + t * kTileRows * kPanelWidth,
                                    kb == 0, wf, nullptr);
          }
          continue;
        }
      }
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t i = t * kTileRows;
        const int rows =
            static_cast<int>(m - i < kTileRows ? m - i : kTileRows);
        kTiles<W>[rows - 1](
            apack + i * k + kb * rows, kc, block,
            ctile + t * kTileRows * kPanelWidth, kb == 0, t == 0 ? next : block,
            scales == nullptr ? nullptr
                              : scales + kb / kScaleBlockK<W> * kPanelWidth);
      }
    }
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i = t * kTileRows;
      const int rows = static_cast<int>(m - i < kTileRows ? m - i : kTileRows);
      ApplyColumnScales(w, k, ctile + t * kTileRows * kPanelWidth, rows);
      StoreTile(ctile + t * kTileRows * kPanelWidth, rows, p, epilogue, n_out,
                out_rows + i);
    }
  }
}
