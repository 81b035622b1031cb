//! The ranges of configuration numbers. Every number a user can set (in `viss.toml`, in a
//! stage's `[params]`, in `VISS_JOBS` / `VISS_CPU` or with `-j`) has a documented range, and
//! each settings table checks its numbers against theirs when its file loads
//! ([`Validate`]). A value outside its range is an error naming the key, the value and the
//! range, never a panic, a wrapped count or a silent clamp later in the build. The Ranges
//! section of docs/configuration.md lists every range.

use std::fmt;

/// An interval a setting's number must lie in. Floating-point values must also be finite, so
/// `inf` and `nan` are outside every range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    min: f64,
    max: f64,
    /// The minimum itself is outside ("above 0").
    open_min: bool,
    /// Only multiples of this are inside (0: any value).
    step: u32,
    /// What special values mean, e.g. "0 = one per core".
    note: &'static str,
}

impl Range {
    /// `min <= value <= max`.
    pub const fn new(min: f64, max: f64) -> Self {
        Self {
            min,
            max,
            open_min: false,
            step: 0,
            note: "",
        }
    }

    /// `min < value <= max`.
    pub const fn above(min: f64, max: f64) -> Self {
        Self {
            min,
            max,
            open_min: true,
            step: 0,
            note: "",
        }
    }

    /// Any finite value `>= min`.
    pub const fn at_least(min: f64) -> Self {
        Self::new(min, f64::MAX)
    }

    /// Only multiples of `step` (for integers, e.g. model input sizes).
    pub const fn multiple_of(self, step: u32) -> Self {
        Self { step, ..self }
    }

    /// Says what special values mean; shown with the range.
    pub const fn note(self, note: &'static str) -> Self {
        Self { note, ..self }
    }

    pub fn contains(&self, value: f64) -> bool {
        let above_min = if self.open_min {
            value > self.min
        } else {
            value >= self.min
        };
        let on_step = self.step == 0 || value % f64::from(self.step) == 0.0;
        value.is_finite() && above_min && value <= self.max && on_step
    }

    /// The range in words, for numbers of the given kind.
    pub fn describe(&self, integer: bool) -> String {
        let kind = match (integer, self.step) {
            (true, 0) => "an integer".to_string(),
            (true, step) => format!("a multiple of {step}"),
            (false, _) => "a number".to_string(),
        };
        let bounds = match (self.open_min, self.max == f64::MAX) {
            (false, false) => format!("from {} to {}", self.min, self.max),
            (true, false) => format!("above {} and at most {}", self.min, self.max),
            (false, true) => format!(">= {}", self.min),
            (true, true) => format!("> {}", self.min),
        };
        let note = if self.note.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.note)
        };
        format!("{kind} {bounds}{note}")
    }
}

/// A number a setting may hold.
pub trait Number: Copy + fmt::Display {
    const INTEGER: bool;
    fn as_f64(self) -> f64;

    /// As the user would write it (`1e300`, not three hundred zeros).
    fn show(self) -> String {
        self.to_string()
    }
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl Number for $t {
            const INTEGER: bool = true;
            fn as_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}

macro_rules! floats {
    ($($t:ty),*) => {$(
        impl Number for $t {
            const INTEGER: bool = false;
            fn as_f64(self) -> f64 {
                f64::from(self)
            }
            fn show(self) -> String {
                let huge_or_tiny = self.abs() >= 1e16 || (self != 0.0 && self.abs() < 1e-6);
                if self.is_finite() && huge_or_tiny {
                    format!("{self:e}")
                } else {
                    self.to_string()
                }
            }
        }
    )*};
}

integers!(u8, u16, u32, u64, usize, i32, i64);
floats!(f32, f64);

/// A setting whose value is outside its documented range (or otherwise unusable).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value} is out of range: it must be {expected}; {advice}")]
pub struct BadSetting {
    /// Dotted from the file's top (`build.cpu`, `params.faces.nms_iou`), or the environment
    /// variable or flag it came from.
    pub key: String,
    pub value: String,
    pub expected: String,
    pub advice: &'static str,
}

const ADVICE: &str = "change it, or remove it to use the default";

impl BadSetting {
    /// The same problem with `table` prefixed to the key (`faces` + `nms_iou`).
    pub fn within(mut self, table: &str) -> Self {
        self.key = format!("{}.{}", table_key(table), self.key);
        self
    }
}

/// A table name as a TOML key: bare when it can be, quoted otherwise (`endpoints."my.host"`).
fn table_key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    if bare {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

/// `value` must lie in `range`.
pub fn check<T: Number>(key: &str, value: T, range: Range) -> Result<(), BadSetting> {
    if range.contains(value.as_f64()) {
        return Ok(());
    }
    Err(BadSetting {
        key: key.to_string(),
        value: value.show(),
        expected: range.describe(T::INTEGER),
        advice: ADVICE,
    })
}

/// An optional value, when set, must lie in `range`.
pub fn check_some<T: Number>(key: &str, value: Option<T>, range: Range) -> Result<(), BadSetting> {
    value.map_or(Ok(()), |value| check(key, value, range))
}

/// Every element of a list must lie in `range` (the key names the element: `classes[2]`).
pub fn check_each<T: Number>(key: &str, values: &[T], range: Range) -> Result<(), BadSetting> {
    for (at, &value) in values.iter().enumerate() {
        check(&format!("{key}[{at}]"), value, range)?;
    }
    Ok(())
}

/// A sub-table's own check, its keys prefixed with `table`.
pub fn check_table(table: &str, settings: &impl Validate) -> Result<(), BadSetting> {
    settings.validate().map_err(|bad| bad.within(table))
}

/// A settings table whose numbers have documented ranges.
pub trait Validate {
    /// Checks every number against its range; keys in the error are relative to this table.
    fn validate(&self) -> Result<(), BadSetting>;
}

/// The machine's cores (1 when they cannot be counted).
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Threads for a setting where 0 means one per core. Larger values are checked against
/// [`THREADS`] when the config loads; more threads than cores only wait for each other, so
/// they are lowered to the core count here.
pub fn threads(setting: usize) -> usize {
    let cores = cores();
    if setting == 0 {
        cores
    } else {
        setting.min(cores)
    }
}

/// Every thread-count setting (`threads`, `intra_threads`): 0 is one per core, and values above
/// the machine's cores are lowered to its core count.
pub const THREADS: Range = Range::new(0.0, 256.0).note("0 = one per core");

/// Scores and overlaps (detector scores, IoU thresholds, shares).
pub const UNIT: Range = Range::new(0.0, 1.0);

/// Square model inputs (detector input sides).
pub const INPUT_SIDE: Range = Range::new(32.0, 4096.0).multiple_of(32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_outside_or_not_finite_are_refused_naming_key_value_and_range() {
        let range = Range::above(0.0, 86_400.0);
        assert!(check("timeout_seconds", 120.0, range).is_ok());
        for value in [0.0, -1.0, f64::INFINITY, f64::NAN, 1e300] {
            let bad = check("timeout_seconds", value, range).unwrap_err();
            assert_eq!(bad.key, "timeout_seconds");
            assert_eq!(bad.expected, "a number above 0 and at most 86400");
        }
        let bad = check(
            "cpu",
            usize::MAX,
            Range::new(0.0, 1024.0).note("0 = one per core"),
        );
        let message = bad.unwrap_err().within("build").to_string();
        assert_eq!(
            message,
            "build.cpu = 18446744073709551615 is out of range: it must be an integer from 0 to \
             1024 (0 = one per core); change it, or remove it to use the default"
        );
    }

    #[test]
    fn steps_lists_and_quoted_tables() {
        assert!(check("det_size", 640u32, INPUT_SIDE).is_ok());
        let bad = check("det_size", 650u32, INPUT_SIDE).unwrap_err();
        assert_eq!(bad.expected, "a multiple of 32 from 32 to 4096");
        let bad = check_each("classes", &[0usize, 70_000], Range::new(0.0, 65_535.0)).unwrap_err();
        assert_eq!(bad.key, "classes[1]");
        assert_eq!(bad.within("my host").key, "\"my host\".classes[1]");
        assert_eq!(
            check("x", f32::NAN, Range::at_least(0.0))
                .unwrap_err()
                .expected,
            "a number >= 0"
        );
        assert_eq!(check("x", 1e300, UNIT).unwrap_err().value, "1e300");
        assert_eq!(
            check("x", f64::NEG_INFINITY, UNIT).unwrap_err().value,
            "-inf"
        );
    }

    #[test]
    fn thread_settings_never_exceed_the_cores() {
        let cores = cores();
        assert_eq!(threads(0), cores);
        assert_eq!(threads(1000), cores);
        assert_eq!(threads(1), 1);
    }
}
