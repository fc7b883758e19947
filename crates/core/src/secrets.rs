//! The tenants' secrets: written through the management routes (the value write-only), bound
//! to a skill's turns as placeholders ([`Secrets::bind`]), read by the egress at each request
//! that carries a placeholder, so a rotation reaches a running turn's next request.
//!
//! A secret belongs to one tenant: a run gets only its own tenant's secrets, and another
//! tenant's names answer as if they did not exist.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use secrecy::SecretString;
use serde::Deserialize;

use crate::egress::secrets::{Bound, SecretHost, Source, check_name, header_names, placeholder};
use crate::error::{Error, Result};
use crate::store::{NewSecret, Store, StoredSecret};

/// Longest value (a token, a key; not a file).
const MAX_VALUE: usize = 8 * 1024;
/// Shortest value: its last 4 characters are shown, and it must be long enough to mask.
const MIN_VALUE: usize = 8;
/// Longest prefix.
const MAX_PREFIX: usize = 64;
/// How long a value read for the egress is reused before it is read again: a rotation on
/// another node reaches a running turn within this.
const FRESH_FOR: Duration = Duration::from_secs(1);
/// Headers a secret may not go into: they frame the request or name its host.
const FRAMING: [&str; 6] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
];

/// A secret as a client writes it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretInput {
    pub name: Option<String>,
    /// Write-only: never returned, logged or shown.
    pub value: String,
    /// `host[:port]` or `*.domain[:port]` (443 without a port).
    pub hosts: Vec<String>,
    /// The request header the placeholder is replaced in (default `Authorization`).
    pub header: Option<String>,
    /// Put before the value when the header holds the bare placeholder (e.g. `Bearer `).
    pub prefix: Option<String>,
    /// Whose secret (an admin's choice; default: the caller's tenant).
    pub tenant_id: Option<String>,
}

/// The tenants' secrets.
#[derive(Debug)]
pub struct Secrets {
    store: Store,
    /// Bumped by each write on this node, so a value read before it is read again at once.
    generation: AtomicU64,
}

impl Secrets {
    pub fn new(store: Store) -> Arc<Self> {
        Arc::new(Self {
            store,
            generation: AtomicU64::new(0),
        })
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Creates `name` for `tenant`; 409 when it exists.
    pub async fn create(&self, tenant: &str, input: SecretInput) -> Result<StoredSecret> {
        let name = input.name.clone().ok_or_else(|| {
            Error::invalid("name: required (the variable the turn gets, e.g. GITHUB_TOKEN)")
        })?;
        let secret = checked(tenant, &name, input)?;
        if !self.store.create_secret(&secret).await? {
            return Err(Error::conflict(format!(
                "A secret named '{name}' exists already: rotate it with PUT \
                 /v1/management/secrets/{name}, or delete it first"
            )));
        }
        tracing::info!(tenant, name, "secret created");
        self.shown(tenant, &name).await
    }

    /// Replaces `name`'s value and binding; 404 when there is none.
    pub async fn rotate(
        &self,
        tenant: &str,
        name: &str,
        input: SecretInput,
    ) -> Result<StoredSecret> {
        if input.name.as_deref().is_some_and(|n| n != name) {
            return Err(Error::invalid(
                "name: differs from the path's; a secret keeps its name (create another instead)",
            ));
        }
        let secret = checked(tenant, name, input)?;
        if !self.store.replace_secret(&secret).await? {
            return Err(missing(name));
        }
        self.changed();
        tracing::info!(tenant, name, "secret rotated");
        self.shown(tenant, name).await
    }

    /// `tenant`'s secrets (every tenant's for `None`).
    pub async fn list(&self, tenant: Option<&str>) -> Result<Vec<StoredSecret>> {
        Ok(self.store.secrets(tenant).await?)
    }

    pub async fn delete(&self, tenant: &str, name: &str) -> Result<()> {
        if !self.store.delete_secret(tenant, name).await? {
            return Err(missing(name));
        }
        self.changed();
        tracing::info!(tenant, name, "secret deleted");
        Ok(())
    }

    async fn shown(&self, tenant: &str, name: &str) -> Result<StoredSecret> {
        Ok(self
            .store
            .secret_with_value(tenant, name)
            .await?
            .ok_or_else(|| missing(name))?
            .0)
    }

    /// The secrets `names` of `tenant` bound to run `run`: each with its placeholder, hosts and
    /// header, its value read at each request. `Err` names the first that does not exist.
    pub async fn bind(
        self: &Arc<Self>,
        tenant: &str,
        run: &str,
        names: &[String],
    ) -> anyhow::Result<std::result::Result<Vec<Bound>, String>> {
        let mut bound = Vec::with_capacity(names.len());
        for name in names {
            let Some((shown, value)) = self.store.secret_with_value(tenant, name).await? else {
                return Ok(Err(name.clone()));
            };
            let source = Stored {
                secrets: self.clone(),
                tenant: tenant.to_owned(),
                name: name.clone(),
                binding: Binding::of(&shown),
                last: std::sync::Mutex::new(Some((
                    self.generation.load(Ordering::Relaxed),
                    Instant::now(),
                    Some(value.into()),
                ))),
            };
            bound.push(Bound {
                name: name.clone(),
                placeholder: placeholder(run, name),
                hosts: shown
                    .hosts
                    .iter()
                    .filter_map(|h| SecretHost::parse(h).ok())
                    .collect(),
                headers: header_names([shown.header.as_str()]).unwrap_or_default(),
                prefix: shown.prefix,
                source: Arc::new(source),
            });
        }
        Ok(Ok(bound))
    }
}

/// Where a secret goes and how, as a turn was given it.
#[derive(Debug, PartialEq, Eq)]
struct Binding {
    hosts: Vec<String>,
    header: String,
    prefix: Option<String>,
}

impl Binding {
    fn of(secret: &StoredSecret) -> Self {
        Self {
            hosts: secret.hosts.clone(),
            header: secret.header.clone(),
            prefix: secret.prefix.clone(),
        }
    }
}

/// A stored secret's value as the egress asks for it: read again once [`FRESH_FOR`] passed or
/// this node changed a secret. A secret bound elsewhere since the turn started (other hosts, a
/// new header or prefix) is no longer the turn's: it reads as gone, and the placeholder goes
/// on unchanged.
struct Stored {
    secrets: Arc<Secrets>,
    tenant: String,
    name: String,
    binding: Binding,
    /// The generation and time it was read at, and the value (`None`: deleted).
    last: std::sync::Mutex<Option<(u64, Instant, Option<SecretString>)>>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored").field("name", &self.name).finish()
    }
}

impl Source for Stored {
    fn value(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<SecretString>> + Send + '_>>
    {
        Box::pin(async move {
            let generation = self.secrets.generation.load(Ordering::Relaxed);
            let cached = self
                .last
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .filter(|(g, at, _)| *g == generation && at.elapsed() < FRESH_FOR);
            if let Some((_, _, value)) = cached {
                return value;
            }
            let value = match self
                .secrets
                .store
                .secret_with_value(&self.tenant, &self.name)
                .await
            {
                Ok(found) => found
                    .filter(|(shown, _)| Binding::of(shown) == self.binding)
                    .map(|(_, v)| SecretString::from(v)),
                Err(e) => {
                    tracing::warn!(error = %e, name = self.name, "cannot read a secret");
                    return None;
                }
            };
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((generation, Instant::now(), value.clone()));
            value
        })
    }
}

fn missing(name: &str) -> Error {
    Error::not_found(format!("No secret named '{name}'"))
}

/// The secret `input` describes, checked field by field.
fn checked(tenant: &str, name: &str, input: SecretInput) -> Result<NewSecret> {
    check_name(name).map_err(|why| Error::invalid(format!("name: {why}")))?;
    if !(MIN_VALUE..=MAX_VALUE).contains(&input.value.len()) {
        return Err(Error::invalid(format!(
            "value: must be {MIN_VALUE}-{MAX_VALUE} bytes (a token or key, not a file)"
        )));
    }
    if input.value.chars().any(|c| c.is_control()) {
        return Err(Error::invalid(
            "value: holds a control character (a line break?); a header value cannot carry it",
        ));
    }
    if input.hosts.is_empty() {
        return Err(Error::invalid(
            "hosts: name at least one host the value may go to (e.g. [\"api.github.com\"])",
        ));
    }
    let hosts = input
        .hosts
        .iter()
        .map(|h| SecretHost::parse(h).map(|h| h.to_string()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|why| Error::invalid(format!("hosts: {why}")))?;
    let header = input.header.as_deref().unwrap_or("Authorization");
    let header = header_names([header])
        .map_err(|why| Error::invalid(format!("header: {why}")))?
        .remove(0);
    if FRAMING.contains(&header.as_str()) {
        return Err(Error::invalid(format!(
            "header: '{header}' frames the request; name the header the value goes in (e.g. \
             Authorization, x-api-key)"
        )));
    }
    if let Some(prefix) = &input.prefix
        && (prefix.len() > MAX_PREFIX || prefix.chars().any(|c| c.is_control()))
    {
        return Err(Error::invalid(format!(
            "prefix: at most {MAX_PREFIX} printable characters (e.g. \"Bearer \")"
        )));
    }
    Ok(NewSecret {
        tenant_id: tenant.to_owned(),
        name: name.to_owned(),
        value: input.value,
        hosts,
        header: header.as_str().to_owned(),
        prefix: input.prefix,
    })
}
