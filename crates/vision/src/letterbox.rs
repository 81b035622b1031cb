//! Fitting an image of any size into a detector's fixed input, and mapping results back.
//!
//! The image is scaled to fit inside the input keeping its aspect ratio (never cropped), the
//! rest of the input is padding. Where the padding goes differs between model families
//! (InsightFace's SCRFD pads right and bottom, Ultralytics' YOLO pads both sides evenly), and
//! detectors must be fed as they were trained, so both placements exist.

use super::image::RgbImage;
use super::resample::resize_triangle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadPlacement {
    /// Content at the top-left corner, padding right and bottom (InsightFace).
    TopLeft,
    /// Content centred, padding split evenly (Ultralytics).
    Centred,
}

/// Where the scaled image lies inside the detector input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Letterbox {
    pub input_width: u32,
    pub input_height: u32,
    /// Size of the scaled image inside the input.
    pub content_width: u32,
    pub content_height: u32,
    /// Top-left corner of the content inside the input.
    pub offset_x: u32,
    pub offset_y: u32,
    /// Content size / source size, per axis: rounding the content to whole pixels makes them
    /// differ slightly, and mapping back with the exact per-axis factor keeps boxes honest.
    pub scale_x: f32,
    pub scale_y: f32,
}

impl Letterbox {
    pub fn fit(
        source_width: u32,
        source_height: u32,
        input_width: u32,
        input_height: u32,
        placement: PadPlacement,
    ) -> Self {
        assert!(source_width > 0 && source_height > 0 && input_width > 0 && input_height > 0);
        let scale = (input_width as f64 / source_width as f64)
            .min(input_height as f64 / source_height as f64);
        let content_width = ((source_width as f64 * scale).round() as u32).clamp(1, input_width);
        let content_height = ((source_height as f64 * scale).round() as u32).clamp(1, input_height);
        let (offset_x, offset_y) = match placement {
            PadPlacement::TopLeft => (0, 0),
            PadPlacement::Centred => (
                (input_width - content_width) / 2,
                (input_height - content_height) / 2,
            ),
        };
        Self {
            input_width,
            input_height,
            content_width,
            content_height,
            offset_x,
            offset_y,
            scale_x: content_width as f32 / source_width as f32,
            scale_y: content_height as f32 / source_height as f32,
        }
    }

    /// A point in input pixels, in source image pixels.
    pub fn to_source(&self, [x, y]: [f32; 2]) -> [f32; 2] {
        [
            (x - self.offset_x as f32) / self.scale_x,
            (y - self.offset_y as f32) / self.scale_y,
        ]
    }
}

/// Per-channel affine normalisation `(value - mean) * scale` that a model was trained with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalisation {
    pub mean: f32,
    pub scale: f32,
}

/// Scales `image` into `letterbox` and returns the NCHW float input (RGB channel order),
/// padding filled with `pad_value` before normalisation, as the models' own pipelines do.
///
/// Downscaling uses a triangle filter whose support widens with the scale factor (the same
/// kind of antialiased bilinear as Pillow's `BILINEAR`): plain 2x2 bilinear would alias small,
/// distant faces away in a large group photo.
pub fn planar_input(
    image: &RgbImage,
    letterbox: &Letterbox,
    pad_value: u8,
    normalisation: Normalisation,
) -> Vec<f32> {
    let resized;
    let content = if image.dimensions() == (letterbox.content_width, letterbox.content_height) {
        image
    } else {
        resized = resize_triangle(image, letterbox.content_width, letterbox.content_height);
        &resized
    };
    let lookup: Vec<f32> = (0..=255u8)
        .map(|value| (f32::from(value) - normalisation.mean) * normalisation.scale)
        .collect();
    let (width, height) = (
        letterbox.input_width as usize,
        letterbox.input_height as usize,
    );
    let plane = width * height;
    let mut input = vec![lookup[usize::from(pad_value)]; 3 * plane];
    let (offset_x, offset_y) = (letterbox.offset_x as usize, letterbox.offset_y as usize);
    let content_width = letterbox.content_width as usize;
    for (row, pixels) in content.as_raw().chunks_exact(content_width * 3).enumerate() {
        let start = (offset_y + row) * width + offset_x;
        for (column, pixel) in pixels.chunks_exact(3).enumerate() {
            let at = start + column;
            input[at] = lookup[usize::from(pixel[0])];
            input[plane + at] = lookup[usize::from(pixel[1])];
            input[2 * plane + at] = lookup[usize::from(pixel[2])];
        }
    }
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_image_fills_the_width() {
        let letterbox = Letterbox::fit(3000, 2171, 640, 640, PadPlacement::TopLeft);
        assert_eq!(
            (letterbox.content_width, letterbox.content_height),
            (640, 463)
        );
        assert_eq!((letterbox.offset_x, letterbox.offset_y), (0, 0));
        let [x, y] = letterbox.to_source([640.0, 463.0]);
        assert!(
            (x - 3000.0).abs() < 1e-2 && (y - 2171.0).abs() < 1e-2,
            "{x} {y}"
        );
    }

    #[test]
    fn centred_padding_is_split_and_undone() {
        let letterbox = Letterbox::fit(640, 360, 640, 640, PadPlacement::Centred);
        assert_eq!((letterbox.offset_x, letterbox.offset_y), (0, 140));
        assert_eq!(letterbox.to_source([320.0, 140.0]), [320.0, 0.0]);
    }

    #[test]
    fn planar_input_places_content_and_padding() {
        // A 4x2 image already fits a 4x4 input: no resampling, two padding rows below.
        let mut pixels = vec![0u8; 4 * 2 * 3];
        pixels[..3].copy_from_slice(&[255, 0, 0]);
        pixels[9..12].copy_from_slice(&[0, 0, 255]);
        let image = RgbImage::from_raw(4, 2, pixels).unwrap();
        let letterbox = Letterbox::fit(4, 2, 4, 4, PadPlacement::TopLeft);
        assert_eq!((letterbox.content_width, letterbox.content_height), (4, 2));
        let input = planar_input(
            &image,
            &letterbox,
            7,
            Normalisation {
                mean: 127.5,
                scale: 1.0 / 128.0,
            },
        );
        let plane = 16;
        assert_eq!(
            input[0],
            1.0 - 0.5 / 128.0,
            "red channel of the top-left pixel"
        );
        assert_eq!(
            input[2 * plane],
            -127.5 / 128.0,
            "blue channel of the top-left pixel"
        );
        assert_eq!(
            input[2 * plane + 3],
            1.0 - 0.5 / 128.0,
            "blue channel of the top-right pixel"
        );
        let padding = (7.0 - 127.5) / 128.0;
        for channel in 0..3 {
            let rows = &input[channel * plane + 8..channel * plane + 16];
            assert!(
                rows.iter().all(|&value| value == padding),
                "padding rows: {rows:?}"
            );
        }
    }
}
