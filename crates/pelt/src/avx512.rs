//! AVX-512 versions of PELT's two hot loops, picked at run time where the CPU
//! has AVX-512F and VL; the portable code in the parent module is the fallback and
//! the reference the tests compare against.
//!
//! - [`squared_distances_from`]: exact distances, eight frames per vector.
//!   Each lane still adds its features one by one from zero with separate
//!   subtract, multiply and add (no fused multiply-add), so every distance is
//!   bit-identical to the portable loop and to scipy.
//! - [`bracket_rows`]: the f32 Gram product for the median's bracket, as
//!   12 x 32 register tiles whose distances are classified before they leave
//!   the registers (no Gram block is written to memory).
//! - [`bracket_rows_int16`]: the same tiles over frames quantised to int16
//!   (laid out by [`QuantisedPanels`]), where the CPU also has AVX-512 VNNI: one `vpdpwssd` does
//!   two multiply-adds per lane, exactly, in int32 (twice the f32 rate).
//! - [`fast_squared_distances`]: f64 distances of arbitrary pairs in any
//!   summation order, to narrow the median's window before the exact pass.

use std::arch::x86_64::*;
use std::ops::Range;

use super::Bracket;
use super::avx2::{GramPanels, QuantisedPanels};

/// Rows per Gram tile: 12 rows x 2 vectors of 16 columns keep 24
/// accumulators in the 32 vector registers.
const TILE_ROWS: usize = 12;
/// Columns per Gram panel (one 512-bit vector of f32).
const PANEL: usize = 16;

pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl")
}

/// Whether the int16 Gram tiles can run.
pub(super) fn vnni_available() -> bool {
    available() && is_x86_feature_detected!("avx512vnni")
}

/// The entry points' guard: their `unsafe` calls rely on it.
fn assert_available() {
    assert!(
        available(),
        "the AVX-512 path is only chosen where the CPU has it"
    );
}

/// Squared distances from `anchor` to each frame of `others` into
/// `out[..others.len()]`, summed in scipy's order (see the module doc).
pub(super) fn squared_distances_from(
    anchor: &[f32],
    by_feature: &[f32],
    frames: usize,
    others: Range<usize>,
    out: &mut [f64],
) {
    assert_available();
    assert_eq!(by_feature.len(), anchor.len() * frames);
    assert!(others.end <= frames && out.len() >= others.len());
    let mut start = others.start;
    let mut written = 0;
    while start < others.end {
        let count = (others.end - start).min(DISTANCE_LANES * 4);
        let chunk = start..start + count;
        let out = &mut out[written..written + count];
        // SAFETY: AVX-512F and VL are present (asserted above); `chunk` lies
        // inside `0..frames` and `out` has one slot per frame of it.
        // Short bands (the usual case) would wait on the latency of each
        // running sum, so a chunk gets as many independent sums as it fills.
        unsafe {
            match count.div_ceil(DISTANCE_LANES) {
                1 => squared_distances_chunk::<1>(anchor, by_feature, frames, chunk, out),
                2 => squared_distances_chunk::<2>(anchor, by_feature, frames, chunk, out),
                3 => squared_distances_chunk::<3>(anchor, by_feature, frames, chunk, out),
                _ => squared_distances_chunk::<4>(anchor, by_feature, frames, chunk, out),
            }
        }
        start += count;
        written += count;
    }
}

/// Exact squared distances of arbitrary frame pairs of the row-major
/// `values`, eight pairs per vector (their rows gathered feature by
/// feature); each lane sums like [`squared_distances_from`].
pub(super) fn squared_distances_of_pairs(
    values: &[f32],
    dim: usize,
    pairs: &[(u32, u32)],
) -> Vec<f64> {
    assert_available();
    let frames = values.len() / dim;
    assert!(i32::try_from(values.len()).is_ok());
    assert!(
        pairs
            .iter()
            .all(|&(i, j)| (i as usize) < frames && (j as usize) < frames)
    );
    let mut out = vec![0.0f64; pairs.len()];
    for (chunk, out) in pairs
        .chunks(DISTANCE_LANES)
        .zip(out.chunks_mut(DISTANCE_LANES))
    {
        // SAFETY: AVX-512F and VL are present; every row offset is below
        // frames * dim, so offset + feature stays inside `values`.
        unsafe { squared_distances_of_pairs_chunk(values, dim, chunk, out) };
    }
    out
}

#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn squared_distances_of_pairs_chunk(
    values: &[f32],
    dim: usize,
    pairs: &[(u32, u32)],
    out: &mut [f64],
) {
    let mask: __mmask8 = ((1u16 << pairs.len()) - 1) as __mmask8;
    // Each lane's row offset (frame * dim) for one side of the pairs.
    let row_offsets = |side: fn(&(u32, u32)) -> u32| {
        let offsets: [i32; DISTANCE_LANES] = std::array::from_fn(|lane| {
            pairs
                .get(lane)
                .map_or(0, |pair| (side(pair) as usize * dim) as i32)
        });
        // SAFETY: eight i32 are one 256-bit vector.
        unsafe { _mm256_loadu_si256(offsets.as_ptr().cast()) }
    };
    let first = row_offsets(|pair| pair.0);
    let second = row_offsets(|pair| pair.1);
    let mut sum = _mm512_setzero_pd();
    for feature in 0..dim {
        // SAFETY: see the caller; masked-off lanes read nothing.
        let column = unsafe { values.as_ptr().add(feature) };
        let (a, b) = unsafe {
            (
                _mm256_mmask_i32gather_ps::<4>(_mm256_setzero_ps(), mask, first, column),
                _mm256_mmask_i32gather_ps::<4>(_mm256_setzero_ps(), mask, second, column),
            )
        };
        let diff = _mm512_sub_pd(_mm512_cvtps_pd(a), _mm512_cvtps_pd(b));
        sum = _mm512_add_pd(sum, _mm512_mul_pd(diff, diff));
    }
    // SAFETY: the mask covers the first pairs.len() <= out.len() lanes.
    unsafe { _mm512_mask_storeu_pd(out.as_mut_ptr(), mask, sum) };
}

/// f64 lanes per vector.
const DISTANCE_LANES: usize = 8;

/// Up to `VECTORS * 8` frames of `chunk`, the lanes past its end masked off.
#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn squared_distances_chunk<const VECTORS: usize>(
    anchor: &[f32],
    by_feature: &[f32],
    frames: usize,
    chunk: Range<usize>,
    out: &mut [f64],
) {
    let masks: [__mmask8; VECTORS] = std::array::from_fn(|vector| {
        let lanes = chunk
            .len()
            .saturating_sub(vector * DISTANCE_LANES)
            .min(DISTANCE_LANES);
        ((1u16 << lanes) - 1) as __mmask8
    });
    let mut sums = [_mm512_setzero_pd(); VECTORS];
    for (feature, &value) in anchor.iter().enumerate() {
        let a = _mm512_set1_pd(f64::from(value));
        // SAFETY: feature * frames + chunk.start + lanes < by_feature.len()
        // for every unmasked lane; masked lanes are not read.
        let column = unsafe { by_feature.as_ptr().add(feature * frames + chunk.start) };
        for (vector, sum) in sums.iter_mut().enumerate() {
            let b = unsafe {
                _mm512_cvtps_pd(_mm256_maskz_loadu_ps(
                    masks[vector],
                    column.add(vector * DISTANCE_LANES),
                ))
            };
            let diff = _mm512_sub_pd(a, b);
            *sum = _mm512_add_pd(*sum, _mm512_mul_pd(diff, diff));
        }
    }
    for (vector, sum) in sums.iter().enumerate() {
        // SAFETY: unmasked lanes are below chunk.len() <= out.len().
        unsafe {
            _mm512_mask_storeu_pd(
                out.as_mut_ptr().add(vector * DISTANCE_LANES),
                masks[vector],
                *sum,
            )
        };
    }
}

/// Adds to `bracket` every pair `(i, j)`, `i` in `rows`, `j > i`, whose
/// approximate distance `(|a|^2 + |b|^2) - 2 a.b` (f32) is below `low`
/// (counted) or inside `[low, high]` (kept).
pub(super) fn bracket_rows(
    centred: &[f32],
    layout: &GramPanels,
    rows: Range<usize>,
    (low, high): (f32, f32),
    bracket: &mut Bracket,
) {
    assert_available();
    assert_eq!(centred.len(), layout.frames * layout.dim);
    assert!(rows.end <= layout.frames && layout.width == PANEL);
    // SAFETY: AVX-512F is present; see the loads' bounds in the function.
    unsafe { bracket_rows_avx512(centred, layout, rows, (low, high), bracket) }
}

#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn bracket_rows_avx512(
    centred: &[f32],
    layout: &GramPanels,
    rows: Range<usize>,
    (low, high): (f32, f32),
    bracket: &mut Bracket,
) {
    let (frames, dim) = (layout.frames, layout.dim);
    let classify = TileClassifier::new(&layout.norms, frames, 2.0, (low, high));
    // The tile's rows feature-major (`[feature][12]`), so that each
    // broadcast is at a fixed offset from one pointer; rows past the end of
    // the range stay zero and their results are unused.
    let mut tile = vec![0.0f32; dim * TILE_ROWS];
    let mut products = [[0.0f32; 2 * PANEL]; TILE_ROWS];
    let mut first_row = rows.start;
    while first_row < rows.end {
        let tile_rows = (rows.end - first_row).min(TILE_ROWS);
        tile.fill(0.0);
        for (r, row) in centred[first_row * dim..(first_row + tile_rows) * dim]
            .chunks_exact(dim)
            .enumerate()
        {
            for (feature, &value) in row.iter().enumerate() {
                tile[feature * TILE_ROWS + r] = value;
            }
        }
        let tile_ptr = tile.as_ptr();
        // Tiles start at the pair of panels holding the first later frame.
        let mut column = (first_row + 1) / (2 * PANEL) * (2 * PANEL);
        while column < frames {
            // SAFETY: `column` is a multiple of 32 below `frames`, so both
            // panels lie inside the padded layout.
            let panel_a = unsafe { layout.panels.as_ptr().add(column * dim) };
            let panel_b = unsafe { panel_a.add(PANEL * dim) };
            let mut sums = [[_mm512_setzero_ps(); 2]; TILE_ROWS];
            for feature in 0..dim {
                // SAFETY: feature < dim: inside both panels and the tile.
                let (b0, b1, a) = unsafe {
                    (
                        _mm512_loadu_ps(panel_a.add(feature * PANEL)),
                        _mm512_loadu_ps(panel_b.add(feature * PANEL)),
                        tile_ptr.add(feature * TILE_ROWS),
                    )
                };
                for (r, sum) in sums.iter_mut().enumerate() {
                    let a = _mm512_set1_ps(unsafe { *a.add(r) });
                    sum[0] = _mm512_fmadd_ps(a, b0, sum[0]);
                    sum[1] = _mm512_fmadd_ps(a, b1, sum[1]);
                }
            }
            // Through memory: indexing the accumulators by a loop variable
            // below would keep them on the stack inside the hot loop.
            for (sum, product) in sums.iter().zip(products.iter_mut()) {
                // SAFETY: two 16-float stores into a 32-float row.
                unsafe {
                    _mm512_storeu_ps(product.as_mut_ptr(), sum[0]);
                    _mm512_storeu_ps(product.as_mut_ptr().add(PANEL), sum[1]);
                }
            }
            // SAFETY: `column + 32` is within the padded norms.
            unsafe { classify.tile(&products, first_row..first_row + tile_rows, column, bracket) };
            column += 2 * PANEL;
        }
        first_row += tile_rows;
    }
}

/// Turns a tile's dot products into distances `(|a|^2 + |b|^2) - factor * p`
/// (one rounding, fused) and adds the pairs `j > i` to a [`Bracket`].
struct TileClassifier<'a> {
    /// Squared norms, padded to whole tiles.
    norms: &'a [f32],
    frames: usize,
    factor: f32,
    low: f32,
    high: f32,
}

impl<'a> TileClassifier<'a> {
    fn new(norms: &'a [f32], frames: usize, factor: f32, (low, high): (f32, f32)) -> Self {
        Self {
            norms,
            frames,
            factor,
            low,
            high,
        }
    }

    /// `products[r][c]` is the dot product of frame `rows.start + r` with
    /// frame `column + c`.
    ///
    /// # Safety
    /// AVX-512F and VL are present and `column + 32 <= norms.len()`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn tile(
        &self,
        products: &[[f32; 2 * PANEL]; TILE_ROWS],
        rows: Range<usize>,
        column: usize,
        bracket: &mut Bracket,
    ) {
        let low_v = _mm512_set1_ps(self.low);
        let high_v = _mm512_set1_ps(self.high);
        let factor = _mm512_set1_ps(self.factor);
        let lane_offsets = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let frames_v = _mm512_set1_epi32(self.frames as i32);
        for offset in [0, PANEL] {
            let first_column = column + offset;
            // SAFETY: first_column + 16 <= padded length of `norms`.
            let column_norms = unsafe { _mm512_loadu_ps(self.norms.as_ptr().add(first_column)) };
            let column_index =
                _mm512_add_epi32(_mm512_set1_epi32(first_column as i32), lane_offsets);
            let real = _mm512_cmplt_epi32_mask(column_index, frames_v);
            for (i, product) in rows.clone().zip(products) {
                let later =
                    real & _mm512_cmpgt_epi32_mask(column_index, _mm512_set1_epi32(i as i32));
                if later == 0 {
                    continue;
                }
                let norm_sums = _mm512_add_ps(_mm512_set1_ps(self.norms[i]), column_norms);
                // SAFETY: 16 floats of a 32-float row, at 0 or 16.
                let product = unsafe { _mm512_loadu_ps(product.as_ptr().add(offset)) };
                let distances = _mm512_fnmadd_ps(factor, product, norm_sums);
                let below = _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(later, distances, low_v);
                let inside = _mm512_mask_cmp_ps_mask::<_CMP_GE_OQ>(later, distances, low_v)
                    & _mm512_cmp_ps_mask::<_CMP_LE_OQ>(distances, high_v);
                bracket.below += below.count_ones() as usize;
                if inside != 0 {
                    let mut values = [0.0f32; PANEL];
                    // SAFETY: 16 f32 into a 16-element array.
                    unsafe { _mm512_storeu_ps(values.as_mut_ptr(), distances) };
                    let mut lanes = inside;
                    while lanes != 0 {
                        let lane = lanes.trailing_zeros() as usize;
                        lanes &= lanes - 1;
                        bracket
                            .inside
                            .push((values[lane], i as u32, (first_column + lane) as u32));
                    }
                }
            }
        }
    }
}

/// [`bracket_rows`] over [`QuantisedPanels`]: the distance of a pair is
/// `(|a|^2 + |b|^2) - 2 s^2 (qa . qb)`, the dot product exact in int32.
pub(super) fn bracket_rows_int16(
    layout: &QuantisedPanels,
    rows: Range<usize>,
    (low, high): (f32, f32),
    bracket: &mut Bracket,
) {
    assert!(
        vnni_available(),
        "the int16 tiles are only chosen with VNNI"
    );
    assert!(rows.end <= layout.frames && layout.width == PANEL);
    // SAFETY: AVX-512F, VL and VNNI are present; see the loads' bounds in
    // the function.
    unsafe { bracket_rows_int16_avx512(layout, rows, (low, high), bracket) }
}

#[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
unsafe fn bracket_rows_int16_avx512(
    layout: &QuantisedPanels,
    rows: Range<usize>,
    (low, high): (f32, f32),
    bracket: &mut Bracket,
) {
    let (frames, pairs) = (layout.frames, layout.feature_pairs);
    let classify = TileClassifier::new(&layout.norms, frames, layout.product_factor, (low, high));
    // `[feature pair][12]`, as the f32 tile; rows past the range stay zero.
    let mut tile = vec![0i32; pairs * TILE_ROWS];
    let mut products = [[0.0f32; 2 * PANEL]; TILE_ROWS];
    let mut first_row = rows.start;
    while first_row < rows.end {
        let tile_rows = (rows.end - first_row).min(TILE_ROWS);
        tile.fill(0);
        for r in 0..tile_rows {
            let row = first_row + r;
            let panel = &layout.panels[row / PANEL * pairs * PANEL..][..pairs * PANEL];
            for pair in 0..pairs {
                tile[pair * TILE_ROWS + r] = panel[pair * PANEL + row % PANEL];
            }
        }
        let tile_ptr = tile.as_ptr();
        let mut column = (first_row + 1) / (2 * PANEL) * (2 * PANEL);
        while column < frames {
            // SAFETY: `column` is a multiple of 32 below `frames`, so both
            // panels lie inside the padded layout.
            let panel_a = unsafe { layout.panels.as_ptr().add(column * pairs) };
            let panel_b = unsafe { panel_a.add(PANEL * pairs) };
            let mut sums = [[_mm512_setzero_si512(); 2]; TILE_ROWS];
            for pair in 0..pairs {
                // SAFETY: pair < pairs: inside both panels and the tile.
                let (b0, b1, a) = unsafe {
                    (
                        _mm512_loadu_si512(panel_a.add(pair * PANEL).cast()),
                        _mm512_loadu_si512(panel_b.add(pair * PANEL).cast()),
                        tile_ptr.add(pair * TILE_ROWS),
                    )
                };
                for (r, sum) in sums.iter_mut().enumerate() {
                    let a = _mm512_set1_epi32(unsafe { *a.add(r) });
                    sum[0] = _mm512_dpwssd_epi32(sum[0], a, b0);
                    sum[1] = _mm512_dpwssd_epi32(sum[1], a, b1);
                }
            }
            for (sum, product) in sums.iter().zip(products.iter_mut()) {
                // SAFETY: two 16-float stores into a 32-float row.
                unsafe {
                    _mm512_storeu_ps(product.as_mut_ptr(), _mm512_cvtepi32_ps(sum[0]));
                    _mm512_storeu_ps(product.as_mut_ptr().add(PANEL), _mm512_cvtepi32_ps(sum[1]));
                }
            }
            // SAFETY: `column + 32` is within the padded norms.
            unsafe { classify.tile(&products, first_row..first_row + tile_rows, column, bracket) };
            column += 2 * PANEL;
        }
        first_row += tile_rows;
    }
}

/// f64 squared distances of arbitrary pairs of the row-major `values`, with
/// fused multiply-adds in any order (within a relative `gamma_{dim+2}` of
/// the exact value, like scipy's own).
pub(super) fn fast_squared_distances(values: &[f32], dim: usize, pairs: &[(u32, u32)]) -> Vec<f64> {
    assert_available();
    let frames = values.len() / dim;
    assert!(
        pairs
            .iter()
            .all(|&(i, j)| (i as usize) < frames && (j as usize) < frames)
    );
    // SAFETY: AVX-512F and VL are present and every pair indexes a frame.
    unsafe { fast_squared_distances_avx512(values, dim, pairs) }
}

#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn fast_squared_distances_avx512(
    values: &[f32],
    dim: usize,
    pairs: &[(u32, u32)],
) -> Vec<f64> {
    const STEP: usize = 8;
    let tail_mask: __mmask8 = ((1u16 << (dim % STEP)) - 1) as __mmask8;
    pairs
        .iter()
        .map(|&(i, j)| {
            // SAFETY: both frames lie inside `values` (checked by the
            // caller); the last chunk is masked to the frame's end.
            let (a, b) = unsafe {
                (
                    values.as_ptr().add(i as usize * dim),
                    values.as_ptr().add(j as usize * dim),
                )
            };
            let difference = |feature: usize, mask: __mmask8| unsafe {
                _mm512_sub_pd(
                    _mm512_cvtps_pd(_mm256_maskz_loadu_ps(mask, a.add(feature))),
                    _mm512_cvtps_pd(_mm256_maskz_loadu_ps(mask, b.add(feature))),
                )
            };
            let mut sums = [_mm512_setzero_pd(); 2];
            let mut feature = 0;
            while feature + 2 * STEP <= dim {
                for (k, sum) in sums.iter_mut().enumerate() {
                    let diff = difference(feature + k * STEP, 0xff);
                    *sum = _mm512_fmadd_pd(diff, diff, *sum);
                }
                feature += 2 * STEP;
            }
            if feature + STEP <= dim {
                let diff = difference(feature, 0xff);
                sums[0] = _mm512_fmadd_pd(diff, diff, sums[0]);
                feature += STEP;
            }
            if tail_mask != 0 {
                let diff = difference(feature, tail_mask);
                sums[1] = _mm512_fmadd_pd(diff, diff, sums[1]);
            }
            _mm512_reduce_add_pd(_mm512_add_pd(sums[0], sums[1]))
        })
        .collect()
}
