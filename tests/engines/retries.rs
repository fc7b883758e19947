//! Retries of a real agent CLI's turns (codex) against a fake model that fails: a model
//! endpoint failing twice is tried again until it answers, with growing pauses; a failure
//! that cannot pass is not tried again; a rate limit with a short `Retry-After` is waited out
//! by the model door without costing an attempt.

use std::time::Duration;

use serde_json::{Value, json};
use skill_runner_test_support as common;
use skill_runner_types::clock::Timestamp;

use common::agents::{in_netns, server_for};
use common::{FakeModel, TestServer, report_skill};

const ANSWER: &str = "Done. {\"summary\": \"wrote it\", \"report\": \"r\"}";

async fn ended(server: &TestServer, rid: &str) -> Value {
    server
        .wait_status_within(
            &format!("/v1/jobs/{rid}"),
            &["succeeded", "failed", "canceled"],
            Duration::from_secs(180),
        )
        .await
}

/// When the fake model received each of codex's model calls (those offering tools).
async fn model_calls_at(fake: &FakeModel) -> Vec<Timestamp> {
    fake.requests()
        .await
        .iter()
        .filter(|r| r["path"].as_str().unwrap_or("").contains("/v1/responses"))
        .map(|r| {
            let ms = r["received_ms"].as_u64().unwrap();
            Timestamp::from(std::time::UNIX_EPOCH + Duration::from_millis(ms))
        })
        .collect()
}

fn at(value: &Value) -> Timestamp {
    Timestamp::parse(value.as_str().unwrap_or_else(|| panic!("{value}"))).unwrap()
}

#[tokio::test]
async fn a_failing_model_is_tried_again_until_it_answers() {
    if !in_netns(
        concat!(
            module_path!(),
            "::a_failing_model_is_tried_again_until_it_answers"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    fake.script(json!([
        {"error": 500, "message": "upstream exploded"},
        {"error": 500, "message": "upstream exploded"},
        {"text": ANSWER}
    ]))
    .await;
    let server = server_for("codex", &fake, &[report_skill("reporter")], &[]);
    let rid = server
        .create_job(
            json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"},
                           "retry": {"max_attempts": 3, "initial_delay_seconds": 1,
                                     "max_delay_seconds": 10}}),
        )
        .await;
    let status = ended(&server, &rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["current_attempt"], 3, "{status}");
    let retried = status["retried_attempts"].as_array().unwrap();
    assert_eq!(retried.len(), 2, "{status}");
    let mut pauses = Vec::new();
    for (n, attempt) in retried.iter().enumerate() {
        assert_eq!(attempt["attempt"], n + 1);
        assert_eq!(
            attempt["error"]["code"], "MODEL_ENDPOINT_ERROR",
            "{attempt}"
        );
        pauses.push(at(&attempt["next_attempt_at"]).duration_since(at(&attempt["failed_at"])));
    }
    // Doubling from 1 s, each drawn from the upper half of its doubling.
    assert!(
        (Duration::from_millis(500)..=Duration::from_secs(1)).contains(&pauses[0]),
        "{pauses:?}"
    );
    assert!(
        (Duration::from_secs(1)..=Duration::from_secs(2)).contains(&pauses[1]),
        "{pauses:?}"
    );
    assert!(pauses[0] <= pauses[1], "{pauses:?}");
    let calls = model_calls_at(&fake).await;
    assert_eq!(calls.len(), 3, "one model call per attempt: {calls:?}");
    for (n, attempt) in retried.iter().enumerate() {
        assert!(
            calls[n + 1] >= at(&attempt["next_attempt_at"]),
            "attempt {} started before its time",
            n + 2
        );
    }
}

#[tokio::test]
async fn an_answer_that_breaks_the_schema_is_not_tried_again() {
    if !in_netns(
        concat!(
            module_path!(),
            "::an_answer_that_breaks_the_schema_is_not_tried_again"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    fake.script(json!([{"text": "{\"summary\": 5}"}])).await;
    let server = server_for("codex", &fake, &[report_skill("reporter")], &[]);
    let rid = server
        .create_job(
            json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"},
                           "runtime_options": {"output_repair_rounds": 0},
                           "retry": {"max_attempts": 5, "initial_delay_seconds": 1}}),
        )
        .await;
    let status = ended(&server, &rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(status["current_attempt"], 1, "{status}");
    assert_eq!(status["retried_attempts"], json!([]), "{status}");
    assert_eq!(model_calls_at(&fake).await.len(), 1);
}

#[tokio::test]
async fn a_short_rate_limit_is_waited_out_without_an_attempt() {
    if !in_netns(
        concat!(
            module_path!(),
            "::a_short_rate_limit_is_waited_out_without_an_attempt"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    fake.script(json!([{"error": 429, "retry_after": 2}, {"text": ANSWER}]))
        .await;
    let server = server_for("codex", &fake, &[report_skill("reporter")], &[]);
    let rid = server
        .create_job(
            json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"},
                           "retry": {"max_attempts": 3}}),
        )
        .await;
    let status = ended(&server, &rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["current_attempt"], 1, "{status}");
    let calls = model_calls_at(&fake).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    let waited = calls[1].duration_since(calls[0]);
    assert!(
        waited >= Duration::from_secs(2),
        "sent again after {waited:?}"
    );
    let (_, log) = server
        .get(&format!(
            "/v1/management/runs/{rid}/file?path=logs/egress.jsonl"
        ))
        .await;
    assert!(log.to_string().contains("Retry-After"), "{log}");
}
