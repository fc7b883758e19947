//! The invoke host end to end: the real binary, real skill programs, a real HTTP skill on
//! loopback.

use skill_runner_test_support as common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{TestDirs, TestServer, skill_package};
use serde_json::{Value, json};

/// Posts `body` (raw bytes) to `path` with an optional trace id; returns status, the
/// `x-trace-id` response header and the JSON body.
async fn invoke_raw(
    server: &TestServer,
    path: &str,
    trace: Option<&[u8]>,
    body: Vec<u8>,
) -> (u16, Option<String>, Value) {
    let mut request = server
        .client
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(body);
    if let Some(trace) = trace {
        request = request.header(
            "x-trace-id",
            reqwest::header::HeaderValue::from_bytes(trace).unwrap(),
        );
    }
    let resp = request.send().await.unwrap();
    let status = resp.status().as_u16();
    let header = resp
        .headers()
        .get("x-trace-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, header, body)
}

async fn invoke(server: &TestServer, skill: &str, input: Value) -> (u16, Value) {
    let body = serde_json::to_vec(&json!({ "input": input })).unwrap();
    let (status, _, body) =
        invoke_raw(server, &format!("/skills/{skill}:invoke"), None, body).await;
    assert_envelope(&body);
    (status, body)
}

/// The Normalized Skill Result invariants.
fn assert_envelope(body: &Value) {
    let success = body["success"].as_bool().expect("success is a bool");
    assert!(
        body["skill_id"].is_string() && body["trace_id"].is_string(),
        "{body}"
    );
    assert!(body["meta"]["latency_ms"].is_u64(), "{body}");
    assert!(body["meta"]["version"].is_string(), "{body}");
    assert!(body["meta"].get("runner_type").is_some(), "{body}");
    if success {
        assert!(body["error"].is_null(), "{body}");
    } else {
        assert!(body["data"].is_null(), "{body}");
        assert!(body["error"]["code"].is_string(), "{body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn the_seed_curl_example_and_trace_ids() {
    let server = TestServer::start();
    let request = br#"{ "input": { "text": "hello" } }"#.to_vec();
    for path in ["/skills/echo:invoke", "/v1/skills/echo:invoke"] {
        let (status, header, body) =
            invoke_raw(&server, path, Some(b"demo-123"), request.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(header.as_deref(), Some("demo-123"));
        let latency = body["meta"]["latency_ms"].as_u64().unwrap();
        assert_eq!(
            body,
            json!({"success": true, "skill_id": "echo", "trace_id": "demo-123",
                   "data": {"echoed": "hello"}, "error": null,
                   "meta": {"latency_ms": latency, "version": env!("CARGO_PKG_VERSION"),
                            "runner_type": "inproc"}})
        );
    }
    // Kept: trimmed; replaced by a new UUID: absent, blank, too long, unprintable.
    let (_, header, body) = invoke_raw(
        &server,
        "/skills/echo:invoke",
        Some(b"  t-1  "),
        request.clone(),
    )
    .await;
    assert_eq!(
        (header.as_deref(), body["trace_id"].as_str()),
        (Some("t-1"), Some("t-1"))
    );
    let long = vec![b'x'; 129];
    let traces: [Option<&[u8]>; 5] = [
        None,
        Some(b"   "),
        Some(&long),
        Some(b"a\tb"),
        Some(b"caf\xc3\xa9"),
    ];
    for trace in traces {
        let (_, header, body) =
            invoke_raw(&server, "/skills/echo:invoke", trace, request.clone()).await;
        let id = body["trace_id"].as_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{trace:?} -> {id}");
        assert_eq!(header.as_deref(), Some(id));
    }
    // Echo keeps the text as sent, and wants some.
    let (status, body) = invoke(&server, "echo", json!({"text": "  spaced  "})).await;
    assert_eq!(
        (status, &body["data"]),
        (200, &json!({"echoed": "  spaced  "}))
    );
    for input in [json!({"text": "   "}), json!({}), json!({"text": 5})] {
        let (status, body) = invoke(&server, "echo", input.clone()).await;
        assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{input}");
        assert_eq!(body["error"]["details"]["field"], "text", "{input}");
    }
    // One log line per call (two calls carried demo-123), with the fields an operator greps for.
    let log = server.log();
    let lines = log
        .lines()
        .filter(|l| l.contains("trace_id=\"demo-123\""))
        .count();
    assert_eq!(lines, 2, "{log}");
    let line = log
        .lines()
        .find(|l| l.contains("invoke") && l.contains("trace_id=\"demo-123\""))
        .unwrap_or_else(|| panic!("no invoke log line:\n{log}"));
    for field in [
        "skill_id=\"echo\"",
        "runner_type=\"inproc\"",
        "latency_ms=",
        "success=true",
        "error_code=\"-\"",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    assert!(
        log.lines()
            .any(|l| l.contains("error_code=\"INVALID_ARGUMENT\"")),
        "{log}"
    );
}

#[tokio::test]
async fn request_errors_answer_in_the_envelope() {
    let server = TestServer::start();
    let cases: [(&str, &[u8], u16, &str); 9] = [
        ("/skills/echo:invoke", b"{\"input\": ", 400, "INVALID_JSON"),
        ("/skills/echo:invoke", b"", 400, "INVALID_JSON"),
        ("/v1/skills/echo:invoke", b"not json", 400, "INVALID_JSON"),
        (
            "/skills/echo:invoke",
            b"{\"input\": 5}",
            400,
            "INVALID_ARGUMENT",
        ),
        ("/skills/echo:invoke", b"{}", 400, "INVALID_ARGUMENT"),
        ("/skills/echo:invoke", b"[1]", 400, "INVALID_ARGUMENT"),
        ("/skills/nope:invoke", b"{\"input\": {}}", 404, "NOT_FOUND"),
        (
            "/skills/Echo:invoke",
            b"{\"input\": {}}",
            400,
            "INVALID_ARGUMENT",
        ),
        ("/skills/echo", b"{\"input\": {}}", 404, "NOT_FOUND"),
    ];
    for (path, body, status, expected) in cases {
        let (got, header, body) = invoke_raw(&server, path, Some(b"t"), body.to_vec()).await;
        assert_envelope(&body);
        assert_eq!((got, code(&body)), (status, expected), "{path}: {body}");
        assert_eq!(header.as_deref(), Some("t"));
    }
    for id in ["..x", &"a".repeat(65), "a%20b", "%FF"] {
        let (status, _, body) = invoke_raw(
            &server,
            &format!("/skills/{id}:invoke"),
            None,
            b"{\"input\":{}}".to_vec(),
        )
        .await;
        assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{id}");
        assert_eq!(body["error"]["details"]["field"], "skill_id");
    }
    // Valid ids of the built-ins, underscores included.
    let (status, body) = invoke(&server, "file_search", json!({"query": "x"})).await;
    assert_eq!(status, 200, "{body}");
    let big = format!(
        "{{\"input\": {{\"text\": \"{}\"}}}}",
        "a".repeat(3 * 1024 * 1024)
    );
    let (status, _, body) =
        invoke_raw(&server, "/skills/echo:invoke", None, big.into_bytes()).await;
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
}

#[tokio::test]
async fn calculator_sample_medians_compare_and_invalid_inputs() {
    let server = TestServer::start();
    let (status, body) = invoke(
        &server,
        "calculator",
        json!({"numbers": [10.5, 9.9, 11.2], "ops": ["mean", "median", "min", "max"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let r = &body["data"]["results"];
    assert!((r["mean"].as_f64().unwrap() - 10.533333333333333).abs() < 1e-12);
    assert_eq!(
        (&r["median"], &r["min"], &r["max"]),
        (&json!(10.5), &json!(9.9), &json!(11.2))
    );
    let (_, body) = invoke(
        &server,
        "calculator",
        json!({"numbers": [0.1, 0.2, 0.3], "ops": ["mean"]}),
    )
    .await;
    assert_eq!(body["data"]["results"]["mean"], json!(0.2));
    let (_, body) = invoke(
        &server,
        "calculator",
        json!({"numbers": [5, 1, 4, 2], "ops": ["median", "sum"]}),
    )
    .await;
    assert_eq!(body["data"]["results"], json!({"median": 3.0, "sum": 12.0}));
    let (_, body) = invoke(
        &server,
        "calculator",
        json!({"numbers": [5, 1, 4], "ops": ["median"]}),
    )
    .await;
    assert_eq!(body["data"]["results"]["median"], json!(4.0));
    let (_, body) = invoke(
        &server,
        "calculator",
        json!({"numbers": [1], "ops": ["max"], "compare": {"a": 10, "b": 12}}),
    )
    .await;
    assert_eq!(
        body["data"]["comparison"],
        json!({"max": {"key": "b", "value": 12.0}, "min": {"key": "a", "value": 10.0}, "difference": 2.0})
    );

    let invalid = [
        (json!({"ops": ["mean"]}), "numbers"),
        (json!({"numbers": [], "ops": ["mean"]}), "numbers"),
        (json!({"numbers": ["10"], "ops": ["mean"]}), "numbers/0"),
        (json!({"numbers": [1, true], "ops": ["mean"]}), "numbers/1"),
        (json!({"numbers": [1, null], "ops": ["mean"]}), "numbers/1"),
        (json!({"numbers": "1,2", "ops": ["mean"]}), "numbers"),
        (json!({"numbers": [1]}), "ops"),
        (json!({"numbers": [1], "ops": []}), "ops"),
        (json!({"numbers": [1], "ops": [1]}), "ops/0"),
        (json!({"numbers": [1], "ops": ["mean", "mode"]}), "ops"),
        (
            json!({"numbers": [1e308, 1e308], "ops": ["sum"]}),
            "numbers",
        ),
        (
            json!({"numbers": [1], "ops": ["sum"], "compare": {"a": 1}}),
            "compare",
        ),
        (
            json!({"numbers": [1], "ops": ["sum"], "compare": {"a": 1, "b": "2"}}),
            "compare/b",
        ),
        (json!({"numbers": [1], "ops": ["sum"], "extra": 1}), ""),
    ];
    for (input, field) in invalid {
        let (status, body) = invoke(&server, "calculator", input.clone()).await;
        assert_eq!(
            (status, code(&body)),
            (400, "INVALID_ARGUMENT"),
            "{input}: {body}"
        );
        assert_eq!(body["error"]["details"]["field"], field, "{input}: {body}");
    }
    let (_, body) = invoke(
        &server,
        "calculator",
        json!({"numbers": [1], "ops": ["mean", "mode", "avg"]}),
    )
    .await;
    assert_eq!(
        body["error"]["details"]["invalid_ops"],
        json!(["mode", "avg"])
    );
}

/// The folder layout of the path vectors: root `./data` seen from the server's working
/// directory, with the service's state kept elsewhere.
fn path_fixture(root: &Path) {
    for dir in ["data/logs", "data/docs", "datax", "secret"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(
        root.join("data/logs/app.log"),
        "2026-01-05T10:00:00Z INFO TODO started\n",
    )
    .unwrap();
    std::fs::write(root.join("data/docs/a.md"), "TODO in docs\n").unwrap();
    std::fs::write(root.join("data/a..b.log"), "ERROR TODO dots\n").unwrap();
    std::fs::write(root.join("datax/f"), "TODO outside\n").unwrap();
    std::fs::write(root.join("secret/s.log"), "INFO TODO secret\n").unwrap();
    std::fs::write(root.join("README.md"), "TODO readme\n").unwrap();
    std::os::unix::fs::symlink("/etc", root.join("data/link")).unwrap();
    std::os::unix::fs::symlink(root.join("secret/s.log"), root.join("data/leak.log")).unwrap();
}

#[tokio::test]
async fn every_path_vector_through_both_file_skills() {
    let dirs = TestDirs::new();
    path_fixture(&dirs.root);
    let state = dirs.root.join("state");
    let server = TestServer::start_with(
        dirs.clone(),
        &[
            ("SKILL_RUNNER_DATA_DIR", state.to_str().unwrap()),
            ("OPENSKILL_ALLOWED_ROOT", "./data"),
        ],
    );
    let search = |root_dir: &str| json!({"query": "TODO", "root_dir": root_dir});
    let transform = |path: &str| json!({"input_path": path});

    for dir in ["data/docs", "./data", "docs", "."] {
        let (status, body) = invoke(&server, "file_search", search(dir)).await;
        assert_eq!(status, 200, "{dir}: {body}");
        assert!(
            !body["data"]["matches"].as_array().unwrap().is_empty(),
            "{dir}"
        );
    }
    for file in [
        "./data/logs/app.log",
        "./data/a..b.log",
        "logs/app.log",
        "data/logs/app.log",
    ] {
        let (status, body) = invoke(&server, "log_transform", transform(file)).await;
        assert_eq!(status, 200, "{file}: {body}");
        assert_eq!(body["data"]["stats"]["records"], 1, "{file}");
    }
    // A search of the whole root does not follow the symlinks out of it.
    let (_, body) = invoke(&server, "file_search", search("./data")).await;
    let found: Vec<&str> = body["data"]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(found, ["a..b.log", "docs/a.md", "logs/app.log"]);

    let rejected = [
        "/etc/passwd",
        "../etc/passwd",
        "./data/../secret",
        "data/../../x",
        "./data/logs/../../README.md",
        "C:\\Windows",
        "\\\\server\\share",
        "data/a\u{0}b",
        "./datax/f",
        "data/link/x",
        "data/link/passwd",
        "leak.log",
        "./secret/s.log",
    ];
    for path in rejected {
        for (skill, input) in [
            ("file_search", search(path)),
            ("log_transform", transform(path)),
        ] {
            let (status, body) = invoke(&server, skill, input).await;
            assert_eq!(
                (status, code(&body)),
                (403, "FORBIDDEN_PATH"),
                "{skill} {path:?}: {body}"
            );
        }
    }
    for (skill, input) in [
        ("file_search", search("./data/%2e%2e/x")),
        ("log_transform", transform("./data/%2e%2e/x")),
    ] {
        let (status, body) = invoke(&server, skill, input).await;
        assert_eq!((status, code(&body)), (404, "NOT_FOUND"), "{skill}: {body}");
    }
    // output=file writes under <root>/out and answers the root-relative path.
    let (status, body) = invoke(
        &server,
        "log_transform",
        json!({"input_path": "logs/app.log", "output": "file"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let written = body["data"]["output_path"].as_str().unwrap();
    assert!(written.starts_with("out/"), "{written}");
    assert!(dirs.root.join("data").join(written).is_file());
}

#[tokio::test]
async fn the_default_root_and_a_root_holding_state() {
    let server = TestServer::start();
    let files = server.dirs.data.join("files");
    std::fs::create_dir_all(files.join("docs")).unwrap();
    std::fs::write(files.join("docs/a.md"), "TODO default root\n").unwrap();
    std::fs::create_dir_all(server.dirs.data.join("files2")).unwrap();
    for dir in ["docs", "./data/files/docs", "data/files"] {
        let (status, body) = invoke(
            &server,
            "file_search",
            json!({"query": "TODO", "root_dir": dir}),
        )
        .await;
        assert_eq!(status, 200, "{dir}: {body}");
        assert_eq!(body["data"]["matches"][0]["path"], "docs/a.md", "{dir}");
    }
    for dir in ["./data/files2", "data", "./data/runs", "./skills"] {
        let (status, body) = invoke(
            &server,
            "file_search",
            json!({"query": "TODO", "root_dir": dir}),
        )
        .await;
        assert_eq!(
            (status, code(&body)),
            (403, "FORBIDDEN_PATH"),
            "{dir}: {body}"
        );
    }
    let (status, body) = invoke(
        &server,
        "log_transform",
        json!({"input_path": "./data/skill_runner.db"}),
    )
    .await;
    assert_eq!((status, code(&body)), (403, "FORBIDDEN_PATH"), "{body}");
    drop(server);

    // A root that holds the database, runs and uploads is refused at start-up.
    for root in ["./data", "."] {
        let dirs = TestDirs::new();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_skill-runner"))
            .current_dir(&dirs.root)
            .env("PORT", "0")
            .env("SKILL_RUNNER_DATA_DIR", &dirs.data)
            .env("SKILL_RUNNER_SKILLS_DIR", &dirs.skills)
            .env("OPENSKILL_ALLOWED_ROOT", root)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{root}: {stderr}");
        assert!(
            stderr.contains("OPENSKILL_ALLOWED_ROOT") && stderr.contains("service's own state"),
            "{stderr}"
        );
    }
}

/// Writes `{name}` into `dir` with `body`, executable.
fn write_exec(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn pid_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

async fn wait_pid_gone(pid: i32, within: Duration) {
    let deadline = Instant::now() + within;
    while pid_alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} is still alive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn cli_skills_timeouts_bad_output_and_manifests() {
    let dirs = TestDirs::new();
    let cli = dirs.root.join("skills_cli");
    // Under the allowed root: the one shared folder a confined program may write.
    let pids = dirs.data.join("files/pids");
    std::fs::create_dir_all(&pids).unwrap();
    // The demo contract: stdin {"input"}, a Normalized Skill Result on stdout.
    write_exec(
        &cli,
        "upper.py",
        r#"import json, os, sys
req = json.load(sys.stdin)
text = req["input"].get("text")
if not isinstance(text, str):
    print(json.dumps({"success": False, "error": {"code": "INVALID_ARGUMENT", "message": "text missing", "details": {"field": "text"}}}), file=sys.stderr)
    sys.exit(1)
print(json.dumps({"success": True, "data": {"upper": text.upper(), "cwd": os.getcwd(), "root": os.environ["OPENSKILL_ALLOWED_ROOT"], "trace": os.environ["OPENSKILL_TRACE_ID"]}, "error": None, "meta": {"truncated": True}}))
"#,
    );
    write_exec(
        &cli,
        "bare.py",
        "import json, sys\nprint('debug noise')\nprint(json.dumps({'n': json.load(sys.stdin)['input']['n'] + 1}))\n",
    );
    write_exec(&cli, "hello.py", "print('hello')\n");
    // Bare objects are data whatever their keys; the answer is the last object printed.
    write_exec(
        &cli,
        "keys.py",
        "import json\nprint('```json\\n{\"example\": true}\\n```')\nprint(json.dumps({'outcome': 'error', 'action': 'ask_user', 'rows': 3}))\n",
    );
    write_exec(
        &cli,
        "refuse.py",
        "import json\nprint(json.dumps({'success': False, 'message': 'bad input'}))\n",
    );
    write_exec(
        &cli,
        "coded.py",
        "import json\nprint(json.dumps({'success': False, 'error': {'code': 'FORBIDDEN_PATH', 'details': {'field': 'p'}}}))\n",
    );
    write_exec(
        &cli,
        "noisy.py",
        "import json, sys\nsys.stderr.write('e' * (11 * 1024 * 1024))\nprint(json.dumps({'ok': 1}))\n",
    );
    write_exec(
        &cli,
        "crash.py",
        "import sys\nsys.stderr.write('Traceback: boom\\n')\nsys.exit(3)\n",
    );
    write_exec(
        &cli,
        "flood.py",
        "import sys\nchunk = 'x' * 65536\nfor _ in range(200):\n    sys.stdout.write(chunk)\n",
    );
    write_exec(
        &cli,
        "own_code.py",
        "import json\nprint(json.dumps({'success': False, 'error': {'code': 'E42', 'message': 'custom'}}))\n",
    );
    let sleeper = format!(
        "import os, subprocess, time\nchild = subprocess.Popen(['sleep', '30'])\nopen('{}/' + str(os.getpid()), 'w').write(str(child.pid))\ntime.sleep(30)\n",
        pids.display()
    );
    write_exec(&cli, "sleeper.py", &sleeper);
    let manifests = dirs.root.join("skills_manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(manifests.join("sleeper.yaml"), "id: sleeper\ntype: cli\nruntime: python\nentry: ./skills_cli/sleeper.py\ntimeout_ms: 1500\n").unwrap();
    std::fs::write(
        manifests.join("slow.yaml"),
        "id: slow\ntype: cli\nruntime: python\nentry: ./skills_cli/sleeper.py\ntimeout_ms: 20000\n",
    )
    .unwrap();
    write_exec(
        &dirs.root.join("bin"),
        "shout.sh",
        "#!/bin/sh\nread line\nprintf '{\"got\": %s}\\n' \"$line\"\n",
    );
    std::fs::write(
        manifests.join("shout.json"),
        json!({"id": "shout", "type": "cli", "runtime": "exec", "entry": "./bin/shout.sh", "version": "2.1.0",
               "description": "shell", "input_schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
               "output_schema": {"type": "object", "required": ["got"]}}).to_string(),
    ).unwrap();
    std::fs::write(manifests.join("liar.yaml"), "id: liar\ntype: cli\nruntime: python\nentry: ./skills_cli/bare.py\noutput_schema:\n  type: object\n  required: [missing]\n").unwrap();
    std::fs::write(
        manifests.join("gone.yaml"),
        "id: gone\ntype: cli\nruntime: python\nentry: ./skills_cli/nowhere.py\n",
    )
    .unwrap();
    std::fs::write(
        manifests.join("boxed.yaml"),
        "id: boxed\ntype: docker\nruntime: python\nentry: img\n",
    )
    .unwrap();
    std::fs::write(manifests.join("broken.yaml"), "id: [\n").unwrap();
    std::fs::write(
        manifests.join("calc2.yaml"),
        "id: calc2\ntype: inproc\nentry: calculator\ninput_schema:\n  type: object\n",
    )
    .unwrap();
    let server = TestServer::start_with(dirs.clone(), &[]);

    let (status, body) = invoke(&server, "upper", json!({"text": "abc"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["upper"], "ABC");
    // Programs run in their call's own workspace, not in the service's folder.
    let cwd = body["data"]["cwd"].as_str().unwrap();
    assert!(
        cwd.starts_with(dirs.data.join("invocations").to_str().unwrap())
            && cwd.ends_with("/workspace"),
        "{cwd}"
    );
    assert_eq!(
        body["data"]["root"],
        dirs.data.join("files").to_str().unwrap()
    );
    assert_eq!(body["data"]["trace"], body["trace_id"]);
    assert_eq!(
        (&body["meta"]["runner_type"], &body["meta"]["truncated"]),
        (&json!("cli:python"), &json!(true))
    );
    let (status, body) = invoke(&server, "upper", json!({})).await;
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(body["error"]["details"]["field"], "text");
    let (status, body) = invoke(&server, "bare", json!({"n": 1})).await;
    assert_eq!((status, &body["data"]), (200, &json!({"n": 2})), "{body}");

    let (status, body) = invoke(&server, "keys", json!({})).await;
    assert_eq!(
        (status, &body["data"]),
        (
            200,
            &json!({"outcome": "error", "action": "ask_user", "rows": 3})
        ),
        "{body}"
    );
    let (status, body) = invoke(&server, "refuse", json!({})).await;
    assert_eq!(
        (status, code(&body), &body["error"]["message"]),
        (500, "INTERNAL", &json!("bad input")),
        "{body}"
    );
    let (status, body) = invoke(&server, "coded", json!({})).await;
    assert_eq!((status, code(&body)), (403, "FORBIDDEN_PATH"), "{body}");
    assert_eq!(body["error"]["details"]["field"], "p");
    let (status, body) = invoke(&server, "noisy", json!({})).await;
    assert_eq!((status, &body["data"]), (200, &json!({"ok": 1})), "{body}");

    let (status, body) = invoke(&server, "hello", json!({})).await;
    assert_eq!((status, code(&body)), (500, "INTERNAL"), "{body}");
    assert_eq!(body["error"]["details"]["output_preview"], "hello");
    assert_eq!(body["error"]["details"]["exit_code"], 0);
    let (status, body) = invoke(&server, "crash", json!({})).await;
    assert_eq!((status, code(&body)), (500, "INTERNAL"), "{body}");
    assert_eq!(body["error"]["details"]["exit_code"], 3);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exit code 3")
    );
    let (status, body) = invoke(&server, "flood", json!({})).await;
    assert_eq!((status, code(&body)), (500, "INTERNAL"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than 10485760 bytes"),
        "{body}"
    );
    let (status, body) = invoke(&server, "own_code", json!({})).await;
    assert_eq!((status, code(&body)), (500, "INTERNAL"), "{body}");
    assert_eq!(body["error"]["details"]["skill_code"], "E42");

    // Past timeout_ms: TIMEOUT within the limit plus a second, the whole group gone.
    let started = Instant::now();
    let (status, body) = invoke(&server, "sleeper", json!({})).await;
    let took = started.elapsed();
    assert_eq!((status, code(&body)), (504, "TIMEOUT"), "{body}");
    // Long enough for Python to start on a loaded machine (the pid it writes is checked next).
    assert!(took < Duration::from_millis(2500), "took {took:?}");
    assert_eq!(body["error"]["details"]["timeout_ms"], 1500);
    read_pids(&pids);
    common::assert_nothing_runs_in(&dirs.data);

    // A caller that goes away takes the call's processes with it.
    let _ = std::fs::remove_dir_all(&pids);
    std::fs::create_dir_all(&pids).unwrap();
    let request = server
        .client
        .post(server.url("/skills/slow:invoke"))
        .json(&json!({"input": {}}))
        .send();
    let _ = tokio::time::timeout(Duration::from_millis(800), request).await;
    let (pid, child) = read_pids(&pids);
    let invocations = dirs.data.join("invocations");
    let pid = common::host_id(&invocations, "NSpid", pid).expect("the sleeper runs");
    let child = common::host_id(&invocations, "NSpid", child).expect("its child runs");
    wait_pid_gone(pid, Duration::from_secs(3)).await;
    wait_pid_gone(child, Duration::from_secs(3)).await;

    let (status, body) = invoke(&server, "shout", json!({"n": 7})).await;
    assert_eq!(
        (status, &body["data"]),
        (200, &json!({"got": {"input": {"n": 7}}})),
        "{body}"
    );
    assert_eq!(
        (&body["meta"]["runner_type"], &body["meta"]["version"]),
        (&json!("cli:exec"), &json!("2.1.0"))
    );
    let (status, body) = invoke(&server, "shout", json!({"n": "7"})).await;
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(body["error"]["details"]["field"], "n");
    let (status, body) = invoke(&server, "liar", json!({"n": 1})).await;
    assert_eq!((status, code(&body)), (500, "INTERNAL"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("output_schema")
    );
    let (status, body) = invoke(&server, "gone", json!({})).await;
    assert_eq!((status, code(&body)), (500, "INTERNAL"), "{body}");
    assert!(
        !body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nowhere"),
        "no server paths: {body}"
    );
    // A built-in under a manifest with a looser schema still checks its own.
    for bad in [
        json!({"numbers": [], "ops": ["median"]}),
        json!({"numbers": ["1", 2], "ops": ["sum"]}),
    ] {
        let (status, body) = invoke(&server, "calc2", bad.clone()).await;
        assert_eq!(
            (status, code(&body)),
            (400, "INVALID_ARGUMENT"),
            "{bad}: {body}"
        );
    }
    let (status, body) = invoke(
        &server,
        "calc2",
        json!({"numbers": [2, 4], "ops": ["mean"]}),
    )
    .await;
    assert_eq!(
        (status, &body["data"]["results"]["mean"]),
        (200, &json!(3.0)),
        "{body}"
    );
    let (status, body) = invoke(&server, "boxed", json!({})).await;
    assert_eq!((status, code(&body)), (500, "INTERNAL"), "{body}");
    assert_eq!(body["meta"]["runner_type"], "docker:python");

    // The listing: every source, runner types and schemas, and what did not load.
    let (status, list) = server.get("/skills").await;
    assert_eq!(status, 200);
    let by_id = |id: &str| {
        list["skills"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
    };
    assert_eq!(by_id("echo").unwrap()["runner_type"], "inproc");
    assert_eq!(
        by_id("echo").unwrap()["input_schema"]["required"],
        json!(["text"])
    );
    assert_eq!(by_id("hello").unwrap()["runner_type"], "cli:python");
    assert_eq!(by_id("shout").unwrap()["runner_type"], "cli:exec");
    assert_eq!(
        by_id("shout").unwrap()["input_schema"]["required"],
        json!(["n"])
    );
    assert_eq!(by_id("sleeper").unwrap()["source"]["kind"], "manifest");
    assert!(
        list["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["source"].as_str().unwrap().ends_with("broken.yaml")),
        "{list}"
    );
    // A call folder is removed off the request path, just after the answer: wait for it.
    let invocations = server.dirs.data.join("invocations");
    let deadline = Instant::now() + Duration::from_secs(10);
    while invocations.read_dir().unwrap().any(|_| true) {
        assert!(Instant::now() < deadline, "call folders are removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn read_pids(dir: &Path) -> (i32, i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(entry) = std::fs::read_dir(dir).unwrap().flatten().next() {
            let pid = entry.file_name().to_str().unwrap().parse().unwrap();
            if let Ok(child) = std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .parse()
            {
                return (pid, child);
            }
        }
        assert!(Instant::now() < deadline, "the sleeper never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn http_skills_and_their_failure_modes() {
    use axum::routing::post;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new()
        .route(
            "/ok",
            post(move |headers: axum::http::HeaderMap, body: axum::Json<Value>| {
                let log = log.clone();
                async move {
                    let trace = headers["x-trace-id"].to_str().unwrap().to_owned();
                    log.lock().unwrap().push((trace, body.0.clone()));
                    axum::Json(json!({"success": true, "data": {"sum": body.0["input"]["a"].as_i64().unwrap() + 1}, "error": null}))
                }
            }),
        )
        .route("/bare", post(|| async { axum::Json(json!({"plain": true})) }))
        .route("/fail", post(|| async { (axum::http::StatusCode::BAD_GATEWAY, "upstream broke") }))
        .route(
            "/refuse",
            post(|| async {
                (axum::http::StatusCode::BAD_REQUEST,
                 axum::Json(json!({"success": false, "error": {"code": "INVALID_ARGUMENT", "message": "a must be odd", "details": {"field": "a"}}})))
            }),
        )
        .route("/text", post(|| async { "hello" }))
        .route("/teapot", post(|| async {
            (axum::http::StatusCode::IM_A_TEAPOT, axum::Json(json!({"success": true, "data": {}})))
        }))
        .route("/huge", post(|| async { "x".repeat(11 * 1024 * 1024) }))
        .route("/slow", post(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            axum::Json(json!({}))
        }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();

    let dirs = TestDirs::new();
    let manifests = dirs.root.join("skills_manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (id, url, timeout) in [
        ("remote", format!("http://{addr}/ok"), 5000),
        ("bare", format!("http://{addr}/bare"), 5000),
        ("fail", format!("http://{addr}/fail"), 5000),
        ("refuse", format!("http://{addr}/refuse"), 5000),
        ("text", format!("http://{addr}/text"), 5000),
        ("slow", format!("http://{addr}/slow"), 300),
        ("teapot", format!("http://{addr}/teapot"), 5000),
        ("huge", format!("http://{addr}/huge"), 5000),
        ("closed", format!("http://{closed}/x"), 5000),
    ] {
        let manifest = json!({"id": id, "type": "http", "entry": url, "timeout_ms": timeout});
        std::fs::write(manifests.join(format!("{id}.json")), manifest.to_string()).unwrap();
    }
    let server = TestServer::start_with(dirs, &[]);

    let body = serde_json::to_vec(&json!({"input": {"a": 41}})).unwrap();
    let (status, _, result) =
        invoke_raw(&server, "/skills/remote:invoke", Some(b"trace-h"), body).await;
    assert_eq!(
        (status, &result["data"]),
        (200, &json!({"sum": 42})),
        "{result}"
    );
    assert_eq!(result["meta"]["runner_type"], "http");
    assert_eq!(
        seen.lock().unwrap().clone(),
        [("trace-h".to_owned(), json!({"input": {"a": 41}}))]
    );
    let (status, result) = invoke(&server, "bare", json!({})).await;
    assert_eq!((status, &result["data"]), (200, &json!({"plain": true})));

    let (status, result) = invoke(&server, "fail", json!({})).await;
    assert_eq!((status, code(&result)), (500, "INTERNAL"), "{result}");
    assert_eq!(result["error"]["details"]["status"], 502);
    assert_eq!(
        result["error"]["details"]["output_preview"],
        "upstream broke"
    );
    let (status, result) = invoke(&server, "refuse", json!({})).await;
    assert_eq!(
        (status, code(&result)),
        (400, "INVALID_ARGUMENT"),
        "{result}"
    );
    assert_eq!(result["error"]["details"]["field"], "a");
    let (status, result) = invoke(&server, "text", json!({})).await;
    assert_eq!((status, code(&result)), (500, "INTERNAL"), "{result}");
    assert_eq!(result["error"]["details"]["output_preview"], "hello");
    let started = Instant::now();
    let (status, result) = invoke(&server, "slow", json!({})).await;
    assert_eq!((status, code(&result)), (504, "TIMEOUT"), "{result}");
    assert!(started.elapsed() < Duration::from_millis(1300));
    for skill in ["teapot", "huge"] {
        let (status, result) = invoke(&server, skill, json!({})).await;
        assert_eq!(
            (status, code(&result)),
            (500, "INTERNAL"),
            "{skill}: {result}"
        );
    }
    let (status, result) = invoke(&server, "closed", json!({})).await;
    assert_eq!((status, code(&result)), (500, "INTERNAL"), "{result}");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be reached"),
        "{result}"
    );
    assert!(!result.to_string().contains("127.0.0.1"), "{result}");
}

/// A script package: the job API and invoke run the same entrypoint the same way.
const STATS_SCRIPT: &str = r#"import json, sys
req = json.load(sys.stdin)
text = req["input"]["text"]
words = text.split()
print("working on", len(words), "words")
print(json.dumps({"summary": f"{len(words)} words", "longest": max(words, key=len), "turn": req["turn"]}))
"#;

#[tokio::test]
async fn invoke_and_a_job_of_one_script_skill_give_the_same_data() {
    let package = skill_package("word-stats", "1.2.0")
        .runner(json!({"entrypoint": {"script": ["python3", "run.py"]}}))
        .file("run.py", STATS_SCRIPT)
        .file(
            "assets/input.schema.json",
            json!({"type": "object", "required": ["text"],
                   "properties": {"text": {"type": "string", "x-input-source": "inline"}}}).to_string(),
        )
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["summary"], "properties": {"summary": {"type": "string"}}}).to_string(),
        )
        .file(
            "assets/parameter.schema.json",
            json!({"type": "object", "properties": {"depth": {"type": "integer"}}}).to_string(),
        );
    let server = TestServer::with_skills(&[package], &[]);
    let input = json!({"text": "one runner core for all"});
    let rid = server
        .create_job(json!({"skill_id": "word-stats", "input": input}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, job) = server.get(&format!("/v1/jobs/{rid}/result")).await;

    let (status, result) = invoke(&server, "word-stats", input).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["data"], job["result"]["data"], "{result} vs {job}");
    assert_eq!(result["data"]["summary"], "5 words");
    assert_eq!(
        (&result["meta"]["runner_type"], &result["meta"]["version"]),
        (&json!("engine:script"), &json!("1.2.0"))
    );
    let (status, result) = invoke(&server, "word-stats", json!({"text": 5})).await;
    assert_eq!(
        (status, code(&result)),
        (400, "INVALID_ARGUMENT"),
        "{result}"
    );
    let (_, list) = server.get("/skills").await;
    assert!(
        list["skills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == "word-stats" && s["runner_type"] == "engine:script")
    );
    // An engine there is not is refused naming the field.
    let (status, result) = server
        .post_json(
            "/skills/word-stats:invoke",
            json!({"input": {"text": "x"}, "engine": "gemini2"}),
        )
        .await;
    assert_eq!(
        (status, code(&result)),
        (400, "INVALID_ARGUMENT"),
        "{result}"
    );
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("There is no engine 'gemini2'"),
        "{result}"
    );
}

/// A package installed while the service runs is invocable at once; an update answers with
/// the new version at once.
#[tokio::test]
async fn an_installed_or_updated_package_is_invocable_at_once() {
    let server = TestServer::start();
    let version = |v: &str, answer: &str| {
        skill_package("fresh", v)
            .runner(json!({"entrypoint": {"script": ["sh", "run.sh"]}}))
            .file("run.sh", format!("echo '{{\"answer\": \"{answer}\"}}'\n"))
            .file(
                "assets/output.schema.json",
                json!({"type": "object", "required": ["answer"]}).to_string(),
            )
    };
    let (status, result) = invoke(&server, "fresh", json!({})).await;
    assert_eq!((status, code(&result)), (404, "NOT_FOUND"), "{result}");
    for (v, answer) in [("1.0.0", "first"), ("1.1.0", "second")] {
        let installed = server.install_and_wait(version(v, answer).zip()).await;
        assert_eq!(installed["status"], "succeeded", "{installed}");
        let (status, result) = invoke(&server, "fresh", json!({})).await;
        assert_eq!(status, 200, "{result}");
        assert_eq!(result["data"], json!({"answer": answer}));
        assert_eq!(result["meta"]["version"], v);
    }
}

#[tokio::test]
async fn routing_helper() {
    let server = TestServer::start();
    for (text, skill) in [
        ("find TODO", "file_search"),
        ("echo: hi", "echo"),
        ("median of 3 4", "calculator"),
        ("parse app.log", "log_transform"),
        ("hi", "echo"),
    ] {
        let (status, body) = server.post_json("/v1/route", json!({"text": text})).await;
        assert_eq!(
            (status, body["skill_id"].as_str()),
            (200, Some(skill)),
            "{text}"
        );
        assert!(body["routing_reason"].is_string());
    }
    for bad in [json!({"text": "  "}), json!({}), json!({"text": 1})] {
        let (status, body) = server.post_json("/v1/route", bad.clone()).await;
        assert_eq!(status, 422, "{bad}");
        assert!(body["detail"].is_array(), "{body}");
    }
}

#[tokio::test]
async fn program_slots_bound_concurrent_calls() {
    let dirs = TestDirs::new();
    let cli = dirs.root.join("skills_cli");
    write_exec(
        &cli,
        "nap.py",
        "import json, time\ntime.sleep(1.5)\nprint(json.dumps({'slept': True}))\n",
    );
    let manifests = dirs.root.join("skills_manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(
        manifests.join("quick.yaml"),
        "id: quick\ntype: cli\nruntime: python\nentry: ./skills_cli/nap.py\ntimeout_ms: 400\n",
    )
    .unwrap();
    let server = TestServer::start_with(dirs, &[("OPENSKILL_MAX_PROCESSES", "1")]);
    let first = invoke(&server, "nap", json!({}));
    let second = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        invoke(&server, "quick", json!({})).await
    };
    let ((s1, b1), (s2, b2)) = tokio::join!(first, second);
    assert_eq!((s1, &b1["data"]), (200, &json!({"slept": true})), "{b1}");
    assert_eq!((s2, code(&b2)), (504, "TIMEOUT"), "{b2}");
    assert_eq!(b2["error"]["details"]["reason"], "busy", "{b2}");
}
