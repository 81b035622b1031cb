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
