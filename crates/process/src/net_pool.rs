//! Network namespaces the forkserver keeps for door-less turns, reused from one turn to the
//! next.
//!
//! Creating a network namespace and tearing it down costs about a millisecond of kernel time
//! per turn (`setup_net` registers loopback and its sysctls; `cleanup_net` waits for RCU),
//! more than any other barrier. A turn without doors (no allow-list: every `script` turn by
//! default) needs only a loopback of its own, so the forkserver lends it an idle namespace,
//! with `lo` already up, and takes it back once the turn leader is reaped.
//!
//! Why a returned namespace is clean: the leader is pid 1 of the turn's pid namespace, so by
//! the time it is reaped every process of the turn is gone, and with them every socket they
//! held (a listener, an abstract unix name). Nothing else of the turn can reach into the
//! namespace: turns hold no capability (routes, addresses, firewall rules and sysctls need
//! `CAP_NET_ADMIN`) and seccomp refuses `setns`. What a later turn may still see is traffic
//! residue: loopback's byte counters and sockets in `TIME_WAIT`. Turns with doors get a fresh
//! namespace, since the service holds their listeners there.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;

use nix::sched::{CloneFlags, setns, unshare};

/// Idle namespaces kept at most; more are released (a burst of concurrent turns grows the pool
/// once, the steady state reuses it).
const MAX_IDLE: usize = 32;

/// The forkserver's network namespaces: its own, the idle ones and those lent to a leader.
#[derive(Debug)]
pub struct NetPool {
    home: OwnedFd,
    idle: Vec<OwnedFd>,
    lent: HashMap<i32, OwnedFd>,
}

impl NetPool {
    /// A pool for the calling process (single-threaded: `unshare` moves the whole process).
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            home: open_own()?,
            idle: Vec::new(),
            lent: HashMap::new(),
        })
    }

    /// A clean namespace with loopback up: an idle one, else a new one.
    pub fn take(&mut self) -> io::Result<OwnedFd> {
        match self.idle.pop() {
            Some(ns) => Ok(ns),
            None => self.create(),
        }
    }

    /// `ns` was not lent after all (the fork failed).
    pub fn put_back(&mut self, ns: OwnedFd) {
        if self.idle.len() < MAX_IDLE {
            self.idle.push(ns);
        }
    }

    /// `ns` belongs to the leader `pid` until it is reaped.
    pub fn lend(&mut self, pid: i32, ns: OwnedFd) {
        self.lent.insert(pid, ns);
    }

    /// The leader `pid` was reaped: its namespace, if it had one of the pool's, is idle again.
    pub fn returned(&mut self, pid: i32) {
        if let Some(ns) = self.lent.remove(&pid) {
            self.put_back(ns);
        }
    }

    /// Makes a namespace, brings its loopback up and comes back home. A process that cannot
    /// come back must not fork another leader: it exits.
    fn create(&self) -> io::Result<OwnedFd> {
        unshare(CloneFlags::CLONE_NEWNET)?;
        let made = open_own().and_then(|ns| super::sys::loopback_up().map(|()| ns));
        if let Err(e) = setns(&self.home, CloneFlags::CLONE_NEWNET) {
            eprintln!("skill-runner forkserver: cannot return to the service's network: {e}");
            std::process::exit(1);
        }
        made
    }
}

/// This thread's network namespace.
fn open_own() -> io::Result<OwnedFd> {
    Ok(std::fs::File::open("/proc/thread-self/ns/net")?.into())
}
