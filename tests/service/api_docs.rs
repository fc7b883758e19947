//! `docs/api.md` against the router: every route it names answers from a handler (not the
//! router's "no such route"), and every route of the OpenAPI document is in it.

use serde_json::{Value, json};
use skill_runner_test_support::{TestServer, client};

/// `(method, path)` of each `` `METHOD /v1/...` `` the document names, parameters as `{}`;
/// the rows of the reference's routes this service does not offer ("Not applicable", "Not
/// yet") are left out.
fn documented() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).unwrap();
    let offered = text
        .lines()
        .filter(|line| !line.contains("| Not applicable |") && !line.contains("| Not yet |"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut routes: Vec<(String, String)> = offered
        .split('`')
        .filter_map(|code| {
            let (method, rest) = code.split_once(' ')?;
            if !["GET", "POST", "PUT", "DELETE", "PATCH"].contains(&method) {
                return None;
            }
            let path = rest.split(['?', ' ']).next()?;
            path.starts_with("/v1/")
                .then(|| (method.to_owned(), normalised(path)))
        })
        .collect();
    routes.sort();
    routes.dedup();
    routes
}

/// A path with each `{parameter}` as `{}`.
fn normalised(path: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in path.chars() {
        match c {
            '{' => {
                inside = true;
                out.push_str("{}");
            }
            '}' => inside = false,
            _ if !inside => out.push(c),
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn the_api_document_names_the_routes_the_router_has() {
    let server = TestServer::start_with(skill_runner_test_support::TestDirs::new(), &[]);
    let routes = documented();
    assert!(
        routes.len() > 60,
        "the document names its routes: {routes:?}"
    );
    let mut unrouted = Vec::new();
    for (method, path) in &routes {
        let url = server.url(&path.replace("{}", "x"));
        let request = match method.as_str() {
            "GET" => client().get(url),
            "DELETE" => client().delete(url),
            "PUT" => client().put(url).json(&json!({})),
            "PATCH" => client().patch(url).json(&json!({})),
            _ => client().post(url).json(&json!({})),
        };
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status == 405 || (status == 404 && body == json!({"detail": "Not Found"})) {
            unrouted.push(format!("{method} {path} ({status})"));
        }
    }
    assert!(
        unrouted.is_empty(),
        "docs/api.md names routes the router lacks: {unrouted:#?}"
    );

    let (_, doc) = server.get("/openapi.json").await;
    let mut undocumented = Vec::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for method in operations.as_object().unwrap().keys() {
            let route = (method.to_uppercase(), normalised(path));
            if route.1.starts_with("/v1/") && !routes.contains(&route) {
                undocumented.push(format!("{} {}", route.0, route.1));
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "routes of the OpenAPI document docs/api.md does not name: {undocumented:#?}"
    );
}

/// Every operation of `/openapi.json` has a one-line summary of at most 60 characters (the doc
/// comment is its description), a typed request body when it takes one, and a typed body for
/// each error answer.
#[tokio::test]
async fn every_operation_is_summed_up_in_a_line_and_typed() {
    let server = TestServer::start();
    let (_, doc) = server.get("/openapi.json").await;
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    assert!(schemas.contains_key("ErrorBody"), "{:?}", schemas.keys());
    let props = &schemas["CreateJob"]["properties"]["runtime_options"];
    assert!(props.to_string().contains("RuntimeOptionsBody"), "{props}");
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            operations += 1;
            let at = format!("{method} {path}");
            let summary = op["summary"]
                .as_str()
                .unwrap_or_else(|| panic!("{at}: no summary"));
            assert!(
                summary.chars().count() <= 60 && !summary.contains('\n') && !summary.is_empty(),
                "{at}: {summary:?}"
            );
            assert!(op["description"].is_string(), "{at}: no description");
            if let Some(body) = op.get("requestBody") {
                for (kind, content) in body["content"].as_object().unwrap() {
                    let schema = &content["schema"];
                    assert!(
                        schema.get("$ref").is_some() || schema.get("properties").is_some(),
                        "{at} {kind}: untyped body {schema}"
                    );
                }
            }
            for (code, response) in op["responses"].as_object().unwrap() {
                if code.starts_with('4') || code.starts_with('5') {
                    assert!(
                        response["content"]["application/json"]["schema"].is_object(),
                        "{at} {code}: untyped error {response}"
                    );
                }
            }
        }
    }
    assert!(operations > 100, "{operations}");
}
