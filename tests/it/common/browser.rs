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

/// A headless chromium driven over WebDriver (Debian's `chromium-driver`, installed by
/// scripts/setup.sh): for pages a person uses, not only looks at.
pub struct WebDriver {
    driver: std::process::Child,
    base: String,
    session: String,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    _profile: tempfile::TempDir,
}

/// The W3C WebDriver key of an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

impl WebDriver {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run chromedriver: scripts/setup.sh installs Debian's chromium-driver");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().unwrap();
        let mut driver = Self {
            driver,
            base,
            session: String::new(),
            client,
            runtime,
            _profile: profile,
        };
        let capabilities = serde_json::json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": format!("/usr/bin/{}", chromium()),
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                         format!("--user-data-dir={}", driver._profile.path().display())],
            },
        }}});
        let started = std::time::Instant::now();
        let session = loop {
            match driver.try_call("POST", "/session", &capabilities) {
                Ok(value) => break value,
                Err(e) if started.elapsed().as_secs() < 20 => {
                    let _ = e;
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                Err(e) => panic!("chromedriver did not start a session: {e}"),
            }
        };
        driver.session = session["sessionId"].as_str().unwrap().to_string();
        driver
    }

    fn try_call(
        &self,
        method: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "POST" => self.client.post(&url).json(body),
            "DELETE" => self.client.delete(&url),
            _ => self.client.get(&url),
        };
        self.runtime.block_on(async {
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status();
            let value: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
            if status.is_success() {
                Ok(value["value"].clone())
            } else {
                Err(format!("{status}: {value}"))
            }
        })
    }

    fn call(&self, method: &str, path: &str, body: serde_json::Value) -> serde_json::Value {
        let path = format!("/session/{}{path}", self.session);
        self.try_call(method, &path, &body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    pub fn open(&self, url: &str) {
        self.call("POST", "/url", serde_json::json!({ "url": url }));
    }

    /// The element `css` selects (the first), by its WebDriver reference.
    pub fn find(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            serde_json::json!({"using": "css selector", "value": css}),
        );
        found[ELEMENT_KEY].as_str().unwrap().to_string()
    }

    pub fn clear(&self, element: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/clear"),
            serde_json::json!({}),
        );
    }

    pub fn type_into(&self, element: &str, text: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            serde_json::json!({ "text": text }),
        );
    }

    pub fn click(&self, element: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            serde_json::json!({}),
        );
    }

    /// Presses `key` with the focus on the page itself.
    pub fn press(&self, key: &str) {
        self.call(
            "POST",
            "/actions",
            serde_json::json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]}),
        );
    }

    /// The page's text as shown.
    pub fn text(&self) -> String {
        let body = self.find("body");
        self.call(
            "GET",
            &format!("/element/{body}/text"),
            serde_json::json!({}),
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }
}

impl Drop for WebDriver {
    fn drop(&mut self) {
        let path = format!("/session/{}", self.session);
        let _ = self.try_call("DELETE", &path, &serde_json::json!({}));
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
