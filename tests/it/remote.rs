//! The shared cache on a real S3-compatible server: moto's S3 server (`moto[server]` from PyPI,
//! installed by scripts/setup.sh into the test environment), started by the test. The demo
//! show is built through its export by three projects on one bucket, its LLM steps answered by
//! the in-process MOCK OpenAI-compatible server (the network boundary).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use viss::export::lock::DatasetLock;
use viss::llm::mock_server::{BackgroundMockServer, MockReply};

use crate::common::{self, mock_llm::ran, text, viss_in_with_env};

/// The secret the builds are given; no file or output may show it.
const SECRET: &str = "viss-test-secret-4f1c9a27e05b";
const BUCKET: &str = "viss-cache";
/// The environment every build here is given: the bucket's credentials.
const CREDENTIALS: [(&str, &str); 2] = [
    ("AWS_ACCESS_KEY_ID", "viss-test-key"),
    ("AWS_SECRET_ACCESS_KEY", SECRET),
];

/// moto's S3 server on a free port of this machine, stopped when dropped.
struct S3Server {
    child: Child,
    port: u16,
}

impl S3Server {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let moto = common::test_python().with_file_name("moto_server");
        let child = Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; run scripts/setup.sh to install it",
                    moto.display()
                )
            });
        let server = Self { child, port };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "moto_server did not listen on port {port} within a minute"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Runs `code` in the test environment's Python with `s3`, a boto3 client of this server
    /// (moto's dependency: a real, signing S3 client).
    fn boto3(&self, code: &str) {
        let script = format!(
            "import boto3\ns3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', \
             aws_access_key_id='viss-test-key', aws_secret_access_key='other')\n{code}\n",
            self.endpoint()
        );
        let output = Command::new(common::test_python())
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A copy of the demo project without its store, its LLM steps answered by the mock at
/// `base_url`, sharing `s3://viss-cache/demo` on `s3`.
fn demo_sharing(base_url: &str, s3: &S3Server) -> (tempfile::TempDir, PathBuf) {
    demo_sharing_under(base_url, s3, "demo")
}

/// [`demo_sharing`] under another prefix of the bucket.
fn demo_sharing_under(base_url: &str, s3: &S3Server, prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let (temp, root) = common::demo::copy_without_store();
    let config = std::fs::read_to_string(root.join("viss.toml")).unwrap();
    let config = format!(
        "{}\n[llm.endpoints.mock]\nbase_url = \"{base_url}\"\ntimeout_seconds = 10\n\n\
         [remote]\nurl = \"s3://{BUCKET}/{prefix}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
         allow_http = true\n",
        config.replace("annotator = \"local\"", "annotator = \"mock:mock-model\""),
        s3.endpoint()
    );
    std::fs::write(root.join("viss.toml"), config).unwrap();
    (temp, root)
}

fn with_credentials(root: &Path, args: &[&str]) -> Output {
    let output = viss_in_with_env(root, args, &CREDENTIALS);
    let shown = text(&output);
    assert!(!shown.contains(SECRET), "viss {args:?} printed the secret");
    assert!(output.status.success(), "viss {args:?}: {shown}");
    output
}

/// Builds through the export and exports; returns the build's report and the lock.
fn build_and_export(root: &Path) -> (Value, DatasetLock) {
    let built = with_credentials(root, &["build", "--until", "export", "--json"]);
    let report: Value = serde_json::from_slice(&built.stdout).unwrap();
    with_credentials(root, &["export"]);
    let lock = std::fs::read_to_string(root.join("export/viss.lock")).unwrap();
    (report, DatasetLock::parse(&lock).unwrap())
}

fn total_ran(report: &Value) -> u64 {
    let stages = report["stages"].as_array().unwrap();
    stages.iter().map(|s| s[1]["ran"].as_u64().unwrap()).sum()
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
            {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn moto_s3_second_store_takes_all_shards_in_rounds_killed_shard_resumes_damaged_blob_rebuilt() {
    let s3 = S3Server::start();
    s3.boto3(&format!("s3.create_bucket(Bucket='{BUCKET}')"));
    let mock = BackgroundMockServer::start(|_, body| {
        MockReply::answer(&common::mock_llm::demo_answer(body).to_string())
    });
    let base_url = &mock.server().base_url;

    // The first project computes everything and shares it.
    let (_a_temp, a) = demo_sharing(base_url, &s3);
    let (first, first_lock) = build_and_export(&a);
    assert_eq!(ran(&first, "export"), 1, "{first}");
    let shared = &first["remote"];
    assert!(shared["actions_written"].as_u64().unwrap() > 0, "{first}");
    assert_eq!(shared["errors"], 0, "{first}");
    let asked = mock.server().request_count();
    assert!(asked > 0);

    // A second, on another store, computes nothing: every result and LLM answer is taken.
    let (_b_temp, b) = demo_sharing(base_url, &s3);
    let (second, second_lock) = build_and_export(&b);
    assert_eq!(total_ran(&second), 0, "{second}");
    assert!(second["remote"]["actions_found"].as_u64().unwrap() > 0);
    assert_eq!(
        mock.server().request_count(),
        asked,
        "no LLM request is made again"
    );
    assert_eq!(second_lock, first_lock);
    let status = with_credentials(&b, &["status", "--remote", "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    let describe = &status["stages"]["describe"];
    assert_eq!(describe["shared"], describe["results"], "{status}");
    assert!(
        status["holdings"]["memos"].as_u64().unwrap() > 0,
        "{status}"
    );

    // A blob damaged in the bucket is found out, deleted there and rebuilt, by that item
    // alone; the rebuilt result is shared again.
    let scenario = &common::scenario_ids(&a, "demo/s01e01")[0];
    let listing = with_credentials(&a, &["show", "describe", scenario]);
    let hash = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("description\t").map(str::to_string))
        .expect("describe's output is listed with its hash");
    s3.boto3(&format!(
        "s3.put_object(Bucket='{BUCKET}', Key='demo/blobs/{hash}', Body=b'damaged')"
    ));
    let (_c_temp, c) = demo_sharing(base_url, &s3);
    let (third, third_lock) = build_and_export(&c);
    assert_eq!(ran(&third, "describe"), 1, "{third}");
    assert_eq!(total_ran(&third), 1, "{third}");
    assert_eq!(third["remote"]["corrupt"], 1, "{third}");
    assert_eq!(
        mock.server().request_count(),
        asked,
        "its LLM answer is a shared memo"
    );
    assert_eq!(third_lock, first_lock);
    assert_eq!(third["remote"]["blobs_written"], 1, "{third}");
    let (_d_temp, d) = demo_sharing(base_url, &s3);
    let (fourth, fourth_lock) = build_and_export(&d);
    assert_eq!(
        total_ran(&fourth),
        0,
        "the rebuilt blob is shared again: {fourth}"
    );
    assert_eq!(fourth_lock, first_lock);

    // Shards: three machines in parallel, each on its own store, then the assembly, in rounds
    // (a shard cannot pass profile balancing, which needs every scenario); no item runs twice
    // across all of them, and the result is the single-machine build's, byte for byte.
    let machines: Vec<_> = (0..4)
        .map(|_| demo_sharing_under(base_url, &s3, "sharded"))
        .collect();
    let mut ran_by_stage = std::collections::BTreeMap::<String, u64>::new();
    let mut count = |report: &Value| {
        for stage in report["stages"].as_array().unwrap() {
            *ran_by_stage
                .entry(stage[0].as_str().unwrap().to_string())
                .or_default() += stage[1]["ran"].as_u64().unwrap();
        }
    };
    // The machine whose shard holds the demo's episode is killed mid-way through its first
    // try, once it has shared a few results; it runs again in round one.
    let busy = viss::dag::shard::shard_of(viss::dag::Level::Episode, "demo/s01e01", 3) as usize;
    let shard = format!("{busy}/3");
    let mut worker = Command::new(env!("CARGO_BIN_EXE_viss"))
        .args(["build", "--until", "export", "--shard", &shard])
        .current_dir(&machines[busy].1)
        .envs(CREDENTIALS)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let held = with_credentials(&machines[3].1, &["status", "--remote", "--json"]);
        let held: Value = serde_json::from_slice(&held.stdout).unwrap();
        if held["holdings"]["actions"].as_u64().unwrap() >= 5 {
            break;
        }
        assert!(
            worker.try_wait().unwrap().is_none(),
            "the worker finished before the kill"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the worker shared nothing"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    worker.kill().unwrap(); // SIGKILL
    worker.wait().unwrap();
    for round in 0..3 {
        let reports: Vec<Value> = std::thread::scope(|scope| {
            let shards: Vec<_> = (0..3)
                .map(|i| {
                    let root = &machines[i].1;
                    scope.spawn(move || {
                        let shard = format!("{i}/3");
                        let args = ["build", "--until", "export", "--shard", &shard, "--json"];
                        let built = with_credentials(root, &args);
                        serde_json::from_slice::<Value>(&built.stdout).unwrap()
                    })
                })
                .collect();
            shards.into_iter().map(|s| s.join().unwrap()).collect()
        });
        reports.iter().for_each(&mut count);
        let assembler = &machines[3].1;
        let args = ["build", "--until", "export", "--assemble", "--json"];
        let assembled = with_credentials(assembler, &args);
        let assembled: Value = serde_json::from_slice(&assembled.stdout).unwrap();
        count(&assembled);
        if round == 2 {
            assert_eq!(
                ran(&assembled, "export"),
                0,
                "assembled in an earlier round"
            );
        }
    }
    let (last, sharded_lock) = build_and_export(&machines[3].1);
    assert_eq!(
        total_ran(&last),
        0,
        "nothing is left for the unsharded build: {last}"
    );
    assert_eq!(sharded_lock, first_lock);
    // No item ran twice, and what the killed worker had committed was not run again.
    for (stage, runs) in &ran_by_stage {
        assert!(*runs <= ran(&first, stage), "{stage}: {ran_by_stage:?}");
    }
    assert!(
        ran_by_stage.values().sum::<u64>() < total_ran(&first),
        "{ran_by_stage:?}"
    );

    // The secret is in no file of any project.
    for root in [&a, &b, &c, &d]
        .into_iter()
        .chain(machines.iter().map(|m| &m.1))
    {
        assert_eq!(
            files_holding(root, SECRET.as_bytes()),
            Vec::<PathBuf>::new()
        );
    }
}

#[test]
fn kubernetes_jobs_rendered_by_run_rounds_pass_the_kubernetes_api_schemas_strictly() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kubernetes");
    let rendered = tempfile::tempdir().unwrap();
    let output = Command::new("bash")
        .arg(examples.join("run-rounds.sh"))
        .args(["4", "2", "export"])
        .env("RENDER_TO", rendered.path())
        .env("IMAGE", "registry.example.org/viss:test")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let mut jobs: Vec<PathBuf> = std::fs::read_dir(rendered.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    jobs.sort();
    // Two rounds of shards and an assembly each, then the final Job.
    assert_eq!(jobs.len(), 5, "{jobs:?}");
    let shards = jobs
        .iter()
        .find(|job| job.to_string_lossy().ends_with("-shards-1.yaml"))
        .unwrap();
    let shards = std::fs::read_to_string(shards).unwrap();
    assert!(shards.contains("completionMode: Indexed"), "{shards}");
    assert!(shards.contains("completions: 4"), "{shards}");
    assert!(
        shards.contains(r#"--shard "${JOB_COMPLETION_INDEX}/4""#),
        "{shards}"
    );
    let validator = common::test_python().with_file_name("kubernetes-validate");
    let output = Command::new(&validator)
        .arg("--strict")
        .args(&jobs)
        .arg(examples.join("secret.yaml"))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/setup.sh", validator.display()));
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(text(&output).matches("passed for resource").count(), 6);
}
