//! `ingest` through the real CLI: manifest paths may not leave raw/, checksums must match, and
//! every refusal names the manifest line; a bad entry fails alone and loses nothing built.
//! Builds stop after ingest (`--until ingest`): these episodes have no subtitles.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn viss(project: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(project)
        .args(args)
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

struct Show {
    _temp: tempfile::TempDir,
    root: PathBuf,
}

impl Show {
    fn new() -> Self {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("project");
        let init = Command::new(env!("CARGO_BIN_EXE_viss"))
            .arg("init")
            .arg(&root)
            .output()
            .unwrap();
        assert!(init.status.success(), "{}", text(&init));
        std::fs::create_dir_all(root.join("raw/show")).unwrap();
        std::fs::write(root.join("raw/show/e1.txt"), "Ana: Hello.\nBo: Hi.\n").unwrap();
        std::fs::write(root.join("raw/show/e2.txt"), "Ana: Again.\nBo: Yes.\n").unwrap();
        std::fs::write(temp.path().join("outside.txt"), "not media").unwrap();
        Self { _temp: temp, root }
    }

    fn manifest(&self, body: &str) {
        std::fs::write(self.root.join("manifests/shows/show.toml"), body).unwrap();
    }
}

const HEAD: &str = "license = \"test\"\n\n";

#[test]
fn a_path_escaping_raw_is_refused_with_the_manifest_line_and_good_episodes_still_build() {
    let show = Show::new();
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/e1.txt\"\n\n[[episodes]]\nid = \
         \"e2\"\nscript = \"../outside.txt\"\n"
    ));
    let build = viss(&show.root, &["build", "--until", "ingest"]);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    let out = text(&build);
    assert!(
        out.contains(
            "ingest show/e2: manifests/shows/show.toml:9: script path \"../outside.txt\" \
             escapes raw/"
        ),
        "{out}"
    );
    // The good episode was built and stays built when the bad one is fixed.
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/e1.txt\"\n\n[[episodes]]\nid = \
         \"e2\"\nscript = \"show/e2.txt\"\n"
    ));
    let fixed = viss(&show.root, &["build", "--until", "ingest", "--json"]);
    assert!(fixed.status.success(), "{}", text(&fixed));
    let report: serde_json::Value = serde_json::from_slice(&fixed.stdout).unwrap();
    assert_eq!(report["stages"][0][1]["fresh"], 1);
    assert_eq!(report["stages"][0][1]["ran"], 1);
}

#[test]
fn absolute_paths_and_symlinks_out_of_raw_are_refused() {
    let show = Show::new();
    let outside = show.root.parent().unwrap().join("outside.txt");
    std::os::unix::fs::symlink(&outside, show.root.join("raw/show/sneaky.txt")).unwrap();
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"abs\"\nscript = \"{}\"\n\n[[episodes]]\nid = \"link\"\nscript \
         = \"show/sneaky.txt\"\n",
        outside.display()
    ));
    let out = text(&viss(&show.root, &["build", "--until", "ingest"]));
    assert!(
        out.contains("show.toml:5: script path") && out.contains("escapes raw/"),
        "{out}"
    );
    assert!(
        out.contains("show.toml:9: script path \"show/sneaky.txt\" escapes raw/"),
        "{out}"
    );
}

#[test]
fn a_checksum_mismatch_names_the_sha256_line() {
    let show = Show::new();
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/e1.txt\"\n[episodes.sha256]\nscript = \
         \"{}\"\n",
        "0".repeat(64)
    ));
    let build = viss(&show.root, &["build", "--until", "ingest"]);
    assert_eq!(build.status.code(), Some(1));
    let out = text(&build);
    assert!(
        out.contains("show.toml:7: sha256 of raw/show/e1.txt is "),
        "{out}"
    );
    assert!(out.contains("but the manifest says 0000"), "{out}");
}

#[test]
fn a_correct_checksum_passes_and_a_missing_file_is_named() {
    let show = Show::new();
    let sha: String = {
        use sha2::Digest;
        let digest =
            sha2::Sha256::digest(std::fs::read(show.root.join("raw/show/e1.txt")).unwrap());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    };
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/e1.txt\"\nsha256 = {{ script = \"{sha}\" \
         }}\n\n[[episodes]]\nid = \"e3\"\nscript = \"show/e3.txt\"\n"
    ));
    let out = text(&viss(&show.root, &["build", "--until", "ingest"]));
    assert!(
        out.contains("show.toml:10: script file raw/show/e3.txt does not exist"),
        "{out}"
    );
    assert!(
        !out.contains("show/e1:"),
        "e1 has the right checksum: {out}"
    );
}

#[test]
fn a_malformed_manifest_is_reported_with_its_line() {
    let show = Show::new();
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/e1.txt\"\nvideo_path = \"x.mp4\"\n"
    ));
    let out = text(&viss(&show.root, &["build", "--until", "ingest"]));
    assert!(
        out.contains("manifests/shows/show.toml:6:1: unknown field `video_path`"),
        "{out}"
    );
    assert!(out.contains("video_path"), "{out}");
}

/// `viss` with a deadline: a build blocked on a FIFO fails the test instead of hanging it.
fn viss_within(project: &Path, args: &[&str], seconds: u64) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(project)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "viss {args:?} still ran after {seconds} s: {}",
                text(&output)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

#[test]
fn a_fifo_or_a_directory_named_as_a_raw_file_is_refused_with_the_manifest_line() {
    let show = Show::new();
    mkfifo(&show.root.join("raw/show/fifo.txt"));
    std::fs::create_dir(show.root.join("raw/show/dir.srt")).unwrap();
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/fifo.txt\"\n\n\
         [[episodes]]\nid = \"e2\"\nscript = \"show/e2.txt\"\nsubtitles = \"show/dir.srt\"\n"
    ));
    let build = viss_within(&show.root, &["build", "--until", "ingest"], 60);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    let out = text(&build);
    assert!(
        out.contains(
            "show.toml:5: script raw/show/fifo.txt is a FIFO (named pipe), not a regular file"
        ),
        "{out}"
    );
    assert!(
        out.contains("show.toml:10: subtitles raw/show/dir.srt is a directory, not a regular file"),
        "{out}"
    );
}

#[test]
fn a_fifo_named_as_a_manifest_is_refused_not_read() {
    let show = Show::new();
    mkfifo(&show.root.join("manifests/shows/show.toml"));
    let build = viss_within(&show.root, &["build", "--until", "ingest"], 60);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    let out = text(&build);
    assert!(
        out.contains("manifests/shows/show.toml: is a FIFO (named pipe)"),
        "{out}"
    );
}

#[test]
fn a_symlink_loop_is_reported_as_a_loop_not_as_missing() {
    let show = Show::new();
    let raw = show.root.join("raw/show");
    std::os::unix::fs::symlink("loop_b.txt", raw.join("loop_a.txt")).unwrap();
    std::os::unix::fs::symlink("loop_a.txt", raw.join("loop_b.txt")).unwrap();
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/loop_a.txt\"\n"
    ));
    let out = text(&viss(&show.root, &["build", "--until", "ingest"]));
    assert!(
        out.contains("show.toml:5: script raw/show/loop_a.txt is a symlink loop"),
        "{out}"
    );
    assert!(!out.contains("does not exist"), "{out}");
}

#[test]
fn misnamed_manifests_fail_naming_the_file_and_other_files_are_warned_about() {
    let show = Show::new();
    let shows = show.root.join("manifests/shows");
    let body = format!("{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/e1.txt\"\n");
    for name in ["s.TOML", ".toml", "s.toml.bak"] {
        std::fs::write(shows.join(name), &body).unwrap();
    }
    let build = viss(&show.root, &["build", "--until", "ingest"]);
    assert_eq!(build.status.code(), Some(1), "{}", text(&build));
    let out = text(&build);
    assert!(
        out.contains(
            "manifests/shows/s.TOML: this manifest would not be read; only lowercase .toml is \
             read: rename it to s.toml"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "manifests/shows/.toml: this manifest would not be read; a manifest is named after \
             its show"
        ),
        "{out}"
    );
    assert!(out.contains("manifests/shows/s.toml.bak: skipped"), "{out}");
}

#[test]
fn a_build_without_any_manifest_says_there_is_nothing_to_build() {
    let show = Show::new();
    let build = viss(&show.root, &["build", "--until", "ingest"]);
    assert!(build.status.success(), "{}", text(&build));
    let out = text(&build);
    assert!(
        out.contains("no show manifests in manifests/shows/, so there is nothing to build"),
        "{out}"
    );
}

#[test]
fn a_huge_subtitle_cue_is_cut_for_align_and_the_episode_is_flagged() {
    let show = Show::new();
    let huge = "la ".repeat(20_000);
    std::fs::write(
        show.root.join("raw/show/e1.srt"),
        format!(
            "1\n00:00:01,000 --> 00:00:02,000\nHello.\n\n2\n00:00:03,000 --> 00:00:04,000\n{huge}\n"
        ),
    )
    .unwrap();
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/e1.txt\"\nsubtitles = \"show/e1.srt\"\n"
    ));
    // Lexical only: no embedding model to fetch.
    let stage = show.root.join("stages/align.toml");
    let config = std::fs::read_to_string(&stage).unwrap();
    std::fs::write(&stage, config.replace("alpha = 0.8\n", "alpha = 0.0\n")).unwrap();
    let build = viss(&show.root, &["build", "--until", "align"]);
    assert!(build.status.success(), "{}", text(&build));
    let status = text(&viss(&show.root, &["status"]));
    assert!(
        status.contains(
            "align show/e1: 1 text(s) longer than max_text_chars = 10000 were cut to their first \
             10000 characters before scoring: the subtitle cue at 3.000 s (59999 characters)"
        ),
        "{status}"
    );
}

#[test]
fn a_raw_file_past_its_kinds_limit_or_binary_from_its_first_byte_is_refused_unread() {
    let show = Show::new();
    // Sparse files: they take no disk, but read in full they would take their size in memory.
    let huge = std::fs::File::create(show.root.join("raw/show/huge.txt")).unwrap();
    huge.set_len(4 << 30).unwrap();
    let zeros = std::fs::File::create(show.root.join("raw/show/zeros.srt")).unwrap();
    zeros.set_len(200 << 20).unwrap();
    show.manifest(&format!(
        "{HEAD}[[episodes]]\nid = \"e1\"\nscript = \"show/huge.txt\"\n\n[[episodes]]\nid = \
         \"e2\"\nscript = \"show/e2.txt\"\nsubtitles = \"show/zeros.srt\"\n"
    ));
    let output = viss(
        &show.root,
        &["build", "--until", "parse_subtitles", "--json"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let most_memory = report["peak_memory_bytes"].as_u64().unwrap();
    let printed = text(&output);
    assert!(
        printed.contains(
            "manifests/shows/show.toml:5: script raw/show/huge.txt is 4294967296 bytes, and a \
             script may be at most 256 MiB"
        ),
        "{printed}"
    );
    assert!(
        printed.contains("raw/show/zeros.srt:1: undecodable: NUL byte at byte 0"),
        "{printed}"
    );
    assert!(
        most_memory < 150 << 20,
        "the 200 MiB file was not read whole: {most_memory} bytes at most"
    );
}
