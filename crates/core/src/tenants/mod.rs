//! Tenants: who calls the service, what each key may do, and what an administrator did.
//!
//! - [`key_format`]: what a key looks like, how one is made and what is stored of it.
//! - [`access`]: a presented key to the [`Caller`] it stands for, checked against the store
//!   at most a second ago (a revoked key stops opening anything within that second on every
//!   node).
//! - [`manage`]: tenants and keys made, changed, rotated and revoked, each an audit row.
//!
//! Every request belongs to a tenant; a caller sees only its tenant's requests (an admin sees
//! every tenant's), and another tenant's request is answered exactly as one that does not
//! exist. A deployment without keys is one tenant, [`DEFAULT_TENANT`], and every caller is its
//! admin, as before tenants existed.

pub mod access;
pub mod key_format;
pub mod manage;

use std::sync::Arc;

pub use crate::store::{DEFAULT_TENANT, Role};

/// Who makes a request: the tenant it acts for, its role, and the key it presented (none for
/// an open service, an environment token or the console's Basic Auth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant_id: Arc<str>,
    pub role: Role,
    pub key_id: Option<Arc<str>>,
}

impl Caller {
    /// The admin of the default tenant without a key: a service without keys, a
    /// `SKILL_RUNNER_API_TOKENS` token, the console's Basic Auth, or another node.
    pub fn operator() -> Self {
        Self {
            tenant_id: DEFAULT_TENANT.into(),
            role: Role::Admin,
            key_id: None,
        }
    }

    /// Whether the caller's role is `role` or wider.
    pub fn may(&self, role: Role) -> bool {
        self.role >= role
    }

    /// The tenant whose requests the caller sees; `None` for every tenant's (an admin).
    pub fn visible_tenant(&self) -> Option<Arc<str>> {
        (self.role != Role::Admin).then(|| self.tenant_id.clone())
    }
}
