//! The offline per-frame descriptor used for shot detection.
//!
//! No CLIP-like image model ships in any registry package, so the default
//! descriptor is hand-made and cheap (well under a millisecond per 640x360
//! frame). It concatenates three blocks, each scaled so that its contribution
//! to the squared Euclidean distance between two frames is comparable:
//!
//! 1. **Colour**: an HSV histogram, 8 hue x 4 saturation x 4 value bins,
//!    L1-normalised, then square-rooted (the Hellinger embedding: Euclidean
//!    distance between square-rooted histograms is the Hellinger distance,
//!    which weighs small bins fairly and is bounded by sqrt 2). Lighting and
//!    palette changes at a cut move this block; motion within a shot barely
//!    does.
//! 2. **Layout**: a 16x9 grey thumbnail (box-averaged), mean-centred and
//!    divided by its norm, so it encodes where light and dark are, not how
//!    bright the frame is; weight [`THUMB_WEIGHT`]. This separates two shots
//!    with similar colours but different framing.
//! 3. **Texture**: edge density, the fraction of thumbnail-resolution
//!    (64x36) pixels whose gradient magnitude exceeds a threshold, weight
//!    [`EDGE_WEIGHT`]: a close-up and a wide shot differ here.
//!
//! Colour and layout blocks both have a squared distance in roughly [0, 2]
//! between unrelated frames; the layout weight below 1 keeps camera motion
//! inside a shot (which mostly moves the layout) from outweighing colour.
//! PELT's RBF kernel then takes distances relative to the median pairwise
//! distance, so only these ratios matter, not the absolute scale.

/// Names the descriptor, so stored records say which features they hold.
pub const DESCRIPTOR_ID: &str = "hsv8x4x4-hellinger+thumb16x9+edges/v1";

const HUE_BINS: usize = 8;
const SAT_BINS: usize = 4;
const VAL_BINS: usize = 4;
const HIST_LEN: usize = HUE_BINS * SAT_BINS * VAL_BINS;
const THUMB_W: usize = 16;
const THUMB_H: usize = 9;
/// Edge density is measured on a grey image this size: big enough for
/// texture, small enough that compression noise does not count as edges.
const EDGE_W: usize = 64;
const EDGE_H: usize = 36;
/// Gradient magnitude (central differences on 0..1 grey) counted as an edge.
const EDGE_THRESHOLD: f32 = 0.08;

/// Weight of the layout block relative to the colour block.
pub const THUMB_WEIGHT: f32 = 0.7;
/// Weight of the edge density (a value in [0, 1]).
pub const EDGE_WEIGHT: f32 = 1.0;

/// Length of every descriptor.
pub const DESCRIPTOR_LEN: usize = HIST_LEN + THUMB_W * THUMB_H + 1;

/// Why a descriptor could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FeatureError {
    #[error(
        "RGB buffer holds {len} bytes but a {width}x{height} frame needs {expected}; pass packed \
         RGB24"
    )]
    BufferSize {
        width: u32,
        height: u32,
        len: usize,
        expected: usize,
    },
    #[error("frame is {width}x{height}; a descriptor needs at least one pixel")]
    Empty { width: u32, height: u32 },
}

/// Computes the descriptor of one packed RGB24 frame.
pub fn frame_descriptor(rgb: &[u8], width: u32, height: u32) -> Result<Vec<f32>, FeatureError> {
    let (w, h) = (width as usize, height as usize);
    if w == 0 || h == 0 {
        return Err(FeatureError::Empty { width, height });
    }
    let expected = w * h * 3;
    if rgb.len() != expected {
        return Err(FeatureError::BufferSize {
            width,
            height,
            len: rgb.len(),
            expected,
        });
    }

    let mut descriptor = Vec::with_capacity(DESCRIPTOR_LEN);
    descriptor.extend(hsv_histogram(rgb));
    descriptor.extend(
        centred_unit(grey_thumbnail(rgb, w, h, THUMB_W, THUMB_H))
            .into_iter()
            .map(|v| v * THUMB_WEIGHT),
    );
    descriptor.push(EDGE_WEIGHT * edge_density(&grey_thumbnail(rgb, w, h, EDGE_W, EDGE_H)));
    debug_assert_eq!(descriptor.len(), DESCRIPTOR_LEN);
    Ok(descriptor)
}

/// Square-rooted, L1-normalised HSV histogram.
fn hsv_histogram(rgb: &[u8]) -> Vec<f32> {
    let mut counts = vec![0u32; HIST_LEN];
    for px in rgb.chunks_exact(3) {
        let (h, s, v) = rgb_to_hsv(px[0], px[1], px[2]);
        let hb = ((h * HUE_BINS as f32) as usize).min(HUE_BINS - 1);
        let sb = ((s * SAT_BINS as f32) as usize).min(SAT_BINS - 1);
        let vb = ((v * VAL_BINS as f32) as usize).min(VAL_BINS - 1);
        counts[(hb * SAT_BINS + sb) * VAL_BINS + vb] += 1;
    }
    let total = (rgb.len() / 3) as f32;
    counts
        .into_iter()
        .map(|c| (c as f32 / total).sqrt())
        .collect()
}

/// Hue in [0, 1) (fraction of the colour wheel), saturation and value in [0, 1].
fn rgb_to_hsv(r: u8, g: u8, b: u8) -> (f32, f32, f32) {
    let (r, g, b) = (f32::from(r), f32::from(g), f32::from(b));
    let max = r.max(g).max(b);
    let min = r.min(g).min(b);
    let chroma = max - min;
    let value = max / 255.0;
    let saturation = if max > 0.0 { chroma / max } else { 0.0 };
    let hue_sixths = if chroma == 0.0 {
        0.0
    } else if max == r {
        ((g - b) / chroma).rem_euclid(6.0)
    } else if max == g {
        (b - r) / chroma + 2.0
    } else {
        (r - g) / chroma + 4.0
    };
    (hue_sixths / 6.0, saturation, value)
}

/// Box-averaged grey (Rec. 601 luma, 0..1) image of `out_w` x `out_h` cells.
/// Every cell averages a non-empty block of source pixels, so frames smaller
/// than the output are enlarged by repetition instead of leaving holes (which
/// would read as edges).
fn grey_thumbnail(rgb: &[u8], w: usize, h: usize, out_w: usize, out_h: usize) -> Vec<f32> {
    // Source span [start, end) of output cell `i` of `n` over `len` pixels.
    let span = |i: usize, n: usize, len: usize| {
        let start = (i * len / n).min(len - 1);
        (start, ((i + 1) * len / n).max(start + 1))
    };
    let mut thumbnail = Vec::with_capacity(out_w * out_h);
    for cy in 0..out_h {
        let (y0, y1) = span(cy, out_h, h);
        for cx in 0..out_w {
            let (x0, x1) = span(cx, out_w, w);
            let mut sum = 0f32;
            for y in y0..y1 {
                for px in rgb[(y * w + x0) * 3..(y * w + x1) * 3].chunks_exact(3) {
                    sum += 0.299 * f32::from(px[0])
                        + 0.587 * f32::from(px[1])
                        + 0.114 * f32::from(px[2]);
                }
            }
            thumbnail.push(sum / (255.0 * ((y1 - y0) * (x1 - x0)) as f32));
        }
    }
    thumbnail
}

/// Subtracts the mean and divides by the Euclidean norm (a flat image stays all zeros).
fn centred_unit(mut values: Vec<f32>) -> Vec<f32> {
    let mean = values.iter().sum::<f32>() / values.len() as f32;
    values.iter_mut().for_each(|v| *v -= mean);
    let norm = values.iter().map(|v| v * v).sum::<f32>().sqrt();
    // Below this the "layout" is compression noise on a flat frame.
    if norm > 1e-3 {
        values.iter_mut().for_each(|v| *v /= norm);
    } else {
        values.iter_mut().for_each(|v| *v = 0.0);
    }
    values
}

/// Fraction of interior pixels whose central-difference gradient exceeds
/// [`EDGE_THRESHOLD`].
fn edge_density(grey: &[f32]) -> f32 {
    let mut strong = 0u32;
    let mut total = 0u32;
    for y in 1..EDGE_H - 1 {
        for x in 1..EDGE_W - 1 {
            let at = |xx: usize, yy: usize| grey[yy * EDGE_W + xx];
            let gx = (at(x + 1, y) - at(x - 1, y)) * 0.5;
            let gy = (at(x, y + 1) - at(x, y - 1)) * 0.5;
            if (gx * gx + gy * gy).sqrt() > EDGE_THRESHOLD {
                strong += 1;
            }
            total += 1;
        }
    }
    strong as f32 / total as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn solid(w: u32, h: u32, rgb: [u8; 3]) -> Vec<u8> {
        rgb.iter()
            .copied()
            .cycle()
            .take((w * h * 3) as usize)
            .collect()
    }

    fn distance(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).powi(2))
            .sum::<f32>()
            .sqrt()
    }

    #[test]
    fn descriptor_has_fixed_length_and_unit_histogram() {
        let d = frame_descriptor(&solid(40, 30, [200, 30, 30]), 40, 30).unwrap();
        assert_eq!(d.len(), DESCRIPTOR_LEN);
        let hist_sq: f32 = d[..HIST_LEN].iter().map(|v| v * v).sum();
        assert!((hist_sq - 1.0).abs() < 1e-5);
        // A flat frame has no layout and no edges.
        assert!(d[HIST_LEN..].iter().all(|v| v.abs() < 1e-6));
    }

    #[test]
    fn different_colours_are_far_and_identical_frames_are_equal() {
        let red = frame_descriptor(&solid(32, 18, [200, 30, 30]), 32, 18).unwrap();
        let red2 = frame_descriptor(&solid(32, 18, [200, 30, 30]), 32, 18).unwrap();
        let blue = frame_descriptor(&solid(32, 18, [30, 30, 200]), 32, 18).unwrap();
        assert_eq!(distance(&red, &red2), 0.0);
        assert!(distance(&red, &blue) > 1.0);
    }

    #[test]
    fn tiny_frames_work() {
        assert_eq!(
            frame_descriptor(&[1, 2, 3], 1, 1).unwrap().len(),
            DESCRIPTOR_LEN
        );
    }

    #[test]
    fn wrong_buffer_size_is_an_error() {
        assert!(matches!(
            frame_descriptor(&[0; 10], 2, 2),
            Err(FeatureError::BufferSize { expected: 12, .. })
        ));
        assert!(matches!(
            frame_descriptor(&[], 0, 5),
            Err(FeatureError::Empty { .. })
        ));
    }
}
