//! Webhooks: a tenant's endpoints told when its runs end or wait, as Standard Webhooks.
//!
//! - [`target`]: which URLs a webhook may go to (public addresses, checked at each delivery).
//! - [`signing`]: the `webhook-signature` of a message.
//! - [`sender`]: the loop that sends the outbox's deliveries, and retries them.
//!
//! A webhook belongs to a tenant: another tenant's webhook is answered as one that does not
//! exist. Its secret (`whsec_…`) is shown once, when it is made or rotated; after a rotation
//! the secret before signs beside the new one for [`ROTATION_OVERLAP`].

pub mod sender;
pub mod signing;
pub mod target;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use skill_runner_types::clock::Timestamp;

use crate::error::{Error, Result};
use crate::store::{Delivery, NewWebhook, Store, WEBHOOK_EVENTS, Webhook};
pub use target::Allowed;

/// How long a rotated-out secret still signs.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 60 * 60);
/// Deliveries a webhook's log lists.
const LOGGED: u32 = 100;

/// A webhook as made: its secret shown this once.
#[derive(Debug, Clone)]
pub struct Made {
    pub webhook: Webhook,
    pub secret: String,
}

/// The tenants' webhooks and the sending of their deliveries.
#[derive(Debug)]
pub struct Webhooks {
    store: Store,
    allowed: Allowed,
    /// A delivery may be due: a run moved, a delivery was sent again.
    due: Arc<tokio::sync::Notify>,
    node_id: String,
    /// HTTP clients by target host and checked addresses ([`sender`]).
    clients: std::sync::Mutex<Clients>,
}

type Clients = std::collections::HashMap<(String, Vec<std::net::SocketAddr>), reqwest::Client>;

impl Webhooks {
    pub fn new(store: Store, allowed: Allowed, node_id: String) -> Arc<Self> {
        Arc::new(Self {
            store,
            allowed,
            due: Arc::default(),
            node_id,
            clients: Default::default(),
        })
    }

    /// Tells the sender a delivery may be due.
    pub fn wake(&self) {
        self.due.notify_one();
    }

    /// Makes a webhook of `tenant_id` for `url` and `events`; the URL must resolve to
    /// public addresses only (unless the operator allows it).
    pub async fn create(&self, tenant_id: &str, url: &str, events: &[String]) -> Result<Made> {
        target::resolve(url, &self.allowed)
            .await
            .map_err(|why| Error::invalid(format!("url: {why}")))?;
        if events.is_empty() {
            return Err(Error::invalid(format!(
                "events must name at least one of {}",
                WEBHOOK_EVENTS.join(", ")
            )));
        }
        if let Some(unknown) = events
            .iter()
            .find(|e| !WEBHOOK_EVENTS.contains(&e.as_str()))
        {
            return Err(Error::invalid(format!(
                "events: '{unknown}' is no event; the events are {}",
                WEBHOOK_EVENTS.join(", ")
            )));
        }
        let mut events = events.to_vec();
        events.sort();
        events.dedup();
        let secret = signing::new_secret()?;
        let webhook = self
            .store
            .create_webhook(&NewWebhook {
                webhook_id: format!("wh_{}", uuid::Uuid::new_v4().simple()),
                tenant_id: tenant_id.to_owned(),
                url: url.to_owned(),
                events,
                secret: secret.clone(),
            })
            .await?;
        Ok(Made { webhook, secret })
    }

    /// The tenant's webhooks.
    pub async fn list(&self, tenant_id: &str) -> Result<Vec<Webhook>> {
        Ok(self.store.webhooks(tenant_id).await?)
    }

    /// Deletes a webhook of the tenant and its deliveries.
    pub async fn delete(&self, tenant_id: &str, webhook_id: &str) -> Result<()> {
        match self.store.delete_webhook(tenant_id, webhook_id).await? {
            true => Ok(()),
            false => Err(not_found(webhook_id)),
        }
    }

    /// Gives a webhook a new secret; the one before still signs for [`ROTATION_OVERLAP`].
    pub async fn rotate(&self, tenant_id: &str, webhook_id: &str) -> Result<Made> {
        let secret = signing::new_secret()?;
        let until = Timestamp::after(ROTATION_OVERLAP);
        match self
            .store
            .rotate_secret(tenant_id, webhook_id, &secret, until)
            .await?
        {
            Some(webhook) => Ok(Made { webhook, secret }),
            None => Err(not_found(webhook_id)),
        }
    }

    /// A webhook's latest deliveries, newest first.
    pub async fn deliveries(&self, tenant_id: &str, webhook_id: &str) -> Result<Vec<Delivery>> {
        if self.store.webhook(tenant_id, webhook_id).await?.is_none() {
            return Err(not_found(webhook_id));
        }
        Ok(self.store.deliveries(tenant_id, webhook_id, LOGGED).await?)
    }

    /// Sends a delivery again under its own `webhook-id`.
    pub async fn redeliver(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        delivery_id: &str,
    ) -> Result<()> {
        if !self
            .store
            .redeliver(tenant_id, webhook_id, delivery_id)
            .await?
        {
            return Err(Error::not_found(Value::from(format!(
                "Webhook '{webhook_id}' has no delivery '{delivery_id}'"
            ))));
        }
        self.wake();
        Ok(())
    }

    /// Checks a job's `callback_url`: a public target, and a tenant with a webhook whose
    /// secret signs it.
    pub async fn check_callback(&self, tenant_id: &str, url: &str) -> Result<()> {
        target::resolve(url, &self.allowed)
            .await
            .map_err(|why| Error::invalid(format!("callback_url: {why}")))?;
        let signing = self.store.webhooks(tenant_id).await?;
        if !signing.iter().any(|w| w.disabled_at.is_none()) {
            return Err(Error::invalid(
                "callback_url: a callback is signed with the tenant's webhook secrets, and this \
                 tenant has no enabled webhook: make one first (POST /v1/webhooks)",
            ));
        }
        Ok(())
    }
}

fn not_found(webhook_id: &str) -> Error {
    Error::not_found(Value::from(format!("Webhook not found: '{webhook_id}'")))
}
