//! Secrets a tenant binds to hosts, which turns receive as placeholders and the egress puts in.
//!
//! The value is written and read back only to be put in a request: a listing reads every
//! column but it (its last four characters are kept beside it for that). The statements use
//! `$n` placeholders, which SQLite takes too: one body serves both backends ([`secret_store`]).

use serde::Serialize;
use skill_runner_types::clock::Timestamp;

use super::Sqlite;

/// A secret as listed: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct StoredSecret {
    pub tenant_id: String,
    /// The variable a turn of a skill that asks for it gets.
    pub name: String,
    /// The value's last four characters, to tell versions apart.
    pub last4: String,
    /// Where the value may go (`host[:port]`, `*.domain[:port]`).
    pub hosts: Vec<String>,
    /// The request header the placeholder is replaced in.
    pub header: String,
    /// Put before the value when the header holds the bare placeholder (e.g. `Bearer `).
    pub prefix: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(sqlx::FromRow)]
pub(crate) struct SecretRow {
    tenant_id: String,
    name: String,
    last4: String,
    hosts: String,
    header: String,
    prefix: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl TryFrom<SecretRow> for StoredSecret {
    type Error = anyhow::Error;

    fn try_from(r: SecretRow) -> anyhow::Result<Self> {
        Ok(Self {
            hosts: serde_json::from_str(&r.hosts)?,
            tenant_id: r.tenant_id,
            name: r.name,
            last4: r.last4,
            header: r.header,
            prefix: r.prefix,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// A secret to write (create, or replace by rotation).
#[derive(Debug, Clone)]
pub struct NewSecret {
    pub tenant_id: String,
    pub name: String,
    pub value: String,
    pub hosts: Vec<String>,
    pub header: String,
    pub prefix: Option<String>,
}

impl NewSecret {
    pub(crate) fn last4(&self) -> String {
        let chars: Vec<char> = self.value.chars().collect();
        chars[chars.len().saturating_sub(4)..].iter().collect()
    }
}

macro_rules! secret_columns {
    () => {
        "tenant_id, name, last4, hosts, header, prefix, created_at, updated_at"
    };
}
pub(crate) use secret_columns;

/// Secrets, by tenant and name.
#[async_trait::async_trait]
pub trait SecretStore: Send + Sync {
    /// Creates the secret; `false` when the tenant has one of that name already.
    async fn create_secret(&self, secret: &NewSecret) -> anyhow::Result<bool>;
    /// Replaces the secret's value and binding; `false` when there is none of that name.
    async fn replace_secret(&self, secret: &NewSecret) -> anyhow::Result<bool>;
    /// The tenant's secrets (every tenant's for `None`), by tenant and name.
    async fn secrets(&self, tenant_id: Option<&str>) -> anyhow::Result<Vec<StoredSecret>>;
    /// The secret and its value.
    async fn secret_with_value(
        &self,
        tenant_id: &str,
        name: &str,
    ) -> anyhow::Result<Option<(StoredSecret, String)>>;
    /// `false` when there is none of that name.
    async fn delete_secret(&self, tenant_id: &str, name: &str) -> anyhow::Result<bool>;
}

/// The one body of [`SecretStore`] for a backend whose pool is `self.pool`; `$turn` is what a
/// writer holds while it writes (SQLite's write turn).
macro_rules! secret_store {
    ($backend:ty, |$this:ident| $turn:expr) => {
        #[async_trait::async_trait]
        impl $crate::secrets::SecretStore for $backend {
            async fn create_secret(
                &self,
                secret: &$crate::secrets::NewSecret,
            ) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let now = skill_runner_types::clock::Timestamp::now();
                let done = sqlx::query(
                    "INSERT INTO secrets (tenant_id, name, value, last4, hosts, header, prefix,
                                          created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
                     ON CONFLICT (tenant_id, name) DO NOTHING",
                )
                .bind(&secret.tenant_id)
                .bind(&secret.name)
                .bind(&secret.value)
                .bind(secret.last4())
                .bind(serde_json::to_string(&secret.hosts)?)
                .bind(&secret.header)
                .bind(&secret.prefix)
                .bind(now)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn replace_secret(
                &self,
                secret: &$crate::secrets::NewSecret,
            ) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let done = sqlx::query(
                    "UPDATE secrets SET value = $3, last4 = $4, hosts = $5, header = $6,
                                        prefix = $7, updated_at = $8
                     WHERE tenant_id = $1 AND name = $2",
                )
                .bind(&secret.tenant_id)
                .bind(&secret.name)
                .bind(&secret.value)
                .bind(secret.last4())
                .bind(serde_json::to_string(&secret.hosts)?)
                .bind(&secret.header)
                .bind(&secret.prefix)
                .bind(skill_runner_types::clock::Timestamp::now())
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn secrets(
                &self,
                tenant_id: Option<&str>,
            ) -> anyhow::Result<Vec<$crate::secrets::StoredSecret>> {
                let rows: Vec<$crate::secrets::SecretRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    $crate::secrets::secret_columns!(),
                    " FROM secrets WHERE $1 IS NULL OR tenant_id = $1 ORDER BY tenant_id, name"
                ))
                .bind(tenant_id)
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(TryInto::try_into).collect()
            }

            async fn secret_with_value(
                &self,
                tenant_id: &str,
                name: &str,
            ) -> anyhow::Result<Option<($crate::secrets::StoredSecret, String)>> {
                #[derive(sqlx::FromRow)]
                struct WithValue {
                    #[sqlx(flatten)]
                    row: $crate::secrets::SecretRow,
                    value: String,
                }
                let row: Option<WithValue> = sqlx::query_as(concat!(
                    "SELECT ",
                    $crate::secrets::secret_columns!(),
                    ", value FROM secrets WHERE tenant_id = $1 AND name = $2"
                ))
                .bind(tenant_id)
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
                row.map(|r| Ok((r.row.try_into()?, r.value))).transpose()
            }

            async fn delete_secret(&self, tenant_id: &str, name: &str) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let done = sqlx::query("DELETE FROM secrets WHERE tenant_id = $1 AND name = $2")
                    .bind(tenant_id)
                    .bind(name)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
        }
    };
}
pub(crate) use secret_store;

secret_store!(Sqlite, |store| store.writing().await?);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listing_never_holds_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let store = Sqlite::open(&dir.path().join("db.sqlite")).await.unwrap();
        let mut secret = NewSecret {
            tenant_id: "t1".into(),
            name: "GITHUB_TOKEN".into(),
            value: "ghp_0123456789abcdef".into(),
            hosts: vec!["api.github.com".into()],
            header: "authorization".into(),
            prefix: Some("Bearer ".into()),
        };
        assert!(store.create_secret(&secret).await.unwrap());
        assert!(!store.create_secret(&secret).await.unwrap(), "one per name");
        let listed = store.secrets(Some("t1")).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].last4, "cdef");
        assert!(!format!("{listed:?}").contains("ghp_"));
        assert!(store.secrets(Some("t2")).await.unwrap().is_empty());
        secret.value = "ghp_rotated-9999".into();
        assert!(store.replace_secret(&secret).await.unwrap());
        let (shown, value) = store
            .secret_with_value("t1", "GITHUB_TOKEN")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (shown.last4.as_str(), value.as_str()),
            ("9999", "ghp_rotated-9999")
        );
        assert!(
            store
                .secret_with_value("t2", "GITHUB_TOKEN")
                .await
                .unwrap()
                .is_none()
        );
        assert!(!store.delete_secret("t2", "GITHUB_TOKEN").await.unwrap());
        assert!(store.delete_secret("t1", "GITHUB_TOKEN").await.unwrap());
        assert!(store.secrets(None).await.unwrap().is_empty());
    }
}
