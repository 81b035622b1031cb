//! PELT change-point detection with the RBF (Gaussian kernel) segment cost.
//!
//! This is a drop-in for `ruptures.Pelt(model="rbf", min_size, jump).fit(x).predict(pen)`
//! (checked against ruptures 1.1.10): same admissible breakpoint grid, same pruning rule, same
//! tie-breaking, same median-heuristic bandwidth, same kernel clipping. The
//! returned breakpoints are segment ends in ascending order and always finish
//! with the number of frames, as ruptures returns them.
//!
//! Cost of a segment `[a, b)` over the Gram matrix `K` is
//! `(b - a) - sum(K[a..b, a..b]) / (b - a)` (the diagonal of `K` is all ones).
//! Kernel entries are `exp(-clamp(gamma * |x_i - x_j|^2, 0.01, 100))` for
//! `i != j`; by default `gamma = 1 / median` of all pairwise squared distances
//! (or 1 when that median is 0).
//!
//! Block sums come from a 2-D prefix table over jump-sized cells, held in
//! fixed point, so every segment cost is O(1) after one O(n^2 * dim) pass.
//! Memory: the n(n-1)/2 pairwise distances as f64 (twice, briefly, while the
//! median is found) plus `(n / jump + 2)^2` 16-byte prefix entries; about
//! 75 MB at n = 3000 with the default jump.
//!
//! Exact ties. Distances and the heuristic gamma are bit-identical to scipy's,
//! and segment costs here come from exact block sums. ruptures instead sums
//! each Gram block with numpy, whose rounding depends on the block's shape.
//! When two segmentations have mathematically equal cost — which takes
//! exactly repeated frames, e.g. noise-free or coarsely quantised synthetic
//! signals — this module keeps the earlier candidate start (ruptures'
//! tie rule applied to exact values) while ruptures follows its rounding
//! noise, so the two can pick different, equally optimal breakpoints.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Settings for [`pelt_rbf`]. Defaults are ruptures' `Pelt` defaults
/// (`min_size=2`, `jump=5`, median-heuristic gamma) with `pen=5`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeltParams {
    /// Cost added per segment; larger values give fewer change points.
    pub penalty: f64,
    /// Shortest allowed segment, in frames.
    pub min_size: usize,
    /// Breakpoints are only considered at multiples of this many frames.
    pub jump: usize,
    /// RBF bandwidth; `None` picks `1 / median` pairwise squared distance.
    pub gamma: Option<f64>,
}

impl Default for PeltParams {
    fn default() -> Self {
        Self {
            penalty: 5.0,
            min_size: 2,
            jump: 5,
            gamma: None,
        }
    }
}

/// Why a segmentation could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PeltError {
    #[error("the signal has no frames; pass at least min_size frames to segment")]
    EmptySignal,
    #[error("frames have no features; every frame needs at least one value")]
    ZeroDimension,
    #[error(
        "frame {frame} has {found} values but frame 0 has {expected}; all frames must have the same dimension"
    )]
    RaggedRows {
        frame: usize,
        expected: usize,
        found: usize,
    },
    #[error(
        "flat signal holds {len} values, which is not a whole number of frames of dimension {dim}; check the dimension or the buffer"
    )]
    FlatLengthMismatch { len: usize, dim: usize },
    #[error(
        "frame {frame}, feature {feature} is {value}; replace NaN or infinite features before segmenting"
    )]
    NonFiniteValue {
        frame: usize,
        feature: usize,
        value: f32,
    },
    #[error("min_size must be at least 1 (got 0); use 1 to allow one-frame segments")]
    MinSizeZero,
    #[error("jump must be at least 1 (got 0); use 1 to consider every frame as a breakpoint")]
    JumpZero,
    #[error("penalty must be a finite number >= 0 (got {0}); the default is 5.0")]
    InvalidPenalty(f64),
    #[error(
        "gamma must be a finite number > 0 (got {0}); leave it unset to use the median heuristic"
    )]
    InvalidGamma(f64),
    #[error(
        "the signal has {frames} frames, fewer than min_size = {min_size}; lower min_size or pass a longer signal"
    )]
    SignalTooShort { frames: usize, min_size: usize },
    #[error(
        "no admissible segmentation ends at frame {end} (ruptures raises ValueError here too; only reachable with min_size > jump); lower min_size to at most jump"
    )]
    NoAdmissiblePartition { end: usize },
}

/// Breakpoints together with the kernel bandwidth that produced them.
#[derive(Debug, Clone, PartialEq)]
pub struct RbfSegmentation {
    /// Segment ends, ascending; the last one is the number of frames.
    pub breakpoints: Vec<usize>,
    /// The gamma actually used (the heuristic's pick when none was given;
    /// 1.0 for a one-frame signal, where no pairwise distance exists).
    pub gamma: f64,
}

/// Segments `frames` (one feature vector per frame) and returns the
/// breakpoints ruptures would return.
pub fn pelt_rbf<R: AsRef<[f32]>>(
    frames: &[R],
    params: &PeltParams,
) -> Result<Vec<usize>, PeltError> {
    Ok(pelt_rbf_segmentation(frames, params)?.breakpoints)
}

/// Same as [`pelt_rbf`] for a row-major buffer of `values.len() / dim` frames.
pub fn pelt_rbf_flat(
    values: &[f32],
    dim: usize,
    params: &PeltParams,
) -> Result<Vec<usize>, PeltError> {
    Ok(pelt_rbf_flat_segmentation(values, dim, params)?.breakpoints)
}

/// [`pelt_rbf`] that also reports the gamma used.
pub fn pelt_rbf_segmentation<R: AsRef<[f32]>>(
    frames: &[R],
    params: &PeltParams,
) -> Result<RbfSegmentation, PeltError> {
    validate_params(params)?;
    let signal = FrameMatrix::from_rows(frames)?;
    segment(&signal, params)
}

/// [`pelt_rbf_flat`] that also reports the gamma used.
pub fn pelt_rbf_flat_segmentation(
    values: &[f32],
    dim: usize,
    params: &PeltParams,
) -> Result<RbfSegmentation, PeltError> {
    validate_params(params)?;
    let signal = FrameMatrix::from_flat(values, dim)?;
    segment(&signal, params)
}

fn validate_params(params: &PeltParams) -> Result<(), PeltError> {
    if params.min_size == 0 {
        return Err(PeltError::MinSizeZero);
    }
    if params.jump == 0 {
        return Err(PeltError::JumpZero);
    }
    if !(params.penalty.is_finite() && params.penalty >= 0.0) {
        return Err(PeltError::InvalidPenalty(params.penalty));
    }
    if let Some(gamma) = params.gamma
        && !(gamma.is_finite() && gamma > 0.0)
    {
        return Err(PeltError::InvalidGamma(gamma));
    }
    Ok(())
}

/// Frames widened to f64, because scipy's `pdist` (which ruptures uses)
/// computes distances on float64 copies of the input.
struct FrameMatrix {
    values: Vec<f64>,
    frames: usize,
    dim: usize,
}

impl FrameMatrix {
    fn from_rows<R: AsRef<[f32]>>(rows: &[R]) -> Result<Self, PeltError> {
        let Some(first) = rows.first() else {
            return Err(PeltError::EmptySignal);
        };
        let dim = first.as_ref().len();
        if dim == 0 {
            return Err(PeltError::ZeroDimension);
        }
        let mut values = Vec::with_capacity(rows.len() * dim);
        for (frame, row) in rows.iter().enumerate() {
            let row = row.as_ref();
            if row.len() != dim {
                return Err(PeltError::RaggedRows {
                    frame,
                    expected: dim,
                    found: row.len(),
                });
            }
            push_finite(&mut values, row, frame)?;
        }
        Ok(Self {
            values,
            frames: rows.len(),
            dim,
        })
    }

    fn from_flat(flat: &[f32], dim: usize) -> Result<Self, PeltError> {
        if dim == 0 {
            return Err(PeltError::ZeroDimension);
        }
        if flat.is_empty() {
            return Err(PeltError::EmptySignal);
        }
        if !flat.len().is_multiple_of(dim) {
            return Err(PeltError::FlatLengthMismatch {
                len: flat.len(),
                dim,
            });
        }
        let mut values = Vec::with_capacity(flat.len());
        for (frame, row) in flat.chunks_exact(dim).enumerate() {
            push_finite(&mut values, row, frame)?;
        }
        Ok(Self {
            values,
            frames: flat.len() / dim,
            dim,
        })
    }

    fn frame(&self, index: usize) -> &[f64] {
        &self.values[index * self.dim..(index + 1) * self.dim]
    }

    /// Squared distances for all pairs `i < j` in scipy's condensed order
    /// (row `i`, then increasing `j`).
    ///
    /// Each distance is summed feature by feature from zero, the order scipy
    /// uses, so results are bit-identical to `pdist(..., "sqeuclidean")`.
    /// The loop runs feature-outer over a feature-major copy so that one
    /// anchor frame is compared with all later frames in contiguous, SIMD-able
    /// strides; each pair still sees its features in order.
    fn condensed_squared_distances(&self) -> Vec<f64> {
        let (n, dim) = (self.frames, self.dim);
        let mut by_feature = vec![0.0f64; n * dim];
        for (frame, row) in self.values.chunks_exact(dim).enumerate() {
            for (feature, &value) in row.iter().enumerate() {
                by_feature[feature * n + frame] = value;
            }
        }

        let mut distances = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        let mut row_sums = vec![0.0f64; n];
        for i in 0..n {
            let later = &mut row_sums[i + 1..];
            later.fill(0.0);
            // Four features per sweep: the running sums stay in registers
            // across them instead of round-tripping through memory.
            let anchor = self.frame(i);
            let mut feature = 0;
            while feature + 4 <= dim {
                let column = |f: usize| &by_feature[f * n + i + 1..(f + 1) * n][..later.len()];
                let (c0, c1, c2, c3) = (
                    column(feature),
                    column(feature + 1),
                    column(feature + 2),
                    column(feature + 3),
                );
                let a = &anchor[feature..feature + 4];
                for (j, sum) in later.iter_mut().enumerate() {
                    let d0 = a[0] - c0[j];
                    let d1 = a[1] - c1[j];
                    let d2 = a[2] - c2[j];
                    let d3 = a[3] - c3[j];
                    *sum = *sum + d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3;
                }
                feature += 4;
            }
            for (f, &a) in anchor.iter().enumerate().skip(feature) {
                let column = &by_feature[f * n + i + 1..(f + 1) * n];
                for (sum, &other) in later.iter_mut().zip(column) {
                    let diff = a - other;
                    *sum += diff * diff;
                }
            }
            distances.extend_from_slice(later);
        }
        distances
    }
}

fn push_finite(values: &mut Vec<f64>, row: &[f32], frame: usize) -> Result<(), PeltError> {
    for (feature, &value) in row.iter().enumerate() {
        if !value.is_finite() {
            return Err(PeltError::NonFiniteValue {
                frame,
                feature,
                value,
            });
        }
        values.push(f64::from(value));
    }
    Ok(())
}

/// numpy's median: the middle element, or the mean of the two middle ones.
fn median(mut values: Vec<f64>) -> f64 {
    let count = values.len();
    let upper_index = count / 2;
    let (lower_part, upper, _) = values.select_nth_unstable_by(upper_index, f64::total_cmp);
    let upper = *upper;
    if count % 2 == 1 {
        return upper;
    }
    let lower = lower_part
        .iter()
        .copied()
        .max_by(f64::total_cmp)
        .expect("an even, non-zero count leaves a lower half");
    (lower + upper) / 2.0
}

fn median_heuristic_gamma(distances: &[f64]) -> f64 {
    if distances.is_empty() {
        // One frame: no off-diagonal kernel entry exists, so gamma is moot.
        return 1.0;
    }
    let middle = median(distances.to_vec());
    if middle != 0.0 { 1.0 / middle } else { 1.0 }
}

/// Kernel sums are accumulated as integers in units of 2^-62. Integer sums are
/// exact and associative, so a block sum obtained by subtracting prefix sums
/// carries no cancellation error (an f64 prefix table would lose about
/// `n^2 * 1e-16` absolutely). The only error is truncating each entry to the
/// grid (< 2.2e-19), which after the division by the segment length leaves
/// a segment cost off by under `length * 2.2e-19`, below one ulp of the cost.
/// 62 bits keep every entry within an i64, whose float conversion is a single
/// instruction (an i128 conversion is a slow library call); sums use i128,
/// which has room for 2^65 entries.
const FIXED_POINT_BITS: i32 = 62;

/// O(1) RBF segment costs for segments whose ends lie on the jump grid
/// (multiples of `jump`, plus the signal length).
struct RbfGridCost {
    jump: usize,
    frames: usize,
    /// Number of grid boundaries, `cells + 1`.
    stride: usize,
    /// `prefix[x * stride + y]` = sum of `K[i][j]` over pairs `i < j` with
    /// `i` in cells `< x` and `j` in cells `< y`. Only `x <= y` is read.
    upper_pair_prefix: Vec<i128>,
}

impl RbfGridCost {
    fn new(distances: &[f64], frames: usize, jump: usize, gamma: f64) -> Self {
        let cells = frames.div_ceil(jump);
        let stride = cells + 1;
        let mut table = vec![0i128; stride * stride];
        let scale = 2f64.powi(FIXED_POINT_BITS);

        let mut pair = 0;
        for i in 0..frames {
            let row_offset = (i / jump + 1) * stride;
            let mut column_start = i + 1;
            while column_start < frames {
                let cell = column_start / jump;
                let column_end = ((cell + 1) * jump).min(frames);
                let mut cell_sum = 0i128;
                for &distance in &distances[pair..pair + (column_end - column_start)] {
                    // ruptures clips the scaled distance before exponentiating;
                    // identical frames therefore get exp(-0.01), not 1.
                    let kernel = (-(distance * gamma).clamp(1e-2, 1e2)).exp();
                    cell_sum += i128::from((kernel * scale) as i64);
                }
                table[row_offset + cell + 1] += cell_sum;
                pair += column_end - column_start;
                column_start = column_end;
            }
        }

        for x in 1..stride {
            for y in 1..stride {
                let above = table[(x - 1) * stride + y];
                let left = table[x * stride + y - 1];
                let diagonal = table[(x - 1) * stride + y - 1];
                table[x * stride + y] += above + left - diagonal;
            }
        }

        Self {
            jump,
            frames,
            stride,
            upper_pair_prefix: table,
        }
    }

    fn boundary_index(&self, position: usize) -> usize {
        if position == self.frames {
            self.stride - 1
        } else {
            debug_assert_eq!(
                position % self.jump,
                0,
                "segment ends must lie on the jump grid"
            );
            position / self.jump
        }
    }

    fn cost(&self, start: usize, end: usize) -> f64 {
        let a = self.boundary_index(start);
        let b = self.boundary_index(end);
        let prefix = |x: usize, y: usize| self.upper_pair_prefix[x * self.stride + y];
        // Pairs with both ends in [start, end): the table is zero below the
        // diagonal, so prefix(b, a) equals prefix(a, a) and two terms cancel.
        let upper_pairs = prefix(b, b) - prefix(a, b);
        let length = end - start;
        let block_fixed = ((length as i128) << FIXED_POINT_BITS) + 2 * upper_pairs;
        let block_sum = block_fixed as f64 * 2f64.powi(-FIXED_POINT_BITS);
        // Same expression order as ruptures: diagonal sum minus block mean.
        length as f64 - block_sum / length as f64
    }
}

fn segment(signal: &FrameMatrix, params: &PeltParams) -> Result<RbfSegmentation, PeltError> {
    let frames = signal.frames;
    let min_size = params.min_size;
    let jump = params.jump;
    if frames < min_size {
        return Err(PeltError::SignalTooShort { frames, min_size });
    }

    let distances = signal.condensed_squared_distances();
    let gamma = params
        .gamma
        .unwrap_or_else(|| median_heuristic_gamma(&distances));
    let costs = RbfGridCost::new(&distances, frames, jump, gamma);
    drop(distances);

    let boundaries = costs.stride;
    // Per grid boundary: optimal total cost of [0, boundary) and where its last
    // segment starts; `None` where ruptures has no partition for that prefix.
    let mut best_total: Vec<Option<f64>> = vec![None; boundaries];
    let mut last_segment_start = vec![0usize; boundaries];
    best_total[0] = Some(0.0);

    let ends = (0..frames)
        .step_by(jump)
        .filter(|&end| end >= min_size)
        .chain(std::iter::once(frames));

    // Kept in ruptures' order, duplicates included (e.g. n = 61, jump = 5
    // appends 55 twice); order decides ties.
    let mut admissible: Vec<usize> = Vec::new();
    let mut candidates: Vec<(usize, f64)> = Vec::new();
    for end in ends {
        admissible.push((end - min_size) / jump * jump);

        candidates.clear();
        for &start in &admissible {
            if let Some(prefix_total) = best_total[start / jump] {
                // Grouping matters for bit-equality: ruptures adds the new
                // segment's (cost + penalty) to the running total.
                let total = prefix_total + (costs.cost(start, end) + params.penalty);
                candidates.push((start, total));
            }
        }

        // First strict minimum wins, as with Python's min().
        let mut best: Option<(usize, f64)> = None;
        for &(start, total) in &candidates {
            if best.is_none_or(|(_, best_total)| total < best_total) {
                best = Some((start, total));
            }
        }
        let Some((best_start, best_cost)) = best else {
            return Err(PeltError::NoAdmissiblePartition { end });
        };
        let end_index = costs.boundary_index(end);
        best_total[end_index] = Some(best_cost);
        last_segment_start[end_index] = best_start;

        // ruptures zips the admissible list with the subproblems it could
        // build. When a start had no partition (only possible if
        // min_size > jump) the lists fall out of step: a start is judged by
        // the total of the next start that had one, and the last starts are
        // dropped. Reproduced on purpose; it has not changed any result in
        // randomised comparisons, but it keeps us on ruptures' exact path.
        let threshold = best_cost + params.penalty;
        admissible = admissible
            .iter()
            .zip(&candidates)
            .filter(|(_, (_, total))| *total <= threshold)
            .map(|(&start, _)| start)
            .collect();
    }

    let mut breakpoints = Vec::new();
    let mut end = frames;
    while end > 0 {
        breakpoints.push(end);
        end = last_segment_start[costs.boundary_index(end)];
    }
    breakpoints.reverse();
    Ok(RbfSegmentation { breakpoints, gamma })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Reference {
        scale: f64,
        cases: Vec<ReferenceCase>,
    }

    #[derive(Deserialize)]
    struct ReferenceCase {
        name: String,
        params: PeltParams,
        signal_milli: Vec<Vec<i64>>,
        gamma_used: f64,
        breakpoints: Vec<usize>,
    }

    fn load_reference() -> Reference {
        serde_json::from_str(include_str!("../../tests/fixtures/pelt/reference.json")).expect(
            "tests/fixtures/pelt/reference.json parses; regenerate it with make_reference.py",
        )
    }

    /// Mirrors make_reference.py: float32(int / scale).
    fn decode(signal_milli: &[Vec<i64>], scale: f64) -> Vec<Vec<f32>> {
        signal_milli
            .iter()
            .map(|row| row.iter().map(|&v| (v as f64 / scale) as f32).collect())
            .collect()
    }

    #[test]
    fn matches_ruptures_reference_breakpoints() {
        let reference = load_reference();
        assert!(reference.cases.len() >= 10);
        let mut mismatches = Vec::new();
        for case in &reference.cases {
            let frames = decode(&case.signal_milli, reference.scale);
            let result = pelt_rbf_segmentation(&frames, &case.params)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            if result.breakpoints != case.breakpoints {
                mismatches.push(format!(
                    "{}: ours {:?}, ruptures {:?}",
                    case.name, result.breakpoints, case.breakpoints
                ));
            }
            // Bit-identical in Python; the tolerance only absorbs serde_json
            // reading the reference value back one ulp off.
            let relative_gamma_gap = (result.gamma - case.gamma_used).abs() / case.gamma_used;
            assert!(
                relative_gamma_gap < 1e-12,
                "{}: gamma {} vs ruptures {}",
                case.name,
                result.gamma,
                case.gamma_used
            );
        }
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    }

    #[test]
    fn flat_and_row_inputs_agree() {
        let reference = load_reference();
        let case = reference
            .cases
            .iter()
            .find(|c| c.name == "8d_four_changes")
            .expect("case present");
        let rows = decode(&case.signal_milli, reference.scale);
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let from_flat = pelt_rbf_flat(&flat, rows[0].len(), &case.params).unwrap();
        assert_eq!(from_flat, pelt_rbf(&rows, &case.params).unwrap());
        assert_eq!(from_flat, case.breakpoints);
    }

    /// The fixed-point prefix table must agree with summing the Gram block
    /// directly, the way ruptures does.
    #[test]
    fn grid_cost_matches_direct_block_sum() {
        let rows: Vec<Vec<f32>> = (0..37)
            .map(|i| {
                let t = i as f32;
                vec![
                    (t * 0.7).sin(),
                    (t * 0.13).cos() * 2.0,
                    if i < 20 { 0.0 } else { 1.5 },
                ]
            })
            .collect();
        let signal = FrameMatrix::from_rows(&rows).unwrap();
        let distances = signal.condensed_squared_distances();
        let gamma = median_heuristic_gamma(&distances);
        let jump = 3;
        let grid = RbfGridCost::new(&distances, rows.len(), jump, gamma);

        let kernel = |i: usize, j: usize| -> f64 {
            if i == j {
                return 1.0;
            }
            let d: f64 = signal
                .frame(i)
                .iter()
                .zip(signal.frame(j))
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            (-(d * gamma).clamp(1e-2, 1e2)).exp()
        };
        let mut positions: Vec<usize> = (0..rows.len()).step_by(jump).collect();
        positions.push(rows.len());
        for (ai, &start) in positions.iter().enumerate() {
            for &end in &positions[ai + 1..] {
                let block: f64 = (start..end)
                    .flat_map(|i| (start..end).map(move |j| (i, j)))
                    .map(|(i, j)| kernel(i, j))
                    .sum();
                let length = (end - start) as f64;
                let direct = length - block / length;
                let fast = grid.cost(start, end);
                assert!(
                    (direct - fast).abs() < 1e-12,
                    "[{start}, {end}): direct {direct}, grid {fast}"
                );
            }
        }
    }

    #[test]
    fn median_follows_numpy_for_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![5.0]), 5.0);
    }

    #[test]
    fn constant_signal_has_no_change_and_unit_gamma() {
        let rows = vec![vec![0.25f32, -1.0]; 40];
        let result = pelt_rbf_segmentation(&rows, &PeltParams::default()).unwrap();
        assert_eq!(result.breakpoints, vec![40]);
        assert_eq!(result.gamma, 1.0);
    }

    #[test]
    fn signal_shorter_than_two_segments_is_one_segment() {
        // 3 frames with min_size 2 cannot hold two segments; ruptures returns [3].
        let rows = vec![vec![0.0f32], vec![10.0], vec![10.0]];
        assert_eq!(pelt_rbf(&rows, &PeltParams::default()).unwrap(), vec![3]);
        let rows = vec![vec![0.0f32], vec![10.0]];
        assert_eq!(pelt_rbf(&rows, &PeltParams::default()).unwrap(), vec![2]);
    }

    #[test]
    fn single_frame_with_min_size_one_is_one_segment() {
        let params = PeltParams {
            min_size: 1,
            ..PeltParams::default()
        };
        let result = pelt_rbf_segmentation(&[vec![3.0f32]], &params).unwrap();
        assert_eq!(result.breakpoints, vec![1]);
        assert_eq!(result.gamma, 1.0);
    }

    #[test]
    fn jump_longer_than_signal_gives_one_segment() {
        let rows: Vec<Vec<f32>> = (0..8)
            .map(|i| vec![if i < 4 { 0.0 } else { 9.0 }])
            .collect();
        let params = PeltParams {
            jump: 10,
            ..PeltParams::default()
        };
        assert_eq!(pelt_rbf(&rows, &params).unwrap(), vec![8]);
    }

    #[test]
    fn clear_step_is_found_on_the_grid() {
        let rows: Vec<Vec<f32>> = (0..50)
            .map(|i| vec![if i < 25 { 0.0 } else { 5.0 }])
            .collect();
        assert_eq!(
            pelt_rbf(&rows, &PeltParams::default()).unwrap(),
            vec![25, 50]
        );
    }

    #[test]
    fn rejects_bad_input_with_specific_errors() {
        let params = PeltParams::default();
        let empty: Vec<Vec<f32>> = Vec::new();
        assert_eq!(pelt_rbf(&empty, &params), Err(PeltError::EmptySignal));
        assert_eq!(pelt_rbf_flat(&[], 3, &params), Err(PeltError::EmptySignal));
        assert_eq!(
            pelt_rbf(&[Vec::<f32>::new(), Vec::new()], &params),
            Err(PeltError::ZeroDimension)
        );
        assert_eq!(
            pelt_rbf_flat(&[1.0], 0, &params),
            Err(PeltError::ZeroDimension)
        );
        assert_eq!(
            pelt_rbf(&[vec![1.0f32, 2.0], vec![1.0], vec![0.0, 0.0]], &params),
            Err(PeltError::RaggedRows {
                frame: 1,
                expected: 2,
                found: 1
            })
        );
        assert_eq!(
            pelt_rbf_flat(&[1.0; 7], 2, &params),
            Err(PeltError::FlatLengthMismatch { len: 7, dim: 2 })
        );
        assert!(matches!(
            pelt_rbf(&[vec![1.0f32], vec![f32::NAN], vec![0.0]], &params),
            Err(PeltError::NonFiniteValue {
                frame: 1,
                feature: 0,
                ..
            })
        ));
        assert_eq!(
            pelt_rbf(&[vec![1.0f32]], &params),
            Err(PeltError::SignalTooShort {
                frames: 1,
                min_size: 2
            })
        );

        let rows = vec![vec![0.0f32]; 10];
        let with = |p: PeltParams| pelt_rbf(&rows, &p);
        assert_eq!(
            with(PeltParams {
                min_size: 0,
                ..params
            }),
            Err(PeltError::MinSizeZero)
        );
        assert_eq!(
            with(PeltParams { jump: 0, ..params }),
            Err(PeltError::JumpZero)
        );
        assert_eq!(
            with(PeltParams {
                penalty: -1.0,
                ..params
            }),
            Err(PeltError::InvalidPenalty(-1.0))
        );
        assert!(matches!(
            with(PeltParams {
                penalty: f64::NAN,
                ..params
            }),
            Err(PeltError::InvalidPenalty(_))
        ));
        assert_eq!(
            with(PeltParams {
                gamma: Some(0.0),
                ..params
            }),
            Err(PeltError::InvalidGamma(0.0))
        );
    }

    #[test]
    fn params_deserialize_with_defaults_and_reject_unknown_fields() {
        let params: PeltParams = serde_json::from_str(r#"{"penalty": 3.0}"#).unwrap();
        assert_eq!(
            params,
            PeltParams {
                penalty: 3.0,
                ..PeltParams::default()
            }
        );
        let params: PeltParams = serde_json::from_str(r#"{"gamma": 0.5, "jump": 1}"#).unwrap();
        assert_eq!(params.gamma, Some(0.5));
        assert_eq!(params.jump, 1);
        assert!(serde_json::from_str::<PeltParams>(r#"{"pen": 3.0}"#).is_err());
    }
}
