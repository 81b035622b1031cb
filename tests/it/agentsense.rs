//! The AgentSense construction stages (`goals`, `private_info`, `anonymize`, `questions`,
//! `relationships`, `template`, `instantiate`) through `viss build`, answered
//! by the in-process MOCK OpenAI-compatible server (the network boundary; everything else is
//! real): goals kept, rewritten and dropped with their reasons, a scenario that is not an
//! AgentSense scenario flagged rather than failed, and prompt edits that re-run only the stage
//! that renders the prompt and what reads its answers.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use viss::llm::mock_server::{BackgroundMockServer, MockReply};

use crate::common;
use crate::llm_stages::{counts, text, viss};
use common::mock_llm::{digest, ran, step_of};

/// A kitchen scene in which Ada and Ben both speak at length, then a hallway scene in which only
/// Ada does: Ben says one line, so it has one character with goals and is no AgentSense scenario.
const SCRIPT: &str = "[Scene: A kitchen, early morning. Ada and Ben.]\n\
Ada: You took the van again.\nBen: I brought it back.\nAda: With no fuel in it.\nBen: There was \
some fuel.\nAda: The light was on the whole way.\nBen: Then it was nearly some fuel.\n\
Ada: I have a delivery at nine.\nBen: I can drive you.\nAda: In what?\nBen: In the van, after I \
fill it.\nAda: With whose money?\nBen: Yours, I suppose.\n\
\n[Scene: The hallway. Ada and Ben.]\n\
Ada: Where are my keys?\nAda: They were on the hook.\nAda: Someone moved them.\nAda: Not the \
cat, surely.\nAda: The cat cannot reach the hook.\nBen: Check your coat.\nAda: I checked my \
coat.\nAda: Twice.\nAda: Wait, here they are.\nAda: In my coat.\n";

/// The goals step's answer for the kitchen: Ada's first draft kept, her second too abstract and
/// rewritten, her third a physical action and dropped; Ben's kept.
fn goals_answer(body: &Value) -> Value {
    json!({
        "background": format!("Ada and Ben share a flat on Harbour Street and a delivery van \
                               (v{}). Ada has a delivery at nine and the van came back with an \
                               empty tank.",
                              digest(body)),
        "domain": "personal_domain",
        "roles": [
            {"name": "Ada", "goals": [
                {"draft": "To get Ben to pay for the fuel he used.", "issue": "none",
                 "goal": "To get Ben to pay for the fuel he used.",
                 "category": "conflict_resolution"},
                {"draft": "To be treated fairly in life.", "issue": "too_abstract",
                 "goal": "To make Ben agree to a rule for using the van.",
                 "category": "cooperation"},
                {"draft": "To fill the tank herself.", "issue": "physical_action",
                 "goal": "", "category": "cooperation"}
            ]},
            {"name": "Ben", "goals": [
                {"draft": "To keep Ada from staying angry with him.", "issue": "none",
                 "goal": "To keep Ada from staying angry with him.",
                 "category": "relationship_maintenance"}
            ]}
        ]
    })
}

fn private_info_answer() -> Value {
    json!({
        "involves_private_info": true,
        "roles": [
            {"name": "Ada", "questions": []},
            {"name": "Ben", "questions": [{
                "question": "Where did Ben drive the van last night?",
                "answer": "to his cousin's party",
                "private_info": "Ben drove the van to his cousin's party last night.",
                "wrong_options": ["to the airport", "to a late shift", "to the coast"]
            }]}
        ]
    })
}

/// The scripted annotator for every step before `goals` (their descriptors' examples), and the
/// answers above for the AgentSense steps (the goals' background carries the prompt's digest,
/// so a goals prompt edit changes the answer); with `refuse_first`, the first `goals` request
/// gets a goal that is not in the infinitive, which the stage must send back.
fn mock(refuse_first: bool) -> (BackgroundMockServer, Arc<AtomicUsize>) {
    mock_anonymizing(refuse_first, true, true)
}

/// [`mock`], with Ada and Ben `relationship` to each other instead of friends.
fn mock_related(relationship: &'static str) -> BackgroundMockServer {
    mock_scripted(false, true, true, relationship).0
}

/// [`mock`], whose anonymizer never replaces the street when `fixes` is false, and whose every
/// cast is impossible when `casts_possible` is false.
fn mock_anonymizing(
    refuse_first: bool,
    fixes: bool,
    casts_possible: bool,
) -> (BackgroundMockServer, Arc<AtomicUsize>) {
    mock_scripted(refuse_first, fixes, casts_possible, "friend")
}

/// The replies a test puts before the scripted ones: `None` leaves a request to them.
type Override = Box<dyn Fn(&Value) -> Option<MockReply> + Send + Sync>;

/// [`mock_anonymizing`], whose relationships step makes every pair `relationship`.
fn mock_scripted(
    refuse_first: bool,
    fixes: bool,
    casts_possible: bool,
    relationship: &'static str,
) -> (BackgroundMockServer, Arc<AtomicUsize>) {
    mock_overridden(
        refuse_first,
        fixes,
        casts_possible,
        relationship,
        Box::new(|_| None),
    )
}

/// [`mock_scripted`], with `first` answering whatever it takes.
fn mock_overridden(
    refuse_first: bool,
    fixes: bool,
    casts_possible: bool,
    relationship: &'static str,
    first: Override,
) -> (BackgroundMockServer, Arc<AtomicUsize>) {
    let goals_asked = Arc::new(AtomicUsize::new(0));
    let asked = goals_asked.clone();
    let anonymize_asked = AtomicUsize::new(0);
    let instantiate_asked = AtomicUsize::new(0);
    let mock = BackgroundMockServer::start(move |_, body| {
        if let Some(reply) = first(body) {
            return reply;
        }
        let answer = match step_of(body).as_str() {
            "goals" => {
                let mut answer = goals_answer(body);
                if asked.fetch_add(1, Ordering::SeqCst) == 0 && refuse_first {
                    answer["roles"][1]["goals"][0]["draft"] = json!("Ben wants peace.");
                    answer["roles"][1]["goals"][0]["goal"] = json!("Ben wants peace.");
                    // Cleo is one of the show's characters, and not in the kitchen.
                    answer["roles"][0]["goals"][0]["draft"] = json!("To get Cleo to pay.");
                    answer["roles"][0]["goals"][0]["goal"] = json!("To get Cleo to pay.");
                }
                answer
            }
            "private_info" => private_info_answer(),
            // The street is one of the show's places: an answer that leaves it in the template
            // is sent back.
            "anonymize" if !fixes || anonymize_asked.fetch_add(1, Ordering::SeqCst) == 0 => {
                json!({"replacements": []})
            }
            "anonymize" => json!({"replacements": [
                {"original": "Harbour Street", "kind": "place", "revised": "a quiet street"}
            ]}),
            // The first cast asked for is impossible (a friend of 95 where the scene allows 20
            // to 49); every other is a cast of two named after the request's seed.
            "instantiate"
                if !casts_possible || instantiate_asked.fetch_add(1, Ordering::SeqCst) == 0 =>
            {
                cast_answer(body, Some(95))
            }
            "instantiate" => cast_answer(body, None),
            "relationships" => {
                let mut answer = viss::bench::scripted::annotation_answer(body, &|_| "unknown");
                for role in answer["roles"].as_array_mut().unwrap() {
                    for pair in role["relationships"].as_array_mut().unwrap() {
                        pair["relationship"] = json!(relationship);
                    }
                }
                answer
            }
            _ => viss::bench::scripted::annotation_answer(body, &|_| "unknown"),
        };
        MockReply::answer(&answer.to_string())
    });
    (mock, goals_asked)
}

/// The scripted model's cast for the kitchen (it keeps the rules the prompt states, names drawn
/// from the request's seed), with r1 aged `age` when given: an impossible cast.
fn cast_answer(body: &Value, age: Option<u64>) -> Value {
    let mut cast = viss::bench::scripted::annotation_answer(body, &|_| "unknown");
    // Each character's own public information and secret, so a prompt shows whose it holds.
    let lives = [
        (
            "Sings in a choir on Sundays.",
            "Failed a driving test three times.",
        ),
        (
            "Runs before work every day.",
            "Forgot a sister's wedding anniversary.",
        ),
    ];
    for (character, (public, secret)) in cast["characters"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip(lives)
    {
        character["public_info"] = json!(public);
        character["secret"] = json!(secret);
    }
    if let Some(age) = age {
        cast["characters"][0]["age"] = json!(age);
    }
    cast
}

struct Project {
    _temp: tempfile::TempDir,
    root: PathBuf,
}

impl Project {
    fn new(base_url: &str) -> Self {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("p");
        assert!(
            Command::new(env!("CARGO_BIN_EXE_viss"))
                .arg("init")
                .arg(&root)
                .status()
                .unwrap()
                .success()
        );
        std::fs::create_dir_all(root.join("raw/van")).unwrap();
        std::fs::write(root.join("raw/van/e1.txt"), SCRIPT).unwrap();
        std::fs::write(
            root.join("manifests/shows/van.toml"),
            concat!(
                "license = \"test text written for viss\"\n",
                "places = [\"Harbour Street\"]\n\n",
                "[[characters]]\nname = \"Cleo Marsh\"\naliases = [\"Cleo\"]\n\n",
                "[[episodes]]\nid = \"e1\"\nscript = \"van/e1.txt\"\n",
            ),
        )
        .unwrap();
        let config = std::fs::read_to_string(root.join("viss.toml"))
            .unwrap()
            .replace("annotator = \"local\"", "annotator = \"mock:mock-model\"")
            .replace("agents = [\"local\"]", "agents = [\"mock:mock-model\"]");
        let config = format!(
            "{config}\n[llm.endpoints.mock]\nbase_url = \"{base_url}\"\ntimeout_seconds = \
             2\nmax_retries = 3\nretry_backoff_seconds = 0.01\n"
        );
        std::fs::write(root.join("viss.toml"), config).unwrap();
        Self { _temp: temp, root }
    }

    fn build(&self) -> (Output, Value) {
        let output = viss(&self.root, &["build", "--until", "instantiate", "--json"]);
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output, report)
    }

    fn scenarios(&self) -> Vec<String> {
        common::scenario_ids(&self.root, "van/e1")
    }

    fn show(&self, stage: &str, item: &str) -> Output {
        viss(&self.root, &["show", stage, item, stage])
    }

    fn record(&self, stage: &str, item: &str) -> Value {
        self.record_named(stage, item, stage)
    }

    fn record_named(&self, stage: &str, item: &str, output: &str) -> Value {
        let output = viss(&self.root, &["show", stage, item, output]);
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    }

    /// Replaces `from` with `to` in the project's `file`, which must hold it.
    fn set(&self, file: &str, from: &str, to: &str) {
        let path = self.root.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file}: {text}");
        std::fs::write(&path, text.replace(from, to)).unwrap();
    }

    fn append(&self, file: &str, line: &str) {
        let path = self.root.join(file);
        let text = std::fs::read_to_string(&path).unwrap() + line;
        std::fs::write(path, text).unwrap();
    }
}

#[test]
fn mock_server_goals_kept_rewritten_dropped_with_reasons_and_a_one_speaker_scene_flagged() {
    let (mock, goals_asked) = mock(true);
    let project = Project::new(&mock.server().base_url);
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    let [kitchen, hallway] = <[String; 2]>::try_from(project.scenarios()).unwrap();

    // Asked for the kitchen only, twice: the first answer's goal was sent back.
    assert_eq!(ran(&report, "goals"), 2, "{report}");
    assert_eq!(goals_asked.load(Ordering::SeqCst), 2);
    assert_eq!(counts(&report, "goals")["failed"], 0, "{report}");
    let goals = project.record("goals", &kitchen);
    assert_eq!(goals["scenario"], kitchen.as_str());
    let rejected = goals["rejected"].to_string();
    assert!(
        rejected.contains("Ben: goal 1 (\\\"Ben wants peace.\\\") is not in the infinitive"),
        "{rejected}"
    );
    // The show's characters reach the checks: a goal that brings in one who is absent is sent
    // back.
    assert!(
        rejected.contains("Ada: goals mentions Cleo, who is not in this scene"),
        "{rejected}"
    );
    let ada = &goals["answer"]["roles"][0]["goals"];
    let kept_issue_goal: Vec<(&str, &str)> = ada
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["issue"].as_str().unwrap(), g["goal"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kept_issue_goal,
        [
            ("none", "To get Ben to pay for the fuel he used."),
            (
                "too_abstract",
                "To make Ben agree to a rule for using the van."
            ),
            ("physical_action", ""),
        ]
    );
    assert_eq!(goals["answer"]["domain"], "personal_domain");

    // The hallway has one character with two lines: no goals, nothing asked, flagged with why.
    let missing = project.show("goals", &hallway);
    assert!(!missing.status.success());
    let status = text(&viss(&project.root, &["status"]));
    assert!(
        status.contains("not an AgentSense scenario: 1 of its characters speak at least 2 lines"),
        "{status}"
    );
    assert!(
        status.contains("not an AgentSense scenario: it has no goals"),
        "{status}"
    );

    // private_info reads the goals: asked once, for the kitchen.
    assert_eq!(ran(&report, "private_info"), 2, "{report}");
    let info = project.record("private_info", &kitchen);
    assert_eq!(info["answer"]["involves_private_info"], true);
    let question = &info["answer"]["roles"][1]["questions"][0];
    assert_eq!(question["answer"], "to his cousin's party");
    assert_eq!(question["wrong_options"].as_array().unwrap().len(), 3);
    let private_info_requests = (0..mock.server().request_count())
        .filter(|&i| step_of(&mock.server().body(i)) == "private_info")
        .count();
    assert_eq!(private_info_requests, 1);

    // The template: the street the first answer left in is sent back, and the record keeps
    // every replacement, original -> revised.
    let anonymization = project.record_named("anonymize", &kitchen, "anonymization");
    let rejected = anonymization["rejected"].to_string();
    assert!(
        rejected.contains("the background still holds \\\"Harbour Street\\\""),
        "{rejected}"
    );
    assert_eq!(
        anonymization["answer"]["replacements"],
        json!([{"original": "Harbour Street", "kind": "place", "revised": "a quiet street"}])
    );
    assert!(!project.show("anonymize", &hallway).status.success());

    // The four-option question: the right answer once among four, the place drawn and
    // counted over the benchmark.
    let choices = project.record_named("questions", "benchmark", &format!("choices@{kitchen}"));
    let question = &choices["questions"][0];
    assert_eq!(question["role"], "r2");
    let mut order: Vec<u64> = question["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap())
        .collect();
    order.sort_unstable();
    assert_eq!(order, [0, 1, 2, 3]);
    let positions = project.record_named("questions", "benchmark", "positions");
    let counted: u64 = positions["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(counted, 1);

    // The template a person opens: the street replaced, the participants as slots, the
    // question's four options with the right one at its letter, and its likeness to the
    // source.
    let template = project.record("template", &kitchen);
    let background = template["template"]["background"].as_str().unwrap();
    assert!(
        background.starts_with("{r1} and {r2} share a flat on a quiet street"),
        "{background}"
    );
    assert!(!background.contains("Harbour"), "{background}");
    let choice = &template["choices"][0];
    let letter = choice["answer"].as_str().unwrap();
    let at = usize::from(letter.as_bytes()[0] - b'A');
    assert_eq!(choice["options"][at], "to his cousin's party");
    assert_eq!(
        choice["question"],
        "Where did {r2} drive the van last night?"
    );
    let leakage = text(&viss(&project.root, &["check", "leakage"]));
    assert!(leakage.contains(&kitchen), "{leakage}");
    assert!(leakage.contains("1 template(s)"), "{leakage}");
    assert!(!project.show("template", &hallway).status.success());
    let status = text(&viss(&project.root, &["status", "--json"]));
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        counts(&status["plan"], "template")["blocked"],
        0,
        "{status}"
    );

    // Five casts for the kitchen, each checked against the rules: the impossible first one
    // was sent back naming the rule.
    let instances = project.record_named("instantiate", &kitchen, "instances");
    let casts = instances["instances"].as_array().unwrap();
    assert_eq!(casts.len(), 5);
    let rejected = casts[0]["rejected"].to_string();
    assert!(
        rejected.contains("r1: is 95 but must be 20 to 49 years old"),
        "{rejected}"
    );
    assert_eq!(instances["pairs"][0]["relationship"], "friend");
    assert_eq!(casts[0]["sees"][0][2], "all_but_secret");
    assert!(!project.show("instantiate", &hallway).status.success());

    // Relationships, read from both sides, for the kitchen only.
    let relationships = project.record("relationships", &kitchen);
    assert_eq!(
        relationships["answer"]["roles"][0]["relationships"][0]["other"],
        "Ben"
    );
    assert!(!project.show("relationships", &hallway).status.success());

    // Warm: nothing runs.
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    let again: u64 = [
        "goals",
        "private_info",
        "anonymize",
        "questions",
        "relationships",
    ]
    .iter()
    .map(|stage| ran(&report, stage))
    .sum();
    assert_eq!(again, 0, "{report}");
}

#[test]
fn mock_server_goals_edit_reruns_goals_and_what_reads_them_private_info_edit_only_itself() {
    let (mock, _) = mock(false);
    let project = Project::new(&mock.server().base_url);
    let (output, _) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    let earlier = ["annotate", "describe"];

    project.append("prompts/private_info.j2", "\nKeep each question short.\n");
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "private_info"), 2, "{report}");
    assert_eq!(ran(&report, "goals"), 0, "{report}");
    // The answers are the same as before: the template is not made again.
    assert_eq!(ran(&report, "anonymize"), 0, "{report}");
    for stage in earlier {
        assert_eq!(ran(&report, stage), 0, "{stage}: {report}");
    }

    // goals asks again for the kitchen (the hallway has no goals to ask for) and its answer
    // changes, so what reads it runs again for the kitchen; the hallway's private_info, which
    // read no goals before and reads none now, stays as it was.
    let calls = mock.server().request_count();
    project.append(
        "prompts/goals.j2",
        "\nPrefer goals the dialogue states outright.\n",
    );
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "goals"), 2, "{report}");
    assert_eq!(ran(&report, "private_info"), 1, "{report}");
    assert_eq!(ran(&report, "anonymize"), 1, "{report}");
    assert_eq!(ran(&report, "relationships"), 1, "{report}");
    // The kitchen's template changed: its five casts are asked for again.
    assert_eq!(ran(&report, "instantiate"), 1, "{report}");
    // The kitchen's private information came back the same: its places stand.
    assert_eq!(ran(&report, "questions"), 0, "{report}");
    for stage in earlier {
        assert_eq!(ran(&report, stage), 0, "{stage}: {report}");
    }
    assert_eq!(mock.server().request_count(), calls + 4 + 5);
}

#[test]
fn mock_server_per_role_private_info_gives_no_role_a_question_once_the_scene_says_none() {
    // private_info asked one part at a time: the scene's part says the kitchen involves no
    // private information, so each role's part is asked in a schema that allows no question,
    // and the role answers with none, not re-asked.
    let scene_asked = Arc::new(AtomicUsize::new(0));
    let asked = scene_asked.clone();
    let (mock, _) = mock_overridden(
        false,
        true,
        true,
        "friend",
        Box::new(move |body| match step_of(body).as_str() {
            "private_info_scene" => {
                asked.fetch_add(1, Ordering::SeqCst);
                Some(MockReply::answer(
                    &json!({"involves_private_info": false}).to_string(),
                ))
            }
            "private_info_role" => {
                let schema = &body["response_format"]["json_schema"]["schema"];
                let name = schema["properties"]["name"]["enum"][0].clone();
                assert_eq!(
                    schema["properties"]["questions"]["maxItems"],
                    json!(0),
                    "{name}: {schema}"
                );
                Some(MockReply::answer(
                    &json!({"name": name, "questions": []}).to_string(),
                ))
            }
            _ => None,
        }),
    );
    let project = Project::new(&mock.server().base_url);
    project.set(
        "stages/private_info.toml",
        "max_tokens = 2048\n",
        "max_tokens = 2048\nper_role = true\n",
    );
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "private_info"), 2, "{report}");
    // The hallway has one goal holder: it is no AgentSense scenario and asks nothing.
    assert_eq!(scene_asked.load(Ordering::SeqCst), 1);
    let kitchen = &project.scenarios()[0];
    let record = project.record("private_info", kitchen);
    assert_eq!(record["answer"]["involves_private_info"], json!(false));
    for role in record["answer"]["roles"].as_array().unwrap() {
        assert_eq!(role["questions"], json!([]), "{record}");
    }
    assert_eq!(record["rejected"], json!([]), "{record}");
}

#[test]
fn mock_server_a_sixth_instance_leaves_the_five_untouched_and_asks_only_for_itself() {
    let (mock, _) = mock(false);
    let project = Project::new(&mock.server().base_url);
    let (output, _) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    let kitchen = project.scenarios().remove(0);
    let five = project.record_named("instantiate", &kitchen, "instances")["instances"].clone();
    let names: Vec<&Value> = five
        .as_array()
        .unwrap()
        .iter()
        .map(|cast| &cast["characters"][0]["first_name"])
        .collect();
    assert!(
        names.windows(2).any(|pair| pair[0] != pair[1]),
        "instances with other seeds differ: {names:?}"
    );

    let calls = mock.server().request_count();
    let config = project.root.join("stages/instantiate.toml");
    let text_before = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text_before.replace("instances = 5", "instances = 6"),
    )
    .unwrap();
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "instantiate"), 2, "{report}");
    // One new cast asked for; the five came back from the request memo as they were.
    assert_eq!(mock.server().request_count(), calls + 1);
    let six = project.record_named("instantiate", &kitchen, "instances")["instances"].clone();
    assert_eq!(six.as_array().unwrap().len(), 6);
    assert_eq!(six.as_array().unwrap()[..5], five.as_array().unwrap()[..]);
}

#[test]
fn mock_server_a_template_naming_a_place_of_the_show_and_an_impossible_cast_are_kept_flagged() {
    let (mock, _) = mock_anonymizing(false, false, false);
    let project = Project::new(&mock.server().base_url);
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(counts(&report, "anonymize")["failed"], 0, "{report}");
    let kitchen = project.scenarios().remove(0);
    let anonymization = project.record_named("anonymize", &kitchen, "anonymization");
    assert_eq!(anonymization["problems"][0]["kind"], "original_survives");
    // The template says what it rests on, for the export and a reviewer.
    let template = project.record("template", &kitchen);
    assert_eq!(template["flagged_upstream"], json!(["anonymize"]));
    // Every cast breaks the age rule the same way until its re-asks stop at the third identical
    // refusal: each instance is kept, flagged with the rule, and the scenario is not failed.
    assert_eq!(counts(&report, "instantiate")["failed"], 0, "{report}");
    let instances = project.record_named("instantiate", &kitchen, "instances");
    assert_eq!(instances["flagged_upstream"], json!(["anonymize"]));
    let casts = instances["instances"].as_array().unwrap();
    assert_eq!(casts.len(), 5);
    for cast in casts {
        assert_eq!(cast["characters"][0]["age"], 95, "{cast}");
        assert_eq!(cast["problems"][0]["kind"], "age_rule", "{cast}");
        let stalled = viss::llm::STALLED_AFTER as usize;
        assert_eq!(
            cast["rejected"].as_array().unwrap().len(),
            stalled,
            "{cast}"
        );
    }
    let status = text(&viss(&project.root, &["status"]));
    assert!(status.contains("instance i4: r1: is 95"), "{status}");
    let status = text(&viss(&project.root, &["status"]));
    assert!(
        status.contains("original_survives") || status.contains("Harbour Street"),
        "{status}"
    );
}

#[test]
fn mock_server_a_person_accepts_one_flagged_cast_and_rejects_another_and_the_export_follows() {
    let (mock, _) = mock_anonymizing(false, false, false);
    let project = Project::new(&mock.server().base_url);
    let (output, _) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    let kitchen = project.scenarios().remove(0);

    // The flagged template's answer first, then each flagged cast by itself: an edit of a cast
    // is refused, the first cast accepted, the second rejected, then the session ends.
    let session = crate::review::review(
        &project.root,
        &["anonymize", "instantiate", "--flagged", "--reviewer", "ana"],
        "a\n\ne\na\n\nr\nis 95 and a student\nq\n",
    );
    let shown = text(&session);
    assert!(session.status.success(), "{shown}");
    for heading in [
        format!("anonymize {kitchen}"),
        format!("instantiate {kitchen}/i0 (flagged: 2 problem(s))"),
        format!("instantiate {kitchen}/i1 (flagged: 2 problem(s))"),
    ] {
        assert!(shown.contains(&heading), "{heading} not shown: {shown}");
    }
    assert!(shown.contains(".age: 95"), "{shown}");
    assert!(
        shown.contains("a synthetic cast is accepted or rejected as a whole"),
        "{shown}"
    );
    let verdicts: Vec<Value> =
        std::fs::read_to_string(project.root.join("manifests/reviews/ana.jsonl"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
    let said: Vec<(&str, &str)> = verdicts
        .iter()
        .map(|v| (v["item"].as_str().unwrap(), v["verdict"].as_str().unwrap()))
        .collect();
    let (i0, i1) = (format!("{kitchen}/i0"), format!("{kitchen}/i1"));
    assert_eq!(
        said,
        [
            (kitchen.as_str(), "accept"),
            (i0.as_str(), "accept"),
            (i1.as_str(), "reject")
        ]
    );

    // The verdicts are inputs: the accepted template answer re-runs what rests on it, but no
    // cast is asked for again (each flagged cast's rejected answers are replayed: the same
    // casts, so the verdicts on them hold); the export takes the accepted cast and leaves out
    // the rejected one and the three nobody judged.
    let calls = mock.server().request_count();
    let (output, report) = project.build();
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(ran(&report, "instantiate"), 1, "{report}");
    assert_eq!(mock.server().request_count(), calls);
    let output = viss(&project.root, &["build", "--until", "export"]);
    assert!(output.status.success(), "{}", text(&output));
    let out = project.root.join("export");
    let exported = viss(&project.root, &["export", "--out", out.to_str().unwrap()]);
    assert!(exported.status.success(), "{}", text(&exported));
    let instances: Vec<Value> = std::fs::read_to_string(out.join("agentsense/instances.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert!(
        instances[0]["instance_id"]
            .as_str()
            .unwrap()
            .ends_with("-i0")
    );
    assert_eq!(instances[0]["characters"][0]["age"], 95);
    assert_eq!(instances[0]["problems"], json!([]));
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        card.contains("1 accepted, 1 rejected and left out"),
        "{card}"
    );
    assert!(
        card.contains(
            "flagged, left out unless `include_flagged`: instances whose cast breaks \
             age_gap_rule 3, age_rule 3\n"
        ),
        "{card}"
    );
}

#[test]
fn mock_server_export_writes_templates_instances_and_sotopia_profiles_that_sotopia_loads() {
    let (mock, _) = mock(false);
    let project = Project::new(&mock.server().base_url);
    let output = viss(&project.root, &["build", "--until", "export", "--json"]);
    assert!(output.status.success(), "{}", text(&output));
    let out = project.root.join("export");
    let exported = viss(&project.root, &["export", "--out", out.to_str().unwrap()]);
    assert!(exported.status.success(), "{}", text(&exported));
    let read = |file: &str| std::fs::read_to_string(out.join(file)).unwrap();
    let lines = |file: &str| -> Vec<Value> {
        read(file)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };

    // The kitchen is the one AgentSense scenario: one template, five instances.
    let templates = lines("agentsense/templates.jsonl");
    assert_eq!(templates.len(), 1);
    let template = &templates[0];
    let id = template["template_id"].as_str().unwrap();
    assert!(id.starts_with('t') && id.len() == 13, "{id}");
    let background = template["background"].as_str().unwrap();
    assert!(background.contains("{r1}"), "{background}");
    assert_eq!(template["slots"].as_array().unwrap().len(), 2);
    assert!(template["private_information"].as_bool().unwrap());
    // No name of the show, and no way back to it, in what the AgentSense files hold.
    for file in [
        "agentsense/templates.jsonl",
        "agentsense/instances.jsonl",
        "agentsense/scenarios.json",
        "sotopia/environment_profiles.jsonl",
        "sotopia/agent_profiles.jsonl",
    ] {
        let text = read(file);
        for original in ["Ada", "Ben", "Harbour Street", "van/e1"] {
            assert!(!text.contains(original), "{file} holds {original}: {text}");
        }
    }
    let instances = lines("agentsense/instances.jsonl");
    assert_eq!(instances.len(), 5);
    let first = &instances[0];
    assert_eq!(first["instance_id"], format!("{id}-i0"));
    let names: Vec<String> = first["characters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["first_name"].as_str().unwrap(),
                c["last_name"].as_str().unwrap()
            )
        })
        .collect();
    let filled = first["background"].as_str().unwrap();
    assert!(!filled.contains("{r"), "{filled}");
    assert!(filled.contains(&names[0]), "{filled} names {names:?}");
    let goal = first["characters"][0]["goals"][0]["goal"].as_str().unwrap();
    assert!(!goal.contains("{r"), "{goal}");
    assert_eq!(first["relationships"][0]["relationship"], "friend");
    assert_eq!(first["relationships"][0]["sees"], "all_but_secret");
    let scenarios: Value = serde_json::from_str(&read("agentsense/scenarios.json")).unwrap();
    assert_eq!(scenarios.as_array().unwrap().len(), 5);

    // The card declares both configs and says what they hold, leakage included.
    let card = read("README.md");
    for needle in [
        "config_name: \"templates\"",
        "config_name: \"instances\"",
        "- templates: 1 ",
        "- instances: 5 ",
        "goals by ERG class: ",
        "levenshtein",
        id,
        // The scripted model does not know the show, and answers A to every question.
        "script prediction: the show named for 0 of 1 template(s) (0.0%)",
        "of 1 question(s) answered right from the template alone",
    ] {
        assert!(card.contains(needle), "the card lacks {needle}:\n{card}");
    }

    let blind = project.record_named("blind_test", &project.scenarios()[0], "blind_test");
    assert_eq!(blind["answers"][0]["chosen"], "A", "{blind}");
    let right = blind["answers"][0]["right"].as_str().unwrap();
    let leakage = text(&viss(&project.root, &["check", "leakage"]));
    let expected = format!("blind test: {} of 1 question(s)", usize::from(right == "A"));
    assert!(leakage.contains(&expected), "{leakage}");
    assert!(
        leakage.contains("script prediction: the show named for 0 of 1"),
        "{leakage}"
    );

    // SOTOPIA reads its files with its own models; the datasets library reads the configs.
    let loaded = Command::new(common::test_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/python/load_agentsense.py"
        ))
        .arg(&out)
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", project.root.join("hf-home"))
        .env("HOME", project.root.join("home"))
        .output()
        .unwrap();
    assert!(loaded.status.success(), "{}", text(&loaded));
    let stdout = String::from_utf8_lossy(&loaded.stdout);
    let json_line = stdout.lines().last().unwrap_or_default();
    let loaded: Value = serde_json::from_str(json_line).unwrap();
    assert_eq!(loaded["agents"], 10, "{loaded}");
    assert_eq!(loaded["environments"], 5, "{loaded}");
    assert_eq!(loaded["combos"], 5, "{loaded}");
    assert_eq!(loaded["unpaired"], json!([]), "{loaded}");
    assert_eq!(loaded["goal_counts_match"], true, "{loaded}");
    let agent = &loaded["first_agent"];
    let character = &first["characters"][0];
    assert_eq!(agent["first_name"], character["first_name"]);
    assert_eq!(agent["age"], character["age"]);
    let (gender, pronoun) = match character["gender"].as_str().unwrap() {
        "female" => ("Woman", "She/Her"),
        "male" => ("Man", "He/Him"),
        _ => ("Nonbinary", "They/Them"),
    };
    assert_eq!(agent["gender"], gender);
    assert_eq!(agent["gender_pronoun"], pronoun);
    assert!(
        agent["big_five"]
            .as_str()
            .unwrap()
            .starts_with("Openness to Experience - "),
        "{agent}"
    );
    let environment = &loaded["first_environment"];
    assert_eq!(environment["codename"], first["instance_id"]);
    assert_eq!(environment["scenario"], first["background"]);
    assert_eq!(environment["relationship"], "friend");
    assert_eq!(environment["age_constraint"], "[(20, 49), (20, 49)]");
    let goals = environment["agent_goals"][0].as_str().unwrap();
    assert!(goals.starts_with(goal), "{goals}");
    assert_eq!(loaded["template_rows"], 1);
    assert_eq!(loaded["instance_rows"], 5);
    assert_eq!(
        loaded["first_instance_names"][0],
        first["characters"][0]["first_name"]
    );

    // The AgentViSS records with anonymised names: the kitchen's characters take the first
    // cast's names, the show's street its stand-in; the hallway, with no cast, is left out.
    let config = project.root.join("stages/export.toml");
    let before = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        before.replace("anonymize_names = false", "anonymize_names = true"),
    )
    .unwrap();
    let exported = viss(
        &project.root,
        &["export", "--build", "--out", out.to_str().unwrap()],
    );
    assert!(exported.status.success(), "{}", text(&exported));
    let records = lines("data.jsonl");
    assert_eq!(records.len(), 1, "{records:?}");
    let record = records[0].to_string();
    for original in ["Ada", "Ben", "Harbour Street"] {
        assert!(!record.contains(original), "{record}");
    }
    assert_eq!(
        records[0]["roles"][0]["name"],
        names[0].as_str(),
        "{record}"
    );
    let card = read("README.md");
    assert!(
        card.contains("The records' names are anonymised")
            && card.contains("1 scenario(s) had no clean synthetic cast"),
        "{card}"
    );
}

/// The card's cost table: `| all | | answers | prompt tokens | completion tokens | cost |`.
fn card_total(card: &str) -> Vec<String> {
    let row = card
        .lines()
        .find(|line| line.starts_with("| all | |"))
        .unwrap_or_else(|| panic!("no cost total in the card:\n{card}"));
    row.split('|')
        .skip(3)
        .map(|cell| cell.trim().to_string())
        .collect()
}

#[test]
fn mock_server_the_card_says_what_each_stages_answers_cost_and_a_rebuild_from_the_cache_agrees() {
    let (mock, _) = mock(true);
    let project = Project::new(&mock.server().base_url);
    // $0.14 an answer: the mock bills 100 prompt and 20 completion tokens for each.
    project.append(
        "viss.toml",
        "[llm.endpoints.mock.prices.\"mock-model\"]\ninput_per_mtok = 1000.0\noutput_per_mtok \
         = 2000.0\n",
    );
    let export = |out: &str| {
        let built = viss(&project.root, &["build", "--until", "export", "--json"]);
        assert!(built.status.success(), "{}", text(&built));
        let out = project.root.join(out);
        let exported = viss(&project.root, &["export", "--out", out.to_str().unwrap()]);
        assert!(exported.status.success(), "{}", text(&exported));
        let report: Value = serde_json::from_slice(&built.stdout).unwrap();
        let read = |file: &str| std::fs::read_to_string(out.join(file)).unwrap();
        (
            report,
            read("README.md"),
            read("viss.lock"),
            text(&exported),
        )
    };

    // Every answer the build paid for is behind an exported record, at the price it was paid:
    // refused ones (the kitchen's first goals) included, and the one both scenes' vision
    // dependence rests on (the same request, answered once) counted once.
    let (report, card, lock, said) = export("first");
    let asked = mock.server().request_count();
    let spent = report["usage"]["cost_usd"].as_f64().unwrap();
    let summary = format!("{asked} model answer(s) behind it (${spent:.4})");
    assert!(said.contains(&summary), "{said}");
    assert_eq!(report["usage"]["llm_calls"], asked as u64, "{report}");
    assert_eq!(
        card_total(&card)[..4],
        [
            asked.to_string(),
            (100 * asked).to_string(),
            (20 * asked).to_string(),
            format!("{spent:.4}"),
        ],
        "{card}"
    );
    for stage in ["annotate", "tasks", "goals", "anonymize", "instantiate"] {
        assert!(
            card.contains(&format!("| `{stage}` | `mock:mock-model` | ")),
            "no cost of {stage}:\n{card}"
        );
    }

    // The index lost, the request cache kept: everything runs again and nothing is asked; the
    // card still says what the answers cost, and the dataset is the same to the byte.
    let store = project.root.join("artifacts/v3");
    std::fs::remove_dir_all(store.join("index")).unwrap();
    std::fs::remove_file(store.join("index.seal")).unwrap();
    let (report, again, lock_again, said) = export("again");
    assert_eq!(mock.server().request_count(), asked);
    assert!(said.contains(&summary), "{said}");
    assert_eq!(report["usage"]["llm_calls"], 0, "{report}");
    assert_eq!(again, card);
    assert_eq!(lock_again, lock);
}

#[test]
fn mock_server_agentsense_runs_take_turns_without_repeats_and_show_what_the_relationship_allows() {
    let mock = mock_related("acquaintance");
    let project = Project::new(&mock.server().base_url);
    let build = |args: &[&str]| {
        let output = viss(&project.root, args);
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    let report = build(&["build", "--until", "simulate_sense", "--json"]);
    let kitchen = project.scenarios().remove(0);
    // Five clean instances, one agent model, one replicate: five runs, of 15 turns each.
    assert_eq!(counts(&report, "simulate_sense")["ran"], 5, "{report}");
    let mut first_speakers = std::collections::BTreeSet::new();
    let mut traces = Vec::new();
    for index in 0..5 {
        let run = format!("{kitchen}/sense/i{index}/mock-model/r0");
        let trace = project.record_named("simulate_sense", &run, "sense_trace");
        let turns = trace["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 15, "{trace}");
        assert_eq!(trace["end"]["reason"], "rounds_done");
        for pair in turns.windows(2) {
            assert_ne!(pair[0]["speaker"], pair[1]["speaker"], "{trace}");
        }
        first_speakers.insert(turns[0]["speaker"].as_str().unwrap().to_string());
        traces.push(trace);
    }
    assert_eq!(
        first_speakers.len(),
        2,
        "each instance draws its own speakers"
    );

    // What each agent was told: its own profile and secret; of the other, an acquaintance,
    // the name, occupation and pronouns, and nothing else of the profile.
    let plan = project.record_named(
        "plan_sense_runs",
        &kitchen,
        &format!("sense_run@{kitchen}/sense/i0/mock-model/r0"),
    );
    let characters = plan["instance"]["characters"].as_array().unwrap();
    let background = plan["instance"]["background"].as_str().unwrap();
    let name = |c: &Value| {
        format!(
            "{} {}",
            c["first_name"].as_str().unwrap(),
            c["last_name"].as_str().unwrap()
        )
    };
    let server = mock.server();
    let prompts: Vec<String> = (0..server.request_count())
        .map(|index| server.body(index))
        .filter(|body| step_of(body) == "sense_turn")
        .map(|body| body["messages"].to_string())
        .collect();
    assert_eq!(prompts.len(), 75);
    for (me, other) in [
        (&characters[0], &characters[1]),
        (&characters[1], &characters[0]),
    ] {
        let told = prompts
            .iter()
            .find(|prompt| {
                prompt.contains(&format!("You are {}.", name(me))) && prompt.contains(background)
            })
            .unwrap_or_else(|| panic!("no turn of {} in {prompts:?}", name(me)));
        for known in [
            me["secret"].as_str().unwrap(),
            other["occupation"].as_str().unwrap(),
        ] {
            assert!(told.contains(known), "{known} not told: {told}");
        }
        assert!(told.contains("an acquaintance of yours"), "{told}");
        for hidden in [
            other["secret"].as_str().unwrap(),
            other["public_info"].as_str().unwrap(),
        ] {
            assert!(!told.contains(hidden), "{hidden} told: {told}");
        }
        let age = format!("{} years old", other["age"]);
        assert!(!told.contains(&age), "{age} told: {told}");
    }

    // `viss show` prints a run as a transcript: who played whom, then a line per turn.
    let run = format!("{kitchen}/sense/i0/mock-model/r0");
    let shown = viss(&project.root, &["show", "simulate_sense", &run]);
    assert!(shown.status.success(), "{}", text(&shown));
    let transcript = String::from_utf8(shown.stdout).unwrap();
    let first = &traces[0]["turns"][0];
    let speaker = characters
        .iter()
        .find(|c| c["slot"] == first["speaker"])
        .map(name)
        .unwrap();
    let line = format!("1. {speaker}: {}", first["argument"].as_str().unwrap());
    assert!(transcript.contains(&line), "{line:?} not in\n{transcript}");
    assert!(
        transcript.contains("ended after every round"),
        "{transcript}"
    );

    // A stopped or repeated build resumes from the request cache: nothing is asked again.
    let calls = server.request_count();
    let report = build(&["build", "--until", "simulate_sense", "--json"]);
    assert_eq!(ran(&report, "simulate_sense"), 0, "{report}");
    assert_eq!(server.request_count(), calls);
}

/// The AgentSense evaluation after the runs: every agent interviewed (its goals, the other's,
/// the question about the other's private information) and every judge asked; a judge that
/// answers "Yes, but no" where a boolean belongs is re-asked and its later answer counted, a
/// judge that only ever writes prose is recorded as missing, never as a no; and the report
/// shows the AgentSense tables.
#[test]
fn mock_server_agentsense_evaluation_reasks_prose_keeps_a_missing_judge_missing_and_reports() {
    // judge-a writes "Yes, but no" where a boolean belongs whenever it is first asked (the
    // question alone, no re-ask after it), and answers properly when re-asked.
    let first: Override = Box::new(move |body| {
        if step_of(body) != "evaluate_sense" {
            return None;
        }
        let first_ask = body["messages"].as_array().is_some_and(|m| m.len() == 2);
        match body["model"].as_str() {
            Some("judge-b") => Some(MockReply::answer("Yes, but no: they talked about it.")),
            Some("judge-a") if first_ask => {
                let mut answer = viss::bench::scripted::sense_evaluation_answer(body);
                answer["goals"]["g1"]["achieved"] = json!("Yes, but no");
                Some(MockReply::answer(&answer.to_string()))
            }
            _ => None,
        }
    });
    let (mock, _) = mock_overridden(false, true, true, "friend", first);
    let project = Project::new(&mock.server().base_url);
    project.set(
        "viss.toml",
        "judges = [\"local\"]",
        "judges = [\"mock:judge-a\", \"mock:judge-b\"]",
    );
    project.set("stages/simulate_sense.toml", "rounds = 15", "rounds = 4");
    project.set(
        "stages/plan_sense_runs.toml",
        "# instances = 1",
        "instances = 2",
    );
    let output = viss(
        &project.root,
        &["build", "--until", "evaluate_sense", "--json"],
    );
    assert!(output.status.success(), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(counts(&report, "evaluate_sense")["ran"], 2, "{report}");

    let kitchen = project.scenarios().remove(0);
    let run = format!("{kitchen}/sense/i0/mock-model/r0");
    let evaluation = project.record_named("evaluate_sense", &run, "sense_judgement");
    let plan = project.record_named("plan_sense_runs", &kitchen, &format!("sense_run@{run}"));
    // Ada's two goals and Ben's one, every perspective given.
    let goals = evaluation["goals"].as_array().unwrap();
    assert_eq!(goals.len(), 3, "{evaluation}");
    for goal in goals {
        assert!(goal["by_self"]["achieved"].is_boolean(), "{goal}");
        assert_eq!(goal["by_others"].as_array().unwrap().len(), 1, "{goal}");
        let judges = goal["by_judges"].as_array().unwrap();
        assert!(judges[0]["achieved"].is_boolean(), "{goal}");
        assert!(
            judges[1].is_null(),
            "the prose judge is missing, not a no: {goal}"
        );
    }
    // The judge that wrote "Yes, but no" was re-asked with why, and its next answer kept; the
    // prose judge is missing.
    let other = project.record_named(
        "evaluate_sense",
        &format!("{kitchen}/sense/i1/mock-model/r0"),
        "sense_judgement",
    );
    for judged in [&evaluation, &other] {
        let panel = judged["judges"].as_array().unwrap();
        let rejected = panel[0]["rejected"].as_array().unwrap();
        assert_eq!(rejected.len(), 1, "{judged}");
        assert!(
            rejected[0]["message"]
                .as_str()
                .unwrap()
                .contains("must be true or false"),
            "{rejected:?}"
        );
        assert!(panel[0]["failed"].is_null(), "{judged}");
        assert!(panel[1]["failed"].is_string(), "{judged}");
    }
    // Ben's private information is asked of Ada: she chose A, the stored right letter is kept.
    let questions = evaluation["questions"].as_array().unwrap();
    assert_eq!(questions.len(), 1, "{evaluation}");
    let ben = &plan["instance"]["characters"][1];
    assert_eq!(questions[0]["about"], ben["slot"]);
    assert_eq!(questions[0]["answers"][0]["chosen"], "A");
    assert_eq!(
        questions[0]["right"].as_str(),
        ben["questions"][0]["answer"].as_str()
    );
    // What Ada's agent was asked: the conversation, her goals as her own, Ben's as his, and the
    // question about what only Ben knew with its options in the stored order.
    let server = mock.server();
    let ada = &plan["instance"]["characters"][0];
    let ada_name = format!(
        "{} {}",
        ada["first_name"].as_str().unwrap(),
        ada["last_name"].as_str().unwrap()
    );
    let interview = (0..server.request_count())
        .map(|index| server.body(index))
        .filter(|body| step_of(body) == "evaluate_sense" && body["model"] == "mock-model")
        .map(|body| body["messages"].to_string())
        .find(|prompt| prompt.contains(&format!("You played {ada_name}")))
        .expect("Ada's interview");
    let options = ben["questions"][0]["options"].as_array().unwrap();
    for expected in [
        "Your own goals:".to_string(),
        format!("A. {}", options[0].as_str().unwrap()),
        format!("D. {}", options[3].as_str().unwrap()),
        "The other characters' goals:".to_string(),
    ] {
        assert!(
            interview.contains(&expected),
            "{expected} not in {interview}"
        );
    }

    // `viss status` tells the AgentSense runs and their judging as it tells AgentViSS's.
    let status = text(&viss(&project.root, &["status"]));
    for expected in [
        "AgentSense runs: 2 run(s) of 2 instance(s), 0 failed",
        "AgentSense evaluation: 2 run(s) judged, 0 failed",
    ] {
        assert!(status.contains(expected), "{expected} not in\n{status}");
    }
    let status: Value =
        serde_json::from_slice(&viss(&project.root, &["status", "--json"]).stdout).unwrap();
    assert_eq!(status["sense_runs"]["runs"], 2, "{status}");

    // The report has the AgentSense tables, each cell with its count.
    let output = viss(&project.root, &["report", "--json"]);
    assert!(output.status.success(), "{}", text(&output));
    let tables: Value = serde_json::from_str(
        &std::fs::read_to_string(project.root.join("report/tables.json")).unwrap(),
    )
    .unwrap();
    let table = |id: &str| -> Value {
        tables["scores"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {tables}"))
            .clone()
    };
    let completion = table("sense_goal_completion");
    assert_eq!(
        completion["columns"],
        json!(["self", "others", "judges (mean)", "judges (majority)"])
    );
    let judged = &completion["rows"][0]["cells"][2];
    assert_eq!(judged["counted"]["n"], 6, "{completion}");
    for id in [
        "sense_by_erg",
        "sense_psi",
        "sense_choice_accuracy",
        "sense_agreement",
    ] {
        table(id);
    }
    let markdown = std::fs::read_to_string(project.root.join("report/tables.md")).unwrap();
    assert!(markdown.contains("AgentSense: goal completion by perspective"));
    // The results as data: a row per run x goal x perspective, the missing judge's verdicts
    // null; a row per run x question x character asked.
    let rows: Vec<Value> = std::fs::read_to_string(project.root.join("report/sense_goals.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        rows.len(),
        2 * 3 * 4,
        "two runs, three goals, self + other + two judges"
    );
    for row in &rows {
        let missing = row["by"] == "judge2";
        assert_eq!(row["achieved"].is_null(), missing, "{row}");
    }
    let questions =
        std::fs::read_to_string(project.root.join("report/sense_questions.jsonl")).unwrap();
    assert_eq!(questions.lines().count(), 2, "{questions}");
    assert!(project.root.join("report/sense_goals.parquet").is_file());

    // The same results as two configs of the Hugging Face dataset, as `datasets` loads them.
    let built = viss(&project.root, &["build", "--until", "export"]);
    assert!(built.status.success(), "{}", text(&built));
    let exported = viss(&project.root, &["export", "--sense-results"]);
    assert!(exported.status.success(), "{}", text(&exported));
    let loaded = Command::new(common::test_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/python/load_sense_results.py"
        ))
        .arg(project.root.join("export"))
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", project.root.join("hf-home"))
        .output()
        .unwrap();
    assert!(loaded.status.success(), "{}", text(&loaded));
    let read: Value = serde_json::from_slice(&loaded.stdout).unwrap();
    assert_eq!(read["goal_rows"], 24, "{read}");
    assert_eq!(read["perspectives"], json!(["judge", "other", "self"]));
    assert_eq!(
        read["missing_verdicts"], 6,
        "judge2's six verdicts are missing: {read}"
    );
    assert_eq!(read["question_rows"], 2);
    assert_eq!(
        read["correct"],
        json!([true, true]),
        "A is right and chosen: {read}"
    );

    // The page shows the AgentSense tables in a real browser, without a console error.
    let page = crate::common::browser::open(&project.root.join("report/index.html"), (1200, 5000));
    assert!(page.console.is_empty(), "{:?}", page.console);
    for table in tables["scores"].as_array().unwrap() {
        if table["id"].as_str().unwrap().starts_with("sense_") {
            let title = table["title"].as_str().unwrap();
            assert!(page.dom.contains(title), "{title} not on the page");
        }
    }
    assert!(
        page.dom.contains("n=6 goals"),
        "counts shown with what they count"
    );

    // A changed judge prompt re-asks the evaluation and nothing before it.
    project.append("prompts/evaluate_sense_judge.j2", "\nJudge strictly.\n");
    let output = viss(
        &project.root,
        &["build", "--until", "evaluate_sense", "--json"],
    );
    assert!(output.status.success(), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(ran(&report, "evaluate_sense"), 2, "{report}");
    for stage in ["instantiate", "plan_sense_runs", "simulate_sense"] {
        assert_eq!(ran(&report, stage), 0, "{stage}: {report}");
    }
}

/// Cross-play of AgentSense runs: besides each model playing every character, each ordered
/// pair of models gets a run per character with the focal model in it and the partner in the
/// others; each seat's turns are asked of its own model, and the report tables the pairs apart.
#[test]
fn mock_server_agentsense_cross_play_seats_the_focal_model_in_each_character_in_turn() {
    let mock = mock_related("friend");
    let project = Project::new(&mock.server().base_url);
    project.set(
        "viss.toml",
        "agents = [\"mock:mock-model\"]",
        "agents = [\"mock:mock-model\", \"mock:other-model\"]",
    );
    project.set(
        "viss.toml",
        "judges = [\"local\"]",
        "judges = [\"mock:judge-a\"]",
    );
    project.set("stages/simulate_sense.toml", "rounds = 15", "rounds = 3");
    project.set(
        "stages/plan_sense_runs.toml",
        "# instances = 1",
        "instances = 1",
    );
    project.set(
        "stages/plan_sense_runs.toml",
        "cross_play = false",
        "cross_play = true",
    );
    let output = viss(
        &project.root,
        &["build", "--until", "evaluate_sense", "--json"],
    );
    assert!(output.status.success(), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    // Two self-play runs and, per ordered pair (two) and character (two), a cross-play run.
    assert_eq!(counts(&report, "evaluate_sense")["ran"], 6, "{report}");

    let kitchen = project.scenarios().remove(0);
    let run = format!("{kitchen}/sense/i0/mock-model_vs_other-model_as_r2/r0");
    let trace = project.record_named("simulate_sense", &run, "sense_trace");
    let seats: Vec<(&str, &str)> = trace["cast"]
        .as_array()
        .unwrap()
        .iter()
        .map(|seat| {
            (
                seat["slot"].as_str().unwrap(),
                seat["model"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seats,
        [("r1", "mock:other-model"), ("r2", "mock:mock-model")],
        "{trace}"
    );
    // Each turn was asked of the model in the speaker's seat.
    let server = mock.server();
    let names: Vec<String> = trace["cast"]
        .as_array()
        .unwrap()
        .iter()
        .map(|seat| seat["name"].as_str().unwrap().to_string())
        .collect();
    for (name, model) in names.iter().zip(["other-model", "mock-model"]) {
        let asked_of: std::collections::BTreeSet<String> = (0..server.request_count())
            .map(|index| server.body(index))
            .filter(|body| {
                step_of(body) == "sense_turn"
                    && body["messages"][0]["content"]
                        .to_string()
                        .contains(&format!("You are {name}."))
            })
            .map(|body| body["model"].as_str().unwrap().to_string())
            .collect();
        assert!(asked_of.contains(model), "{name}: {asked_of:?}");
    }
    let evaluation = project.record_named("evaluate_sense", &run, "sense_judgement");
    assert_eq!(evaluation["focal"], "r2");

    let output = viss(&project.root, &["report"]);
    assert!(output.status.success(), "{}", text(&output));
    let tables: Value = serde_json::from_str(
        &std::fs::read_to_string(project.root.join("report/tables.json")).unwrap(),
    )
    .unwrap();
    let cross = tables["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "sense_cross_play")
        .unwrap_or_else(|| panic!("no cross-play table: {tables}"));
    let pairs: Vec<&Value> = cross["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| &row["label"])
        .collect();
    assert_eq!(
        pairs,
        [
            &json!(["mock:mock-model", "mock:other-model"]),
            &json!(["mock:other-model", "mock:mock-model"])
        ]
    );
    let completion = tables["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "sense_goal_completion")
        .unwrap();
    assert_eq!(
        completion["rows"].as_array().unwrap().len(),
        2,
        "self-play per model"
    );
}
