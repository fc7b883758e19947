//! The HTTP API: routes, the OpenAPI document and the middleware stack.

pub mod agent;
pub mod auth;
pub mod chat;
pub mod cli_delegate;
pub mod console;
pub mod engine_auth;
pub mod engines;
pub mod error;
pub mod forward;
pub mod invoke;
pub mod jobs;
pub mod management;
pub mod mcp_servers;
pub mod oauth_proxy;
pub mod openapi;
pub mod packages;
pub mod providers;
pub mod reply_files;
pub mod run_views;
pub mod schedules;
pub mod secrets;
pub mod skill_docs;
pub mod skills;
pub mod streams;
pub mod system;
pub mod system_admin;
pub mod tenants;
pub mod tools;
pub mod upload;
pub mod webhooks;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::HeaderName;
use axum::routing::{get, post};
use skill_runner_web::{allowed_hosts, assets, same_origin};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::error::{ApiError, internal_error_response};
use crate::state::AppState;

/// Body limit for JSON and form routes; package uploads set their own.
pub(crate) const DEFAULT_BODY_LIMIT: usize = 2 * 1024 * 1024;

#[derive(OpenApi)]
#[openapi(
    info(title = "skill-runner", description = "Runs skills through agent CLIs or scripts."),
    paths(jobs::artifact, invoke::invoke, tools::call),
    components(schemas(openapi::ErrorBody)),
    tags(
        (name = "jobs", description = "Run installed skills"),
        (name = "temp-skill-runs", description = "Deprecated (answers carry `Deprecation`, \
            `Sunset` and `Link` headers): a skill package is run once through `POST /v1/jobs` with \
            `skill_source: \"temp_upload\"` and its upload. These routes stay for older clients: \
            besides create and upload, every `/v1/jobs/{request_id}/...` route exists under \
            `/v1/temp-skill-runs/{request_id}/...` with the same behaviour, for temporary runs"),
        (name = "skills", description = "Installed skills"),
        (name = "engines", description = "Agent engines, their CLIs and models"),
        (name = "skill-packages", description = "Install and update skill packages"),
        (name = "management", description = "Skills and runs for an operator's console. \
            `/v1/management/runs/{request_id}/events`, `/events/history`, `/chat`, `/chat/history`, `/pending`, `/reply` \
            and `/cancel` are the \
            jobs routes of the same names and see jobs and temporary runs alike"),
        (name = "invoke", description = "Run a skill synchronously and get its Normalized Skill \
            Result (`POST /skills/{skill_id}:invoke` is the same route without `/v1`)"),
        (name = "agent", description = "Chat with a model that calls the invocable skills as \
            tools; every chat is kept as a session of events (`POST /agent/chat` is the same \
            route without `/v1`)"),
        (name = "tools", description = "Every invocable skill as a tool definition, by \
            progressive disclosure: the list, one definition, the call"),
        (name = "skill-docs", description = "`SKILL.md` skills of the configured roots, by \
            progressive disclosure: the catalog, one skill's body, one of its files"),
        (name = "tenants", description = "Tenants, their quotas and API keys, and the audit \
            log. Tenants and the audit log are admin keys'; operator keys manage their own \
            tenant's keys"),
        (name = "system", description = "Service health"),
    )
)]
struct ApiDoc;

/// A change is answered as done only when it was written where a restart finds it: the store
/// refuses writes once its file was deleted or replaced, and this catches one that happened
/// while the request was writing, which would otherwise be answered 2xx and then lost.
async fn writes_kept(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let changes = !request.method().is_safe();
    let response = next.run(request).await;
    if !changes || !response.status().is_success() {
        return response;
    }
    match state.store.in_place() {
        Ok(()) => response,
        Err(lost) => ApiError::Internal(lost.into()).into_response(),
    }
}

fn split() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let temp = |suffix: &str| format!("{}/{{request_id}}{suffix}", jobs::TEMP_PREFIX);
    let run = |suffix: &str| format!("{}/runs/{{request_id}}{suffix}", jobs::MANAGEMENT_PREFIX);
    // Uploads stream to disk under their own caps instead of the default body limit.
    let uploads = OpenApiRouter::new()
        .routes(routes!(packages::install_package))
        .routes(routes!(jobs::upload))
        .routes(routes!(reply_files::reply_files))
        .route(&temp("/upload"), post(jobs::upload))
        .route(
            &temp("/interaction/reply/files"),
            post(reply_files::reply_files),
        )
        .route(&run("/reply/files"), post(reply_files::reply_files))
        .layer(DefaultBodyLimit::disable());
    // Login files are small: the default body limit holds them.
    let logins = OpenApiRouter::new()
        .routes(routes!(engine_auth::import_spec))
        .routes(routes!(engine_auth::import))
        .routes(routes!(engine_auth::log_out))
        .routes(routes!(engine_auth::start_session))
        .routes(routes!(engine_auth::get_session))
        .routes(routes!(engine_auth::session_input))
        .routes(routes!(engine_auth::cancel_session))
        .routes(routes!(engine_auth::run_session))
        .routes(routes!(cli_delegate::start))
        .routes(routes!(cli_delegate::get))
        .routes(routes!(cli_delegate::input))
        .routes(routes!(cli_delegate::cancel))
        .routes(routes!(oauth_proxy::start))
        .routes(routes!(oauth_proxy::get))
        .routes(routes!(oauth_proxy::input))
        .routes(routes!(oauth_proxy::cancel))
        .routes(routes!(oauth_proxy::callback))
        .routes(routes!(oauth_proxy::proxy_callback))
        .routes(routes!(engine_auth::run_import))
        .route(&temp("/auth/session"), get(engine_auth::run_session))
        .route(
            &temp("/interaction/auth/import"),
            post(engine_auth::run_import),
        )
        .route(
            "/v1/engines/auth/sessions",
            post(engine_auth::start_session_by_body),
        )
        .route(
            "/v1/engines/auth/sessions/{session_id}",
            get(engine_auth::get_session),
        )
        .route(
            "/v1/engines/auth/sessions/{session_id}/input",
            post(engine_auth::session_input),
        )
        .route(
            "/v1/engines/auth/sessions/{session_id}/cancel",
            post(engine_auth::cancel_session),
        );
    // Paths with a wildcard, the temporary-run aliases and the management run routes that
    // are the jobs handlers are routed here; the OpenAPI document lists the `/v1/jobs` forms.
    let aliases = OpenApiRouter::new()
        .route(
            "/v1/jobs/{request_id}/artifacts/{*artifact_path}",
            get(jobs::artifact),
        )
        .route(&temp(""), get(jobs::status))
        .route(&temp("/result"), get(jobs::result))
        .route(&temp("/artifacts"), get(jobs::artifacts))
        .route(&temp("/artifacts/{*artifact_path}"), get(jobs::artifact))
        .route(&temp("/bundle"), get(jobs::bundle))
        .route(&temp("/bundle/debug"), get(jobs::debug_bundle))
        .route(&temp("/logs"), get(jobs::logs))
        .route(&temp("/logs/range"), get(jobs::log_range))
        .route(&temp("/files"), get(management::run_files))
        .route(&temp("/file"), get(management::run_file))
        .route("/v1/jobs/{request_id}/files", get(management::run_files))
        .route("/v1/jobs/{request_id}/file", get(management::run_file))
        .route(&temp("/cancel"), post(jobs::cancel))
        .route(&temp("/events"), get(jobs::events))
        .route(&temp("/events/history"), get(chat::events_history))
        .route(&temp("/chat"), get(chat::chat))
        .route(&temp("/chat/history"), get(chat::chat_history))
        .route(&temp("/interaction/pending"), get(jobs::pending))
        .route(&temp("/interaction/reply"), post(jobs::reply))
        .route(&run("/logs/range"), get(jobs::log_range))
        .route(&run("/events"), get(jobs::events))
        .route(&run("/events/history"), get(chat::events_history))
        .route(&run("/chat"), get(chat::chat))
        .route(&run("/chat/history"), get(chat::chat_history))
        .route(&run("/pending"), get(jobs::pending))
        .route(&run("/reply"), post(jobs::reply))
        .route(&run("/cancel"), post(jobs::cancel))
        // `{id}:invoke` is one path segment (the router has no suffix parameters); the
        // handler reads the suffix.
        .route("/v1/skills/{skill_id}", post(invoke::invoke))
        .route("/skills/{skill_id}", post(invoke::invoke))
        .route("/agent/chat", post(agent::chat))
        .route("/v1/tools/{name}", post(tools::call))
        .route("/v1/skill-docs/{name}/files/{*path}", get(skill_docs::file));
    let mut doc = ApiDoc::openapi();
    doc.info.license = None;
    OpenApiRouter::with_openapi(doc)
        .routes(routes!(skills::list_skills))
        .routes(routes!(skills::get_skill))
        .routes(routes!(packages::install_status))
        .routes(routes!(system::ping))
        .routes(routes!(system::handshake))
        .routes(routes!(system::client_address))
        .routes(routes!(system::healthz))
        .routes(routes!(system::readyz))
        .routes(routes!(system::version))
        .routes(routes!(system::metrics))
        .routes(routes!(engines::list_engines))
        .routes(routes!(engines::engine_models))
        .routes(routes!(engines::auth_status))
        .routes(routes!(engines::models_manifest))
        .routes(routes!(engines::add_snapshot))
        .routes(routes!(engines::create_upgrade))
        .routes(routes!(engines::upgrade_status))
        .routes(routes!(engines::management_engines))
        .routes(routes!(engines::management_engine))
        .routes(routes!(invoke::list))
        .routes(routes!(invoke::route_text))
        .routes(routes!(jobs::create_job))
        .routes(routes!(jobs::create_temp))
        .routes(routes!(jobs::status))
        .routes(routes!(jobs::result))
        .routes(routes!(jobs::artifacts))
        .routes(routes!(jobs::bundle))
        .routes(routes!(jobs::debug_bundle))
        .routes(routes!(jobs::logs))
        .routes(routes!(jobs::log_range))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::cleanup))
        .routes(routes!(jobs::events))
        .routes(routes!(chat::events_history))
        .routes(routes!(chat::chat))
        .routes(routes!(chat::chat_history))
        .routes(routes!(jobs::pending))
        .routes(routes!(jobs::reply))
        .routes(routes!(tools::list))
        .routes(routes!(tools::detail))
        .routes(routes!(tools::validate))
        .routes(routes!(skill_docs::list))
        .routes(routes!(skill_docs::catalog))
        .routes(routes!(skill_docs::detail))
        .merge(
            OpenApiRouter::new()
                .routes(routes!(skill_docs::validate))
                .layer(DefaultBodyLimit::max(skill_docs::MAX_VALIDATE_BYTES)),
        )
        .routes(routes!(agent::chat))
        .routes(routes!(agent::list_sessions))
        .routes(routes!(agent::get_session, agent::delete_session))
        .routes(routes!(agent::session_events))
        .routes(routes!(
            system_admin::get_settings,
            system_admin::put_settings
        ))
        .routes(routes!(system_admin::query_logs))
        .routes(routes!(system_admin::reset_data))
        .routes(routes!(management::runtime_options))
        .routes(routes!(mcp_servers::list))
        .routes(routes!(mcp_servers::put, mcp_servers::delete))
        .routes(routes!(providers::list))
        .routes(routes!(providers::put, providers::delete))
        .routes(routes!(providers::delete_credential))
        .routes(routes!(management::list_skills))
        .routes(routes!(management::get_skill))
        .routes(routes!(management::get_skill_schemas))
        .routes(routes!(tenants::create_tenant, tenants::list_tenants))
        .routes(routes!(
            tenants::get_tenant,
            tenants::update_tenant,
            tenants::delete_tenant
        ))
        .routes(routes!(tenants::create_key))
        .routes(routes!(tenants::list_keys))
        .routes(routes!(tenants::rotate_key))
        .routes(routes!(tenants::revoke_key))
        .routes(routes!(tenants::audit))
        .routes(routes!(secrets::create_secret, secrets::list_secrets))
        .routes(routes!(secrets::rotate_secret, secrets::delete_secret))
        .routes(routes!(secrets::egress_ca))
        .routes(routes!(webhooks::create_webhook, webhooks::list_webhooks))
        .routes(routes!(webhooks::delete_webhook))
        .routes(routes!(webhooks::rotate_webhook))
        .routes(routes!(webhooks::deliveries))
        .routes(routes!(webhooks::redeliver))
        .routes(routes!(
            schedules::create_schedule,
            schedules::list_schedules
        ))
        .routes(routes!(
            schedules::get_schedule,
            schedules::update_schedule,
            schedules::delete_schedule
        ))
        .routes(routes!(schedules::trigger_schedule))
        .routes(routes!(management::list_runs))
        .routes(routes!(management::get_run))
        .routes(routes!(management::run_files))
        .routes(routes!(management::run_file))
        .merge(uploads)
        .merge(logins)
        .merge(aliases)
        .split_for_parts()
}

/// The complete application.
/// `/mcp`: the MCP server over Streamable HTTP (JSON answers where a stream is not needed),
/// behind the administrative Basic Auth when it is enabled. Its sessions end when the service
/// shuts down.
fn mcp_router(state: &AppState) -> Router<AppState> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let server = crate::mcp::SkillServer::new(state.invoke.clone(), state.skill_docs.clone());
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.agent.closing().child_token())
        .with_json_response(true);
    // Every route checks `Host` ([`allowed_hosts`]), this one too.
    config = config.disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            streams::capped_mcp_stream,
        ))
        .layer(axum::middleware::from_extractor_with_state::<auth::Admin, _>(state.clone()))
}

pub fn router(state: AppState) -> Router {
    let (api, doc) = split();
    let x_request_id = HeaderName::from_static("x-request-id");
    let traced = state.config.traces.is_some();
    let middleware = ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(
            x_request_id.clone(),
            MakeRequestUuid,
        ))
        .layer(TraceLayer::new_for_http().make_span_with(move |req: &Request| {
            let http_request_id = req
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            // The access line inside carries only the status and time: the method and path are
            // said here, once.
            let span = tracing::info_span!("http", method = %req.method(), path = req.uri().path(),
                                           http_request_id, otel.name = tracing::field::Empty);
            if traced {
                // Named by the route's pattern in exported traces (`POST /v1/jobs`); left out
                // of the log lines when nothing is exported.
                let route = req
                    .extensions()
                    .get::<MatchedPath>()
                    .map_or(req.uri().path(), |p| p.as_str());
                span.record("otel.name", format_args!("{} {route}", req.method()));
            }
            span
        }))
        .layer(PropagateRequestIdLayer::new(x_request_id))
        .layer(CatchPanicLayer::custom(|_| internal_error_response()));
    let openapi_json = openapi::finish(doc).to_string();
    let app = api
        .route(
            "/openapi.json",
            get(move || async move { ([("content-type", "application/json")], openapi_json) }),
        )
        .route("/docs", get(assets::docs))
        .route("/static/{*path}", get(assets::file))
        .route("/", get(assets::home))
        .merge(console::router(&state))
        .merge(console::login_router())
        .merge(mcp_router(&state))
        .fallback(|| async { ApiError::not_found("Not Found") })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            writes_kept,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::to_holder,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(axum::middleware::from_fn(jobs::deprecated_alias))
        .layer(axum::middleware::from_fn(same_origin::guard))
        .layer(axum::middleware::from_fn_with_state(
            std::sync::Arc::new(allowed_hosts::AllowedHosts::new(
                state.config.bind,
                &state.config.allowed_hosts,
            )),
            allowed_hosts::guard,
        ))
        .layer(DefaultBodyLimit::max(DEFAULT_BODY_LIMIT))
        .layer(axum::middleware::from_fn(crate::metrics::record_request))
        .layer(middleware)
        .with_state(state);
    // Around the whole router: a route's layers see its 405 before the router adds `Allow`.
    Router::new().fallback_service(tower::Layer::layer(
        &axum::middleware::from_fn(error::explain_not_allowed),
        app,
    ))
}
