//! The HTTP API: routes, the OpenAPI document and the middleware stack.

pub mod packages;
pub mod skills;
pub mod system;
pub mod upload;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::HeaderName;
use axum::routing::get;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_scalar::{Scalar, Servable};

use crate::error::{ApiError, internal_error_response};
use crate::state::AppState;

/// Body limit for JSON and form routes; package uploads set their own.
const DEFAULT_BODY_LIMIT: usize = 2 * 1024 * 1024;

#[derive(OpenApi)]
#[openapi(
    info(title = "skill-runner", description = "Runs skills through agent CLIs or scripts."),
    tags(
        (name = "skills", description = "Installed skills"),
        (name = "skill-packages", description = "Install and update skill packages"),
        (name = "system", description = "Service health"),
    )
)]
struct ApiDoc;

/// The OpenAPI document generated from the handlers.
pub fn openapi() -> utoipa::openapi::OpenApi {
    split().1
}

fn split() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    // Package uploads stream to disk under their own cap instead of the default body limit.
    let uploads = OpenApiRouter::new()
        .routes(routes!(packages::install_package))
        .layer(DefaultBodyLimit::disable());
    let mut doc = ApiDoc::openapi();
    doc.info.license = None;
    OpenApiRouter::with_openapi(doc)
        .routes(routes!(skills::list_skills))
        .routes(routes!(skills::get_skill))
        .routes(routes!(packages::install_status))
        .routes(routes!(system::ping))
        .merge(uploads)
        .split_for_parts()
}

/// The complete application.
pub fn router(state: AppState) -> Router {
    let (api, doc) = split();
    let x_request_id = HeaderName::from_static("x-request-id");
    let middleware = ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(
            x_request_id.clone(),
            MakeRequestUuid,
        ))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let path = req
                .extensions()
                .get::<MatchedPath>()
                .map_or(req.uri().path(), |p| p.as_str());
            let request_id = req
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            tracing::info_span!("http", method = %req.method(), path, request_id)
        }))
        .layer(PropagateRequestIdLayer::new(x_request_id))
        .layer(CatchPanicLayer::custom(|_| internal_error_response()));
    let openapi_json = serde_json::to_string(&doc).expect("OpenAPI document serialises");
    api.route(
        "/openapi.json",
        get(move || async move { ([("content-type", "application/json")], openapi_json) }),
    )
    .merge(Scalar::with_url("/docs", doc))
    .fallback(|| async { ApiError::not_found("Not Found") })
    .layer(DefaultBodyLimit::max(DEFAULT_BODY_LIMIT))
    .layer(middleware)
    .with_state(state)
}
