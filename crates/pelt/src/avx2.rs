//! AVX2 + FMA versions of PELT's hot loops, picked at run time on x86-64
//! CPUs without AVX-512 (Zen 3 and older, most laptops). Same contracts as
//! the AVX-512 module, half the vector width:
//!
//! - [`squared_distances_from`]: exact distances, four frames per vector,
//!   each lane summing its features in scipy's order with separate
//!   subtract, multiply and add: bit-identical to the portable loop.
//! - [`bracket_rows`]: the f32 Gram product for the median's bracket, as
//!   6 x 16 register tiles (12 of the 16 vector registers accumulate),
//!   classified before any Gram block reaches memory.
//! - [`bracket_rows_int16`]: the same tiles over frames quantised to int16;
//!   `vpmaddwd` multiplies and pairs 16 of them per instruction, exactly,
//!   into int32 (twice the f32 rate where the CPU has two such units).
//! - [`fast_squared_distances`]: any-order f64 distances of arbitrary pairs.
//! - [`quantised_squared_distances`]: the int16 approximations of arbitrary
//!   pairs (the median's sample), from a frame-by-frame copy of the levels.
//!
//! [`feature_major`] (it needs only AVX), [`GramPanels`] and
//! [`QuantisedPanels`] serve the AVX-512 path as well.

use std::arch::x86_64::*;
use std::ops::Range;

use super::Bracket;

/// Rows per Gram tile: 6 rows x 2 vectors of 8 columns.
const TILE_ROWS: usize = 6;
/// Columns per Gram panel (one 256-bit vector of f32).
const PANEL: usize = 8;
/// f64 lanes per vector.
const DISTANCE_LANES: usize = 4;
/// Most vectors of independent running sums per distance chunk: enough to
/// cover the add latency on two add pipes without spilling registers.
const DISTANCE_VECTORS: usize = 4;

pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// The entry points' guard: their `unsafe` calls rely on it.
fn assert_available() {
    assert!(
        available(),
        "the AVX2 path is only chosen where the CPU has AVX2 and FMA"
    );
}

/// Frames stored feature-major (`values[feature * frames + frame]`), so that
/// one feature of consecutive frames is one vector load; written over
/// `out` (its length and allocation kept).
pub(super) fn feature_major(
    row_major: &[f32],
    frames: usize,
    dim: usize,
    mut out: Vec<f32>,
) -> Vec<f32> {
    assert_available();
    assert_eq!(row_major.len(), frames * dim);
    assert_eq!(out.len(), row_major.len());
    // SAFETY: AVX is present (AVX2 implies it) and both buffers hold
    // frames * dim values.
    unsafe { feature_major_avx(row_major, frames, dim, &mut out) };
    out
}

/// 8 x 8 blocks transposed in registers; the frames and features past the
/// last whole block one by one.
#[target_feature(enable = "avx")]
unsafe fn feature_major_avx(row_major: &[f32], frames: usize, dim: usize, out: &mut [f32]) {
    const BLOCK: usize = 8;
    let (whole_frames, whole_features) = (frames / BLOCK * BLOCK, dim / BLOCK * BLOCK);
    let (source, target) = (row_major.as_ptr(), out.as_mut_ptr());
    for first_frame in (0..whole_frames).step_by(BLOCK) {
        for first_feature in (0..whole_features).step_by(BLOCK) {
            // SAFETY: rows first_frame..+8 and features first_feature..+8
            // lie inside both buffers.
            unsafe {
                let row =
                    |r: usize| _mm256_loadu_ps(source.add((first_frame + r) * dim + first_feature));
                let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
                let (r4, r5, r6, r7) = (row(4), row(5), row(6), row(7));
                let t0 = _mm256_unpacklo_ps(r0, r1);
                let t1 = _mm256_unpackhi_ps(r0, r1);
                let t2 = _mm256_unpacklo_ps(r2, r3);
                let t3 = _mm256_unpackhi_ps(r2, r3);
                let t4 = _mm256_unpacklo_ps(r4, r5);
                let t5 = _mm256_unpackhi_ps(r4, r5);
                let t6 = _mm256_unpacklo_ps(r6, r7);
                let t7 = _mm256_unpackhi_ps(r6, r7);
                let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
                let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
                let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
                let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
                let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
                let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
                let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
                let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
                let columns = [
                    _mm256_permute2f128_ps::<0x20>(u0, u4),
                    _mm256_permute2f128_ps::<0x20>(u1, u5),
                    _mm256_permute2f128_ps::<0x20>(u2, u6),
                    _mm256_permute2f128_ps::<0x20>(u3, u7),
                    _mm256_permute2f128_ps::<0x31>(u0, u4),
                    _mm256_permute2f128_ps::<0x31>(u1, u5),
                    _mm256_permute2f128_ps::<0x31>(u2, u6),
                    _mm256_permute2f128_ps::<0x31>(u3, u7),
                ];
                for (offset, column) in columns.into_iter().enumerate() {
                    _mm256_storeu_ps(
                        target.add((first_feature + offset) * frames + first_frame),
                        column,
                    );
                }
            }
        }
    }
    for frame in 0..frames {
        let features = if frame < whole_frames {
            whole_features
        } else {
            0
        };
        for feature in features..dim {
            out[feature * frames + frame] = row_major[frame * dim + feature];
        }
    }
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
        let count = (others.end - start).min(DISTANCE_LANES * DISTANCE_VECTORS);
        let chunk = start..start + count;
        let out = &mut out[written..written + count];
        // SAFETY: AVX2 and FMA are present (asserted above); `chunk` lies
        // inside `0..frames` and `out` has one slot per frame of it. A
        // chunk gets as many independent sums as it fills.
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

/// Lane masks (all bits set for a lane that is read) for `lanes` of four.
#[inline]
#[target_feature(enable = "avx2")]
fn lane_mask(lanes: usize) -> __m128i {
    _mm_cmpgt_epi32(_mm_set1_epi32(lanes as i32), _mm_setr_epi32(0, 1, 2, 3))
}

/// Up to `VECTORS * 4` frames of `chunk`; lanes past its end are neither
/// read nor written.
#[target_feature(enable = "avx2,fma")]
unsafe fn squared_distances_chunk<const VECTORS: usize>(
    anchor: &[f32],
    by_feature: &[f32],
    frames: usize,
    chunk: Range<usize>,
    out: &mut [f64],
) {
    let lanes = |vector: usize| {
        chunk
            .len()
            .saturating_sub(vector * DISTANCE_LANES)
            .min(DISTANCE_LANES)
    };
    let masks: [__m128i; VECTORS] = std::array::from_fn(|vector| lane_mask(lanes(vector)));
    let mut sums = [_mm256_setzero_pd(); VECTORS];
    for (feature, &value) in anchor.iter().enumerate() {
        let a = _mm256_set1_pd(f64::from(value));
        // SAFETY: feature * frames + chunk.start + lane < by_feature.len()
        // for every unmasked lane; masked lanes are not read.
        let column = unsafe { by_feature.as_ptr().add(feature * frames + chunk.start) };
        for (vector, sum) in sums.iter_mut().enumerate() {
            let b = unsafe {
                _mm256_cvtps_pd(_mm_maskload_ps(
                    column.add(vector * DISTANCE_LANES),
                    masks[vector],
                ))
            };
            let diff = _mm256_sub_pd(a, b);
            *sum = _mm256_add_pd(*sum, _mm256_mul_pd(diff, diff));
        }
    }
    for (vector, sum) in sums.iter().enumerate() {
        let mask = _mm256_cvtepi32_epi64(masks[vector]);
        // SAFETY: unmasked lanes are below chunk.len() <= out.len().
        unsafe { _mm256_maskstore_pd(out.as_mut_ptr().add(vector * DISTANCE_LANES), mask, *sum) };
    }
}

/// Frames whose distances [`squared_distances_block`] computes together.
pub(super) const BLOCK_ANCHORS: usize = 4;

/// Squared distances of each frame of `anchors` (at most
/// [`BLOCK_ANCHORS`]) to each frame of `others`, summed in scipy's order:
/// `out[a * others.len() + k]` for anchor `anchors.start + a` and frame
/// `others.start + k`. Several anchors share each loaded frame and give
/// every frame as many independent running sums, which a single anchor
/// against a short band cannot.
pub(super) fn squared_distances_block(
    (row_major, by_feature): (&[f32], &[f32]),
    frames: usize,
    anchors: Range<usize>,
    others: Range<usize>,
    out: &mut [f64],
) {
    assert_available();
    assert!(frames > 0 && row_major.len().is_multiple_of(frames));
    assert_eq!(row_major.len(), by_feature.len());
    let dim = row_major.len() / frames;
    assert!(!anchors.is_empty() && anchors.len() <= BLOCK_ANCHORS && anchors.end <= frames);
    assert!(others.end <= frames && out.len() >= anchors.len() * others.len());
    // The anchors' values widened, `[feature][anchor]`; missing anchors
    // repeat the last one and their results are dropped.
    let mut anchor_values = vec![0.0f64; dim * BLOCK_ANCHORS];
    let anchor_rows: [&[f32]; BLOCK_ANCHORS] = std::array::from_fn(|a| {
        let anchor = (anchors.start + a).min(anchors.end - 1);
        &row_major[anchor * dim..(anchor + 1) * dim]
    });
    // SAFETY: AVX is present; each row has `dim` values and
    // `anchor_values` four per feature.
    unsafe { widen_anchors(anchor_rows, &mut anchor_values) };
    let mut start = others.start;
    while start < others.end {
        let count = (others.end - start).min(2 * DISTANCE_LANES);
        // SAFETY: AVX2 and FMA are present; `start..start + count` lies
        // inside `0..frames`, and each anchor's row of `out` has a slot for
        // every frame of `others`.
        unsafe {
            if count > DISTANCE_LANES {
                squared_distances_block_chunk::<2>(
                    &anchor_values,
                    by_feature,
                    frames,
                    (start, count),
                    (anchors.len(), others.clone()),
                    out,
                )
            } else {
                squared_distances_block_chunk::<1>(
                    &anchor_values,
                    by_feature,
                    frames,
                    (start, count),
                    (anchors.len(), others.clone()),
                    out,
                )
            }
        }
        start += count;
    }
}

/// `out[feature * 4 + a] = rows[a][feature]` as f64: four features of the
/// four rows at a time, transposed in registers.
#[target_feature(enable = "avx")]
unsafe fn widen_anchors(rows: [&[f32]; BLOCK_ANCHORS], out: &mut [f64]) {
    let dim = rows[0].len();
    assert!(rows.iter().all(|row| row.len() == dim) && out.len() == dim * BLOCK_ANCHORS);
    let whole = dim / 4 * 4;
    for feature in (0..whole).step_by(4) {
        // SAFETY: feature + 4 <= dim for every row and (feature + 4) * 4
        // <= out.len().
        unsafe {
            let widened: [__m256d; BLOCK_ANCHORS] = std::array::from_fn(|a| {
                _mm256_cvtps_pd(_mm_loadu_ps(rows[a].as_ptr().add(feature)))
            });
            let low01 = _mm256_unpacklo_pd(widened[0], widened[1]);
            let high01 = _mm256_unpackhi_pd(widened[0], widened[1]);
            let low23 = _mm256_unpacklo_pd(widened[2], widened[3]);
            let high23 = _mm256_unpackhi_pd(widened[2], widened[3]);
            let target = out.as_mut_ptr().add(feature * BLOCK_ANCHORS);
            _mm256_storeu_pd(target, _mm256_permute2f128_pd::<0x20>(low01, low23));
            _mm256_storeu_pd(
                target.add(4),
                _mm256_permute2f128_pd::<0x20>(high01, high23),
            );
            _mm256_storeu_pd(target.add(8), _mm256_permute2f128_pd::<0x31>(low01, low23));
            _mm256_storeu_pd(
                target.add(12),
                _mm256_permute2f128_pd::<0x31>(high01, high23),
            );
        }
    }
    for feature in whole..dim {
        for (a, row) in rows.iter().enumerate() {
            out[feature * BLOCK_ANCHORS + a] = f64::from(row[feature]);
        }
    }
}

/// `count` frames from `start` (up to `VECTORS * 4`) against every anchor.
#[target_feature(enable = "avx2,fma")]
unsafe fn squared_distances_block_chunk<const VECTORS: usize>(
    anchor_values: &[f64],
    by_feature: &[f32],
    frames: usize,
    (start, count): (usize, usize),
    (anchors, others): (usize, Range<usize>),
    out: &mut [f64],
) {
    let masks: [__m128i; VECTORS] = std::array::from_fn(|vector| {
        lane_mask(
            count
                .saturating_sub(vector * DISTANCE_LANES)
                .min(DISTANCE_LANES),
        )
    });
    let mut sums = [[_mm256_setzero_pd(); VECTORS]; BLOCK_ANCHORS];
    for (feature, values) in anchor_values.chunks_exact(BLOCK_ANCHORS).enumerate() {
        // SAFETY: feature * frames + start + lane < by_feature.len() for
        // every unmasked lane; masked lanes are not read.
        let column = unsafe { by_feature.as_ptr().add(feature * frames + start) };
        let b: [__m256d; VECTORS] = std::array::from_fn(|vector| unsafe {
            _mm256_cvtps_pd(_mm_maskload_ps(
                column.add(vector * DISTANCE_LANES),
                masks[vector],
            ))
        });
        for (value, sums) in values.iter().zip(sums.iter_mut()) {
            let a = _mm256_broadcast_sd(value);
            for (sum, &b) in sums.iter_mut().zip(&b) {
                let diff = _mm256_sub_pd(a, b);
                *sum = _mm256_add_pd(*sum, _mm256_mul_pd(diff, diff));
            }
        }
    }
    let offset = start - others.start;
    for (anchor, sums) in sums.iter().enumerate().take(anchors) {
        for (vector, sum) in sums.iter().enumerate() {
            let mask = _mm256_cvtepi32_epi64(masks[vector]);
            // SAFETY: unmasked lanes are below `count`, inside the anchor's
            // row of `out`.
            unsafe {
                _mm256_maskstore_pd(
                    out.as_mut_ptr()
                        .add(anchor * others.len() + offset + vector * DISTANCE_LANES),
                    mask,
                    *sum,
                )
            };
        }
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
    // SAFETY: AVX2 and FMA are present and every pair indexes a frame.
    unsafe { fast_squared_distances_avx2(values, dim, pairs) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn fast_squared_distances_avx2(
    values: &[f32],
    dim: usize,
    pairs: &[(u32, u32)],
) -> Vec<f64> {
    const STEP: usize = DISTANCE_LANES;
    let tail_mask = lane_mask(dim % STEP);
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
            let difference = |feature: usize, mask: __m128i| unsafe {
                _mm256_sub_pd(
                    _mm256_cvtps_pd(_mm_maskload_ps(a.add(feature), mask)),
                    _mm256_cvtps_pd(_mm_maskload_ps(b.add(feature), mask)),
                )
            };
            let full = _mm_set1_epi32(-1);
            let mut sums = [_mm256_setzero_pd(); 4];
            let mut feature = 0;
            while feature + 4 * STEP <= dim {
                for (k, sum) in sums.iter_mut().enumerate() {
                    let diff = difference(feature + k * STEP, full);
                    *sum = _mm256_fmadd_pd(diff, diff, *sum);
                }
                feature += 4 * STEP;
            }
            while feature + STEP <= dim {
                let diff = difference(feature, full);
                sums[0] = _mm256_fmadd_pd(diff, diff, sums[0]);
                feature += STEP;
            }
            if !dim.is_multiple_of(STEP) {
                let diff = difference(feature, tail_mask);
                sums[1] = _mm256_fmadd_pd(diff, diff, sums[1]);
            }
            let total = _mm256_add_pd(
                _mm256_add_pd(sums[0], sums[1]),
                _mm256_add_pd(sums[2], sums[3]),
            );
            let halves = _mm_add_pd(
                _mm256_castpd256_pd128(total),
                _mm256_extractf128_pd::<1>(total),
            );
            _mm_cvtsd_f64(_mm_add_sd(halves, _mm_unpackhi_pd(halves, halves)))
        })
        .collect()
}

/// Centred f32 frames laid out for the f32 Gram tiles: columns in panels of
/// `width` frames (8 for AVX2, 16 for AVX-512), each panel feature-major
/// (`[feature][width]`), zero-padded to whole two-panel tiles; norms padded
/// alike.
pub(super) struct GramPanels {
    pub(super) panels: Vec<f32>,
    pub(super) norms: Vec<f32>,
    pub(super) frames: usize,
    pub(super) dim: usize,
    pub(super) width: usize,
}

impl GramPanels {
    #[inline(always)]
    pub(super) fn new(
        centred: &[f32],
        norms: &[f32],
        (frames, dim): (usize, usize),
        width: usize,
    ) -> Self {
        let padded_frames = frames.div_ceil(2 * width) * 2 * width;
        let mut panels = Vec::with_capacity(padded_frames * dim);
        // Written in order; the rows read for one panel stay in cache.
        for first in (0..padded_frames).step_by(width) {
            for feature in 0..dim {
                panels.extend((first..first + width).map(|frame| {
                    if frame < frames {
                        centred[frame * dim + feature]
                    } else {
                        0.0
                    }
                }));
            }
        }
        let mut norms = norms.to_vec();
        norms.resize(padded_frames, 0.0);
        Self {
            panels,
            norms,
            frames,
            dim,
            width,
        }
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
    // SAFETY: AVX2 and FMA are present; see the loads' bounds in the
    // function.
    unsafe { bracket_rows_avx2(centred, layout, rows, (low, high), bracket) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn bracket_rows_avx2(
    centred: &[f32],
    layout: &GramPanels,
    rows: Range<usize>,
    (low, high): (f32, f32),
    bracket: &mut Bracket,
) {
    let (frames, dim) = (layout.frames, layout.dim);
    // The tile's rows feature-major (`[feature][6]`), so that each
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
            // SAFETY: `column` is a multiple of 16 below `frames`, so both
            // panels lie inside the padded layout.
            let panel_a = unsafe { layout.panels.as_ptr().add(column * dim) };
            let panel_b = unsafe { panel_a.add(PANEL * dim) };
            let mut sums = [[_mm256_setzero_ps(); 2]; TILE_ROWS];
            for feature in 0..dim {
                // SAFETY: feature < dim: inside both panels and the tile.
                let (b0, b1, a) = unsafe {
                    (
                        _mm256_loadu_ps(panel_a.add(feature * PANEL)),
                        _mm256_loadu_ps(panel_b.add(feature * PANEL)),
                        tile_ptr.add(feature * TILE_ROWS),
                    )
                };
                for (r, sum) in sums.iter_mut().enumerate() {
                    let a = _mm256_broadcast_ss(unsafe { &*a.add(r) });
                    sum[0] = _mm256_fmadd_ps(a, b0, sum[0]);
                    sum[1] = _mm256_fmadd_ps(a, b1, sum[1]);
                }
            }
            // Through memory: indexing the accumulators by a loop variable
            // below would keep them on the stack inside the hot loop.
            for (sum, product) in sums.iter().zip(products.iter_mut()) {
                // SAFETY: two 8-float stores into a 16-float row.
                unsafe {
                    _mm256_storeu_ps(product.as_mut_ptr(), sum[0]);
                    _mm256_storeu_ps(product.as_mut_ptr().add(PANEL), sum[1]);
                }
            }
            // SAFETY: `column + 16` is within the padded norms.
            unsafe {
                classify_tile(
                    (&layout.norms, frames, 2.0),
                    &products,
                    first_row..first_row + tile_rows,
                    column,
                    (low, high),
                    bracket,
                )
            };
            column += 2 * PANEL;
        }
        first_row += tile_rows;
    }
}

/// Frames quantised to int16 for the integer Gram tiles: columns in panels
/// of `width` frames (8 for AVX2, 16 for AVX-512), each panel
/// `[feature pair][width]` with the two features of a pair in one i32 (the
/// operand layout of `vpmaddwd` and `vpdpwssd`), zero-padded to whole
/// two-panel tiles and an even number of features. The same levels are also
/// kept frame by frame (`rows`, each padded to whole vectors), for distances
/// of arbitrary pairs.
pub(super) struct QuantisedPanels {
    pub(super) panels: Vec<i32>,
    rows: Vec<i32>,
    /// i32 per frame in `rows`.
    row_stride: usize,
    /// f32 squared norms of the (unquantised) centred frames, padded.
    pub(super) norms: Vec<f32>,
    pub(super) frames: usize,
    pub(super) feature_pairs: usize,
    /// `2 s^2` for the quantisation step `s`, in f32.
    pub(super) product_factor: f32,
    /// Frames per panel.
    pub(super) width: usize,
}

impl Drop for QuantisedPanels {
    fn drop(&mut self) {
        super::reused::give_back(|b| &mut b.panels, std::mem::take(&mut self.panels));
        super::reused::give_back(|b| &mut b.quantised_rows, std::mem::take(&mut self.rows));
    }
}

impl QuantisedPanels {
    pub(super) fn new(frames: usize, dim: usize, product_factor: f32, width: usize) -> Self {
        let padded_frames = frames.div_ceil(2 * width) * 2 * width;
        let feature_pairs = dim.div_ceil(2);
        let row_stride = feature_pairs.div_ceil(PANEL) * PANEL;
        // Every frame's panel slots and row are written by `set_panel`;
        // only the panels past the last frame's must be zero.
        let mut panels =
            super::reused::take_to_overwrite(|b| &mut b.panels, padded_frames * feature_pairs);
        panels[frames.div_ceil(width) * width * feature_pairs..].fill(0);
        Self {
            panels,
            rows: super::reused::take_to_overwrite(|b| &mut b.quantised_rows, frames * row_stride),
            row_stride,
            norms: vec![0.0; padded_frames],
            frames,
            feature_pairs,
            product_factor,
            width,
        }
    }

    /// The frames `..at` and `at..` (`at` a multiple of the panel width),
    /// each to be stored by its own thread.
    pub(super) fn split_at_frame(&mut self, at: usize) -> (PanelsMut<'_>, PanelsMut<'_>) {
        assert!(at.is_multiple_of(self.width) && at <= self.frames);
        let (panels_before, panels_after) = self.panels.split_at_mut(at * self.feature_pairs);
        let (rows_before, rows_after) = self.rows.split_at_mut(at * self.row_stride);
        let (norms_before, norms_after) = self.norms.split_at_mut(at);
        let part = |panels, rows, norms, first| PanelsMut {
            panels,
            rows,
            norms,
            first,
            feature_pairs: self.feature_pairs,
            row_stride: self.row_stride,
            width: self.width,
        };
        (
            part(panels_before, rows_before, norms_before, 0),
            part(panels_after, rows_after, norms_after, at),
        )
    }
}

/// The panels and norms of the frames from `first` on (a panel boundary) of
/// a [`QuantisedPanels`].
pub(super) struct PanelsMut<'a> {
    panels: &'a mut [i32],
    rows: &'a mut [i32],
    norms: &'a mut [f32],
    first: usize,
    feature_pairs: usize,
    row_stride: usize,
    width: usize,
}

impl PanelsMut<'_> {
    /// Stores the panel of the frames from `first` (a panel boundary):
    /// `levels` holds its `width` frames as `[frame][feature pair]`, two
    /// int16 to an i32 (absent frames zero), `norms` the squared norm of
    /// each frame present.
    pub(super) fn set_panel(&mut self, first: usize, levels: &[i32], norms: &[f32]) {
        let local = first - self.first;
        let size = self.width * self.feature_pairs;
        assert!(local.is_multiple_of(self.width) && levels.len() == size);
        assert!(norms.len() <= self.width && local + norms.len() <= self.norms.len());
        let panel = &mut self.panels[local * self.feature_pairs..][..size];
        assert_available();
        // SAFETY: AVX is present (AVX2 implies it). i32 and f32 share size
        // and alignment, every bit pattern is an f32, and the transpose
        // only moves bits.
        unsafe {
            feature_major_avx(
                std::slice::from_raw_parts(levels.as_ptr().cast::<f32>(), size),
                self.width,
                self.feature_pairs,
                std::slice::from_raw_parts_mut(panel.as_mut_ptr().cast::<f32>(), size),
            )
        };
        for (slot, frame_levels) in levels
            .chunks_exact(self.feature_pairs)
            .enumerate()
            .take(norms.len())
        {
            let row = &mut self.rows[(local + slot) * self.row_stride..][..self.row_stride];
            row[..self.feature_pairs].copy_from_slice(frame_levels);
            row[self.feature_pairs..].fill(0);
        }
        self.norms[local..local + norms.len()].copy_from_slice(norms);
    }
}

/// Approximate squared distances of arbitrary pairs from [`QuantisedPanels`]:
/// `(|a|^2 + |b|^2) - 2 s^2 (qa . qb)` with the dot product exact in int32
/// and the rest in f64, so each is within the Gram tiles' error bound of the
/// exact distance (it rounds less than they do).
pub(super) fn quantised_squared_distances(
    layout: &QuantisedPanels,
    pairs: &[(u32, u32)],
) -> Vec<f64> {
    assert_available();
    let frames = layout.frames;
    assert!(
        pairs
            .iter()
            .all(|&(i, j)| (i as usize) < frames && (j as usize) < frames)
    );
    // SAFETY: AVX2 is present and every pair indexes a stored frame.
    unsafe { quantised_squared_distances_avx2(layout, pairs) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn quantised_squared_distances_avx2(
    layout: &QuantisedPanels,
    pairs: &[(u32, u32)],
) -> Vec<f64> {
    let stride = layout.row_stride;
    let factor = f64::from(layout.product_factor);
    pairs
        .iter()
        .map(|&(i, j)| {
            let (i, j) = (i as usize, j as usize);
            // SAFETY: rows i and j hold `stride` (a multiple of 8) i32 each.
            let (a, b) = unsafe {
                (
                    layout.rows.as_ptr().add(i * stride),
                    layout.rows.as_ptr().add(j * stride),
                )
            };
            let mut sums = [_mm256_setzero_si256(); 2];
            for (vector, offset) in (0..stride).step_by(PANEL).enumerate() {
                // SAFETY: offset + 8 <= stride.
                let products = unsafe {
                    _mm256_madd_epi16(
                        _mm256_loadu_si256(a.add(offset).cast()),
                        _mm256_loadu_si256(b.add(offset).cast()),
                    )
                };
                sums[vector % 2] = _mm256_add_epi32(sums[vector % 2], products);
            }
            let sum = _mm256_add_epi32(sums[0], sums[1]);
            let half = _mm_add_epi32(
                _mm256_castsi256_si128(sum),
                _mm256_extracti128_si256::<1>(sum),
            );
            let half = _mm_add_epi32(half, _mm_shuffle_epi32::<0b01_00_11_10>(half));
            let dot = _mm_cvtsi128_si32(_mm_add_epi32(
                half,
                _mm_shuffle_epi32::<0b10_11_00_01>(half),
            ));
            (f64::from(layout.norms[i]) + f64::from(layout.norms[j])) - factor * f64::from(dot)
        })
        .collect()
}

/// [`bracket_rows`] over [`QuantisedPanels`] of width 8: the distance of a
/// pair is `(|a|^2 + |b|^2) - 2 s^2 (qa . qb)`, the dot product exact in
/// int32 (levels are within +-32767 and every partial sum is bounded by
/// the quantised norms, below 2^31).
pub(super) fn bracket_rows_int16(
    layout: &QuantisedPanels,
    rows: Range<usize>,
    (low, high): (f32, f32),
    bracket: &mut Bracket,
) {
    assert_available();
    assert!(rows.end <= layout.frames && layout.width == PANEL);
    // SAFETY: AVX2 and FMA are present; see the loads' bounds in the
    // function.
    unsafe { bracket_rows_int16_avx2(layout, rows, (low, high), bracket) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn bracket_rows_int16_avx2(
    layout: &QuantisedPanels,
    rows: Range<usize>,
    (low, high): (f32, f32),
    bracket: &mut Bracket,
) {
    let (frames, pairs) = (layout.frames, layout.feature_pairs);
    // `[feature pair][6]`, as the f32 tile; rows past the range stay zero.
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
            // SAFETY: `column` is a multiple of 16 below `frames`, so both
            // panels lie inside the padded layout.
            let panel_a = unsafe { layout.panels.as_ptr().add(column * pairs) };
            let panel_b = unsafe { panel_a.add(PANEL * pairs) };
            let mut sums = [[_mm256_setzero_si256(); 2]; TILE_ROWS];
            for pair in 0..pairs {
                // SAFETY: pair < pairs: inside both panels and the tile.
                let (b0, b1, a) = unsafe {
                    (
                        _mm256_loadu_si256(panel_a.add(pair * PANEL).cast()),
                        _mm256_loadu_si256(panel_b.add(pair * PANEL).cast()),
                        tile_ptr.add(pair * TILE_ROWS),
                    )
                };
                for (r, sum) in sums.iter_mut().enumerate() {
                    let a = _mm256_set1_epi32(unsafe { *a.add(r) });
                    sum[0] = _mm256_add_epi32(sum[0], _mm256_madd_epi16(a, b0));
                    sum[1] = _mm256_add_epi32(sum[1], _mm256_madd_epi16(a, b1));
                }
            }
            for (sum, product) in sums.iter().zip(products.iter_mut()) {
                // SAFETY: two 8-float stores into a 16-float row.
                unsafe {
                    _mm256_storeu_ps(product.as_mut_ptr(), _mm256_cvtepi32_ps(sum[0]));
                    _mm256_storeu_ps(product.as_mut_ptr().add(PANEL), _mm256_cvtepi32_ps(sum[1]));
                }
            }
            // SAFETY: `column + 16` is within the padded norms.
            unsafe {
                classify_tile(
                    (&layout.norms, frames, layout.product_factor),
                    &products,
                    first_row..first_row + tile_rows,
                    column,
                    (low, high),
                    bracket,
                )
            };
            column += 2 * PANEL;
        }
        first_row += tile_rows;
    }
}

/// Turns a tile's dot products (`products[r][c]`: frame `rows.start + r`
/// with frame `column + c`) into distances `(|a|^2 + |b|^2) - factor p`
/// (one rounding, fused) and adds the pairs `j > i` to `bracket`.
///
/// # Safety
/// AVX2 and FMA are present and `column + 16 <= norms.len()`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn classify_tile(
    (norms, frames, factor): (&[f32], usize, f32),
    products: &[[f32; 2 * PANEL]; TILE_ROWS],
    rows: Range<usize>,
    column: usize,
    (low, high): (f32, f32),
    bracket: &mut Bracket,
) {
    let low_v = _mm256_set1_ps(low);
    let high_v = _mm256_set1_ps(high);
    let factor = _mm256_set1_ps(factor);
    for offset in [0, PANEL] {
        let first_column = column + offset;
        // Lanes that are real frames (not padding).
        let real = (1u32 << frames.saturating_sub(first_column).min(PANEL)) - 1;
        // SAFETY: first_column + 8 <= padded length of `norms`.
        let column_norms = unsafe { _mm256_loadu_ps(norms.as_ptr().add(first_column)) };
        for (i, product) in rows.clone().zip(products) {
            // Lanes of frames after `i`.
            let later = real & !((1u32 << (i + 1).saturating_sub(first_column).min(PANEL)) - 1);
            if later == 0 {
                continue;
            }
            let norm_sums = _mm256_add_ps(_mm256_set1_ps(norms[i]), column_norms);
            // SAFETY: 8 floats of a 16-float row, at 0 or 8.
            let product = unsafe { _mm256_loadu_ps(product.as_ptr().add(offset)) };
            let distances = _mm256_fnmadd_ps(factor, product, norm_sums);
            let not_below = _mm256_cmp_ps::<_CMP_GE_OQ>(distances, low_v);
            let below = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(distances, low_v)) as u32;
            let inside = _mm256_movemask_ps(_mm256_and_ps(
                not_below,
                _mm256_cmp_ps::<_CMP_LE_OQ>(distances, high_v),
            )) as u32;
            bracket.below += (below & later).count_ones() as usize;
            let mut lanes = inside & later;
            if lanes != 0 {
                let mut values = [0.0f32; PANEL];
                // SAFETY: 8 f32 into an 8-element array.
                unsafe { _mm256_storeu_ps(values.as_mut_ptr(), distances) };
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

/// Centres one frame: `out = (f64(row) - mean) as f32` value by value (the
/// portable centring's arithmetic); returns the squared norm of `out` in
/// f64, summed as the portable `squared_norm` sums it, and the largest
/// magnitude in `out`.
pub(super) fn centre_row(row: &[f32], mean: &[f64], out: &mut [f32]) -> (f64, f32) {
    assert_available();
    assert!(row.len() == mean.len() && row.len() == out.len());
    // SAFETY: AVX2 and FMA are present and all three slices have one
    // value per feature.
    unsafe { centre_row_avx2(row, mean, out) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn centre_row_avx2(row: &[f32], mean: &[f64], out: &mut [f32]) -> (f64, f32) {
    let dim = row.len();
    let whole = dim / 8 * 8;
    let (row_ptr, mean_ptr, out_ptr) = (row.as_ptr(), mean.as_ptr(), out.as_mut_ptr());
    // Lanes 0-3 and 4-7 of the portable sum's eight.
    let mut norm = [_mm256_setzero_pd(); 2];
    let mut largest = _mm256_setzero_ps();
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
    for feature in (0..whole).step_by(8) {
        // SAFETY: feature + 8 <= whole <= dim for all three slices.
        unsafe {
            let values = _mm256_loadu_ps(row_ptr.add(feature));
            let low = _mm256_sub_pd(
                _mm256_cvtps_pd(_mm256_castps256_ps128(values)),
                _mm256_loadu_pd(mean_ptr.add(feature)),
            );
            let high = _mm256_sub_pd(
                _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(values)),
                _mm256_loadu_pd(mean_ptr.add(feature + 4)),
            );
            let (low, high) = (_mm256_cvtpd_ps(low), _mm256_cvtpd_ps(high));
            let centred = _mm256_set_m128(high, low);
            _mm256_storeu_ps(out_ptr.add(feature), centred);
            largest = _mm256_max_ps(largest, _mm256_and_ps(centred, magnitude));
            let (low, high) = (_mm256_cvtps_pd(low), _mm256_cvtps_pd(high));
            norm[0] = _mm256_add_pd(norm[0], _mm256_mul_pd(low, low));
            norm[1] = _mm256_add_pd(norm[1], _mm256_mul_pd(high, high));
        }
    }
    let mut lanes = [0.0f64; 8];
    // SAFETY: two stores of four f64 into eight.
    unsafe {
        _mm256_storeu_pd(lanes.as_mut_ptr(), norm[0]);
        _mm256_storeu_pd(lanes.as_mut_ptr().add(4), norm[1]);
    }
    let mut magnitudes = [0.0f32; 8];
    // SAFETY: eight f32 into eight.
    unsafe { _mm256_storeu_ps(magnitudes.as_mut_ptr(), largest) };
    let mut largest = magnitudes.iter().fold(0.0f32, |m, &v| m.max(v));
    let mut tail = 0.0f64;
    for feature in whole..dim {
        let value = (f64::from(row[feature]) - mean[feature]) as f32;
        out[feature] = value;
        tail += f64::from(value) * f64::from(value);
        largest = largest.max(value.abs());
    }
    (lanes.iter().sum::<f64>() + tail, largest)
}

/// Quantises one centred frame: `levels = round(clamp(x / step))` (nearest,
/// ties to even, within +-32767), computed in f32 from `inverse_step` as
/// the portable arithmetic would; returns the squared norms of the residual
/// `x - step * level` and of the levels, both in f64 (the levels' exactly).
pub(super) fn quantise_row(
    centred: &[f32],
    (step, inverse_step): (f64, f32),
    levels: &mut [i16],
) -> (f64, f64) {
    assert_available();
    assert_eq!(centred.len(), levels.len());
    // SAFETY: AVX2 and FMA are present and both slices have one value per
    // feature.
    unsafe { quantise_row_avx2(centred, (step, inverse_step), levels) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn quantise_row_avx2(
    centred: &[f32],
    (step, inverse_step): (f64, f32),
    levels: &mut [i16],
) -> (f64, f64) {
    let dim = centred.len();
    let whole = dim / 8 * 8;
    let most = f32::from(i16::MAX);
    // Adding and subtracting 1.5 * 2^23 rounds |v| < 2^22 to an integer.
    const ROUNDING: f32 = 12_582_912.0;
    let level_of = |x: f32| ((x * inverse_step).clamp(-most, most) + ROUNDING) - ROUNDING;
    let (inverse_v, rounding) = (_mm256_set1_ps(inverse_step), _mm256_set1_ps(ROUNDING));
    let (lowest, highest) = (_mm256_set1_ps(-most), _mm256_set1_ps(most));
    let step_v = _mm256_set1_pd(step);
    let mut residual = [_mm256_setzero_pd(); 2];
    let mut level_norm = [_mm256_setzero_pd(); 2];
    for feature in (0..whole).step_by(8) {
        // SAFETY: feature + 8 <= whole <= dim for both slices.
        unsafe {
            let x = _mm256_loadu_ps(centred.as_ptr().add(feature));
            let clamped =
                _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(x, inverse_v), lowest), highest);
            let level = _mm256_sub_ps(_mm256_add_ps(clamped, rounding), rounding);
            let integers = _mm256_cvtps_epi32(level);
            let packed = _mm_packs_epi32(
                _mm256_castsi256_si128(integers),
                _mm256_extracti128_si256::<1>(integers),
            );
            _mm_storeu_si128(levels.as_mut_ptr().add(feature).cast(), packed);
            for (half, (x, level)) in [
                (_mm256_castps256_ps128(x), _mm256_castps256_ps128(level)),
                (
                    _mm256_extractf128_ps::<1>(x),
                    _mm256_extractf128_ps::<1>(level),
                ),
            ]
            .into_iter()
            .enumerate()
            {
                let level = _mm256_cvtps_pd(level);
                let error = _mm256_sub_pd(_mm256_cvtps_pd(x), _mm256_mul_pd(level, step_v));
                residual[half] = _mm256_add_pd(residual[half], _mm256_mul_pd(error, error));
                level_norm[half] = _mm256_add_pd(level_norm[half], _mm256_mul_pd(level, level));
            }
        }
    }
    let mut residual_lanes = [0.0f64; 8];
    let mut level_lanes = [0.0f64; 8];
    // SAFETY: two stores of four f64 into eight, twice.
    unsafe {
        _mm256_storeu_pd(residual_lanes.as_mut_ptr(), residual[0]);
        _mm256_storeu_pd(residual_lanes.as_mut_ptr().add(4), residual[1]);
        _mm256_storeu_pd(level_lanes.as_mut_ptr(), level_norm[0]);
        _mm256_storeu_pd(level_lanes.as_mut_ptr().add(4), level_norm[1]);
    }
    for (lane, feature) in (whole..dim).enumerate() {
        let level = level_of(centred[feature]);
        levels[feature] = level as i16;
        let level = f64::from(level);
        residual_lanes[lane] += (f64::from(centred[feature]) - level * step).powi(2);
        level_lanes[lane] += level * level;
    }
    (residual_lanes.iter().sum(), level_lanes.iter().sum())
}
