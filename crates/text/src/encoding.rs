//! Byte-to-text decoding for scripts and subtitle files, which arrive in
//! whatever encoding the uploader's tool happened to use.

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EncodingUsed {
    Utf8,
    Utf8WithBom,
    Utf16LeWithBom,
    Utf16BeWithBom,
    /// The bytes were not valid UTF-8, so they were read as Windows-1252;
    /// callers should surface this because the guess can be wrong.
    Windows1252Fallback,
}

#[derive(Debug, Error, PartialEq)]
pub enum DecodeError {
    #[error(
        "{file}:{line}: undecodable: {reason}; re-save the file as UTF-8 (or UTF-16 with a \
         byte-order mark) and try again"
    )]
    Undecodable {
        file: String,
        line: usize,
        reason: String,
    },
}

/// Decodes UTF-8 (with or without BOM) and UTF-16 with a BOM; anything else
/// that is not valid UTF-8 falls back to Windows-1252, unless it looks binary
/// (NUL bytes or many control characters), which is refused.
pub fn decode_text(bytes: &[u8], file_name: &str) -> Result<(String, EncodingUsed), DecodeError> {
    if let Some(body) = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF]) {
        return match std::str::from_utf8(body) {
            Ok(text) => Ok((text.to_string(), EncodingUsed::Utf8WithBom)),
            Err(err) => Err(DecodeError::Undecodable {
                file: file_name.to_string(),
                line: line_of_offset(body, err.valid_up_to()),
                reason: format!(
                    "invalid UTF-8 at byte {} although the file starts with a UTF-8 byte-order \
                     mark",
                    err.valid_up_to() + 3
                ),
            }),
        };
    }
    if bytes.starts_with(&[0xFF, 0xFE]) {
        return decode_utf16(
            &bytes[2..],
            encoding_rs::UTF_16LE,
            EncodingUsed::Utf16LeWithBom,
            file_name,
        );
    }
    if bytes.starts_with(&[0xFE, 0xFF]) {
        return decode_utf16(
            &bytes[2..],
            encoding_rs::UTF_16BE,
            EncodingUsed::Utf16BeWithBom,
            file_name,
        );
    }
    if let Some(reason) = binary_reason(bytes) {
        return Err(DecodeError::Undecodable {
            file: file_name.to_string(),
            line: reason.0,
            reason: reason.1,
        });
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok((text.to_string(), EncodingUsed::Utf8)),
        Err(_) => {
            let (text, _) = encoding_rs::WINDOWS_1252.decode_without_bom_handling(bytes);
            Ok((text.into_owned(), EncodingUsed::Windows1252Fallback))
        }
    }
}

/// [`decode_text`] of bytes the caller no longer needs: UTF-8, the common case, becomes the
/// text without a copy (a season's script is read once, not twice, into memory).
pub fn decode_text_owned(
    mut bytes: Vec<u8>,
    file_name: &str,
) -> Result<(String, EncodingUsed), DecodeError> {
    let bom = bytes.starts_with(&[0xEF, 0xBB, 0xBF]);
    let utf16 = bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]);
    if utf16 || binary_reason(&bytes).is_some() {
        return decode_text(&bytes, file_name);
    }
    if bom {
        if std::str::from_utf8(&bytes[3..]).is_err() {
            return decode_text(&bytes, file_name);
        }
        bytes.drain(..3);
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok((
            text,
            if bom {
                EncodingUsed::Utf8WithBom
            } else {
                EncodingUsed::Utf8
            },
        )),
        Err(error) => decode_text(error.as_bytes(), file_name),
    }
}

fn decode_utf16(
    body: &[u8],
    encoding: &'static encoding_rs::Encoding,
    used: EncodingUsed,
    file_name: &str,
) -> Result<(String, EncodingUsed), DecodeError> {
    if !body.len().is_multiple_of(2) {
        return Err(DecodeError::Undecodable {
            file: file_name.to_string(),
            line: 1,
            reason: format!(
                "{:?} byte-order mark but an odd number of bytes ({})",
                used,
                body.len() + 2
            ),
        });
    }
    match encoding.decode_without_bom_handling_and_without_replacement(body) {
        Some(text) => Ok((text.into_owned(), used)),
        None => Err(DecodeError::Undecodable {
            file: file_name.to_string(),
            line: 1,
            reason: format!(
                "{used:?} byte-order mark but the content contains unpaired surrogates"
            ),
        }),
    }
}

/// How many bytes of a file [`refuse_binary_start`] looks at.
pub const SNIFF_BYTES: usize = 8192;

/// The verdict [`decode_text`] would give a file that begins with `start` and has a NUL byte
/// there, before the rest is read: a 4 GiB video named as a script is refused without being
/// read whole. A start with a byte-order mark, or without NUL, is left to [`decode_text`].
pub fn refuse_binary_start(start: &[u8], file_name: &str) -> Result<(), DecodeError> {
    let marked = [&[0xEF, 0xBB, 0xBF][..], &[0xFF, 0xFE], &[0xFE, 0xFF]]
        .iter()
        .any(|bom| start.starts_with(bom));
    match start.iter().position(|&b| b == 0) {
        Some(pos) if !marked => Err(DecodeError::Undecodable {
            file: file_name.to_string(),
            line: line_of_offset(start, pos),
            reason: format!(
                "NUL byte at byte {pos} and no UTF-16 byte-order mark; the file looks binary"
            ),
        }),
        _ => Ok(()),
    }
}

/// NUL bytes never occur in real text files without a UTF-16 BOM, and a high
/// share of other C0 controls means an image, archive or video was passed.
fn binary_reason(bytes: &[u8]) -> Option<(usize, String)> {
    if let Some(pos) = bytes.iter().position(|&b| b == 0) {
        return Some((
            line_of_offset(bytes, pos),
            format!("NUL byte at byte {pos} and no UTF-16 byte-order mark; the file looks binary"),
        ));
    }
    let controls = bytes
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x0C | 0x1A))
        .count();
    if !bytes.is_empty() && controls * 20 > bytes.len() {
        let first = bytes
            .iter()
            .position(|&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x0C | 0x1A))
            .unwrap_or(0);
        return Some((
            line_of_offset(bytes, first),
            format!(
                "{controls} control bytes in {} bytes; the file looks binary",
                bytes.len()
            ),
        ));
    }
    None
}

fn line_of_offset(bytes: &[u8], offset: usize) -> usize {
    bytes[..offset.min(bytes.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(text: &str, little_endian: bool) -> Vec<u8> {
        let mut bytes = if little_endian {
            vec![0xFF, 0xFE]
        } else {
            vec![0xFE, 0xFF]
        };
        for unit in text.encode_utf16() {
            let pair = if little_endian {
                unit.to_le_bytes()
            } else {
                unit.to_be_bytes()
            };
            bytes.extend_from_slice(&pair);
        }
        bytes
    }

    #[test]
    fn owned_bytes_decode_as_borrowed_ones_do() {
        let cases: [&[u8]; 6] = [
            b"plain",
            b"\xEF\xBB\xBFbom",
            b"\xEF\xBB\xBFbad \xff",
            b"caf\xe9",
            b"\xFF\xFEa\x00",
            b"nul\x00",
        ];
        for bytes in cases {
            assert_eq!(
                decode_text_owned(bytes.to_vec(), "a.txt"),
                decode_text(bytes, "a.txt"),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn plain_utf8() {
        assert_eq!(
            decode_text("héllo".as_bytes(), "a.srt").unwrap(),
            ("héllo".to_string(), EncodingUsed::Utf8)
        );
    }

    #[test]
    fn utf8_bom_is_removed() {
        let bytes = [&[0xEF, 0xBB, 0xBF][..], "hi".as_bytes()].concat();
        assert_eq!(
            decode_text(&bytes, "a.srt").unwrap(),
            ("hi".to_string(), EncodingUsed::Utf8WithBom)
        );
    }

    #[test]
    fn utf16_both_byte_orders() {
        let text = "1\n00:00:01,000 --> 00:00:02,000\nÇa va?\n";
        assert_eq!(
            decode_text(&utf16(text, true), "a.srt").unwrap(),
            (text.to_string(), EncodingUsed::Utf16LeWithBom)
        );
        assert_eq!(
            decode_text(&utf16(text, false), "a.srt").unwrap(),
            (text.to_string(), EncodingUsed::Utf16BeWithBom)
        );
    }

    #[test]
    fn windows_1252_fallback() {
        let bytes = b"It\x92s caf\xe9 time \x96 now";
        let (text, used) = decode_text(bytes, "a.txt").unwrap();
        assert_eq!(text, "It\u{2019}s café time \u{2013} now");
        assert_eq!(used, EncodingUsed::Windows1252Fallback);
    }

    #[test]
    fn nul_bytes_without_bom_are_refused_with_file_and_line() {
        let err = decode_text(b"line one\nline\x00two", "subs/e01.srt").unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("subs/e01.srt:2: undecodable: NUL byte"),
            "{message}"
        );
        assert!(message.contains("re-save the file as UTF-8"), "{message}");
    }

    #[test]
    fn control_heavy_bytes_are_refused() {
        let bytes: Vec<u8> = (0..200)
            .map(|i| if i % 3 == 0 { 0x01 } else { 0xC3 })
            .collect();
        assert!(matches!(
            decode_text(&bytes, "x.bin"),
            Err(DecodeError::Undecodable { .. })
        ));
    }

    #[test]
    fn invalid_utf8_after_bom_names_line() {
        let bytes = [&[0xEF, 0xBB, 0xBF][..], b"ok\nbad \xff here"].concat();
        let message = decode_text(&bytes, "s.txt").unwrap_err().to_string();
        assert!(
            message.starts_with("s.txt:2: undecodable: invalid UTF-8"),
            "{message}"
        );
    }
}
