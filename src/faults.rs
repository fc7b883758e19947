//! Failures a test can inject into a debug build, to prove what happens when the service fails
//! at a point no real input reaches (`SKILL_RUNNER_TEST_FAULTS=point,point`, read by `main` from
//! the environment the service was started with). Release builds never fail here.

use std::sync::OnceLock;

static FAULTS: OnceLock<Vec<String>> = OnceLock::new();

/// Sets the injected failure points from `SKILL_RUNNER_TEST_FAULTS` (comma-separated), once.
pub fn configure(spec: Option<&str>) {
    let points = spec
        .unwrap_or_default()
        .split(',')
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let _ = FAULTS.set(points);
}

/// An error when `point` was configured (debug builds only).
pub fn check(point: &str) -> anyhow::Result<()> {
    if cfg!(debug_assertions) && FAULTS.get().is_some_and(|f| f.iter().any(|p| p == point)) {
        anyhow::bail!("injected failure at '{point}'");
    }
    Ok(())
}
