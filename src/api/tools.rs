//! Skills as tool definitions: `GET /v1/tools` (level 1; `?format=text` for the catalog by
//! category), `GET /v1/tools/{name}` (level 2; `?format=md`), `POST /v1/tools/{name}:call`
//! (level 3: the Normalized Skill Result, as `:invoke`) and `POST /v1/tools:validate`.

use std::collections::{BTreeMap, BTreeSet};

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::invoke::{call as invoke_call, parse_body, respond};
use super::jobs::{bad_json, bad_query};
use crate::api::error::{ApiError, ApiResult};
use crate::invoke::result::{self, ErrorCode, SkillError};
use crate::state::AppState;
use crate::tool_defs::validate::{Finding, Profile, validate as check};
use crate::tool_defs::{ToolEntry, markdown, resolve, text_catalog, tools};

const CALL_SUFFIX: &str = ":call";

async fn current(state: &AppState) -> BTreeMap<String, ToolEntry> {
    tools(&*state.invoke.catalog().await)
}

/// `?format=`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FormatQuery {
    /// `json` (default), `text` for the list, `md` for one definition.
    pub format: Option<String>,
}

/// A tool as level 1 lists it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ToolSummary {
    pub name: String,
    pub description: String,
    pub category: String,
}

/// Level 1: every tool's name, description and category (`?format=text`: the catalog a model
/// reads, grouped by category, `- **name**: first line of the description`).
#[utoipa::path(get, path = "/v1/tools", tag = "tools", params(FormatQuery),
    responses((status = 200, description = "`{\"tools\": [...]}`, or text", body = Vec<ToolSummary>)))]
pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(bad_query)?;
    let tools = current(&state).await;
    Ok(match query.format.as_deref() {
        Some("text") => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            text_catalog(&tools),
        )
            .into_response(),
        None | Some("json") => {
            let list: Vec<ToolSummary> = tools
                .values()
                .map(|t| ToolSummary {
                    name: t.name.clone(),
                    description: t.description().to_owned(),
                    category: t.category().to_owned(),
                })
                .collect();
            Json(json!({ "tools": list })).into_response()
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "format: '{other}' is not json or text"
            )));
        }
    })
}

/// Level 2: one tool's whole definition (`?format=md`: Markdown in the document's section
/// order). An alias (`Browser-Navigate`, `browserNavigate`) finds the tool and is reported as
/// `resolved_from`; a miss answers 404 with up to three close names in `detail.suggestions`.
#[utoipa::path(get, path = "/v1/tools/{name}", tag = "tools",
    params(("name" = String, Path), FormatQuery),
    responses((status = 200, description = "The definition, with `skill_id` and `resolved_from`"),
              (status = 404, description = "`{detail: {message, suggestions}}`")))]
pub async fn detail(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(bad_query)?;
    let tools = current(&state).await;
    let (entry, resolved_from) = resolve(&tools, &name).map_err(|suggestions| {
        ApiError::not_found(json!({
            "message": format!("no tool named '{name}'"),
            "suggestions": suggestions,
        }))
    })?;
    Ok(match query.format.as_deref() {
        Some("md") => (
            [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
            markdown(&entry.definition),
        )
            .into_response(),
        None | Some("json") => {
            let mut body = entry.definition.clone();
            body["skill_id"] = json!(entry.skill_id);
            body["resolved_from"] = json!(resolved_from);
            Json(body).into_response()
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "format: '{other}' is not json or md"
            )));
        }
    })
}

/// Level 3: runs the tool's skill with `{"input": {...}}` and answers the Normalized Skill
/// Result, exactly as `POST /v1/skills/{skill_id}:invoke` (statuses, `X-Trace-Id`). Aliases are
/// resolved; an unknown tool is `NOT_FOUND` with `details.suggestions`.
#[utoipa::path(post, path = "/v1/tools/{name}:call", tag = "tools",
    params(("name" = String, Path), ("X-Trace-Id" = Option<String>, Header)),
    request_body(content = crate::api::openapi::InputBody),
    responses((status = 200, description = "The skill succeeded"),
              (status = 404, description = "NOT_FOUND")))]
pub async fn call(
    State(state): State<AppState>,
    target: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let trace_id = result::trace_id(headers.get("x-trace-id").map(HeaderValue::as_bytes));
    let target = target.map_or_else(|_| "\u{fffd}".to_owned(), |Path(t)| t);
    let not_found = |message: String, details: Value| {
        let error = SkillError::new(ErrorCode::NotFound, message).with_details(details);
        let started = std::time::Instant::now();
        respond(crate::invoke::record(
            &target,
            trace_id.clone(),
            None,
            None,
            Err(error),
            started,
        ))
    };
    let Some(name) = target.strip_suffix(CALL_SUFFIX) else {
        return not_found(
            format!("no such action; call POST /v1/tools/{target}{CALL_SUFFIX}"),
            json!({}),
        );
    };
    let tools = current(&state).await;
    match resolve(&tools, name) {
        Ok((entry, _)) => {
            let skill_id = entry.skill_id.clone();
            invoke_call(&state, skill_id, parse_body(body), trace_id).await
        }
        Err(suggestions) => not_found(
            format!("no tool named '{name}'"),
            json!({ "suggestions": suggestions }),
        ),
    }
}

/// A definition to check.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ValidateBody {
    #[schema(value_type = Object)]
    pub definition: Value,
    /// `strict` (default; description ≤ 200 characters) or `compat` (≤ 500).
    pub profile: Option<String>,
}

/// What the profile found.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ValidateAnswer {
    pub valid: bool,
    #[schema(value_type = Vec<Object>)]
    pub errors: Vec<Finding>,
    #[schema(value_type = Vec<Object>)]
    pub warnings: Vec<Finding>,
}

/// Checks a tool definition: required fields, the name, description and detail lengths, the
/// input schema (an object schema that compiles, every parameter typed and described,
/// `required` naming real parameters), examples against the schema; warnings for optional
/// parameters without default, a description without "When", unknown categories and related
/// or workflow tools that are not registered here.
#[utoipa::path(post, path = "/v1/tools:validate", tag = "tools", request_body = ValidateBody,
    responses((status = 200, body = ValidateAnswer),
              (status = 400, description = "Unknown profile"),
              (status = 422, description = "Not JSON of this shape")))]
pub async fn validate(
    State(state): State<AppState>,
    body: Result<Json<ValidateBody>, JsonRejection>,
) -> ApiResult<Json<ValidateAnswer>> {
    let Json(body) = body.map_err(bad_json)?;
    let profile_name = body.profile.unwrap_or_else(|| "strict".into());
    let profile = Profile::parse(&profile_name).ok_or_else(|| {
        ApiError::bad_request(format!("profile: '{profile_name}' is not strict or compat"))
    })?;
    let registered: BTreeSet<String> = current(&state).await.into_keys().collect();
    let report = check(&body.definition, profile, &registered);
    Ok(Json(ValidateAnswer {
        valid: report.valid,
        errors: report.errors,
        warnings: report.warnings,
    }))
}
