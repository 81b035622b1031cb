//! Antialiased bilinear (triangle filter) resizing of RGB images.
//!
//! `image::imageops::resize` with `FilterType::Triangle` computes the same filter, but through
//! its generic pixel traits with a float intermediate per channel; on a 3000x2171 group photo it
//! cost more than the SCRFD inference itself. This version precomputes each output pixel's
//! input span and weights once per axis and runs two flat passes over packed RGB bytes, the way
//! Pillow's `BILINEAR` resampling does (whose output the Python reference feeds its model).

use super::image::RgbImage;

/// The input pixels one output pixel reads along one axis.
struct Taps {
    /// First input index of each output index.
    starts: Vec<usize>,
    /// `taps_per_output` weights per output index (zero-padded), summing to 1.
    weights: Vec<f32>,
    taps_per_output: usize,
}

/// Triangle filter of radius 1, stretched by the scale factor when shrinking so every input
/// pixel contributes (this is what makes it antialiased).
fn taps(input_len: usize, output_len: usize) -> Taps {
    let scale = input_len as f64 / output_len as f64;
    let stretch = scale.max(1.0);
    let support = stretch;
    let taps_per_output = (support.ceil() as usize) * 2 + 1;
    let mut starts = Vec::with_capacity(output_len);
    let mut weights = vec![0.0f32; output_len * taps_per_output];
    for output in 0..output_len {
        let centre = (output as f64 + 0.5) * scale;
        let first = ((centre - support).floor().max(0.0)) as usize;
        let last = ((centre + support).ceil() as usize).min(input_len);
        let row = &mut weights[output * taps_per_output..(output + 1) * taps_per_output];
        let mut total = 0.0f64;
        for (tap, input) in (first..last).take(taps_per_output).enumerate() {
            let distance = ((input as f64 + 0.5 - centre) / stretch).abs();
            let weight = (1.0 - distance).max(0.0);
            row[tap] = weight as f32;
            total += weight;
        }
        if total > 0.0 {
            row.iter_mut()
                .for_each(|weight| *weight = (f64::from(*weight) / total) as f32);
        }
        starts.push(first);
    }
    Taps {
        starts,
        weights,
        taps_per_output,
    }
}

/// `image` resized to `width` x `height` (both at least 1).
pub fn resize_triangle(image: &RgbImage, width: u32, height: u32) -> RgbImage {
    assert!(width > 0 && height > 0, "resize to an empty image");
    let (input_width, input_height) = (image.width() as usize, image.height() as usize);
    let (output_width, output_height) = (width as usize, height as usize);
    let source = image.as_raw();

    // Horizontal pass over every input row, into floats so rounding happens once.
    let horizontal = taps(input_width, output_width);
    let mut rows = vec![0.0f32; input_height * output_width * 3];
    for y in 0..input_height {
        let input_row = &source[y * input_width * 3..(y + 1) * input_width * 3];
        let output_row = &mut rows[y * output_width * 3..(y + 1) * output_width * 3];
        for x in 0..output_width {
            let start = horizontal.starts[x];
            let weights = &horizontal.weights
                [x * horizontal.taps_per_output..(x + 1) * horizontal.taps_per_output];
            let span = weights.len().min(input_width - start);
            let mut sum = [0.0f32; 3];
            for (weight, pixel) in weights[..span]
                .iter()
                .zip(input_row[start * 3..(start + span) * 3].chunks_exact(3))
            {
                sum[0] += weight * f32::from(pixel[0]);
                sum[1] += weight * f32::from(pixel[1]);
                sum[2] += weight * f32::from(pixel[2]);
            }
            output_row[x * 3..x * 3 + 3].copy_from_slice(&sum);
        }
    }

    // Vertical pass: each output row is a weighted sum of whole intermediate rows.
    let vertical = taps(input_height, output_height);
    let stride = output_width * 3;
    let mut output = vec![0u8; output_height * stride];
    let mut accumulator = vec![0.0f32; stride];
    for y in 0..output_height {
        let start = vertical.starts[y];
        let weights =
            &vertical.weights[y * vertical.taps_per_output..(y + 1) * vertical.taps_per_output];
        let span = weights.len().min(input_height - start);
        accumulator.fill(0.0);
        for (tap, &weight) in weights[..span].iter().enumerate() {
            if weight == 0.0 {
                continue;
            }
            let row = &rows[(start + tap) * stride..(start + tap + 1) * stride];
            for (sum, &value) in accumulator.iter_mut().zip(row) {
                *sum += weight * value;
            }
        }
        for (byte, &value) in output[y * stride..(y + 1) * stride]
            .iter_mut()
            .zip(&accumulator)
        {
            *byte = value.round().clamp(0.0, 255.0) as u8;
        }
    }
    RgbImage::from_raw(width, height, output).expect("buffer sized for the output")
}

/// Pillow's fixed-point precision for 8-bit resampling: coefficients carry this many fraction
/// bits, so that sums of 8-bit values times coefficients fit an `i32`.
const PILLOW_PRECISION_BITS: u32 = 32 - 8 - 2;

/// Keys' cubic convolution with `a = -0.5`, support 2: Pillow's `BICUBIC`.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// One axis of a Pillow resample: per output index, the first input index, the number of taps
/// and their fixed-point weights (`taps_per_output` slots each).
struct FixedTaps {
    starts: Vec<usize>,
    counts: Vec<usize>,
    weights: Vec<i32>,
    taps_per_output: usize,
}

/// The coefficients Pillow's `precompute_coeffs` and `normalize_coeffs_8bpc` compute, step for
/// step (double precision, the same roundings), so that the resized bytes are Pillow's.
fn bicubic_taps(input_len: usize, output_len: usize) -> FixedTaps {
    const SUPPORT: f64 = 2.0;
    let scale = input_len as f64 / output_len as f64;
    let filter_scale = scale.max(1.0);
    let support = SUPPORT * filter_scale;
    let taps_per_output = support.ceil() as usize * 2 + 1;
    let mut starts = Vec::with_capacity(output_len);
    let mut counts = Vec::with_capacity(output_len);
    let mut weights = vec![0i32; output_len * taps_per_output];
    let unit = f64::from(1u32 << PILLOW_PRECISION_BITS);
    for output in 0..output_len {
        let centre = (output as f64 + 0.5) * scale;
        // C's `(int)` truncates toward zero; clamping to 0 makes that the same as floor here.
        let first = ((centre - support + 0.5) as i64).max(0) as usize;
        let end = ((centre + support + 0.5) as i64).min(input_len as i64) as usize;
        let count = end.saturating_sub(first).min(taps_per_output);
        let raw: Vec<f64> = (0..count)
            .map(|tap| bicubic((tap as f64 + first as f64 - centre + 0.5) / filter_scale))
            .collect();
        let total: f64 = raw.iter().sum();
        for (tap, weight) in raw.iter().enumerate() {
            let normalised = if total != 0.0 {
                weight / total
            } else {
                *weight
            };
            // Round half away from zero, as Pillow does.
            weights[output * taps_per_output + tap] = if normalised < 0.0 {
                (-0.5 + normalised * unit) as i32
            } else {
                (0.5 + normalised * unit) as i32
            };
        }
        starts.push(first);
        counts.push(count);
    }
    FixedTaps {
        starts,
        counts,
        weights,
        taps_per_output,
    }
}

fn clip_fixed(sum: i64) -> u8 {
    (sum >> PILLOW_PRECISION_BITS).clamp(0, 255) as u8
}

/// `image` resized to `width` x `height` with Pillow's `BICUBIC` filter, byte for byte as
/// `PIL.Image.resize(..., Image.BICUBIC)` computes it (antialiased when shrinking; horizontal
/// pass first, rounded to 8 bits between passes). CLIP's preprocessing is defined as that call,
/// so an encoder fed anything else sees slightly different pixels than it was trained on.
pub fn resize_bicubic(image: &RgbImage, width: u32, height: u32) -> RgbImage {
    assert!(width > 0 && height > 0, "resize to an empty image");
    let (input_width, input_height) = (image.width() as usize, image.height() as usize);
    let (output_width, output_height) = (width as usize, height as usize);
    let rounding = 1i64 << (PILLOW_PRECISION_BITS - 1);

    let horizontal_done;
    let rows: &[u8] = if output_width == input_width {
        image.as_raw()
    } else {
        let taps = bicubic_taps(input_width, output_width);
        let source = image.as_raw();
        let mut out = vec![0u8; input_height * output_width * 3];
        for y in 0..input_height {
            let row = &source[y * input_width * 3..(y + 1) * input_width * 3];
            for x in 0..output_width {
                let weights = &taps.weights[x * taps.taps_per_output..][..taps.counts[x]];
                let mut sums = [rounding; 3];
                for (tap, &weight) in weights.iter().enumerate() {
                    let pixel = &row[(taps.starts[x] + tap) * 3..][..3];
                    for channel in 0..3 {
                        sums[channel] += i64::from(pixel[channel]) * i64::from(weight);
                    }
                }
                for channel in 0..3 {
                    out[(y * output_width + x) * 3 + channel] = clip_fixed(sums[channel]);
                }
            }
        }
        horizontal_done = out;
        &horizontal_done
    };
    if output_height == input_height {
        return RgbImage::from_raw(width, height, rows.to_vec())
            .expect("buffer sized for the output");
    }
    let taps = bicubic_taps(input_height, output_height);
    let stride = output_width * 3;
    let mut output = vec![0u8; output_height * stride];
    let mut sums = vec![0i64; stride];
    for y in 0..output_height {
        sums.fill(rounding);
        let weights = &taps.weights[y * taps.taps_per_output..][..taps.counts[y]];
        for (tap, &weight) in weights.iter().enumerate() {
            let row = &rows[(taps.starts[y] + tap) * stride..][..stride];
            for (sum, &value) in sums.iter_mut().zip(row) {
                *sum += i64::from(value) * i64::from(weight);
            }
        }
        for (byte, &sum) in output[y * stride..(y + 1) * stride].iter_mut().zip(&sums) {
            *byte = clip_fixed(sum);
        }
    }
    RgbImage::from_raw(width, height, output).expect("buffer sized for the output")
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::imageops::{self, FilterType};

    fn textured(width: u32, height: u32) -> RgbImage {
        RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([
                (x * 7 + y * 3) as u8,
                ((x * y) % 251) as u8,
                if (x / 5 + y / 3) % 2 == 0 { 230 } else { 20 },
            ])
        })
    }

    #[test]
    fn weights_cover_the_input_and_sum_to_one() {
        for (input, output) in [(3000, 640), (2171, 463), (512, 640), (7, 7), (1, 5)] {
            let taps = taps(input, output);
            for index in 0..output {
                let row =
                    &taps.weights[index * taps.taps_per_output..(index + 1) * taps.taps_per_output];
                let total: f32 = row.iter().sum();
                assert!(
                    (total - 1.0).abs() < 1e-5,
                    "{input}->{output} at {index}: {total}"
                );
                assert!(taps.starts[index] < input);
            }
        }
    }

    #[test]
    fn bicubic_keeps_flat_colour_and_size_one_to_one() {
        let flat = RgbImage::from_pixel(300, 217, image::Rgb([12, 200, 99]));
        for (width, height) in [(64, 46), (309, 224), (600, 434)] {
            let resized = resize_bicubic(&flat, width, height);
            assert_eq!(resized.dimensions(), (width, height));
            assert!(resized.pixels().all(|pixel| pixel.0 == [12, 200, 99]));
        }
        let image = textured(13, 9);
        assert_eq!(resize_bicubic(&image, 13, 9), image);
    }

    #[test]
    fn bicubic_weights_sum_to_one_in_fixed_point() {
        for (input, output) in [(300, 224), (217, 224), (3000, 224), (5, 224)] {
            let taps = bicubic_taps(input, output);
            for index in 0..output {
                let total: i64 = taps.weights[index * taps.taps_per_output..][..taps.counts[index]]
                    .iter()
                    .map(|&w| i64::from(w))
                    .sum();
                // Each weight is rounded on its own: a few units of 2^-22 off at most.
                assert!(
                    (total - (1 << PILLOW_PRECISION_BITS)).abs() <= 8,
                    "{input}->{output} at {index}: {total}"
                );
            }
        }
    }

    #[test]
    fn same_size_is_the_identity() {
        let image = textured(13, 9);
        assert_eq!(resize_triangle(&image, 13, 9), image);
    }

    #[test]
    fn flat_colour_stays_flat() {
        let image = RgbImage::from_pixel(300, 217, image::Rgb([12, 200, 99]));
        let resized = resize_triangle(&image, 64, 46);
        assert!(resized.pixels().all(|pixel| pixel.0 == [12, 200, 99]));
    }

    #[test]
    fn close_to_image_crates_triangle_filter() {
        // The same filter computed differently: differences are rounding and edge handling.
        for (width, height) in [(64, 47), (480, 480)] {
            let image = textured(300, 217);
            let ours = resize_triangle(&image, width, height);
            let theirs = imageops::resize(&image, width, height, FilterType::Triangle);
            let differences: Vec<i32> = ours
                .as_raw()
                .iter()
                .zip(theirs.as_raw())
                .map(|(&a, &b)| (i32::from(a) - i32::from(b)).abs())
                .collect();
            let mean = differences.iter().sum::<i32>() as f64 / differences.len() as f64;
            assert!(mean < 1.0, "{width}x{height}: mean difference {mean}");
        }
    }
}
