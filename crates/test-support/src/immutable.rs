//! Files made immutable (`chattr +i`) for as long as a guard lives, as a volume that turns
//! read-only after I/O errors would leave them: writes through open descriptors fail, reads do
//! not. Needs root and a file system with the attribute (ext4, not tmpfs).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files made immutable; dropped, they are writable again (so the test's folder can go).
#[derive(Debug)]
pub struct Immutable(Vec<PathBuf>);

fn chattr(flag: &str, file: &Path) -> bool {
    Command::new("chattr")
        .arg(flag)
        .arg(file)
        .output()
        .is_ok_and(|out| out.status.success())
}

impl Immutable {
    /// Makes those of `files` that exist immutable. `None`, with a loud `skipped:` line, where
    /// `chattr` cannot (not root, another file system); under `CI=true` that fails instead.
    pub fn set(files: &[PathBuf], test: &str) -> Option<Self> {
        let mut set = Self(Vec::new());
        for file in files.iter().filter(|f| f.exists()) {
            if !chattr("+i", file) {
                let line = format!(
                    "skipped: cannot make {} immutable (chattr +i needs root and ext4) — {test}",
                    file.display()
                );
                eprintln!("\n*** {line} ***\n");
                assert!(std::env::var_os("CI").is_none(), "{line}");
                return None;
            }
            set.0.push(file.clone());
        }
        Some(set)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for file in &self.0 {
            if !chattr("-i", file) {
                eprintln!("cannot make {} writable again (chattr -i)", file.display());
            }
        }
    }
}
