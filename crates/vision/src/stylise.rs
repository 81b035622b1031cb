//! The offline stylisation: a frame becomes a flat-shaded drawing with dark outlines, so the
//! benchmark's images are recognisably synthetic (not frames of the licensed source) while the
//! people, their placement and their expressions stay readable.
//!
//! It is the abstraction pipeline of Winnemöller, Olsen and Gooch ("Real-time video
//! abstraction", 2006), with the domain transform of Gastal and Oliveira (2011) as the
//! edge-preserving smoother:
//! 1. smooth colours inside regions but not across edges (recursive domain-transform filter,
//!    horizontal and vertical passes, `iterations` times with shrinking kernels);
//! 2. quantise luma into `levels` soft bands (cartoon shading; chroma is kept, so skin stays
//!    skin-coloured);
//! 3. multiply by dark lines where a difference of Gaussians of the smoothed luma turns negative
//!    (the dark side of every edge: eyes, mouth, hair line, silhouettes).
//!
//! Everything is plain `f32` arithmetic in a fixed order: the same image and parameters give the
//! same bytes on every run. Spatial scales are given for a 360-pixel-high image and grow with
//! the image height, so a 720p frame and its 360p copy look alike.

use serde::{Deserialize, Serialize};

use super::image::RgbImage;
use viss_engine::range::{BadSetting, Range, Validate, check};

/// Names the filter and its version in records (`SyntheticImage::backend`).
pub const STYLISE_ID: &str = "local:cartoon/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StyliseParams {
    /// Spatial extent of the smoothing, pixels at 360 px image height; above 0, at most 1000.
    pub smoothing_space: f32,
    /// Colour difference (0..1 per channel, summed) that stops the smoothing: smaller keeps
    /// more edges. Above 0, at most 10.
    pub smoothing_range: f32,
    /// Domain-transform passes (3 is the paper's choice), 1 to 8.
    pub iterations: u32,
    /// Luma bands, 2 to 64.
    pub levels: u32,
    /// How hard the band edges are: 1 is a gentle ramp, 4 nearly a step. Above 0, at most 100.
    pub band_sharpness: f32,
    /// Width of the outline detector, pixels at 360 px image height; above 0, at most 20.
    pub line_width: f32,
    /// How dark and crisp outlines are (the DoG's tanh gain); above 0, at most 1000.
    pub line_strength: f32,
}

impl Default for StyliseParams {
    fn default() -> Self {
        Self {
            smoothing_space: 12.0,
            smoothing_range: 0.3,
            iterations: 3,
            levels: 6,
            band_sharpness: 3.0,
            line_width: 0.9,
            line_strength: 60.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StyliseError {
    #[error("stylisation parameter {0}")]
    InvalidParam(Box<BadSetting>),
    #[error("cannot stylise an empty {width}x{height} image")]
    Empty { width: u32, height: u32 },
}

/// Spatial sizes are bounded because the outline kernel grows with them (at 4K a line width
/// of 20 is already a 720-pixel kernel); the others because larger values change nothing.
impl Validate for StyliseParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check(
            "smoothing_space",
            self.smoothing_space,
            Range::above(0.0, 1000.0),
        )?;
        check(
            "smoothing_range",
            self.smoothing_range,
            Range::above(0.0, 10.0),
        )?;
        check("iterations", self.iterations, Range::new(1.0, 8.0))?;
        check("levels", self.levels, Range::new(2.0, 64.0))?;
        check(
            "band_sharpness",
            self.band_sharpness,
            Range::above(0.0, 100.0),
        )?;
        check("line_width", self.line_width, Range::above(0.0, 20.0))?;
        check(
            "line_strength",
            self.line_strength,
            Range::above(0.0, 1000.0),
        )
    }
}

impl StyliseParams {
    pub fn check(&self) -> Result<(), StyliseError> {
        self.validate()
            .map_err(|bad| StyliseError::InvalidParam(Box::new(bad)))
    }
}

/// A float RGB image, channels interleaved, values in 0..1.
struct Planes {
    width: usize,
    height: usize,
    rgb: Vec<f32>,
}

/// `image` as a cartoon (see the module documentation).
pub fn stylise(image: &RgbImage, params: &StyliseParams) -> Result<RgbImage, StyliseError> {
    params.check()?;
    let (width, height) = image.dimensions();
    if width == 0 || height == 0 {
        return Err(StyliseError::Empty { width, height });
    }
    let scale = height as f32 / 360.0;
    let mut planes = Planes {
        width: width as usize,
        height: height as usize,
        rgb: image
            .as_raw()
            .iter()
            .map(|&v| f32::from(v) / 255.0)
            .collect(),
    };
    domain_transform(
        &mut planes,
        params.smoothing_space * scale,
        params.smoothing_range,
        params.iterations,
    );
    let luma: Vec<f32> = planes
        .rgb
        .chunks_exact(3)
        .map(|p| 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2])
        .collect();
    let lines = outline_factor(
        &luma,
        planes.width,
        planes.height,
        params.line_width * scale,
        params.line_strength,
    );
    let band = 1.0 / params.levels as f32;
    // tanh gain so that a value `band / 2` from the band's centre reaches tanh(sharpness).
    let gain = 2.0 * params.band_sharpness / band;
    let mut out = Vec::with_capacity(planes.rgb.len());
    for ((pixel, &y), &line) in planes.rgb.chunks_exact(3).zip(&luma).zip(&lines) {
        let nearest = (y / band).round() * band;
        let banded = nearest + 0.5 * band * (gain * (y - nearest)).tanh();
        for &channel in pixel {
            let value = (channel - y + banded).clamp(0.0, 1.0) * line;
            out.push((value * 255.0).round().clamp(0.0, 255.0) as u8);
        }
    }
    Ok(RgbImage::from_raw(width, height, out).expect("buffer sized for the image"))
}

/// Gastal and Oliveira's recursive filter: each pass blends a pixel into its neighbour with
/// weight `a^d`, where `d` grows with the colour difference between them (measured on the
/// input, so edges stay put over the iterations).
fn domain_transform(planes: &mut Planes, sigma_space: f32, sigma_range: f32, iterations: u32) {
    let (width, height) = (planes.width, planes.height);
    let ratio = sigma_space / sigma_range;
    let difference =
        |a: &[f32], b: &[f32]| (a[0] - b[0]).abs() + (a[1] - b[1]).abs() + (a[2] - b[2]).abs();
    // Distance in the transformed domain between each pixel and its left / upper neighbour.
    let mut horizontal = vec![1.0f32; width * height];
    let mut vertical = vec![1.0f32; width * height];
    for y in 0..height {
        for x in 0..width {
            let at = y * width + x;
            let here = &planes.rgb[at * 3..at * 3 + 3];
            if x > 0 {
                horizontal[at] = 1.0 + ratio * difference(here, &planes.rgb[(at - 1) * 3..at * 3]);
            }
            if y > 0 {
                vertical[at] = 1.0
                    + ratio * difference(here, &planes.rgb[(at - width) * 3..(at - width) * 3 + 3]);
            }
        }
    }
    let n = iterations as i32;
    for i in 0..n {
        let sigma = sigma_space * 3f32.sqrt() * 2f32.powi(n - i - 1) / (4f32.powi(n) - 1.0).sqrt();
        let a = (-(2f32.sqrt()) / sigma).exp();
        let weight = |d: f32| a.powf(d);
        // Horizontal: left to right, then right to left, along every row.
        for y in 0..height {
            let row = y * width;
            for x in 1..width {
                let w = weight(horizontal[row + x]);
                for c in 0..3 {
                    let previous = planes.rgb[(row + x - 1) * 3 + c];
                    let value = &mut planes.rgb[(row + x) * 3 + c];
                    *value += w * (previous - *value);
                }
            }
            for x in (0..width.saturating_sub(1)).rev() {
                let w = weight(horizontal[row + x + 1]);
                for c in 0..3 {
                    let next = planes.rgb[(row + x + 1) * 3 + c];
                    let value = &mut planes.rgb[(row + x) * 3 + c];
                    *value += w * (next - *value);
                }
            }
        }
        // Vertical: top to bottom, then bottom to top, whole rows at a time.
        for y in 1..height {
            for x in 0..width {
                let at = y * width + x;
                let w = weight(vertical[at]);
                for c in 0..3 {
                    let previous = planes.rgb[(at - width) * 3 + c];
                    let value = &mut planes.rgb[at * 3 + c];
                    *value += w * (previous - *value);
                }
            }
        }
        for y in (0..height.saturating_sub(1)).rev() {
            for x in 0..width {
                let at = y * width + x;
                let w = weight(vertical[at + width]);
                for c in 0..3 {
                    let next = planes.rgb[(at + width) * 3 + c];
                    let value = &mut planes.rgb[at * 3 + c];
                    *value += w * (next - *value);
                }
            }
        }
    }
}

/// Per pixel, 1 away from edges and down to 0 on the dark side of one: from the difference of
/// two Gaussians of the luma (sigma and 1.6 sigma, the second weighted 0.98 so flat regions stay
/// white), passed through `1 + tanh(strength * D)` where D is negative.
fn outline_factor(
    luma: &[f32],
    width: usize,
    height: usize,
    sigma: f32,
    strength: f32,
) -> Vec<f32> {
    let narrow = gaussian_blur(luma, width, height, sigma);
    let wide = gaussian_blur(luma, width, height, sigma * 1.6);
    narrow
        .iter()
        .zip(&wide)
        .map(|(&n, &w)| {
            let d = n - 0.98 * w;
            if d >= 0.0 {
                1.0
            } else {
                (1.0 + (strength * d).tanh()).max(0.0)
            }
        })
        .collect()
}

/// Separable Gaussian blur, edges clamped.
fn gaussian_blur(values: &[f32], width: usize, height: usize, sigma: f32) -> Vec<f32> {
    let radius = (sigma * 3.0).ceil().max(1.0) as isize;
    let mut kernel: Vec<f32> = (-radius..=radius)
        .map(|k| (-((k * k) as f32) / (2.0 * sigma * sigma)).exp())
        .collect();
    let total: f32 = kernel.iter().sum();
    kernel.iter_mut().for_each(|k| *k /= total);
    let clamp = |v: isize, len: usize| v.clamp(0, len as isize - 1) as usize;
    let mut rows = vec![0f32; values.len()];
    for y in 0..height {
        for x in 0..width {
            let mut sum = 0.0;
            for (k, weight) in kernel.iter().enumerate() {
                sum += weight * values[y * width + clamp(x as isize + k as isize - radius, width)];
            }
            rows[y * width + x] = sum;
        }
    }
    let mut out = vec![0f32; values.len()];
    for y in 0..height {
        for x in 0..width {
            let mut sum = 0.0;
            for (k, weight) in kernel.iter().enumerate() {
                sum += weight * rows[clamp(y as isize + k as isize - radius, height) * width + x];
            }
            out[y * width + x] = sum;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A disc on a gradient with fine noise: regions, an edge, texture.
    fn scene(width: u32, height: u32) -> RgbImage {
        RgbImage::from_fn(width, height, |x, y| {
            let (dx, dy) = (
                x as f32 - width as f32 / 2.0,
                y as f32 - height as f32 / 2.0,
            );
            let noise = ((x * 7919 + y * 104_729) % 23) as f32 - 11.0;
            let inside = dx * dx + dy * dy < (height as f32 / 4.0).powi(2);
            let base = if inside {
                [200.0, 150.0, 120.0]
            } else {
                [40.0 + x as f32 * 0.3, 90.0, 160.0]
            };
            image::Rgb(base.map(|v: f32| (v + noise).clamp(0.0, 255.0) as u8))
        })
    }

    fn local_variance(image: &RgbImage, x0: u32, y0: u32, size: u32) -> f32 {
        let values: Vec<f32> = (y0..y0 + size)
            .flat_map(|y| (x0..x0 + size).map(move |x| (x, y)))
            .map(|(x, y)| f32::from(image.get_pixel(x, y).0[1]))
            .collect();
        let mean = values.iter().sum::<f32>() / values.len() as f32;
        values.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / values.len() as f32
    }

    #[test]
    fn smooths_texture_keeps_the_region_colours_and_draws_the_outline() {
        let input = scene(320, 180);
        let output = stylise(&input, &StyliseParams::default()).unwrap();
        assert_eq!(output.dimensions(), input.dimensions());
        // Noise inside the disc and in the background is flattened.
        assert!(local_variance(&output, 150, 80, 16) < local_variance(&input, 150, 80, 16) / 4.0);
        assert!(local_variance(&output, 20, 20, 16) < local_variance(&input, 20, 20, 16) / 4.0);
        // The disc keeps its warm colour.
        let centre = output.get_pixel(160, 90).0;
        assert!(centre[0] > centre[2] + 40, "{centre:?}");
        // The outline of the disc is darker than both regions next to it.
        let radius = 45;
        let ring: Vec<u32> = (radius - 3..=radius + 3)
            .map(|r| {
                let p = output.get_pixel(160 + r, 90).0;
                p.iter().map(|&v| u32::from(v)).sum()
            })
            .collect();
        let darkest = *ring.iter().min().unwrap();
        let inside: u32 = output
            .get_pixel(160 + radius - 10, 90)
            .0
            .iter()
            .map(|&v| u32::from(v))
            .sum();
        let outside: u32 = output
            .get_pixel(160 + radius + 12, 90)
            .0
            .iter()
            .map(|&v| u32::from(v))
            .sum();
        assert!(
            darkest + 60 < inside.min(outside),
            "ring {ring:?}, inside {inside}, outside {outside}"
        );
    }

    #[test]
    fn is_deterministic_and_differs_from_the_input() {
        let input = scene(160, 90);
        let params = StyliseParams::default();
        let first = stylise(&input, &params).unwrap();
        assert_eq!(first, stylise(&input, &params).unwrap());
        assert_ne!(first, input);
        let coarser = stylise(
            &input,
            &StyliseParams {
                levels: 3,
                ..params
            },
        )
        .unwrap();
        assert_ne!(coarser, first);
    }

    #[test]
    fn bad_params_and_tiny_images() {
        let error = stylise(
            &scene(8, 8),
            &StyliseParams {
                levels: 1,
                ..StyliseParams::default()
            },
        )
        .unwrap_err();
        assert!(error.to_string().contains("levels"), "{error}");
        let error = stylise(
            &scene(8, 8),
            &StyliseParams {
                smoothing_range: 0.0,
                ..StyliseParams::default()
            },
        )
        .unwrap_err();
        assert!(error.to_string().contains("smoothing_range"), "{error}");
        assert_eq!(
            stylise(&scene(1, 1), &StyliseParams::default())
                .unwrap()
                .dimensions(),
            (1, 1)
        );
    }
}
