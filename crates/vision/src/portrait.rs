//! Role portraits: a head-and-shoulders square around one face, resized to the portrait size
//! and stylised with the same local filter as the group image, so a role's portrait and its
//! figure in the group image look like the same drawing.

use serde::{Deserialize, Serialize};

use super::image::RgbImage;
use super::nms::BoxXyxy;
use super::resample::resize_bicubic;
use super::stylise::{StyliseError, StyliseParams, stylise};

/// Side of a portrait, pixels.
pub const PORTRAIT_SIZE: u32 = 448;

/// The face's height as a fraction of the portrait's side: room for hair above and shoulders
/// below, and little of the neighbours at the sides.
const FACE_FRACTION: f32 = 0.4;
/// Where the face centre sits, from the top, as a fraction of the side: above the middle, so
/// the shoulders fit below.
const FACE_CENTRE_FROM_TOP: f32 = 0.42;

/// The square a portrait is cut from, in source pixels (may reach outside the image; the part
/// outside is filled from the nearest edge pixels).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PortraitWindow {
    pub left: f32,
    pub top: f32,
    pub side: f32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PortraitError {
    #[error(
        "face box {bbox:?} is empty or not finite; a portrait needs a face of at least one pixel"
    )]
    EmptyFace { bbox: BoxXyxy },
    #[error(transparent)]
    Stylise(#[from] StyliseError),
}

/// The head-and-shoulders square around `face`: its side is the face's larger dimension divided
/// by [`FACE_FRACTION`], centred on the face horizontally, with the face centre at
/// [`FACE_CENTRE_FROM_TOP`] of the side. Shifted (never shrunk) to stay inside the image where
/// the image is large enough.
pub fn portrait_window(
    image_width: u32,
    image_height: u32,
    face: &BoxXyxy,
) -> Result<PortraitWindow, PortraitError> {
    let (width, height) = (face[2] - face[0], face[3] - face[1]);
    if !(width.is_finite() && height.is_finite() && width >= 1.0 && height >= 1.0) {
        return Err(PortraitError::EmptyFace { bbox: *face });
    }
    let side = width.max(height) / FACE_FRACTION;
    let centre_x = (face[0] + face[2]) / 2.0;
    let centre_y = (face[1] + face[3]) / 2.0;
    let fit = |start: f32, length: f32| {
        if side <= length {
            start.clamp(0.0, length - side)
        } else {
            (length - side) / 2.0
        }
    };
    Ok(PortraitWindow {
        left: fit(centre_x - side / 2.0, image_width as f32),
        top: fit(centre_y - side * FACE_CENTRE_FROM_TOP, image_height as f32),
        side,
    })
}

/// The window's pixels at `size` x `size` (Pillow-style bicubic), unstylised.
pub fn portrait_crop(
    image: &RgbImage,
    face: &BoxXyxy,
    size: u32,
) -> Result<RgbImage, PortraitError> {
    let window = portrait_window(image.width(), image.height(), face)?;
    // Cut at whole pixels, edge-clamped, then resize: the crop is at most a few pixels larger than
    // the window's fractional extent.
    let side = window.side.round().max(1.0) as u32;
    let (left, top) = (window.left.round() as i64, window.top.round() as i64);
    let (max_x, max_y) = (i64::from(image.width()) - 1, i64::from(image.height()) - 1);
    let square = RgbImage::from_fn(side, side, |x, y| {
        let sx = (left + i64::from(x)).clamp(0, max_x) as u32;
        let sy = (top + i64::from(y)).clamp(0, max_y) as u32;
        *image.get_pixel(sx, sy)
    });
    Ok(resize_bicubic(&square, size, size))
}

/// A role's portrait: [`portrait_crop`] at [`PORTRAIT_SIZE`], stylised with `style`.
pub fn portrait(
    image: &RgbImage,
    face: &BoxXyxy,
    style: &StyliseParams,
) -> Result<RgbImage, PortraitError> {
    let crop = portrait_crop(image, face, PORTRAIT_SIZE)?;
    Ok(stylise(&crop, style)?)
}

/// Portraits side by side, left to right in the order given, each scaled to `tile` x `tile`
/// pixels: the cast's current portraits as one picture, as a simulation run shows them.
pub fn collage(portraits: &[RgbImage], tile: u32) -> RgbImage {
    assert!(
        !portraits.is_empty() && tile > 0,
        "a collage of at least one portrait"
    );
    let mut canvas = RgbImage::new(tile * portraits.len() as u32, tile);
    for (index, portrait) in portraits.iter().enumerate() {
        let scaled = if portrait.dimensions() == (tile, tile) {
            portrait.clone()
        } else {
            resize_bicubic(portrait, tile, tile)
        };
        image::imageops::replace(&mut canvas, &scaled, i64::from(tile) * index as i64, 0);
    }
    canvas
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_puts_the_face_above_centre_with_room_for_shoulders() {
        let face = [300.0, 100.0, 340.0, 150.0];
        let window = portrait_window(1280, 720, &face).unwrap();
        assert!((window.side - 125.0).abs() < 1e-3);
        assert!((window.left - (320.0 - 62.5)).abs() < 1e-3);
        assert!((window.top - (125.0 - 0.42 * 125.0)).abs() < 1e-3);
        // The face lies inside, in the upper half.
        assert!(face[0] >= window.left && face[2] <= window.left + window.side);
        assert!(
            face[1] >= window.top && (face[1] + face[3]) / 2.0 < window.top + window.side / 2.0
        );
    }

    #[test]
    fn window_is_shifted_inside_at_the_edges_and_centred_when_too_big() {
        let corner = portrait_window(640, 360, &[0.0, 0.0, 40.0, 40.0]).unwrap();
        assert_eq!((corner.left, corner.top), (0.0, 0.0));
        let far = portrait_window(640, 360, &[620.0, 340.0, 640.0, 360.0]).unwrap();
        assert_eq!((far.left + far.side, far.top + far.side), (640.0, 360.0));
        let huge = portrait_window(640, 360, &[100.0, 0.0, 400.0, 300.0]).unwrap();
        assert_eq!(huge.side, 750.0);
        assert_eq!((huge.left, huge.top), (-55.0, -195.0));
        assert!(portrait_window(640, 360, &[5.0, 5.0, 5.0, 20.0]).is_err());
        assert!(portrait_window(640, 360, &[f32::NAN, 5.0, 9.0, 20.0]).is_err());
    }

    #[test]
    fn crop_takes_the_faces_pixels_and_portrait_is_stylised_at_448() {
        // Left half red, right half blue; the face box is in the red half.
        let image = RgbImage::from_fn(640, 360, |x, _| {
            if x < 320 {
                image::Rgb([200, 20, 20])
            } else {
                image::Rgb([20, 20, 200])
            }
        });
        let crop = portrait_crop(&image, &[100.0, 100.0, 140.0, 150.0], 448).unwrap();
        assert_eq!(crop.dimensions(), (448, 448));
        assert!(crop.pixels().all(|p| p.0 == [200, 20, 20]));
        let styled = portrait(
            &image,
            &[100.0, 100.0, 140.0, 150.0],
            &StyliseParams::default(),
        )
        .unwrap();
        assert_eq!(styled.dimensions(), (PORTRAIT_SIZE, PORTRAIT_SIZE));
        let centre = styled.get_pixel(224, 224).0;
        assert!(centre[0] > 150 && centre[2] < 80, "{centre:?}");
    }

    #[test]
    fn a_collage_puts_each_portrait_in_its_own_square_in_order() {
        let red = RgbImage::from_pixel(448, 448, image::Rgb([200, 0, 0]));
        let blue = RgbImage::from_pixel(64, 64, image::Rgb([0, 0, 200]));
        let row = collage(&[red, blue], 100);
        assert_eq!(row.dimensions(), (200, 100));
        assert_eq!(row.get_pixel(50, 50), &image::Rgb([200, 0, 0]));
        assert_eq!(row.get_pixel(150, 50), &image::Rgb([0, 0, 200]));
    }
}
