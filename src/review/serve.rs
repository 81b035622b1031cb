//! `viss review --serve`: the same queue as a page in the browser, for answers that need their
//! pictures seen. It listens on a loopback address only, needs no login because nothing beyond
//! this machine can reach it, and refuses requests whose `Host` or `Origin` is not its own (a
//! page from elsewhere open in the same browser cannot post verdicts). Verdicts go to the same
//! file as the terminal's.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use serde_json::{Value, json};

use super::ReviewError;
use super::overlay::{check_field_against_schema, set_field};
use super::queue::{ReviewItem, field_label, fields, parse_field_path};
use super::session::{SessionPaths, scene_text, write_pictures};
use super::verdicts::{self, Reviews, Verdict, VerdictKind};
use crate::dag::store::Store;

/// Largest form a page posts: the answer's fields and a comment.
const MAX_FORM_BYTES: u64 = 1 << 20;

/// Refuses `address` unless it is a loopback one.
pub fn check_loopback(address: IpAddr) -> Result<(), ReviewError> {
    if address.is_loopback() {
        Ok(())
    } else {
        Err(ReviewError::NotLoopback(address))
    }
}

struct Page<'a> {
    store: &'a Store,
    queue: &'a [ReviewItem],
    done: Vec<bool>,
    reviewer: &'a str,
    paths: &'a SessionPaths,
    pictures: Vec<Vec<PathBuf>>,
    env: minijinja::Environment<'static>,
    origin: String,
}

/// Serves `queue` on `address` until the process is stopped; `on_ready` is told the address it
/// listens on (port 0 picks a free one).
pub fn serve(
    store: &Store,
    queue: &[ReviewItem],
    reviews: &Reviews,
    reviewer: &str,
    paths: &SessionPaths,
    address: SocketAddr,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), ReviewError> {
    verdicts::check_reviewer(reviewer)?;
    check_loopback(address.ip())?;
    let server = tiny_http::Server::http(address).map_err(|e| {
        ReviewError::Terminal(std::io::Error::other(format!(
            "listening on {address}: {e}"
        )))
    })?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| ReviewError::Terminal(std::io::Error::other("no IP address")))?;
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_template("page.html", include_str!("page.html.j2"))
        .expect("the review page's template parses (a test renders it)");
    let mut page = Page {
        store,
        queue,
        done: queue
            .iter()
            .map(|i| reviews.reviewed_by(reviewer, i.stage(), &i.item, i.answer))
            .collect(),
        reviewer,
        paths,
        pictures: vec![Vec::new(); queue.len()],
        env,
        origin: format!("http://{bound}"),
    };
    on_ready(bound);
    for mut request in server.incoming_requests() {
        let response = page.respond(&mut request);
        // The browser having gone away is not the server's failure.
        let _ = request.respond(response);
    }
    Ok(())
}

type Response = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

fn text(status: u16, body: &str) -> Response {
    tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
}

fn see_other(location: &str) -> Response {
    tiny_http::Response::from_data(Vec::new())
        .with_status_code(303)
        .with_header(header("Location", location))
}

/// The value of `name` in a query string or form body.
fn form_value(pairs: &[(String, String)], name: &str) -> Option<String> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

impl Page<'_> {
    fn respond(&mut self, request: &mut tiny_http::Request) -> Response {
        let own = &self.origin["http://".len()..];
        let as_localhost = own.replacen("127.0.0.1", "localhost", 1);
        let host_ok = request.headers().iter().any(|h| {
            h.field.equiv("Host") && (h.value.as_str() == own || h.value.as_str() == as_localhost)
        });
        if !host_ok {
            return text(421, "this page answers only at its own loopback address");
        }
        let (path, query) = match request.url().split_once('?') {
            Some((path, query)) => (path.to_string(), query.to_string()),
            None => (request.url().to_string(), String::new()),
        };
        let query: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let at = form_value(&query, "at")
            .and_then(|a| a.parse::<usize>().ok())
            .filter(|&a| a < self.queue.len());
        match (request.method(), path.as_str()) {
            (tiny_http::Method::Get, "/") => match self.render(at.unwrap_or(0), None) {
                Ok(html) => tiny_http::Response::from_string(html)
                    .with_header(header("Content-Type", "text/html; charset=utf-8")),
                Err(e) => text(500, &e),
            },
            (tiny_http::Method::Get, "/picture") => {
                let n = form_value(&query, "n").and_then(|n| n.parse::<usize>().ok());
                match (at, n) {
                    (Some(at), Some(n)) => match self.pictures(at).map(|p| p.get(n).cloned()) {
                        Ok(Some(path)) => match std::fs::read(&path) {
                            Ok(png) => tiny_http::Response::from_data(png)
                                .with_header(header("Content-Type", "image/png")),
                            Err(e) => text(500, &e.to_string()),
                        },
                        Ok(None) => text(404, "no such picture"),
                        Err(e) => text(500, &e),
                    },
                    _ => text(400, "which picture: ?at=ITEM&n=PICTURE"),
                }
            }
            (tiny_http::Method::Post, "/verdict") => {
                let cross_site = request
                    .headers()
                    .iter()
                    .any(|h| h.field.equiv("Origin") && h.value.as_str() != self.origin);
                if cross_site {
                    return text(403, "verdicts are taken from this page only");
                }
                let mut body = Vec::new();
                if let Err(e) = request
                    .as_reader()
                    .take(MAX_FORM_BYTES)
                    .read_to_end(&mut body)
                {
                    return text(400, &e.to_string());
                }
                let form: Vec<(String, String)> =
                    form_urlencoded::parse(&body).into_owned().collect();
                match self.take_verdict(&form) {
                    Ok(next) => see_other(&format!("/?at={next}")),
                    Err((at, problem)) => match self.render(at, Some(&problem)) {
                        Ok(html) => tiny_http::Response::from_string(html)
                            .with_status_code(422)
                            .with_header(header("Content-Type", "text/html; charset=utf-8")),
                        Err(e) => text(500, &e),
                    },
                }
            }
            _ => text(404, "not here: the review page is at /"),
        }
    }

    fn pictures(&mut self, at: usize) -> Result<&[PathBuf], String> {
        if self.pictures[at].is_empty() {
            self.pictures[at] =
                write_pictures(self.store, &self.queue[at].scenario, &self.paths.pictures)
                    .map_err(|e| e.to_string())?;
        }
        Ok(&self.pictures[at])
    }

    /// Writes the verdict a form posts; the queue position to show next, or the item and why
    /// the verdict was refused.
    fn take_verdict(&mut self, form: &[(String, String)]) -> Result<usize, (usize, String)> {
        let at = form_value(form, "at")
            .and_then(|a| a.parse::<usize>().ok())
            .filter(|&a| a < self.queue.len())
            .ok_or((0, "the form names no item of the queue".to_string()))?;
        let item = &self.queue[at];
        let kind = match form_value(form, "verdict").as_deref() {
            Some("accept") => VerdictKind::Accept,
            Some("reject") => VerdictKind::Reject,
            Some("edit") => VerdictKind::Edit,
            _ => return Err((at, "the form gives no verdict".to_string())),
        };
        let comment = form_value(form, "comment").filter(|c| !c.trim().is_empty());
        let base = item.verdict(kind, comment);
        let mut lines = Vec::new();
        if kind == VerdictKind::Edit && !item.editable() {
            return Err((
                at,
                "a synthetic cast is accepted or rejected as a whole".to_string(),
            ));
        }
        if kind == VerdictKind::Edit {
            // Every field whose text differs from the answer's is an edit.
            let mut edited = item.shown.clone();
            for (role, field, current) in fields(&item.shown) {
                let name = field_label(role.as_deref(), &field);
                let Some(typed) = form_value(form, &format!("field:{name}")) else {
                    continue;
                };
                let typed = typed.replace("\r\n", "\n");
                if typed == shown(&current) {
                    continue;
                }
                let value = if current.is_string() {
                    Value::String(typed)
                } else {
                    serde_json::from_str(&typed)
                        .map_err(|e| (at, format!("{name} holds JSON: {e}")))?
                };
                parse_field_path(&item.shown, &name).map_err(|e| (at, e))?;
                check_field_against_schema(item.reviewable, role.as_deref(), &field, &value)
                    .map_err(|e| (at, e))?;
                set_field(&mut edited, role.as_deref(), &field, value.clone())
                    .map_err(|e| (at, e))?;
                lines.push(Verdict {
                    role,
                    field: Some(field),
                    value: Some(value),
                    ..base.clone()
                });
            }
            if lines.is_empty() {
                return Err((at, "no field was changed: edit one, or accept".to_string()));
            }
        } else {
            lines.push(base);
        }
        for line in &lines {
            verdicts::append(&self.paths.reviews, self.reviewer, line)
                .map_err(|e| (at, e.to_string()))?;
        }
        self.done[at] = true;
        let next = (1..=self.queue.len())
            .map(|step| (at + step) % self.queue.len())
            .find(|&n| !self.done[n])
            .unwrap_or(at);
        Ok(next)
    }

    fn render(&mut self, at: usize, said: Option<&str>) -> Result<String, String> {
        if self.queue.is_empty() {
            return Ok(
                "<!doctype html><p>Nothing to review: every answer selected has your \
                       verdict.</p>"
                    .to_string(),
            );
        }
        let pictures: Vec<String> = self
            .pictures(at)?
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let item = &self.queue[at];
        let scene = scene_text(self.store, &item.scenario).map_err(|e| e.to_string())?;
        // The terminal's layout without its label and indent.
        let scene: String = scene
            .strip_prefix("scene:\n")
            .unwrap_or(&scene)
            .lines()
            .map(|line| format!("{}\n", line.strip_prefix("  ").unwrap_or(line)))
            .collect();
        let context = json!({
            "reviewer": self.reviewer,
            "done": self.done.iter().filter(|d| **d).count(),
            "total": self.queue.len(),
            "queue": self.queue.iter().zip(&self.done).map(|(i, done)| json!({
                "stage": i.stage(), "item": i.item, "flagged": i.flagged(), "done": done,
            })).collect::<Vec<_>>(),
            "at": at,
            "next": (at + 1) % self.queue.len(),
            "previous": (at + self.queue.len() - 1) % self.queue.len(),
            "stage": item.stage(),
            "item": item.item,
            "said": said,
            "stale": Vec::<String>::new(),
            "scene": scene,
            "pictures": pictures,
            "problems": item.problems().iter().map(|p| p.message.clone()).collect::<Vec<_>>(),
            "editable": item.editable(),
            "fields": fields(&item.shown).into_iter().map(|(role, field, value)| {
                let text = shown(&value);
                json!({
                    "name": field_label(role.as_deref(), &field),
                    "rows": (text.len() / 80 + 1).min(8),
                    "value": text,
                })
            }).collect::<Vec<_>>(),
            "file": self.paths.reviews.join(format!("{}.jsonl", self.reviewer)).display()
                .to_string(),
        });
        self.env
            .get_template("page.html")
            .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(&context))))
            .map_err(|e| e.to_string())
    }
}

/// A field's value as the page's text box holds it: text as it is, anything else as JSON.
fn shown(value: &Value) -> String {
    value.as_str().map_or_else(
        || serde_json::to_string(value).unwrap_or_default(),
        str::to_string,
    )
}
