//! A client written against the reference's v0.7.9, driving the service with the request shapes
//! of its `docs/api_reference.md` (fields this service ignores included, such as `provider_id`
//! and `effort`): an interactive run answered through `interaction/reply` with an idempotency
//! key, read through the status, pending, FCMP history and result routes, then its debug bundle.
//! (The v0.7 temporary run is `jobs::a_temporary_run_goes_through_the_jobs_routes_as_v0_7_clients_send_it`.)

use skill_runner_test_support as common;

use common::{TestDirs, TestServer, copy_bundled_skills, unzip};
use serde_json::{Value, json};

#[tokio::test]
async fn an_interactive_run_answered_and_bundled_as_a_v0_7_client_does() {
    let dirs = TestDirs::new();
    copy_bundled_skills(&dirs.skills);
    let server = TestServer::start_with(dirs, &[]);

    // RunCreateRequest, as the reference documents it.
    let (code, created) = server
        .post_json(
            "/v1/jobs",
            json!({
                "skill_id": "pick-one",
                "engine": "script",
                "provider_id": null,
                "effort": "default",
                "input": {},
                "parameter": {},
                "runtime_options": {
                    "execution_mode": "interactive",
                    "interactive_auto_reply": false,
                    "interactive_reply_timeout_sec": 600,
                    "no_cache": true,
                },
            }),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["cache_hit"], false, "{created}");
    assert_eq!(created["status"], "queued", "{created}");
    let rid = created["request_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/jobs/{rid}");

    // RequestStatusResponse while the question waits.
    let waiting = server.wait_status(&path, &["waiting_user"]).await;
    assert_eq!(waiting["request_id"], rid.as_str());
    let interaction_id = waiting["pending_interaction_id"]
        .as_u64()
        .expect("pending id");
    assert_eq!(waiting["interaction_count"], 1, "{waiting}");
    assert_eq!(
        waiting["requested_execution_mode"], "interactive",
        "{waiting}"
    );
    assert_eq!(
        waiting["effective_execution_mode"], "interactive",
        "{waiting}"
    );
    assert_eq!(waiting["conversation_mode"], "multi_turn", "{waiting}");
    assert_eq!(waiting["interactive_auto_reply"], false, "{waiting}");
    assert_eq!(waiting["interactive_reply_timeout_sec"], 600, "{waiting}");
    assert_eq!(waiting["current_attempt"], 1, "{waiting}");

    // InteractionPendingResponse.
    let (code, pending) = server.get(&format!("{path}/interaction/pending")).await;
    assert_eq!(code, 200, "{pending}");
    assert_eq!(pending["status"], "waiting_user");
    let question = &pending["pending"];
    assert_eq!(question["interaction_id"], interaction_id, "{pending}");
    assert_eq!(question["kind"], "choose_one", "{pending}");
    assert!(question["prompt"].is_string(), "{pending}");
    assert!(question["options"].as_array().is_some_and(|o| o.len() > 1));

    // InteractionReplyRequest with its idempotency key; a retry of it is the same answer.
    let reply = json!({"interaction_id": interaction_id, "response": "green",
                       "idempotency_key": format!("req-{interaction_id}-reply-1")});
    for _ in 0..2 {
        let (code, replied) = server
            .post_json(&format!("{path}/interaction/reply"), reply.clone())
            .await;
        assert_eq!(code, 200, "{replied}");
        assert_eq!(
            replied,
            json!({"request_id": rid, "status": "queued", "accepted": true})
        );
    }
    let (code, refused) = server
        .post_json(
            &format!("{path}/interaction/reply"),
            json!({"interaction_id": interaction_id, "response": "red",
                   "idempotency_key": format!("req-{interaction_id}-reply-1")}),
        )
        .await;
    assert_eq!(code, 409, "the key answered otherwise: {refused}");

    let done = server.wait_job(&rid).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (_, result) = server.get(&format!("{path}/result")).await;
    assert_eq!(result["result"]["status"], "success", "{result}");
    assert_eq!(result["result"]["data"]["choice"], "green", "{result}");

    // FCMP history from a sequence number: the question, the reply, the end.
    let (code, history) = server
        .get(&format!("{path}/events/history?from_seq=1"))
        .await;
    assert_eq!(code, 200, "{history}");
    let events = history["events"].as_array().unwrap();
    for event in events {
        for field in [
            "protocol_version",
            "run_id",
            "seq",
            "ts",
            "type",
            "data",
            "meta",
        ] {
            assert!(!event[field].is_null(), "{field} in {event}");
        }
        assert_eq!(event["protocol_version"], "fcmp/1.0");
    }
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for wanted in ["user.input.required", "interaction.reply.accepted"] {
        assert!(types.contains(&wanted), "{wanted} in {types:?}");
    }
    let last = events.last().unwrap();
    assert_eq!(last["type"], "conversation.state.changed");
    assert_eq!(last["data"]["to"], "succeeded", "{last}");

    // The debug bundle, asked for without any runtime option.
    let (code, headers, zip) = server.get_bytes(&format!("{path}/bundle/debug")).await;
    assert_eq!(code, 200);
    assert_eq!(headers["content-type"], "application/zip");
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("run_bundle_debug.zip")
    );
    let files = unzip(&zip);
    for name in [
        "request.json",
        "logs/stdout.txt",
        "logs/stderr.txt",
        "result/result.json",
    ] {
        assert!(files.contains_key(name), "{name}: {:?}", files.keys());
    }
    let request: Value = serde_json::from_slice(&files["request.json"]).unwrap();
    assert_eq!(request["skill_id"], "pick-one", "{request}");
    let kept: Value = serde_json::from_slice(&files["result/result.json"]).unwrap();
    assert_eq!(kept["data"]["choice"], "green", "{kept}");
}
