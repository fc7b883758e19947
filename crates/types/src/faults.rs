//! Failures a test can inject into a debug build, to prove what happens when the service fails
//! at a point no real input reaches. `SKILL_RUNNER_TEST_FAULTS=point,point*N` (read by `main`
//! from the environment the service was started with): each point fails the first time it is
//! reached, or the first `N` times. Release builds never fail here.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Failures left, by point.
static FAULTS: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();

/// Sets the injected failure points from `SKILL_RUNNER_TEST_FAULTS`, once.
pub fn configure(spec: Option<&str>) {
    let points = spec
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('*') {
            Some((point, times)) => (point.to_owned(), times.parse().unwrap_or(1)),
            None => (p.to_owned(), 1),
        })
        .collect();
    let _ = FAULTS.set(Mutex::new(points));
}

/// A failure a test injected.
#[derive(Debug)]
pub struct Injected(String);

impl std::fmt::Display for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "injected failure at '{}'", self.0)
    }
}

impl std::error::Error for Injected {}

/// An error when `point` still has failures left (debug builds only).
pub fn check(point: &str) -> Result<(), Injected> {
    if !cfg!(debug_assertions) {
        return Ok(());
    }
    let Some(faults) = FAULTS.get() else {
        return Ok(());
    };
    let mut faults = faults.lock().expect("faults lock");
    match faults.get_mut(point) {
        Some(left) if *left > 0 => {
            *left -= 1;
            Err(Injected(point.to_owned()))
        }
        _ => Ok(()),
    }
}
