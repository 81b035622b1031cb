//! PELT change-point detection with the RBF (Gaussian kernel) segment cost.
//!
//! This is a drop-in for `ruptures.Pelt(model="rbf", min_size, jump).fit(x).predict(pen)`
//! (checked against ruptures 1.1.10): same admissible breakpoint grid, same pruning rule, same
//! tie-breaking, same median-heuristic bandwidth, same kernel clipping. The
//! returned breakpoints are segment ends in ascending order and always finish
//! with the number of frames, as ruptures returns them.
//!
//! API: [`segment`] (rows) or [`segment_flat`] (a row-major buffer) with
//! [`PeltParams`] give a [`Segmentation`] (breakpoints and the gamma used) or
//! a [`PeltError`]; nothing else is public, and the API is safe.
//!
//! Feature `simd` (off by default) adds the AVX2 / AVX-512 kernels
//! (`avx2.rs`, `avx512.rs`, which hold almost all of this crate's `unsafe`; the rest is
//! their callers and one `matrixmultiply` call), picked at run time from what the CPU has,
//! and with them the two-core steps of long signals. Without it the portable
//! path runs; the breakpoints and gamma are the same bit for bit, only slower.
//!
//! Cost of a segment `[a, b)` over the Gram matrix `K` is
//! `(b - a) - sum(K[a..b, a..b]) / (b - a)` (the diagonal of `K` is all ones).
//! Kernel entries are `exp(-clamp(gamma * |x_i - x_j|^2, 0.01, 100))` for
//! `i != j`; by default `gamma = 1 / median` of all pairwise squared distances
//! (or 1 when that median is 0).
//!
//! Work. The median needs every pairwise distance; they are approximated by
//! one Gram product of the centred frames (`|a|^2 + |b|^2 - 2 a.b`, on all
//! cores) with a proven error bound: register tiles over frames quantised
//! to int16 with one step for all (dot products exact in int32), through
//! AVX-512 VNNI where the CPU has it, else AVX2 (`vpmaddwd`); f32 AVX-512
//! tiles on AVX-512 CPUs without VNNI; `matrixmultiply` blocks elsewhere.
//! Only the pairs whose approximation lies within twice that bound of the
//! middle are recomputed in f64 (any order, error below 1e-12 relative),
//! which narrows them to a handful summed in scipy's order, so the median
//! (hence gamma) is still scipy's bit for bit. Kernel entries are only
//! computed where PELT reads them: as the end moves right, each new column
//! is filled from the oldest start PELT still holds, in fixed point, and each
//! live start keeps its exact block sum. With pruning (shot-like signals)
//! that is a narrow band next to the diagonal; without any (a huge penalty)
//! it is the whole upper triangle, O(n^2 * dim) as before. Exact distances
//! run eight pairs to a vector where AVX-512 is there (`avx512.rs`), or
//! four columns at a time against four-pair vectors with AVX2 (`avx2.rs`),
//! each pair still summed in scipy's order.
//! Memory: O(n * dim) plus, on the portable path, one Gram block per
//! thread, and the approximations inside a sampled bracket around the median
//! (a few percent of the n(n-1)/2 pairs). The largest of these buffers are
//! kept on the calling thread for its next call (each up to 32 MB).
//!
//! Exact ties. Distances, kernel entries and the heuristic gamma are
//! bit-identical to scipy's, and segment costs here come from exact block
//! sums. ruptures instead sums each Gram block with numpy, whose rounding
//! depends on the block's shape. When two segmentations have mathematically
//! equal cost — which takes exactly repeated frames, e.g. noise-free or
//! coarsely quantised synthetic signals — this module keeps the earlier
//! candidate start (ruptures' tie rule applied to exact values) while ruptures
//! follows its rounding noise, so the two can pick different, equally optimal
//! breakpoints.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[cfg(all(feature = "simd", target_arch = "x86_64"))]
mod avx2;
#[cfg(all(feature = "simd", target_arch = "x86_64"))]
mod avx512;

/// Settings for [`segment`]. Defaults are ruptures' `Pelt` defaults
/// (`min_size=2`, `jump=5`, median-heuristic gamma) with `pen=5`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
        "frame {frame} has {found} values but frame 0 has {expected}; all frames must have the \
         same dimension"
    )]
    RaggedRows {
        frame: usize,
        expected: usize,
        found: usize,
    },
    #[error(
        "flat signal holds {len} values, which is not a whole number of frames of dimension {dim}; \
         check the dimension or the buffer"
    )]
    FlatLengthMismatch { len: usize, dim: usize },
    #[error(
        "frame {frame}, feature {feature} is {value}; replace NaN or infinite features before \
         segmenting"
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
        "the signal has {frames} frames, fewer than min_size = {min_size}; lower min_size or pass \
         a longer signal"
    )]
    SignalTooShort { frames: usize, min_size: usize },
    #[error(
        "no admissible segmentation ends at frame {end} (ruptures raises ValueError here too; only \
         reachable with min_size > jump); lower min_size to at most jump"
    )]
    NoAdmissiblePartition { end: usize },
}

/// Breakpoints together with the kernel bandwidth that produced them.
#[derive(Debug, Clone, PartialEq)]
pub struct Segmentation {
    /// Segment ends, ascending; the last one is the number of frames.
    pub breakpoints: Vec<usize>,
    /// The gamma actually used (the heuristic's pick when none was given;
    /// 1.0 for a one-frame signal, where no pairwise distance exists).
    pub gamma: f64,
}

/// Segments `frames` (one feature vector per frame, all of one length) and
/// returns the breakpoints ruptures would return, with the gamma used.
pub fn segment<R: AsRef<[f32]>>(
    frames: &[R],
    params: &PeltParams,
) -> Result<Segmentation, PeltError> {
    validate_params(params)?;
    let signal = FrameMatrix::from_rows(frames)?;
    segment_matrix(&signal, params)
}

/// [`segment`] for a row-major buffer of `values.len() / dim` frames.
pub fn segment_flat(
    values: &[f32],
    dim: usize,
    params: &PeltParams,
) -> Result<Segmentation, PeltError> {
    validate_params(params)?;
    let signal = FrameMatrix::from_flat(values, dim)?;
    segment_matrix(&signal, params)
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

impl Drop for FrameMatrix {
    fn drop(&mut self) {
        reused::give_back(|b| &mut b.values, std::mem::take(&mut self.values));
        if let Some(by_feature) = self.by_feature.take() {
            reused::give_back(|b| &mut b.by_feature, by_feature);
        }
    }
}

/// The large buffers of one call, kept on each thread for the next: a fresh
/// buffer of a few hundred KB is faulted in page by page again on every call
/// (glibc hands it back to the system on free), which cost a short signal a
/// quarter of its time.
mod reused {
    use std::cell::RefCell;

    /// Larger buffers are not kept (a few times a 20-minute episode's).
    const MOST_BYTES: usize = 32 << 20;

    #[cfg_attr(not(all(feature = "simd", target_arch = "x86_64")), allow(dead_code))]
    #[derive(Default)]
    pub(super) struct Buffers {
        pub(super) values: Vec<f32>,
        pub(super) by_feature: Vec<f32>,
        pub(super) centred: Vec<f32>,
        pub(super) quantised_rows: Vec<i32>,
        pub(super) panels: Vec<i32>,
        pub(super) inside: Vec<(f32, u32, u32)>,
    }

    thread_local! {
        static BUFFERS: RefCell<Buffers> = RefCell::default();
    }

    /// The kept buffer of its kind (empty), with room for `capacity` values.
    pub(super) fn take<T>(
        slot: impl FnOnce(&mut Buffers) -> &mut Vec<T>,
        capacity: usize,
    ) -> Vec<T> {
        let mut buffer = BUFFERS.with_borrow_mut(|buffers| std::mem::take(slot(buffers)));
        buffer.clear();
        buffer.reserve(capacity);
        buffer
    }

    /// The kept buffer of its kind with `len` values of no particular
    /// content (what the last call left, zeros past that), for a caller
    /// that overwrites all of them: zeroing first would cost a pass.
    #[cfg_attr(not(all(feature = "simd", target_arch = "x86_64")), allow(dead_code))]
    pub(super) fn take_to_overwrite<T: Copy + Default>(
        slot: impl FnOnce(&mut Buffers) -> &mut Vec<T>,
        len: usize,
    ) -> Vec<T> {
        let mut buffer = BUFFERS.with_borrow_mut(|buffers| std::mem::take(slot(buffers)));
        buffer.truncate(len);
        buffer.resize(len, T::default());
        buffer
    }

    /// Keeps `buffer` for the next call on this thread, if it is the
    /// largest of its kind so far and not too large.
    pub(super) fn give_back<T>(slot: impl FnOnce(&mut Buffers) -> &mut Vec<T>, buffer: Vec<T>) {
        if buffer.capacity() * size_of::<T>() > MOST_BYTES {
            return;
        }
        // During thread teardown the buffer is simply dropped.
        let _ = BUFFERS.try_with(|buffers| {
            let mut buffers = buffers.borrow_mut();
            let kept = slot(&mut buffers);
            if buffer.capacity() > kept.capacity() {
                *kept = buffer;
            }
        });
    }
}

/// Which implementation runs the hot loops (exact distances, any-order
/// distances and the Gram bracket). All give bit-identical exact distances
/// and the same median; the widest vectors the CPU has are picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernels {
    Portable,
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    Avx2,
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    Avx512,
}

impl Kernels {
    fn detect() -> Self {
        *Self::available().last().expect("portable is always there")
    }

    /// The kernels this CPU can run, widest last.
    fn available() -> Vec<Self> {
        #[allow(unused_mut)]
        let mut kernels = vec![Self::Portable];
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        {
            if avx2::available() {
                kernels.push(Self::Avx2);
            }
            if avx512::available() {
                kernels.push(Self::Avx512);
            }
        }
        kernels
    }
}

/// The validated frames, row-major. Distances widen every value to f64
/// first, because scipy's `pdist` (which ruptures uses) computes on float64
/// copies of the input; the widening is exact, so it happens where a value is
/// read rather than in a second copy of the signal.
struct FrameMatrix {
    values: Vec<f32>,
    frames: usize,
    dim: usize,
    kernels: Kernels,
    /// The same values feature-major, for the vector kernels; built on
    /// first use, or alongside the median (see [`segment_matrix`]).
    #[cfg_attr(not(all(feature = "simd", target_arch = "x86_64")), allow(dead_code))]
    by_feature: OnceLock<Vec<f32>>,
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
        let mut values = reused::take(|b| &mut b.values, rows.len() * dim);
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
        Ok(Self::with_kernels(values, dim, Kernels::detect()))
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
        let mut values = reused::take(|b| &mut b.values, flat.len());
        for (frame, row) in flat.chunks_exact(dim).enumerate() {
            push_finite(&mut values, row, frame)?;
        }
        Ok(Self::with_kernels(values, dim, Kernels::detect()))
    }

    fn with_kernels(values: Vec<f32>, dim: usize, kernels: Kernels) -> Self {
        let frames = values.len() / dim;
        Self {
            values,
            frames,
            dim,
            kernels,
            by_feature: OnceLock::new(),
        }
    }

    /// [`Self::values`] feature-major (`[feature][frame]`).
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    fn by_feature(&self) -> &[f32] {
        self.by_feature.get_or_init(|| {
            let out = reused::take_to_overwrite(|b| &mut b.by_feature, self.values.len());
            avx2::feature_major(&self.values, self.frames, self.dim, out)
        })
    }

    /// Builds what the vector kernels of the search read, ahead of it.
    fn prepare_search_layout(&self) {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        if self.kernels != Kernels::Portable {
            self.by_feature();
        }
    }

    fn frame(&self, index: usize) -> &[f32] {
        &self.values[index * self.dim..(index + 1) * self.dim]
    }

    /// Squared distances from frame `anchor` to each frame of `others`, into
    /// the first `others.len()` slots of `out`.
    ///
    /// Each distance is summed feature by feature from zero, the order scipy
    /// uses, so results are bit-identical to `pdist(..., "sqeuclidean")`
    /// (`(a - b)^2` and `(b - a)^2` are the same float, so which frame is the
    /// anchor does not matter). Eight pairs run side by side, their sums in
    /// registers and their rows streamed together; each pair still sees its
    /// features in order.
    fn squared_distances_from(&self, anchor: usize, others: Range<usize>, out: &mut [f64]) {
        const LANES: usize = 8;
        let dim = self.dim;
        let anchor = self.frame(anchor);
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        match self.kernels {
            Kernels::Avx512 => {
                let by_feature = self.by_feature();
                avx512::squared_distances_from(anchor, by_feature, self.frames, others, out);
                return;
            }
            Kernels::Avx2 => {
                avx2::squared_distances_from(anchor, self.by_feature(), self.frames, others, out);
                return;
            }
            Kernels::Portable => {}
        }
        let out = &mut out[..others.len()];
        let mut start = others.start;
        for chunk in out.chunks_mut(LANES) {
            let rows = &self.values[start * dim..(start + chunk.len()) * dim];
            if chunk.len() == LANES {
                let mut sums = [0.0f64; LANES];
                let r: [&[f32]; LANES] = std::array::from_fn(|l| &rows[l * dim..(l + 1) * dim]);
                for (f, &a) in anchor.iter().enumerate() {
                    let a = f64::from(a);
                    for l in 0..LANES {
                        let diff = a - f64::from(r[l][f]);
                        sums[l] += diff * diff;
                    }
                }
                chunk.copy_from_slice(&sums);
            } else {
                for (sum, row) in chunk.iter_mut().zip(rows.chunks_exact(dim)) {
                    *sum = exact_squared_distance(anchor, row);
                }
            }
            start += chunk.len();
        }
    }

    /// How many frames [`Self::squared_distances_block`] takes as anchors
    /// at once to good effect (more only repeat the work anchor by anchor).
    fn anchors_together(&self) -> usize {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        if self.kernels == Kernels::Avx2 {
            return avx2::BLOCK_ANCHORS;
        }
        1
    }

    /// [`Self::squared_distances_from`] for each frame of `anchors` (one
    /// row of `others.len()` values each in `out`).
    fn squared_distances_block(
        &self,
        anchors: Range<usize>,
        others: Range<usize>,
        out: &mut [f64],
    ) {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        if self.kernels == Kernels::Avx2 && anchors.len() <= avx2::BLOCK_ANCHORS {
            let by_feature = self.by_feature();
            avx2::squared_distances_block(
                (&self.values, by_feature),
                self.frames,
                anchors,
                others,
                out,
            );
            return;
        }
        let width = others.len();
        for (row, anchor) in anchors.enumerate() {
            self.squared_distances_from(anchor, others.clone(), &mut out[row * width..]);
        }
    }

    /// Exact squared distances of the given frame pairs, as
    /// [`Self::squared_distances_from`] computes them.
    fn squared_distances_of_pairs(&self, pairs: &[(u32, u32)]) -> Vec<f64> {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        if self.kernels == Kernels::Avx512 {
            return avx512::squared_distances_of_pairs(&self.values, self.dim, pairs);
        }
        pairs
            .iter()
            .map(|&(i, j)| exact_squared_distance(self.frame(i as usize), self.frame(j as usize)))
            .collect()
    }

    /// How far, relative to its value, a [`Self::fast_squared_distances`]
    /// result can be from scipy's: each term is non-negative, so both sums
    /// are within a relative `gamma_{dim+2}` of the true distance.
    fn fast_relative_error(&self) -> f64 {
        let terms = (self.dim + 2) as f64 * f64::EPSILON / 2.0;
        let gamma = terms / (1.0 - terms);
        2.0 * gamma / (1.0 - gamma)
    }

    /// f64 squared distances of the given pairs in any summation order:
    /// within a relative `gamma_{dim+2}` of the exact ones. Random pairs
    /// wait on memory more than they compute: long lists use both cores.
    fn fast_squared_distances(&self, pairs: &[(u32, u32)]) -> Vec<f64> {
        distances_in_halves(pairs, |pairs| self.fast_squared_distances_here(pairs))
    }

    /// [`Self::fast_squared_distances`] on the calling thread.
    fn fast_squared_distances_here(&self, pairs: &[(u32, u32)]) -> Vec<f64> {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        match self.kernels {
            Kernels::Avx512 => {
                return avx512::fast_squared_distances(&self.values, self.dim, pairs);
            }
            Kernels::Avx2 => return avx2::fast_squared_distances(&self.values, self.dim, pairs),
            Kernels::Portable => {}
        }
        pairs
            .iter()
            .map(|&(i, j)| {
                let (a, b) = (self.frame(i as usize), self.frame(j as usize));
                let mut lanes = [0.0f64; 4];
                for (chunk_a, chunk_b) in a.chunks(4).zip(b.chunks(4)) {
                    for ((lane, &x), &y) in lanes.iter_mut().zip(chunk_a).zip(chunk_b) {
                        let diff = f64::from(x) - f64::from(y);
                        *lane += diff * diff;
                    }
                }
                lanes.iter().sum()
            })
            .collect()
    }

    /// Squared distances for all pairs `i < j` in scipy's condensed order
    /// (row `i`, then increasing `j`), bit-identical to scipy's `pdist`.
    fn condensed_squared_distances(&self) -> Vec<f64> {
        let n = self.frames;
        let mut distances = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        let mut row = vec![0.0f64; n];
        for i in 0..n {
            let later = i + 1..n;
            let len = later.len();
            self.squared_distances_from(i, later, &mut row);
            distances.extend_from_slice(&row[..len]);
        }
        distances
    }
}

/// One squared distance, summed in scipy's order (see
/// [`FrameMatrix::squared_distances_from`]).
fn exact_squared_distance(a: &[f32], b: &[f32]) -> f64 {
    let mut sum = 0.0;
    for (&x, &y) in a.iter().zip(b) {
        let diff = f64::from(x) - f64::from(y);
        sum += diff * diff;
    }
    sum
}

fn push_finite(values: &mut Vec<f32>, row: &[f32], frame: usize) -> Result<(), PeltError> {
    // One pass without early exit (it vectorises); the culprit is only
    // looked up when there is one.
    if row
        .iter()
        .fold(true, |finite, value| finite & value.is_finite())
    {
        values.extend_from_slice(row);
        return Ok(());
    }
    let (feature, &value) = row
        .iter()
        .enumerate()
        .find(|(_, value)| !value.is_finite())
        .expect("a non-finite value was seen");
    Err(PeltError::NonFiniteValue {
        frame,
        feature,
        value,
    })
}

/// `(a(), b())`, on two cores when `parallel` (a call from outside rayon's
/// pool waits for a hand-over, tens of microseconds on a busy VM: only
/// worth it for milliseconds of work).
#[cfg_attr(not(all(feature = "simd", target_arch = "x86_64")), allow(dead_code))]
fn join_if<A: Send, B: Send>(
    parallel: bool,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if parallel {
        rayon::join(a, b)
    } else {
        (a(), b())
    }
}

/// `distances(pairs)`, with long lists split in two halves on two cores.
fn distances_in_halves(
    pairs: &[(u32, u32)],
    distances: impl Fn(&[(u32, u32)]) -> Vec<f64> + Sync,
) -> Vec<f64> {
    if pairs.len() < PARALLEL_MIN_FAST_PAIRS {
        return distances(pairs);
    }
    let (first, second) = pairs.split_at(pairs.len() / 2);
    let (mut all, rest) = rayon::join(|| distances(first), || distances(second));
    all.extend(rest);
    all
}

/// `lane(lanes)` on the calling thread and, when `parallel`, at the same time on
/// a core of rayon's pool (`lanes` says how many run); each lane is
/// expected to take its share of the work as it goes. The calling thread starts at once: a sleeping
/// worker can take from tens of microseconds to milliseconds to get a core on this VM,
/// and then simply finds less left to do.
fn on_two_lanes<T: Send>(parallel: bool, lane: impl Fn(usize) -> T + Sync) -> Vec<T> {
    if !parallel || rayon::current_num_threads() < 2 {
        return vec![lane(1)];
    }
    let mut helper = None;
    let mine = rayon::in_place_scope(|scope| {
        scope.spawn(|_| helper = Some(lane(2)));
        lane(2)
    });
    let mut results = vec![mine];
    results.extend(helper);
    results
}

/// numpy's median: the middle element, or the mean of the two middle ones.
fn median(mut values: Vec<f64>) -> f64 {
    let count = values.len();
    let upper_index = count / 2;
    let lower_index = if count % 2 == 1 {
        upper_index
    } else {
        upper_index - 1
    };
    mean_of_middle(&mut values, (lower_index, upper_index), |&value| value)
}

/// The values of order `lower_index` and `upper_index` (equal, or one
/// apart) among `entries`, which are partly reordered: one selection, then
/// the largest of the part below.
fn middle_values<T>(
    entries: &mut [T],
    (lower_index, upper_index): (usize, usize),
    value: impl Fn(&T) -> f64,
) -> (f64, f64) {
    let (lower_part, upper, _) =
        entries.select_nth_unstable_by(upper_index, |a, b| value(a).total_cmp(&value(b)));
    let upper = value(upper);
    if lower_index == upper_index {
        return (upper, upper);
    }
    let lower = lower_part
        .iter()
        .map(value)
        .max_by(f64::total_cmp)
        .expect("upper_index > lower_index leaves a lower part");
    (lower, upper)
}

/// numpy's median from [`middle_values`]: the middle value, or the mean of
/// the two.
fn mean_of_middle<T>(entries: &mut [T], indices: (usize, usize), value: impl Fn(&T) -> f64) -> f64 {
    let (lower, upper) = middle_values(entries, indices, value);
    if indices.0 == indices.1 {
        upper
    } else {
        (lower + upper) / 2.0
    }
}

fn median_heuristic_gamma(signal: &FrameMatrix) -> f64 {
    if signal.frames < 2 {
        // One frame: no off-diagonal kernel entry exists, so gamma is moot.
        return 1.0;
    }
    let middle = median_squared_distance(signal);
    if middle != 0.0 { 1.0 / middle } else { 1.0 }
}

/// Rows of the Gram product per matrix multiplication call (and per unit of
/// work a thread takes): a multiple of the register tiles' rows.
const GRAM_BLOCK_ROWS: usize = 48;

/// Below this many pairs (about 200 frames) the Gram product runs on the
/// calling thread.
const PARALLEL_MIN_PAIRS: usize = 20_000;

/// Lists of at least this many pairs get their any-order distances on two
/// cores.
const PARALLEL_MIN_FAST_PAIRS: usize = 4096;

/// Signals with at least this many values (120 frames of the 273-value
/// descriptor) use a second core: their median and search run in rayon's
/// pool, frames are prepared for the Gram product on two cores, the
/// search's feature-major layout is built on the second while the median is
/// found, and a helper computes the search's distances ahead. On the 2-core
/// VM this was tuned on, back-to-back calls at 240 frames took 0.49-0.55 ms
/// instead of 0.65-0.84 ms; a call after an idle spell waits for a sleeping
/// worker instead (about 1.1 ms instead of 0.8 ms).
const PARALLEL_MIN_VALUES: usize = 1 << 15;

/// Most pairs whose approximate distances estimate where the median lies.
const SAMPLE_PAIRS: usize = 16_384;

/// Largest norm of a quantised frame: every partial dot product of two
/// frames stays below `46340^2 < 2^31`, so int32 sums are exact.
#[cfg_attr(not(all(feature = "simd", target_arch = "x86_64")), allow(dead_code))]
const QUANTISED_NORM: f64 = 46340.0;

/// Which product approximates every pairwise distance for the median.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GramKind {
    /// f32 blocks through `matrixmultiply`.
    Portable,
    /// f32 AVX2 + FMA register tiles.
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    Avx2Tiles,
    /// Frames quantised to int16, AVX2 `vpmaddwd` register tiles.
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    Avx2Int16Tiles,
    /// f32 AVX-512 register tiles.
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    F32Tiles,
    /// Frames quantised to int16, AVX-512 VNNI register tiles: twice the
    /// multiply-adds per instruction of f32, with a wider (still proven)
    /// error bound.
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    Int16Tiles,
}

impl GramKind {
    /// The kinds this CPU can run for `signal`, fastest last.
    #[cfg_attr(
        not(all(feature = "simd", target_arch = "x86_64")),
        allow(unused_variables)
    )]
    fn available(signal: &FrameMatrix) -> Vec<Self> {
        #[allow(unused_mut)]
        let mut kinds = vec![Self::Portable];
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        if signal.kernels != Kernels::Portable && i32::try_from(signal.frames + 64).is_ok() {
            kinds.push(Self::Avx2Tiles);
            kinds.push(Self::Avx2Int16Tiles);
            if signal.kernels == Kernels::Avx512 {
                kinds.push(Self::F32Tiles);
                if avx512::vnni_available() {
                    kinds.push(Self::Int16Tiles);
                }
            }
        }
        kinds
    }

    fn fastest(signal: &FrameMatrix) -> Self {
        *Self::available(signal)
            .last()
            .expect("portable is always there")
    }
}

/// Every pairwise squared distance approximated through one Gram product
/// of the mean-centred frames, `|a|^2 + |b|^2 - 2 a.b`, with a bound on how
/// far any approximation is from scipy's f64 value.
struct GramApproximation {
    frames: usize,
    dim: usize,
    /// Every approximate distance is within this of scipy's.
    error_bound: f64,
    layout: GramLayout,
}

/// The frames as the chosen [`GramKind`] reads them.
enum GramLayout {
    /// Centred frames (row-major) and their f32 squared norms.
    Portable { centred: Vec<f32>, norms: Vec<f32> },
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    Avx2Tiles {
        centred: Vec<f32>,
        panels: avx2::GramPanels,
    },
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    F32Tiles {
        centred: Vec<f32>,
        panels: avx2::GramPanels,
    },
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    Int16Tiles(avx2::QuantisedPanels),
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    Avx2Int16Tiles(avx2::QuantisedPanels),
}

/// Approximate distances inside `[low, high]` (with their pairs) and the
/// number below `low`.
struct Bracket {
    below: usize,
    inside: Vec<(f32, u32, u32)>,
}

impl GramApproximation {
    /// `None` where the bound would be meaningless (features so large or so
    /// small that f32 overflows or loses relative accuracy, or more frames
    /// than u32 indexes); the caller then computes every distance exactly.
    fn of_kind(signal: &FrameMatrix, kind: GramKind) -> Option<Self> {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        if signal.kernels != Kernels::Portable {
            // SAFETY: AVX2 and FMA kernels are only chosen where the CPU
            // has them.
            return unsafe { Self::of_kind_avx2(signal, kind) };
        }
        Self::of_kind_inline(signal, kind)
    }

    /// [`Self::of_kind`] compiled for AVX2: preparing the frames (mean,
    /// centring, norms, quantising) is a fifth of the time on short
    /// signals. Rust never fuses `a * b + c` on its own, so the results are
    /// the same bits as the baseline build's.
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn of_kind_avx2(signal: &FrameMatrix, kind: GramKind) -> Option<Self> {
        Self::of_kind_inline(signal, kind)
    }

    #[inline(always)]
    fn of_kind_inline(signal: &FrameMatrix, kind: GramKind) -> Option<Self> {
        let (n, dim) = (signal.frames, signal.dim);
        if dim >= 1 << 20 || u32::try_from(n).is_err() {
            return None;
        }
        // Centring shrinks the norms, hence the cancellation error; the
        // mean is rounded to f32 so that `value - mean` is one f32 rounding.
        let mut mean = vec![0.0f64; dim];
        for row in signal.values.chunks_exact(dim) {
            for (sum, &value) in mean.iter_mut().zip(row) {
                *sum += f64::from(value);
            }
        }
        let mean: Vec<f64> = mean
            .iter()
            .map(|&sum| f64::from((sum / n as f64) as f32))
            .collect();
        // Each frame centred into `out`, with its squared norm and largest
        // magnitude.
        let centre = |row: &[f32], out: &mut [f32]| {
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            if signal.kernels != Kernels::Portable {
                return avx2::centre_row(row, &mean, out);
            }
            for ((out, &value), &m) in out.iter_mut().zip(row).zip(&mean) {
                *out = (f64::from(value) - m) as f32;
            }
            let largest = out.iter().fold(0.0f32, |m, &v| m.max(v.abs()));
            (squared_norm(out), largest)
        };
        let unit = f64::from(f32::EPSILON) / 2.0;
        match kind {
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            GramKind::Int16Tiles => Self::quantised(signal, centre, GramLayout::Int16Tiles, 16),
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            GramKind::Avx2Int16Tiles => {
                Self::quantised(signal, centre, GramLayout::Avx2Int16Tiles, 8)
            }
            _ => {
                let mut centred = vec![0.0f32; n * dim];
                let mut norms = Vec::with_capacity(n);
                for (row, out) in signal
                    .values
                    .chunks_exact(dim)
                    .zip(centred.chunks_exact_mut(dim))
                {
                    norms.push(centre(row, out).0);
                }
                let largest = bounded_largest_norm(&norms)?;
                // With u = 2^-24 and R = the largest centred squared norm, a
                // distance can be off by (Higham's bounds, any summation order):
                //   2 * gamma_dim * R  from the f32 dot product,
                //   8.1 u R            from rounding the centred frames to f32,
                //   8.1 u R            from the norms rounded to f32 and the f32
                //                      sums |a|^2 + |b|^2 - 2 a.b (results <= 4.1 R),
                //   < 1e-9 R           from the f64 norms and scipy's own f64
                //                      rounding (dim < 2^20);
                // plus a negligible absolute term for f32 underflow.
                let dim_gamma = dim as f64 * unit / (1.0 - dim as f64 * unit);
                let error_bound =
                    largest * (2.0 * dim_gamma + 24.0 * unit + 2e-9) + dim as f64 * 1e-40;
                let norms: Vec<f32> = norms.iter().map(|&norm| norm as f32).collect();
                let layout = match kind {
                    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
                    GramKind::Avx2Tiles => GramLayout::Avx2Tiles {
                        panels: avx2::GramPanels::new(&centred, &norms, (n, dim), 8),
                        centred,
                    },
                    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
                    GramKind::F32Tiles => GramLayout::F32Tiles {
                        panels: avx2::GramPanels::new(&centred, &norms, (n, dim), 16),
                        centred,
                    },
                    _ => GramLayout::Portable { centred, norms },
                };
                Some(Self {
                    frames: n,
                    dim,
                    error_bound,
                    layout,
                })
            }
        }
    }

    /// The int16 layout: each centred frame `x` becomes `s q + e` with `q`
    /// integer, one step `s` for all frames, chosen so that `|q|^2 < 2^31`;
    /// `panel_width` frames to a panel, as the tile kernel of `layout` reads.
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    #[inline(always)]
    fn quantised(
        signal: &FrameMatrix,
        centre: impl Fn(&[f32], &mut [f32]) -> (f64, f32) + Sync,
        layout: fn(avx2::QuantisedPanels) -> GramLayout,
        panel_width: usize,
    ) -> Option<Self> {
        let (n, dim) = (signal.frames, signal.dim);
        // Two passes (the step needs every norm first): centring into a
        // kept buffer, then quantising a panel at a time. Long signals split
        // the frames at a panel boundary between two threads.
        let split_at = if signal.values.len() >= PARALLEL_MIN_VALUES {
            n / 2 / panel_width * panel_width
        } else {
            0
        };
        let mut centred = reused::take_to_overwrite(|b| &mut b.centred, n * dim);
        let centre_frames = |frames: Range<usize>, out: &mut [f32]| {
            let mut norms = Vec::with_capacity(frames.len());
            let mut largest_value = 0.0f32;
            for (index, out) in frames.zip(out.chunks_exact_mut(dim)) {
                let (norm, largest) = centre(signal.frame(index), out);
                norms.push(norm);
                largest_value = largest_value.max(largest);
            }
            (norms, largest_value)
        };
        let parallel = split_at > 0;
        let (centred_before, centred_after) = centred.split_at_mut(split_at * dim);
        let ((mut norms, largest_before), (norms_after, largest_after)) = join_if(
            parallel,
            || centre_frames(0..split_at, centred_before),
            || centre_frames(split_at..n, centred_after),
        );
        norms.extend(norms_after);
        let largest_value = largest_before.max(largest_after);
        let Some(largest) = bounded_largest_norm(&norms) else {
            reused::give_back(|b| &mut b.centred, centred);
            return None;
        };
        // Rounding each value moves a norm by at most sqrt(dim) / 2.
        let norm_room = QUANTISED_NORM - (dim as f64).sqrt() / 2.0 - 1.0;
        let step = (largest.sqrt() / norm_room).max(f64::from(largest_value) / f64::from(i16::MAX));
        let step = if step > 0.0 { step } else { 1.0 };
        let mut panels =
            avx2::QuantisedPanels::new(n, dim, (2.0 * step * step) as f32, panel_width);
        let feature_pairs = panels.feature_pairs;
        let norms32: Vec<f32> = norms.iter().map(|&norm| norm as f32).collect();
        // Any integer level is valid: the residual is measured afterwards.
        let inverse_step = (1.0 / step) as f32;
        let quantise = |frames: Range<usize>, mut part: avx2::PanelsMut<'_>| {
            // One panel's levels, `[frame][feature pair]` with two int16 to
            // an i32 (the pair's first feature in the low half); an odd
            // dimension's last half and absent frames stay zero.
            let mut levels = vec![0i32; panel_width * feature_pairs];
            let (mut largest_residual, mut largest_level_norm) = (0.0f64, 0.0f64);
            for first in frames.clone().step_by(panel_width) {
                let present = first..(first + panel_width).min(frames.end);
                for (slot, index) in present.clone().enumerate() {
                    let pairs = &mut levels[slot * feature_pairs..(slot + 1) * feature_pairs];
                    // SAFETY: two i16 fill an i32 exactly (alignment 4 >= 2);
                    // on x86 the first of them is the low half.
                    let halves = unsafe {
                        std::slice::from_raw_parts_mut(pairs.as_mut_ptr().cast::<i16>(), dim)
                    };
                    // Sums of squared int16 levels are exact in f64 (< 2^53).
                    let (residual, level_norm) = avx2::quantise_row(
                        &centred[index * dim..(index + 1) * dim],
                        (step, inverse_step),
                        halves,
                    );
                    largest_residual = largest_residual.max(residual);
                    largest_level_norm = largest_level_norm.max(level_norm);
                }
                levels[present.len() * feature_pairs..].fill(0);
                part.set_panel(first, &levels, &norms32[present]);
            }
            (largest_residual, largest_level_norm)
        };
        let (before, after) = panels.split_at_frame(split_at);
        let ((residual_before, level_before), (residual_after, level_after)) = join_if(
            parallel,
            || quantise(0..split_at, before),
            || quantise(split_at..n, after),
        );
        reused::give_back(|b| &mut b.centred, centred);
        let largest_residual = residual_before.max(residual_after);
        let largest_level_norm = level_before.max(level_after);
        assert!(
            largest_level_norm < 2f64.powi(31),
            "quantised norms leave int32 room"
        );
        // With E = the largest residual norm |e| (plus its f64 rounding) and
        // Q = the largest |s q|, a dot product is off by at most
        // |s qa.eb| + |ea.s qb| + |ea.eb| <= 2 Q E + E^2, a distance by twice
        // that. In f32: the norms and their sum, the int32 -> f32
        // conversion, 2 s^2 and the fused multiply-add each round once
        // (under 12.1 u max(R, Q^2) in all); centring and scipy's own
        // rounding as in the f32 bound.
        let unit = f64::from(f32::EPSILON) / 2.0;
        let residual = largest_residual.sqrt() * (1.0 + 1e-9) + largest.sqrt() * 1e-15;
        let level_extent = step * largest_level_norm.sqrt();
        let quantisation = 2.0 * (2.0 * level_extent * residual + residual * residual);
        let scale = largest.max(level_extent * level_extent);
        let error_bound = quantisation + scale * (24.0 * unit + 2e-9) + dim as f64 * 1e-40;
        Some(Self {
            frames: n,
            dim,
            error_bound,
            layout: layout(panels),
        })
    }

    /// A range of approximate distances that very likely holds the ones of
    /// rank `lower_rank..=upper_rank`, from a random sample of pairs (a
    /// miss only costs a second pass, see [`median_squared_distance`]), and
    /// about how many pairs it holds.
    fn sample_bracket(
        &self,
        signal: &FrameMatrix,
        lower_rank: usize,
        upper_rank: usize,
    ) -> (f64, f64, usize) {
        let n = self.frames;
        let count = n * (n - 1) / 2;
        // Sampling costs a few hundred operations a pair, keeping a pair
        // in the bracket a few; the sample that minimises both together
        // grows as count^(2/3). Below a few hundred the bracket would hold
        // most pairs anyway.
        let sample_pairs = SAMPLE_PAIRS.min((1.6 * count as f64).powf(2.0 / 3.0) as usize);
        if sample_pairs < 256 {
            return (f64::NEG_INFINITY, f64::INFINITY, count);
        }
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        // Frame indexes fit u32 (checked when the approximation was made).
        let pairs: Vec<(u32, u32)> = (0..sample_pairs)
            .map(|_| {
                let i = rng.usize(0..n);
                let mut j = rng.usize(0..n - 1);
                if j >= i {
                    j += 1;
                }
                (i as u32, j as u32)
            })
            .collect();
        let (mut sample, relative) = self.sample_squared_distances(signal, &pairs);
        // Six standard deviations of a sample rank on either side.
        let margin = 3 * sample_pairs.isqrt() + 2;
        let scale = |rank: usize| rank as f64 / count as f64 * sample_pairs as f64;
        let low_index = scale(lower_rank) as usize;
        let high_index = scale(upper_rank) as usize + 1;
        // The sample's own error (at most the Gram's, or relative), and the
        // Gram's on the other side.
        let slack = |value: f64| 2.0 * self.error_bound + value * relative;
        // Two order statistics, selected (the sample is never sorted).
        let low = match low_index.checked_sub(margin) {
            Some(index) => {
                let value = *sample.select_nth_unstable_by(index, f64::total_cmp).1;
                value - slack(value)
            }
            None => f64::NEG_INFINITY,
        };
        let high = match high_index + margin {
            index if index < sample_pairs => {
                let value = *sample.select_nth_unstable_by(index, f64::total_cmp).1;
                value + slack(value)
            }
            _ => f64::INFINITY,
        };
        // How many pairs the bracket will likely hold, to allocate once.
        let sampled_inside = sample
            .iter()
            .filter(|&&value| value >= low && value <= high)
            .count();
        let expected_inside =
            (sampled_inside as f64 / sample_pairs as f64 * count as f64 * 1.1) as usize + 1024;
        (low, high, expected_inside.min(count))
    }

    /// Distances of the sample's `pairs`, each within the error bound of
    /// the exact one, or within the returned relative error of it. Long
    /// lists use both cores.
    fn sample_squared_distances(
        &self,
        signal: &FrameMatrix,
        pairs: &[(u32, u32)],
    ) -> (Vec<f64>, f64) {
        match &self.layout {
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            GramLayout::Avx2Int16Tiles(panels) | GramLayout::Int16Tiles(panels) => {
                let distances = distances_in_halves(pairs, |pairs| {
                    avx2::quantised_squared_distances(panels, pairs)
                });
                (distances, 0.0)
            }
            _ => (
                signal.fast_squared_distances(pairs),
                signal.fast_relative_error(),
            ),
        }
    }

    /// Approximates every pairwise distance (on all available cores for
    /// large signals) and keeps those in `[low, high]`, about
    /// `expected_inside` of them.
    fn bracket(&self, low: f64, high: f64, expected_inside: usize) -> Bracket {
        let n = self.frames;
        let blocks: Vec<Range<usize>> = (0..n.saturating_sub(1))
            .step_by(GRAM_BLOCK_ROWS)
            .map(|first| first..(first + GRAM_BLOCK_ROWS).min(n - 1))
            .collect();
        let pairs = n * (n - 1) / 2;
        let parallel = pairs >= PARALLEL_MIN_PAIRS;
        // Each lane takes the next block (largest first) when it is free: a
        // lane that starts late just does fewer.
        let next_block = AtomicUsize::new(0);
        let run_lane = |lanes: usize| {
            let mut bracket = Bracket {
                below: 0,
                inside: reused::take(|b| &mut b.inside, expected_inside / lanes),
            };
            let mut scratch = Vec::new();
            while let Some(rows) = blocks.get(next_block.fetch_add(1, Ordering::Relaxed)) {
                self.bracket_block(rows.clone(), low, high, &mut bracket, &mut scratch);
            }
            bracket
        };
        let mut results = on_two_lanes(parallel, run_lane);
        let mut merged = results.pop().expect("at least one lane");
        merged
            .inside
            .reserve(results.iter().map(|other| other.inside.len()).sum());
        for other in results {
            merged.below += other.below;
            merged.inside.extend_from_slice(&other.inside);
            reused::give_back(|b| &mut b.inside, other.inside);
        }
        merged
    }

    /// The Gram product of frames `rows` with every frame from `rows.start`
    /// on, turned into distances to later frames and bracketed.
    fn bracket_block(
        &self,
        rows: Range<usize>,
        low: f64,
        high: f64,
        bracket: &mut Bracket,
        gram: &mut Vec<f32>,
    ) {
        // Compared in f32: rounding the bounds outwards keeps every f32 in
        // [low, high] (as f64) inside and every one below `low` below.
        let low32 = round_down_f32(low);
        let high32 = round_up_f32(high);
        let (centred, norms) = match &self.layout {
            GramLayout::Portable { centred, norms } => (centred, norms),
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            GramLayout::Avx2Tiles { centred, panels } => {
                avx2::bracket_rows(centred, panels, rows, (low32, high32), bracket);
                return;
            }
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            GramLayout::F32Tiles { centred, panels } => {
                avx512::bracket_rows(centred, panels, rows, (low32, high32), bracket);
                return;
            }
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            GramLayout::Avx2Int16Tiles(panels) => {
                avx2::bracket_rows_int16(panels, rows, (low32, high32), bracket);
                return;
            }
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            GramLayout::Int16Tiles(panels) => {
                avx512::bracket_rows_int16(panels, rows, (low32, high32), bracket);
                return;
            }
        };
        let (n, dim) = (self.frames, self.dim);
        let first = rows.start;
        let columns = n - first;
        gram.resize(rows.len() * columns, 0.0);
        let block = &centred[first * dim..];
        // SAFETY: `block` holds the `columns` frames from `first` on, `dim`
        // values each, row-major: A reads `rows.len() <= columns` of them as
        // rows, B all of them as columns (unit row stride, `dim` column
        // stride), and C is a `rows.len() x columns` row-major buffer of at
        // least that size. With beta = 0, C is only written.
        unsafe {
            matrixmultiply::sgemm(
                rows.len(),
                dim,
                columns,
                1.0,
                block.as_ptr(),
                dim as isize,
                1,
                block.as_ptr(),
                1,
                dim as isize,
                0.0,
                gram.as_mut_ptr(),
                columns as isize,
                1,
            );
        }
        for i in rows {
            let row = &mut gram[(i - first) * columns + (i + 1 - first)..(i - first + 1) * columns];
            let norm_i = norms[i];
            for (value, &norm_j) in row.iter_mut().zip(&norms[i + 1..]) {
                *value = (norm_i + norm_j) - 2.0 * *value;
            }
            bracket.below += row.iter().filter(|&&value| value < low32).count();
            for (offset, &value) in row.iter().enumerate() {
                if value >= low32 && value <= high32 {
                    bracket
                        .inside
                        .push((value, i as u32, (i + 1 + offset) as u32));
                }
            }
        }
    }
}

/// The largest of the centred squared norms, or `None` where f32 would
/// overflow or lose relative accuracy on them.
fn bounded_largest_norm(norms: &[f64]) -> Option<f64> {
    let largest = norms.iter().copied().fold(0.0f64, f64::max);
    (largest <= 1e30 && (largest == 0.0 || largest >= 1e-20)).then_some(largest)
}

/// The largest f32 at or below `value` (infinities stay).
fn round_down_f32(value: f64) -> f32 {
    let rounded = value as f32;
    if f64::from(rounded) > value {
        rounded.next_down()
    } else {
        rounded
    }
}

/// The smallest f32 at or above `value` (infinities stay).
fn round_up_f32(value: f64) -> f32 {
    let rounded = value as f32;
    if f64::from(rounded) < value {
        rounded.next_up()
    } else {
        rounded
    }
}

/// `|row|^2` in f64, eight running sums (the error bound allows any order).
#[inline(always)]
fn squared_norm(row: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = row.chunks_exact(8);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| f64::from(v).powi(2))
        .sum();
    for chunk in chunks {
        for (lane, &value) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(value) * f64::from(value);
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// numpy's median of scipy's pairwise squared distances, bit for bit, without
/// computing most of them in scipy's (slow, sequential) order.
///
/// The approximations' order statistics are within the error bound `e` of
/// the exact ones, so every distance whose approximation lies more than `2e`
/// below the approximate lower middle is exactly below the exact middle, and
/// likewise above (see [`narrow`]). The distances in between (a thin window)
/// are recomputed in f64, whose error is so small that narrowing again
/// leaves only a handful to sum in scipy's order. The approximations are only
/// kept inside a sampled bracket around the middle; if the sample misled (the
/// middle or its window is not inside), a second pass keeps all of them.
fn median_squared_distance(signal: &FrameMatrix) -> f64 {
    median_squared_distance_by(signal, GramKind::fastest(signal))
}

fn median_squared_distance_by(signal: &FrameMatrix, kind: GramKind) -> f64 {
    let Some(approximation) = GramApproximation::of_kind(signal, kind) else {
        return median(signal.condensed_squared_distances());
    };
    let n = signal.frames;
    let count = n * (n - 1) / 2;
    let upper_rank = count / 2;
    let lower_rank = if count % 2 == 1 {
        upper_rank
    } else {
        upper_rank - 1
    };
    let ranks = (lower_rank, upper_rank);
    let (low, high, expected_inside) = approximation.sample_bracket(signal, lower_rank, upper_rank);
    for (low, high, expected_inside) in [
        (low, high, expected_inside),
        (f64::NEG_INFINITY, f64::INFINITY, count),
    ] {
        let mut bracket = approximation.bracket(low, high, expected_inside);
        let window = narrow(
            &mut bracket.inside,
            bracket.below,
            (low, high),
            ranks,
            approximation.error_bound,
        );
        reused::give_back(|b| &mut b.inside, bracket.inside);
        if let Some(window) = window {
            return exact_median_in_window(signal, window, ranks);
        }
    }
    unreachable!("an unbounded bracket holds every distance")
}

/// The pairs whose exact distance may have one of the middle ranks, and how
/// many pairs are exactly below all of those.
struct Window {
    below: usize,
    pairs: Vec<(u32, u32)>,
}

/// The [`Window`] of the middle ranks from approximations `entries` (the
/// ones inside `[low, high]`, with `below` more under `low`), each within
/// `error_bound` of its exact distance; `None` if `[low, high]` misses it.
fn narrow<T: Copy + Into<f64>>(
    entries: &mut [(T, u32, u32)],
    below: usize,
    (low, high): (f64, f64),
    (lower_rank, upper_rank): (usize, usize),
    error_bound: f64,
) -> Option<Window> {
    if below > lower_rank || upper_rank >= below + entries.len() {
        return None;
    }
    let (lower_approximate, upper_approximate) =
        middle_values(entries, (lower_rank - below, upper_rank - below), |entry| {
            entry.0.into()
        });
    let floor = lower_approximate - 2.0 * error_bound;
    let ceiling = upper_approximate + 2.0 * error_bound;
    if floor < low || ceiling > high {
        return None;
    }
    let mut window = Window {
        below,
        pairs: Vec::new(),
    };
    for &(value, i, j) in entries.iter() {
        let value: f64 = value.into();
        if value < floor {
            window.below += 1;
        } else if value <= ceiling {
            window.pairs.push((i, j));
        }
    }
    Some(window)
}

/// numpy's median from a [`Window`] that holds the middle ranks: f64
/// distances in any order narrow it to the pairs within their (tiny) error
/// of the middle, and only those are summed in scipy's order.
fn exact_median_in_window(
    signal: &FrameMatrix,
    window: Window,
    (lower_rank, upper_rank): (usize, usize),
) -> f64 {
    let fast = signal.fast_squared_distances(&window.pairs);
    let largest = fast.iter().copied().fold(0.0f64, f64::max);
    let error_bound = signal.fast_relative_error() * largest;
    let mut entries: Vec<(f64, u32, u32)> = fast
        .into_iter()
        .zip(window.pairs)
        .map(|(value, (i, j))| (value, i, j))
        .collect();
    let inner = narrow(
        &mut entries,
        window.below,
        (f64::NEG_INFINITY, f64::INFINITY),
        (lower_rank, upper_rank),
        error_bound,
    )
    .expect("the window holds the middle ranks");
    let mut exact = signal.squared_distances_of_pairs(&inner.pairs);
    let exact_below = inner.below;
    assert!(
        exact_below <= lower_rank && upper_rank < exact_below + exact.len(),
        "the exact median lies in the recomputed window"
    );
    mean_of_middle(
        &mut exact,
        (lower_rank - exact_below, upper_rank - exact_below),
        |&value| value,
    )
}

/// Kernel sums are accumulated as integers in units of 2^-62. Integer sums are
/// exact and associative, so a block sum obtained from partial sums in any
/// order carries no rounding error (an f64 running sum would lose about
/// `n^2 * 1e-16` absolutely). The only error is truncating each entry to the
/// grid (< 2.2e-19), which after the division by the segment length leaves
/// a segment cost off by under `length * 2.2e-19`, below one ulp of the cost.
/// 62 bits keep every entry within an i64, whose float conversion is a single
/// instruction (an i128 conversion is a slow library call); sums use i128,
/// which has room for 2^65 entries.
const FIXED_POINT_BITS: i32 = 62;

/// `K[i][j]` for `i != j` in units of 2^-62.
fn kernel_fixed(distance: f64, gamma: f64) -> i64 {
    // ruptures clips the scaled distance before exponentiating; identical
    // frames therefore get exp(-0.01), not 1.
    let kernel = (-(distance * gamma).clamp(1e-2, 1e2)).exp();
    (kernel * 2f64.powi(FIXED_POINT_BITS)) as i64
}

/// Exact distances of a few consecutive columns to the frames below them
/// from `first_row` on (see [`ColumnBlocks`]).
struct DistanceBlock {
    columns: Range<usize>,
    first_row: usize,
    /// Frames per column: `first_row..columns.end - 1`.
    rows: usize,
    distances: Vec<f64>,
}

impl DistanceBlock {
    /// Distances of `column` to the frames `low..column`; `low` not below
    /// `first_row`.
    fn distances_of(&self, column: usize, low: usize) -> &[f64] {
        let offset = (column - self.columns.start) * self.rows + (low - self.first_row);
        &self.distances[offset..offset + (column - low)]
    }
}

/// The exact distances the search reads, in blocks of
/// [`FrameMatrix::anchors_together`] columns, each computed once, from the
/// lowest live start known at the time (it never falls, so a block stays
/// valid). The search computes the blocks it needs; a second core, when
/// [`Self::help`] runs on one, computes the next ones meanwhile, so that the
/// search's own work per column (kernel entries, sums, candidates) overlaps
/// them.
struct ColumnBlocks<'a> {
    signal: &'a FrameMatrix,
    width: usize,
    slots: Vec<BlockSlot>,
    /// Blocks below this one are being computed or done.
    claimed: AtomicUsize,
    /// The block of the search's newest column, and its lowest live start.
    searching: AtomicUsize,
    lowest_start: AtomicUsize,
    finished: AtomicBool,
}

#[derive(Default)]
struct BlockSlot {
    ready: AtomicBool,
    block: Mutex<Option<DistanceBlock>>,
}

/// How many blocks past the search's a helper computes: further ahead, more
/// of its rows fall below a start that PELT drops meanwhile.
const HELPER_LOOKAHEAD_BLOCKS: usize = 2;

impl<'a> ColumnBlocks<'a> {
    fn new(signal: &'a FrameMatrix) -> Self {
        let width = signal.anchors_together();
        Self {
            signal,
            width,
            slots: (0..signal.frames.div_ceil(width))
                .map(|_| BlockSlot::default())
                .collect(),
            claimed: AtomicUsize::new(0),
            searching: AtomicUsize::new(0),
            lowest_start: AtomicUsize::new(0),
            finished: AtomicBool::new(false),
        }
    }

    /// The search is at `column` with its lowest live start at `low`.
    fn publish_progress(&self, column: usize, low: usize) {
        self.lowest_start.store(low, Ordering::Release);
        self.searching.store(column / self.width, Ordering::Release);
    }

    /// The block holding `column`: computed here, or by the helper (then
    /// waited for, while computing the one after it if nobody has).
    fn take(&self, column: usize) -> DistanceBlock {
        let index = column / self.width;
        let slot = &self.slots[index];
        loop {
            if slot.ready.load(Ordering::Acquire) {
                return lock(&slot.block).take().expect(
                    "a block marked ready holds its distances unless computing them panicked",
                );
            }
            let next = self.claimed.load(Ordering::Acquire);
            if next > index + 1 || !self.claim_and_fill(next) {
                std::hint::spin_loop();
            }
        }
    }

    /// Computes blocks ahead of the search until it finishes.
    fn help(&self) {
        while !self.finished.load(Ordering::Acquire) {
            let next = self.claimed.load(Ordering::Acquire);
            if next >= self.slots.len() {
                return;
            }
            if next > self.searching.load(Ordering::Acquire) + HELPER_LOOKAHEAD_BLOCKS
                || !self.claim_and_fill(next)
            {
                std::hint::spin_loop();
            }
        }
    }

    /// Computes block `index` if it is the next unclaimed one (and exists).
    fn claim_and_fill(&self, index: usize) -> bool {
        if index >= self.slots.len()
            || self
                .claimed
                .compare_exchange(index, index + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return false;
        }
        // Whoever waits for this block must not wait forever if computing
        // it panics: the slot is marked ready, empty, on the way out.
        let slot = &self.slots[index];
        let mark_ready = MarkReady(&slot.ready);
        let columns = index * self.width..((index + 1) * self.width).min(self.signal.frames);
        // Every column needs the frames below it, from the lowest start on.
        let last_row = columns.end - 1;
        let first_row = self.lowest_start.load(Ordering::Acquire).min(last_row);
        let rows = first_row..last_row;
        let mut distances = vec![0.0; columns.len() * rows.len()];
        if !rows.is_empty() {
            self.signal
                .squared_distances_block(columns.clone(), rows.clone(), &mut distances);
        }
        *lock(&slot.block) = Some(DistanceBlock {
            columns,
            first_row,
            rows: rows.len(),
            distances,
        });
        drop(mark_ready);
        true
    }
}

/// Marks a block slot ready when dropped.
struct MarkReady<'a>(&'a AtomicBool);

impl Drop for MarkReady<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The guarded value; a panic elsewhere while it was held leaves nothing
/// half-written here (blocks are stored whole).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Ends [`ColumnBlocks::help`] when dropped, however the search ends.
struct FinishHelp<'b, 'a>(&'b ColumnBlocks<'a>);

impl Drop for FinishHelp<'_, '_> {
    fn drop(&mut self) {
        self.0.finished.store(true, Ordering::Release);
    }
}

/// RBF costs of the segments `[start, end)` for the current end and every
/// start on the jump grid at or after the lowest start PELT still holds.
///
/// The end only moves right and the lowest live start never moves left
/// (PELT only drops starts, and new ones come after all earlier ones), so
/// each kernel entry `K[i][j]` with `j` a new column and `i` at or after the
/// lowest live start is computed once, when its column arrives. Entries left
/// of that start are never needed: with PELT's pruning the work is about
/// `frames * (mean distance back to the oldest live start) * dim`, and at
/// worst (nothing pruned) all `frames^2 / 2` entries, as a full Gram matrix.
struct IncrementalRbfCost<'a> {
    blocks: &'a ColumnBlocks<'a>,
    gamma: f64,
    jump: usize,
    /// Number of grid boundaries: cells + 1.
    stride: usize,
    /// The end that `pair_sums` is up to date with.
    end: usize,
    /// `pair_sums[g]`: sum of fixed-point `K[i][j]` over
    /// `g * jump <= i < j < end`; valid for grid points at or after the
    /// lowest start passed to [`Self::advance`].
    pair_sums: Vec<i128>,
    /// The block of distances that holds the current column.
    block: Option<DistanceBlock>,
    row_sums: Vec<i128>,
}

impl<'a> IncrementalRbfCost<'a> {
    fn new(blocks: &'a ColumnBlocks<'a>, jump: usize, gamma: f64) -> Self {
        let stride = blocks.signal.frames.div_ceil(jump) + 1;
        Self {
            blocks,
            gamma,
            jump,
            stride,
            end: 0,
            pair_sums: vec![0; stride],
            block: None,
            row_sums: Vec::new(),
        }
    }

    /// Index of grid point `position`; without a division in the usual
    /// `jump = 1` (it runs for every live start at every end).
    fn grid_index(&self, position: usize) -> usize {
        if self.jump == 1 {
            position
        } else {
            position / self.jump
        }
    }

    /// Index of a segment boundary (a grid point or the signal length).
    fn boundary_index(&self, position: usize) -> usize {
        if position == self.blocks.signal.frames {
            self.stride - 1
        } else {
            debug_assert_eq!(
                position % self.jump,
                0,
                "segment ends must lie on the jump grid"
            );
            self.grid_index(position)
        }
    }

    /// Moves the end to `end`, keeping costs for starts from `lowest_start`
    /// (a grid point, never below an earlier call's) on.
    fn advance(&mut self, end: usize, lowest_start: usize) {
        debug_assert!(end > self.end);
        debug_assert_eq!(lowest_start % self.jump, 0);
        let low = lowest_start;
        // row_sums[i - low]: sum over the new columns j > i of K[i][j].
        self.row_sums.clear();
        self.row_sums.resize(end - low, 0);
        self.blocks.publish_progress(end - 1, low);
        for column in self.end.max(low)..end {
            let block = match self.block.take() {
                Some(block) if block.columns.contains(&column) => block,
                _ => self.blocks.take(column),
            };
            let distances = block.distances_of(column, low);
            for (sum, &distance) in self.row_sums.iter_mut().zip(distances) {
                *sum += i128::from(kernel_fixed(distance, self.gamma));
            }
            self.block = Some(block);
        }
        // Suffix sums in place, then one per grid point (`low` is one).
        let mut suffix = 0i128;
        for sum in self.row_sums.iter_mut().rev() {
            suffix += *sum;
            *sum = suffix;
        }
        let first = self.grid_index(low);
        for (pair_sum, &suffix) in self.pair_sums[first..]
            .iter_mut()
            .zip(self.row_sums.iter().step_by(self.jump))
        {
            *pair_sum += suffix;
        }
        self.end = end;
    }

    /// Cost of `[start, end)` for the current end; `start` on the grid and
    /// at or after the lowest start of the last [`Self::advance`].
    fn cost(&self, start: usize) -> f64 {
        let upper_pairs = self.pair_sums[self.grid_index(start)];
        let length = self.end - start;
        let block_fixed = ((length as i128) << FIXED_POINT_BITS) + 2 * upper_pairs;
        let block_sum = block_fixed as f64 * 2f64.powi(-FIXED_POINT_BITS);
        // Same expression order as ruptures: diagonal sum minus block mean.
        length as f64 - block_sum / length as f64
    }
}

fn segment_matrix(signal: &FrameMatrix, params: &PeltParams) -> Result<Segmentation, PeltError> {
    let (frames, min_size) = (signal.frames, params.min_size);
    if frames < min_size {
        return Err(PeltError::SignalTooShort { frames, min_size });
    }

    // Long signals use a second core, short ones would spend more on
    // waking it than it saves.
    let parallel = signal.kernels != Kernels::Portable
        && signal.values.len() >= PARALLEL_MIN_VALUES
        && rayon::current_num_threads() > 1;
    let gamma_and_search = || {
        let gamma = params
            .gamma
            .unwrap_or_else(|| median_heuristic_gamma(signal));
        search_with_help(signal, params, gamma, parallel).map(|breakpoints| (gamma, breakpoints))
    };
    let (gamma, breakpoints) = if parallel {
        // All in rayon's pool, the search's layout built by the second core
        // while the median is found (most of its steps leave a core idle):
        // every hand-over between this thread and the pool waits for a
        // sleeping thread to get a core again.
        rayon::join(|| signal.prepare_search_layout(), gamma_and_search).1?
    } else {
        gamma_and_search()?
    };
    Ok(Segmentation { breakpoints, gamma })
}

/// [`search`], with a second core of rayon's pool computing distances ahead
/// of it when `helped` (the caller checks that the pool has one). Both run
/// in the pool: a sleeping worker woken for a helper while this thread
/// searches often gets no core until the search is over. A helper that
/// starts after the search (as it does in a one-thread pool) returns at
/// once.
fn search_with_help(
    signal: &FrameMatrix,
    params: &PeltParams,
    gamma: f64,
    helped: bool,
) -> Result<Vec<usize>, PeltError> {
    let blocks = ColumnBlocks::new(signal);
    if helped {
        rayon::join(
            || {
                let _finish = FinishHelp(&blocks);
                search(&blocks, params, gamma)
            },
            || blocks.help(),
        )
        .0
    } else {
        search(&blocks, params, gamma)
    }
}

/// PELT's search over `blocks`' signal with the given `gamma`: ruptures'
/// breakpoints.
fn search(
    blocks: &ColumnBlocks<'_>,
    params: &PeltParams,
    gamma: f64,
) -> Result<Vec<usize>, PeltError> {
    let (frames, min_size, jump) = (blocks.signal.frames, params.min_size, params.jump);
    let mut costs = IncrementalRbfCost::new(blocks, jump, gamma);

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
        let lowest_start = admissible
            .iter()
            .copied()
            .min()
            .expect("a start was just pushed");
        costs.advance(end, lowest_start);

        candidates.clear();
        for &start in &admissible {
            if let Some(prefix_total) = best_total[costs.grid_index(start)] {
                // Grouping matters for bit-equality: ruptures adds the new
                // segment's (cost + penalty) to the running total.
                let total = prefix_total + (costs.cost(start) + params.penalty);
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
        let mut kept = 0;
        for (index, &(_, total)) in candidates.iter().enumerate() {
            if total <= threshold {
                admissible[kept] = admissible[index];
                kept += 1;
            }
        }
        admissible.truncate(kept);
    }

    let mut breakpoints = Vec::new();
    let mut end = frames;
    while end > 0 {
        breakpoints.push(end);
        end = last_segment_start[costs.boundary_index(end)];
    }
    breakpoints.reverse();
    Ok(breakpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pelt_rbf<R: AsRef<[f32]>>(
        frames: &[R],
        params: &PeltParams,
    ) -> Result<Vec<usize>, PeltError> {
        Ok(segment(frames, params)?.breakpoints)
    }

    fn pelt_rbf_flat(
        values: &[f32],
        dim: usize,
        params: &PeltParams,
    ) -> Result<Vec<usize>, PeltError> {
        Ok(segment_flat(values, dim, params)?.breakpoints)
    }

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
        serde_json::from_str(include_str!("../tests/fixtures/reference.json"))
            .expect("tests/fixtures/reference.json parses; regenerate it with make_reference.py")
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
            let result =
                segment(&frames, &case.params).unwrap_or_else(|e| panic!("{}: {e}", case.name));
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

    /// Incremental segment costs must agree with summing the Gram block
    /// directly, the way ruptures does, for every start on the grid.
    #[test]
    fn incremental_cost_matches_direct_block_sum() {
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
        let gamma = median_heuristic_gamma(&signal);
        let jump = 3;

        let kernel = |i: usize, j: usize| -> f64 {
            if i == j {
                return 1.0;
            }
            let d: f64 = signal
                .frame(i)
                .iter()
                .zip(signal.frame(j))
                .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                .sum();
            (-(d * gamma).clamp(1e-2, 1e2)).exp()
        };
        let mut positions: Vec<usize> = (0..rows.len()).step_by(jump).collect();
        positions.push(rows.len());
        for (ai, &start) in positions.iter().enumerate() {
            // Lowest starts move right along the way, as PELT's do.
            let blocks = ColumnBlocks::new(&signal);
            let mut costs = IncrementalRbfCost::new(&blocks, jump, gamma);
            for &end in &positions[ai + 1..] {
                let lowest = (start / 2 + end * start / (2 * rows.len())) / jump * jump;
                costs.advance(end, lowest);
                let block: f64 = (start..end)
                    .flat_map(|i| (start..end).map(move |j| (i, j)))
                    .map(|(i, j)| kernel(i, j))
                    .sum();
                let length = (end - start) as f64;
                let direct = length - block / length;
                let fast = costs.cost(start);
                assert!(
                    (direct - fast).abs() < 1e-12,
                    "[{start}, {end}): direct {direct}, incremental {fast}"
                );
            }
        }
    }

    /// The windowed median is numpy's median of scipy's distances, bit for
    /// bit: odd and even pair counts, repeated frames (ties at the middle),
    /// a large common offset and clustered data.
    #[test]
    fn windowed_median_is_the_exact_median() {
        let mut rng = fastrand::Rng::with_seed(7);
        for (frames, dim, offset, levels) in [
            (2, 3, 0.0f32, 0),
            (3, 1, 0.0, 0),
            (4, 5, 0.0, 0),
            (37, 7, 0.0, 0),
            (64, 33, 1000.0, 0),
            (101, 273, 0.0, 5),
            (150, 16, 0.0, 2),
            (700, 20, 3.0, 9),
        ] {
            let level: Vec<Vec<f32>> = (0..levels.max(1))
                .map(|_| (0..dim).map(|_| rng.f32() + offset).collect())
                .collect();
            let rows: Vec<Vec<f32>> = (0..frames)
                .map(|i| {
                    let base = &level[i * levels.max(1) / frames];
                    if levels > 0 && i % 3 == 0 {
                        // Exact repeats of the level: many equal distances.
                        base.clone()
                    } else {
                        base.iter().map(|&b| b + (rng.f32() - 0.5) * 0.3).collect()
                    }
                })
                .collect();
            let values: Vec<f32> = rows.concat();
            let portable = FrameMatrix::with_kernels(values.clone(), dim, Kernels::Portable);
            let exact = median(portable.condensed_squared_distances());
            for kernels in Kernels::available() {
                let signal = FrameMatrix::with_kernels(values.clone(), dim, kernels);
                for kind in GramKind::available(&signal) {
                    let windowed = median_squared_distance_by(&signal, kind);
                    assert_eq!(
                        windowed.to_bits(),
                        exact.to_bits(),
                        "{frames} x {dim} ({kernels:?}, {kind:?}): {windowed} vs {exact}"
                    );
                }
            }
        }
    }

    /// Frames whose values span many binades (so differences and squares
    /// round), at lengths that leave partial vectors.
    fn awkward_values(frames: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..frames * dim)
            .map(|_| {
                let magnitude = 10f32.powi(rng.i32(-6..=4));
                let sign = if rng.bool() { 1.0 } else { -1.0 };
                sign * magnitude * (1.0 + rng.f32())
            })
            .collect()
    }

    /// A helper computing distances ahead on a second core changes nothing:
    /// long shot-like signals, several settings, several runs (the helper's
    /// timing differs from run to run).
    #[test]
    fn search_helped_by_a_second_core_matches_the_single_core_search() {
        let (frames, dim) = (600, 240);
        let mut rng = fastrand::Rng::with_seed(11);
        let mut values = Vec::with_capacity(frames * dim);
        let mut level: Vec<f32> = Vec::new();
        for frame in 0..frames {
            if frame % 37 == 0 || rng.u32(0..20) == 0 {
                level = (0..dim).map(|_| rng.f32()).collect();
            }
            values.extend(level.iter().map(|l| l + (rng.f32() - 0.5) * 0.4));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for kernels in Kernels::available() {
            let signal = FrameMatrix::with_kernels(values.clone(), dim, kernels);
            let gamma = median_heuristic_gamma(&signal);
            for (penalty, min_size, jump) in [(1.0, 2, 1), (5.0, 2, 5), (0.5, 3, 2)] {
                let params = PeltParams {
                    penalty,
                    min_size,
                    jump,
                    gamma: None,
                };
                let alone = search_with_help(&signal, &params, gamma, false).unwrap();
                assert!(alone.len() > 10, "{kernels:?} {params:?}: {alone:?}");
                for _ in 0..5 {
                    let helped =
                        pool.install(|| search_with_help(&signal, &params, gamma, true).unwrap());
                    assert_eq!(helped, alone, "{kernels:?} {params:?}");
                }
            }
        }
    }

    /// Every vector kernel's exact distances are the portable loop's (and so
    /// scipy's) bit for bit: bands of every length against one anchor, and
    /// arbitrary pairs. Runs each kernel set the CPU has (AVX2, AVX-512).
    #[test]
    fn vector_kernels_give_bit_identical_distances() {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        if avx2::available() {
            assert!(Kernels::available().contains(&Kernels::Avx2));
        }
        for (frames, dim, kernels) in [(45, 1), (45, 7), (70, 273), (33, 17)]
            .into_iter()
            .flat_map(|(frames, dim)| {
                Kernels::available()
                    .into_iter()
                    .map(move |k| (frames, dim, k))
            })
        {
            let values = awkward_values(frames, dim, (frames * dim) as u64);
            let portable = FrameMatrix::with_kernels(values.clone(), dim, Kernels::Portable);
            let fast = FrameMatrix::with_kernels(values, dim, kernels);
            let scalar =
                |i: usize, j: usize| exact_squared_distance(portable.frame(i), portable.frame(j));
            let mut out = vec![0.0; frames];
            for anchor in [0, frames / 2, frames - 1] {
                for low in 0..frames {
                    for high in [low, low + 1, low + 8, low + 9, low + 31, low + 33, frames] {
                        let high = high.min(frames);
                        out.fill(f64::NAN);
                        fast.squared_distances_from(anchor, low..high, &mut out);
                        for (offset, &value) in out[..high - low].iter().enumerate() {
                            assert_eq!(
                                value.to_bits(),
                                scalar(anchor, low + offset).to_bits(),
                                "{frames} x {dim} ({kernels:?}): anchor {anchor}, frame {}",
                                low + offset
                            );
                        }
                    }
                }
            }
            let pairs: Vec<(u32, u32)> = (0..frames as u32)
                .flat_map(|i| (0..frames as u32).map(move |j| (i, j)))
                .step_by(3)
                .collect();
            // Any-order f64 sums: within a relative gamma_{dim+2} of the exact sum,
            // as scipy's own is, on both paths.
            let terms = (dim + 2) as f64 * f64::EPSILON / 2.0;
            let relative = 2.0 * terms / (1.0 - terms);
            // A list long enough for two cores gives each pair the same bits.
            let many: Vec<(u32, u32)> = pairs
                .iter()
                .copied()
                .cycle()
                .take(PARALLEL_MIN_FAST_PAIRS + 3)
                .collect();
            let split = fast.fast_squared_distances(&many);
            let here = fast.fast_squared_distances_here(&many);
            assert!(
                split
                    .iter()
                    .zip(&here)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
            assert_eq!(split.len(), many.len());
            for length in [0, 1, 7, 8, 9, pairs.len()] {
                let distances = fast.squared_distances_of_pairs(&pairs[..length]);
                assert_eq!(distances.len(), length);
                for (&(i, j), value) in pairs.iter().zip(distances) {
                    assert_eq!(value.to_bits(), scalar(i as usize, j as usize).to_bits());
                }
                for signal in [&portable, &fast] {
                    let quick = signal.fast_squared_distances(&pairs[..length]);
                    assert_eq!(quick.len(), length);
                    for (&(i, j), value) in pairs.iter().zip(quick) {
                        let exact = scalar(i as usize, j as usize);
                        assert!(
                            (value - exact).abs() <= relative * exact,
                            "{frames} x {dim} ({:?}): ({i}, {j}) {value} vs {exact}",
                            signal.kernels
                        );
                    }
                }
            }
        }
    }

    /// Every approximate distance of the vector Gram tiles lies within the
    /// proven error bound of the exact one, and the bracket counts agree with
    /// a direct count (pairs near the bounds excepted).
    #[test]
    fn gram_bracket_approximations_stay_within_the_error_bound() {
        for (frames, dim) in [(2, 3), (31, 5), (33, 273), (100, 40)] {
            let values: Vec<f32> = awkward_values(frames, dim, 3)
                .iter()
                .map(|v| v.clamp(-50.0, 50.0))
                .collect();
            let signal = FrameMatrix::with_kernels(values.clone(), dim, Kernels::detect());
            let kinds = GramKind::available(&signal);
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            if avx2::available() {
                assert!(kinds.contains(&GramKind::Avx2Tiles));
                assert!(kinds.contains(&GramKind::Avx2Int16Tiles));
            }
            #[cfg(all(feature = "simd", target_arch = "x86_64"))]
            if avx512::vnni_available() {
                assert!(kinds.contains(&GramKind::Int16Tiles));
            }
            for kind in kinds {
                let approximation =
                    GramApproximation::of_kind(&signal, kind).expect("bounded values");
                let bracket = approximation.bracket(f64::NEG_INFINITY, f64::INFINITY, 0);
                assert_eq!(bracket.below, 0);
                assert_eq!(bracket.inside.len(), frames * (frames - 1) / 2, "{kind:?}");
                let mut seen = std::collections::HashSet::new();
                for &(value, i, j) in &bracket.inside {
                    assert!(i < j && seen.insert((i, j)), "{kind:?}: pair ({i}, {j})");
                    let exact =
                        exact_squared_distance(signal.frame(i as usize), signal.frame(j as usize));
                    assert!(
                        (f64::from(value) - exact).abs() <= approximation.error_bound,
                        "{kind:?} {frames} x {dim}: ({i}, {j}) approx {value}, exact {exact}, \
                         bound {}",
                        approximation.error_bound
                    );
                }
                // The median's sample: every ordered pair, both ways round.
                let pairs: Vec<(u32, u32)> = (0..frames as u32)
                    .flat_map(|i| {
                        (0..frames as u32)
                            .filter(move |&j| j != i)
                            .map(move |j| (i, j))
                    })
                    .collect();
                let (sample, relative) = approximation.sample_squared_distances(&signal, &pairs);
                for (&value, &(i, j)) in sample.iter().zip(&pairs) {
                    let exact =
                        exact_squared_distance(signal.frame(i as usize), signal.frame(j as usize));
                    assert!(
                        (value - exact).abs() <= approximation.error_bound + relative * exact,
                        "{kind:?} {frames} x {dim} sample: ({i}, {j}) approx {value}, exact {exact}"
                    );
                }
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
        let result = segment(&rows, &PeltParams::default()).unwrap();
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
        let result = segment(&[vec![3.0f32]], &params).unwrap();
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
