//! Engine administration: auth status, model manifests and snapshots, CLI upgrades (real
//! `npm install` of local package tarballs into a temporary managed prefix), the management
//! engine summaries, and Basic Auth on the administrative routes.

use skill_runner_test_support as common;

use std::time::{Duration, Instant};

use common::agents::{Agents, tarball};
use common::{TestDirs, TestServer, report_skill};
use serde_json::{Value, json};

#[tokio::test]
async fn auth_status_and_engine_summaries() {
    let agents = Agents::new();
    agents.fake_cli("npm/bin", "codex", "0.170.0");
    agents.login(".codex/auth.json");
    agents.fake_cli("global-bin", "claude", "2.1.329");
    agents.fake_cli("npm/bin", "gemini", "0.61.0");
    agents.login(".gemini/oauth_creds.json");
    agents.fake_cli("npm/bin", "qwen", "0.24.4");
    let server = agents.server(
        TestDirs::new(),
        &[
            ("SKILL_RUNNER_QWEN_API_KEY", "k"),
            (
                "SKILL_RUNNER_CLAUDE_NPM_PACKAGE",
                "https://deploy:pw-secret@registry.example/claude-code.tgz",
            ),
        ],
    );

    let (code, body) = server.get("/v1/engines/auth-status").await;
    assert_eq!(code, 200, "{body}");
    let status = &body["engines"];
    let npm_bin = agents.path("npm/bin");
    assert_eq!(
        status["codex"],
        json!({
            "managed_present": true,
            "managed_cli_path": npm_bin.join("codex").to_str().unwrap(),
            "global_available": false,
            "global_cli_path": null,
            "effective_cli_path": npm_bin.join("codex").to_str().unwrap(),
            "effective_path_source": "managed",
            "credential_files": {"auth.json": true},
            "api_key_configured": false,
            "auth_ready": true,
        })
    );
    let claude = &status["claude"];
    assert_eq!(claude["effective_path_source"], "global");
    assert_eq!(
        claude["global_cli_path"],
        agents.path("global-bin/claude").to_str().unwrap()
    );
    assert_eq!(
        claude["credential_files"],
        json!({".credentials.json": false})
    );
    assert_eq!(claude["auth_ready"], false);
    // One of gemini's two login files is not enough.
    assert_eq!(
        status["gemini"]["credential_files"],
        json!({"oauth_creds.json": true, "google_accounts.json": false})
    );
    assert_eq!(status["gemini"]["auth_ready"], false);
    // A configured key is enough.
    assert_eq!(status["qwen"]["api_key_configured"], true);
    assert_eq!(status["qwen"]["auth_ready"], true);
    assert_eq!(status["opencode"]["effective_path_source"], "missing");
    assert_eq!(status["opencode"]["effective_cli_path"], Value::Null);
    assert_eq!(status["iflow"]["auth_ready"], false);
    assert!(status.get("script").is_none());

    let (code, body) = server.get("/v1/management/engines").await;
    assert_eq!(code, 200, "{body}");
    let list = body["engines"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|e| e["engine"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "codex",
            "gemini",
            "iflow",
            "claude",
            "opencode",
            "qwen",
            "kilo",
            "codebuddy"
        ]
    );
    // The management list shows every engine; the legacy ones say so.
    let legacy: Vec<(&str, bool, bool)> = list
        .iter()
        .map(|e| {
            let flag = |k: &str| e[k].as_bool().unwrap();
            (
                e["engine"].as_str().unwrap(),
                flag("legacy"),
                flag("active"),
            )
        })
        .filter(|(_, legacy, _)| *legacy)
        .collect();
    assert_eq!(legacy, [("gemini", true, false), ("iflow", true, false)]);
    let (_, codex_models) = server.get("/v1/engines/codex/models").await;
    let codex = &list[0];
    assert_eq!(codex["cli_version"], "0.170.0");
    assert_eq!(codex["auth_ready"], true);
    assert_eq!(codex["sandbox_status"], "landlock");
    // Where the service may create namespaces (root here), each barrier is held by the
    // strongest mechanism.
    let namespaces = std::process::Command::new("unshare")
        .args(["-n", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let (network, processes) = match namespaces {
        true => ("namespace", "pid-namespace"),
        false => ("none", "process-group"),
    };
    // Where the v1 memory and pids hierarchies can be written (root here), turns get cgroups
    // there; where the unified (v2) hierarchy can be written too (this machine's hybrid
    // `/sys/fs/cgroup/unified`), it counts their CPU time. Neither delegates v2's memory or
    // pids controllers here.
    let writable = |dir: &str| {
        let probe = std::path::Path::new(dir).join(format!("probe.{}", std::process::id()));
        std::fs::create_dir(&probe).is_ok_and(|()| std::fs::remove_dir(&probe).is_ok())
    };
    let resources = match writable("/sys/fs/cgroup/pids") {
        true => "cgroup-v1+rlimits",
        false => "rlimits",
    };
    let cpu_time = match (
        writable("/sys/fs/cgroup/unified"),
        writable("/sys/fs/cgroup/cpuacct"),
    ) {
        (true, _) => "cgroup-v2",
        (false, true) => "cgroup-v1",
        (false, false) => "rlimit",
    };
    assert_eq!(
        codex["barriers"],
        json!({"files": "landlock", "network": network, "processes": processes,
            "privileges": "capabilities-dropped+seccomp", "users": "service-uid",
            "resources": resources, "cpu_time": cpu_time,
            // Logged in with a login file, no key: the login is lent to each turn.
            "secret": "lent"})
    );
    assert_eq!(
        codex["models_count"].as_u64().unwrap() as usize,
        codex_models["models"].as_array().unwrap().len()
    );
    assert_eq!(list[4]["cli_version"], Value::Null);
    // What an upgrade installs: the pinned version, the operator's package, or nothing known.
    let targets: Vec<(&str, &Value)> = list
        .iter()
        .map(|e| (e["engine"].as_str().unwrap(), &e["upgrade_target"]))
        .collect();
    assert_eq!(targets[0], ("codex", &json!("@openai/codex@0.169.0")));
    assert_eq!(targets[2], ("iflow", &Value::Null));
    // The operator's package, with the credential in its URL masked.
    assert_eq!(
        targets[3],
        (
            "claude",
            &json!("https://****:****@registry.example/claude-code.tgz")
        )
    );
    assert!(!body.to_string().contains("pw-secret"));
    let (_, page) = server.text("/ui/engines").await;
    assert!(
        page.contains("<code>@openai/codex@0.169.0</code>"),
        "{page}"
    );
    assert!(
        page.contains("<code>SKILL_RUNNER_IFLOW_NPM_PACKAGE</code>"),
        "{page}"
    );
    // Codex 0.170.0 is installed where 0.169.0 is pinned; gemini is the pinned 0.61.0.
    let row = |engine: &str| {
        let start = page.find(&format!("data-engine=\"{engine}\"")).unwrap();
        page[start..start + page[start..].find("</tr>").unwrap()].to_owned()
    };
    assert!(row("codex").contains("differs from the installed CLI"));
    assert!(!row("gemini").contains("differs from the installed CLI"));

    let (code, detail) = server.get("/v1/management/engines/codex").await;
    assert_eq!(code, 200, "{detail}");
    assert_eq!(detail["models"], codex_models["models"]);
    assert_eq!(detail["upgrade_status"], Value::Null);
    assert_eq!(detail["last_error"], Value::Null);
    assert_eq!(detail["cli_version"], "0.170.0");
    for missing in ["script", "nope"] {
        let (code, _) = server
            .get(&format!("/v1/management/engines/{missing}"))
            .await;
        assert_eq!(code, 404, "{missing}");
    }
}

#[tokio::test]
async fn model_snapshots_are_add_only_and_kept() {
    let agents = Agents::new();
    agents.fake_cli("npm/bin", "codex", "0.170.0");
    agents.fake_cli("npm/bin", "gemini", "0.61.0");
    let dirs = TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let server = agents.server(dirs.clone(), &[]);

    let (code, manifest) = server.get("/v1/engines/codex/models/manifest").await;
    assert_eq!(code, 200, "{manifest}");
    assert_eq!(manifest["cli_version_detected"], "0.170.0");
    assert_eq!(manifest["resolved_snapshot_version"], "0.169.0");
    assert_eq!(manifest["resolved_snapshot_file"], "models_0.169.0.json");
    assert_eq!(
        manifest["manifest"]["snapshots"],
        json!([{"version": "0.169.0", "file": "models_0.169.0.json", "source": "bundled",
                "created_at": null}])
    );

    // Refused bodies change nothing.
    for (body, says) in [
        (json!({"models": []}), "at least one model"),
        (json!({"models": [{"id": ""}]}), "models[0].id"),
        (
            json!({"models": [{"id": "a"}, {"id": "a"}]}),
            "models[1].id",
        ),
        (
            json!({"models": [{"id": "a", "supported_effort": [""]}]}),
            "models[0].supported_effort",
        ),
    ] {
        let (code, reply) = server
            .post_json("/v1/engines/codex/models/snapshots", body.clone())
            .await;
        assert_eq!(code, 422, "{body}: {reply}");
        assert!(
            reply["detail"].to_string().contains(says),
            "{body}: {reply}"
        );
    }
    for body in [
        json!({"models": [{"id": "a", "bogus": 1}]}),
        json!({"model": []}),
    ] {
        let (code, reply) = server
            .post_json("/v1/engines/codex/models/snapshots", body.clone())
            .await;
        assert_eq!(code, 422, "{body}: {reply}");
    }
    let (code, _) = server
        .post_json(
            "/v1/engines/script/models/snapshots",
            json!({"models": [{"id": "a"}]}),
        )
        .await;
    assert_eq!(code, 404);

    let new = json!({"models": [
        {"id": "gpt-6", "supported_effort": ["low", "high"]},
        {"id": "gpt-6-mini", "display_name": "GPT-6 mini", "notes": "cheap"},
    ]});
    let (code, added) = server
        .post_json("/v1/engines/codex/models/snapshots", new.clone())
        .await;
    assert_eq!(code, 200, "{added}");
    assert_eq!(added["resolved_snapshot_version"], "0.170.0");
    assert_eq!(added["models"][0]["display_name"], "gpt-6");
    let snapshots = added["manifest"]["snapshots"].as_array().unwrap();
    assert_eq!(snapshots.len(), 2);
    assert_eq!(snapshots[1]["source"], "added");
    assert!(snapshots[1]["created_at"].is_string());

    // At once: the model list and job validation use it.
    let (_, models) = server.get("/v1/engines/codex/models").await;
    assert_eq!(models["snapshot_version_used"], "0.170.0");
    assert_eq!(models["models"][1]["id"], "gpt-6-mini");
    let (code, body) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "reporter", "engine": "codex", "model": "gpt-6@high",
                   "input": {"text": "x"}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "reporter", "engine": "codex", "model": "gpt-5.5",
                   "input": {"text": "x"}}),
        )
        .await;
    assert_eq!(code, 400, "the old snapshot no longer applies: {body}");

    // Add-only: the same version again, a version with a bundled snapshot, an unknown version.
    let (code, body) = server
        .post_json("/v1/engines/codex/models/snapshots", new.clone())
        .await;
    assert_eq!(code, 409, "{body}");
    let (code, body) = server
        .post_json(
            "/v1/engines/gemini/models/snapshots",
            json!({"models": [{"id": "g"}]}),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("0.61.0"),
        "{body}"
    );
    let (code, body) = server
        .post_json(
            "/v1/engines/qwen/models/snapshots",
            json!({"models": [{"id": "q"}]}),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("not known"),
        "{body}"
    );

    // Kept across a restart.
    drop(server);
    let server = agents.server(dirs, &[]);
    let (_, models) = server.get("/v1/engines/codex/models").await;
    assert_eq!(models["snapshot_version_used"], "0.170.0");
    assert_eq!(
        models["models"][0]["supported_effort"],
        json!(["low", "high"])
    );
}

async fn wait_upgrade(server: &TestServer, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let (code, body) = server.get(&format!("/v1/engines/upgrades/{id}")).await;
        assert_eq!(code, 200, "{body}");
        if matches!(body["status"].as_str(), Some("succeeded" | "failed")) {
            return body;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn upgrades_install_into_the_managed_prefix() {
    let agents = Agents::new();
    let codex = tarball(&agents.path(""), "fake-codex", "codex", "9.9.9");
    let missing = agents.path("nowhere/missing.tgz");
    let missing = missing.to_str().unwrap();
    let dirs = TestDirs::new();
    let packages: Vec<(String, &str)> = ["CODEX", "GEMINI", "IFLOW", "CLAUDE", "OPENCODE", "QWEN"]
        .iter()
        .map(|engine| {
            let spec = if *engine == "CODEX" {
                codex.to_str().unwrap()
            } else {
                missing
            };
            (format!("SKILL_RUNNER_{engine}_NPM_PACKAGE"), spec)
        })
        .collect();
    let env: Vec<(&str, &str)> = packages.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    report_skill("reporter").write_into(&dirs.skills);
    let server = agents.server(dirs, &env);
    let job = json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "x"}});
    let (code, refused) = server.post_json("/v1/jobs", job.clone()).await;
    assert_eq!(code, 400, "{refused}");
    assert_eq!(refused["detail"]["code"], "ENGINE_CLI_MISSING");

    // Refused bodies name the field.
    for (body, field) in [
        (json!({"mode": "single"}), "engine"),
        (json!({"mode": "all", "engine": "codex"}), "engine"),
        (json!({"mode": "single", "engine": "script"}), "engine"),
        (json!({"mode": "every"}), "mode"),
    ] {
        let (code, reply) = server.post_json("/v1/engines/upgrades", body.clone()).await;
        assert_eq!(code, 422, "{body}: {reply}");
        assert_eq!(reply["detail"][0]["loc"], json!(["body", field]), "{reply}");
    }
    let (code, _) = server
        .post_json("/v1/engines/upgrades", json!({"engine": "codex"}))
        .await;
    assert_eq!(code, 422);
    let (code, _) = server.get("/v1/engines/upgrades/no-such-id").await;
    assert_eq!(code, 404);

    let (_, engines) = server.get("/v1/engines").await;
    assert_eq!(
        engines["engines"][0],
        json!({"engine": "codex", "cli_version_detected": null, "auth_ready": false})
    );

    let (code, created) = server
        .post_json(
            "/v1/engines/upgrades",
            json!({"mode": "single", "engine": "codex"}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["status"], "queued");
    let done = wait_upgrade(&server, created["request_id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["mode"], "single");
    assert_eq!(done["requested_engine"], "codex");
    assert_eq!(done["results"]["codex"]["status"], "succeeded");
    assert_eq!(done["results"]["codex"]["error"], Value::Null);
    assert!(agents.path("npm/bin/codex").exists());
    let (_, engines) = server.get("/v1/engines").await;
    assert_eq!(
        engines["engines"][0],
        json!({"engine": "codex", "cli_version_detected": "9.9.9", "auth_ready": false}),
        "the new version shows at once"
    );
    let (_, detail) = server.get("/v1/management/engines/codex").await;
    assert_eq!(detail["upgrade_status"], "succeeded");
    // The refusal's advice worked: the job is accepted now.
    let (code, body) = server.post_json("/v1/jobs", job).await;
    assert_eq!(code, 200, "{body}");

    // All: one engine after another, each with its own result.
    let (code, created) = server
        .post_json("/v1/engines/upgrades", json!({"mode": "all"}))
        .await;
    assert_eq!(code, 200, "{created}");
    let done = wait_upgrade(&server, created["request_id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["requested_engine"], Value::Null);
    let results = done["results"].as_object().unwrap();
    // codebuddy is not on the public registry and has no spec here: left out.
    assert_eq!(results.len(), 7, "{done}");
    assert!(results.get("codebuddy").is_none(), "{done}");
    assert_eq!(results["codex"]["status"], "succeeded");
    let gemini = &results["gemini"];
    assert_eq!(gemini["status"], "failed");
    assert!(
        gemini["error"]
            .as_str()
            .unwrap()
            .starts_with("Upgrade command exited with code"),
        "{gemini}"
    );
    assert!(
        gemini["stderr"].as_str().unwrap().contains("missing.tgz"),
        "{gemini}"
    );
    let (_, detail) = server.get("/v1/management/engines/gemini").await;
    assert_eq!(detail["upgrade_status"], "failed");
    assert_eq!(detail["last_error"], gemini["error"]);
}

#[tokio::test]
async fn one_upgrade_at_a_time_and_a_stop_ends_the_one_under_way() {
    // A package server that accepts connections and never answers keeps npm busy.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let spec = format!("http://{}/stuck.tgz", silent.local_addr().unwrap());
    let agents = Agents::new();
    let dirs = TestDirs::new();
    let env = [("SKILL_RUNNER_QWEN_NPM_PACKAGE", spec.as_str())];
    let start_stuck = |server: &TestServer| {
        let server_url = server.url("/v1/engines/upgrades");
        let client = server.client.clone();
        async move {
            let response = client
                .post(server_url)
                .json(&json!({"mode": "single", "engine": "qwen"}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            let created: Value = response.json().await.unwrap();
            created["request_id"].as_str().unwrap().to_owned()
        }
    };
    let interrupted = |upgrade: &Value| {
        upgrade["status"] == "failed"
            && upgrade["results"]["qwen"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("Interrupted"))
    };

    // A graceful stop kills npm's group and records the upgrade as interrupted.
    let mut server = agents.server(dirs.clone(), &env);
    let id = start_stuck(&server).await;
    let (code, body) = server
        .post_json(
            "/v1/engines/upgrades",
            json!({"mode": "single", "engine": "codex"}),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("already"),
        "{body}"
    );
    let (_, running) = server.get(&format!("/v1/engines/upgrades/{id}")).await;
    assert!(
        matches!(running["status"].as_str(), Some("queued" | "running")),
        "{running}"
    );
    // npm's output is kept under the data dir.
    let log = dirs.data.join(format!("upgrades/{id}/qwen.stderr.txt"));
    let started = Instant::now();
    while !log.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "npm never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopped = server.terminate();
    assert!(stopped.success(), "{stopped:?}; log:\n{}", server.log());

    // A crash leaves it running; the next start ends it.
    let server = agents.server(dirs.clone(), &env);
    let (_, after) = server.get(&format!("/v1/engines/upgrades/{id}")).await;
    assert!(interrupted(&after), "{after}");
    let crashed = start_stuck(&server).await;
    drop(server);
    let server = agents.server(dirs.clone(), &[]);
    let (_, after) = server.get(&format!("/v1/engines/upgrades/{crashed}")).await;
    assert!(interrupted(&after), "{after}");
    // The next one may start.
    let (code, body) = server
        .post_json(
            "/v1/engines/upgrades",
            json!({"mode": "single", "engine": "qwen"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    drop(silent);
}

#[tokio::test]
async fn basic_auth_guards_the_administrative_routes() {
    let agents = Agents::new();
    let server = agents.server(
        TestDirs::new(),
        &[
            ("UI_BASIC_AUTH_ENABLED", "true"),
            ("UI_BASIC_AUTH_USERNAME", "admin"),
            ("UI_BASIC_AUTH_PASSWORD", "s3cret"),
        ],
    );
    let guarded: [(&str, &str); 7] = [
        ("GET", "/v1/engines/auth-status"),
        ("GET", "/v1/engines/codex/models/manifest"),
        ("POST", "/v1/engines/codex/models/snapshots"),
        ("POST", "/v1/engines/upgrades"),
        ("GET", "/v1/engines/upgrades/some-id"),
        ("POST", "/v1/skill-packages/install"),
        ("GET", "/v1/skill-packages/some-id"),
    ];
    for (method, path) in guarded {
        for auth in [None, Some(("admin", "wrong")), Some(("root", "s3cret"))] {
            let mut request = server
                .client
                .request(method.parse().unwrap(), server.url(path))
                .json(&json!({"mode": "all", "models": [{"id": "x"}]}));
            if let Some((user, password)) = auth {
                request = request.basic_auth(user, Some(password));
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{method} {path} {auth:?}");
            let challenge = response.headers()["www-authenticate"]
                .to_str()
                .unwrap()
                .to_owned();
            assert!(challenge.starts_with("Basic "), "{challenge}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body, json!({"detail": "Authentication required"}));
        }
    }
    // Nothing was started by the refused requests.
    let ok = server
        .client
        .get(server.url("/v1/engines/auth-status"))
        .basic_auth("admin", Some("s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let status = server
        .client
        .get(server.url("/v1/management/engines/codex"))
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 200, "the console summaries stay open");
    let detail: Value = status.json().await.unwrap();
    assert_eq!(detail["upgrade_status"], Value::Null);
    let (code, _) = server.get("/v1/engines").await;
    assert_eq!(code, 200);
    let upgraded = server
        .client
        .get(server.url("/v1/engines/upgrades/some-id"))
        .basic_auth("admin", Some("s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(upgraded.status(), 404);
}

/// gemini and iflow are legacy, as the reference marks them: a new job for one is refused with
/// what to do, unless `SKILL_RUNNER_LEGACY_ENGINES` allows it.
#[tokio::test]
async fn legacy_engines_take_no_new_run_unless_allowed() {
    let dirs = TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let server = TestServer::start_with(dirs, &[]);
    let (code, body) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "reporter", "engine": "gemini", "input": {"text": "x"}}),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["detail"]["code"], "ENGINE_LEGACY");
    let message = body["detail"]["message"].as_str().unwrap();
    assert!(
        message.contains("SKILL_RUNNER_LEGACY_ENGINES=gemini") && message.contains("codex"),
        "{message}"
    );
    let (_, models) = server.get("/v1/engines/gemini/models").await;
    assert_eq!(models["engine"], "gemini", "still readable: {models}");

    let dirs = TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let allowed = TestServer::start_with(dirs, &[("SKILL_RUNNER_LEGACY_ENGINES", "gemini")]);
    let (code, body) = allowed
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "reporter", "engine": "gemini", "input": {"text": "x"}}),
        )
        .await;
    assert_ne!(body["detail"]["code"], "ENGINE_LEGACY", "{code} {body}");
    let (_, engines) = allowed.get("/v1/engines").await;
    assert!(engines.to_string().contains("\"gemini\""), "{engines}");
    assert!(!engines.to_string().contains("\"iflow\""), "{engines}");
}

/// `files` parts for an auth import.
fn login_files(files: &[(&str, &str)]) -> reqwest::multipart::Form {
    files
        .iter()
        .fold(reqwest::multipart::Form::new(), |form, (name, text)| {
            let part = reqwest::multipart::Part::bytes(text.as_bytes().to_vec())
                .file_name(name.to_string());
            form.part("files", part)
        })
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Engine login without a terminal: a run of a logged-out engine waits in `waiting_auth` (and
/// fails `AUTH_WAIT_TIMEOUT` when no login comes); refused imports change nothing; a login file
/// imported through the run queues it again; log-out; API-key auth sessions in both route
/// forms. The CLIs only answer `--version`: what runs here is the service's side.
#[tokio::test]
async fn engines_log_in_without_a_terminal() {
    let agents = Agents::new();
    agents.fake_cli("npm/bin", "codex", "0.170.0");
    agents.fake_cli("npm/bin", "qwen", "0.24.4");
    let dirs = TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let server = agents.server(dirs, &[("SKILL_RUNNER_AUTH_WAIT_SECONDS", "3")]);
    let home = agents.path("agent-home");

    let (code, spec) = server
        .get("/v1/management/engines/codex/auth/import/spec")
        .await;
    assert_eq!(code, 200, "{spec}");
    assert_eq!(
        spec["ask_user"]["files"],
        json!([{"name": "auth.json", "target_relpath": ".codex/auth.json", "required": true,
                "hint": "$HOME/.codex/auth.json", "accept": ".json"}])
    );
    let (code, _) = server
        .get("/v1/management/engines/script/auth/import/spec")
        .await;
    assert_eq!(code, 404);
    let (_, engines) = server.get("/v1/engines").await;
    assert_eq!(engines["engines"][0]["auth_ready"], false, "{engines}");

    // No login comes: the run waits, then fails saying how to log in.
    let job = json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "x"}});
    let lonely = server.create_job(job.clone()).await;
    let path = format!("/v1/jobs/{lonely}");
    server.wait_status(&path, &["waiting_auth"]).await;
    let (code, session) = server.get(&format!("{path}/auth/session")).await;
    assert_eq!(code, 200, "{session}");
    let auth = &session["auth_session"];
    assert_eq!(auth["engine"], "codex", "{session}");
    assert_eq!(auth["status"], "waiting_auth");
    assert_eq!(
        auth["auth_methods"],
        json!(["import", "api_key", "callback", "auth_code_or_url"])
    );
    assert_eq!(auth["login_page"], "/ui/engines/codex/models");
    assert_eq!(auth["import_files"][0]["name"], "auth.json");
    assert!(auth["expires_at"].is_string(), "{session}");
    let failed = server.wait_status(&path, &["failed"]).await;
    assert_eq!(failed["error"]["code"], "AUTH_WAIT_TIMEOUT", "{failed}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/management/engines/codex/auth/import"),
        "{failed}"
    );
    let (_, session) = server.get(&format!("{path}/auth/session")).await;
    assert_eq!(session["auth_session"], Value::Null);

    // Refused imports write nothing; the login file resumes the run.
    let rid = server.create_job(job.clone()).await;
    let path = format!("/v1/jobs/{rid}");
    server.wait_status(&path, &["waiting_auth"]).await;
    let import = format!("{path}/interaction/auth/import");
    for (files, says) in [
        (vec![("token.txt", "x")], "not a login file"),
        (vec![("auth.json", "not json")], "not valid JSON"),
        (vec![("auth.json", "")], "empty"),
        (vec![("auth.json", "{}"), ("auth.json", "{}")], "twice"),
    ] {
        let (code, refused) = server.post_form(&import, login_files(&files)).await;
        assert_eq!(code, 422, "{files:?}: {refused}");
        assert!(
            refused["detail"].as_str().unwrap().contains(says),
            "{refused}"
        );
    }
    assert!(!home.join(".codex").exists());
    let (_, still) = server.get(&path).await;
    assert_eq!(still["status"], "waiting_auth");
    let login = r#"{"OPENAI_API_KEY": "sk-from-file"}"#;
    let (code, accepted) = server
        .post_form(&import, login_files(&[("auth.json", login)]))
        .await;
    assert_eq!(code, 200, "{accepted}");
    assert_eq!(
        accepted,
        json!({"request_id": rid, "status": "queued", "accepted": true, "mode": "auth"})
    );
    let written = home.join(".codex/auth.json");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), login);
    assert_eq!(mode(&written), 0o600);
    // The CLI here only answers `--version`: the turn runs and fails for itself.
    let ended = server.wait_job(&rid).await;
    assert_ne!(ended["error"]["code"], "AUTH_WAIT_TIMEOUT", "{ended}");
    let (code, _) = server
        .post_form(&import, login_files(&[("auth.json", login)]))
        .await;
    assert_eq!(code, 409, "the run no longer waits");
    let (_, engines) = server.get("/v1/engines").await;
    assert_eq!(engines["engines"][0]["auth_ready"], true, "{engines}");

    let (code, out) = server.delete("/v1/management/engines/codex/auth").await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["removed"], json!([".codex/auth.json"]));
    assert!(!written.exists());
    let (_, engines) = server.get("/v1/engines").await;
    assert_eq!(engines["engines"][0]["auth_ready"], false, "{engines}");

    // API-key sessions: the reference's form, then the management form.
    let (code, refused) = server
        .post_json(
            "/v1/management/engines/qwen/auth/sessions",
            json!({"auth_method": "callback"}),
        )
        .await;
    assert_eq!(code, 422, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("auth/import"));
    let (code, session) = server
        .post_json(
            "/v1/engines/auth/sessions",
            json!({"engine": "qwen", "auth_method": "api_key", "transport": "oauth_proxy"}),
        )
        .await;
    assert_eq!(code, 200, "{session}");
    assert_eq!(session["status"], "waiting_user_input");
    assert_eq!(session["input_kind"], "api_key");
    assert_eq!(session["transport"], "oauth_proxy");
    let id = session["session_id"].as_str().unwrap();
    let input = format!("/v1/management/engines/qwen/auth/sessions/{id}/input");
    let (code, _) = server
        .post_json(&input, json!({"kind": "code", "value": "123"}))
        .await;
    assert_eq!(code, 422);
    let (code, done) = server
        .post_json(
            &input,
            json!({"kind": "api_key", "value": "sk-qwen-imported"}),
        )
        .await;
    assert_eq!(code, 200, "{done}");
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["input_kind"], Value::Null);
    assert!(!done.to_string().contains("sk-qwen-imported"));
    let (code, _) = server
        .post_json(&input, json!({"kind": "api_key", "value": "sk-again"}))
        .await;
    assert_eq!(code, 409, "an ended session takes no input");
    let (code, seen) = server.get(&format!("/v1/engines/auth/sessions/{id}")).await;
    assert_eq!((code, &seen["status"]), (200, &json!("succeeded")));
    let (code, _) = server
        .get(&format!("/v1/management/engines/codex/auth/sessions/{id}"))
        .await;
    assert_eq!(code, 404, "another engine's session");
    let key = home.join(".skill-runner/api-keys/qwen");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), "sk-qwen-imported");
    assert_eq!(mode(&key), 0o600);
    let (_, status) = server.get("/v1/engines/auth-status").await;
    assert_eq!(status["engines"]["qwen"]["api_key_configured"], true);
    assert_eq!(status["engines"]["qwen"]["auth_ready"], true);
    assert!(!status.to_string().contains("sk-qwen-imported"));

    let (_, other) = server
        .post_json(
            "/v1/management/engines/qwen/auth/sessions",
            json!({"auth_method": "api_key"}),
        )
        .await;
    let id = other["session_id"].as_str().unwrap();
    let (code, canceled) = server
        .post_json(
            &format!("/v1/management/engines/qwen/auth/sessions/{id}/cancel"),
            json!({}),
        )
        .await;
    assert_eq!((code, &canceled["status"]), (200, &json!("canceled")));
    assert!(!server.log().contains("sk-qwen-imported"));
}

/// With `SKILL_RUNNER_AUTH_WAIT_SECONDS=0`, a job of a logged-out engine is refused at create
/// with the ways to log it in: never accepted to wait.
#[tokio::test]
async fn without_a_login_wait_a_logged_out_engine_is_refused_at_create() {
    let agents = Agents::new();
    agents.fake_cli("npm/bin", "codex", "0.170.0");
    let dirs = TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let server = agents.server(dirs, &[("SKILL_RUNNER_AUTH_WAIT_SECONDS", "0")]);
    let job = json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "x"}});
    let (code, refused) = server.post_json("/v1/jobs", job.clone()).await;
    assert_eq!(code, 409, "{refused}");
    assert_eq!(refused["detail"]["code"], "ENGINE_NOT_LOGGED_IN");
    assert!(
        refused["detail"]["message"]
            .as_str()
            .unwrap()
            .contains("'auth.json'"),
        "{refused}"
    );
    let (_, runs) = server.get("/v1/management/runs").await;
    assert_eq!(runs["runs"], json!([]), "nothing was recorded");
    agents.login(".codex/auth.json");
    let (code, body) = server.post_json("/v1/jobs", job).await;
    assert_eq!(code, 200, "{body}");
}

/// A client that shows a redirect instead of following it, as a test reads where the sign-in
/// page sends the browser.
fn browser_like() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Where the fake issuer's sign-in page sends the browser back, for `auth_url`.
async fn signed_in_address(auth_url: &str) -> String {
    let response = browser_like().get(auth_url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 302, "{auth_url}");
    response.headers()["location"].to_str().unwrap().to_owned()
}

async fn wait_session(server: &TestServer, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, session) = server
            .get(&format!("/v1/engines/auth/oauth-proxy/sessions/{id}"))
            .await;
        if session["status"] == status || Instant::now() > deadline {
            assert_eq!(session["status"], status, "{session}");
            return session;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An OpenAI account signs codex, opencode and kilo in against a fake issuer: the address the
/// browser ended on pasted as input, the browser coming back to the callback route, and a
/// device code approved on the issuer's page; what does not fit is refused and changes
/// nothing.
#[tokio::test]
async fn an_openai_account_signs_engines_in_by_browser_or_device_code() {
    let agents = Agents::new();
    for (cli, version) in [
        ("codex", "0.170.0"),
        ("opencode", "1.18.33"),
        ("claude", "2.1.329"),
    ] {
        agents.fake_cli("global-bin", cli, version);
    }
    let issuer = common::FakeModel::start();
    let server = agents.server(
        TestDirs::new(),
        &[("SKILL_RUNNER_OPENAI_AUTH_ISSUER", issuer.base.as_str())],
    );
    let home = agents.path("agent-home");
    let start = |body: Value| {
        let server = &server;
        async move {
            server
                .post_json("/v1/engines/auth/oauth-proxy/sessions", body)
                .await
        }
    };

    // The browser: the sign-in page sends it back to the CLIs' own listener address, which it
    // cannot reach; the user pastes the address it ended on.
    let (code, session) = start(json!({"engine": "codex", "transport": "oauth_proxy",
                                       "auth_method": "callback"}))
    .await;
    assert_eq!(code, 200, "{session}");
    assert_eq!(session["status"], "waiting_user");
    assert_eq!(session["input_kind"], "text");
    let auth_url = session["auth_url"].as_str().unwrap();
    assert!(
        auth_url.starts_with(&format!("{}/oauth/authorize?", issuer.base))
            && auth_url.contains("redirect_uri=http%3A%2F%2Flocalhost%3A1455%2Fauth%2Fcallback")
            && auth_url.contains("code_challenge_method=S256"),
        "{auth_url}"
    );
    let id = session["session_id"].as_str().unwrap();
    let input = format!("/v1/engines/auth/oauth-proxy/sessions/{id}/input");
    let back = signed_in_address(auth_url).await;
    let (code, refused) = server
        .post_json(
            &input,
            json!({"kind": "text", "value": back.replace("state=", "state=x")}),
        )
        .await;
    assert_eq!(code, 422, "another sign-in's address: {refused}");
    assert!(!home.join(".codex/auth.json").exists());
    let (code, taken) = server
        .post_json(&input, json!({"kind": "text", "value": back}))
        .await;
    assert_eq!(code, 200, "{taken}");
    assert_eq!(taken["accepted"], true);
    assert_eq!(taken["session"]["status"], "succeeded");
    let login: Value =
        serde_json::from_slice(&std::fs::read(home.join(".codex/auth.json")).unwrap()).unwrap();
    assert!(
        login["tokens"]["access_token"]
            .as_str()
            .unwrap()
            .starts_with("fake-access-"),
        "{login}"
    );
    assert_eq!(mode(&home.join(".codex/auth.json")) & 0o777, 0o600);
    let (_, status) = server.get("/v1/engines/auth-status").await;
    assert_eq!(status["engines"]["codex"]["auth_ready"], true, "{status}");
    let (code, _) = server
        .post_json(&input, json!({"kind": "text", "value": "again"}))
        .await;
    assert_eq!(code, 409, "an ended session takes no more input");

    // The callback route, where the browser comes back when the service's address is set:
    // once per sign-in, without a credential.
    let (_, session) = start(json!({"engine": "opencode", "transport": "oauth_proxy",
                                    "provider_id": "openai"}))
    .await;
    let back = signed_in_address(session["auth_url"].as_str().unwrap()).await;
    let query = back.split_once('?').unwrap().1;
    let callback = server.url(&format!("/v1/engines/auth/callback/openai?{query}"));
    let response = browser_like().get(&callback).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.text().await.unwrap().contains("signed in"));
    let store: Value = serde_json::from_slice(
        &std::fs::read(home.join(".local/share/opencode/auth.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(store["openai"]["type"], "oauth", "{store}");
    assert_eq!(store["openai"]["accountId"], "acct-fake");
    let again = browser_like().get(&callback).send().await.unwrap();
    assert_eq!(
        again.status().as_u16(),
        400,
        "a sign-in's address works once"
    );
    let (_, session) = start(json!({"engine": "opencode", "transport": "oauth_proxy"})).await;
    let state = session["auth_url"]
        .as_str()
        .unwrap()
        .split("state=")
        .nth(1)
        .unwrap();
    let state = state.split('&').next().unwrap();
    let refused = browser_like()
        .get(server.url(&format!(
            "/v1/engines/auth/oauth-proxy/callback/openai?state={state}&error=access_denied"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let failed = wait_session(&server, session["session_id"].as_str().unwrap(), "failed").await;
    assert!(failed["error"].as_str().unwrap().contains("access_denied"));

    // A device code, approved on the issuer's page.
    let (code, _) = server.delete("/v1/management/engines/codex/auth").await;
    assert_eq!(code, 200);
    let (code, session) = start(json!({"engine": "codex", "transport": "oauth_proxy",
                                       "auth_method": "auth_code_or_url"}))
    .await;
    assert_eq!(code, 200, "{session}");
    assert_eq!(session["auth_url"], format!("{}/codex/device", issuer.base));
    assert_eq!(session["input_kind"], Value::Null);
    let user_code = session["user_code"].as_str().unwrap();
    let (code, _) = issuer
        .post("/__oauth/approve", json!({"user_code": user_code}))
        .await;
    assert_eq!(code, 204);
    wait_session(
        &server,
        session["session_id"].as_str().unwrap(),
        "succeeded",
    )
    .await;
    assert!(home.join(".codex/auth.json").is_file());

    // What does not fit.
    let (code, refused) = start(json!({"engine": "qwen", "transport": "oauth_proxy"})).await;
    assert_eq!(code, 422, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("api_key"));
    let (code, refused) = start(json!({"engine": "claude", "transport": "oauth_proxy"})).await;
    assert_eq!(code, 422, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("auth_code_or_url")
    );
    let (code, _) = start(json!({"engine": "codex", "transport": "cli_delegate"})).await;
    assert_eq!(code, 422);
    assert!(!home.join(".claude").exists());
}

/// With the service's address set, the sign-in page sends the browser back to its callback
/// route.
#[tokio::test]
async fn the_sign_in_comes_back_to_the_configured_address() {
    let agents = Agents::new();
    agents.fake_cli("global-bin", "codex", "0.170.0");
    let issuer = common::FakeModel::start();
    let server = agents.server(
        TestDirs::new(),
        &[
            ("SKILL_RUNNER_OPENAI_AUTH_ISSUER", issuer.base.as_str()),
            (
                "SKILL_RUNNER_OAUTH_CALLBACK_BASE_URL",
                "https://runner.example/",
            ),
        ],
    );
    let (_, session) = server
        .post_json(
            "/v1/engines/auth/oauth-proxy/sessions",
            json!({"engine": "codex", "transport": "oauth_proxy"}),
        )
        .await;
    let back = signed_in_address(session["auth_url"].as_str().unwrap()).await;
    assert!(
        back.starts_with("https://runner.example/v1/engines/auth/callback/openai?code="),
        "{back}"
    );
}

/// A Claude account signs claude in: the sign-in page ends on a page showing `code#state`,
/// which the user pastes; a code of another sign-in is refused.
#[tokio::test]
async fn a_claude_account_signs_in_with_the_code_its_page_shows() {
    let agents = Agents::new();
    agents.fake_cli("global-bin", "claude", "2.1.329");
    let issuer = common::FakeModel::start();
    let server = agents.server(
        TestDirs::new(),
        &[("SKILL_RUNNER_ANTHROPIC_AUTH_ISSUER", issuer.base.as_str())],
    );
    let (code, session) = server
        .post_json(
            "/v1/engines/auth/oauth-proxy/sessions",
            json!({"engine": "claude", "transport": "oauth_proxy",
                   "auth_method": "auth_code_or_url"}),
        )
        .await;
    assert_eq!(code, 200, "{session}");
    assert_eq!(session["provider_id"], "anthropic");
    assert_eq!(session["input_kind"], "text");
    let auth_url = session["auth_url"].as_str().unwrap();
    assert!(
        auth_url.starts_with(&format!("{}/oauth/authorize?code=true&", issuer.base)),
        "{auth_url}"
    );
    let back = url::Url::parse(&signed_in_address(auth_url).await).unwrap();
    assert_eq!(back.path(), "/oauth/code/callback");
    let query: std::collections::HashMap<String, String> =
        back.query_pairs().into_owned().collect();
    let shown = format!("{}#{}", query["code"], query["state"]);
    let input = format!(
        "/v1/engines/auth/oauth-proxy/sessions/{}/input",
        session["session_id"].as_str().unwrap()
    );
    let (code, refused) = server
        .post_json(
            &input,
            json!({"kind": "text", "value": format!("{}#other-state", query["code"])}),
        )
        .await;
    assert_eq!(code, 422, "{refused}");
    let (code, taken) = server
        .post_json(&input, json!({"kind": "text", "value": shown}))
        .await;
    assert_eq!(code, 200, "{taken}");
    assert_eq!(taken["session"]["status"], "succeeded");
    let file = agents.path("agent-home/.claude/.credentials.json");
    let login: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(
        login["claudeAiOauth"]["accessToken"]
            .as_str()
            .unwrap()
            .starts_with("fake-access-"),
        "{login}"
    );
    assert!(login["claudeAiOauth"]["expiresAt"].as_u64().unwrap() > 1_700_000_000_000);
    assert_eq!(mode(&file) & 0o777, 0o600);
    let (_, status) = server.get("/v1/engines/auth-status").await;
    assert_eq!(status["engines"]["claude"]["auth_ready"], true, "{status}");
}
