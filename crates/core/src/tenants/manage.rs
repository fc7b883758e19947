//! Tenants and keys made, changed, rotated and revoked; each change an audit row and a log
//! line, never with a secret.
//!
//! Tenants are the admins' to manage. Keys are too, and an operator manages its own tenant's:
//! no key makes, rotates or revokes a key wider than itself (a wider role, another tenant, or
//! a later expiry than its own).

use serde_json::{Value, json};

use super::access::Access;
use super::{Caller, DEFAULT_TENANT, Role, key_format};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::store::{ApiKey, AuditEntry, NewAudit, NewKey, Quotas, Store, Tenant, TenantDeletion};

/// The longest tenant or key name.
const NAME_MAX: usize = 100;

/// The tenants, their keys and the audit log.
#[derive(Debug)]
pub struct Tenants {
    store: Store,
    access: Access,
}

/// A key just made or rotated: its row, and the whole key, shown this once.
#[derive(Debug, Clone)]
pub struct IssuedKey {
    pub key: ApiKey,
    pub secret: String,
}

impl Tenants {
    pub fn new(store: Store) -> Self {
        Self {
            access: Access::new(store.clone()),
            store,
        }
    }

    /// The keys as this service checks them.
    pub fn access(&self) -> &Access {
        &self.access
    }

    pub async fn create_tenant(&self, by: &Caller, name: &str, quotas: Quotas) -> Result<Tenant> {
        let name = checked_name("name", name)?;
        let now = Timestamp::now();
        let tenant = Tenant {
            tenant_id: uuid::Uuid::now_v7().to_string(),
            name: name.to_owned(),
            quotas,
            created_at: now,
            updated_at: now,
        };
        if !self.store.create_tenant(&tenant).await? {
            return Err(Error::conflict(format!(
                "A tenant named '{name}' exists already: choose another name"
            )));
        }
        self.record(
            by,
            "tenant.created",
            &tenant.tenant_id,
            json!({"name": name, "quotas": quotas}),
        )
        .await;
        Ok(tenant)
    }

    pub async fn tenants(&self) -> Result<Vec<Tenant>> {
        Ok(self.store.tenants().await?)
    }

    /// The tenant, when `by` may see it (its own, or any for an admin).
    pub async fn tenant(&self, by: &Caller, tenant_id: &str) -> Result<Tenant> {
        let visible = by.visible_tenant().is_none_or(|own| *own == *tenant_id);
        match self.store.tenant(tenant_id).await? {
            Some(tenant) if visible => Ok(tenant),
            _ => Err(Error::not_found("Tenant not found")),
        }
    }

    pub async fn set_quotas(&self, by: &Caller, tenant_id: &str, quotas: Quotas) -> Result<Tenant> {
        let tenant = self
            .store
            .set_quotas(tenant_id, &quotas)
            .await?
            .ok_or_else(|| Error::not_found("Tenant not found"))?;
        self.record(by, "tenant.updated", tenant_id, json!({"quotas": quotas}))
            .await;
        Ok(tenant)
    }

    pub async fn delete_tenant(&self, by: &Caller, tenant_id: &str) -> Result<()> {
        if tenant_id == DEFAULT_TENANT {
            return Err(Error::conflict(
                "The default tenant cannot be deleted: it holds the runs made without a key",
            ));
        }
        match self.store.delete_tenant(tenant_id).await? {
            TenantDeletion::Deleted => {
                self.record(by, "tenant.deleted", tenant_id, json!({}))
                    .await;
                Ok(())
            }
            TenantDeletion::NotFound => Err(Error::not_found("Tenant not found")),
            TenantDeletion::InUse { requests, keys } => {
                let mut held = Vec::new();
                if requests {
                    held.push("runs (they go once retention removes them)");
                }
                if keys {
                    held.push("keys that are not revoked (revoke them first)");
                }
                Err(Error::conflict(format!(
                    "The tenant still has {}: it can be deleted once it has none",
                    held.join(" and ")
                )))
            }
        }
    }

    /// Makes a key of `tenant_id`; refused when it would be wider than `by`'s own.
    pub async fn create_key(
        &self,
        by: &Caller,
        tenant_id: &str,
        role: Role,
        name: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<IssuedKey> {
        let tenant = self.tenant(by, tenant_id).await?;
        let name = checked_name("name", name)?;
        if expires_at.is_some_and(|end| end <= Timestamp::now()) {
            return Err(Error::invalid(
                "expires_at: the moment is past; give a later one or none",
            ));
        }
        self.no_wider(by, role, expires_at).await?;
        let made = key_format::make()?;
        let key = NewKey {
            key_id: uuid::Uuid::now_v7().to_string(),
            tenant_id: tenant.tenant_id,
            role,
            name: name.to_owned(),
            prefix: made.prefix,
            hash: made.hash,
            expires_at,
            created_by: by.key_id.as_deref().map(str::to_owned),
        };
        self.store.create_key(&key).await?;
        self.access.forget();
        let row = self.store.key(&key.key_id).await?.ok_or_else(|| {
            Error::Internal(anyhow::anyhow!("key {} vanished once made", key.key_id))
        })?;
        self.record(
            by,
            "key.created",
            &row.key_id,
            json!({"tenant_id": row.tenant_id, "role": role, "name": name, "prefix": row.prefix}),
        )
        .await;
        Ok(IssuedKey {
            key: row,
            secret: made.key,
        })
    }

    /// The keys `by` may see: of `tenant_id`, or every tenant's for an admin who names none.
    pub async fn keys(&self, by: &Caller, tenant_id: Option<&str>) -> Result<Vec<ApiKey>> {
        let tenant = match (by.visible_tenant(), tenant_id) {
            (None, asked) => asked.map(str::to_owned),
            (Some(own), None) => Some(own.to_string()),
            (Some(own), Some(asked)) if *own == *asked => Some(own.to_string()),
            (Some(_), Some(_)) => return Err(Error::not_found("Tenant not found")),
        };
        Ok(self.store.keys(tenant.as_deref()).await?)
    }

    /// Gives a key a new secret; the old one stops opening anything at once on this node and
    /// within a second on the others.
    pub async fn rotate_key(&self, by: &Caller, key_id: &str) -> Result<IssuedKey> {
        let key = self.managed_key(by, key_id).await?;
        let made = key_format::make()?;
        if !self
            .store
            .rotate_key(&key.key_id, &made.prefix, &made.hash)
            .await?
        {
            return Err(Error::conflict(
                "The key is revoked: make a new one instead",
            ));
        }
        self.access.forget();
        self.record(
            by,
            "key.rotated",
            key_id,
            json!({"tenant_id": key.tenant_id, "prefix": made.prefix}),
        )
        .await;
        let key = self.managed_key(by, key_id).await?;
        Ok(IssuedKey {
            key,
            secret: made.key,
        })
    }

    /// Revokes a key; revoking one revoked already changes nothing.
    pub async fn revoke_key(&self, by: &Caller, key_id: &str) -> Result<ApiKey> {
        let key = self.managed_key(by, key_id).await?;
        if self.store.revoke_key(key_id).await? {
            self.access.forget();
            self.record(
                by,
                "key.revoked",
                key_id,
                json!({"tenant_id": key.tenant_id, "prefix": key.prefix}),
            )
            .await;
        }
        self.managed_key(by, key_id).await
    }

    /// Audit rows, newest first, before `before`.
    pub async fn audit(&self, before: Option<i64>, limit: u32) -> Result<Vec<AuditEntry>> {
        Ok(self.store.audit(before, limit).await?)
    }

    /// Records what `by` did, as an audit row and a log line. A failure to record is logged:
    /// the action itself is done.
    pub async fn record(&self, by: &Caller, action: &str, target: &str, detail: Value) {
        tracing::info!(
            target: "skill_runner::audit",
            action,
            target_id = target,
            key_id = by.key_id.as_deref(),
            tenant_id = &*by.tenant_id,
            detail = %detail,
            "audit"
        );
        let entry = NewAudit {
            key_id: by.key_id.as_deref().map(str::to_owned),
            tenant_id: Some(by.tenant_id.to_string()),
            action: action.to_owned(),
            target: Some(target.to_owned()),
            detail,
        };
        if let Err(e) = self.store.record_audit(&entry).await {
            tracing::error!(action, "recording an audit row failed: {e:#}");
        }
    }

    /// A key `by` may rotate or revoke: of its tenant (any, for an admin), no wider than its
    /// own role.
    async fn managed_key(&self, by: &Caller, key_id: &str) -> Result<ApiKey> {
        let visible = |key: &ApiKey| by.visible_tenant().is_none_or(|own| *own == *key.tenant_id);
        let key = match self.store.key(key_id).await? {
            Some(key) if visible(&key) => key,
            _ => return Err(Error::not_found("Key not found")),
        };
        if key.role > by.role {
            return Err(Error::forbidden(format!(
                "The key is a {} key, wider than this {} key: only a key at least as wide may \
                 change it",
                key.role.as_str(),
                by.role.as_str()
            )));
        }
        Ok(key)
    }

    /// Refuses a key wider than `by`'s: a wider role, or an expiry later than `by`'s own.
    async fn no_wider(&self, by: &Caller, role: Role, expires_at: Option<Timestamp>) -> Result<()> {
        if role > by.role {
            return Err(Error::forbidden(format!(
                "role: a {} key cannot make a {} key; a key can only make keys no wider than \
                 itself",
                by.role.as_str(),
                role.as_str()
            )));
        }
        let own_end = match &by.key_id {
            Some(id) => self.store.key(id).await?.and_then(|k| k.expires_at),
            None => None,
        };
        if let Some(own_end) = own_end
            && expires_at.is_none_or(|end| end > own_end)
        {
            return Err(Error::forbidden(format!(
                "expires_at: this key expires at {own_end}, so the keys it makes must expire \
                 by then too"
            )));
        }
        Ok(())
    }
}

fn checked_name<'a>(field: &str, name: &'a str) -> Result<&'a str> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > NAME_MAX || name.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{field}: give 1 to {NAME_MAX} characters, without control characters"
        )));
    }
    Ok(name)
}
