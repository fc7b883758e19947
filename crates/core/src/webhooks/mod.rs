//! Webhooks: the service tells a tenant's endpoints that its runs ended or wait.
//!
//! - [`target`]: which URLs a webhook may go to (public addresses, checked at each delivery).

pub mod target;
