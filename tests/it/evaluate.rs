//! `evaluate` through `viss build`, agents and a panel of three judges answered by the
//! in-process MOCK OpenAI-compatible server (the network boundary; prompts, validation, votes,
//! cache and records are real). The judges disagree in scripted ways: the votes, a judge that
//! never answers usably (missing, not Not Achieved), one that leaves a character out (re-asked),
//! too few judges for a vote (unscored).

use serde_json::{Value, json};
use viss::llm::mock_server::{BackgroundMockServer, MockReply};

use crate::common::mock_llm::{ran, step_of};
use crate::llm_stages::{LlmProject, text, valid_answer, viss};

const ENACTMENT: &str = "role_enactment";
const INTERACTION: &str = "interaction_management";

/// The characters a judge's request lists, in order.
fn characters_of(body: &Value) -> Vec<String> {
    let schema = &body["response_format"]["json_schema"]["schema"];
    schema["properties"]["characters"]["items"]["properties"]["name"]["enum"]
        .as_array()
        .expect("a judge's request")
        .iter()
        .map(|name| name.as_str().unwrap().to_string())
        .collect()
}

/// Whether the request is about the fixture's second scene, the one whose cast opens with Ben.
fn second_scene(body: &Value) -> bool {
    characters_of(body).first().map(String::as_str) == Some("Ben")
}

pub(crate) fn grades(body: &Value, labels: [&str; 2], leave_out_last: bool) -> Value {
    let step = step_of(body);
    let keys = if step == ENACTMENT {
        ["expression", "characteristic"]
    } else {
        ["interaction_regulation", "interaction_outcome"]
    };
    let mut names = characters_of(body);
    if leave_out_last {
        names.pop();
    }
    let entries: Vec<Value> = names
        .iter()
        .map(|name| {
            json!({
                "name": name,
                keys[0]: {"label": labels[0], "reason": format!("{name}'s turn 1.")},
                keys[1]: {"label": labels[1], "reason": format!("{name}'s turn 2.")},
            })
        })
        .collect();
    json!({ "characters": entries })
}

/// The three judges' scripts:
/// - judge-a grades every task Achieved;
/// - judge-b: expression Achieved, characteristic Not Achieved, and both interaction tasks Not
///   Achieved; its first enactment answer leaves the last character out; on the second scene
///   it never answers the interaction question usably;
/// - judge-c: both enactment tasks Partially Achieved; it never answers the interaction
///   question usably ("Mostly" is not a label).
fn judge(body: &Value) -> MockReply {
    let step = step_of(body);
    let model = body["model"].as_str().unwrap_or_default();
    let reasked = body["messages"].as_array().map_or(0, Vec::len) > 2;
    let answer = match (model, step.as_str()) {
        ("judge-a", _) => grades(body, ["Achieved", "Achieved"], false),
        ("judge-b", ENACTMENT) => grades(body, ["Achieved", "Not Achieved"], !reasked),
        ("judge-b", _) if second_scene(body) => grades(body, ["Mostly", "Mostly"], false),
        ("judge-b", _) => grades(body, ["Not Achieved", "Not Achieved"], false),
        ("judge-c", ENACTMENT) => grades(body, ["Partially Achieved", "Partially Achieved"], false),
        ("judge-c", _) => grades(body, ["Mostly", "Not Achieved"], false),
        _ => panic!("an unexpected judge request: {model} {step}"),
    };
    MockReply::answer(&answer.to_string())
}

fn answer(body: &Value) -> MockReply {
    match step_of(body).as_str() {
        "turn" => MockReply::answer(&viss::bench::scripted::turn_answer(body).to_string()),
        ENACTMENT | INTERACTION => judge(body),
        _ => MockReply::answer(&valid_answer(body).to_string()),
    }
}

impl LlmProject {
    /// Text runs of two turns, played by the mock's agent and judged by three mock judges.
    fn with_mock_panel(self) -> Self {
        let project = self.with_mock_agents(2);
        let config = project.root.join("viss.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(text.contains("judges = [\"local\"]"));
        std::fs::write(
            &config,
            text.replace(
                "judges = [\"local\"]",
                "judges = [\"mock:judge-a\", \"mock:judge-b\", \"mock:judge-c\"]",
            ),
        )
        .unwrap();
        std::fs::write(
            project.root.join("stages/plan_runs.toml"),
            "[params]\nmodes = [\"text\"]\n",
        )
        .unwrap();
        project
    }

    fn evaluate(&self) -> (std::process::Output, Value) {
        let output = viss(&self.root, &["build", "--until", "evaluate", "--json"]);
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output, report)
    }

    fn judgement(&self, run: &str) -> Value {
        let output = viss(&self.root, &["show", "evaluate", run, "judgement"]);
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    }
}

/// The panel's verdict and the judges' labels of `character`'s `task`.
fn task<'a>(judgement: &'a Value, character: &str, task: &str) -> &'a Value {
    judgement["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["character"] == character && t["task"] == task)
        .unwrap_or_else(|| panic!("no {task} of {character} in {judgement}"))
}

fn labels(entry: &Value) -> Vec<Value> {
    entry["grades"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.get("label").cloned().unwrap_or(Value::Null))
        .collect()
}

#[test]
fn mock_server_judge_panel_votes_and_a_failed_judge_is_missing_never_not_achieved() {
    let mock = BackgroundMockServer::start(|_, body| answer(body));
    let project = LlmProject::new(&mock.server().base_url).with_mock_panel();
    let (output, report) = project.evaluate();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "simulate"), 2);
    assert_eq!(ran(&report, "evaluate"), 2);

    let judge_bodies: Vec<Value> = (0..mock.server().request_count())
        .map(|i| mock.server().body(i))
        .filter(|b| matches!(step_of(b).as_str(), ENACTMENT | INTERACTION))
        .collect();
    for body in &judge_bodies {
        // A re-ask (the question and one more message naming the problems) may sample warmer.
        if body["messages"].as_array().unwrap().len() == 2 {
            assert_eq!(body["temperature"].as_f64(), Some(0.0));
        }
        assert_eq!(body["seed"], 7);
        let mut characters = characters_of(body);
        characters.sort();
        assert_eq!(characters, ["Ada", "Ben"]);
        let question = body["messages"].to_string();
        assert!(question.contains("said: "), "the turns are the evidence");
    }
    let asked = |model: &str, step: &str| {
        judge_bodies
            .iter()
            .filter(|b| b["model"] == model && step_of(b) == step)
            .count()
    };
    // Per run: a and c once per question (c's interaction answers 3 times with the same
    // problem, then gives up), b's enactment twice (the omission re-asked), its interaction
    // once on the first scene and 3 times on the second.
    assert_eq!(asked("judge-a", ENACTMENT), 2);
    assert_eq!(asked("judge-a", INTERACTION), 2);
    assert_eq!(asked("judge-b", ENACTMENT), 4);
    let stalled = viss::llm::STALLED_AFTER as usize;
    assert_eq!(asked("judge-b", INTERACTION), 1 + stalled);
    assert_eq!(asked("judge-c", ENACTMENT), 2);
    assert_eq!(asked("judge-c", INTERACTION), 2 * stalled);

    let first = project.judgement(&project.run_id(0, "text"));
    assert_eq!(first["mode"], "text");
    let models: Vec<&str> = first["judges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["mock:judge-a", "mock:judge-b", "mock:judge-c"]);
    // judge-b's omission was re-asked with its reason and is on record.
    let b_enactment = &first["judges"][1]["answers"][0];
    assert_eq!(b_enactment["question"], ENACTMENT);
    assert_eq!(
        b_enactment["rejected"],
        json!([{
            "message": "the JSON does not meet the requirements: Fix this in your answer: \
                        missing: Ben; grade every character",
            "problems": [{
                "role": null, "field": "characters", "kind": "role_missing",
                "message": "missing: Ben; grade every character",
            }],
        }])
    );
    // judge-c never answered the interaction question: missing, with the reason.
    let c_interaction = &first["judges"][2]["answers"][1];
    assert!(
        c_interaction["failed"]
            .as_str()
            .unwrap()
            .contains("\"Mostly\" is not one of"),
        "{c_interaction}"
    );
    for name in ["Ada", "Ben"] {
        // A, A, P: the most given label.
        let expression = task(&first, name, "expression");
        assert_eq!(
            labels(expression),
            [
                json!("Achieved"),
                json!("Achieved"),
                json!("Partially Achieved")
            ]
        );
        assert_eq!(
            expression["verdict"],
            json!({"by": "plurality", "label": "Achieved"})
        );
        // A, N, P: all different, Partially Achieved.
        assert_eq!(
            task(&first, name, "characteristic")["verdict"],
            json!({"by": "split"})
        );
        // A, N and c missing (null, not Not Achieved): the two that answered differ.
        let outcome = task(&first, name, "interaction_outcome");
        assert_eq!(
            labels(outcome),
            [json!("Achieved"), json!("Not Achieved"), Value::Null]
        );
        assert_eq!(outcome["grades"][2], Value::Null);
        assert_eq!(outcome["verdict"], json!({"by": "split"}));
        assert_eq!(
            task(&first, name, "expression")["grades"][0]["reason"],
            format!("{name}'s turn 1.")
        );
    }
    // On the second scene only judge-a answered the interaction question: unscored.
    let second = project.judgement(&project.run_id(1, "text"));
    for name in ["Ada", "Ben"] {
        for key in ["interaction_regulation", "interaction_outcome"] {
            let entry = task(&second, name, key);
            assert_eq!(
                entry["verdict"],
                json!({"by": "unscored", "answered": 1, "needed": 2})
            );
            assert_eq!(labels(entry), [json!("Achieved"), Value::Null, Value::Null]);
        }
    }
    assert_eq!(
        task(&second, "Ada", "expression")["verdict"],
        json!({"by": "plurality", "label": "Achieved"})
    );

    // The report, computed by hand from the verdicts above: per character, scenario 1 gives
    // expression A, characteristic P, regulation P, outcome P; scenario 2 expression A,
    // characteristic P and both interaction tasks unscored.
    let out = project.root.join("report-out");
    let written = viss(
        &project.root,
        &["report", "--out", out.to_str().unwrap(), "--json"],
    );
    assert!(written.status.success(), "{}", text(&written));
    let summary: Value = serde_json::from_slice(&written.stdout).unwrap();
    assert_eq!(
        (summary["runs"].as_u64(), summary["scenarios"].as_u64()),
        (Some(2), Some(2))
    );
    let tables = std::fs::read_to_string(out.join("tables.md")).unwrap();
    let too_few = "2 scenario(s): too few for an interval (needs 5)";
    for row in [
        format!(
            "| mock:mock-model | text | 100.0 (n=4) - {too_few} | 25.0 (n=4) - {too_few} | 25.0 \
             (n=2, 2 unscored) - 1 scenario(s): too few for an interval (needs 5) | 25.0 (n=2, 2 \
             unscored) - 1 scenario(s): too few for an interval (needs 5) | 50.0 (n=12, 4 \
             unscored) - {too_few} |"
        ),
        "| 1 | mock:judge-a | 0 | 0 | 16 | 0 |".to_string(),
        "| 2 | mock:judge-b | 8 | 0 | 4 | 4 |".to_string(),
        "| 3 | mock:judge-c | 0 | 8 | 0 | 8 |".to_string(),
        // Complete panels: expression A, A, P and characteristic A, N, P on 4 tasks each.
        "| all tasks | 12 (8) | -0.364 | 0.0% | 50.0% |".to_string(),
    ] {
        assert!(tables.contains(&row), "{row:?} not in:\n{tables}");
    }
    let csv = std::fs::read_to_string(out.join("cells.csv")).unwrap();
    assert!(csv.starts_with("table,row,column,value,low,high,"), "{csv}");
    assert!(
        csv.contains("\nby_task,mock:mock-model / text,expression,100.0,,,4,0,2,,,"),
        "{csv}"
    );
    let parquet =
        viss::export::parquet::read_parquet(&std::fs::read(out.join("cells.parquet")).unwrap())
            .unwrap();
    assert_eq!(parquet.len(), csv.lines().count() - 1);
    assert_eq!(parquet[0]["table"], "by_task");

    // Built again: nothing runs and nobody is asked.
    let requests = mock.server().request_count();
    let (output, report) = project.evaluate();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "evaluate"), 0);
    assert_eq!(mock.server().request_count(), requests);

    // A changed judge prompt re-runs evaluate only.
    let prompt = project.root.join("prompts/evaluate_interaction.j2");
    let edited = std::fs::read_to_string(&prompt)
        .unwrap()
        .replace("How to grade:", "How to grade (strictly):");
    std::fs::write(&prompt, edited).unwrap();
    let (output, report) = project.evaluate();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "plan_runs"), 0);
    assert_eq!(ran(&report, "simulate"), 0);
    assert_eq!(ran(&report, "evaluate"), 2);
    let turns_asked = (requests..mock.server().request_count())
        .filter(|&i| step_of(&mock.server().body(i)) == "turn")
        .count();
    assert_eq!(turns_asked, 0);
}

const SOTOPIA: &str = "sotopia";
const DIMENSIONS: [&str; 7] = [
    "believability",
    "relationship",
    "knowledge",
    "secret",
    "social_rules",
    "financial_and_material_benefits",
    "goal",
];

fn ratings(body: &Value, scores: [i64; 7]) -> Value {
    let entries: Vec<Value> = characters_of(body)
        .iter()
        .map(|name| {
            let mut entry = json!({ "name": name });
            for (dimension, score) in DIMENSIONS.into_iter().zip(scores) {
                entry[dimension] = json!({"reasoning": format!("{name}, turn 1."), "score": score});
            }
            entry
        })
        .collect();
    json!({ "characters": entries })
}

/// The rubric's scripts (the task questions as in [`judge`]):
/// - judge-a rates every character 8, 2, 5, -1, 0, 1, 7;
/// - judge-b first gives a secret of 3, out of its -10..0 range, and is re-asked; then 6, 0,
///   3, -3, 0, -1, 5;
/// - judge-c always rates the goal 12 (of 0..10): missing, never clamped to 10.
fn rubric_judge(body: &Value) -> MockReply {
    if step_of(body) != SOTOPIA {
        return answer(body);
    }
    let reasked = body["messages"].as_array().map_or(0, Vec::len) > 2;
    let scores = match body["model"].as_str().unwrap_or_default() {
        "judge-a" => [8, 2, 5, -1, 0, 1, 7],
        "judge-b" if !reasked => [6, 0, 3, 3, 0, -1, 5],
        "judge-b" => [6, 0, 3, -3, 0, -1, 5],
        "judge-c" => [5, 0, 5, 0, 0, 0, 12],
        other => panic!("an unexpected judge: {other}"),
    };
    MockReply::answer(&ratings(body, scores).to_string())
}

/// SOTOPIA-EVAL as the optional rubric: every score is range-checked (an out-of-range score is
/// re-asked with the range; a judge that keeps giving one is missing, never clamped), the
/// panel's mean per dimension is recorded, and the report shows each dimension and SOTOPIA's
/// overall (their plain mean), counting characters.
#[test]
fn mock_server_sotopia_rubric_scores_are_range_checked_and_reported_per_dimension() {
    let mock = BackgroundMockServer::start(|_, body| rubric_judge(body));
    let project = LlmProject::new(&mock.server().base_url).with_mock_panel();
    std::fs::write(
        project.root.join("stages/evaluate.toml"),
        "[params]\nsotopia = true\n",
    )
    .unwrap();
    let (output, report) = project.evaluate();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "evaluate"), 2);

    let requests = mock.server().state.requests.lock().unwrap();
    let rubric_requests: Vec<&Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| step_of(b) == SOTOPIA)
        .collect();
    // Per run: judge-a once, judge-b twice, judge-c three times (the same problem three times
    // in a row ends its re-asks).
    let stalled = viss::llm::STALLED_AFTER as usize;
    assert_eq!(rubric_requests.len(), 2 * (1 + 2 + stalled));
    let reasked_b = rubric_requests
        .iter()
        .find(|b| b["model"] == "judge-b" && b["messages"].as_array().unwrap().len() > 2)
        .unwrap();
    assert!(
        reasked_b
            .to_string()
            .contains("secret is scored from -10 to 0"),
        "{reasked_b}"
    );
    drop(requests);

    for run in [project.run_id(0, "text"), project.run_id(1, "text")] {
        let judgement = project.judgement(&run);
        let rubric_answers: Vec<&Value> = judgement["judges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|judge| &judge["answers"][2])
            .collect();
        assert!(rubric_answers.iter().all(|a| a["question"] == SOTOPIA));
        assert!(rubric_answers[0]["failed"].is_null());
        let refused = rubric_answers[1]["rejected"].as_array().unwrap();
        assert_eq!(refused.len(), 1, "{}", rubric_answers[1]);
        assert!(
            refused[0]["message"]
                .as_str()
                .unwrap()
                .contains("the score 3 is out of range")
        );
        let failed = rubric_answers[2]["failed"].as_str().unwrap();
        assert!(failed.contains("goal is scored from 0 to 10"), "{failed}");
        for character in judgement["sotopia"].as_array().unwrap() {
            let given = character["ratings"].as_array().unwrap();
            assert_eq!(given.len(), 3);
            assert!(given[2].is_null(), "judge-c is missing: {character}");
            assert_eq!(given[1][3]["score"], -3);
            assert_eq!(
                character["mean"],
                json!([7.0, 1.0, 4.0, -2.0, 0.0, 0.0, 6.0]),
                "{character}"
            );
        }
    }

    let out = project.root.join("report-out");
    let written = viss(&project.root, &["report", "--out", out.to_str().unwrap()]);
    assert!(written.status.success(), "{}", text(&written));
    let tables = std::fs::read_to_string(out.join("tables.md")).unwrap();
    let note = "2 scenario(s): too few for an interval (needs 5)";
    // 2 runs x 2 characters; overall = (7 + 1 + 4 - 2 + 0 + 0 + 6) / 7 = 2.29.
    let row = format!(
        "| mock:mock-model | text | 7.0 (n=4 characters) - {note} | 1.0 (n=4 characters) - \
         {note} | 4.0 (n=4 characters) - {note} | -2.0 (n=4 characters) - {note} | 0.0 (n=4 \
         characters) - {note} | 0.0 (n=4 characters) - {note} | 6.0 (n=4 characters) - {note} \
         | 2.3 (n=4 characters) - {note} |"
    );
    assert!(tables.contains(&row), "{row:?} not in:\n{tables}");
    assert!(tables.contains("overall (SOTOPIA: mean of the seven)"));
    let csv = std::fs::read_to_string(out.join("cells.csv")).unwrap();
    assert!(
        csv.contains(
            "\nsotopia,mock:mock-model / text,goal,6.0,,,0,0,2,,,2 scenario(s): too few \
                      for an interval (needs 5),4,0,,,\n"
        ),
        "{csv}"
    );
}

/// The text between `start` and the next `end` after each occurrence of `start` in `text`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Vec<&'a str> {
    text.match_indices(start)
        .filter_map(|(at, _)| {
            let rest = &text[at + start.len()..];
            rest.find(end).map(|stop| &rest[..stop])
        })
        .collect()
}

/// The report as a researcher opens it: the page renders in a real browser (Debian's chromium)
/// with every table and a drawn chart for each table with a number, no console error, and
/// links to one transcript page per run that render too.
#[test]
fn mock_server_report_page_renders_in_headless_chromium_with_charts_and_run_pages() {
    use crate::common::browser;

    // The console check can fail: a page that logs an error is caught.
    let control = tempfile::tempdir().unwrap();
    let broken = control.path().join("broken.html");
    std::fs::write(
        &broken,
        "<!doctype html><p>x</p><script>console.error('deliberate failure')</script>",
    )
    .unwrap();
    let seen = browser::open(&broken, (400, 300));
    assert!(
        seen.console
            .iter()
            .any(|line| line.contains("deliberate failure")),
        "{:?}",
        seen.console
    );

    let mock = BackgroundMockServer::start(|_, body| answer(body));
    let project = LlmProject::new(&mock.server().base_url).with_mock_panel();
    let (output, _) = project.evaluate();
    assert!(output.status.success(), "{}", text(&output));
    let out = project.root.join("report-out");
    let written = viss(&project.root, &["report", "--out", out.to_str().unwrap()]);
    assert!(written.status.success(), "{}", text(&written));
    let tables: Value =
        serde_json::from_slice(&std::fs::read(out.join("tables.json")).unwrap()).unwrap();
    let scores = tables["scores"].as_array().unwrap();
    let with_rows: Vec<&Value> = scores
        .iter()
        .filter(|t| !t["rows"].as_array().unwrap().is_empty())
        .collect();
    let with_values = with_rows
        .iter()
        .filter(|t| {
            t["rows"].as_array().unwrap().iter().any(|row| {
                row["cells"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| !c["value"].is_null())
            })
        })
        .count();
    assert!(with_values >= 4, "{tables}");

    let page = browser::open(&out.join("index.html"), (1200, 4000));
    assert!(page.console.is_empty(), "{:?}", page.console);
    for table in scores {
        let title = table["title"].as_str().unwrap();
        assert!(page.dom.contains(title), "{title} not on the page");
    }
    // Score tables with rows, then agreement (three judges), each judge's labels, the runs.
    assert_eq!(page.dom.matches("<table>").count(), with_rows.len() + 3);
    assert_eq!(
        page.dom.matches("<figure class=\"chart\"><svg").count(),
        with_values
    );
    // The charts were drawn, not just present: bars in the palette's first colour.
    let drawn = page
        .screenshot
        .pixels()
        .filter(|p| {
            let [r, g, b] = p.0;
            r < 4 && (110..=118).contains(&g) && (174..=182).contains(&b)
        })
        .count();
    assert!(drawn > 2000, "{drawn} chart pixels on the screenshot");
    assert_eq!(page.screenshot.dimensions(), (1200, 4000));

    let links = between(&page.dom, "<a href=\"runs/", "</a>");
    assert_eq!(links.len(), 2, "{links:?}");
    let mut missing_judges = 0;
    for link in links {
        let (file, run) = link.split_once("\">").unwrap();
        let trace: Value = serde_json::from_slice(
            &viss(&project.root, &["show", "simulate", run, "trace"]).stdout,
        )
        .unwrap();
        let run_page = browser::open(&out.join("runs").join(file), (1000, 2000));
        assert!(run_page.console.is_empty(), "{:?}", run_page.console);
        assert!(run_page.dom.contains("<h2>Transcript</h2>"), "{file}");
        for turn in trace["turns"].as_array().unwrap() {
            let thought = turn["turn"]["inner_thought"].as_str().unwrap();
            assert!(run_page.dom.contains(thought), "{thought:?} not on {file}");
        }
        // Every character's four tasks with the verdict and each judge's grade.
        let cast = trace["settings"]["cast"].as_array().unwrap().len();
        assert_eq!(
            run_page.dom.matches("<tr><td>").count(),
            cast + 4 * cast,
            "{file}"
        );
        missing_judges += usize::from(run_page.dom.contains("Judges that did not answer"));
    }
    // judge-c never answers the interaction question; judge-b fails it on one scene.
    assert_eq!(missing_judges, 2);
}
