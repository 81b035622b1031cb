//! `align` through the CLI, with the real embedding model (fetched into the model cache on first
//! use): scenario time ranges on the demo show, embeddings reused from the store on re-runs, and
//! mismatched subtitles flagged rather than guessed.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

fn viss(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viss"))
        .args(args)
        .current_dir(cwd)
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

fn show(project: &Path, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["show"];
    full.extend_from_slice(args);
    let output = viss(project, &full);
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// What `viss status --json` prints.
fn status_json(project: &Path) -> serde_json::Value {
    let output = viss(project, &["status", "--json"]);
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A copy of the shared demo project (built once per run, through portraits).
fn demo() -> (tempfile::TempDir, std::path::PathBuf) {
    common::demo::copy()
}

#[test]
fn demo_scenarios_get_the_time_ranges_of_their_subtitles() {
    let (_temp, project) = demo();
    // The demo's subtitles (derived, with ground truth): scene 1 is cues 1-20 (2.44 s to 45.16 s),
    // scene 2 cues 21-33.
    let ids = common::scenario_ids(&project, "demo/s01e01");
    let first = show(
        &project,
        &["align", "demo/s01e01", &format!("span@{}", ids[0])],
    );
    assert_eq!(
        (
            first["span"]["start_ms"].as_u64(),
            first["span"]["end_ms"].as_u64()
        ),
        (Some(2440), Some(45160))
    );
    assert_eq!(first["span"]["flagged"], false);
    let second = show(
        &project,
        &["align", "demo/s01e01", &format!("span@{}", ids[1])],
    );
    assert_eq!(
        (
            second["span"]["start_ms"].as_u64(),
            second["span"]["end_ms"].as_u64()
        ),
        (Some(51679), Some(82650))
    );
    assert_eq!(second["span"]["matched_lines"], 13);
    let episode = show(&project, &["align", "demo/s01e01", "alignment@"]);
    assert!(
        episode["embedder"]
            .as_str()
            .unwrap()
            .contains("pooling=mean"),
        "{episode}"
    );
    let status = status_json(&project);
    assert_eq!(status["flags"], serde_json::json!([]), "{status}");
}

#[test]
fn an_align_param_change_reruns_only_align_and_embeds_nothing_again() {
    let (_temp, project) = demo();
    let config = std::fs::read_to_string(project.join("stages/align.toml")).unwrap();
    let changed = config.replace("match_threshold = 0.5", "match_threshold = 0.45");
    assert_ne!(config, changed);
    std::fs::write(project.join("stages/align.toml"), changed).unwrap();
    let why = text(&viss(&project, &["status", "--why", "demo/s01e01"]));
    assert!(
        why.contains("align demo/s01e01: will run because param `match_threshold`: 0.5 -> 0.45"),
        "{why}"
    );
    assert!(
        why.contains("parse_script demo/s01e01: up to date"),
        "{why}"
    );

    let build = viss(&project, &["-v", "build", "--until", "align", "--json"]);
    assert!(
        text(&build).contains("loaded the text embedder"),
        "the re-run loads it: {}",
        text(&build)
    );
    let report: serde_json::Value = serde_json::from_slice(&build.stdout).unwrap();
    let ran: Vec<(String, u64)> = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s[0].as_str().unwrap().to_string(),
                s[1]["ran"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ran,
        [
            ("ingest", 0),
            ("parse_script", 0),
            ("parse_subtitles", 0),
            ("align", 1)
        ]
        .map(|(s, n)| (s.to_string(), n))
    );
    // Built again, with nothing to align: the embedding model is not even loaded.
    let again = viss(&project, &["-v", "build", "--until", "align"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        !text(&again).contains("loaded the text embedder"),
        "{}",
        text(&again)
    );
    // How many texts a run embedded is run metadata, not part of the record.
    let listing = text(&viss(&project, &["show", "align", "demo/s01e01"]));
    assert!(
        listing.contains("stat\ttexts_embedded\t0\n"),
        "every embedding came from the store: {listing}"
    );
    // The whole-episode output is typed as the listing shows it, without the trailing `@`.
    assert!(listing.contains("\nalignment\t"), "{listing}");
    let episode = show(&project, &["align", "demo/s01e01", "alignment"]);
    assert!(!episode.to_string().contains("embedded"), "{episode}");
}

#[test]
fn subtitles_of_another_episode_get_every_scenario_flagged() {
    let (_temp, project) = demo();
    let other = "1\n00:00:01,000 --> 00:00:03,000\nThe weather station reports heavy fog.\n\n\
                 2\n00:00:04,000 --> 00:00:06,000\nSeven ships wait outside the harbour.\n\n\
                 3\n00:00:07,000 --> 00:00:09,000\nThe pilot boats cannot leave before noon.\n";
    std::fs::write(project.join("raw/demo/s01e01/subtitles.srt"), other).unwrap();
    let build = viss(&project, &["build", "--until", "align"]);
    assert!(
        build.status.success(),
        "flags are not failures: {}",
        text(&build)
    );
    let status = status_json(&project);
    let align_flags: Vec<&str> = status["flags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["stage"] == "align" && f["item"] == "demo/s01e01")
        .map(|f| f["flag"].as_str().unwrap())
        .collect();
    assert!(
        !align_flags.is_empty(),
        "flagged item(s) to look at: {status}"
    );
    for id in common::scenario_ids(&project, "demo/s01e01") {
        let unit = id.rsplit('/').next().unwrap();
        assert!(
            align_flags
                .iter()
                .any(|f| f.starts_with(&format!("{unit}:"))),
            "{unit}: {status}"
        );
    }
}

/// The aligner on the ~400-line original episode with broadcast subtitles derived from it
/// (lines split, merged, trimmed and cut, with known truth), using the real MiniLM model.
#[test]
fn episode_alignment_with_the_real_model_is_accurate_against_known_truth() {
    use viss::text::align::*;
    use viss::text::embed::{
        self, EmbedderLibrary, MemoryEmbeddingCache, SentenceEmbedderOptions, embed_cached,
    };
    use viss_dev::broadcast::{BroadcastParams, derive_broadcast_subtitles};

    let episode = include_str!("../fixtures/align/episode.txt");
    let script =
        viss::text::script::parse_script(episode, "episode.txt", &Default::default()).unwrap();
    let units = viss::text::scenario::build_scenarios(&script, &Default::default()).unwrap();
    let dialogue = script_dialogue(&script);
    assert!(dialogue.lines.len() > 400);
    let (cues, truth) = derive_broadcast_subtitles(
        &dialogue.lines,
        &dialogue.scene_of_line,
        11,
        &BroadcastParams::default(),
    )
    .unwrap();
    let ranges: Vec<(usize, usize)> = unit_line_ranges(&dialogue, &units)
        .into_iter()
        .flatten()
        .collect();
    let params = AlignParams::default();
    let truth_lines = truth_alignment(&dialogue.lines, &cues, &truth.line_cues).unwrap();
    let truth_spans = scenario_spans(&truth_lines, &cues, &ranges, &params);

    let files = viss::models::ensure_text_embedder().expect("fetch the default text embedder");
    let line_texts = line_contexts(&dialogue.lines, params.window);
    let cue_texts = cue_contexts(&cues, params.window);
    let align_with = |library: EmbedderLibrary| {
        let options = SentenceEmbedderOptions {
            library,
            ..SentenceEmbedderOptions::default()
        };
        let embedder = embed::load(&files, options, None).unwrap();
        let cache = MemoryEmbeddingCache::default();
        let line_vecs = embed_cached(embedder.as_ref(), &cache, &line_texts).unwrap();
        let cue_vecs = embed_cached(embedder.as_ref(), &cache, &cue_texts).unwrap();
        align_lines(
            &dialogue.lines,
            &cues,
            Some((&line_vecs, &cue_vecs)),
            &params,
        )
        .unwrap()
    };
    // The default embedder is fastembed (issue 22); it must align every line as viss's own ort
    // loop did.
    let fused = align_with(EmbedderLibrary::default());
    let fused_with_ort_loop = align_with(EmbedderLibrary::Ort);
    for (line, (with_default, with_ort)) in fused
        .lines
        .iter()
        .zip(&fused_with_ort_loop.lines)
        .enumerate()
    {
        assert_eq!(with_default.cues, with_ort.cues, "line {line}");
    }
    let lexical = align_lines(
        &dialogue.lines,
        &cues,
        None,
        &AlignParams {
            alpha: 0.0,
            ..params.clone()
        },
    )
    .unwrap();
    for (name, alignment, floor) in [
        ("fused alpha 0.8", &fused, 0.90),
        ("lexical only", &lexical, 0.95),
    ] {
        let accuracy = line_accuracy(alignment, &truth_lines).unwrap();
        let boundaries = boundary_errors(
            &scenario_spans(alignment, &cues, &ranges, &params),
            &truth_spans,
        )
        .unwrap();
        eprintln!("{name}: {accuracy:?} {boundaries:?}");
        assert!(accuracy.exact_rate >= floor, "{name}: {accuracy:?}");
        assert_eq!(
            boundaries.missing, 0,
            "{name}: every scenario gets a range: {boundaries:?}"
        );
        assert!(
            boundaries.mean_start_error_s < 1.5 && boundaries.mean_end_error_s < 1.5,
            "{name}: {boundaries:?}"
        );
        let pairs: Vec<(usize, usize)> = alignment
            .lines
            .iter()
            .flat_map(|l| l.cues.iter().map(move |&c| (l.line, c)))
            .collect();
        assert!(
            pairs.windows(2).all(|w| w[0].1 <= w[1].1),
            "{name}: the alignment is monotone"
        );
    }
}

/// What `viss bench align --truth` prints: the report as JSON, then a summary line.
fn bench_against_truth(args: &[&str]) -> serde_json::Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut full = vec![
        "bench",
        "align",
        "--truth",
        "tests/fixtures/align/download/truth.toml",
    ];
    full.extend_from_slice(args);
    let output = viss(root, &full);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json_end = stdout.rfind("}\n").unwrap() + 1;
    serde_json::from_str(&stdout[..json_end]).unwrap()
}

/// Issue 19: a subtitle file as downloaded (credits, a recap, the theme song and a title card,
/// songs between scenes, hearing-impaired labels and sounds, the site's advert last in the file
/// but timed first) is screened before alignment: no scenario span takes in a cue that is not
/// dialogue, and the spans are where the truth says. Without the screen (what viss did before),
/// the recap moved the first scene's start and spans took in such cues.
#[test]
fn a_downloaded_subtitle_file_is_screened_and_its_spans_match_the_truth() {
    let report = bench_against_truth(&[]);
    eprintln!("{report}");
    assert_eq!(report["spans_with_non_dialogue"], 0, "{report}");
    assert_eq!(report["non_dialogue_kept_out"], report["non_dialogue_cues"]);
    assert_eq!(report["dialogue_kept_out"], serde_json::json!([]));
    assert!(
        report["spans_within_2s"]["rate"].as_f64().unwrap() >= 0.95,
        "{report}"
    );
    let first = &report["per_scenario"][0];
    assert_eq!(
        first["predicted_s"], first["true_s"],
        "the recap does not move it"
    );
    assert!(
        report["exact"]["rate"].as_f64().unwrap() >= 0.93,
        "{report}"
    );
    assert!(
        report["first_cue"]["rate"].as_f64().unwrap() >= 0.95,
        "{report}"
    );
    assert!(
        report["any_cue"]["rate"].as_f64().unwrap() >= 0.97,
        "{report}"
    );

    let unscreened = bench_against_truth(&["--keep-non-dialogue"]);
    assert!(
        unscreened["spans_with_non_dialogue"].as_u64().unwrap() > 0,
        "{unscreened}"
    );
    let first = &unscreened["per_scenario"][0];
    assert_ne!(first["predicted_s"], first["true_s"]);
}
