//! A real headless browser (Debian's `chromium`, installed by scripts/setup.sh) opening a page
//! the way a researcher opens the report: what it drew, the DOM it built, and what it wrote to
//! its console.

use std::path::Path;
use std::process::Command;

pub struct Rendered {
    pub screenshot: image::RgbImage,
    /// The DOM after loading, serialized.
    pub dom: String,
    /// The page's console messages (script errors, `console.error`, ...), as chromium logs them.
    pub console: Vec<String>,
}

fn chromium() -> &'static str {
    for name in ["chromium", "chromium-browser"] {
        if Command::new(name).arg("--version").output().is_ok() {
            return name;
        }
    }
    panic!("no chromium on PATH: run scripts/setup.sh, which installs Debian's chromium")
}

/// Runs chromium headless on `page` with `extra` arguments in a window of `size`; returns its
/// stdout and its console lines.
fn run(page: &Path, size: (u32, u32), extra: &[String]) -> (String, Vec<String>) {
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new(chromium())
        .args([
            "--headless",
            // Tests run as root in CI containers, where chromium's sandbox cannot start.
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={},{}", size.0, size.1))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "chromium failed on {}: {stderr}",
        page.display()
    );
    let console = stderr
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        console,
    )
}

/// Opens `page` (an absolute path) in a `size` window: a screenshot, then the DOM.
pub fn open(page: &Path, size: (u32, u32)) -> Rendered {
    let shot_dir = tempfile::tempdir().unwrap();
    let shot = shot_dir.path().join("page.png");
    let (_, mut console) = run(page, size, &[format!("--screenshot={}", shot.display())]);
    let screenshot = image::open(&shot)
        .unwrap_or_else(|e| panic!("chromium's screenshot of {}: {e}", page.display()))
        .into_rgb8();
    let (dom, more) = run(page, size, &["--dump-dom".to_string()]);
    console.extend(more);
    Rendered {
        screenshot,
        dom,
        console,
    }
}
