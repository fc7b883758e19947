//! Tenants, their API keys and the audit log.
//!
//! A key is kept as the SHA-256 of the whole key (the caller computes it): the database never
//! holds one in clear. Keys are revoked by marking them, never deleted, so a leaked key found
//! later can still be named. The statements use `$n` placeholders, which SQLite takes too: one
//! body serves both backends ([`tenant_store`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use skill_runner_types::clock::Timestamp;

use super::Sqlite;

/// The tenant of deployments without keys, of the `SKILL_RUNNER_API_TOKENS` tokens and of
/// every request made before tenants existed.
pub const DEFAULT_TENANT: &str = "default";

/// A tenant's limits; each absent one is the operator's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Runs of the tenant running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// Runs of the tenant queued at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queued: Option<u32>,
    /// Requests the tenant may create in each calendar minute (UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_per_minute: Option<u32>,
    /// Bytes one upload of the tenant may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_bytes: Option<u64>,
}

/// A tenant, as stored and as the management routes show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Tenant {
    pub tenant_id: String,
    pub name: String,
    /// Its own limits; an absent one is the operator's default.
    pub quotas: Quotas,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(sqlx::FromRow)]
pub(crate) struct TenantRow {
    tenant_id: String,
    name: String,
    quotas: String,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl TryFrom<TenantRow> for Tenant {
    type Error = anyhow::Error;

    fn try_from(r: TenantRow) -> anyhow::Result<Self> {
        Ok(Self {
            quotas: serde_json::from_str(&r.quotas)?,
            tenant_id: r.tenant_id,
            name: r.name,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// What a key may do, from the narrowest to the widest: a wider role may do everything a
/// narrower one may.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    sqlx::Type,
    strum::IntoStaticStr,
    strum::EnumString,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "TEXT", rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Role {
    /// Reads its tenant's runs.
    Read,
    /// Creates, uploads to, answers and cancels its tenant's runs, and reads them.
    Submit,
    /// Its tenant's runs, plus installs, engines and settings.
    Operator,
    /// Everything, of every tenant.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// An API key as stored and listed: never its secret (only the SHA-256 of the whole key is
/// stored, and not read back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ApiKey {
    pub key_id: String,
    pub tenant_id: String,
    pub role: Role,
    /// What the key is for.
    pub name: String,
    /// The key's visible part: it reads `sr_<prefix>_…`.
    pub prefix: String,
    /// When it stops opening anything; never when `null`.
    pub expires_at: Option<Timestamp>,
    /// Written at most once a minute.
    pub last_used_at: Option<Timestamp>,
    /// The key that made this one (`null`: the CLI, a token, Basic Auth or an open service).
    pub created_by: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Set once revoked; a revoked key opens nothing and is kept as a record.
    pub revoked_at: Option<Timestamp>,
}

impl ApiKey {
    /// Whether the key opens the service at `now`: not revoked, not expired.
    pub fn is_valid_at(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|end| now < end)
    }
}

macro_rules! key_columns {
    () => {
        "key_id, tenant_id, role, name, prefix, expires_at, last_used_at, created_by, \
         created_at, updated_at, revoked_at"
    };
}
pub(crate) use key_columns;

/// A key to record.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub key_id: String,
    pub tenant_id: String,
    pub role: Role,
    pub name: String,
    pub prefix: String,
    /// The SHA-256 of the whole key, hex.
    pub hash: String,
    pub expires_at: Option<Timestamp>,
    pub created_by: Option<String>,
}

/// Why a tenant was not deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantDeletion {
    Deleted,
    NotFound,
    /// It still has requests, or keys not revoked.
    InUse {
        requests: bool,
        keys: bool,
    },
}

/// One audit row.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Its place in the log; pages continue before it (`before`).
    pub seq: i64,
    pub at: Timestamp,
    /// The key that acted (`null`: the CLI, an environment token, Basic Auth or an open
    /// service).
    pub key_id: Option<String>,
    /// The acting key's tenant.
    pub tenant_id: Option<String>,
    /// What was done, e.g. `key.created`, `tenant.deleted`, `skill.installed`.
    pub action: String,
    /// What it was done to (a key id, a tenant id, a skill id, a setting).
    pub target: Option<String>,
    /// More about it; never a secret.
    pub detail: Value,
}

#[derive(sqlx::FromRow)]
pub(crate) struct AuditRow {
    seq: i64,
    at: Timestamp,
    key_id: Option<String>,
    tenant_id: Option<String>,
    action: String,
    target: Option<String>,
    detail: String,
}

impl TryFrom<AuditRow> for AuditEntry {
    type Error = anyhow::Error;

    fn try_from(r: AuditRow) -> anyhow::Result<Self> {
        Ok(Self {
            detail: serde_json::from_str(&r.detail)?,
            seq: r.seq,
            at: r.at,
            key_id: r.key_id,
            tenant_id: r.tenant_id,
            action: r.action,
            target: r.target,
        })
    }
}

/// An audit row to record.
#[derive(Debug, Clone)]
pub struct NewAudit {
    pub key_id: Option<String>,
    pub tenant_id: Option<String>,
    pub action: String,
    pub target: Option<String>,
    pub detail: Value,
}

/// Tenants, keys and the audit log.
#[async_trait::async_trait]
pub trait TenantStore: Send + Sync {
    /// The tenant's queued runs, counted up to `at_most` (a count past the quota says no
    /// more).
    async fn queued_runs(&self, tenant_id: &str, at_most: u32) -> anyhow::Result<u64>;

    /// Counts one more request of the tenant in `minute` (`YYYY-MM-DDTHH:MM`), unless `limit`
    /// are counted already; the count with it, `None` when refused. One statement: exact
    /// whichever node counts.
    async fn count_request(
        &self,
        tenant_id: &str,
        minute: &str,
        limit: u32,
    ) -> anyhow::Result<Option<u64>>;

    /// Takes back a request counted in `minute` that was not made after all.
    async fn uncount_request(&self, tenant_id: &str, minute: &str) -> anyhow::Result<()>;

    /// The tenant's requests counted in `minute`.
    async fn requests_in(&self, tenant_id: &str, minute: &str) -> anyhow::Result<u64>;

    /// Records a tenant; false when its name is taken.
    async fn create_tenant(&self, tenant: &Tenant) -> anyhow::Result<bool>;

    /// Every tenant, oldest first.
    async fn tenants(&self) -> anyhow::Result<Vec<Tenant>>;

    async fn tenant(&self, tenant_id: &str) -> anyhow::Result<Option<Tenant>>;

    /// Replaces a tenant's quotas; the tenant as it is now, `None` when there is none.
    async fn set_quotas(&self, tenant_id: &str, quotas: &Quotas) -> anyhow::Result<Option<Tenant>>;

    /// Deletes a tenant that has no requests and no key that is not revoked.
    async fn delete_tenant(&self, tenant_id: &str) -> anyhow::Result<TenantDeletion>;

    async fn create_key(&self, key: &NewKey) -> anyhow::Result<()>;

    /// The keys of `tenant_id` (every tenant's when `None`), oldest first, revoked ones too.
    async fn keys(&self, tenant_id: Option<&str>) -> anyhow::Result<Vec<ApiKey>>;

    async fn key(&self, key_id: &str) -> anyhow::Result<Option<ApiKey>>;

    /// The key whose whole text hashes to `hash`, revoked or not.
    async fn key_by_hash(&self, hash: &str) -> anyhow::Result<Option<ApiKey>>;

    /// Gives a key that is not revoked a new secret (the old one stops opening anything);
    /// false when there is no such key.
    async fn rotate_key(&self, key_id: &str, prefix: &str, hash: &str) -> anyhow::Result<bool>;

    /// Marks a key revoked; false when it was unknown or revoked already.
    async fn revoke_key(&self, key_id: &str) -> anyhow::Result<bool>;

    /// Notes when a key was last used.
    async fn touch_key(&self, key_id: &str, at: Timestamp) -> anyhow::Result<()>;

    /// Whether any key could open the service at `now` (then every request needs one).
    async fn keys_in_force(&self, now: Timestamp) -> anyhow::Result<bool>;

    async fn record_audit(&self, entry: &NewAudit) -> anyhow::Result<()>;

    /// Audit rows, newest first, before `before` (from the newest when `None`).
    async fn audit(&self, before: Option<i64>, limit: u32) -> anyhow::Result<Vec<AuditEntry>>;
}

/// The tenant store, one body for both backends (see `installs::install_store`).
macro_rules! tenant_store {
    ($backend:ty, |$this:ident| $turn:expr) => {
        #[async_trait::async_trait]
        impl $crate::tenants::TenantStore for $backend {
            async fn queued_runs(&self, tenant_id: &str, at_most: u32) -> anyhow::Result<u64> {
                let (n,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM (SELECT 1 FROM runs
                         WHERE tenant_id = $1 AND status = 'queued' LIMIT $2) AS counted",
                )
                .bind(tenant_id)
                .bind(i64::from(at_most))
                .fetch_one(&self.pool)
                .await?;
                Ok(n.max(0) as u64)
            }

            async fn count_request(
                &self,
                tenant_id: &str,
                minute: &str,
                limit: u32,
            ) -> anyhow::Result<Option<u64>> {
                let $this = self;
                let _turn = $turn;
                let counted: Option<(i64,)> = sqlx::query_as(
                    "INSERT INTO tenant_minutes (tenant_id, minute, created) VALUES ($1, $2, 1)
                     ON CONFLICT (tenant_id) DO UPDATE SET
                         created = CASE WHEN tenant_minutes.minute = $2
                                        THEN tenant_minutes.created + 1 ELSE 1 END,
                         minute = $2
                     WHERE tenant_minutes.minute <> $2 OR tenant_minutes.created < $3
                     RETURNING created",
                )
                .bind(tenant_id)
                .bind(minute)
                .bind(i64::from(limit))
                .fetch_optional(&self.pool)
                .await?;
                Ok(counted.map(|(n,)| n.max(0) as u64))
            }

            async fn uncount_request(&self, tenant_id: &str, minute: &str) -> anyhow::Result<()> {
                let $this = self;
                let _turn = $turn;
                sqlx::query(
                    "UPDATE tenant_minutes SET created = created - 1
                     WHERE tenant_id = $1 AND minute = $2 AND created > 0",
                )
                .bind(tenant_id)
                .bind(minute)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn requests_in(&self, tenant_id: &str, minute: &str) -> anyhow::Result<u64> {
                let n: Option<(i64,)> = sqlx::query_as(
                    "SELECT created FROM tenant_minutes WHERE tenant_id = $1 AND minute = $2",
                )
                .bind(tenant_id)
                .bind(minute)
                .fetch_optional(&self.pool)
                .await?;
                Ok(n.map_or(0, |(n,)| n.max(0) as u64))
            }

            async fn create_tenant(&self, tenant: &Tenant) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let done = sqlx::query(
                    "INSERT INTO tenants (tenant_id, name, quotas, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                )
                .bind(&tenant.tenant_id)
                .bind(&tenant.name)
                .bind(serde_json::to_string(&tenant.quotas)?)
                .bind(tenant.created_at)
                .bind(tenant.updated_at)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn tenants(&self) -> anyhow::Result<Vec<Tenant>> {
                let rows: Vec<TenantRow> = sqlx::query_as(
                    "SELECT tenant_id, name, quotas, created_at, updated_at FROM tenants
                     ORDER BY created_at, tenant_id",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(Tenant::try_from).collect()
            }

            async fn tenant(&self, tenant_id: &str) -> anyhow::Result<Option<Tenant>> {
                let row: Option<TenantRow> = sqlx::query_as(
                    "SELECT tenant_id, name, quotas, created_at, updated_at FROM tenants
                     WHERE tenant_id = $1",
                )
                .bind(tenant_id)
                .fetch_optional(&self.pool)
                .await?;
                row.map(Tenant::try_from).transpose()
            }

            async fn set_quotas(
                &self,
                tenant_id: &str,
                quotas: &Quotas,
            ) -> anyhow::Result<Option<Tenant>> {
                {
                    let $this = self;
                    let _turn = $turn;
                    sqlx::query(
                        "UPDATE tenants SET quotas = $1, updated_at = $2 WHERE tenant_id = $3",
                    )
                    .bind(serde_json::to_string(quotas)?)
                    .bind(Timestamp::now())
                    .bind(tenant_id)
                    .execute(&self.pool)
                    .await?;
                }
                self.tenant(tenant_id).await
            }

            async fn delete_tenant(&self, tenant_id: &str) -> anyhow::Result<TenantDeletion> {
                let $this = self;
                let _turn = $turn;
                let mut tx = self.pool.begin().await?;
                let (requests, keys): (bool, bool) = sqlx::query_as(
                    "SELECT EXISTS (SELECT 1 FROM requests WHERE tenant_id = $1),
                            EXISTS (SELECT 1 FROM api_keys
                                    WHERE tenant_id = $1 AND revoked_at IS NULL)",
                )
                .bind(tenant_id)
                .fetch_one(&mut *tx)
                .await?;
                if requests || keys {
                    return Ok(TenantDeletion::InUse { requests, keys });
                }
                let done = sqlx::query("DELETE FROM tenants WHERE tenant_id = $1")
                    .bind(tenant_id)
                    .execute(&mut *tx)
                    .await?;
                // Its secrets go with it: nothing could reach them any more.
                sqlx::query("DELETE FROM secrets WHERE tenant_id = $1")
                    .bind(tenant_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(if done.rows_affected() == 1 {
                    TenantDeletion::Deleted
                } else {
                    TenantDeletion::NotFound
                })
            }

            async fn create_key(&self, key: &NewKey) -> anyhow::Result<()> {
                let $this = self;
                let _turn = $turn;
                let now = Timestamp::now();
                sqlx::query(
                    "INSERT INTO api_keys (key_id, tenant_id, role, name, prefix, hash,
                         expires_at, created_by, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)",
                )
                .bind(&key.key_id)
                .bind(&key.tenant_id)
                .bind(key.role)
                .bind(&key.name)
                .bind(&key.prefix)
                .bind(&key.hash)
                .bind(key.expires_at)
                .bind(&key.created_by)
                .bind(now)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn keys(&self, tenant_id: Option<&str>) -> anyhow::Result<Vec<ApiKey>> {
                let keys = sqlx::query_as(concat!(
                    "SELECT ",
                    key_columns!(),
                    " FROM api_keys WHERE ($1 IS NULL OR tenant_id = $1)",
                    " ORDER BY created_at, key_id"
                ))
                .bind(tenant_id)
                .fetch_all(&self.pool)
                .await?;
                Ok(keys)
            }

            async fn key(&self, key_id: &str) -> anyhow::Result<Option<ApiKey>> {
                let key = sqlx::query_as(concat!(
                    "SELECT ",
                    key_columns!(),
                    " FROM api_keys WHERE key_id = $1"
                ))
                .bind(key_id)
                .fetch_optional(&self.pool)
                .await?;
                Ok(key)
            }

            async fn key_by_hash(&self, hash: &str) -> anyhow::Result<Option<ApiKey>> {
                let key = sqlx::query_as(concat!(
                    "SELECT ",
                    key_columns!(),
                    " FROM api_keys WHERE hash = $1"
                ))
                .bind(hash)
                .fetch_optional(&self.pool)
                .await?;
                Ok(key)
            }

            async fn rotate_key(
                &self,
                key_id: &str,
                prefix: &str,
                hash: &str,
            ) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let done = sqlx::query(
                    "UPDATE api_keys SET prefix = $1, hash = $2, updated_at = $3
                     WHERE key_id = $4 AND revoked_at IS NULL",
                )
                .bind(prefix)
                .bind(hash)
                .bind(Timestamp::now())
                .bind(key_id)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn revoke_key(&self, key_id: &str) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let now = Timestamp::now();
                let done = sqlx::query(
                    "UPDATE api_keys SET revoked_at = $1, updated_at = $1
                     WHERE key_id = $2 AND revoked_at IS NULL",
                )
                .bind(now)
                .bind(key_id)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn touch_key(&self, key_id: &str, at: Timestamp) -> anyhow::Result<()> {
                let $this = self;
                let _turn = $turn;
                sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE key_id = $2")
                    .bind(at)
                    .bind(key_id)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn keys_in_force(&self, now: Timestamp) -> anyhow::Result<bool> {
                let (any,): (bool,) = sqlx::query_as(
                    "SELECT EXISTS (SELECT 1 FROM api_keys WHERE revoked_at IS NULL
                         AND (expires_at IS NULL OR expires_at > $1))",
                )
                .bind(now)
                .fetch_one(&self.pool)
                .await?;
                Ok(any)
            }

            async fn record_audit(&self, entry: &NewAudit) -> anyhow::Result<()> {
                let $this = self;
                let _turn = $turn;
                sqlx::query(
                    "INSERT INTO audit (at, key_id, tenant_id, action, target, detail)
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(Timestamp::now())
                .bind(&entry.key_id)
                .bind(&entry.tenant_id)
                .bind(&entry.action)
                .bind(&entry.target)
                .bind(entry.detail.to_string())
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn audit(
                &self,
                before: Option<i64>,
                limit: u32,
            ) -> anyhow::Result<Vec<AuditEntry>> {
                let rows: Vec<AuditRow> = sqlx::query_as(
                    "SELECT seq, at, key_id, tenant_id, action, target, detail FROM audit
                     WHERE ($1 IS NULL OR seq < $1) ORDER BY seq DESC LIMIT $2",
                )
                .bind(before)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(AuditEntry::try_from).collect()
            }
        }
    };
}
pub(crate) use tenant_store;

tenant_store!(Sqlite, |store| store.writing().await?);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use crate::tests::on_both_backends;

    fn tenant(id: &str, name: &str) -> Tenant {
        let now = Timestamp::now();
        Tenant {
            tenant_id: id.into(),
            name: name.into(),
            quotas: Quotas::default(),
            created_at: now,
            updated_at: now,
        }
    }

    fn key(id: &str, tenant_id: &str, hash: &str) -> NewKey {
        NewKey {
            key_id: id.into(),
            tenant_id: tenant_id.into(),
            role: Role::Submit,
            name: format!("{id} key"),
            prefix: "abcd1234".into(),
            hash: hash.into(),
            expires_at: None,
            created_by: None,
        }
    }

    async fn tenants_keys_and_audit_rows_are_kept(store: Store) {
        let listed = store.tenants().await.unwrap();
        assert_eq!(listed[0].tenant_id, DEFAULT_TENANT, "made by the migration");
        assert!(store.create_tenant(&tenant("t1", "acme")).await.unwrap());
        assert!(
            !store.create_tenant(&tenant("t2", "acme")).await.unwrap(),
            "names are unique"
        );
        let quotas = Quotas {
            max_queued: Some(3),
            upload_bytes: Some(1 << 20),
            ..Quotas::default()
        };
        let t1 = store.set_quotas("t1", &quotas).await.unwrap().unwrap();
        assert_eq!(t1.quotas, quotas);
        assert!(store.set_quotas("nope", &quotas).await.unwrap().is_none());

        let now = Timestamp::now();
        assert!(!store.keys_in_force(now).await.unwrap());
        store.create_key(&key("k1", "t1", "h1")).await.unwrap();
        assert!(store.keys_in_force(now).await.unwrap());
        let k1 = store.key_by_hash("h1").await.unwrap().unwrap();
        assert_eq!((k1.key_id.as_str(), k1.role), ("k1", Role::Submit));
        assert!(k1.is_valid_at(now));
        assert_eq!(
            store.delete_tenant("t1").await.unwrap(),
            TenantDeletion::InUse {
                requests: false,
                keys: true
            }
        );
        assert!(store.rotate_key("k1", "efgh5678", "h2").await.unwrap());
        assert!(store.key_by_hash("h1").await.unwrap().is_none());
        assert_eq!(store.key("k1").await.unwrap().unwrap().prefix, "efgh5678");
        store.touch_key("k1", now).await.unwrap();
        let used = store.key("k1").await.unwrap().unwrap().last_used_at;
        assert_eq!(used.map(|t| t.to_string()), Some(now.to_string()));
        assert!(store.revoke_key("k1").await.unwrap());
        assert!(!store.revoke_key("k1").await.unwrap(), "once");
        assert!(!store.rotate_key("k1", "x", "h3").await.unwrap());
        let revoked = store.key_by_hash("h2").await.unwrap().unwrap();
        assert!(!revoked.is_valid_at(now), "kept, marked");
        assert!(!store.keys_in_force(now).await.unwrap());
        assert_eq!(store.keys(Some("t1")).await.unwrap().len(), 1);
        assert!(store.keys(Some(DEFAULT_TENANT)).await.unwrap().is_empty());
        assert_eq!(store.keys(None).await.unwrap().len(), 1);

        let expiring = NewKey {
            expires_at: Some(Timestamp::before(std::time::Duration::from_secs(1))),
            ..key("k2", "t1", "h4")
        };
        store.create_key(&expiring).await.unwrap();
        assert!(!store.keys_in_force(now).await.unwrap(), "expired");

        assert_eq!(
            store.delete_tenant("t1").await.unwrap(),
            TenantDeletion::InUse {
                requests: false,
                keys: true
            },
            "an expired key is still a key until it is revoked"
        );
        store.revoke_key("k2").await.unwrap();
        assert_eq!(
            store.delete_tenant("t1").await.unwrap(),
            TenantDeletion::Deleted
        );
        assert_eq!(
            store.delete_tenant("t1").await.unwrap(),
            TenantDeletion::NotFound
        );

        for n in 0..5 {
            store
                .record_audit(&NewAudit {
                    key_id: Some("k1".into()),
                    tenant_id: Some("t1".into()),
                    action: format!("a{n}"),
                    target: None,
                    detail: serde_json::json!({"n": n}),
                })
                .await
                .unwrap();
        }
        let page = store.audit(None, 2).await.unwrap();
        assert_eq!(
            page.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(),
            ["a4", "a3"]
        );
        let next = store.audit(Some(page[1].seq), 10).await.unwrap();
        assert_eq!(next.len(), 3);
        assert_eq!(next[0].detail["n"], 2);
    }

    async fn a_tenants_queued_runs_and_requests_of_the_minute_are_counted(store: Store) {
        use crate::Binding;
        use crate::jobs::tests::{new_request, new_run};
        for (n, tenant) in ["t1", "t1", "t1", "t2"].into_iter().enumerate() {
            let request = crate::NewRequest {
                tenant_id: tenant.into(),
                ..new_request(&format!("q{n}"))
            };
            let binding = Binding::Run(crate::NewRun {
                tenant_id: tenant.into(),
                ..new_run(&format!("r{n}"))
            });
            store
                .create_request(&request, Some(&binding))
                .await
                .unwrap();
        }
        assert_eq!(store.queued_runs("t1", 100).await.unwrap(), 3);
        assert_eq!(
            store.queued_runs("t1", 2).await.unwrap(),
            2,
            "counted up to the bound"
        );
        crate::tests::start(&store, "r0", "off").await.unwrap();
        assert_eq!(store.queued_runs("t1", 100).await.unwrap(), 2);
        assert_eq!(store.queued_runs("t2", 100).await.unwrap(), 1);

        let minute = "2026-11-28T10:00";
        assert_eq!(store.count_request("t1", minute, 2).await.unwrap(), Some(1));
        assert_eq!(store.count_request("t1", minute, 2).await.unwrap(), Some(2));
        assert_eq!(
            store.count_request("t1", minute, 2).await.unwrap(),
            None,
            "at its limit"
        );
        assert_eq!(store.count_request("t2", minute, 2).await.unwrap(), Some(1));
        store.uncount_request("t1", minute).await.unwrap();
        assert_eq!(store.requests_in("t1", minute).await.unwrap(), 1);
        let next = "2026-11-28T10:01";
        assert_eq!(
            store.count_request("t1", next, 2).await.unwrap(),
            Some(1),
            "a new minute"
        );
        assert_eq!(store.requests_in("t1", minute).await.unwrap(), 0);
        assert_eq!(store.requests_in("t1", next).await.unwrap(), 1);
        store.uncount_request("t1", minute).await.unwrap();
        assert_eq!(
            store.requests_in("t1", next).await.unwrap(),
            1,
            "an old minute's is gone"
        );
    }

    on_both_backends!(
        tenants_keys_and_audit_rows_are_kept,
        a_tenants_queued_runs_and_requests_of_the_minute_are_counted
    );
}
