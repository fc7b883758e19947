//! The web console under `/ui`: server-rendered pages (askama templates in `templates/`) that
//! htmx updates in place, on the same semantics as `/v1/management/*`. Every route sits behind
//! the administrative Basic Auth (`UI_BASIC_AUTH_*`) when it is enabled.

mod drafts;
mod engines;
mod legacy;
mod login;
mod mcp;
mod run_result;
mod runs;
mod schedules;
mod secrets;
mod sessions;
mod settings;
mod skills;
mod tenants;
pub(crate) mod terminal;
mod time;
mod timeline;

use askama::Template;
use axum::Router;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};

use crate::api::auth::Admin;
use crate::api::error::ApiError;
use crate::state::AppState;
pub use skill_runner_web::i18n::{self, Lang};

/// The login page, open to whoever has no credentials yet (see [`crate::api::auth`]).
pub fn login_router() -> Router<AppState> {
    Router::new()
        .route("/ui/login", get(login::page).post(login::submit))
        .route("/ui/logout", post(login::logout))
        .layer(axum::middleware::from_fn(i18n::remember))
        .layer(skill_runner_web::assets::policy_layer())
}

/// The console's routes.
pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/ui", get(skills::page))
        .route("/ui/", get(skills::page))
        .route("/ui/management/skills/table", get(skills::table))
        .route("/ui/skill-packages/install", post(skills::install))
        .route(
            "/ui/skill-packages/{request_id}/status",
            get(skills::install_status),
        )
        .route("/ui/skills/{skill_id}", get(skills::detail))
        .route("/ui/skills/{skill_id}/view", get(skills::view))
        .route(
            "/ui/skills/{skill_id}/run",
            post(skills::run).get(skills::run_form),
        )
        .route("/ui/engines", get(engines::page))
        .route("/ui/management/engines/table", get(engines::table))
        .route("/ui/engines/upgrades", post(engines::upgrade))
        .route(
            "/ui/engines/upgrades/{request_id}/status",
            get(engines::upgrade_status),
        )
        .route("/ui/engines/tui/session", get(terminal::current))
        .route("/ui/engines/tui/session/start", post(terminal::start))
        .route("/ui/engines/tui/session/stop", post(terminal::stop))
        .route("/ui/engines/tui/session/input", post(terminal::retired))
        .route("/ui/engines/tui/session/resize", post(terminal::retired))
        .route("/ui/engines/tui/session/ws", get(terminal::socket))
        .route("/ui/engines/mcp", get(mcp::page))
        .route("/ui/engines/mcp/servers", post(mcp::put))
        .route("/ui/engines/mcp/import", post(mcp::import))
        .route(
            "/ui/engines/mcp/servers/{server_id}/delete",
            post(mcp::delete),
        )
        .route("/ui/engines/{engine}/models", get(engines::models))
        .route(
            "/ui/engines/{engine}/providers",
            post(engines::put_provider),
        )
        .route(
            "/ui/engines/{engine}/login/api-key",
            post(engines::log_in_with_key),
        )
        .route(
            "/ui/engines/{engine}/login/import",
            post(engines::import_login),
        )
        .route("/ui/engines/{engine}/logout", post(engines::log_out))
        .route("/ui/engines/{engine}/login", get(engines::login))
        .route("/ui/engines/{engine}/login/sign-in", post(engines::sign_in))
        .route(
            "/ui/engines/{engine}/login/delegate",
            post(engines::delegate),
        )
        .route(
            "/ui/engines/{engine}/login/sign-in/{session_id}",
            get(engines::sign_in_status),
        )
        .route(
            "/ui/engines/{engine}/login/sign-in/{session_id}/input",
            post(engines::sign_in_input),
        )
        .route(
            "/ui/engines/{engine}/providers/{provider_id}/delete",
            post(engines::delete_provider),
        )
        .route(
            "/ui/engines/{engine}/models/snapshots",
            post(engines::add_snapshot),
        )
        .route("/ui/settings", get(settings::page))
        .route("/ui/settings/log-level", post(settings::set_level))
        .route("/ui/settings/logs", get(settings::logs))
        .route("/ui/settings/reset", post(settings::reset))
        .route("/ui/me", get(tenants::me))
        .route("/ui/schedules", get(schedules::page))
        .route("/ui/schedules/{id}/trigger", post(schedules::trigger))
        .route("/ui/schedules/{id}/delete", post(schedules::delete))
        .route("/ui/schedules/{id}/{action}", post(schedules::pause))
        .route("/ui/secrets", get(secrets::page).post(secrets::create))
        .route("/ui/secrets/{name}/rotate", post(secrets::rotate))
        .route("/ui/secrets/{name}/delete", post(secrets::delete))
        .route("/ui/tenants", get(tenants::page).post(tenants::create))
        .route("/ui/tenants/{tenant_id}", get(tenants::detail))
        .route("/ui/tenants/{tenant_id}/keys", post(tenants::create_key))
        .route("/ui/keys/{key_id}/revoke", post(tenants::revoke_key))
        .route("/ui/sessions", get(sessions::page))
        .route("/ui/sessions/{session_id}", get(sessions::detail))
        .route(
            "/ui/management/sessions/{session_id}/events",
            get(sessions::events_fragment),
        )
        .route("/ui/runs", get(runs::page))
        .route("/ui/management/runs/table", get(runs::table))
        .route("/ui/runs/{request_id}", get(runs::detail))
        .route("/ui/runs/{request_id}/file", get(runs::view))
        .route("/ui/runs/{request_id}/cancel", post(runs::cancel))
        .route("/ui/runs/{request_id}/reply", post(runs::reply))
        .route("/ui/runs/{request_id}/rerun", post(runs::rerun))
        .route("/ui/runs/{request_id}/download", get(run_result::artifact))
        .route("/ui/runs/{request_id}/bundle", get(run_result::bundle))
        .route("/ui/runs/{request_id}/image", get(run_result::image))
        .route(
            "/ui/management/runs/{request_id}/result",
            get(run_result::section),
        )
        .route("/ui/management/runs/{request_id}/view", get(runs::info))
        .route("/ui/management/runs/{request_id}/files", get(runs::files))
        .route(
            "/ui/management/runs/{request_id}/question",
            get(runs::question),
        )
        .route("/ui/skills/table", get(legacy::skills_table))
        .route("/ui/engines/table", get(legacy::engines_table))
        .route("/ui/runs/table", get(legacy::runs_table))
        .route("/ui/runs/{request_id}/view", get(legacy::run_view))
        .route("/ui/runs/{request_id}/logs/tail", get(legacy::logs_tail))
        .route("/ui/{*rest}", get(no_such_page))
        .layer(axum::middleware::from_fn(whole_error_pages))
        .layer(axum::middleware::from_fn(i18n::remember))
        .layer(skill_runner_web::assets::policy_layer())
        .route_layer(axum::middleware::from_extractor_with_state::<Admin, _>(
            state.clone(),
        ))
}

/// A page or fragment, or the error that stands in its place.
pub type Page = Result<Html<String>, ConsoleError>;

/// `GET /ui/<anything else>`: a console page that does not exist.
async fn no_such_page(l: Lang, uri: axum::http::Uri) -> ConsoleError {
    ConsoleError(ApiError::not_found(
        l.tr("error.no_page").replace("{path}", uri.path()),
    ))
}

/// The whole page of an error, for a browser that navigated to the console page that failed.
#[derive(Template)]
#[template(path = "error_page.html")]
struct ErrorPage {
    l: Lang,
    section: &'static str,
    status: u16,
    title: String,
    message: String,
}

/// Marks an error answer that is a whole page already (a form shown again with what it got
/// wrong), which [`whole_error_pages`] leaves as it is.
#[derive(Debug, Clone, Copy)]
pub struct WholePage;

/// An error answered to a page load (not an htmx request, which swaps the fragment in) becomes
/// a whole page in the console's layout, saying what went wrong and the way back.
async fn whole_error_pages(
    l: Lang,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let fragment_wanted = request.headers().contains_key("hx-request");
    let response = next.run(request).await;
    let status = response.status();
    let html = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if fragment_wanted
        || !html
        || !(status.is_client_error() || status.is_server_error())
        || response.extensions().get::<WholePage>().is_some()
    {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return crate::api::error::internal_error_response();
    };
    let fragment = String::from_utf8_lossy(&bytes);
    // The fragment's text: its one element's content.
    let message = fragment
        .split_once('>')
        .and_then(|(_, rest)| rest.rsplit_once('<'))
        .map_or_else(|| fragment.to_string(), |(text, _)| text.to_owned());
    let page = ErrorPage {
        section: "",
        status: status.as_u16(),
        title: {
            // The status's name in the page's language, where the catalogue has it.
            let key = format!("error.{}", status.as_u16());
            let name = match l.tr(&key) {
                said if said != key => said,
                _ => status.canonical_reason().unwrap_or_default(),
            };
            format!("{} {name}", status.as_u16())
        },
        message: html_unescape(&message),
        l,
    };
    match page.render() {
        Ok(body) => {
            let mut response = (status, Html(body)).into_response();
            for (name, value) in parts.headers.iter() {
                if name != axum::http::header::CONTENT_TYPE
                    && name != axum::http::header::CONTENT_LENGTH
                {
                    response.headers_mut().append(name, value.clone());
                }
            }
            *response.extensions_mut() = parts.extensions;
            response
        }
        Err(_) => crate::api::error::internal_error_response(),
    }
}

/// The text of an escaped HTML fragment (the template escapes it again).
fn html_unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Renders a template; a template that cannot render is a server error.
fn render(template: &impl Template) -> Page {
    template
        .render()
        .map(Html)
        .map_err(|e| ConsoleError(ApiError::Internal(e.into())))
}

/// An API error shown as an HTML fragment with the same status: htmx swaps it in where the
/// content would have gone (`responseHandling` in `base.html` lets 4xx and 5xx through).
#[derive(Debug)]
pub struct ConsoleError(pub ApiError);

impl From<ApiError> for ConsoleError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

#[derive(Template)]
#[template(path = "partials/error.html")]
struct ErrorFragment {
    status: u16,
    message: String,
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        // Among nodes, a page of a run held by another node is that node's to render
        // (`forward`): the message is the answer only where nothing forwards it.
        let holder = match &self.0 {
            ApiError::Elsewhere(node) => Some(node.clone()),
            _ => None,
        };
        let (status, message) = self.0.into_message();
        let fragment = ErrorFragment {
            status: status.as_u16(),
            message,
        };
        let mut response = match fragment.render() {
            Ok(body) => (status, Html(body)).into_response(),
            Err(_) => return crate::api::error::internal_error_response(),
        };
        if let Some(node) = holder {
            response.extensions_mut().insert(node);
        }
        response
    }
}
