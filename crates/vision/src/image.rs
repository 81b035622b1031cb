//! Still images and video frames as one RGB type.
//!
//! Detectors take [`image::RgbImage`] (packed RGB24, rows top to bottom, no padding). Video
//! frames from [`viss_media::video`] already have that layout, so a frame becomes an image by
//! moving its buffer, without a copy.

use std::path::{Path, PathBuf};

pub use image::RgbImage;

use viss_media::video::SampledFrame;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot read image {path}: {source}; check the path and its permissions")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{path} is not an image viss can read ({reason}); PNG and JPEG are supported")]
    Unsupported { path: PathBuf, reason: String },

    #[error("image {path} is corrupt or truncated ({reason}); re-export or re-download it")]
    Corrupt { path: PathBuf, reason: String },

    #[error("image {path} is {width}x{height}; an image needs at least one pixel")]
    Empty {
        path: PathBuf,
        width: u32,
        height: u32,
    },

    #[error("video frame at {time_s:.3} s claims {width}x{height} RGB but carries {bytes} bytes")]
    FrameSize {
        time_s: f64,
        width: u32,
        height: u32,
        bytes: usize,
    },
}

/// Loads a PNG or JPEG as RGB; grey and alpha images are converted (alpha is dropped).
///
/// The format is taken from the file's bytes, not its extension, so a mislabelled file still
/// loads and a file that is no image at all is reported as such.
pub fn load_rgb(path: &Path) -> Result<RgbImage, ImageError> {
    let reader = image::ImageReader::open(path)
        .map_err(|source| ImageError::Read {
            path: path.to_path_buf(),
            source,
        })?
        .with_guessed_format()
        .map_err(|source| ImageError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    decode(reader, path)
}

/// PNG bytes of an RGB image (deterministic: no timestamps or text chunks).
pub fn encode_png(image: &RgbImage) -> Vec<u8> {
    let mut bytes = Vec::new();
    image
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .expect("encoding an in-memory RGB image as PNG cannot fail");
    bytes
}

/// [`load_rgb`] for bytes already read (a raw file checked against its hash); `path` names
/// them in errors. Reading bytes in memory cannot fail, so running out of them means the image
/// is truncated: corrupt, not unreadable.
pub fn decode_rgb(bytes: &[u8], path: &Path) -> Result<RgbImage, ImageError> {
    let truncated = |source: std::io::Error| ImageError::Corrupt {
        path: path.to_path_buf(),
        reason: source.to_string(),
    };
    let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(truncated)?;
    decode(reader, path).map_err(|error| match error {
        ImageError::Read { source, .. } => truncated(source),
        other => other,
    })
}

fn decode<R: std::io::BufRead + std::io::Seek>(
    reader: image::ImageReader<R>,
    path: &Path,
) -> Result<RgbImage, ImageError> {
    if reader.format().is_none() {
        return Err(ImageError::Unsupported {
            path: path.to_path_buf(),
            reason: "its first bytes match no known image format".to_string(),
        });
    }
    let decoded = reader.decode().map_err(|error| classify(path, error))?;
    let rgb = decoded.into_rgb8();
    if rgb.width() == 0 || rgb.height() == 0 {
        return Err(ImageError::Empty {
            path: path.to_path_buf(),
            width: rgb.width(),
            height: rgb.height(),
        });
    }
    Ok(rgb)
}

fn classify(path: &Path, error: image::ImageError) -> ImageError {
    let path = path.to_path_buf();
    match error {
        image::ImageError::IoError(source) => ImageError::Read { path, source },
        image::ImageError::Unsupported(reason) => ImageError::Unsupported {
            path,
            reason: reason.to_string(),
        },
        other => ImageError::Corrupt {
            path,
            reason: other.to_string(),
        },
    }
}

/// Takes a sampled video frame's pixels as an image (no copy).
pub fn frame_to_image(frame: SampledFrame) -> Result<RgbImage, ImageError> {
    let SampledFrame {
        time_s,
        width,
        height,
        rgb,
    } = frame;
    let bytes = rgb.len();
    RgbImage::from_raw(width, height, rgb)
        .filter(|_| width > 0 && height > 0)
        .ok_or(ImageError::FrameSize {
            time_s,
            width,
            height,
            bytes,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_buffer_becomes_image_pixels() {
        let frame = SampledFrame {
            time_s: 1.5,
            width: 2,
            height: 1,
            rgb: vec![1, 2, 3, 4, 5, 6],
        };
        let image = frame_to_image(frame).unwrap();
        assert_eq!(image.get_pixel(1, 0).0, [4, 5, 6]);
    }

    #[test]
    fn short_frame_buffer_is_rejected() {
        let frame = SampledFrame {
            time_s: 1.5,
            width: 2,
            height: 2,
            rgb: vec![0; 6],
        };
        let error = frame_to_image(frame).unwrap_err();
        assert!(error.to_string().contains("2x2"), "{error}");
    }

    #[test]
    fn text_without_image_extension_is_unsupported() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("notes");
        std::fs::write(&path, b"just some text, not pixels").unwrap();
        let error = load_rgb(&path).unwrap_err();
        assert!(matches!(error, ImageError::Unsupported { .. }), "{error}");
        assert!(error.to_string().contains("notes"), "{error}");
    }

    #[test]
    fn bytes_decode_like_files_and_errors_name_the_given_path() {
        let image = RgbImage::from_fn(3, 2, |x, y| image::Rgb([x as u8 * 80, y as u8 * 100, 7]));
        let mut png = Vec::new();
        image
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        assert_eq!(decode_rgb(&png, Path::new("raw/a.png")).unwrap(), image);
        let error = decode_rgb(b"just some text", Path::new("raw/refs/noor.png")).unwrap_err();
        assert!(matches!(error, ImageError::Unsupported { .. }), "{error}");
        assert!(error.to_string().contains("raw/refs/noor.png"), "{error}");
        let error = decode_rgb(&png[..png.len() / 2], Path::new("raw/half.png")).unwrap_err();
        assert!(matches!(error, ImageError::Corrupt { .. }), "{error}");
    }

    #[test]
    fn text_named_png_is_corrupt() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("notes.png");
        std::fs::write(&path, b"just some text, not pixels").unwrap();
        let error = load_rgb(&path).unwrap_err();
        assert!(matches!(error, ImageError::Corrupt { .. }), "{error}");
        assert!(error.to_string().contains("notes.png"), "{error}");
    }

    #[test]
    fn missing_file_names_the_file() {
        let error = load_rgb(Path::new("/nonexistent/face.jpg")).unwrap_err();
        assert!(matches!(error, ImageError::Read { .. }), "{error}");
        assert!(
            error.to_string().contains("/nonexistent/face.jpg"),
            "{error}"
        );
    }
}
