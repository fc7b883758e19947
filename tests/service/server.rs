//! The binary as an operator meets it: start-up, configuration errors, shutdown, logs, docs.

use skill_runner_test_support as common;

use std::process::{Command, Stdio};

use common::{TestDirs, TestServer, copy_bundled_skills};
use serde_json::{Value, json};

fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let dirs = TestDirs::new();
    Command::new(env!("CARGO_BIN_EXE_skill-runner"))
        .args(args)
        .env("PORT", "0")
        .env("SKILL_RUNNER_DATA_DIR", &dirs.data)
        .env("SKILL_RUNNER_SKILLS_DIR", &dirs.skills)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn configuration_errors_stop_startup_with_one_line() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let unwritable = file.path().join("data");
    let cases = [
        (
            vec![("PORT", "eighty")],
            "PORT: 'eighty' is not a port number",
        ),
        (
            vec![("SKILL_RUNNER_BIND", "somewhere")],
            "SKILL_RUNNER_BIND: 'somewhere' is not an address",
        ),
        (
            vec![("SKILL_RUNNER_DATA_DIR", unwritable.to_str().unwrap())],
            "SKILL_RUNNER_DATA_DIR: cannot create directory",
        ),
        (
            vec![("LOG_FORMAT", "yaml")],
            "LOG_FORMAT: 'yaml' is not a log format",
        ),
        (
            vec![
                ("UI_BASIC_AUTH_ENABLED", "true"),
                ("UI_BASIC_AUTH_USERNAME", "admin"),
            ],
            "UI_BASIC_AUTH_PASSWORD: must be set when UI_BASIC_AUTH_ENABLED is true",
        ),
        (
            vec![("SKILL_RUNNER_API_TOKENS", "short")],
            "SKILL_RUNNER_API_TOKENS: a token must have at least 16 characters",
        ),
    ];
    for (i, (env, expected)) in cases.into_iter().enumerate() {
        // `serve` is also the default with no subcommand; both paths read the same configuration.
        let args: &[&str] = if i % 2 == 0 { &[] } else { &["serve"] };
        let out = run_with_env(args, &env);
        assert_eq!(out.status.code(), Some(2), "{env:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with("skill-runner: configuration error: ") && stderr.contains(expected),
            "{env:?}: {stderr}"
        );
    }
}

#[test]
fn every_setting_is_also_a_flag_that_wins_and_help_lists_the_variables() {
    let out = run_with_env(
        &["serve", "--max-queue-size=0"],
        &[("SKILL_RUNNER_MAX_QUEUE_SIZE", "5")],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.trim(),
        "skill-runner: configuration error: --max-queue-size: '0' is not a positive whole number"
    );
    let out = run_with_env(&["serve", "--no-such-setting"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("command line: unexpected argument '--no-such-setting'"),
        "{stderr}"
    );

    let out = run_with_env(
        &["serve", "--help"],
        &[("UI_BASIC_AUTH_PASSWORD", "hunter2-secret")],
    );
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    for variable in [
        "[env: SKILL_RUNNER_MAX_QUEUE_SIZE]",
        "[env: OPENSKILL_TIMEOUT_MS]",
        "UI_BASIC_AUTH_PASSWORD",
    ] {
        assert!(help.contains(variable), "{variable} in {help}");
    }
    assert!(!help.contains("hunter2"), "no value is shown");

    // `mcp` takes the same settings, and its help says it is `mcp`.
    let out = run_with_env(&["mcp", "--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("skill-runner mcp"), "{help}");
    assert!(help.contains("MCP server over stdin and stdout"), "{help}");
    assert!(
        help.contains("[env: SKILL_RUNNER_MAX_QUEUE_SIZE]"),
        "{help}"
    );
    // Settings before any subcommand are serve's.
    let out = run_with_env(&["--max-queue-size=0"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("--max-queue-size: '0'"), "{stderr}");
}

/// `docs/configuration.md` and the settings agree: every variable `serve --help` names has a
/// row there showing its default, and every variable a row names is one `serve --help` knows.
#[test]
fn the_configuration_page_lists_every_setting_with_its_default() {
    let out = run_with_env(&["serve", "--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    // The table's rows: the names in the first column, the rest of the row.
    let rows: Vec<(Vec<String>, &str)> = page
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.strip_prefix("| `")?.splitn(2, " | ").collect();
            let names = cells[0]
                .split('`')
                .filter(|n| {
                    !n.is_empty()
                        && n.chars()
                            .all(|c| c.is_ascii_uppercase() || "_<>".contains(c))
                })
                .map(str::to_owned)
                .collect();
            Some((names, *cells.get(1)?))
        })
        .collect();
    assert!(rows.len() > 30, "the table was not found: {page}");
    // Each `[env: NAME]` with the `[default: VALUE]` that may follow it.
    let mut settings = Vec::new();
    let lines: Vec<&str> = help.lines().map(str::trim).collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = line
            .strip_prefix("[env: ")
            .and_then(|l| l.strip_suffix(']'))
        {
            let default = lines
                .get(i + 1)
                .and_then(|l| l.strip_prefix("[default: "))
                .and_then(|l| l.strip_suffix(']'));
            settings.push((name.to_owned(), default));
        }
    }
    assert!(settings.len() > 40, "{help}");
    for (name, default) in &settings {
        let row = rows.iter().find(|(names, _)| names.contains(name));
        let Some((_, rest)) = row else {
            panic!("{name} has no row in docs/configuration.md");
        };
        // A default that follows the machine (slots per CPU) is given by its rule.
        if let Some(default) = default.filter(|_| !rest.contains("CPU count")) {
            assert!(
                rest.contains(&format!("`{default}`")),
                "{name}: the default `{default}` is not in its row: {rest}"
            );
        }
    }
    for (names, _) in &rows {
        for name in names {
            let known = settings.iter().any(|(n, _)| n == name)
                || help.contains(name.as_str())
                || help.contains(&name.replace("_*", "_"));
            assert!(
                known,
                "docs/configuration.md names {name}, which serve --help does not"
            );
        }
    }
}

#[test]
fn unknown_subcommand_is_refused() {
    let out = run_with_env(&["frobnicate"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("unrecognized subcommand")
    );
}

/// The top-level help names the listening settings, and they work before any subcommand.
#[tokio::test]
async fn the_top_level_help_names_host_and_port_and_they_work_there() {
    let out = run_with_env(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("--port <PORT>") && help.contains("--host <HOST>"),
        "{help}"
    );
    let dirs = TestDirs::new();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_skill-runner"));
    cmd.args(["--host", "127.0.0.1", "--port", "0"])
        .env_remove("PORT")
        .env_remove("SKILL_RUNNER_BIND")
        .env("SKILL_RUNNER_DATA_DIR", &dirs.data)
        .env("SKILL_RUNNER_SKILLS_DIR", &dirs.skills)
        .current_dir(&dirs.root)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let (mut child, url, _log) = common::spawn_listening(cmd);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let ping = common::client()
        .get(format!("{url}/v1/system/ping"))
        .send()
        .await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(ping.unwrap().status().is_success());
    let out = run_with_env(&["--host", "nowhere"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("'nowhere' is not an IP address")
    );
}

#[tokio::test]
async fn serves_ping_request_ids_openapi_and_docs() {
    let server = TestServer::start();
    let resp = server
        .client
        .get(server.url("/v1/system/ping"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");

    // A client-supplied id is kept, on errors too.
    let resp = server
        .client
        .get(server.url("/v1/skills/none"))
        .header("x-request-id", "trace-me-123")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    assert_eq!(resp.headers()["x-request-id"], "trace-me-123");

    let (code, body) = server.get("/no/such/route").await;
    assert_eq!((code, body), (404, json!({"detail": "Not Found"})));

    let (code, doc) = server.get("/openapi.json").await;
    assert_eq!(code, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/v1/skills",
        "/v1/skills/{skill_id}",
        "/v1/skill-packages/install",
        "/v1/skill-packages/{request_id}",
        "/v1/system/ping",
    ] {
        assert!(paths.contains_key(path), "{path} documented");
    }
    // The routes of the reference's v0.7 are documented with an example.
    for (method, path) in [
        ("get", "/v1/jobs/{request_id}/events/history"),
        ("post", "/v1/jobs/{request_id}/interaction/reply/files"),
        ("post", "/v1/system/handshake"),
        ("get", "/v1/runtime/network/client-address"),
        ("get", "/v1/management/system/settings"),
        ("put", "/v1/management/system/settings"),
        ("get", "/v1/management/system/logs/query"),
        ("post", "/v1/management/system/reset-data"),
        ("get", "/v1/management/runtime-options"),
        ("get", "/v1/management/engines/{engine}/auth/import/spec"),
        ("post", "/v1/management/engines/{engine}/auth/import"),
        ("delete", "/v1/management/engines/{engine}/auth"),
        ("post", "/v1/management/engines/{engine}/auth/sessions"),
        (
            "post",
            "/v1/management/engines/{engine}/auth/sessions/{session_id}/input",
        ),
        ("get", "/v1/jobs/{request_id}/auth/session"),
        ("post", "/v1/jobs/{request_id}/interaction/auth/import"),
        ("get", "/v1/management/mcp/servers"),
        ("put", "/v1/management/mcp/servers/{server_id}"),
        ("delete", "/v1/management/mcp/servers/{server_id}"),
    ] {
        let operation = &paths[path][method];
        assert!(operation.is_object(), "{method} {path} documented");
        assert!(
            operation.to_string().contains("\"example\""),
            "{method} {path} has an example: {operation}"
        );
    }
    let form = &paths["/v1/skill-packages/install"]["post"]["requestBody"]["content"]["multipart/form-data"];
    assert!(form.is_object(), "install documents its multipart form");
    // Every schema the document refers to is in it.
    fn refs(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(r)) = map.get("$ref") {
                    out.push(r.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty());
    for r in found {
        let name = r
            .strip_prefix("#/components/schemas/")
            .expect("a schema ref");
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{r} is not in the document"
        );
    }

    let resp = server.client.get(server.url("/docs")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let html = resp.text().await.unwrap();
    assert!(
        html.contains("<html") && html.contains("/static/docs.js"),
        "docs load the viewer from this service: {html}"
    );
    let script = server
        .client
        .get(server.url("/static/docs.js"))
        .send()
        .await
        .unwrap();
    assert!(
        script
            .text()
            .await
            .unwrap()
            .contains("url: '/openapi.json'"),
        "the viewer reads this service's document (tests/console.rs renders it in a browser)"
    );
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully_and_data_survives_restart() {
    let dirs = TestDirs::new();
    let mut server = TestServer::start_with(dirs.clone(), &[]);
    let status = server
        .install_and_wait(common::skill_package("keep", "1.0.0").zip())
        .await;
    let rid = status["request_id"].as_str().unwrap().to_owned();
    let exit = server.terminate();
    assert!(exit.success(), "clean exit on SIGTERM: {exit:?}");
    server.wait_log("shutting down").await;
    assert!(dirs.data.join("skill_runner.db").is_file());

    let server = TestServer::start_with(dirs, &[]);
    let (code, again) = server.get(&format!("/v1/skill-packages/{rid}")).await;
    assert_eq!(code, 200);
    assert_eq!(again, status, "install records survive a restart unchanged");
    let (_, skill) = server.get("/v1/skills/keep").await;
    assert_eq!(skill["health"], "healthy");
}

/// One access line per request (its method, path and `http_request_id` said once, in its
/// span; the time to 0.01 ms), and the request id the API shows finds the run's moves, a
/// failure's with its code and message.
#[tokio::test]
async fn json_logs_carry_the_request_id() {
    let server = TestServer::with_skills(
        &[common::probe_skill("probe", None)],
        &[("LOG_FORMAT", "json"), ("LOG_LEVEL", "debug")],
    );
    let lines = || -> Vec<Value> {
        server
            .log()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    };
    let resp = server
        .client
        .get(server.url("/v1/skills"))
        .header("x-request-id", "log-probe-42")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // The access log line is written as the response completes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let access = loop {
        let hit = lines().into_iter().find(|l| {
            l["span"]["http_request_id"] == "log-probe-42"
                && l["span"]["path"] == "/v1/skills"
                && l["target"] == "skill_runner::access"
        });
        if let Some(hit) = hit {
            break hit;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no log line with the request id:\n{}",
            server.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(access["status"], 200, "{access}");
    assert!(
        access.get("path").is_none() && access.get("method").is_none(),
        "{access}"
    );
    let ms = access["ms"].as_f64().unwrap();
    assert_eq!((ms * 100.0).round() / 100.0, ms, "{access}");
    assert!(
        access["span"].get("otel.name").is_none(),
        "no traces exported: {access}"
    );

    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "exit"}}))
        .await;
    let status = server.wait_job(&rid).await;
    let run_id = status["run_id"].as_str().unwrap();
    let moves: Vec<Value> = lines()
        .into_iter()
        .filter(|l| l["request_id"] == rid.as_str() && l["message"] == "run moved")
        .collect();
    let states: Vec<&str> = moves.iter().map(|l| l["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["queued", "running", "failed"], "{moves:?}");
    assert!(moves.iter().all(|l| l["run_id"] == run_id), "{moves:?}");
    let failed = &moves[2];
    assert_eq!(failed["level"], "WARN", "{failed}");
    assert_eq!(failed["code"], "SKILL_EXITED", "{failed}");
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("exited with code 3"),
        "{failed}"
    );
}

#[tokio::test]
async fn bundled_skills_are_valid() {
    let dirs = TestDirs::new();
    copy_bundled_skills(&dirs.skills);
    let server = TestServer::start_with(dirs, &[]);
    let (_, list) = server.get("/v1/skills").await;
    let list = list.as_array().unwrap();
    assert!(!list.is_empty());
    for skill in list {
        assert_eq!(skill["health"], "healthy", "{skill}");
    }
    let (_, stats) = server.get("/v1/skills/text-stats").await;
    assert_eq!(
        stats["entrypoint"]["script"],
        json!(["python3", "scripts/main.py"])
    );
    assert!(
        stats["effective_engines"]
            .as_array()
            .unwrap()
            .contains(&json!("script"))
    );
    assert_eq!(stats["artifacts"][0]["pattern"], "report.md");
}

/// With tokens configured, every route of the OpenAPI document, every alias and `/docs`
/// answer 401 without one (or with a wrong one) and work with one or with the console's Basic
/// Auth; only the probes and a sign-in's callback stay open.
#[tokio::test]
async fn api_tokens_close_every_route_but_the_probes() {
    let token = "tok-5b1f0c9e8d7a6b5c";
    let server = TestServer::start_with(
        TestDirs::new(),
        &[
            (
                "SKILL_RUNNER_API_TOKENS",
                &format!("other-token-0000000000,{token}"),
            ),
            ("UI_BASIC_AUTH_ENABLED", "true"),
            ("UI_BASIC_AUTH_USERNAME", "admin"),
            ("UI_BASIC_AUTH_PASSWORD", "console-pass"),
        ],
    );
    let client = common::client();
    let bearer = format!("Bearer {token}");
    let (code, doc) = {
        let r = client
            .get(server.url("/openapi.json"))
            .header("authorization", &bearer)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    assert_eq!(code, 200);
    let mut routes: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase(), path.clone()));
        }
    }
    assert!(routes.len() > 30, "{routes:?}");
    for (method, path) in [
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/v1/temp-skill-runs/{request_id}"),
        ("POST", "/v1/temp-skill-runs/{request_id}/upload"),
        ("GET", "/v1/temp-skill-runs/{request_id}/events"),
        ("GET", "/v1/management/runs/{request_id}/events"),
        ("POST", "/skills/{skill_id}:invoke"),
        ("POST", "/v1/skills/{skill_id}:invoke"),
        ("GET", "/v1/jobs/{request_id}/artifacts/a/b.txt"),
        ("GET", "/no/such/route"),
    ] {
        routes.push((method.into(), path.into()));
    }
    let concrete = |path: &str| {
        let path = regex::Regex::new(r"\{[^}]+\}")
            .unwrap()
            .replace_all(path, "nothing");
        server.url(&path)
    };
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            "admin:console-pass"
        )
    );
    for (method, path) in &routes {
        let send = |auth: Option<&str>| {
            let mut request = client.request(method.parse().unwrap(), concrete(path));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            async move { request.send().await.unwrap() }
        };
        // The probes, open to orchestrators and load balancers.
        match path.as_str() {
            "/v1/system/ping" => {
                assert_eq!(send(None).await.status().as_u16(), 204);
                continue;
            }
            "/healthz" | "/readyz" => {
                assert_eq!(send(None).await.status().as_u16(), 200, "{path}");
                continue;
            }
            // A sign-in's callback, admitted by its one-time state (a browser redirect
            // carries no credential): without a known state it changes nothing.
            "/v1/engines/auth/callback/openai" | "/v1/engines/auth/oauth-proxy/callback/openai" => {
                let answer = send(None).await;
                assert_eq!(answer.status().as_u16(), 400, "{path}");
                assert!(answer.text().await.unwrap().contains("Missing state"));
                continue;
            }
            _ => {}
        }
        for refused in [
            None,
            Some("Bearer tok-5b1f0c9e8d7a6b5"),
            Some("Bearer "),
            Some(token),
        ] {
            let answer = send(refused).await;
            assert_eq!(
                answer.status().as_u16(),
                401,
                "{method} {path} with {refused:?}"
            );
            assert_eq!(
                answer.headers()["www-authenticate"],
                "Bearer realm=\"skill-runner\""
            );
            let body: Value = answer.json().await.unwrap();
            assert!(
                body["detail"].as_str().unwrap().contains("Bearer"),
                "{body}"
            );
        }
        for accepted in [&bearer, &bearer.replace("Bearer", "bearer"), &basic] {
            let code = send(Some(accepted)).await.status().as_u16();
            assert_ne!(code, 401, "{method} {path} with {accepted}");
        }
    }
}

/// With tokens and no Basic Auth, a browser opening the console is sent to a login page; a
/// configured token becomes an `HttpOnly`, `SameSite=Strict` cookie that opens the console (and
/// the API) from then on; a wrong one is refused on the page; the login returns only to this
/// service's pages; logging out forgets the cookie. Unknown console pages are whole pages.
#[tokio::test]
async fn a_browser_logs_in_to_the_console_with_a_token() {
    let token = "tok-7e3a9c1d5f2b4e6a";
    let server = TestServer::start_with(TestDirs::new(), &[("SKILL_RUNNER_API_TOKENS", token)]);
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let open = |path: &str, cookie: Option<&str>| {
        let mut request = browser.get(server.url(path)).header("accept", "text/html");
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send()
    };
    let r = open("/ui/runs?lang=en", None).await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(
        r.headers()["location"],
        "/ui/login?next=/ui/runs%3Flang%3Den"
    );
    let r = open("/ui/login?next=/ui/runs", None).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let page = r.text().await.unwrap();
    assert!(
        page.contains(r#"name="token""#) && page.contains("/static/console.css"),
        "{page}"
    );
    assert_eq!(
        open("/static/console.css", None)
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    // The API still answers JSON 401 to a client without a token.
    let r = browser.get(server.url("/v1/skills")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);

    let login = |token: &str, next: &str| {
        browser
            .post(server.url("/ui/login"))
            .header("origin", server.url("").trim_end_matches('/'))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}&next={next}"))
            .send()
    };
    let r = login("not-the-token-000000", "/ui/runs").await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    assert!(r.text().await.unwrap().contains(r#"id="login-error""#));
    let r = login(token, "https://elsewhere.example/ui").await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(
        r.headers()["location"],
        "/ui",
        "never away from this service"
    );
    let r = login(token, "/ui/runs").await.unwrap();
    assert_eq!(r.headers()["location"], "/ui/runs");
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in [
        "skill_runner_token=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
        "Secure",
    ] {
        assert!(set.contains(attribute), "{attribute} in {set}");
    }
    let cookie = set.split(';').next().unwrap().to_owned();
    let r = open("/ui/runs", Some(&cookie)).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = browser
        .get(server.url("/v1/skills"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // A console page that does not exist is a whole page, in the console's layout.
    let r = open("/ui/no/such/page", Some(&cookie)).await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let page = r.text().await.unwrap();
    assert!(
        page.contains(r#"id="error-page""#) && page.contains(r#"<nav id="site-nav""#),
        "{page}"
    );
    assert!(
        page.contains("There is no console page at /ui/no/such/page"),
        "{page}"
    );

    let r = browser
        .post(server.url("/ui/logout"))
        .header("origin", server.url("").trim_end_matches('/'))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let cleared = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.contains("skill_runner_token=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
}
