//! The one place with `unsafe`: child set-up between `fork` and `exec`.

use std::io;

use nix::sys::signal::Signal;
use nix::unistd::{Pid, getppid};

/// Makes the child die with SIGKILL when the thread that spawned it (a runtime worker, which
/// lives as long as the service) dies, so a crashed service leaves no engine behind.
pub fn kill_with_parent(command: &mut tokio::process::Command) {
    let parent = Pid::this();
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (prctl, getppid); it allocates nothing and takes no locks.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
            // The parent may have died between fork and prctl; then nobody would signal us.
            if getppid() != parent {
                return Err(io::Error::other("parent exited before the child started"));
            }
            Ok(())
        });
    }
}
