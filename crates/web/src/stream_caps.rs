//! Caps on open event streams (a run's `/events`, `/chat`, FCMP stream; an agent session's):
//! each stream holds a little memory and a connection for as long as its client likes, so one
//! run, one client address and one tenant may each hold only so many. A stream past a cap is
//! refused before it starts (the API answers 429), and its place frees when it closes.

use std::net::IpAddr;
use std::sync::Arc;

use crate::tally::{Slot, Tally};

/// The caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Open streams of one run or session (`SKILL_RUNNER_MAX_STREAMS_PER_RUN`).
    pub per_run: usize,
    /// Open streams of one client address (`SKILL_RUNNER_MAX_STREAMS_PER_ADDRESS`).
    pub per_address: usize,
    /// Open streams of one tenant's callers (`SKILL_RUNNER_MAX_STREAMS_PER_TENANT`).
    pub per_tenant: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        // A thousand watchers of one run (a dashboard on a wall of screens) pass; the
        // connection caps (4,096, 2,048 per address) leave room for everything else.
        Self {
            per_run: 1024,
            per_address: 1024,
            per_tenant: 2048,
        }
    }
}

/// Which cap a refused stream met, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Run(usize),
    Address(usize),
    Tenant(usize),
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (max, whose) = match self {
            Full::Run(max) => (max, "this run"),
            Full::Address(max) => (max, "your address"),
            Full::Tenant(max) => (max, "your tenant"),
        };
        write!(
            f,
            "Too many open event streams of {whose} ({max} at most): close one, or read the \
             history (.../chat/history, .../events/history) instead, and retry"
        )
    }
}

/// The open streams by run, client address and tenant.
#[derive(Debug, Default)]
pub struct StreamCaps {
    limits: StreamLimits,
    runs: Arc<Tally<String>>,
    addresses: Arc<Tally<IpAddr>>,
    tenants: Arc<Tally<String>>,
}

/// One open stream; dropping it (with the stream) frees its places.
#[derive(Debug)]
pub struct StreamSlot {
    _run: Slot<String>,
    _address: Option<Slot<IpAddr>>,
    _tenant: Slot<String>,
}

impl StreamCaps {
    pub fn new(limits: StreamLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// A place for a stream of `run` (a run's or a session's id) opened from `address` (when
    /// the connection is known) by a caller of `tenant`, unless a cap is met.
    pub fn open(
        &self,
        run: &str,
        address: Option<IpAddr>,
        tenant: &str,
    ) -> Result<StreamSlot, Full> {
        let limits = self.limits;
        let run = self
            .runs
            .take(run.to_owned(), limits.per_run)
            .ok_or(Full::Run(limits.per_run))?;
        let address = match address {
            Some(address) => Some(
                self.addresses
                    .take(address, limits.per_address)
                    .ok_or(Full::Address(limits.per_address))?,
            ),
            None => None,
        };
        let tenant = self
            .tenants
            .take(tenant.to_owned(), limits.per_tenant)
            .ok_or(Full::Tenant(limits.per_tenant))?;
        Ok(StreamSlot {
            _run: run,
            _address: address,
            _tenant: tenant,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cap_is_met_on_its_own_and_a_closed_stream_frees_its_places() {
        let caps = StreamCaps::new(StreamLimits {
            per_run: 2,
            per_address: 3,
            per_tenant: 4,
        });
        let (a, b) = ("10.0.0.1".parse().ok(), "10.0.0.2".parse().ok());
        let one = caps.open("r1", a, "t").unwrap();
        let _two = caps.open("r1", a, "t").unwrap();
        assert_eq!(caps.open("r1", b, "t").unwrap_err(), Full::Run(2));
        let _three = caps.open("r2", a, "t").unwrap();
        assert_eq!(caps.open("r3", a, "t").unwrap_err(), Full::Address(3));
        let _four = caps.open("r3", b, "t").unwrap();
        assert_eq!(caps.open("r4", None, "t").unwrap_err(), Full::Tenant(4));
        assert!(
            caps.open("r4", None, "u").is_ok(),
            "another tenant has its own cap"
        );
        drop(one);
        let _five = caps.open("r1", None, "t").unwrap();
        // A refused stream holds no place of the caps it passed before the one it met.
        assert_eq!(caps.open("r5", a, "t").unwrap_err(), Full::Tenant(4));
        assert_eq!(caps.runs.count(&"r5".to_owned()), 0);
        assert_eq!(caps.addresses.count(&a.unwrap()), 2);
        assert!(
            Full::Address(3)
                .to_string()
                .contains("your address (3 at most)")
        );
    }
}
