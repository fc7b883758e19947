//! The MCP server (the official Rust SDK, `rmcp`): the invocable skills as MCP tools, and the
//! skill index as resources, over Streamable HTTP at `/mcp` and over stdio (`skill-runner mcp`).
//!
//! - `tools/list` (50 per page, `cursor` = the next index): every tool of [`crate::tool_defs`]
//!   with its input schema, its output schema when it has an object one, and honest
//!   annotations — echo, calculator and file_search read-only and closed-world; log_transform
//!   not read-only (it may write a file) but not destructive; skill programs, HTTP skills and
//!   installed packages open-world.
//! - `tools/call` runs the skill through the invoke host (the same code as `:invoke`): a
//!   success answers its data as `structuredContent`, mirrored as JSON text; a failure answers
//!   the Normalized Skill Result as text with `isError: true`. An unknown tool is a JSON-RPC
//!   error `-32602`.
//! - `resources/list` / `resources/read`: each indexed `SKILL.md` as `skill://<name>/SKILL.md`.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};

use crate::invoke::Host;
use crate::invoke::builtin::Builtin;
use crate::invoke::catalog::{InvocableSkill, Runner};
use crate::skill::docs::index::Docs;
use crate::tool_defs::{ToolEntry, tools};

/// Tools per `tools/list` page.
const PAGE: usize = 50;

/// The MCP face of the service; cheap to clone (one per session).
#[derive(Clone, Debug)]
pub struct SkillServer {
    host: Arc<Host>,
    docs: Arc<Docs>,
}

impl SkillServer {
    pub fn new(host: Arc<Host>, docs: Arc<Docs>) -> Self {
        Self { host, docs }
    }
}

/// The hints of a skill's tool.
fn annotations(skill: &InvocableSkill) -> ToolAnnotations {
    let base = ToolAnnotations::new().idempotent(false);
    match &skill.runner {
        Runner::Builtin(Builtin::LogTransform) => {
            base.read_only(false).destructive(false).open_world(false)
        }
        Runner::Builtin(_) => base
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
        // Programs, HTTP skills and agent turns may do anything their code does.
        _ => base.read_only(false).destructive(true).open_world(true),
    }
}

fn object(value: &Value) -> Option<Map<String, Value>> {
    match value {
        Value::Object(map) => Some(map.clone()),
        _ => None,
    }
}

fn tool(entry: &ToolEntry, skill: &InvocableSkill) -> Tool {
    let input = object(&entry.definition["input_schema"]).unwrap_or_default();
    let mut tool = Tool::new(entry.name.clone(), entry.description().to_owned(), input);
    tool.output_schema = skill
        .output_schema
        .as_ref()
        .filter(|s| s.doc.get("type") == Some(&json!("object")))
        .and_then(|s| object(&s.doc))
        .map(Arc::new);
    tool.annotations = Some(annotations(skill));
    tool
}

impl rmcp::ServerHandler for SkillServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(
            "skill-runner",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Each tool runs one skill of this skill-runner. Resources are the SKILL.md \
             documents of its skill index (skill://<name>/SKILL.md).",
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor.parse::<usize>().map_err(|_| {
                McpError::invalid_params(
                    format!("cursor '{cursor}' was not given by this server"),
                    None,
                )
            })?,
        };
        let catalog = self.host.catalog().await;
        let all: Vec<Tool> = tools(&catalog)
            .values()
            .filter_map(|entry| Some(tool(entry, catalog.skills.get(&entry.skill_id)?)))
            .collect();
        let page: Vec<Tool> = all.iter().skip(start).take(PAGE).cloned().collect();
        let mut result = ListToolsResult::with_all_items(page);
        if start + PAGE < all.len() {
            result.next_cursor = Some((start + PAGE).to_string());
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let catalog = self.host.catalog().await;
        let tools = tools(&catalog);
        let Some(entry) = tools.get(request.name.as_ref()) else {
            return Err(McpError::invalid_params(
                format!("unknown tool: {}", request.name),
                Some(json!({"tool": request.name})),
            ));
        };
        let input = Value::Object(request.arguments.unwrap_or_default());
        let trace_id = uuid::Uuid::new_v4().to_string();
        let result = self
            .host
            .invoke(
                &entry.skill_id,
                Ok(json!({ "input": input })),
                trace_id,
                &context.ct,
            )
            .await;
        let text = serde_json::to_string(&result).unwrap_or_default();
        let answer = match (&result.data, result.success) {
            (Some(data), true) => {
                let mirrored = serde_json::to_string(data).unwrap_or_default();
                let mut ok = CallToolResult::success(vec![ContentBlock::text(mirrored)]);
                ok.structured_content = Some(data.clone());
                ok
            }
            _ => CallToolResult::error(vec![ContentBlock::text(text)]),
        };
        Ok(answer.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let index = self.docs.index().await;
        let resources = index
            .skills
            .values()
            .map(|entry| {
                let mut resource = Resource::new(uri(&entry.name), entry.name.clone())
                    .with_description(entry.description.clone());
                resource.mime_type = Some("text/markdown".into());
                resource
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let unknown = || {
            McpError::resource_not_found(
                format!("no resource {}", request.uri),
                Some(json!({"uri": request.uri})),
            )
        };
        let name = request
            .uri
            .strip_prefix("skill://")
            .and_then(|rest| rest.strip_suffix("/SKILL.md"))
            .ok_or_else(unknown)?;
        let index = self.docs.index().await;
        let entry = index.skills.get(name).ok_or_else(unknown)?;
        let text = tokio::fs::read_to_string(&entry.location)
            .await
            .map_err(|_| unknown())?;
        let contents =
            ResourceContents::text(text, request.uri.clone()).with_mime_type("text/markdown");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

fn uri(name: &str) -> String {
    format!("skill://{name}/SKILL.md")
}
