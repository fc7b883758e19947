//! The MCP server, driven by an official MCP client from outside the project (the Python SDK,
//! pinned by scripts/install-python-tools.sh): over Streamable HTTP at `/mcp` and over stdio
//! (`skill-runner mcp`), it lists the tools page by page with honest annotations, calls
//! `calculator` (structured content), reports bad input as `isError`, answers an unknown tool
//! with JSON-RPC -32602, and serves the skill index as resources.

use skill_runner_test_support as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestDirs, TestServer, client, skill_package};
use serde_json::{Value, json};

/// The Python of the SDK's virtual environment; `None` (said loudly) when it is not installed.
fn python() -> Option<PathBuf> {
    common::python_tools::program("mcp", "SKILL_RUNNER_MCP_VENV", "python")
}

fn drive(python: &Path, args: &[&str]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp_client.py");
    let out = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the MCP client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Test dirs with a skill document and 60 more invocable skills (so tools come in two pages).
fn dirs_with_skills() -> (std::sync::Arc<TestDirs>, PathBuf) {
    let dirs = TestDirs::new();
    let docs = dirs.root.join("docs");
    std::fs::create_dir_all(docs.join("pdf")).unwrap();
    std::fs::write(
        docs.join("pdf/SKILL.md"),
        "---\nname: pdf\ndescription: Reads PDFs.\n---\n# PDF\n\nExtract text.\n",
    )
    .unwrap();
    let manifests = dirs.root.join("skills_manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for n in 0..60 {
        std::fs::write(
            manifests.join(format!("echo{n:02}.yaml")),
            format!("id: echo{n:02}\ntype: inproc\nentry: echo\ndescription: Echo number {n}.\n"),
        )
        .unwrap();
    }
    skill_package("report-maker", "1.0.0").write_into(&dirs.skills);
    common::standard_skill("pdf-notes", "Takes notes of PDFs.").write_into(&dirs.skills);
    (dirs, docs)
}

fn check(seen: &Value) {
    let tools = seen["tools"].as_object().unwrap();
    assert_eq!(seen["pages"], 2, "tools come 50 to a page");
    assert_eq!(tools.len(), 66, "{:?}", tools.keys().collect::<Vec<_>>());
    // A standard Agent Skills skill is a tool taking its task as `prompt`.
    let notes = &tools["pdf_notes"];
    assert_eq!(notes["description"], "Takes notes of PDFs.", "{notes}");
    assert_eq!(
        notes["inputSchema"]["required"],
        json!(["prompt"]),
        "{notes}"
    );
    assert_eq!(
        notes["inputSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["prompt"]
    );
    let hints = |name: &str| tools[name]["annotations"].clone();
    assert_eq!(
        hints("calculator"),
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(hints("file_search")["readOnlyHint"], true);
    assert_eq!(
        hints("log_transform"),
        json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false})
    );
    assert_eq!(hints("report_maker")["openWorldHint"], true);
    assert_eq!(
        tools["calculator"]["inputSchema"]["required"],
        json!(["numbers", "ops"])
    );
    assert!(
        tools["calculator"]["description"]
            .as_str()
            .unwrap()
            .starts_with("Computes mean")
    );

    let calculator = &seen["calculator"];
    assert_eq!(calculator["is_error"], false);
    assert_eq!(
        calculator["structured"],
        json!({"results": {"mean": 2.5, "sum": 10.0}})
    );
    let mirrored: Value = serde_json::from_str(calculator["text"].as_str().unwrap()).unwrap();
    assert_eq!(mirrored, calculator["structured"]);
    assert_eq!(seen["bad_input"]["is_error"], true);
    assert!(
        seen["bad_input"]["text"]
            .as_str()
            .unwrap()
            .contains("INVALID_ARGUMENT")
    );
    assert_eq!(seen["unknown_tool"]["code"], -32602, "{seen}");
    assert_eq!(seen["resources"], json!(["skill://pdf/SKILL.md"]));
    assert!(
        seen["resource_text"]
            .as_str()
            .unwrap()
            .contains("# PDF\n\nExtract text.")
    );
}

#[test]
fn an_official_client_uses_the_tools_over_http() {
    let Some(python) = python() else { return };
    let (dirs, docs) = dirs_with_skills();
    let server = TestServer::start_with(
        dirs,
        &[("SKILL_RUNNER_SKILL_DOC_ROOTS", docs.to_str().unwrap())],
    );
    let seen = drive(&python, &["http", &server.url("/mcp")]);
    check(&seen);
}

#[test]
fn an_official_client_uses_the_tools_over_stdio() {
    let Some(python) = python() else { return };
    let (dirs, docs) = dirs_with_skills();
    let env = json!({
        "SKILL_RUNNER_DATA_DIR": dirs.data,
        "SKILL_RUNNER_SKILLS_DIR": dirs.skills,
        "SKILL_RUNNER_SKILL_DOC_ROOTS": docs,
        "LOG_LEVEL": "warn",
    });
    let seen = drive(
        &python,
        &[
            "stdio",
            env!("CARGO_BIN_EXE_skill-runner"),
            dirs.root.to_str().unwrap(),
            &env.to_string(),
        ],
    );
    check(&seen);
}

#[tokio::test]
async fn mcp_needs_basic_auth_when_it_is_on() {
    let server = TestServer::start_with(
        TestDirs::new(),
        &[
            ("UI_BASIC_AUTH_ENABLED", "true"),
            ("UI_BASIC_AUTH_USERNAME", "admin"),
            ("UI_BASIC_AUTH_PASSWORD", "s3cret-password"),
        ],
    );
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let post = || {
        client()
            .post(server.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
    };
    let refused = post().send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let accepted = post()
        .basic_auth("admin", Some("s3cret-password"))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 200);
    let body = accepted.text().await.unwrap();
    assert!(body.contains("\"skill-runner\""), "{body}");
}
