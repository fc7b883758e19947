//! The pinned Python tools the tests drive (`scripts/install-python-tools.sh` installs them, each
//! in a virtual environment outside the working tree).

use std::path::PathBuf;

/// The program `program` of the tool installed in the venv `name` (another folder when the
/// variable `override_var` names one); `None`, said loudly, when it is not installed, which
/// fails the test under `CI`.
pub fn program(name: &str, override_var: &str, program: &str) -> Option<PathBuf> {
    let venv = std::env::var_os(override_var).map_or_else(
        || {
            let cache = std::env::var_os("XDG_CACHE_HOME").map_or_else(
                || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"),
                PathBuf::from,
            );
            cache.join(format!("skill-runner-tests/{name}-venv"))
        },
        PathBuf::from,
    );
    let path = venv.join("bin").join(program);
    if path.is_file() {
        return Some(path);
    }
    let line = format!("skipped: {name} is not installed (run scripts/install-python-tools.sh)");
    assert!(std::env::var_os("CI").is_none(), "{line}");
    eprintln!("\n*** {line} ***\n");
    None
}
