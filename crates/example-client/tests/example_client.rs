//! The example client against the real service, each its own process: the client knows the
//! service only through its HTTP API.

use skill_runner_test_support as common;

use common::browser::{self, Browser};
use common::example::ExampleClient;
use common::netns::{Isolation, isolate};
use common::{TestDirs, TestServer, client, copy_bundled_skills};
use fantoccini::Locator;
use serde_json::Value;

/// The service with the bundled skills.
fn service() -> TestServer {
    let dirs = TestDirs::new();
    copy_bundled_skills(&dirs.skills);
    TestServer::start_with(dirs, &[])
}

/// A client that does not follow redirects (the tests look at them).
fn browser_like() -> reqwest::Client {
    let _ = client();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Submits a run form of `skill` through the client.
async fn submit(
    http: &reqwest::Client,
    client: &ExampleClient,
    skill: &str,
    form: reqwest::multipart::Form,
) -> reqwest::Response {
    http.post(client.url(&format!("/skills/{skill}/run")))
        .multipart(form)
        .send()
        .await
        .unwrap()
}

/// The form of a skill that takes an inline string, an integer parameter and an uploaded file:
/// its fields come from the schemas, a submission creates the run and uploads the file under its
/// input key, and the run succeeds on the service; the recording keeps the create body and the
/// upload's hash. Mistakes come back naming their field, and nothing is created.
#[tokio::test]
async fn a_generated_form_creates_the_run_and_uploads_its_file() {
    let server = service();
    let client = ExampleClient::start(&server.base, &[]);
    let http = browser_like();

    let page = http
        .get(client.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for skill in ["hello", "pick-one", "text-stats"] {
        assert!(
            page.contains(&format!("href=\"/skills/{skill}/run\"")),
            "{page}"
        );
    }
    let form = http
        .get(client.url("/skills/text-stats/run"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for control in [
        r#"name="file.document" type="file""#,
        r#"name="input.text" type="text""#,
        r#"name="parameter.top_n" type="number" step="1""#,
        r#"<option value="script">script</option>"#,
    ] {
        assert!(form.contains(control), "{control} missing in\n{form}");
    }
    // The skill's own default engine comes first, so it is the one selected.
    let picker = form
        .split(r#"<select id="run-engine" name="engine" required>"#)
        .nth(1)
        .unwrap();
    assert!(
        picker
            .trim_start()
            .starts_with(r#"<option value="script">"#),
        "{picker}"
    );

    let wrong = reqwest::multipart::Form::new()
        .text("engine", "script")
        .text("parameter.top_n", "three");
    let refused = submit(&http, &client, "text-stats", wrong).await;
    assert_eq!(refused.status().as_u16(), 422);
    let body = refused.text().await.unwrap();
    assert!(
        body.contains("parameter.top_n must be an integer, not &#39;three&#39;"),
        "{body}"
    );
    let (_, runs) = server.get("/v1/management/runs").await;
    assert_eq!(
        runs["runs"].as_array().unwrap().len(),
        0,
        "nothing was created"
    );

    let text = b"the cat saw the dog\nthe end\n".to_vec();
    let good = reqwest::multipart::Form::new()
        .text("engine", "script")
        .text("execution_mode", "auto")
        .text("parameter.top_n", "2")
        .part(
            "file.document",
            reqwest::multipart::Part::bytes(text.clone()).file_name("story.txt"),
        );
    let created = submit(&http, &client, "text-stats", good).await;
    assert_eq!(created.status().as_u16(), 303);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    let rid = location.strip_prefix("/runs/").unwrap().to_owned();
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    let data = &result["result"]["data"];
    assert_eq!(data["word_count"], 7, "{result}");
    assert_eq!(
        data["top_words"][0],
        serde_json::json!({"word": "the", "count": 3})
    );
    assert_eq!(data["top_words"].as_array().unwrap().len(), 2);

    let recording: Value = serde_json::from_slice(
        &std::fs::read(client.recordings.path().join(format!("{rid}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(recording["create"]["skill_id"], "text-stats");
    assert_eq!(recording["create"]["parameter"]["top_n"], 2);
    let upload = &recording["uploads"][0];
    assert_eq!(upload["key"], "document");
    assert_eq!(upload["name"], "story.txt");
    assert_eq!(upload["size"], text.len());
    assert_eq!(
        upload["sha256"],
        "9b20c7221fdc0f39832c5d75b24fea7f74757ef40df800454d1181faf4b50d19"
    );

    // The result page: the data, and the artifact and bundle downloads through the client.
    let get = |path: String| {
        let http = http.clone();
        let url = client.url(&path);
        async move { http.get(url).send().await.unwrap() }
    };
    let page = get(format!("/runs/{rid}/result"))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains(r#"data-status="success""#), "{page}");
    assert!(page.contains("&#34;word_count&#34;: 7"), "{page}");
    let link = format!(r#"href="/runs/{rid}/artifacts/report.md""#);
    assert!(page.contains(&link), "{page}");
    let report = get(format!("/runs/{rid}/artifacts/report.md")).await;
    assert_eq!(report.status().as_u16(), 200);
    assert!(report.text().await.unwrap().contains("the"), "the report");
    let bundle = get(format!("/runs/{rid}/bundle")).await;
    assert_eq!(bundle.headers()["content-type"], "application/zip");
    assert!(bundle.bytes().await.unwrap().starts_with(b"PK"));
    let missing = get(format!("/runs/{rid}/artifacts/nope.md")).await;
    assert_eq!(missing.status().as_u16(), 404);

    // The recording lists the run and holds its result, once however often it is shown.
    get(format!("/runs/{rid}/result")).await;
    let list = get("/recordings".into()).await.text().await.unwrap();
    assert!(
        list.contains(&format!(r#"href="/recordings/{rid}""#)),
        "{list}"
    );
    let recording: Value = get(format!("/api/recordings/{rid}"))
        .await
        .json()
        .await
        .unwrap();
    let results: Vec<&Value> = recording["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "result")
        .collect();
    assert_eq!(results.len(), 1, "{recording}");
    assert_eq!(results[0]["value"]["data"]["word_count"], 7);
    assert_eq!(
        get("/api/recordings/nope".into()).await.status().as_u16(),
        404
    );
}

/// A backend that cannot be reached is a clear page with a 502, not a stack trace.
/// A page on another site cannot make the operator's browser create or cancel runs through the
/// client, and the client's pages carry the console's Content-Security-Policy.
#[tokio::test]
async fn cross_site_posts_are_refused_and_pages_carry_the_policy() {
    let server = service();
    let client = ExampleClient::start(&server.base, &[]);
    let http = browser_like();
    let page = http.get(client.url("/")).send().await.unwrap();
    let policy = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        policy.contains("frame-ancestors 'none'") && policy.contains("script-src 'self'"),
        "{policy}"
    );
    let elsewhere: [(&str, &str); 3] = [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("origin", "http://evil.example"),
    ];
    for (name, value) in elsewhere {
        let form = reqwest::multipart::Form::new().text("input.name", "Ada");
        let answer = http
            .post(client.url("/skills/hello/run"))
            .header(name, value)
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403, "{name}: {value}");
        let answer = http
            .post(client.url("/runs/any/cancel"))
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403, "{name}: {value}");
    }
    let (_, runs) = server.get("/v1/management/runs").await;
    assert_eq!(
        runs["runs"],
        serde_json::json!([]),
        "nothing was created: {runs}"
    );
    // Its own pages' posts reach the form (which answers for what the form holds).
    let form = reqwest::multipart::Form::new().text("input.name", "Ada");
    let answer = http
        .post(client.url("/skills/hello/run"))
        .header("sec-fetch-site", "same-origin")
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_ne!(answer.status(), 403);
}

#[tokio::test]
async fn an_unreachable_backend_is_a_clear_page() {
    let client = ExampleClient::start("http://127.0.0.1:9", &[]);
    let response = browser_like().get(client.url("/")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 502);
    let page = response.text().await.unwrap();
    assert!(
        page.contains("the service at http://127.0.0.1:9/ cannot be reached")
            && page.contains("Connection refused"),
        "{page}"
    );
    assert!(!page.contains("panicked") && !page.contains("backtrace"));
}

/// An interactive run through the client: its page, the question rendered from the pending
/// question, the reply through the client's proxy, the output through the client's event
/// stream, and the recording of every event and the reply.
#[tokio::test]
async fn an_interactive_run_is_answered_and_recorded_through_the_client() {
    let server = service();
    let client = ExampleClient::start(&server.base, &[]);
    let http = browser_like();
    let form = reqwest::multipart::Form::new()
        .text("engine", "script")
        .text("execution_mode", "interactive");
    let created = submit(&http, &client, "pick-one", form).await;
    assert_eq!(created.status().as_u16(), 303);
    let rid = created.headers()["location"].to_str().unwrap()["/runs/".len()..].to_owned();
    server
        .wait_status(&format!("/v1/jobs/{rid}"), &["waiting_user"])
        .await;
    let get = |path: String| {
        let http = http.clone();
        let url = client.url(&path);
        async move { http.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let page = get(format!("/runs/{rid}")).await;
    assert!(page.contains(r#"data-status="waiting_user""#), "{page}");
    assert!(page.contains(&format!(r#"data-events="/api/runs/{rid}/events""#)));
    let question = get(format!("/runs/{rid}/question")).await;
    assert!(question.contains("Which colour do you like?"), "{question}");
    assert!(question.contains(&format!(r#"hx-post="/api/runs/{rid}/reply""#)));

    // The client's stream is the backend's, passed through.
    let events = get(format!("/api/runs/{rid}/events")).await;
    assert!(
        events.contains("event: stderr") && events.contains("turn 1: 0 answer(s)"),
        "{events}"
    );
    assert!(
        events.contains(r#"data: {"reason":"waiting_user"}"#),
        "{events}"
    );

    let replied = http
        .post(client.url(&format!("/api/runs/{rid}/reply")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("interaction_id=1&kind=choose_one&choice=%22green%22")
        .send()
        .await
        .unwrap();
    assert_eq!(replied.status().as_u16(), 200);
    assert_eq!(replied.headers()["hx-trigger"], "run-resumed");
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["result"]["data"]["choice"], "green");
    // A second reply is refused by the service, and the client says why.
    let again = http
        .post(client.url(&format!("/api/runs/{rid}/reply")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("interaction_id=1&kind=choose_one&choice=%22red%22")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 409);
    assert!(
        again
            .text()
            .await
            .unwrap()
            .contains("the service answered 409")
    );

    let info = get(format!("/runs/{rid}/info")).await;
    assert!(
        info.contains(r#"data-status="succeeded""#) && info.contains("result-link"),
        "{info}"
    );
    let log =
        std::fs::read_to_string(client.recordings.path().join(format!("{rid}.jsonl"))).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap(),
                l["value"]["event"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(kinds.first(), Some(&("event", "snapshot")), "{kinds:?}");
    assert!(kinds.contains(&("event", "stdout")) && kinds.contains(&("event", "end")));
    let reply = lines.iter().find(|l| l["kind"] == "reply").unwrap();
    assert_eq!(
        reply["value"],
        serde_json::json!({"interaction_id": 1, "response": "green"})
    );
}

/// Picks `value` in the select named `name` by typing it, as a keyboard user does (a click on
/// an option opens Chromium's picker, which a later focus change cancels), and checks it took.
async fn choose(browser: &Browser, name: &str, value: &str) {
    let select = browser.wait_for(&format!("select[name={name}]")).await;
    select.send_keys(value).await.unwrap();
    let chosen = browser
        .client
        .execute(
            "return arguments[0].value",
            vec![serde_json::to_value(&select).unwrap()],
        )
        .await
        .unwrap();
    assert_eq!(chosen, value, "the select {name} did not take {value}");
}

/// In a browser, against the real service and the real client (each its own process, in the
/// test's loopback-only namespace): the generated form of `text-stats` filled with an inline
/// string, an integer parameter and a file → the run page shows the output → the result page
/// shows the data and the artifact download; `pick-one`'s question answered on its run page; a
/// required field left empty refused with its name; the recording replayed event by event.
#[test]
fn browser_runs_skills_from_their_forms_and_replays_the_recording() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_runs_skills_from_their_forms_and_replays_the_recording"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let server = service();
        let client = ExampleClient::start(&server.base, &[]);
        let origin = client.url("");
        let upload = tempfile::tempdir().unwrap();
        let story = upload.path().join("story.txt");
        std::fs::write(&story, "the cat saw the dog\nthe end\n").unwrap();

        let browser = Browser::start().await;
        browser.goto(&client.url("/")).await;
        browser
            .wait_for("tr[data-skill-id=text-stats] a.run")
            .await
            .click()
            .await
            .unwrap();
        let fill = |css: &'static str, text: String| {
            let browser = &browser;
            async move {
                let field = browser.wait_for(css).await;
                field.clear().await.unwrap();
                field.send_keys(&text).await.unwrap();
            }
        };
        fill(
            "input[name='input.text']",
            "ignored when a file is given".into(),
        )
        .await;
        fill("input[name='parameter.top_n']", "2".into()).await;
        fill(
            "input[name='file.document']",
            story.to_string_lossy().into_owned(),
        )
        .await;
        choose(&browser, "engine", "script").await;
        browser.screenshot("client-form").await;
        browser.wait_for("#start-run").await.click().await.unwrap();
        browser.wait_for("#run-info").await;
        browser
            .wait_for("#run-info[data-status=succeeded] #result-link")
            .await
            .click()
            .await
            .unwrap();
        browser.wait_text("#result-data", "\"word_count\": 7").await;
        let download = browser
            .wait_for("#artifacts a[href$='/artifacts/report.md']")
            .await;
        assert_eq!(download.text().await.unwrap(), "artifacts/report.md");
        browser.screenshot("client-result").await;
        browser.assert_clean(&origin).await;

        // An interactive skill: the question is answered on the run page.
        browser.goto(&client.url("/skills/pick-one/run")).await;
        choose(&browser, "engine", "script").await;
        choose(&browser, "execution_mode", "interactive").await;
        browser.wait_for("#start-run").await.click().await.unwrap();
        browser
            .wait_text("#question .prompt", "Which colour do you like?")
            .await;
        browser
            .wait_text("#stderr", "turn 1: 0 answer(s) so far")
            .await;
        browser.screenshot("client-run-question").await;
        browser
            .wait_for("#question button[name=choice][value='\"blue\"']")
            .await
            .click()
            .await
            .unwrap();
        browser.wait_for("#run-info[data-status=succeeded]").await;
        browser.wait_text("#stdout", "\"choice\": \"blue\"").await;
        let url = browser.client.current_url().await.unwrap();
        let rid = url.path().rsplit('/').next().unwrap().to_owned();
        browser.assert_clean(&origin).await;

        // A required field left empty is refused, named, before anything is sent.
        browser.goto(&client.url("/skills/hello/run")).await;
        browser.wait_for("#start-run").await.click().await.unwrap();
        browser
            .wait_text(
                "#form-errors li[data-field='input.name']",
                "input.name is required",
            )
            .await;
        let (_, runs) = server.get("/v1/management/runs").await;
        assert_eq!(
            runs["runs"].as_array().unwrap().len(),
            2,
            "nothing more was created"
        );

        // The interactive run's recording replays one entry at a time.
        browser.goto(&client.url("/recordings")).await;
        browser
            .wait_for(&format!("tr[data-request-id='{rid}'] a"))
            .await
            .click()
            .await
            .unwrap();
        browser.wait_text("#replay-position", "1 / ").await;
        browser.wait_text("#replay-position", "create").await;
        let next = browser.wait_for("#replay-next").await;
        next.click().await.unwrap();
        browser
            .wait_text("#replay-position", "event: snapshot")
            .await;
        let mut seen = Vec::new();
        for _ in 0..40 {
            next.click().await.unwrap();
            let position = browser
                .client
                .find(Locator::Css("#replay-position"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            if seen.last() == Some(&position) {
                break;
            }
            seen.push(position);
        }
        assert!(seen.iter().any(|p| p.ends_with("reply")), "{seen:?}");
        assert!(
            seen.iter().any(|p| p.ends_with("event: stdout")),
            "{seen:?}"
        );
        browser
            .wait_text("#replay-stdout", "\"choice\": \"blue\"")
            .await;
        browser.screenshot("client-replay").await;
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// The backend restarts while a run's page is open in the client: the page's stream, passed
/// through the client, reconnects from its offsets once the service is back and follows the
/// run to its end (the restart ended it), without repeating a line it had.
#[test]
fn browser_follows_a_run_across_a_backend_restart() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_follows_a_run_across_a_backend_restart"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        // The service comes back on the same port, so the client's backend URL stays valid.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
            .to_string();
        let dirs = TestDirs::new();
        common::talker_skill("talker").write_into(&dirs.skills);
        let mut server = TestServer::start_with(dirs.clone(), &[("PORT", &port)]);
        let client = ExampleClient::start(&server.base, &[]);
        let rid = server
            .create_running(
                serde_json::json!({"skill_id": "talker", "parameter": {"bursts": 20000, "pause": 0.05}}),
            )
            .await;
        let browser = Browser::start().await;
        browser.goto(&client.url(&format!("/runs/{rid}"))).await;
        browser.wait_text("#stdout", "burst 3:").await;

        server.terminate();
        let server = TestServer::start_with(dirs, &[("PORT", &port)]);
        let (_, status) = server.get(&format!("/v1/jobs/{rid}")).await;
        assert_eq!(status["status"], "failed", "the restart ended the run: {status}");
        browser
            .wait_for("#run-info[data-status=failed]")
            .await;
        let shown = browser
            .client
            .find(Locator::Css("#stdout"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(shown.matches("burst 3:").count(), 1, "{shown}");
        // Everything the service logged reached the page, in order.
        // (The restart may have cut the talker in the middle of a character.)
        let logged = String::from_utf8_lossy(
            &std::fs::read(server.run_dir(&status).join("logs/stdout.txt")).unwrap(),
        )
        .into_owned();
        let lines = |text: &str| text.lines().filter(|l| l.starts_with("burst")).count();
        assert_eq!(lines(&shown), lines(&logged));
        browser.close().await;
    });
}

/// A backend behind Basic Auth (here a stand-in that only lists skills): the client sends the
/// configured credentials; without them, its page says what the backend answered.
#[tokio::test]
async fn backend_basic_auth_credentials_are_sent() {
    use axum::http::{HeaderMap, StatusCode};
    async fn skills(headers: HeaderMap) -> Result<axum::Json<Value>, StatusCode> {
        // "op:secret" in Base64.
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Basic b3A6c2VjcmV0")
        {
            return Err(StatusCode::UNAUTHORIZED);
        }
        Ok(axum::Json(serde_json::json!({"skills": [{
            "id": "guarded", "name": "Guarded", "version": "1.0.0",
            "effective_engines": ["script"], "health": "healthy"
        }]})))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/v1/management/skills", axum::routing::get(skills));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let with = ExampleClient::start(
        &backend,
        &[
            ("SKILL_RUNNER_E2E_CLIENT_BACKEND_USERNAME", "op"),
            ("SKILL_RUNNER_E2E_CLIENT_BACKEND_PASSWORD", "secret"),
        ],
    );
    let page = browser_like().get(with.url("/")).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("data-skill-id=\"guarded\"")
    );
    let without = ExampleClient::start(&backend, &[]);
    let page = browser_like().get(without.url("/")).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 401);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("the service answered 401")
    );
    // The password is never logged.
    assert!(!with.log().contains("secret"));
}

/// A standard Agent Skills skill's form in the client is a prompt box and a control for any
/// number of files.
#[tokio::test]
async fn a_standard_skill_form_is_a_prompt_and_files() {
    let dirs = TestDirs::new();
    common::standard_skill("notes", "Takes notes.").write_into(&dirs.skills);
    let server = TestServer::start_with(dirs, &[]);
    let client = ExampleClient::start(&server.base, &[]);
    let form = browser_like()
        .get(client.url("/skills/notes/run"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for control in [
        r#"<textarea id="input.prompt" name="input.prompt""#,
        r#"name="file.files" type="file" multiple"#,
    ] {
        assert!(form.contains(control), "{control} missing in\n{form}");
    }
    assert!(!form.contains("parameter."), "{form}");
}
