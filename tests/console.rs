//! The web console (`/ui`), `/docs` and the embedded front-end files: over HTTP, and in a real
//! headless Chromium inside a loopback-only network namespace.

use skill_runner_test_support as common;

use common::agents::{Agents, in_netns, server_for, tarball};
use common::browser::{self, Browser};
use common::netns::{Isolation, isolate};
use common::{
    FakeModel, TestServer, asker_skill, client, copy_bundled_skills, report_skill, skill_package,
    talker_skill,
};
use serde_json::json;

async fn text(server: &TestServer, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let response = client().get(server.url(path)).send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

#[tokio::test]
async fn pages_fragments_and_assets_over_http() {
    let dirs = common::TestDirs::new();
    copy_bundled_skills(&dirs.skills);
    let server = TestServer::start_with(dirs, &[]);

    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(server.url("/"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 303);
    assert_eq!(response.headers()["location"], "/ui");

    let (status, headers, page) = text(&server, "/ui").await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(page.contains("data-skill-id=\"text-stats\""), "{page}");
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no outside URL: {page}"
    );

    // Languages: ?lang= wins and is kept in a cookie; Accept-Language otherwise.
    let response = client()
        .get(server.url("/ui?lang=zh"))
        .send()
        .await
        .unwrap();
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("lang=zh;"), "{cookie}");
    for attribute in ["Path=/", "SameSite=Lax", "Max-Age=31536000"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(response.text().await.unwrap().contains("已安装技能"));
    let zh = client()
        .get(server.url("/ui"))
        .header("accept-language", "zh-CN,zh;q=0.9")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(zh.contains("已安装技能"));

    // A skill's page and its previews: text, and refused paths.
    let (status, _, page) = text(&server, "/ui/skills/text-stats").await;
    assert_eq!(status, 200);
    assert!(page.contains("SKILL.md"), "{page}");
    let (status, _, fragment) = text(&server, "/ui/skills/text-stats/view?path=SKILL.md").await;
    assert_eq!(status, 200);
    assert!(fragment.contains("data-mode=\"text\""), "{fragment}");
    for bad in ["/etc/passwd", "../text-stats/SKILL.md", "assets/../../x"] {
        let (status, _, fragment) = text(
            &server,
            &format!("/ui/skills/text-stats/view?path={}", urlencoding(bad)),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {fragment}");
        assert!(fragment.contains("role=\"alert\""), "{fragment}");
    }
    let (status, _, fragment) = text(&server, "/ui/skills/text-stats/view").await;
    assert_eq!(status, 400);
    assert!(
        fragment.contains("Query parameter &#39;path&#39; is required"),
        "{fragment}"
    );
    let (status, _, fragment) = text(&server, "/ui/skills/nope").await;
    assert_eq!(status, 404, "{fragment}");

    // Embedded files, revalidated by hash; /docs is served from them.
    let response = client()
        .get(server.url("/static/vendor/htmx/htmx.min.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "text/javascript");
    let etag = response.headers()["etag"].clone();
    let again = client()
        .get(server.url("/static/vendor/htmx/htmx.min.js"))
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 304);
    let (status, headers, docs) = text(&server, "/docs").await;
    assert_eq!(status, 200);
    assert!(headers.contains_key("content-security-policy"));
    assert!(docs.contains("/static/vendor/scalar/standalone.js"));
    let (status, _, _) = text(&server, "/static/nope.js").await;
    assert_eq!(status, 404);
}

fn urlencoding(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn console_routes_need_basic_auth_when_it_is_on() {
    let server = TestServer::start_with(
        common::TestDirs::new(),
        &[
            ("UI_BASIC_AUTH_ENABLED", "true"),
            ("UI_BASIC_AUTH_USERNAME", "admin"),
            ("UI_BASIC_AUTH_PASSWORD", "s3cret"),
        ],
    );
    for path in ["/ui", "/ui/management/skills/table", "/ui/skills/x"] {
        let response = client().get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "{path}");
        assert!(
            response.headers()["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Basic")
        );
        let response = client()
            .get(server.url(path))
            .basic_auth("admin", Some("s3cret"))
            .send()
            .await
            .unwrap();
        assert_ne!(response.status().as_u16(), 401, "{path}");
    }
}

/// Upload a package on `/ui`, follow its install to `succeeded`, see the new row highlighted,
/// open the skill and preview a file; then `/docs` renders. Nothing leaves the machine and no
/// page logs an error.
#[test]
fn browser_installs_a_package_and_previews_its_files() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_installs_a_package_and_previews_its_files"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let server = TestServer::start_with(common::TestDirs::new(), &[]);
        let origin = server.url("");
        let package = tempfile::Builder::new().suffix(".zip").tempfile().unwrap();
        std::fs::write(package.path(), skill_package("ui-demo", "1.2.0").zip()).unwrap();

        let browser = Browser::start().await;
        browser.goto(&server.url("/ui")).await;
        browser
            .wait_for("input[name=file]")
            .await
            .send_keys(package.path().to_str().unwrap())
            .await
            .unwrap();
        browser
            .wait_for("#install-form button[type=submit]")
            .await
            .click()
            .await
            .unwrap();
        browser
            .wait_for("#install-status [data-status=succeeded]")
            .await;
        let row = browser
            .wait_for("tr.highlight[data-skill-id=ui-demo]")
            .await;
        assert!(row.text().await.unwrap().contains("1.2.0"));
        browser.screenshot("skills").await;
        browser.assert_clean(&origin).await;

        row.find(fantoccini::Locator::Css("a"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        // A plain text file (Markdown renders and JSON is pretty-printed).
        let link = browser.wait_for("#file-tree a[hx-get$='VERSION']").await;
        let name = link.text().await.unwrap();
        link.click().await.unwrap();
        let shown = browser.wait_for("#preview pre[data-mode=text]").await;
        let expected = std::fs::read_to_string(
            server.dirs.skills.join("ui-demo").join(
                browser
                    .wait_for("#preview .preview-head code")
                    .await
                    .text()
                    .await
                    .unwrap(),
            ),
        )
        .unwrap();
        assert_eq!(
            shown.text().await.unwrap().trim(),
            expected.trim(),
            "{name}"
        );
        browser.screenshot("skill").await;
        browser.assert_clean(&origin).await;

        browser.goto(&server.url("/docs")).await;
        browser.wait_for("#reference *").await;
        let title = browser
            .client
            .wait()
            .at_most(std::time::Duration::from_secs(15))
            .for_element(fantoccini::Locator::XPath(
                "//*[@id='reference']//*[contains(text(), 'Runs skills through agent CLIs')]",
            ))
            .await;
        assert!(title.is_ok(), "the API reference renders the document");
        // None of the viewer's cloud features; samples addressed to this service.
        let shown: String = browser
            .client
            .execute("return document.body.innerText", vec![])
            .await
            .unwrap()
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for cloud in ["Ask AI", "Generate MCP", "Deploy", "Developer Tools"] {
            assert!(!shown.contains(cloud), "{cloud} on /docs:\n{shown}");
        }
        assert!(
            shown.contains(&origin),
            "the server URL is this service's:\n{shown}"
        );
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// An interactive run created over the API: its page shows the conversation as it comes (the
/// script's lines as messages), renders the question as buttons, and the run continues from the
/// click to `succeeded`, with the reply and the final answer in the conversation and the raw
/// output one click away. Another, running run is canceled from its page.
#[test]
fn browser_follows_answers_and_cancels_runs() {
    const TEST: &str = concat!(module_path!(), "::browser_follows_answers_and_cancels_runs");
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let server = TestServer::with_skills(&[asker_skill("asker"), talker_skill("talker")], &[]);
        let origin = server.url("");
        let rid = server
            .create_job(json!({"skill_id": "asker", "parameter": {"asks": 1},
                               "runtime_options": {"execution_mode": "interactive"}}))
            .await;

        let browser = Browser::start().await;
        browser.goto(&server.url(&format!("/ui/runs/{rid}"))).await;
        // The question section is swapped whenever the run changes: read it afresh each time.
        browser
            .wait_text("#question .question[data-kind=choose_one]", "question 1?")
            .await;
        let conversation = browser.wait_for("#conversation").await;
        browser
            .wait_text("#conversation", "turn 1 of an asker")
            .await;
        browser
            .wait_text(
                "#conversation li[data-kind=user_input_required]",
                "question 1?",
            )
            .await;
        browser.screenshot("run-question").await;
        browser
            .wait_for("#question button[name=choice][value='\"right\"']")
            .await
            .click()
            .await
            .unwrap();
        browser.wait_for("#run-info[data-status=succeeded]").await;
        browser
            .wait_text("#conversation", "turn 2 of an asker")
            .await;
        browser
            .wait_text("#conversation li[data-kind=interaction_reply]", "right")
            .await;
        browser
            .wait_text(
                "#conversation li[data-kind=assistant_final]",
                "\"replies\": [\"right\"]",
            )
            .await;
        let shown = conversation.text().await.unwrap();
        assert_eq!(shown.matches("turn 1 of an asker").count(), 1, "{shown}");
        assert!(
            !shown.contains("ask_user"),
            "the question's JSON is not a message: {shown}"
        );
        // The raw output is one click away.
        browser
            .wait_for("#raw-stdout summary")
            .await
            .click()
            .await
            .unwrap();
        browser.wait_text("#stdout", "\"ask_user\"").await;
        let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
        assert_eq!(
            result["result"]["data"]["replies"],
            json!(["right"]),
            "{result}"
        );
        browser.assert_clean(&origin).await;

        // The run list shows both runs' states.
        browser.goto(&server.url("/ui/runs")).await;
        browser
            .wait_for(&format!(
                "tr[data-request-id='{rid}'][data-status=succeeded]"
            ))
            .await;
        browser.screenshot("runs").await;

        let talker = server
            .create_running(
                json!({"skill_id": "talker", "parameter": {"bursts": 2000, "pause": 0.05}}),
            )
            .await;
        browser
            .goto(&server.url(&format!("/ui/runs/{talker}")))
            .await;
        browser.wait_text("#conversation", "burst 1:").await;
        browser.wait_text("#stderr", "err 1").await;
        browser.click("#cancel-run").await;
        browser.wait_for("#run-info[data-status=canceled]").await;
        browser
            .wait_text("#conversation li.role-system", "The run was canceled.")
            .await;
        let (_, status) = server.get(&format!("/v1/jobs/{talker}")).await;
        assert_eq!(status["status"], "canceled");
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// A codex run against the fake model (the real CLI, in the test's network namespace): its page
/// shows what the model said, the command it ran with that command's output, and the final
/// answer, as conversation items in the order the history has them.
#[test]
fn browser_shows_a_codex_run_as_a_conversation() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_shows_a_codex_run_as_a_conversation"
    );
    if !browser::available() || !in_netns(TEST, "codex") {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let fake = FakeModel::start();
        let command = "mkdir -p artifacts && echo 'all good' | tee artifacts/report.txt";
        let answer = r#"Finished. {"summary": "wrote it", "report": "artifacts/report.txt"}"#;
        // What the model says is Markdown, rendered; markup of its own is sanitised away.
        let say = "I will write the **report** first. <img src=x onerror=\"document.title='owned'\"><script>document.title='owned'</script>";
        fake.script(json!([
            {"shell": command, "say": say, "delay_ms": 1500},
            {"text": answer, "delay_ms": 1500}
        ]))
        .await;
        let server = server_for("codex", &fake, &[report_skill("reporter")], &[]);
        let origin = server.url("");
        let rid = server
            .create_job(json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"}}))
            .await;
        let browser = Browser::start().await;
        browser.goto(&server.url(&format!("/ui/runs/{rid}"))).await;
        browser
            .wait_text(
                "#conversation li[data-kind=assistant_message]",
                "I will write the report first.",
            )
            .await;
        browser
            .wait_text(
                "#conversation li[data-kind=assistant_message] .markdown strong",
                "report",
            )
            .await;
        let injected = browser
            .client
            .execute(
                "return [document.querySelectorAll('#conversation img, #conversation script, \
                 #conversation [onerror]').length, document.title]",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(injected[0], 0, "markup from the model was kept");
        assert_ne!(injected[1], "owned");
        let step = "#conversation li[data-process=command_execution]";
        browser.wait_text(step, command).await;
        browser
            .wait_text(&format!("{step} pre.output"), "all good")
            .await;
        browser
            .wait_text("#conversation li[data-kind=assistant_final]", answer)
            .await;
        browser.wait_for("#run-info[data-status=succeeded]").await;
        browser
            .wait_text("#conversation li.role-system", "The run succeeded.")
            .await;
        browser.screenshot("run-conversation").await;
        // The page shows the history's items, in its order.
        let (_, history) = server.get(&format!("/v1/jobs/{rid}/chat/history")).await;
        let kinds: Vec<String> = history["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["kind"].as_str().unwrap().to_owned())
            .collect();
        let mut shown = Vec::new();
        for item in browser
            .client
            .find_all(fantoccini::Locator::Css("#conversation li"))
            .await
            .unwrap()
        {
            shown.push(item.attr("data-kind").await.unwrap().unwrap());
        }
        assert_eq!(shown, kinds);
        // A stream from a cursor sends exactly the items after it.
        let resumed = server
            .events(&format!("/v1/jobs/{rid}/chat?cursor=2"), None)
            .await
            .collect()
            .await;
        let resumed: Vec<&serde_json::Value> = resumed
            .iter()
            .filter(|e| e.name == "chat_event")
            .map(|e| &e.data)
            .collect();
        let history = history["events"].as_array().unwrap();
        assert_eq!(resumed, history[2..].iter().collect::<Vec<_>>());
        assert_eq!(
            kinds,
            [
                "assistant_message",
                "assistant_process",
                "assistant_final",
                "orchestration_notice"
            ]
        );
        browser.assert_clean(&origin).await;
        // In Chinese, the labels and the closing notice are translated; what was said is not.
        browser
            .goto(&server.url(&format!("/ui/runs/{rid}?lang=zh")))
            .await;
        browser
            .wait_text("#conversation li[data-kind=assistant_final]", "最终答复")
            .await;
        browser
            .wait_text("#conversation li.role-system", "运行成功。")
            .await;
        browser.screenshot("run-conversation-zh").await;
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// A standard Agent Skills skill from the console, with the real codex CLI against the fake
/// model: its page says its format and renders its SKILL.md, its form is a prompt box with a
/// drop zone, a dropped file goes with the run under its own name, and the run's page ends with
/// the agent's answer.
#[test]
fn browser_runs_a_standard_skill_with_a_dropped_file() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_runs_a_standard_skill_with_a_dropped_file"
    );
    if !browser::available() || !in_netns(TEST, "codex") {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let fake = FakeModel::start();
        let command = "mkdir -p artifacts && tee artifacts/copy.txt < uploads/notes.txt";
        fake.script(json!([
            {"shell": command, "delay_ms": 500},
            {"text": "Copied **the notes**.", "delay_ms": 500}
        ]))
        .await;
        let skill = common::standard_skill("pdfx", "Copies notes. DESC-MARK-c0n5");
        let server = server_for("codex", &fake, &[skill], &[]);
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/skills/pdfx")).await;
        browser
            .wait_for("#skill-format[data-format=agent-skill]")
            .await;
        browser.wait_text("#instructions h1", "pdfx").await;
        browser
            .wait_for("textarea[name='input.prompt']")
            .await
            .send_keys("copy the notes")
            .await
            .unwrap();
        browser
            .client
            .execute(
                "const zone = document.getElementById('drop-files');
                 const dropped = new DataTransfer();
                 dropped.items.add(new File(['hello notes\\n'], 'notes.txt', {type: 'text/plain'}));
                 zone.dispatchEvent(new DragEvent('drop', {dataTransfer: dropped, bubbles: true, cancelable: true}));",
                vec![],
            )
            .await
            .unwrap();
        browser.wait_text("#drop-files .dropped li", "notes.txt").await;
        browser.screenshot("standard-skill-form").await;
        let violations = browser.accessibility_violations().await;
        assert!(violations.is_empty(), "{violations:#?}");
        browser.click("#start-run").await;
        browser.wait_for("#run-info[data-status=succeeded]").await;
        browser
            .wait_text("#conversation li[data-kind=assistant_final]", "Copied the notes.")
            .await;
        browser.screenshot("standard-skill-run").await;
        let url = browser.client.current_url().await.unwrap();
        let rid = url.path().rsplit('/').next().unwrap().to_owned();
        // The file went with the run under its own name, and the task names it.
        let (_, status) = server.get(&format!("/v1/jobs/{rid}")).await;
        let uploaded = server.workspace(&status).join("uploads/notes.txt");
        assert_eq!(std::fs::read_to_string(&uploaded).unwrap(), "hello notes\n");
        let prompt =
            std::fs::read_to_string(server.run_dir(&status).join("logs/prompt.txt")).unwrap();
        assert!(
            prompt.contains("copy the notes") && prompt.contains(uploaded.to_str().unwrap()),
            "{prompt}"
        );
        let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
        assert_eq!(result["result"]["data"]["text"], "Copied **the notes**.");
        assert_eq!(result["result"]["artifacts"], json!(["artifacts/copy.txt"]));
        let (_, _, copy) = text(&server, &format!("/v1/jobs/{rid}/artifacts/artifacts/copy.txt")).await;
        assert_eq!(copy, "hello notes\n");
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// A repository's zip of standard skills installed: its status fragment lists each skill's
/// outcome, the skills table tags them, and a skill's page says its format and license.
#[tokio::test]
async fn standard_skills_install_and_show_over_http() {
    let server = TestServer::with_skills(&[], &[]);
    let mut entries = Vec::new();
    for skill in [
        common::standard_skill("alpha", "First."),
        common::standard_skill("Broken", "x"),
    ] {
        for (path, bytes) in &skill.files {
            entries.push((
                format!("repo-main/skills/{}/{path}", skill.top),
                bytes.clone(),
            ));
        }
    }
    let rid = server.install(common::build_zip(entries)).await;
    server.wait_install(&rid).await;
    let (status, _, fragment) = text(&server, &format!("/ui/skill-packages/{rid}/status")).await;
    assert_eq!(status, 200);
    for shown in [
        "repo-main/skills/alpha",
        "install",
        "repo-main/skills/Broken",
        "name",
    ] {
        assert!(fragment.contains(shown), "{shown}: {fragment}");
    }
    let (_, _, table) = text(&server, "/ui/management/skills/table").await;
    assert!(table.contains("data-format=\"agent-skill\""), "{table}");
    let (_, _, page) = text(&server, "/ui/skills/alpha").await;
    assert!(page.contains("data-format=\"agent-skill\""), "{page}");
    assert!(page.contains("MIT"), "{page}");
}

#[tokio::test]
async fn run_pages_and_replies_over_http() {
    let server = TestServer::with_skills(&[asker_skill("asker")], &[]);
    let rid = server
        .create_job(json!({"skill_id": "asker", "parameter": {"asks": 1},
                           "runtime_options": {"execution_mode": "interactive"}}))
        .await;
    server
        .wait_status(&format!("/v1/jobs/{rid}"), &["waiting_user"])
        .await;
    let (status, _, table) = text(&server, "/ui/management/runs/table").await;
    assert_eq!(status, 200);
    assert!(
        table.contains(&rid) && table.contains("data-status=\"waiting_user\""),
        "{table}"
    );
    let (status, _, page) = text(&server, &format!("/ui/runs/{rid}")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains(&format!("/v1/management/runs/{rid}/events")),
        "{page}"
    );
    let (_, _, question) = text(&server, &format!("/ui/management/runs/{rid}/question")).await;
    assert!(question.contains("data-kind=\"choose_one\"") && question.contains("question 1?"));
    // The timeline: queued, the first turn, and the wait for a reply, still under way.
    let steps = |page: &str| -> Vec<String> {
        page.split("<li data-step=\"")
            .skip(1)
            .map(|li| {
                let kind = &li[..li.find('"').unwrap()];
                let ongoing = li.starts_with(&format!("{kind}\" class=\"ongoing\""));
                format!("{kind}{}", if ongoing { " (ongoing)" } else { "" })
            })
            .collect()
    };
    assert_eq!(
        steps(&page),
        ["queued", "turn", "waiting (ongoing)"],
        "{page}"
    );
    assert!(
        page.contains("Waiting for a reply") && page.contains("so far"),
        "{page}"
    );

    let form = |pairs: &[(&str, &str)]| {
        client()
            .post(server.url(&format!("/ui/runs/{rid}/reply")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                pairs
                    .iter()
                    .map(|(k, v)| format!("{}={}", urlencoding(k), urlencoding(v)))
                    .collect::<Vec<_>>()
                    .join("&"),
            )
            .send()
    };
    let refused = form(&[("kind", "choose_one"), ("choice", "\"left\"")])
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    assert!(refused.text().await.unwrap().contains("interaction_id"));
    let stale = form(&[
        ("interaction_id", "99"),
        ("kind", "choose_one"),
        ("choice", "\"left\""),
    ])
    .await
    .unwrap();
    assert_eq!(stale.status().as_u16(), 409, "a stale question is refused");
    let accepted = form(&[
        ("interaction_id", "11"),
        ("kind", "choose_one"),
        ("choice", "\"left\""),
    ])
    .await
    .unwrap();
    assert_eq!(accepted.status().as_u16(), 200);
    assert_eq!(accepted.headers()["hx-trigger"], "run-resumed");
    assert!(
        !accepted.text().await.unwrap().contains("<form"),
        "the question is gone"
    );
    let done = server.wait_job(&rid).await;
    assert_eq!(done["status"], "succeeded");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["result"]["data"]["replies"], json!(["left"]));

    let (status, _, preview) = text(
        &server,
        &format!("/ui/runs/{rid}/file?path=logs/stdout.txt"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(preview.contains("turn 2 of an asker"), "{preview}");
    let (status, _, _) = text(&server, &format!("/ui/runs/{rid}/file?path=../x")).await;
    assert_eq!(status, 400);
    let (status, _, info) = text(&server, &format!("/ui/management/runs/{rid}/view")).await;
    assert_eq!(status, 200);
    assert!(info.contains("data-status=\"succeeded\"") && !info.contains("cancel-run"));
    assert_eq!(
        steps(&info),
        ["queued", "turn", "waiting", "turn", "ended"],
        "{info}"
    );
    assert!(
        info.contains("Waiting for a reply (answered)") && info.contains("Turn 2"),
        "{info}"
    );
    let (_, _, zh) = text(&server, &format!("/ui/management/runs/{rid}/view?lang=zh")).await;
    assert!(zh.contains("第 2 轮") && zh.contains("时间线"), "{zh}");
    let (status, _, _) = text(&server, "/ui/runs/no-such-request").await;
    assert_eq!(status, 404);
}

/// `/ui/settings`: each setting with its value and where it came from, by area; secrets only as
/// set. `/ui/engines`: a missing CLI is said so and offered to be installed.
#[tokio::test]
async fn the_settings_page_shows_what_is_in_effect_without_secrets() {
    let dirs = common::TestDirs::new();
    let data = dirs.data.display().to_string();
    let server = TestServer::start_with(
        dirs,
        &[
            ("SKILL_RUNNER_CODEX_API_KEY", "sk-console-secret"),
            (
                "SKILL_RUNNER_CODEX_BASE_URL",
                "http://user:pw-secret@127.0.0.1:9/v1",
            ),
            ("SKILL_RUNNER_RUN_PIDS", "48"),
        ],
    );
    let (status, _, page) = text(&server, "/ui/settings").await;
    assert_eq!(status, 200, "{page}");
    let row = |variable: &str| {
        let start = page
            .find(&format!("<tr data-variable=\"{variable}\""))
            .unwrap_or_else(|| panic!("{variable} missing: {page}"));
        page[start..start + page[start..].find("</tr>").unwrap()].to_owned()
    };
    assert!(row("SKILL_RUNNER_RUN_PIDS").contains("data-source=\"environment\""));
    assert!(row("SKILL_RUNNER_RUN_PIDS").contains("<code>48</code>"));
    assert!(row("SKILL_RUNNER_DATA_DIR").contains(&data));
    assert!(row("LOG_FORMAT").contains("data-source=\"default\""));
    assert!(row("SKILL_RUNNER_MAX_CONCURRENT").contains("data-source=\"derived\""));
    assert!(row("SKILL_RUNNER_CODEX_API_KEY").contains("(set)"));
    assert!(row("SKILL_RUNNER_CODEX_BASE_URL").contains("****:****@127.0.0.1:9"));
    assert!(row("UI_BASIC_AUTH_PASSWORD").contains("data-source=\"unset\""));
    for secret in ["sk-console-secret", "pw-secret"] {
        assert!(!page.contains(secret), "{secret} shown");
    }
    let (_, _, zh) = text(&server, "/ui/settings?lang=zh").await;
    assert!(zh.contains("当前配置") && zh.contains("环境变量"), "{zh}");
    // Grouped by area, with a filter, and each help rendered from its Markdown.
    let area = |key: &str| {
        let start = page
            .find(&format!("data-area=\"{key}\""))
            .unwrap_or_else(|| panic!("{key}: {page}"));
        page[start..start + page[start..].find("</section>").unwrap()].to_owned()
    };
    assert!(area("settings.area.limits").contains("data-variable=\"SKILL_RUNNER_RUN_PIDS\""));
    assert!(area("settings.area.service").contains("data-variable=\"PORT\""));
    assert!(page.contains("id=\"settings-filter\""), "{page}");
    let help = row("SKILL_RUNNER_BIND");
    assert!(!help.contains('`') && help.contains("<p>"), "{help}");

    // The engines page tells a CLI that is missing from one not logged in, and offers to
    // install it, with no terminal to open on nothing.
    let (_, _, engines) = text(&server, "/ui/engines").await;
    let start = engines.find("<tr data-engine=\"iflow\"").unwrap();
    let iflow = &engines[start..start + engines[start..].find("</tr>").unwrap()];
    assert!(iflow.contains("data-state=\"missing\""), "{iflow}");
    assert!(iflow.contains(">Install</button>"), "{iflow}");
    assert!(!iflow.contains("data-terminal-engine"), "{iflow}");
    assert!(iflow.contains("id=\"engine-message-iflow\""), "{iflow}");
}

/// `/ui/engines`: an upgrade of one engine from a local package tarball is followed to its end
/// with each engine's output; then a model snapshot is added for the new CLI version through
/// the form.
#[test]
fn browser_upgrades_an_engine_and_adds_a_model_snapshot() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_upgrades_an_engine_and_adds_a_model_snapshot"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let agents = Agents::new();
        // Found on PATH until the upgrade puts 9.9.9 in the managed prefix, which comes first.
        agents.fake_cli("global-bin", "codex", "0.170.0");
        let package = tarball(&agents.path(""), "fake-codex", "codex", "9.9.9");
        let spec = package.display().to_string();
        let server = agents.server(
            common::TestDirs::new(),
            &[("SKILL_RUNNER_CODEX_NPM_PACKAGE", spec.as_str())],
        );
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/engines")).await;
        browser.wait_text("tr[data-engine=codex]", "0.170.0").await;
        browser
            .wait_for("tr[data-engine=codex] form button")
            .await
            .click()
            .await
            .unwrap();
        browser
            .wait_for("#engine-message-codex [data-status=succeeded] .upgrade-result[data-engine=codex][data-status=succeeded]")
            .await;
        // The table shows the new version without a reload, the upgrade's output still beside
        // its button.
        browser.wait_text("tr[data-engine=codex]", "9.9.9").await;
        browser
            .wait_for("tr[data-engine=codex] #engine-message-codex .upgrade-result")
            .await;
        browser.assert_clean(&origin).await;

        browser.goto(&server.url("/ui/engines/codex/models")).await;
        browser.wait_text("#engine-models", "9.9.9").await;
        browser
            .submit("#snapshot-form", "textarea", "fresh-model, Fresh Model\nsecond-model")
            .await;
        browser.wait_for("#models tr[data-model=fresh-model]").await;
        browser.wait_for("#models tr[data-model=second-model]").await;
        browser.wait_for("#snapshots tr[data-version='9.9.9']").await;
        browser.wait_text("#engine-models [data-resolved]", "9.9.9").await;
        browser.screenshot("engine-models").await;
        browser.assert_clean(&origin).await;

        // A provider: added from the form (its key never shown again), refused with the reason
        // when a field does not fit, then deleted.
        let fill = |name: &'static str, text: &'static str| {
            let browser = &browser;
            async move {
                let field = browser
                    .wait_for(&format!("#provider-form [name={name}]"))
                    .await;
                field.clear().await.unwrap();
                field.send_keys(text).await.unwrap();
            }
        };
        fill("provider_id", "gw").await;
        fill("base_url", "http://127.0.0.1:9/v1").await;
        fill("api_key", "sk-console-provider-key").await;
        fill("models", "small\nbig: low, high").await;
        fill("default_model", "big").await;
        browser.click("#provider-form button").await;
        browser.wait_for("#providers tr[data-provider=gw]").await;
        browser
            .wait_text("#providers tr[data-provider=gw]", "big (low, high)")
            .await;
        browser
            .wait_for("#providers tr[data-provider=gw] [data-default=true]")
            .await;
        let shown = browser
            .wait_for("#engine-providers")
            .await
            .html(false)
            .await
            .unwrap();
        assert!(
            !shown.contains("sk-console-provider-key") && shown.contains("stored"),
            "the key is stored, never shown: {shown}"
        );
        let (_, listed) = server
            .get("/v1/management/engines/codex/custom-providers")
            .await;
        assert_eq!(listed["providers"][0]["default_model"], "big", "{listed}");
        fill("default_model", "huge").await;
        browser.click("#provider-form button").await;
        browser
            .wait_text("#engine-providers .error", "default_model 'huge'")
            .await;
        browser.assert_clean(&origin).await;
        browser
            .click("#providers tr[data-provider=gw] button")
            .await;
        browser.client.accept_alert().await.unwrap();
        browser.wait_text("#providers", "No providers yet.").await;

        // Add-only: the same version again is refused, in place of the models.
        browser.submit("#snapshot-form", "textarea", "other").await;
        browser.wait_for(".error[data-status='409']").await;
        browser.close().await;
    });
}

#[tokio::test]
async fn legacy_routes_announce_their_sunset_or_are_gone() {
    let server = TestServer::with_skills(&[asker_skill("asker")], &[]);
    let rid = server
        .create_job(json!({"skill_id": "asker", "parameter": {"asks": 0}}))
        .await;
    server.wait_job(&rid).await;
    let routes = [
        (
            "/ui/skills/table".to_owned(),
            "/ui/management/skills/table".to_owned(),
            "data-skill-id=\"asker\"",
        ),
        (
            "/ui/engines/table".to_owned(),
            "/ui/management/engines/table".to_owned(),
            "data-engine=\"codex\"",
        ),
        (
            "/ui/runs/table".to_owned(),
            "/ui/management/runs/table".to_owned(),
            "data-request-id",
        ),
        (
            format!("/ui/runs/{rid}/view"),
            format!("/ui/management/runs/{rid}/view"),
            "data-status=\"succeeded\"",
        ),
        (
            format!("/ui/runs/{rid}/logs/tail"),
            format!("/v1/management/runs/{rid}/events"),
            "turn 1 of an asker",
        ),
    ];
    for (path, successor, shows) in &routes {
        let (status, headers, body) = text(&server, path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.contains(shows), "{path}: {body}");
        assert_eq!(headers["deprecation"], "true", "{path}");
        assert_eq!(headers["sunset"], "Tue, 30 Jun 2026 00:00:00 GMT", "{path}");
        assert_eq!(
            headers["link"].to_str().unwrap(),
            format!("<{successor}>; rel=\"successor-version\""),
            "{path}"
        );
        // The successor answers the same without the headers.
        let (status, headers, _) = text(&server, successor).await;
        assert_eq!(status, 200, "{successor}");
        assert!(!headers.contains_key("deprecation"));
    }
    let (status, _, _) = text(&server, "/ui/engines/auth-shell").await;
    assert_eq!(status, 404, "the old login shell is not served");

    let gone = TestServer::with_skills(
        &[asker_skill("asker")],
        &[("SKILL_RUNNER_UI_LEGACY_API_MODE", "gone")],
    );
    for (path, successor, _) in &routes[..3] {
        let (status, _, body) = text(&gone, path).await;
        assert_eq!(status, 410, "{path}");
        assert!(body.contains(successor.as_str()), "{body}");
    }
}

/// The engine terminal behind Basic Auth: a button opens the engine's CLI (here a small test
/// program in its place) in the page; typed lines reach it and its answers show; a second
/// session is refused while one is live; a reloaded page reattaches with the recent output;
/// stop ends it. The WebSocket refuses a request without credentials.
#[test]
fn browser_terminal_runs_the_engine_cli() {
    const TEST: &str = concat!(module_path!(), "::browser_terminal_runs_the_engine_cli");
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let agents = Agents::new();
        let cli = agents.path("npm/bin/codex");
        std::fs::write(
            &cli,
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'codex 0.170.0'; exit 0; fi\n\
             echo \"fake codex in $HOME as $TERM\"\n\
             while IFS= read -r line; do echo \"you said: $line\"; done\n",
        )
        .unwrap();
        common::agents::make_executable(&cli);
        let server = agents.server(
            common::TestDirs::new(),
            &[
                ("UI_BASIC_AUTH_ENABLED", "true"),
                ("UI_BASIC_AUTH_USERNAME", "admin"),
                ("UI_BASIC_AUTH_PASSWORD", "s3cret"),
            ],
        );
        let origin = server.url("");
        let (status, _, _) = text(&server, "/ui/engines/tui/session/ws").await;
        assert_eq!(status, 401, "the WebSocket needs the console's credentials");

        let browser = Browser::start().await;
        let authed = origin.replace("http://", "http://admin:s3cret@");
        browser.goto(&format!("{authed}/ui/engines")).await;
        browser
            .wait_for("button[data-terminal-engine=codex]")
            .await
            .click()
            .await
            .unwrap();
        let home = agents.path("agent-home");
        browser
            .wait_text(
                ".xterm-rows",
                &format!("fake codex in {} as xterm-256color", home.display()),
            )
            .await;
        browser
            .wait_for(".xterm-helper-textarea")
            .await
            .send_keys("hello terminal\u{E007}")
            .await
            .unwrap();
        browser
            .wait_text(".xterm-rows", "you said: hello terminal")
            .await;
        browser.screenshot("engines-terminal").await;

        // One session at a time.
        let second = client()
            .post(server.url("/ui/engines/tui/session/start"))
            .basic_auth("admin", Some("s3cret"))
            .json(&json!({"engine": "codex"}))
            .send()
            .await
            .unwrap();
        assert_eq!(second.status().as_u16(), 409);
        let detail = second.text().await.unwrap();
        assert!(detail.contains("already live"), "{detail}");
        for retired in ["input", "resize"] {
            let response = client()
                .post(server.url(&format!("/ui/engines/tui/session/{retired}")))
                .basic_auth("admin", Some("s3cret"))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 410, "{retired}");
        }

        // A reloaded page reattaches and shows what was said.
        browser.goto(&format!("{authed}/ui/engines")).await;
        browser
            .wait_text(".xterm-rows", "you said: hello terminal")
            .await;
        browser
            .wait_for("#terminal-stop")
            .await
            .click()
            .await
            .unwrap();
        browser.wait_text("#terminal-status", "exited").await;
        let state: serde_json::Value = client()
            .get(server.url("/ui/engines/tui/session"))
            .basic_auth("admin", Some("s3cret"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(state["session"]["live"], false, "{state}");
        assert_eq!(state["session"]["engine"], "codex");
        // A stopped session leaves the way open: the next one starts at once.
        browser
            .wait_for("button[data-terminal-engine=codex]")
            .await
            .click()
            .await
            .unwrap();
        browser
            .wait_for(".xterm-helper-textarea")
            .await
            .send_keys("second session\u{E007}")
            .await
            .unwrap();
        browser
            .wait_text(".xterm-rows", "you said: second session")
            .await;
        browser.click("#terminal-stop").await;
        browser.wait_text("#terminal-status", "exited").await;
        browser.assert_clean(&authed).await;
        browser.close().await;
    });
}

/// Another site cannot make the operator's browser change anything: form posts and WebSocket
/// openings marked cross-site are refused before they reach a handler; clients that are not
/// browsers (no such headers) are unaffected. A terminal is never opened to the network
/// without credentials.
#[tokio::test]
async fn cross_site_changes_and_open_terminals_are_refused() {
    let server = TestServer::with_skills(&[asker_skill("asker")], &[]);
    let post = |path: &str, headers: &[(&str, &str)]| {
        let mut request = client()
            .post(server.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("mode=all");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.send()
    };
    for headers in [
        vec![("origin", "http://evil.example")],
        vec![("sec-fetch-site", "cross-site")],
        vec![
            ("origin", "http://127.0.0.1:1"),
            ("sec-fetch-site", "same-site"),
        ],
    ] {
        let refused = post("/ui/engines/upgrades", &headers).await.unwrap();
        assert_eq!(refused.status().as_u16(), 403, "{headers:?}");
        assert!(
            refused
                .text()
                .await
                .unwrap()
                .contains("Cross-site request refused")
        );
        let install = client()
            .post(server.url("/v1/skill-packages/install"))
            .header("origin", "http://evil.example")
            .multipart(reqwest::multipart::Form::new().part(
                "file",
                reqwest::multipart::Part::bytes(skill_package("evil", "1.0.0").zip()),
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(install.status().as_u16(), 403);
    }
    let socket = client()
        .get(server.url("/ui/engines/tui/session/ws"))
        .header("origin", "http://evil.example")
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(socket.status().as_u16(), 403);
    let (status, skills) = server.get("/v1/skills").await;
    assert_eq!(status, 200);
    assert!(
        !skills.to_string().contains("evil"),
        "nothing was installed"
    );

    // The same posts from the console's own pages, and from non-browser clients, go through.
    let origin = server.url("");
    let own = post(
        "/ui/runs/nope/cancel",
        &[
            ("origin", origin.trim_end_matches('/')),
            ("sec-fetch-site", "same-origin"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(own.status().as_u16(), 404, "reached the handler");
    let plain = post("/ui/runs/nope/cancel", &[]).await.unwrap();
    assert_eq!(plain.status().as_u16(), 404);

    let open = TestServer::with_skills(&[], &[("SKILL_RUNNER_BIND", "0.0.0.0:0")]);
    let refused = client()
        .post(open.url("/ui/engines/tui/session/start"))
        .json(&json!({"engine": "codex"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("UI_BASIC_AUTH_ENABLED")
    );
}

/// The agent's sessions, read-only: the list names each session by its first message, and a
/// session's page shows its events in order (with the tool call and its result), in Chinese too.
#[test]
fn browser_shows_agent_sessions() {
    const TEST: &str = concat!(module_path!(), "::browser_shows_agent_sessions");
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let fake = FakeModel::start();
        let base = format!("{}/v1", fake.base);
        let server = TestServer::start_with(
            common::TestDirs::new(),
            &[
                ("SKILL_RUNNER_AGENT_OPENAI_BASE_URL", base.as_str()),
                ("SKILL_RUNNER_AGENT_OPENAI_API_KEY", "sk-console-test-key"),
            ],
        );
        fake.script(json!([{"tool": "echo", "args": {"text": "hello there"}},
                           {"text": "I *echoed* it."}]))
            .await;
        let (status, answer) = server
            .post_json("/v1/agent/chat", json!({"message": "please echo hello"}))
            .await;
        assert_eq!(status, 200, "{answer}");
        let id = answer["conversation_id"].as_str().unwrap().to_owned();
        let (_, events) = server.get(&format!("/v1/sessions/{id}/events")).await;
        let api_types: Vec<String> = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect();

        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/sessions")).await;
        browser
            .wait_text(&format!("tr[data-session-id='{id}']"), "please echo hello")
            .await;
        browser
            .wait_for(&format!("tr[data-session-id='{id}'] a"))
            .await
            .click()
            .await
            .unwrap();
        browser
            .wait_text("li[data-type='tool.result']", "hello there")
            .await;
        browser
            .wait_text("li[data-type='assistant.message'] .markdown em", "echoed")
            .await;
        let items = browser
            .client
            .find_all(fantoccini::Locator::Css("#session-events li[data-type]"))
            .await
            .unwrap();
        let mut page_types = Vec::new();
        for item in items {
            page_types.push(item.attr("data-type").await.unwrap().unwrap());
        }
        assert_eq!(page_types, api_types);
        browser.screenshot("agent-session").await;
        browser
            .goto(&server.url(&format!("/ui/sessions/{id}?lang=zh")))
            .await;
        browser
            .wait_text("li[data-type='tool.use'] .label", "工具调用")
            .await;
        browser.assert_clean(&server.url("")).await;
        browser.close().await;
    });
}

/// *Stop session* stops: a CLI that started a daemon leaving its process group (as Codex does)
/// still ends the session within seconds, the daemon with it, and a new session starts.
#[tokio::test]
async fn stopping_a_terminal_session_ends_what_it_started() {
    let agents = Agents::new();
    let cli = agents.path("npm/bin/codex");
    // A daemon no other test (or earlier run) starts: its argument is this test's own.
    let seconds = format!("{}", 1_000_000 + std::process::id());
    std::fs::write(
        &cli,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'codex 0.170.0'; exit 0; fi\n\
             setsid sleep {seconds} &\necho \"daemon $!\"\n\
             while IFS= read -r line; do echo \"you said: $line\"; done\n"
        ),
    )
    .unwrap();
    common::agents::make_executable(&cli);
    let server = agents.server(common::TestDirs::new(), &[]);
    let start = || async {
        client()
            .post(server.url("/ui/engines/tui/session/start"))
            .json(&json!({"engine": "codex"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    let session = || async {
        let state: serde_json::Value = client()
            .get(server.url("/ui/engines/tui/session"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        state["session"].clone()
    };
    assert_eq!(start().await, 200);
    // The daemon is up once its `setsid` ran: find it by what it runs.
    let daemon = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|p| {
                let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
                (cmdline == format!("sleep\0{seconds}\0").as_bytes())
                    .then(|| p.file_name().to_string_lossy().into_owned())
            });
            if let Some(pid) = found {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the daemon never started"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let stopped = client()
        .post(server.url("/ui/engines/tui/session/stop"))
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status().as_u16(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while session().await["live"] != false {
        assert!(
            std::time::Instant::now() < deadline,
            "the session stayed live"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    // Gone, or a zombie waiting to be reaped.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{daemon}/status")).is_ok_and(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
    };
    while alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon {daemon} outlived its session"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(start().await, 200, "a new session starts");
    // Its daemon goes with it too (none is left behind by the test).
    let stopped = client()
        .post(server.url("/ui/engines/tui/session/stop"))
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status().as_u16(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while session().await["live"] != false {
        assert!(
            std::time::Instant::now() < deadline,
            "the second session stayed live"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A skill's page runs it from a form generated from its schemas: mistakes come back named,
/// one per field, with nothing created; a good form starts the run (files zipped under their
/// input keys) and goes to its page; a finished run runs again as it was, or through the form
/// filled with its request.
#[tokio::test]
async fn skills_run_from_their_page_and_again_from_their_runs() {
    let dirs = common::TestDirs::new();
    copy_bundled_skills(&dirs.skills);
    common::probe_skill("probe", Some(true)).write_into(&dirs.skills);
    common::probe_skill("plain", None).write_into(&dirs.skills);
    common::probe_skill("bounded", None)
        .file(
            "assets/input.schema.json",
            json!({"type": "object", "properties": {
                "text": {"type": "string", "maxLength": 5, "x-input-source": "inline"}}})
            .to_string(),
        )
        .file(
            "assets/parameter.schema.json",
            json!({"type": "object", "required": ["mode"], "properties": {
                "mode": {"type": "string"},
                "count": {"type": "integer", "minimum": 1, "maximum": 10}}})
            .to_string(),
        )
        .write_into(&dirs.skills);
    let server = TestServer::start_with(dirs, &[]);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let post = |path: &str, form: reqwest::multipart::Form| {
        http.post(server.url(path)).multipart(form).send()
    };
    let form = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .fold(reqwest::multipart::Form::new(), |f, (k, v)| {
                f.text(k.to_string(), v.to_string())
            })
    };
    // A form sent back is a redirect to the skill's page showing it again.
    let sent_back = |response: reqwest::Response| {
        let http = http.clone();
        let server = &server;
        async move {
            assert_eq!(response.status().as_u16(), 303);
            let location = response.headers()["location"].to_str().unwrap().to_owned();
            assert!(location.contains("?draft="), "{location}");
            let page = http.get(server.url(&location)).send().await.unwrap();
            assert_eq!(page.status().as_u16(), 200);
            page.text().await.unwrap()
        }
    };

    let (status, _, page) = text(&server, "/ui/skills/probe").await;
    assert_eq!(status, 200, "{page}");
    for shows in [
        "name=\"input.text\"",
        "name=\"file.doc\"",
        "name=\"parameter.mode\"",
        "name=\"parameter.n\"",
        "<option value=\"script\"",
        "<h1>probe</h1>",
        "data-schema=\"output\"",
        "id=\"skill-runs\"",
    ] {
        assert!(page.contains(shows), "{shows}: {page}");
    }
    assert!(
        !page.contains("<option value=\"codex\""),
        "an engine the skill does not support is not offered"
    );

    // Every mistake at once, in the page's language, with what was typed kept.
    for (lang, says) in [
        (
            "en",
            [
                "parameter.n must be an integer, not &#39;x&#39;",
                "file.doc is required",
            ],
        ),
        (
            "zh",
            [
                "parameter.n 必须是整数，而不是 &#39;x&#39;",
                "file.doc 为必填项",
            ],
        ),
    ] {
        let refused = post(
            &format!("/ui/skills/probe/run?lang={lang}"),
            form(&[("engine", "script"), ("parameter.n", "x")]),
        )
        .await
        .unwrap();
        let page = sent_back(refused).await;
        for field in ["parameter.mode", "parameter.n", "file.doc"] {
            assert!(
                page.contains(&format!("data-error-for=\"{field}\"")),
                "{field}: {page}"
            );
        }
        assert!(page.contains("value=\"x\""), "what was typed is kept");
        for said in says {
            assert!(page.contains(said), "{said}: {page}");
        }
    }
    let refused = post(
        "/ui/skills/probe/run",
        form(&[("engine", "codex"), ("parameter.mode", "ok")]),
    )
    .await
    .unwrap();
    assert!(
        sent_back(refused)
            .await
            .contains("data-error-for=\"engine\"")
    );
    // Bounds of the schema are the controls' attributes, and a value past one is named on
    // its field with the bound; a reload shows the form again (post/redirect/get).
    let (_, _, page) = text(&server, "/ui/skills/bounded").await;
    assert!(
        page.contains("type=\"number\" step=\"1\"") && page.contains("min=\"1\" max=\"10\""),
        "{page}"
    );
    assert!(page.contains("maxlength=\"5\""), "{page}");
    let refused = post(
        "/ui/skills/bounded/run",
        form(&[
            ("engine", "script"),
            ("parameter.mode", "ok"),
            ("parameter.count", "99"),
            ("input.text", "too long"),
        ]),
    )
    .await
    .unwrap();
    let location = refused.headers()["location"].to_str().unwrap().to_owned();
    let page = sent_back(refused).await;
    for said in [
        "parameter.count must be at most 10, not 99",
        "input.text must be at most 5 characters long",
        "aria-invalid=\"true\"",
        "value=\"99\"",
    ] {
        assert!(page.contains(said), "{said}: {page}");
    }
    let (status, _, again) = text(&server, &location).await;
    assert_eq!(status, 200);
    assert!(
        again.contains("parameter.count must be at most 10, not 99"),
        "reload: {again}"
    );
    // The form's own address, opened, is the skill's page, not a 405.
    let opened = http
        .get(server.url("/ui/skills/bounded/run"))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status().as_u16(), 303);
    assert_eq!(
        opened.headers()["location"].to_str().unwrap(),
        "/ui/skills/bounded#run-form"
    );
    let (_, listed) = server.get("/v1/management/runs").await;
    assert_eq!(listed["runs"], json!([]), "nothing was created");

    // A good form: the file travels under its input key.
    let started = post(
        "/ui/skills/probe/run",
        form(&[
            ("engine", "script"),
            ("execution_mode", "auto"),
            ("input.text", "from the form"),
            ("parameter.mode", "ok"),
            ("parameter.n", "3"),
        ])
        .part(
            "file.doc",
            reqwest::multipart::Part::bytes(b"# the chosen file".to_vec()).file_name("notes.md"),
        ),
    )
    .await
    .unwrap();
    assert_eq!(started.status().as_u16(), 303);
    let location = started.headers()["location"].to_str().unwrap().to_owned();
    let rid = location.strip_prefix("/ui/runs/").unwrap().to_owned();
    let done = server.wait_job(&rid).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["result"]["data"]["summary"], "from the form");
    // The run's page says what it was started with, its file a link to its preview.
    let (_, _, run_page) = text(&server, &format!("/ui/runs/{rid}")).await;
    for shows in [
        "id=\"run-input\"",
        "data-input=\"text\"",
        "from the form",
        "data-parameter=\"n\"",
        "data-upload=\"workspace/uploads/doc\"",
        &format!("hx-get=\"/ui/runs/{rid}/file?path=workspace"),
    ] {
        assert!(run_page.contains(shows), "{shows}: {run_page}");
    }
    let report = client()
        .get(server.url(&format!("/v1/jobs/{rid}/artifacts/artifacts/report.md")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(report, "# the chosen file");

    // Its page shows the result by the output schema: text rendered, the artifact as a
    // download with a preview that renders its Markdown.
    let (_, _, page) = text(&server, &format!("/ui/runs/{rid}")).await;
    for shows in [
        "id=\"run-output\"",
        "<dd data-field=\"summary\">",
        "<p>from the form</p>",
        &format!("/ui/runs/{rid}/download?path=artifacts%2Freport.md"),
        &format!("/ui/runs/{rid}/bundle?debug=true"),
    ] {
        assert!(page.contains(shows), "{shows}: {page}");
    }
    assert!(!page.contains("id=\"run-failure\""));
    let (status, headers, body) = text(
        &server,
        &format!("/ui/runs/{rid}/download?path=artifacts%2Freport.md"),
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "# the chosen file"));
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    let preview_url = format!("/ui/runs/{rid}/file?path=workspace%2Fartifacts%2Freport.md");
    assert!(page.contains(&preview_url), "{page}");
    let (_, _, preview) = text(&server, &preview_url).await;
    assert!(
        preview.contains("data-mode=\"markdown\"") && preview.contains("<h1>the chosen file</h1>"),
        "{preview}"
    );
    let (status, _, _) = text(
        &server,
        &format!("/ui/runs/{rid}/download?path=logs%2Fstdout.txt"),
    )
    .await;
    assert_eq!(status, 404, "only artifacts download");
    let (status, _, _) = text(
        &server,
        &format!("/ui/runs/{rid}/image?path=artifacts%2Freport.md"),
    )
    .await;
    assert_eq!(status, 400, "only raster images show inline");

    // Its page offers both ways to run again; with files, Re-run goes to the filled form.
    let (_, _, page) = text(&server, &format!("/ui/runs/{rid}")).await;
    assert!(page.contains("id=\"rerun\"") && page.contains("id=\"run-with-changes\""));
    let again = http
        .post(server.url(&format!("/ui/runs/{rid}/rerun")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 303);
    let filled = again.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(filled, format!("/ui/skills/probe?from={rid}"));
    let (_, _, page) = text(&server, &filled).await;
    for shows in [
        "value=\"from the form\"",
        "value=\"3\"",
        "value=\"ok\"",
        "id=\"repeating\"",
    ] {
        assert!(page.contains(shows), "{shows}: {page}");
    }

    // Without files, Re-run starts the same request afresh.
    let started = post(
        "/ui/skills/plain/run",
        form(&[
            ("engine", "script"),
            ("input.text", "twice"),
            ("parameter.mode", "ok"),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(started.status().as_u16(), 303, "{:?}", started.text().await);
    let first = started.headers()["location"].to_str().unwrap()["/ui/runs/".len()..].to_owned();
    assert_eq!(server.wait_job(&first).await["status"], "succeeded");
    let again = http
        .post(server.url(&format!("/ui/runs/{first}/rerun")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 303);
    let second = again.headers()["location"].to_str().unwrap()["/ui/runs/".len()..].to_owned();
    assert_ne!(second, first);
    let done = server.wait_job(&second).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["cache_hit"], false, "a re-run runs afresh");
    let (_, a) = server.get(&format!("/v1/jobs/{first}/result")).await;
    let (_, b) = server.get(&format!("/v1/jobs/{second}/result")).await;
    assert_eq!(a["result"]["data"], b["result"]["data"]);

    // The skill's page lists its runs.
    let (_, _, page) = text(&server, "/ui/skills/plain").await;
    assert!(page.contains(&first) && page.contains(&second), "{page}");

    // A skill whose file input is optional runs without one.
    let started = post(
        "/ui/skills/text-stats/run",
        form(&[("engine", "script"), ("input.text", "one two two")]),
    )
    .await
    .unwrap();
    assert_eq!(started.status().as_u16(), 303);
    let rid = started.headers()["location"].to_str().unwrap()["/ui/runs/".len()..].to_owned();
    let done = server.wait_job(&rid).await;
    assert_eq!(done["status"], "succeeded", "{done}");
}

/// The run list filters by state, skill, engine, time and search, pages by cursor, and says
/// which parameter it cannot take.
#[tokio::test]
async fn the_run_list_filters_and_pages() {
    let server = TestServer::with_skills(
        &[
            common::probe_skill("alpha", None),
            common::probe_skill("beta", None),
        ],
        &[],
    );
    let mut ids = Vec::new();
    for (skill, mode) in [
        ("alpha", "ok"),
        ("beta", "exit"),
        ("alpha", "ok"),
        ("beta", "ok"),
    ] {
        let rid = server
            .create_job(
                json!({"skill_id": skill, "input": {"text": format!("run {}", ids.len())},
                               "parameter": {"mode": mode}, "runtime_options": {"no_cache": true}}),
            )
            .await;
        server.wait_job(&rid).await;
        ids.push(rid);
    }
    let listed = |query: &str| {
        let server = &server;
        let query = query.to_owned();
        async move {
            let (status, body) = server.get(&format!("/v1/management/runs?{query}")).await;
            assert_eq!(status, 200, "{query}: {body}");
            let ids: Vec<String> = body["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["request_id"].as_str().unwrap().to_owned())
                .collect();
            (ids, body["next_cursor"].as_str().map(str::to_owned))
        }
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(listed("").await.0, newest_first);
    assert_eq!(listed("status=failed").await.0, [ids[1].clone()]);
    assert_eq!(
        listed("skill_id=alpha").await.0,
        [ids[2].clone(), ids[0].clone()]
    );
    assert_eq!(
        listed("engine=script&status=succeeded&skill_id=beta")
            .await
            .0,
        [ids[3].clone()]
    );
    assert_eq!(
        listed(&format!("q={}", &ids[2][..13])).await.0,
        [ids[2].clone()]
    );
    assert_eq!(listed("q=bet").await.0, [ids[3].clone(), ids[1].clone()]);
    assert!(listed("since=2999-01-01T00:00:00Z").await.0.is_empty());
    let (page1, next) = listed("limit=3").await;
    assert_eq!(page1, newest_first[..3]);
    let next = next.expect("a second page");
    let (page2, last) = listed(&format!("limit=3&cursor={}", urlencoding(&next))).await;
    assert_eq!(page2, newest_first[3..]);
    assert_eq!(last, None);
    for (query, parameter) in [
        ("status=sleeping", "status"),
        ("engine=hal", "engine"),
        ("since=yesterday", "since"),
        ("cursor=abc", "cursor"),
        ("limit=0", "limit"),
    ] {
        let (status, body) = server.get(&format!("/v1/management/runs?{query}")).await;
        assert_eq!(status, 422, "{query}");
        assert_eq!(
            body["detail"][0]["loc"],
            json!(["query", parameter]),
            "{body}"
        );
    }

    // A failed run's page says so in an error style, with its code and what to do.
    let (_, _, page) = text(&server, &format!("/ui/runs/{}", ids[1])).await;
    assert!(page.contains("id=\"run-failure\""), "{page}");
    assert!(
        page.contains("<code id=\"failure-code\">SKILL_EXITED</code>"),
        "{page}"
    );
    assert!(!page.contains("id=\"run-output\""), "{page}");

    // The console's list: the same filters, newest first, a page at a time.
    let (status, _, page) = text(&server, "/ui/runs?status=failed").await;
    assert_eq!(status, 200);
    assert!(page.contains(&ids[1]) && !page.contains(&ids[0]), "{page}");
    assert!(page.contains("<option value=\"failed\" selected"), "{page}");
    let (_, _, page) = text(&server, "/ui/runs?skill_id=alpha&within=1h&q=").await;
    assert!(page.contains(&ids[0]) && page.contains(&ids[2]) && !page.contains(&ids[3]));
    let (_, _, page) = text(&server, "/ui/runs?status=waiting_auth").await;
    assert!(page.contains("No run matches these filters."), "{page}");
    let (status, _, page) = text(&server, "/ui/runs?within=forever").await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("within must be one of"), "{page}");
    let (_, _, table) = text(&server, "/ui/management/runs/table").await;
    assert!(
        table.contains("hx-trigger=\"every 3s\""),
        "the first page refreshes itself: {table}"
    );
    for shows in ["just now", "127.0.0.1", "<time datetime="] {
        assert!(table.contains(shows), "{shows}: {table}");
    }
    assert!(
        table.contains("class=\"num\" data-label=\"Duration\">")
            && !table.contains("data-label=\"Duration\">—<"),
        "finished runs show how long they took: {table}"
    );
}

/// A user's whole loop in the browser: run a skill from its form, watch the run live, preview
/// its artifact, run it again with a changed parameter, and find the first run in the list by
/// its id. Every page fits a 375 px wide screen without scrolling sideways.
#[test]
fn browser_runs_a_skill_from_its_form_and_finds_it_again() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_runs_a_skill_from_its_form_and_finds_it_again"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let server = TestServer::with_skills(&[common::probe_skill("plain", None)], &[]);
        let origin = server.url("");
        let browser = Browser::start().await;
        let fits = |what: &'static str| {
            let browser = &browser;
            async move {
                let widths = browser
                    .client
                    .execute(
                        "return [document.documentElement.scrollWidth, window.innerWidth]",
                        vec![],
                    )
                    .await
                    .unwrap();
                let (scroll, inner) = (widths[0].as_u64().unwrap(), widths[1].as_u64().unwrap());
                assert!(
                    scroll <= inner,
                    "{what}: {scroll} px wide in a {inner} px window"
                );
            }
        };

        browser.goto(&server.url("/ui/skills/plain")).await;
        let field = |name: &str| format!("#run-form [name='{name}']");
        browser
            .wait_for(&field("input.text"))
            .await
            .send_keys("hello browser")
            .await
            .unwrap();
        browser
            .wait_for(&field("parameter.mode"))
            .await
            .send_keys("drip")
            .await
            .unwrap();
        browser.screenshot("skill-run-form-1280").await;
        fits("the skill page at 1280").await;
        browser.click("#start-run").await;

        // The run's page, live: the script's lines arrive as one block of output.
        browser
            .wait_text("#conversation li.script-output", "line 20 of the drip")
            .await;
        browser.wait_for("#run-info[data-status=succeeded]").await;
        let first = browser
            .client
            .current_url()
            .await
            .unwrap()
            .path()
            .trim_start_matches("/ui/runs/")
            .to_owned();
        let blocks = browser
            .client
            .find_all(fantoccini::Locator::Css("#conversation li.script-output"))
            .await
            .unwrap();
        assert_eq!(blocks.len(), 1, "one block, not a bubble per line");
        browser
            .wait_text("#run-output [data-field=summary]", "drip")
            .await;
        assert!(
            !browser
                .wait_for("#stderr-block")
                .await
                .is_displayed()
                .await
                .unwrap()
                || browser
                    .wait_for("#stderr")
                    .await
                    .text()
                    .await
                    .unwrap()
                    .contains("err 1"),
            "stderr shows only when there is some"
        );
        browser.click("#result-artifacts button").await;
        let rendered = browser
            .wait_for("#preview article[data-mode=markdown] p")
            .await;
        let shown = browser
            .client
            .execute("return arguments[0].textContent", vec![json!(rendered)])
            .await
            .unwrap();
        assert_eq!(shown, "dripped");
        browser.screenshot("run-result-1280").await;
        fits("the run page at 1280").await;

        // Run with changes: the form holds the request; another mode runs.
        browser.click("#run-with-changes").await;
        let mode = browser.wait_for(&field("parameter.mode")).await;
        assert_eq!(mode.prop("value").await.unwrap().as_deref(), Some("drip"));
        mode.clear().await.unwrap();
        mode.send_keys("ok").await.unwrap();
        browser.click("#start-run").await;
        browser.wait_for("#run-info[data-status=succeeded]").await;
        let second = browser
            .client
            .current_url()
            .await
            .unwrap()
            .path()
            .to_owned();
        assert_ne!(second, format!("/ui/runs/{first}"));
        let (_, status) = server
            .get(&format!("/v1/jobs/{}", &second["/ui/runs/".len()..]))
            .await;
        assert_eq!(status["status"], "succeeded");
        let (_, result) = server
            .get(&format!("/v1/jobs/{}/result", &second["/ui/runs/".len()..]))
            .await;
        assert_eq!(result["result"]["data"]["summary"], "hello browser");

        // The list shows the first run by the end of its id (its start is the time, shared by
        // every run of the minute), finds it by that end, and says so in its address.
        let shown = &first[first.len() - 8..];
        browser.goto(&server.url("/ui/runs")).await;
        let row = browser
            .wait_for(&format!("tr[data-request-id='{first}'] td code"))
            .await;
        assert_eq!(row.text().await.unwrap(), format!("…{shown}"));
        browser
            .wait_for("#run-search")
            .await
            .send_keys(shown)
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let rows = browser
                .client
                .find_all(fantoccini::Locator::Css("#runs tbody tr[data-request-id]"))
                .await
                .unwrap();
            let url = browser.client.current_url().await.unwrap();
            if rows.len() == 1 && url.query().is_some_and(|q| q.contains(shown)) {
                assert_eq!(
                    rows[0].attr("data-request-id").await.unwrap().as_deref(),
                    Some(first.as_str())
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the search never narrowed the list"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        browser.screenshot("runs-filtered-1280").await;
        fits("the run list at 1280").await;

        // A phone's width: every page in one column.
        browser.client.set_window_size(375, 800).await.unwrap();
        for (path, name) in [
            ("/ui/runs".to_owned(), "runs-375"),
            ("/ui/skills/plain".to_owned(), "skill-375"),
            (format!("/ui/runs/{first}"), "run-375"),
            ("/ui".to_owned(), "skills-375"),
            ("/ui/engines".to_owned(), "engines-375"),
            ("/ui/engines/codex/models".to_owned(), "engine-models-375"),
            ("/ui/engines/mcp".to_owned(), "mcp-375"),
            ("/ui/settings".to_owned(), "settings-375"),
            ("/ui/secrets".to_owned(), "secrets-375"),
            ("/ui/schedules".to_owned(), "schedules-375"),
        ] {
            browser.goto(&server.url(&path)).await;
            browser.wait_for("main h1").await;
            browser.screenshot(name).await;
            fits(name).await;
        }
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// Presses `key` on whatever has the focus.
async fn press(browser: &Browser, key: fantoccini::key::Key) {
    let focused = browser.client.active_element().await.unwrap();
    focused.send_keys(&key.to_string()).await.unwrap();
}

/// Tabs forward until the focused element matches `css`, each element passed showing its
/// focus; says what it went through when it never gets there.
async fn tab_to(browser: &Browser, css: &str) {
    let mut passed = Vec::new();
    for _ in 0..80 {
        press(browser, fantoccini::key::Key::Tab).await;
        let here = browser
            .client
            .execute(
                "const e = document.activeElement; \
                 return [e.matches(arguments[0]), e.outerHTML.slice(0, 80), \
                 getComputedStyle(e).outlineStyle, \
                 parseFloat(getComputedStyle(e).outlineWidth)]",
                vec![json!(css)],
            )
            .await
            .unwrap();
        assert!(
            here[2] != "none" && here[3].as_f64().unwrap() >= 2.0,
            "no visible focus on {}",
            here[1]
        );
        if here[0] == true {
            return;
        }
        passed.push(here[1].as_str().unwrap().to_owned());
    }
    panic!("Tab never reached {css}; it went through {passed:#?}");
}

/// The console without a mouse: a skip link first, every control reached with Tab and shown
/// focused, a skill run from its form and run again with Enter alone.
#[test]
fn browser_works_from_the_keyboard() {
    const TEST: &str = concat!(module_path!(), "::browser_works_from_the_keyboard");
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let server = TestServer::with_skills(&[common::probe_skill("plain", None)], &[]);
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/skills/plain")).await;
        browser.wait_for("#run-form").await;
        tab_to(&browser, "a.skip").await;
        press(&browser, fantoccini::key::Key::Enter).await;
        let url = browser.client.current_url().await.unwrap();
        assert_eq!(url.fragment(), Some("content"));
        tab_to(&browser, "#run-form [name='input.text']").await;
        browser
            .client
            .active_element()
            .await
            .unwrap()
            .send_keys("typed without a mouse")
            .await
            .unwrap();
        tab_to(&browser, "#run-form [name='parameter.mode']").await;
        browser
            .client
            .active_element()
            .await
            .unwrap()
            .send_keys("ok")
            .await
            .unwrap();
        browser.screenshot("keyboard-form-focus").await;
        tab_to(&browser, "#start-run").await;
        press(&browser, fantoccini::key::Key::Enter).await;
        browser.wait_for("#run-info[data-status=succeeded]").await;
        let first = browser
            .client
            .current_url()
            .await
            .unwrap()
            .path()
            .to_owned();
        let (_, result) = server
            .get(&format!("/v1/jobs/{}/result", &first["/ui/runs/".len()..]))
            .await;
        assert_eq!(result["result"]["data"]["summary"], "typed without a mouse");

        // Run it again from its page, with Enter on the focused button.
        tab_to(&browser, "#rerun").await;
        press(&browser, fantoccini::key::Key::Enter).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while browser.client.current_url().await.unwrap().path() == first {
            assert!(std::time::Instant::now() < deadline, "Re-run went nowhere");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        browser.wait_for("#run-info[data-status=succeeded]").await;
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// Every console page at 1280×900 and 390×844, in English and Chinese: no serious
/// accessibility violation (axe), a screenshot of each for review, no English of the
/// catalogue on a Chinese page (states and errors included). A failed script run shows its
/// code, the end of its stderr and the hint above the fold and no "Final answer"; on a phone
/// the run list links to the run and a waiting run's question is in view without scrolling.
#[test]
fn browser_console_pages_pass_an_accessibility_check() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_console_pages_pass_an_accessibility_check"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let dirs = common::TestDirs::new();
        copy_bundled_skills(&dirs.skills);
        common::probe_skill("probe", Some(true)).write_into(&dirs.skills);
        common::probe_skill("plain", None).write_into(&dirs.skills);
        common::standard_skill("notes", "Takes notes.").write_into(&dirs.skills);
        let server = TestServer::start_with(dirs, &[]);
        let mut runs = Vec::new();
        for mode in ["ok", "exit"] {
            let rid = server
                .create_job(json!({"skill_id": "plain", "input": {"text": "a"},
                                   "parameter": {"mode": mode}}))
                .await;
            server.wait_job(&rid).await;
            runs.push(rid);
        }
        let (ok, failed) = (&runs[0], &runs[1]);
        let waiting = server
            .create_job(json!({"skill_id": "pick-one",
                               "runtime_options": {"execution_mode": "interactive"}}))
            .await;
        server
            .wait_status(&format!("/v1/jobs/{waiting}"), &["waiting_user"])
            .await;
        // English words of the catalogue a Chinese page must not show (whole words; those
        // that read the same in both languages left out).
        let english: Vec<(regex::Regex, &str)> = skill_runner_web::i18n::catalogue()
            .iter()
            .filter(|(_, en, zh)| {
                en.chars().filter(char::is_ascii_alphabetic).count() >= 3
                    && !zh.to_lowercase().contains(&en.trim().to_lowercase())
            })
            .map(|(key, en, _)| {
                let pattern = format!(
                    r#"(^|[\s,;:(（“"·—]){}($|[\s,;:.!?)）”"·—])"#,
                    regex::escape(en.trim())
                );
                (regex::Regex::new(&pattern).unwrap(), *key)
            })
            .collect();
        // The page's own words: what a skill, a user or the service's data says (code, logs,
        // rendered Markdown, values typed) is left out.
        let own_words = "const main = document.body.cloneNode(true);
             for (const n of main.querySelectorAll('code, pre, script, style, textarea, .markdown, .brand, [translate=no], \
               .log, option, [data-field], .chat, .tag, time, .value, .meta, #run-input, .facts dd'))
               n.remove();
             return main.textContent.replace(/\\s+/g, ' ');";
        let above_fold = "const n = document.querySelector(arguments[0]);
             if (!n) return false;
             const r = n.getBoundingClientRect();
             return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight
                    && r.left >= 0 && r.right <= window.innerWidth;";
        let browser = Browser::start().await;
        let mut found = Vec::new();
        for (width, height) in [(1280, 900), (390, 844)] {
            browser.client.set_window_size(width, height).await.unwrap();
            for lang in ["en", "zh"] {
                for (path, name) in [
                    ("/ui".to_owned(), "skills"),
                    ("/ui/skills/probe".to_owned(), "skill"),
                    ("/ui/skills/text-stats".to_owned(), "skill-files"),
                    ("/ui/skills/notes".to_owned(), "skill-standard"),
                    ("/ui/runs".to_owned(), "runs"),
                    (format!("/ui/runs/{ok}"), "run-succeeded"),
                    (format!("/ui/runs/{failed}"), "run-failed"),
                    (format!("/ui/runs/{waiting}"), "run-waiting"),
                    ("/ui/engines".to_owned(), "engines"),
                    ("/ui/engines/codex/models".to_owned(), "engine-models"),
                    ("/ui/engines/mcp".to_owned(), "mcp"),
                    ("/ui/sessions".to_owned(), "sessions"),
                    ("/ui/settings".to_owned(), "settings"),
                    ("/ui/secrets".to_owned(), "secrets"),
                    ("/ui/schedules".to_owned(), "schedules"),
                    ("/ui/no-such-page".to_owned(), "not-found"),
                ] {
                    let at = format!("{path} ({lang}, {width}×{height})");
                    browser
                        .goto(&server.url(&format!("{path}?lang={lang}")))
                        .await;
                    browser.wait_for("main h1").await;
                    if name == "run-waiting" {
                        browser.wait_for("#question .question").await;
                    }
                    for violation in browser.accessibility_violations().await {
                        found.push(format!("{at}: {violation}"));
                    }
                    browser.screenshot(&format!("{name}-{lang}-{width}")).await;
                    if lang == "zh" {
                        let text = browser.client.execute(own_words, vec![]).await.unwrap();
                        let text = text.as_str().unwrap();
                        for (english, key) in &english {
                            if let Some(hit) = english.find(text) {
                                found.push(format!("{at}: English '{}' ({key})", hit.as_str().trim()));
                            }
                        }
                    }
                    let in_view = |css: &'static str| {
                        let browser = &browser;
                        async move {
                            browser
                                .client
                                .execute(above_fold, vec![json!(css)])
                                .await
                                .unwrap()
                                == json!(true)
                        }
                    };
                    if name == "run-failed" {
                        for css in ["#failure-code", "#failure-message", "#run-hint"] {
                            if !in_view(css).await {
                                found.push(format!("{at}: {css} below the fold"));
                            }
                        }
                        let shown = browser
                            .client
                            .execute("return document.body.innerText", vec![])
                            .await
                            .unwrap();
                        let shown = shown.as_str().unwrap();
                        assert!(shown.contains("boom on stderr"), "{at}: no stderr tail");
                        assert!(
                            !shown.contains("Final answer") && !shown.contains("最终答复"),
                            "{at}: {shown}"
                        );
                    }
                    // On a phone: what a page is for, without scrolling.
                    let first = match name {
                        "run-waiting" => Some(("#question .question", "the question")),
                        "runs" => Some(("#runs a[href^='/ui/runs/']", "a link to a run")),
                        _ => None,
                    };
                    if let Some((css, what)) = first.filter(|_| width < 500)
                        && !in_view(css).await
                    {
                        found.push(format!("{at}: {what} is not in view"));
                    }
                }
            }
        }
        assert!(found.is_empty(), "{found:#?}");

        // A running run's duration ticks each second between the page's refreshes.
        let running = server
            .create_running(json!({"skill_id": "plain", "parameter": {"mode": "sleep"}}))
            .await;
        browser.goto(&server.url(&format!("/ui/runs/{running}"))).await;
        let duration = browser.wait_for("#run-duration[data-live-ms]").await;
        let first = duration.text().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
        let duration = browser.wait_for("#run-duration").await;
        let second = duration.text().await.unwrap();
        assert_ne!(first, second, "the duration stood still");
        server
            .post_json(&format!("/v1/jobs/{running}/cancel"), json!({}))
            .await;

        // The settings filter keeps the rows that match and hides the areas left empty.
        browser.goto(&server.url("/ui/settings")).await;
        browser
            .wait_for("#settings-filter")
            .await
            .send_keys("RUN_PIDS")
            .await
            .unwrap();
        let shown = "return [...document.querySelectorAll('#settings tr[data-variable]')]
                       .filter(r => r.offsetParent !== null).map(r => r.dataset.variable)";
        let rows = browser.client.execute(shown, vec![]).await.unwrap();
        assert_eq!(rows, json!(["SKILL_RUNNER_RUN_PIDS"]));
        browser.close().await;
    });
}

/// With API tokens set, a browser opening a console page is sent to the login page; a wrong
/// token is said so there, the right one opens the page it asked for, and the console then
/// works on the cookie alone.
#[test]
fn browser_logs_in_with_a_token() {
    const TEST: &str = concat!(module_path!(), "::browser_logs_in_with_a_token");
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let token = "console-token-0123456789";
        let server = TestServer::with_skills(
            &[common::probe_skill("plain", None)],
            &[("SKILL_RUNNER_API_TOKENS", token)],
        );
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/runs")).await;
        browser
            .wait_for("form input[name=token]")
            .await
            .send_keys("not-the-token-000000")
            .await
            .unwrap();
        browser.click("form button[type=submit]").await;
        browser.wait_for("#login-error").await;
        // The refusal is a 401, which the browser logs; nothing else went wrong.
        let errors = browser.console_errors().await;
        assert!(
            errors
                .iter()
                .all(|e| e.contains("/ui/login") && e.contains("401")),
            "{errors:#?}"
        );
        let violations = browser.accessibility_violations().await;
        assert!(violations.is_empty(), "the login page: {violations:#?}");
        browser
            .wait_for("form input[name=token]")
            .await
            .send_keys(token)
            .await
            .unwrap();
        browser.click("form button[type=submit]").await;
        browser.wait_for("#run-filters").await;
        assert_eq!(
            browser.client.current_url().await.unwrap().path(),
            "/ui/runs"
        );
        // The cookie carries on: a skill's page, and its form starts a run.
        browser.goto(&server.url("/ui/skills/plain")).await;
        browser
            .wait_for("#run-form [name='parameter.mode']")
            .await
            .send_keys("ok")
            .await
            .unwrap();
        browser.click("#start-run").await;
        browser.wait_for("#run-info[data-status=succeeded]").await;
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// `body` sent to `path` as `key`; the answer's JSON.
async fn as_key(
    server: &TestServer,
    key: &str,
    method: &str,
    path: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let response = client()
        .request(method.parse().unwrap(), server.url(path))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{method} {path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

/// Tenants in the console: a `read` key logs in, sees its tenant's name and runs only and no
/// run form; once revoked, its next page load goes to the login. An admin makes a key, sees it
/// once, and revokes another after confirming.
#[test]
fn browser_keeps_a_tenant_to_its_own_runs_and_an_admin_manages_keys() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_keeps_a_tenant_to_its_own_runs_and_an_admin_manages_keys"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let dirs = common::TestDirs::new();
        copy_bundled_skills(&dirs.skills);
        let server = TestServer::start_with(dirs, &[]);
        let admin = server.first_key("admin", None).await;
        let tenant = as_key(
            &server,
            &admin,
            "POST",
            "/v1/management/tenants",
            json!({"name": "team"}),
        )
        .await;
        let tenant_id = tenant["tenant_id"].as_str().unwrap().to_owned();
        let keys = format!("/v1/management/tenants/{tenant_id}/keys");
        let submit = as_key(
            &server,
            &admin,
            "POST",
            &keys,
            json!({"role": "submit", "name": "ci"}),
        )
        .await;
        let read = as_key(
            &server,
            &admin,
            "POST",
            &keys,
            json!({"role": "read", "name": "viewer"}),
        )
        .await;
        let run = |key: &str, name: &str| {
            let key = key.to_owned();
            let body = json!({"skill_id": "hello", "input": {"name": name}});
            let server = &server;
            async move {
                as_key(server, &key, "POST", "/v1/jobs", body).await["request_id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            }
        };
        let ours = run(submit["key"].as_str().unwrap(), "ours").await;
        let theirs = run(&admin, "theirs").await;
        let end = |id: &str| id[id.len() - 8..].to_owned();

        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/runs")).await;
        browser.wait_for("#login-form").await;
        browser
            .wait_for("#login-form input[name=token]")
            .await
            .send_keys(read["key"].as_str().unwrap())
            .await
            .unwrap();
        browser.click("#login-form button[type=submit]").await;
        browser.wait_text("#who-tenant", "team").await;
        browser.wait_text("#who-role", "read").await;
        browser.wait_text("#runs", &end(&ours)).await;
        let listed = browser.wait_for("#runs").await.html(false).await.unwrap();
        assert!(
            !listed.contains(&end(&theirs)),
            "another tenant's run is listed"
        );
        assert!(!listed.contains(&theirs));
        browser
            .goto(&server.url(&format!("/ui/runs/{theirs}")))
            .await;
        let page = browser.client.source().await.unwrap();
        assert!(
            !page.contains("theirs"),
            "another tenant's run page shows it"
        );
        browser.goto(&server.url("/ui/skills/hello")).await;
        browser.wait_for("#read-only").await;
        assert!(
            browser
                .client
                .find(fantoccini::Locator::Css("#run-form"))
                .await
                .is_err(),
            "no run form for a read key"
        );
        assert!(
            browser
                .client
                .find(fantoccini::Locator::Css("#nav-tenants"))
                .await
                .is_err(),
            "no tenants page for a read key"
        );

        // Revoked, the key's next page load goes to the login.
        let read_id = read["key_id"].as_str().unwrap();
        as_key(
            &server,
            &admin,
            "DELETE",
            &format!("/v1/management/keys/{read_id}"),
            json!({}),
        )
        .await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            browser.goto(&server.url("/ui/runs")).await;
            let url = browser.client.current_url().await.unwrap();
            if url.path() == "/ui/login" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "still on {url}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }

        // An admin makes a key, sees it once, and revokes another after confirming.
        browser
            .wait_for("#login-form input[name=token]")
            .await
            .send_keys(&admin)
            .await
            .unwrap();
        browser.click("#login-form button[type=submit]").await;
        browser.click("#nav-tenants").await;
        browser
            .click(&format!("#tenants tr[data-tenant-id='{tenant_id}'] a"))
            .await;
        browser
            .wait_for("#new-key-form input[name=name]")
            .await
            .send_keys("made in the console")
            .await
            .unwrap();
        browser.click("#create-key").await;
        let shown = browser.wait_for("#new-key").await.text().await.unwrap();
        assert!(shown.starts_with("sr_") && shown.len() > 40, "{shown}");
        browser.click("#copy-key").await;
        browser.wait_for("#copy-key[data-copied=true]").await;
        let made = as_key(&server, &shown, "GET", "/v1/management/runs", json!({})).await;
        assert!(
            made["runs"].to_string().contains(&ours),
            "the new key works"
        );
        browser
            .goto(&server.url(&format!("/ui/tenants/{tenant_id}")))
            .await;
        browser.wait_for("#keys").await;
        assert!(
            !browser.client.source().await.unwrap().contains(&shown),
            "a key is shown once"
        );
        let submit_id = submit["key_id"].as_str().unwrap();
        let row = format!("#keys tr[data-key-id='{submit_id}']");
        browser.click(&format!("{row} button.danger")).await;
        browser.client.accept_alert().await.unwrap();
        browser.wait_for(&format!("{row}.revoked")).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while client()
            .get(server.url("/v1/management/runs"))
            .bearer_auth(submit["key"].as_str().unwrap())
            .send()
            .await
            .unwrap()
            .status()
            != 401
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the revoked key still opens the API"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        browser.screenshot("tenant-keys-1280").await;
    });
}

/// The secrets page: a secret made through its form is listed by name, hosts and the value's
/// last 4 characters, never its value; a bad host is refused on the page, naming the field; a
/// rotation shows the new last 4; a delete asks first.
#[test]
fn browser_makes_rotates_and_deletes_a_secret_without_showing_it() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_makes_rotates_and_deletes_a_secret_without_showing_it"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let server = TestServer::start_with(common::TestDirs::new(), &[]);
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/secrets")).await;
        let fill = |field: &'static str, text: &'static str| {
            let browser = &browser;
            async move {
                browser
                    .wait_for(&format!("#new-secret input[name={field}]"))
                    .await
                    .send_keys(text)
                    .await
                    .unwrap();
            }
        };
        fill("name", "GITHUB_TOKEN").await;
        fill("value", "ghp-console-value-9f3a").await;
        fill("hosts", "*").await;
        browser.click("#create-secret").await;
        browser.wait_text("#secret-error", "hosts:").await;
        browser.goto(&server.url("/ui/secrets")).await;
        fill("name", "GITHUB_TOKEN").await;
        fill("value", "ghp-console-value-9f3a").await;
        fill("hosts", "api.github.com, *.example.com:8443").await;
        fill("prefix", "Bearer ").await;
        browser.click("#create-secret").await;
        let row = "#secrets tr[data-secret='GITHUB_TOKEN']";
        browser.wait_text(&format!("{row} .last4"), "9f3a").await;
        browser.wait_text(row, "*.example.com:8443").await;
        assert!(
            !browser
                .client
                .source()
                .await
                .unwrap()
                .contains("ghp-console")
        );
        let (_, listed) = server.get("/v1/management/secrets").await;
        assert_eq!(listed["secrets"][0]["prefix"], "Bearer ", "{listed}");

        browser.click(&format!("{row} summary")).await;
        browser
            .wait_for(&format!("{row} form.rotate input[name=value]"))
            .await
            .send_keys("ghp-rotated-in-console-77aa")
            .await
            .unwrap();
        browser.click(&format!("{row} form.rotate button")).await;
        browser.wait_text(&format!("{row} .last4"), "77aa").await;
        assert!(
            !browser
                .client
                .source()
                .await
                .unwrap()
                .contains("ghp-rotated")
        );
        browser.screenshot("secrets-1280").await;

        browser.click(&format!("{row} button.danger")).await;
        browser.client.accept_alert().await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while server.get("/v1/management/secrets").await.1["secrets"] != json!([]) {
            assert!(
                std::time::Instant::now() < deadline,
                "the secret is still there"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        browser.close().await;
    });
}

/// The settings page's actions: the log level changed and back, this node's log records
/// searched, and the data reset refused without its confirmation, counted, then done.
#[test]
fn browser_changes_the_log_level_reads_the_logs_and_resets_the_data() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_changes_the_log_level_reads_the_logs_and_resets_the_data"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let server = TestServer::with_skills(&[common::probe_skill("plain", None)], &[]);
        let rid = server
            .create_job(
                json!({"skill_id": "plain", "input": {"text": "hi"}, "parameter": {"mode": "ok"}}),
            )
            .await;
        server.wait_job(&rid).await;
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/settings")).await;
        browser.wait_text("#log-level-now", "INFO").await;
        let select = |css: &'static str, value: &'static str| {
            let browser = &browser;
            async move {
                browser
                    .wait_for(css)
                    .await
                    .select_by_value(value)
                    .await
                    .unwrap();
            }
        };
        select("#log-level-form select", "WARNING").await;
        browser.click("#log-level-form button").await;
        browser.wait_text("#log-level-now", "WARNING").await;
        let (_, settings) = server.get("/v1/management/system/settings").await;
        assert_eq!(settings["logging"]["server_level"], "WARNING");
        select("#log-level-form select", "INFO").await;
        browser.click("#log-level-form button").await;
        browser.wait_text("#log-level-now", "INFO").await;
        browser
            .submit("#log-level-form", "[name=filter]", "no filter")
            .await;
        browser
            .wait_text("#log-level .error", "is not a log level")
            .await;

        // The log records: the level changes were logged.
        browser
            .submit("#log-form", "[name=q]", "log filter changed")
            .await;
        browser
            .wait_text("#log-table tbody", "log filter changed")
            .await;

        // The reset: refused without the words, counted, then done.
        browser
            .submit("#reset-form", "[name=confirmation]", "yes")
            .await;
        browser
            .wait_text("#reset-result .error[data-status='400']", "CONFIRM RESET")
            .await;
        let confirmation = browser.wait_for("#reset-form [name=confirmation]").await;
        confirmation.clear().await.unwrap();
        confirmation.send_keys("CONFIRM RESET").await.unwrap();
        browser.click("#reset-form button.secondary").await;
        browser
            .wait_text("#reset-result [data-dry-run=true]", "1 runs")
            .await;
        assert_eq!(server.get(&format!("/v1/jobs/{rid}")).await.0, 200);
        browser.click("#reset-form button.danger").await;
        browser
            .wait_text("#reset-result [data-dry-run=false]", "1 runs")
            .await;
        assert_eq!(server.get(&format!("/v1/jobs/{rid}")).await.0, 404);
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// An engine's page logs it in with an API key or its login files, and out again, never
/// showing the key.
#[test]
fn browser_logs_an_engine_in_and_out() {
    const TEST: &str = concat!(module_path!(), "::browser_logs_an_engine_in_and_out");
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let agents = Agents::new();
        agents.fake_cli("global-bin", "codex", "0.170.0");
        let server = agents.server(common::TestDirs::new(), &[]);
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/engines/codex/models")).await;
        browser.wait_for("#engine-login[data-ready=false]").await;
        browser
            .submit("#login-key-form", "[name=api_key]", "sk-console-login-key")
            .await;
        browser.wait_for("#engine-login[data-ready=true]").await;
        let (_, status) = server.get("/v1/engines/auth-status").await;
        assert_eq!(status["engines"]["codex"]["auth_ready"], true, "{status}");
        assert!(
            !browser
                .wait_for("#engine-login")
                .await
                .html(false)
                .await
                .unwrap()
                .contains("sk-console-login-key"),
            "the key is not shown"
        );
        browser.click("#logout-form button").await;
        browser.client.accept_alert().await.unwrap();
        browser.wait_for("#engine-login[data-ready=false]").await;

        // The login file the CLI leaves, imported from the file picker.
        let file = agents.path("auth.json");
        std::fs::write(
            &file,
            r#"{"OPENAI_API_KEY": null, "tokens": {"access_token": "a"}}"#,
        )
        .unwrap();
        browser
            .wait_for("#login-import-form [name=files]")
            .await
            .send_keys(file.to_str().unwrap())
            .await
            .unwrap();
        browser.click("#login-import-form button").await;
        browser
            .wait_for("#engine-login [data-file='auth.json'][data-present=true]")
            .await;
        assert!(agents.path("agent-home/.codex/auth.json").is_file());
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// The MCP servers page: a server added from the form (its secret never shown), servers
/// imported from a CLI's `mcpServers` JSON, a refused import that changes nothing, a delete.
#[test]
fn browser_edits_the_mcp_servers() {
    const TEST: &str = concat!(module_path!(), "::browser_edits_the_mcp_servers");
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let server = TestServer::start_with(common::TestDirs::new(), &[]);
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/engines")).await;
        browser.click("#mcp-link").await;
        browser.wait_text("#mcp-table", "No MCP servers yet.").await;
        let fill = |name: &'static str, text: &'static str| {
            let browser = &browser;
            async move {
                browser
                    .wait_for(&format!("#mcp-form [name={name}]"))
                    .await
                    .send_keys(text)
                    .await
                    .unwrap();
            }
        };
        fill("id", "papers").await;
        fill("command", "npx").await;
        fill("args", "-y\npapers-mcp").await;
        fill("env", "PAPERS_TOKEN=sk-mcp-secret-value").await;
        browser.click("#mcp-form button").await;
        browser
            .wait_for("#mcp-table tr[data-server=papers] [data-secret=PAPERS_TOKEN][data-configured=true]")
            .await;
        browser
            .wait_text("#mcp-table tr[data-server=papers]", "npx -y papers-mcp")
            .await;
        assert!(
            !browser
                .wait_for("#mcp-servers")
                .await
                .html(false)
                .await
                .unwrap()
                .contains("sk-mcp-secret-value")
        );
        let (_, listed) = server.get("/v1/management/mcp/servers").await;
        assert_eq!(listed["servers"][0]["args"], json!(["-y", "papers-mcp"]));

        // A CLI's JSON: a stdio server and an HTTP one with a secret header.
        let import = |text: &'static str| {
            let browser = &browser;
            async move {
                let field = browser.wait_for("#mcp-import-form [name=json]").await;
                field.clear().await.unwrap();
                field.send_keys(text).await.unwrap();
                browser.click("#mcp-import-form button").await;
            }
        };
        import(
            r#"{"mcpServers": {"search": {"command": "uvx", "args": ["search-mcp"]},
                "docs": {"type": "http", "url": "https://mcp.example.com/mcp",
                         "headers": {"Authorization": "Bearer sk-header"}}}}"#,
        )
        .await;
        browser.wait_for("#mcp-table tr[data-server=docs]").await;
        browser.wait_for("#mcp-table tr[data-server=search]").await;
        let (_, listed) = server.get("/v1/management/mcp/servers").await;
        assert_eq!(listed["servers"].as_array().unwrap().len(), 3, "{listed}");
        // One server refused: none of them is saved.
        import(r#"{"mcpServers": {"fine": {"command": "x"}, "broken": {"type": "sse"}}}"#).await;
        browser.wait_for("#mcp-servers .error").await;
        assert!(browser.wait_for("#mcp-table").await.html(false).await.unwrap().find("data-server=\"fine\"").is_none());

        browser
            .click("#mcp-table tr[data-server=search] button")
            .await;
        browser.client.accept_alert().await.unwrap();
        browser
            .wait_for("#mcp-table:not(:has(tr[data-server=search]))")
            .await;
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// An engine's page signs an account in: an OpenAI account in the browser, the address it
/// ended on pasted back, then with a device code approved elsewhere, which the page notices by
/// itself; a Claude account with the code its last page shows.
#[test]
fn browser_signs_vendor_accounts_in() {
    const TEST: &str = concat!(module_path!(), "::browser_signs_vendor_accounts_in");
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let agents = Agents::new();
        agents.fake_cli("global-bin", "codex", "0.170.0");
        agents.fake_cli("global-bin", "claude", "2.1.329");
        let issuer = common::FakeModel::start();
        let server = agents.server(
            common::TestDirs::new(),
            &[
                ("SKILL_RUNNER_OPENAI_AUTH_ISSUER", issuer.base.as_str()),
                ("SKILL_RUNNER_ANTHROPIC_AUTH_ISSUER", issuer.base.as_str()),
            ],
        );
        let no_redirect = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/engines/codex/models")).await;
        browser.wait_for("#engine-login[data-ready=false]").await;
        browser.click("#sign-in-browser").await;
        let link = browser
            .wait_for("#sign-in-link")
            .await
            .attr("href")
            .await
            .unwrap()
            .unwrap();
        assert!(link.starts_with(&issuer.base), "{link}");
        // The issuer's page sends the browser to an address it cannot open; the user copies it.
        let back = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(&link)
            .send()
            .await
            .unwrap()
            .headers()["location"]
            .to_str()
            .unwrap()
            .to_owned();
        browser
            .submit(
                "#sign-in-form",
                "[name=value]",
                "not an address of this sign-in",
            )
            .await;
        browser
            .wait_for("#sign-in .error[data-status=refused]")
            .await;
        let field = browser.wait_for("#sign-in-form [name=value]").await;
        field.clear().await.unwrap();
        field.send_keys(&back).await.unwrap();
        browser.click("#sign-in-form button").await;
        browser.wait_for("#engine-login[data-ready=true]").await;
        assert!(agents.path("agent-home/.codex/auth.json").is_file());

        // Logged out again, then a device code.
        browser.click("#logout-form button").await;
        browser.client.accept_alert().await.unwrap();
        browser.wait_for("#engine-login[data-ready=false]").await;
        browser.click("#sign-in-device").await;
        let code = browser.wait_for("#user-code").await.text().await.unwrap();
        let (status, _) = issuer
            .post("/__oauth/approve", json!({"user_code": code}))
            .await;
        assert_eq!(status, 204);
        browser.wait_for("#engine-login[data-ready=true]").await;

        // A Claude account: its last page shows `code#state`, which the user pastes.
        browser.goto(&server.url("/ui/engines/claude/models")).await;
        browser.wait_for("#engine-login[data-ready=false]").await;
        assert!(
            browser
                .client
                .find(fantoccini::Locator::Css("#sign-in-device"))
                .await
                .is_err()
        );
        browser.click("#sign-in-browser").await;
        let link = browser
            .wait_for("#sign-in-link")
            .await
            .attr("href")
            .await
            .unwrap()
            .unwrap();
        let shown = no_redirect.get(&link).send().await.unwrap().headers()["location"]
            .to_str()
            .unwrap()
            .to_owned();
        let shown = url::Url::parse(&shown).unwrap();
        let pairs: std::collections::HashMap<String, String> =
            shown.query_pairs().into_owned().collect();
        browser
            .submit(
                "#sign-in-form",
                "[name=value]",
                &format!("{}#{}", pairs["code"], pairs["state"]),
            )
            .await;
        browser.wait_for("#engine-login[data-ready=true]").await;
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// An engine's page lets codex log in itself: its own device login runs in the terminal, the
/// page shows the code it printed and notices the end by itself.
#[test]
fn browser_lets_codex_log_in_itself() {
    const TEST: &str = concat!(module_path!(), "::browser_lets_codex_log_in_itself");
    if !browser::available() || !in_netns(TEST, "codex") {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let agents = Agents::new();
        let issuer = common::FakeModel::start();
        let prefix = common::agents::npm_prefix();
        let server = agents.server(
            common::TestDirs::new(),
            &[
                ("SKILL_RUNNER_OPENAI_AUTH_ISSUER", issuer.base.as_str()),
                ("SKILL_RUNNER_NPM_PREFIX", prefix.to_str().unwrap()),
            ],
        );
        let origin = server.url("");
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/engines/codex/models")).await;
        browser.wait_for("#engine-login[data-ready=false]").await;
        browser.click("#sign-in-delegate").await;
        let code = browser.wait_for("#user-code").await.text().await.unwrap();
        browser
            .wait_text("#device-link", &format!("{}/codex/device", issuer.base))
            .await;
        let (status, _) = issuer
            .post("/__oauth/approve", json!({"user_code": code}))
            .await;
        assert_eq!(status, 204);
        browser.wait_for("#engine-login[data-ready=true]").await;
        assert!(agents.path("agent-home/.codex/auth.json").is_file());
        browser.assert_clean(&origin).await;
        browser.close().await;
    });
}

/// A skill's run form makes a schedule instead of a run; the schedules page shows its next
/// ticks, pauses and resumes it, runs it now (opening the run) and deletes it after asking.
#[test]
fn browser_schedules_a_skill_from_its_run_form_and_runs_it_now() {
    const TEST: &str = concat!(
        module_path!(),
        "::browser_schedules_a_skill_from_its_run_form_and_runs_it_now"
    );
    if !browser::available() || !matches!(isolate(TEST), Isolation::Inside) {
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let dirs = common::TestDirs::new();
        common::probe_skill("plain", None).write_into(&dirs.skills);
        let server = TestServer::start_with(dirs, &[]);
        let browser = Browser::start().await;
        browser.goto(&server.url("/ui/skills/plain")).await;
        let field = |name: &str| format!("#run-form [name='{name}']");
        for (name, text) in [("input.text", "on schedule"), ("parameter.mode", "ok")] {
            browser
                .wait_for(&field(name))
                .await
                .send_keys(text)
                .await
                .unwrap();
        }
        browser.click("#schedule-instead summary").await;
        // Once a year: no tick comes during the test.
        browser
            .wait_for(&field("schedule_cron"))
            .await
            .send_keys("0 9 1 1 *")
            .await
            .unwrap();
        let zone = browser.wait_for(&field("schedule_timezone")).await;
        zone.clear().await.unwrap();
        zone.send_keys("Asia/Shanghai").await.unwrap();
        browser.click("#create-schedule").await;
        let row = "#schedules tbody tr[data-schedule]";
        // 09:00 in Shanghai is 01:00 UTC.
        browser
            .wait_text(&format!("{row} .next"), "-01-01T01:00:00")
            .await;
        browser.wait_text(row, "Asia/Shanghai").await;
        let violations = browser.accessibility_violations().await;
        assert!(violations.is_empty(), "{violations:#?}");
        browser.screenshot("schedules-1280").await;
        let (_, listed) = server.get("/v1/schedules").await;
        assert_eq!(
            listed["schedules"][0]["job"]["parameter"]["mode"], "ok",
            "{listed}"
        );

        browser.click(&format!("{row} button.pause")).await;
        browser.wait_for(&format!("{row} .state.paused")).await;
        browser.click(&format!("{row} button.resume")).await;
        browser.wait_for(&format!("{row} button.pause")).await;
        browser.click(&format!("{row} button.trigger")).await;
        browser.wait_for("#run-info[data-status=succeeded]").await;
        let (_, runs) = server.get("/v1/management/runs").await;
        let id = listed["schedules"][0]["schedule_id"].as_str().unwrap();
        assert_eq!(runs["runs"][0]["schedule_id"], id, "{runs}");

        browser.goto(&server.url("/ui/schedules")).await;
        browser.click(&format!("{row} button.danger")).await;
        browser.client.accept_alert().await.unwrap();
        browser.wait_for("#no-schedules").await;
        let (_, listed) = server.get("/v1/schedules").await;
        assert_eq!(listed["schedules"], json!([]));
    });
}
