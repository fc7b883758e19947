//! The README's quick start, through the API with the bundled skills: an inline-only skill that
//! one create runs to `succeeded`, one that takes an uploaded file, and one that asks a question.

use skill_runner_test_support as common;

use common::{TestDirs, TestServer, build_zip, copy_bundled_skills};
use serde_json::json;

fn server() -> TestServer {
    let dirs = TestDirs::new();
    copy_bundled_skills(&dirs.skills);
    TestServer::start_with(dirs, &[])
}

/// The README's quick start blocks, in order, as one script for the service at `url`.
fn readme_quick_start(url: &str) -> String {
    let readme = std::fs::read_to_string(common::repo_root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Quick start\n")
        .nth(1)
        .expect("a quick start");
    let section = section.split("\n## ").next().unwrap();
    let blocks: Vec<&str> = section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert!(blocks.len() >= 4, "{section}");
    blocks
        .concat()
        .replace("S=http://127.0.0.1:8000", &format!("S={url}"))
}

/// Pasted as a script, without a sleep added, the quick start runs each kind of skill to its
/// result: every read that must wait for the run says so itself (`?wait=`).
#[tokio::test]
async fn the_readme_quick_start_runs_pasted_as_a_script() {
    let server = server();
    let script = readme_quick_start(server.url("").trim_end_matches('/'));
    assert!(!script.contains("sleep"), "{script}");
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"greeting\":\"Hello, Ada!\""), "{stdout}");
    assert!(stdout.contains("\"word_count\":7"), "{stdout}");
    assert!(stdout.contains("\"status\":\"waiting_user\""), "{stdout}");
    assert!(stdout.contains("\"choice\":\"green\""), "{stdout}");
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("the"), "{report}");
}

#[tokio::test]
async fn one_create_runs_hello_to_its_greeting() {
    let server = server();
    let (status, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "hello", "input": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    let rid = created["request_id"].as_str().unwrap();
    assert_eq!(server.wait_job(rid).await["status"], "succeeded");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(
        result["result"]["data"]["greeting"], "Hello, Ada!",
        "{result}"
    );

    let (_, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "hello", "input": {"name": "Ada"}, "parameter": {"shout": true}}),
        )
        .await;
    let rid = created["request_id"].as_str().unwrap();
    server.wait_job(rid).await;
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["result"]["data"]["greeting"], "HELLO, ADA!");

    let (status, refused) = server
        .post_json("/v1/jobs", json!({"skill_id": "hello", "input": {}}))
        .await;
    assert_eq!(
        status, 400,
        "a missing name is refused at create: {refused}"
    );
}

#[tokio::test]
async fn text_stats_takes_an_uploaded_document() {
    let server = server();
    let (_, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "text-stats", "parameter": {"top_n": 2}}),
        )
        .await;
    let rid = created["request_id"].as_str().unwrap();
    let zip = build_zip(vec![(
        "document".into(),
        b"the cat and the hat\nthe end\n".to_vec(),
    )]);
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(zip).file_name("inputs.zip"),
    );
    let (status, uploaded) = server
        .post_form(&format!("/v1/jobs/{rid}/upload"), form)
        .await;
    assert_eq!(status, 200, "{uploaded}");
    assert_eq!(server.wait_job(rid).await["status"], "succeeded");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    let data = &result["result"]["data"];
    assert_eq!(data["word_count"], 7, "{result}");
    assert_eq!(data["top_words"][0], json!({"word": "the", "count": 3}));
}

#[tokio::test]
async fn pick_one_asks_and_reports_the_answer() {
    let server = server();
    let (_, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "pick-one", "runtime_options": {"execution_mode": "interactive"}}),
        )
        .await;
    let rid = created["request_id"].as_str().unwrap();
    server
        .wait_status(&format!("/v1/jobs/{rid}"), &["waiting_user"])
        .await;
    let (_, pending) = server
        .get(&format!("/v1/jobs/{rid}/interaction/pending"))
        .await;
    let question = &pending["pending"];
    assert_eq!(question["kind"], "choose_one", "{pending}");
    assert_eq!(
        question["options"][1],
        json!({"label": "green", "value": "green"})
    );
    let (status, replied) = server
        .post_json(
            &format!("/v1/jobs/{rid}/interaction/reply"),
            json!({"interaction_id": question["interaction_id"], "response": "green"}),
        )
        .await;
    assert_eq!(status, 200, "{replied}");
    assert_eq!(server.wait_job(rid).await["status"], "succeeded");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(
        result["result"]["data"],
        json!({"choice": "green", "asked": 1})
    );

    // In auto mode nobody can answer: it picks the first colour itself.
    let (_, created) = server
        .post_json("/v1/jobs", json!({"skill_id": "pick-one"}))
        .await;
    let rid = created["request_id"].as_str().unwrap();
    assert_eq!(server.wait_job(rid).await["status"], "succeeded");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(
        result["result"]["data"],
        json!({"choice": "red", "asked": 0})
    );
}
