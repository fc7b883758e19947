//! Tenants, keys and the audit log in PostgreSQL: the same statements as SQLite's (see
//! `crate::tenants`).

use super::Postgres;
use crate::tenants::{
    ApiKey, AuditEntry, AuditRow, NewAudit, NewKey, Quotas, Tenant, TenantDeletion, TenantRow,
    key_columns, tenant_store,
};
use skill_runner_types::clock::Timestamp;

tenant_store!(Postgres, |_store| ());
