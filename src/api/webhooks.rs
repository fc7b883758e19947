//! `/v1/webhooks`: a tenant's webhooks, their secrets and their delivery logs. Every route
//! sees the caller's tenant only: another tenant's webhook is answered 404 like one that does
//! not exist.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};

use crate::api::auth::Acting;
use crate::api::error::ApiResult;
use crate::api::jobs::bad_json;
use crate::state::AppState;
use crate::store::{Delivery, Webhook};
use crate::webhooks::Made;

/// `POST /v1/webhooks` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"url": "https://example.com/hooks/skill-runner",
                          "events": ["run.succeeded", "run.failed"]}))]
pub struct WebhookInput {
    /// An `http(s)` URL that resolves to public addresses only.
    pub url: String,
    /// Of `run.succeeded`, `run.failed`, `run.canceled`, `run.waiting_user`,
    /// `run.waiting_auth`.
    pub events: Vec<String>,
}

/// A webhook with its secret, shown only when it is made or rotated.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookWithSecret {
    pub webhook_id: String,
    /// `whsec_…`: verify each delivery's `webhook-signature` with it (Standard Webhooks).
    pub secret: String,
    #[serde(flatten)]
    pub webhook: Webhook,
}

impl From<Made> for WebhookWithSecret {
    fn from(made: Made) -> Self {
        Self {
            webhook_id: made.webhook.webhook_id.clone(),
            secret: made.secret,
            webhook: made.webhook,
        }
    }
}

/// The tenant's webhooks.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<Webhook>,
}

/// A webhook's latest deliveries, newest first, each with its tries.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<Delivery>,
}

/// Makes a webhook of the caller's tenant; its secret is in this answer only.
#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks", request_body = WebhookInput,
    responses(
        (status = 200, body = WebhookWithSecret),
        (status = 400, description = "The URL or an event is refused (which, why)"),
        (status = 422, description = "Not JSON of this shape"),
    ))]
pub async fn create_webhook(
    State(state): State<AppState>,
    Acting(caller): Acting,
    body: Result<Json<WebhookInput>, JsonRejection>,
) -> ApiResult<Json<WebhookWithSecret>> {
    let Json(body) = body.map_err(bad_json)?;
    let made = state
        .jobs
        .webhooks()
        .create(&caller.tenant_id, &body.url, &body.events)
        .await?;
    state
        .tenants
        .record(
            &caller,
            "webhook.created",
            &made.webhook.webhook_id,
            serde_json::json!({"url": made.webhook.url, "events": made.webhook.events}),
        )
        .await;
    Ok(Json(made.into()))
}

/// The caller's tenant's webhooks (never their secrets).
#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks",
    responses((status = 200, body = WebhookList)))]
pub async fn list_webhooks(
    State(state): State<AppState>,
    Acting(caller): Acting,
) -> ApiResult<Json<WebhookList>> {
    let webhooks = state.jobs.webhooks().list(&caller.tenant_id).await?;
    Ok(Json(WebhookList { webhooks }))
}

/// Deletes a webhook and its deliveries.
#[utoipa::path(delete, path = "/v1/webhooks/{webhook_id}", tag = "webhooks",
    params(("webhook_id" = String, Path)),
    responses((status = 200, description = "Deleted"), (status = 404, description = "No such webhook")))]
pub async fn delete_webhook(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(webhook_id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    state
        .jobs
        .webhooks()
        .delete(&caller.tenant_id, &webhook_id)
        .await?;
    state
        .tenants
        .record(
            &caller,
            "webhook.deleted",
            &webhook_id,
            serde_json::json!({}),
        )
        .await;
    Ok(Json(
        serde_json::json!({"webhook_id": webhook_id, "deleted": true}),
    ))
}

/// Gives a webhook a new secret (shown in this answer only); the one before still signs
/// beside it for 24 hours (`previous_secret_until`), so receivers can switch over.
#[utoipa::path(post, path = "/v1/webhooks/{webhook_id}/rotate", tag = "webhooks",
    params(("webhook_id" = String, Path)),
    responses((status = 200, body = WebhookWithSecret), (status = 404, description = "No such webhook")))]
pub async fn rotate_webhook(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(webhook_id): Path<String>,
) -> ApiResult<Json<WebhookWithSecret>> {
    let made = state
        .jobs
        .webhooks()
        .rotate(&caller.tenant_id, &webhook_id)
        .await?;
    state
        .tenants
        .record(
            &caller,
            "webhook.rotated",
            &webhook_id,
            serde_json::json!({}),
        )
        .await;
    Ok(Json(made.into()))
}

/// A webhook's latest 100 deliveries, newest first: state, tries, and each try's status,
/// latency and the first KiB of the answer.
#[utoipa::path(get, path = "/v1/webhooks/{webhook_id}/deliveries", tag = "webhooks",
    params(("webhook_id" = String, Path)),
    responses((status = 200, body = DeliveryList), (status = 404, description = "No such webhook")))]
pub async fn deliveries(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(webhook_id): Path<String>,
) -> ApiResult<Json<DeliveryList>> {
    let deliveries = state
        .jobs
        .webhooks()
        .deliveries(&caller.tenant_id, &webhook_id)
        .await?;
    Ok(Json(DeliveryList { deliveries }))
}

/// Sends a delivery again now, under its own `webhook-id`.
#[utoipa::path(post, path = "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    tag = "webhooks",
    params(("webhook_id" = String, Path), ("delivery_id" = String, Path)),
    responses((status = 200, description = "Queued to be sent again"),
              (status = 404, description = "No such webhook or delivery")))]
pub async fn redeliver(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path((webhook_id, delivery_id)): Path<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    state
        .jobs
        .webhooks()
        .redeliver(&caller.tenant_id, &webhook_id, &delivery_id)
        .await?;
    Ok(Json(
        serde_json::json!({"delivery_id": delivery_id, "state": "pending"}),
    ))
}
