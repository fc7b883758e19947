//! Requests the service takes but may not mean what the caller thinks: each answer says what it
//! did not use and why, beside the reference's own shape.

use skill_runner_test_support as common;

use common::{TestServer, probe_skill};
use serde_json::json;

fn server() -> TestServer {
    TestServer::with_skills(
        &[probe_skill("probe", None), probe_skill("doc", Some(true))],
        &[],
    )
}

/// A field the create does not know is ignored, as the reference ignores it, and named with
/// the field it most looks like: in the answer of a create that worked, and beside `detail`
/// (its shape unchanged) of one that was refused.
#[tokio::test]
async fn unknown_create_fields_are_named_in_warnings() {
    let server = server();
    let (code, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "paramters": {}, "x-trace": 1}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["status"], "queued", "{created}");
    let warnings = created["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 2, "{created}");
    assert!(
        warnings[0].as_str().unwrap().contains(
            "'paramters' is not a field of this request and was ignored (did you mean 'parameter'?)"
        ),
        "{created}"
    );
    assert!(
        warnings[1].as_str().unwrap().contains("'x-trace'"),
        "{created}"
    );

    let (code, refused) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "inputs": {"text": "hi"}, "parameter": {}}),
        )
        .await;
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["detail"].is_string() || refused["detail"].is_object(),
        "{refused}"
    );
    assert!(
        refused["warnings"][0].as_str().unwrap().contains(
            "'inputs' is not a field of this request and was ignored (did you mean 'input'?)"
        ),
        "{refused}"
    );

    // A create without a slip carries no warnings at all.
    let (_, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "parameter": {"mode": "ok"}}),
        )
        .await;
    assert!(created.get("warnings").is_none(), "{created}");
}

/// A create for a skill with file inputs answers a status too: it waits, queued.
#[tokio::test]
async fn a_create_waiting_for_its_upload_answers_queued() {
    let server = server();
    let (code, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "doc", "parameter": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["status"], "queued", "{created}");
}

/// An upload to a request whose skill takes no files says so, not that it had one already.
#[tokio::test]
async fn an_upload_to_a_run_without_file_inputs_says_it_takes_none() {
    let server = server();
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    let (code, body) = server
        .upload_inputs(&rid, vec![("doc", b"x".as_slice())])
        .await;
    assert_eq!(code, 409, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("takes no upload"), "{detail}");
    assert!(!detail.contains("already received"), "{detail}");
}

/// A JSON body over the limit is 413 naming the limit.
#[tokio::test]
async fn a_body_over_the_limit_names_the_limit() {
    let server = server();
    let big = "a".repeat(3 << 20);
    let (code, body) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "input": {"text": big}}),
        )
        .await;
    assert_eq!(code, 413, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("2 MiB (2097152 bytes)"), "{detail}");
}

/// An engine name no engine has is the caller's slip: `ENGINE_UNKNOWN` with the engines there
/// are, not a limit of the skill.
#[tokio::test]
async fn an_unknown_engine_lists_the_engines() {
    let server = server();
    let (code, body) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "engine": "gemini2", "parameter": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["detail"]["code"], "ENGINE_UNKNOWN", "{body}");
    assert_eq!(body["detail"]["requested_engine"], "gemini2");
    let known = body["detail"]["known_engines"].as_array().unwrap();
    assert!(
        known.contains(&json!("codex")) && known.contains(&json!("script")),
        "{body}"
    );
    assert!(
        body["detail"]["message"]
            .as_str()
            .unwrap()
            .contains("skill 'probe' runs on codex"),
        "{body}"
    );
}

/// A method a route does not take is 405 with FastAPI's detail, the methods it takes beside it
/// and in `Allow`.
#[tokio::test]
async fn a_wrong_method_names_the_allowed_ones() {
    let server = server();
    let response = common::client()
        .delete(server.url("/v1/jobs"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    let allow = response.headers()["allow"].to_str().unwrap().to_owned();
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["detail"], "Method Not Allowed", "{body}");
    let allowed: Vec<&str> = body["allowed_methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(allowed.contains(&"POST"), "{body}");
    assert_eq!(allowed.join(","), allow.replace(' ', ""), "{body}");
}

/// `?wait=` makes a result (and a pending question) wait for a run under way; a bad value is
/// 422 naming it.
#[tokio::test]
async fn a_result_may_wait_for_the_run_to_end() {
    let server = server();
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "drip"}}))
        .await;
    let (code, result) = server.get(&format!("/v1/jobs/{rid}/result?wait=30")).await;
    assert_eq!(code, 200, "{result}");
    assert_eq!(result["result"]["status"], "success", "{result}");
    assert!(result["result"]["warnings"].is_array(), "{result}");

    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "sleep"}}))
        .await;
    let (code, body) = server.get(&format!("/v1/jobs/{rid}/result?wait=0.3")).await;
    assert_eq!(code, 404, "still running after the wait: {body}");
    for bad in ["-1", "121", "soon"] {
        let (code, body) = server
            .get(&format!("/v1/jobs/{rid}/result?wait={bad}"))
            .await;
        assert_eq!(code, 422, "{bad}: {body}");
        assert_eq!(body["detail"][0]["loc"], json!(["query", "wait"]), "{body}");
    }
    server
        .post_json(&format!("/v1/jobs/{rid}/cancel"), json!({}))
        .await;
}
