//! Skills as tool definitions over HTTP: the list and its text catalog, one definition (JSON and
//! Markdown) found by alias, suggestions on a miss, calls, and validation of definitions.

use skill_runner_test_support as common;

use common::{TestServer, skill_package};
use serde_json::{Value, json};

async fn get_text(server: &TestServer, path: &str) -> String {
    let resp = server.client.get(server.url(path)).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    resp.text().await.unwrap()
}

#[tokio::test]
async fn tools_are_listed_described_called_and_validated() {
    let server = TestServer::with_skills(&[skill_package("text-stats", "1.0.0")], &[]);
    let (status, list) = server.get("/v1/tools").await;
    assert_eq!(status, 200, "{list}");
    let by_name = |name: &str| -> Value {
        list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {list}"))
    };
    assert_eq!(by_name("calculator")["category"], "Math");
    assert_eq!(by_name("file_search")["category"], "File System");
    assert_eq!(by_name("text_stats")["category"], "Skill Packages");
    assert_eq!(
        by_name("text_stats")["description"],
        "Runs the skill 'text-stats'."
    );

    let text = get_text(&server, "/v1/tools?format=text").await;
    assert!(
        text.contains("## Math\n- **calculator**: Computes mean"),
        "{text}"
    );
    assert!(
        text.contains("## File System\n- **file_search**: "),
        "{text}"
    );

    let (status, def) = server.get("/v1/tools/File-Search").await;
    assert_eq!(status, 200, "{def}");
    assert_eq!(def["name"], "file_search");
    assert_eq!(def["resolved_from"], "File-Search");
    assert_eq!(def["skill_id"], "file_search");
    assert_eq!(def["input_schema"]["required"], json!(["query"]));
    let (_, def) = server.get("/v1/tools/text_stats").await;
    assert_eq!(def["skill_id"], "text-stats");
    let (status, miss) = server.get("/v1/tools/calculater").await;
    assert_eq!(status, 404);
    assert_eq!(miss["detail"]["suggestions"][0], "calculator");
    let md = get_text(&server, "/v1/tools/calculator?format=md").await;
    assert!(
        md.starts_with("# Tool: calculator\n\n**Category**: Math\n\n"),
        "{md}"
    );
    assert!(
        md.contains("## Parameters\n\n- `compare` (object): Named values"),
        "{md}"
    );

    let resp = server
        .client
        .post(server.url("/v1/tools/Calculator:call"))
        .header("x-trace-id", "tools-1")
        .json(&json!({"input": {"numbers": [1, 2, 3], "ops": ["sum"]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-trace-id"], "tools-1");
    let result: Value = resp.json().await.unwrap();
    assert_eq!(result["skill_id"], "calculator");
    assert_eq!(result["data"]["results"]["sum"], 6.0);
    let (status, refused) = server
        .post_json(
            "/v1/tools/calculator:call",
            json!({"input": {"numbers": ["1"], "ops": ["sum"]}}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(refused["error"]["code"], "INVALID_ARGUMENT");
    let (status, unknown) = server
        .post_json("/v1/tools/calculater:call", json!({"input": {}}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(unknown["error"]["details"]["suggestions"][0], "calculator");
    assert_eq!(
        server
            .post_json("/v1/tools/calculator", json!({"input": {}}))
            .await
            .0,
        404
    );

    // The document's own example: 204 characters of description.
    let example = json!({
        "name": "browser_navigate",
        "category": "Browser",
        "description": "Navigate browser to specified URL to open a webpage. When you need to: (1) Open a webpage, (2) Start web interaction. PREREQUISITE: Must call before browser_click/type. Auto-starts browser if not running.",
        "examples": [{"scenario": "s", "params": {"url": "https://example.com"}, "expected": "e"}],
        "related_tools": [{"name": "file_search", "relation": "r"}, {"name": "browser_click"}],
        "input_schema": {"type": "object", "properties": {"url": {"type": "string", "description": "URL"}}, "required": ["url"]}
    });
    let (status, strict) = server
        .post_json("/v1/tools:validate", json!({"definition": example}))
        .await;
    assert_eq!(status, 200, "{strict}");
    assert_eq!(strict["valid"], false);
    assert_eq!(strict["errors"][0]["field"], "description");
    let (_, compat) = server
        .post_json(
            "/v1/tools:validate",
            json!({"definition": example, "profile": "compat"}),
        )
        .await;
    assert_eq!(compat["valid"], true, "{compat}");
    assert_eq!(
        compat["warnings"],
        json!([{"field": "related_tools[1]", "message": "'browser_click' is not a registered tool"}]),
        "tools registered here count as known"
    );
    let (status, _) = server
        .post_json(
            "/v1/tools:validate",
            json!({"definition": example, "profile": "loose"}),
        )
        .await;
    assert_eq!(status, 400);
}
