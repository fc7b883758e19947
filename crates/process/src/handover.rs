//! The service keeps no secret in its own environment.
//!
//! `/proc/<pid>/environ` shows the environment a process was started with to every process of
//! the same user (and to root) for as long as it lives; changing the variables later does not
//! change that page. So the service reads the environment it was started with, then
//! re-executes itself (same pid, same arguments) with only [`KEPT`] names set, handing every
//! variable over through an anonymous memory file whose descriptor number travels in
//! [`FD_VARIABLE`] — never in argv, which `/proc/<pid>/cmdline` shows to everyone. The
//! re-executed service reads the file, closes it (so no child inherits it) and marks itself
//! non-dumpable: a same-user process can then neither attach to it nor read its memory, and its
//! `/proc` files belong to root. This holds whether it runs as root or as an unprivileged user.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

/// Carries the descriptor of the handed-over environment to the re-executed service.
pub const FD_VARIABLE: &str = "SKILL_RUNNER_CONFIG_FD";

/// What stays in the service's own environment: where programs are, the locale and the time
/// zone (read by libraries, never secret). Everything else is handed over.
pub fn kept(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    matches!(
        name.as_ref(),
        "PATH" | "HOME" | "LANG" | "LANGUAGE" | "TZ" | "RUST_BACKTRACE"
    ) || name.starts_with("LC_")
}

/// The environment the service was started with, when this process is the re-executed service
/// (`None` on a first start). Closes the handed-over descriptor.
pub fn receive() -> io::Result<Option<BTreeMap<String, String>>> {
    let Some(raw) = std::env::var_os(FD_VARIABLE) else {
        return Ok(None);
    };
    let fd: i32 = raw
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{FD_VARIABLE} is not a descriptor number"),
            )
        })?;
    // Reopened through /proc so no descriptor is adopted by number (which would need unsafe).
    let mut text = String::new();
    let read = std::fs::File::open(format!("/proc/self/fd/{fd}"))
        .and_then(|mut file| file.read_to_string(&mut text));
    nix::unistd::close(fd).map_err(io::Error::from)?;
    read?;
    // Exec'd as /proc/self/exe, the process is named `exe`: it takes the binary's name back,
    // so that `ps`, `pgrep` and `top` show `skill-runner`.
    nix::sys::prctl::set_name(c"skill-runner").map_err(io::Error::from)?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Re-executes this binary with the same arguments, only the [`kept`] variables in its
/// environment, and all of them (those that are text) behind [`FD_VARIABLE`]. Returns only on
/// failure.
pub fn reexec() -> io::Error {
    let vars: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let file = match handover_file(&vars) {
        Ok(file) => file,
        Err(e) => return e,
    };
    let mut args = std::env::args_os();
    let arg0 = args
        .next()
        .unwrap_or_else(|| OsString::from("skill-runner"));
    // /proc/self/exe still names this binary after a rebuild replaced the file on disk.
    std::process::Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| kept(k)))
        .env(FD_VARIABLE, file.as_raw_fd().to_string())
        .exec()
}

/// An anonymous memory file holding `vars` as JSON, rewound, inheritable across `exec`.
fn handover_file(vars: &BTreeMap<String, String>) -> io::Result<std::fs::File> {
    let fd = memfd_create("skill-runner-config", MFdFlags::MFD_CLOEXEC)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&serde_json::to_vec(vars).map_err(io::Error::from)?)?;
    file.rewind()?;
    fcntl(&file, FcntlArg::F_SETFD(FdFlag::empty()))?;
    Ok(file)
}

/// Marks the service non-dumpable: no same-user process may attach to it or read its memory.
pub fn seal() -> io::Result<()> {
    nix::sys::prctl::set_dumpable(false).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_names_that_are_never_secret() {
        for name in ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ"] {
            assert!(kept(OsStr::new(name)), "{name}");
        }
        for name in [
            "AWS_SECRET_ACCESS_KEY",
            "SKILL_RUNNER_AGENT_OPENAI_API_KEY",
            "UI_BASIC_AUTH_PASSWORD",
            "DATABASE_URL",
            "HTTPS_PROXY",
            "PATHX",
            "SKILL_RUNNER_API_TOKENS",
        ] {
            assert!(!kept(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn the_handover_file_holds_every_variable() {
        let vars = BTreeMap::from([
            ("A".to_owned(), "1".to_owned()),
            ("SECRET".to_owned(), "s=t\nu".to_owned()),
        ]);
        let mut file = handover_file(&vars).unwrap();
        let flags = fcntl(&file, FcntlArg::F_GETFD).unwrap();
        assert_eq!(
            flags & FdFlag::FD_CLOEXEC.bits(),
            0,
            "inherited across exec"
        );
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        let back: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, vars);
    }
}
