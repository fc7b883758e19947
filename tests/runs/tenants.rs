//! Tenants: keys made by the CLI and the API, each tenant's runs seen only through its own
//! keys (another tenant's are answered exactly as runs that do not exist, on every route that
//! names a run, through any node), roles refused what they may not do, a result cache per
//! tenant, keys revoked and expired shut out within two seconds on every node, no key kept in
//! clear, and an audit row for each administrative act.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skill_runner_test_support as common;

use common::{TestDirs, TestServer, build_zip};

/// A key as the API issued it.
#[derive(Debug, Clone)]
struct Key {
    id: String,
    secret: String,
}

/// One HTTP exchange as a given key (or none): status and body text. An event stream that
/// opens is not read.
async fn call(
    server: &TestServer,
    key: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Body>,
) -> (u16, String) {
    let client = common::client();
    let mut request = client.request(method.parse().unwrap(), server.url(path));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if path.starts_with("/ui/") {
        request = request.header("accept", "text/html");
    }
    request = match body {
        Some(Body::Json(value)) => request.json(&value),
        Some(Body::Zip(field, bytes)) => request.multipart(reqwest::multipart::Form::new().part(
            field,
            reqwest::multipart::Part::bytes(bytes).file_name("inputs.zip"),
        )),
        Some(Body::FileReply) => request.multipart(
            reqwest::multipart::Form::new()
                .text(
                    "metadata",
                    json!({"interaction_id": 1, "idempotency_key": "k",
                           "bindings": [{"slot": "file", "file_index": 0}]})
                    .to_string(),
                )
                .part(
                    "files",
                    reqwest::multipart::Part::bytes(b"x".to_vec()).file_name("a.txt"),
                ),
        ),
        None => request,
    };
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let streaming = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if streaming {
        return (status, String::new());
    }
    (status, response.text().await.unwrap())
}

#[derive(Debug, Clone)]
enum Body {
    Json(Value),
    /// A multipart form with one zip part.
    Zip(&'static str, Vec<u8>),
    /// A file answer's form: its metadata and one file.
    FileReply,
}

async fn json_as(
    server: &TestServer,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (status, text) = call(server, Some(key), method, path, body.map(Body::Json)).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn make_key(server: &TestServer, by: &str, tenant: &str, role: &str) -> Key {
    let (status, body) = json_as(
        server,
        by,
        "POST",
        &format!("/v1/management/tenants/{tenant}/keys"),
        Some(json!({"role": role, "name": format!("{role} of {tenant}")})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["role"], role);
    Key {
        id: body["key_id"].as_str().unwrap().to_owned(),
        secret: body["key"].as_str().unwrap().to_owned(),
    }
}

async fn make_tenant(server: &TestServer, admin: &str, name: &str) -> String {
    let (status, body) = json_as(
        server,
        admin,
        "POST",
        "/v1/management/tenants",
        Some(json!({"name": name})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["tenant_id"].as_str().unwrap().to_owned()
}

/// A tenant's secrets are its own: another tenant's operator lists none of them and gets 404
/// for each, as for a name that does not exist, through any node; a value is never shown.
async fn secrets_are_kept_apart(nodes: &[&TestServer], admin: &str, a: &str, b: &str) {
    let (first, last) = (nodes[0], nodes[nodes.len() - 1]);
    let a_operator = make_key(first, admin, a, "operator").await.secret;
    let b_operator = make_key(first, admin, b, "operator").await.secret;
    let a_submit = make_key(first, admin, a, "submit").await.secret;
    let secret = |value: &str| json!({"name": "T", "value": value, "hosts": ["api.example.com"]});
    let (status, body) = json_as(
        first,
        &a_operator,
        "POST",
        "/v1/management/secrets",
        Some(secret("value-of-a-1234")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tenant_id"], a);
    let (status, body) = json_as(last, &b_operator, "GET", "/v1/management/secrets", None).await;
    assert_eq!((status, body), (200, json!({"secrets": []})));
    for method in ["PUT", "DELETE"] {
        let (status, body) = json_as(
            last,
            &b_operator,
            method,
            "/v1/management/secrets/T",
            (method == "PUT").then(|| secret("value-of-b-0000")),
        )
        .await;
        assert_eq!(status, 404, "{method}: {body}");
    }
    let (status, _) = json_as(
        last,
        &b_operator,
        "GET",
        &format!("/v1/management/secrets?tenant_id={a}"),
        None,
    )
    .await;
    assert_eq!(
        status, 404,
        "another tenant is answered as one that does not exist"
    );
    let (status, body) = json_as(
        last,
        &b_operator,
        "POST",
        "/v1/management/secrets",
        Some(secret("value-of-b-5678")),
    )
    .await;
    assert_eq!(status, 200, "a name is per tenant: {body}");
    let (status, _) = json_as(
        first,
        &a_submit,
        "POST",
        "/v1/management/secrets",
        Some(secret("x-value")),
    )
    .await;
    assert_eq!(status, 403, "a submit key manages no secrets");
    let (_, every) = json_as(last, admin, "GET", "/v1/management/secrets", None).await;
    let owners: Vec<&str> = every["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tenant_id"].as_str().unwrap())
        .collect();
    assert_eq!(owners.len(), 2, "{every}");
    assert!(owners.contains(&a) && owners.contains(&b), "{every}");
    let (_, of_a) = json_as(
        last,
        admin,
        "GET",
        &format!("/v1/management/secrets?tenant_id={a}"),
        None,
    )
    .await;
    assert_eq!(of_a["secrets"][0]["last4"], "1234", "{of_a}");
    assert!(!every.to_string().contains("value-of"), "{every}");
    for (key, tenant) in [(&a_operator, a), (&b_operator, b)] {
        let (status, _) = json_as(first, key, "DELETE", "/v1/management/secrets/T", None).await;
        assert_eq!(status, 200, "{tenant}");
    }
    // Each change is an audit row naming the secret, never with its value.
    let (_, audit) = json_as(first, admin, "GET", "/v1/management/audit?limit=20", None).await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions.iter().filter(|a| **a == "secret.created").count(),
        2,
        "{audit}"
    );
    assert_eq!(
        actions.iter().filter(|a| **a == "secret.deleted").count(),
        2,
        "{audit}"
    );
    assert!(!audit.to_string().contains("value-of"), "{audit}");
}

/// A tenant's webhooks and schedules are its own: another tenant lists none of them and gets
/// 404 for each, as for an id that does not exist, through any node.
async fn webhooks_and_schedules_are_kept_apart(
    nodes: &[&TestServer],
    admin: &str,
    a: &str,
    b: &str,
) {
    let (first, last) = (nodes[0], nodes[nodes.len() - 1]);
    let a_operator = make_key(first, admin, a, "operator").await.secret;
    let b_operator = make_key(first, admin, b, "operator").await.secret;
    let (status, hook) = json_as(
        first,
        &a_operator,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": "https://93.184.215.14/hook", "events": ["run.failed"]})),
    )
    .await;
    assert_eq!(status, 200, "{hook}");
    let hook_id = hook["webhook_id"].as_str().unwrap();
    let (status, schedule) = json_as(
        first,
        &a_operator,
        "POST",
        "/v1/schedules",
        Some(json!({"skill_id": "text-stats", "input": {"text": "x"}, "cron": "0 0 1 1 *"})),
    )
    .await;
    assert_eq!(status, 200, "{schedule}");
    let schedule_id = schedule["schedule_id"].as_str().unwrap();
    let (_, listed) = json_as(last, &b_operator, "GET", "/v1/webhooks", None).await;
    assert_eq!(listed, json!({"webhooks": []}));
    let (_, listed) = json_as(last, &b_operator, "GET", "/v1/schedules", None).await;
    assert_eq!(listed, json!({"schedules": []}));
    for (method, path) in [
        ("DELETE", format!("/v1/webhooks/{hook_id}")),
        ("POST", format!("/v1/webhooks/{hook_id}/rotate")),
        ("GET", format!("/v1/webhooks/{hook_id}/deliveries")),
        (
            "POST",
            format!("/v1/webhooks/{hook_id}/deliveries/msg_x/redeliver"),
        ),
        ("GET", format!("/v1/schedules/{schedule_id}")),
        ("PATCH", format!("/v1/schedules/{schedule_id}")),
        ("DELETE", format!("/v1/schedules/{schedule_id}")),
        ("POST", format!("/v1/schedules/{schedule_id}/trigger")),
    ] {
        let body = (method != "GET" && method != "DELETE").then(|| json!({"paused": true}));
        let (status, answer) = json_as(last, &b_operator, method, &path, body).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
    }
    for path in [
        format!("/v1/webhooks/{hook_id}"),
        format!("/v1/schedules/{schedule_id}"),
    ] {
        let (status, _) = json_as(first, &a_operator, "DELETE", &path, None).await;
        assert_eq!(status, 200, "{path}");
    }
}

/// Polls a job's status as `key` until it is one of `wanted`.
async fn wait_as(server: &TestServer, key: &str, rid: &str, wanted: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = json_as(server, key, "GET", &format!("/v1/jobs/{rid}"), None).await;
        assert_eq!(status, 200, "{body}");
        if wanted.iter().any(|w| body["status"] == *w) {
            return body;
        }
        assert!(Instant::now() < deadline, "{rid} never reached {wanted:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls until `key` is refused with 401 on `server`; how long that took.
async fn refused_within(server: &TestServer, key: &str) -> Duration {
    let started = Instant::now();
    loop {
        let (status, _) = call(server, Some(key), "GET", "/v1/management/runs", None).await;
        if status == 401 {
            return started.elapsed();
        }
        assert_eq!(status, 200);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the key still opens the service"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The keys of one test: an admin, and a submit and a read key of tenants A and B.
struct Keys {
    admin: String,
    a_submit: Key,
    a_read: Key,
    b_submit: Key,
    b_read: Key,
    a_tenant: String,
}

/// Everything the test checks, through `nodes` (one, or two sharing a database); `stored`
/// gives the database's whole content as text.
async fn tenants_are_kept_apart(
    nodes: &[&TestServer],
    database: Option<&str>,
    stored: impl Fn() -> Vec<u8>,
) {
    let first = nodes[0];
    // Open until a key exists: then every request needs one.
    let (status, _) = call(first, None, "GET", "/v1/management/runs", None).await;
    assert_eq!(status, 200);
    let admin = first.first_key("admin", database).await;
    // Each node reads whether keys are in force at most once a second.
    for node in nodes {
        let started = Instant::now();
        while call(node, None, "GET", "/v1/management/runs", None).await.0 != 401 {
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "closed once a key is in force"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let a_tenant = make_tenant(first, &admin, "tenant-a").await;
    let b_tenant = make_tenant(first, &admin, "tenant-b").await;
    let keys = Keys {
        a_submit: make_key(first, &admin, &a_tenant, "submit").await,
        a_read: make_key(first, &admin, &a_tenant, "read").await,
        b_submit: make_key(first, &admin, &b_tenant, "submit").await,
        b_read: make_key(first, &admin, &b_tenant, "read").await,
        admin,
        a_tenant,
    };
    secrets_are_kept_apart(nodes, &keys.admin, &keys.a_tenant, &b_tenant).await;
    webhooks_and_schedules_are_kept_apart(nodes, &keys.admin, &keys.a_tenant, &b_tenant).await;

    // A's runs: one finished with an artifact and a unique input, one waiting for an answer,
    // one waiting for its upload.
    let marker = format!("marker-{}", std::process::id());
    let a = &keys.a_submit.secret;
    let (_, created) = json_as(
        first,
        a,
        "POST",
        "/v1/jobs",
        Some(
            json!({"skill_id": "text-stats", "input": {"text": marker}, "parameter": {"top_n": 2}}),
        ),
    )
    .await;
    let done = created["request_id"].as_str().unwrap().to_owned();
    let zip = build_zip(vec![("document".into(), marker.as_bytes().to_vec())]);
    let (status, body) = call(
        first,
        Some(a),
        "POST",
        &format!("/v1/jobs/{done}/upload"),
        Some(Body::Zip("file", zip.clone())),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done_status = wait_as(first, a, &done, &["succeeded"]).await;
    let (_, created) = json_as(
        first,
        a,
        "POST",
        "/v1/jobs",
        Some(json!({"skill_id": "pick-one",
                     "runtime_options": {"execution_mode": "interactive"}})),
    )
    .await;
    let asking = created["request_id"].as_str().unwrap().to_owned();
    wait_as(first, a, &asking, &["waiting_user"]).await;
    let (_, created) = json_as(
        first,
        a,
        "POST",
        "/v1/jobs",
        Some(json!({"skill_id": "text-stats", "input": {"text": "later"}})),
    )
    .await;
    let waiting = created["request_id"].as_str().unwrap().to_owned();
    let (_, files) = json_as(first, a, "GET", &format!("/v1/jobs/{done}/files"), None).await;
    let file = files["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["is_dir"] == false)
        .unwrap_or_else(|| panic!("a file in {files}"))["rel_path"]
        .as_str()
        .unwrap()
        .to_owned();

    // Every route that names a run: B's keys get what they get for an id that does not
    // exist; A's keys read what they may.
    let reads: Vec<(String, &str)> = [
        "/v1/jobs/{}",
        "/v1/jobs/{}/result",
        "/v1/jobs/{}/artifacts",
        "/v1/jobs/{}/artifacts/artifacts/report.md",
        "/v1/jobs/{}/bundle",
        "/v1/jobs/{}/bundle/debug",
        "/v1/jobs/{}/files",
        "/v1/jobs/{}/logs",
        "/v1/jobs/{}/logs/range?stream=stdout",
        "/v1/jobs/{}/events",
        "/v1/jobs/{}/events/history",
        "/v1/jobs/{}/chat",
        "/v1/jobs/{}/chat/history",
        "/v1/management/runs/{}",
        "/v1/management/runs/{}/files",
        "/v1/management/runs/{}/events",
        "/v1/management/runs/{}/events/history",
        "/v1/management/runs/{}/chat",
        "/v1/management/runs/{}/chat/history",
        "/ui/runs/{}",
        "/ui/management/runs/{}/view",
        "/ui/management/runs/{}/files",
        "/ui/runs/{}/logs/tail",
        "/ui/runs/{}/bundle",
    ]
    .into_iter()
    .map(|p| (p.replace("{}", &done), "done"))
    .chain(
        [
            format!("/v1/jobs/{done}/file?path={file}"),
            format!("/v1/management/runs/{done}/file?path={file}"),
            format!("/ui/runs/{done}/file?path={file}"),
        ]
        .into_iter()
        .map(|p| (p, "done")),
    )
    .chain(
        [
            "/v1/jobs/{}/interaction/pending",
            "/v1/management/runs/{}/pending",
            "/v1/jobs/{}/auth/session",
        ]
        .into_iter()
        .map(|p| (p.replace("{}", &asking), "asking")),
    )
    .collect();
    let reply = json!({"interaction_id": 1, "response": "green"});
    let writes: Vec<(&str, String, Option<Body>)> = vec![
        (
            "POST",
            format!("/v1/jobs/{waiting}/upload"),
            Some(Body::Zip("file", zip.clone())),
        ),
        (
            "POST",
            format!("/v1/jobs/{asking}/interaction/reply"),
            Some(Body::Json(reply.clone())),
        ),
        (
            "POST",
            format!("/v1/management/runs/{asking}/reply"),
            Some(Body::Json(reply.clone())),
        ),
        (
            "POST",
            format!("/v1/jobs/{asking}/interaction/reply/files"),
            Some(Body::FileReply),
        ),
        (
            "POST",
            format!("/v1/management/runs/{asking}/reply/files"),
            Some(Body::FileReply),
        ),
        ("POST", format!("/v1/jobs/{asking}/cancel"), None),
        ("POST", format!("/v1/management/runs/{asking}/cancel"), None),
        ("POST", format!("/ui/runs/{asking}/cancel"), None),
        ("POST", format!("/ui/runs/{done}/rerun"), None),
        (
            "POST",
            format!("/v1/jobs/{asking}/interaction/auth/import"),
            None,
        ),
    ];
    let unknown = |id: &str| format!("{}ffffffffffff", &id[..id.len() - 12]);
    let anonymised = |text: &str, ids: &[&str]| {
        ids.iter()
            .fold(text.to_owned(), |t, id| t.replace(id, "<id>"))
    };
    for node in nodes {
        for (path, which) in &reads {
            let id = if *which == "done" { &done } else { &asking };
            let other = path.replace(id.as_str(), &unknown(id));
            for key in [&keys.b_submit, &keys.b_read] {
                let theirs = call(node, Some(&key.secret), "GET", path, None).await;
                let none = call(node, Some(&key.secret), "GET", &other, None).await;
                assert_eq!(theirs.0, 404, "GET {path}: {}", theirs.1);
                assert_eq!(
                    (theirs.0, anonymised(&theirs.1, &[id])),
                    (none.0, anonymised(&none.1, &[&unknown(id)])),
                    "GET {path} as another tenant answers as for an unknown run"
                );
                assert!(!theirs.1.contains(&marker));
            }
            for key in [&keys.a_submit, &keys.a_read] {
                let (status, body) = call(node, Some(&key.secret), "GET", path, None).await;
                assert_eq!(status, 200, "GET {path} as its tenant: {body}");
            }
            let (status, _) = call(node, Some(&keys.admin), "GET", path, None).await;
            assert_eq!(status, 200, "GET {path} as an admin");
        }
        for (method, path, body) in &writes {
            let id = [&done, &asking, &waiting]
                .into_iter()
                .find(|id| path.contains(id.as_str()))
                .unwrap();
            let other = path.replace(id.as_str(), &unknown(id));
            for key in [&keys.b_submit, &keys.b_read] {
                let theirs = call(node, Some(&key.secret), method, path, body.clone()).await;
                let none = call(node, Some(&key.secret), method, &other, body.clone()).await;
                assert!(
                    [403, 404].contains(&theirs.0),
                    "{method} {path}: {}",
                    theirs.1
                );
                assert_eq!(
                    (theirs.0, anonymised(&theirs.1, &[id])),
                    (none.0, anonymised(&none.1, &[&unknown(id)])),
                    "{method} {path} as another tenant answers as for an unknown run"
                );
            }
        }
        // Lists and searches of B name none of A's runs, whatever B asks for.
        for key in [&keys.b_submit, &keys.b_read] {
            for path in [
                "/v1/management/runs?limit=1000".to_owned(),
                format!("/v1/management/runs?q={}", &done[done.len() - 8..]),
                format!("/v1/management/runs?q={done}"),
                format!("/v1/management/runs?tenant_id={}", keys.a_tenant),
                "/ui/runs".to_owned(),
                format!("/ui/runs/table?q={}", &done[done.len() - 8..]),
                "/ui/skills/text-stats".to_owned(),
            ] {
                let (status, body) = call(node, Some(&key.secret), "GET", &path, None).await;
                assert_eq!(status, 200, "{path}: {body}");
                for id in [&done, &asking, &waiting] {
                    assert!(!body.contains(id.as_str()), "{path} names A's run: {body}");
                }
                assert!(!body.contains(&marker), "{path}");
            }
        }
        let (_, listed) = json_as(node, a, "GET", "/v1/management/runs?limit=1000", None).await;
        let listed = listed.to_string();
        assert!(
            listed.contains(&done) && listed.contains(&asking),
            "{listed}"
        );
        let (_, all) = json_as(
            node,
            &keys.admin,
            "GET",
            &format!("/v1/management/runs?tenant_id={}", keys.a_tenant),
            None,
        )
        .await;
        assert!(all.to_string().contains(&done));
    }

    // Roles: what each may not do is refused whatever the run.
    let b = &keys.b_submit.secret;
    let r = &keys.b_read.secret;
    for (key, method, path, body) in [
        (
            r,
            "POST",
            "/v1/jobs".to_owned(),
            Some(json!({"skill_id": "hello", "input": {"name": "x"}})),
        ),
        (r, "POST", format!("/v1/jobs/{asking}/cancel"), None),
        (
            r,
            "POST",
            format!("/v1/jobs/{asking}/interaction/reply"),
            Some(reply.clone()),
        ),
        (r, "POST", "/v1/skill-packages/install".to_owned(), None),
        (b, "POST", "/v1/skill-packages/install".to_owned(), None),
        (
            b,
            "POST",
            format!("/v1/management/tenants/{}/keys", keys.a_tenant),
            Some(json!({"role": "read", "name": "x"})),
        ),
        (b, "GET", "/v1/management/keys".to_owned(), None),
        (
            b,
            "PUT",
            "/v1/management/system/settings".to_owned(),
            Some(json!({})),
        ),
        (b, "GET", "/v1/management/system/settings".to_owned(), None),
        (
            b,
            "POST",
            "/v1/engines/upgrades".to_owned(),
            Some(json!({"mode": "all"})),
        ),
        (b, "GET", "/v1/management/engines".to_owned(), None),
        (b, "GET", "/v1/management/audit".to_owned(), None),
        (b, "GET", "/v1/management/tenants".to_owned(), None),
    ] {
        let (status, answer) = json_as(first, key, method, &path, body).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert!(
            answer["detail"].as_str().unwrap().contains("role"),
            "{answer}"
        );
    }
    let (status, _) = call(
        first,
        Some(r),
        "POST",
        &format!("/v1/jobs/{waiting}/upload"),
        Some(Body::Zip("file", zip.clone())),
    )
    .await;
    assert_eq!(status, 403);
    // No key makes a key wider than itself, nor one of another tenant.
    let operator = make_key(first, &keys.admin, &keys.a_tenant, "operator").await;
    let (status, body) = json_as(
        first,
        &operator.secret,
        "POST",
        &format!("/v1/management/tenants/{}/keys", keys.a_tenant),
        Some(json!({"role": "admin", "name": "wider"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (status, _) = json_as(
        first,
        &operator.secret,
        "POST",
        &format!("/v1/management/tenants/{b_tenant}/keys"),
        Some(json!({"role": "read", "name": "elsewhere"})),
    )
    .await;
    assert_eq!(status, 404, "another tenant is not there for an operator");
    let narrower = make_key(first, &operator.secret, &keys.a_tenant, "read").await;
    // Operators install and change settings (each an audit row); cleaning up every tenant's
    // runs is the admins'.
    let package = common::skill_package("extra", "1.0.0").zip();
    let (status, body) = call(
        first,
        Some(&operator.secret),
        "POST",
        "/v1/skill-packages/install",
        Some(Body::Zip("file", package)),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let install: Value = serde_json::from_str(&body).unwrap();
    let (status, body) = json_as(
        first,
        &operator.secret,
        "PUT",
        "/v1/management/system/settings",
        Some(json!({"logging": {"level": "INFO"}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = json_as(first, &operator.secret, "POST", "/v1/jobs/cleanup", None).await;
    assert_eq!(status, 403);
    let (_, own_keys) = json_as(first, &operator.secret, "GET", "/v1/management/keys", None).await;
    let own_keys = own_keys.to_string();
    assert!(own_keys.contains(&narrower.id) && !own_keys.contains(&keys.b_read.id));
    assert!(
        !own_keys.contains(&narrower.secret),
        "a list never shows a secret"
    );

    // The result cache is per tenant.
    let same = json!({"skill_id": "hello", "input": {"name": marker}});
    let (_, first_a) = json_as(first, a, "POST", "/v1/jobs", Some(same.clone())).await;
    wait_as(
        first,
        a,
        first_a["request_id"].as_str().unwrap(),
        &["succeeded"],
    )
    .await;
    let (_, again_a) = json_as(first, a, "POST", "/v1/jobs", Some(same.clone())).await;
    assert_eq!(again_a["cache_hit"], true, "{again_a}");
    let (_, then_b) = json_as(first, b, "POST", "/v1/jobs", Some(same)).await;
    assert_eq!(then_b["cache_hit"], false, "{then_b}");
    let b_run = then_b["request_id"].as_str().unwrap();
    let b_done = wait_as(first, b, b_run, &["succeeded"]).await;
    assert_ne!(b_done["run_id"], done_status["run_id"]);
    // The metrics count every tenant's runs: an admin's to read.
    let (status, _) = call(first, Some(&operator.secret), "GET", "/metrics", None).await;
    assert_eq!(status, 403);
    let (status, page) = call(
        first,
        Some(&keys.admin),
        "GET",
        &format!("/metrics?tenant_id={}", keys.a_tenant),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        page.contains(&format!("tenant=\"{}\"", keys.a_tenant)),
        "{page}"
    );
    assert!(!page.contains(&format!("tenant=\"{b_tenant}\"")), "{page}");

    // Revoked and expired keys are shut out within two seconds on every node.
    let (status, _) = json_as(
        first,
        &keys.admin,
        "DELETE",
        &format!("/v1/management/keys/{}", keys.b_read.id),
        None,
    )
    .await;
    assert_eq!(status, 200);
    for node in nodes {
        let took = refused_within(node, &keys.b_read.secret).await;
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
    let rotated_from = keys.b_submit.secret.clone();
    let (status, rotated) = json_as(
        first,
        &keys.admin,
        "POST",
        &format!("/v1/management/keys/{}/rotate", keys.b_submit.id),
        None,
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    let new_secret = rotated["key"].as_str().unwrap().to_owned();
    for node in nodes {
        assert!(refused_within(node, &rotated_from).await < Duration::from_secs(2));
        let (status, _) = call(node, Some(&new_secret), "GET", "/v1/management/runs", None).await;
        assert_eq!(status, 200);
    }
    let ends = chrono::Utc::now() + chrono::Duration::seconds(2);
    let (status, expiring) = json_as(
        first,
        &keys.admin,
        "POST",
        &format!("/v1/management/tenants/{b_tenant}/keys"),
        Some(json!({"role": "read", "name": "brief", "expires_at": ends.to_rfc3339()})),
    )
    .await;
    assert_eq!(status, 200, "{expiring}");
    let brief = expiring["key"].as_str().unwrap().to_owned();
    let (status, _) = call(first, Some(&brief), "GET", "/v1/management/runs", None).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    for node in nodes {
        assert!(refused_within(node, &brief).await < Duration::from_secs(2));
    }

    // Audit rows for each act, by key, without secrets.
    let (status, audit) = json_as(
        first,
        &keys.admin,
        "GET",
        "/v1/management/audit?limit=1000",
        None,
    )
    .await;
    assert_eq!(status, 200, "{audit}");
    let entries = audit["entries"].as_array().unwrap();
    let acted = |action: &str, target: &str| {
        entries
            .iter()
            .find(|e| e["action"] == action && e["target"] == target)
            .unwrap_or_else(|| panic!("no {action} of {target} in {audit}"))
            .clone()
    };
    let made = acted("key.created", &keys.a_submit.id);
    assert!(
        made["key_id"].is_string(),
        "made by the admin's key: {made}"
    );
    acted("key.created", &narrower.id);
    assert_eq!(acted("key.created", &narrower.id)["key_id"], operator.id);
    acted("key.revoked", &keys.b_read.id);
    acted("key.rotated", &keys.b_submit.id);
    acted("tenant.created", &keys.a_tenant);
    let installed = acted(
        "skill.install_requested",
        install["request_id"].as_str().unwrap(),
    );
    assert_eq!(installed["key_id"], operator.id);
    assert_eq!(
        acted("settings.changed", "logging.level")["key_id"],
        operator.id
    );
    let all_secrets = [
        &keys.admin,
        &keys.a_submit.secret,
        &keys.a_read.secret,
        &rotated_from,
        &new_secret,
        &keys.b_read.secret,
        &brief,
        &operator.secret,
        &narrower.secret,
    ];
    let logged: String = nodes.iter().map(|n| n.log()).collect();
    let database = stored();
    for secret in all_secrets {
        assert!(!audit.to_string().contains(secret.as_str()));
        assert!(!logged.contains(secret.as_str()), "a secret in the log");
        let tail = &secret[12..];
        assert!(
            !database.windows(tail.len()).any(|w| w == tail.as_bytes()),
            "the database holds a key in clear"
        );
    }
}

/// The bundled skills in a fresh test folder.
fn bundled() -> std::sync::Arc<TestDirs> {
    let dirs = TestDirs::new();
    common::copy_bundled_skills(&dirs.skills);
    dirs
}

#[tokio::test]
async fn tenants_are_kept_apart_on_sqlite() {
    let server = TestServer::start_with(bundled(), &[]);
    let data = server.dirs.data.clone();
    tenants_are_kept_apart(&[&server], None, || {
        ["skill_runner.db", "skill_runner.db-wal"]
            .iter()
            .flat_map(|f| std::fs::read(data.join(f)).unwrap_or_default())
            .collect()
    })
    .await;
}

#[tokio::test]
async fn tenants_are_kept_apart_through_either_of_two_nodes() {
    let url = common::postgres::fresh_database().await;
    let skills = bundled();
    let node = |id: &str| {
        let env: BTreeMap<&str, &str> = BTreeMap::from([
            ("SKILL_RUNNER_DATABASE_URL", url.as_str()),
            ("SKILL_RUNNER_NODE_ID", id),
            ("SKILL_RUNNER_SKILLS_DIR", skills.skills.to_str().unwrap()),
            ("SKILL_RUNNER_NODE_TIMEOUT_SECONDS", "3"),
        ]);
        TestServer::start_with(TestDirs::new(), &env.into_iter().collect::<Vec<_>>())
    };
    let (a, b) = (node("node-a"), node("node-b"));
    tenants_are_kept_apart(&[&a, &b], Some(&url), || {
        let dump = std::process::Command::new(common::postgres::tool("pg_dump"))
            .args(["--data-only", &url])
            .output()
            .unwrap();
        assert!(
            dump.status.success(),
            "{}",
            String::from_utf8_lossy(&dump.stderr)
        );
        dump.stdout
    })
    .await;
}

/// A job as `key`: status, headers and body.
async fn create_as(
    server: &TestServer,
    key: &str,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = common::client()
        .post(server.url("/v1/jobs"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.unwrap())
}

fn header(headers: &reqwest::header::HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {headers:?}"))
        .to_str()
        .unwrap()
        .to_owned()
}

/// Waits, when the minute (UTC) ends within 15 s, for the next one: `runs_per_minute` counts
/// calendar minutes, and a test counting within one must not straddle two.
async fn within_one_minute() {
    let into = chrono::Utc::now().timestamp_millis().rem_euclid(60_000) as u64;
    if into > 45_000 {
        tokio::time::sleep(Duration::from_millis(60_100 - into)).await;
    }
}

fn sleeper(n: usize) -> Value {
    json!({"skill_id": "probe", "parameter": {"mode": "sleep"}, "input": {"text": format!("{n}")},
           "runtime_options": {"no_cache": true}})
}

/// A tenant at its queued limit gets 429 with `Retry-After` while another tenant is still
/// admitted; its rate-limit headers count down to its `runs_per_minute`, past which it gets
/// 429 too; an upload over its `upload_bytes` is refused.
#[tokio::test]
async fn a_tenant_over_its_quotas_is_refused_and_the_others_are_not() {
    let server = TestServer::with_skills(
        &[
            common::probe_skill("probe", None),
            common::probe_skill("probe-doc", Some(true)),
        ],
        &[("SKILL_RUNNER_MAX_CONCURRENT", "1")],
    );
    let admin = server.first_key("admin", None).await;
    let (status, a) = json_as(
        &server,
        &admin,
        "POST",
        "/v1/management/tenants",
        Some(
            json!({"name": "busy", "quotas": {"max_queued": 2, "runs_per_minute": 5,
                                              "upload_bytes": 600}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{a}");
    let a_tenant = a["tenant_id"].as_str().unwrap();
    let b_tenant = make_tenant(&server, &admin, "calm").await;
    let a = make_key(&server, &admin, a_tenant, "submit").await.secret;
    let b = make_key(&server, &admin, &b_tenant, "submit").await.secret;
    within_one_minute().await;

    // One run takes the only slot, two wait: the tenant's queue is full.
    let mut made = Vec::new();
    for n in 0..3 {
        let (status, headers, body) = create_as(&server, &a, sleeper(n)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(header(&headers, "x-ratelimit-limit-requests"), "5");
        assert_eq!(
            header(&headers, "x-ratelimit-remaining-requests"),
            (4 - n).to_string(),
            "the headers count down"
        );
        let reset = header(&headers, "x-ratelimit-reset-requests");
        let seconds: u64 = reset.trim_end_matches('s').parse().unwrap();
        assert!((1..=60).contains(&seconds), "{reset}");
        let rid = body["request_id"].as_str().unwrap().to_owned();
        if n == 0 {
            wait_as(&server, &a, &rid, &["running"]).await;
        }
        made.push(rid);
    }
    let (status, headers, body) = create_as(&server, &a, sleeper(3)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["detail"]["code"], "TENANT_QUEUE_FULL", "{body}");
    assert_eq!(header(&headers, "retry-after"), "1");
    // Another tenant is still admitted.
    let (status, headers, body) = create_as(&server, &b, sleeper(4)).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers.get("x-ratelimit-limit-requests").is_none(),
        "no quota, no headers"
    );
    let b_run = body["request_id"].as_str().unwrap().to_owned();

    // Queued runs that end free the queue; then the minute's count runs out.
    for rid in &made[1..] {
        let (status, _) =
            json_as(&server, &a, "POST", &format!("/v1/jobs/{rid}/cancel"), None).await;
        assert_eq!(status, 200);
    }
    let (status, headers, body) = create_as(&server, &a, sleeper(5)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "x-ratelimit-remaining-requests"), "1");
    made.push(body["request_id"].as_str().unwrap().to_owned());
    let (status, _, body) = create_as(
        &server,
        &a,
        json!({"skill_id": "probe-doc", "parameter": {"mode": "ok"}, "input": {"text": "d"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let waiting = body["request_id"].as_str().unwrap().to_owned();
    let (status, headers, body) = create_as(&server, &a, sleeper(6)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["detail"]["code"], "TENANT_RATE_LIMITED", "{body}");
    assert_eq!(header(&headers, "x-ratelimit-remaining-requests"), "0");
    let retry: u64 = header(&headers, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");

    // An upload over the tenant's upload_bytes is refused, and the request keeps waiting.
    let noise: Vec<u8> = (0..4000u32)
        .map(|i| b"abcdefghijklmnopqrstuvwxyz"[(i.wrapping_mul(2_654_435_761) >> 7) as usize % 26])
        .collect();
    let big = build_zip(vec![("doc".into(), noise)]);
    assert!(big.len() > 600);
    let (status, body) = call(
        &server,
        Some(&a),
        "POST",
        &format!("/v1/jobs/{waiting}/upload"),
        Some(Body::Zip("file", big)),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    let (_, state) = json_as(&server, &a, "GET", &format!("/v1/jobs/{waiting}"), None).await;
    assert_eq!(
        state["run_id"],
        Value::Null,
        "still waiting for its upload: {state}"
    );

    for rid in made.iter().chain([&b_run]) {
        call(
            &server,
            Some(&admin),
            "POST",
            &format!("/v1/jobs/{rid}/cancel"),
            None,
        )
        .await;
    }
}

/// Two nodes under a burst of one tenant's creates admit exactly its `runs_per_minute`, and a
/// request refused for its input is not counted.
#[tokio::test]
async fn two_nodes_admit_exactly_a_tenants_quota_under_a_burst() {
    let url = common::postgres::fresh_database().await;
    let skills = bundled();
    let node = |id: &str| {
        TestServer::start_with(
            TestDirs::new(),
            &[
                ("SKILL_RUNNER_DATABASE_URL", url.as_str()),
                ("SKILL_RUNNER_NODE_ID", id),
                ("SKILL_RUNNER_SKILLS_DIR", skills.skills.to_str().unwrap()),
            ],
        )
    };
    let (one, two) = (node("node-a"), node("node-b"));
    let admin = one.first_key("admin", Some(&url)).await;
    let (status, tenant) = json_as(
        &one,
        &admin,
        "POST",
        "/v1/management/tenants",
        Some(json!({"name": "bursty", "quotas": {"runs_per_minute": 12}})),
    )
    .await;
    assert_eq!(status, 200, "{tenant}");
    let key = make_key(
        &one,
        &admin,
        tenant["tenant_id"].as_str().unwrap(),
        "submit",
    )
    .await
    .secret;
    within_one_minute().await;
    let burst = (0..40).map(|n| {
        let server = if n % 2 == 0 { &one } else { &two };
        let key = key.clone();
        async move {
            let body = json!({"skill_id": "hello", "input": {"name": format!("n{n}")},
                              "runtime_options": {"no_cache": true}});
            create_as(server, &key, body).await.0
        }
    });
    let (status, _, body) = create_as(&one, &key, json!({"skill_id": "no-such-skill"})).await;
    assert_eq!(status, 404, "{body}");
    let answers = futures::future::join_all(burst).await;
    let admitted = answers.iter().filter(|s| **s == 200).count();
    let refused = answers.iter().filter(|s| **s == 429).count();
    assert_eq!((admitted, refused), (12, 28), "{answers:?}");
}

/// Tenant A queues 200 runs, then B one: with two slots, B's run starts before A's third run
/// started after it was queued (fair slots), on one node or across `nodes`.
async fn a_single_run_is_not_stuck_behind_a_burst(nodes: &[&TestServer], database: Option<&str>) {
    let first = nodes[0];
    let admin = first.first_key("admin", database).await;
    let a_tenant = make_tenant(first, &admin, "burst").await;
    let b_tenant = make_tenant(first, &admin, "single").await;
    let a = make_key(first, &admin, &a_tenant, "submit").await.secret;
    let b = make_key(first, &admin, &b_tenant, "submit").await.secret;
    let drip = |n: usize| {
        json!({"skill_id": "probe", "parameter": {"mode": "drip"}, "input": {"text": format!("{n}")},
               "runtime_options": {"no_cache": true}})
    };
    for n in 0..200 {
        let node = nodes[n % nodes.len()];
        let (status, _, body) = create_as(node, &a, drip(n)).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, body) = create_as(nodes[nodes.len() - 1], &b, drip(999)).await;
    assert_eq!(status, 200, "{body}");
    let single = body["request_id"].as_str().unwrap().to_owned();
    let started = wait_as(first, &b, &single, &["running", "succeeded"]).await;
    let queued_at = started["created_at"].as_str().unwrap().to_owned();
    let (_, listed) = json_as(first, &b, "GET", "/v1/management/runs?limit=10", None).await;
    let b_started = listed["runs"][0]["started_at"].as_str().unwrap().to_owned();
    let (_, listed) = json_as(first, &a, "GET", "/v1/management/runs?limit=1000", None).await;
    let passed: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["started_at"].as_str())
        .filter(|at| *at > queued_at.as_str() && *at < b_started.as_str())
        .collect();
    assert!(
        passed.len() < 3,
        "{} of A's runs started between B's queueing ({queued_at}) and its start ({b_started})",
        passed.len()
    );
}

#[tokio::test]
async fn fair_slots_on_one_node() {
    let server = TestServer::with_skills(
        &[common::probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_MAX_CONCURRENT", "2"),
            ("SKILL_RUNNER_MAX_QUEUE_SIZE", "1000"),
        ],
    );
    a_single_run_is_not_stuck_behind_a_burst(&[&server], None).await;
}

#[tokio::test]
async fn fair_slots_across_two_nodes() {
    let url = common::postgres::fresh_database().await;
    let skills = TestDirs::new();
    common::probe_skill("probe", None).write_into(&skills.skills);
    let node = |id: &str| {
        TestServer::start_with(
            TestDirs::new(),
            &[
                ("SKILL_RUNNER_DATABASE_URL", url.as_str()),
                ("SKILL_RUNNER_NODE_ID", id),
                ("SKILL_RUNNER_SKILLS_DIR", skills.skills.to_str().unwrap()),
                ("SKILL_RUNNER_MAX_CONCURRENT", "1"),
                ("SKILL_RUNNER_MAX_QUEUE_SIZE", "1000"),
            ],
        )
    };
    let (one, two) = (node("node-a"), node("node-b"));
    a_single_run_is_not_stuck_behind_a_burst(&[&one, &two], Some(&url)).await;
}
