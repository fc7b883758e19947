//! Failures a test can inject into a debug build, to prove what happens when the service fails
//! at a point no real input reaches (`SKILL_RUNNER_TEST_FAULTS=point,point`). Release builds
//! never fail here.

/// An error when `point` is listed in `SKILL_RUNNER_TEST_FAULTS` (debug builds only).
pub fn check(point: &str) -> anyhow::Result<()> {
    #[cfg(debug_assertions)]
    {
        static FAULTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let faults = FAULTS.get_or_init(|| {
            std::env::var("SKILL_RUNNER_TEST_FAULTS")
                .unwrap_or_default()
                .split(',')
                .map(|p| p.trim().to_owned())
                .collect()
        });
        if faults.iter().any(|f| f == point) {
            anyhow::bail!("injected failure at '{point}'");
        }
    }
    let _ = point;
    Ok(())
}
