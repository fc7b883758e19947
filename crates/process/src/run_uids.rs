//! Per-run uids (`SKILL_RUNNER_RUN_UIDS`): when the service runs as root, each confined turn
//! runs under an unprivileged uid of its own, so turns cannot signal, trace or read each other
//! even where Landlock and namespaces are missing.
//!
//! A turn takes a uid from the configured range (its group is the same number), round-robin so
//! a uid comes back only after the whole range was used, and gives it back when its tree is
//! dead. Before the turn starts the service hands the folders it may write to that uid
//! ([`hand_over`]) and lets the uid's group pass through the run folder (`root:<uid>`, mode
//! `0710`: enter, not list); afterwards it takes the run folder back (`root:root`), so what
//! the turn left is out of reach of whoever gets the uid next. Turns whose writable folders lie
//! outside their run folder (invoke `cli:` programs, which share `OPENSKILL_ALLOWED_ROOT` by
//! design) run under the range's first uid, the *shared* one, which owns that root. A single
//! uid instead of a range makes every turn run under it.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The configured uids and which of them turns hold now.
#[derive(Debug, Clone)]
pub struct RunUids {
    /// Owns the shared folders; taken by turns that write outside their own run folder.
    shared: u32,
    /// Handed out one per turn (first and last); `None` for a single configured uid.
    pool: Option<(u32, u32)>,
    held: Arc<Mutex<Held>>,
}

#[derive(Debug, Default)]
struct Held {
    taken: BTreeSet<u32>,
    /// The pool uid handed out last.
    last: Option<u32>,
}

impl PartialEq for RunUids {
    fn eq(&self, other: &Self) -> bool {
        self.shared == other.shared && self.pool == other.pool
    }
}

impl Eq for RunUids {}

/// The lowest uid a range may hold: below it sit system and login users.
const LOWEST: u32 = 1000;

impl RunUids {
    /// Parses `N` (every turn runs as `N`) or `A-B` (`A` shared, one of `A+1..=B` per turn).
    pub fn parse(raw: &str) -> Result<Self, String> {
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{}' is not a uid", s.trim()))
        };
        let (first, last) = match raw.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(raw)?;
                (n, n)
            }
        };
        if first < LOWEST {
            return Err(format!(
                "uid {first} is below {LOWEST}: a run uid must not be a system or login user's"
            ));
        }
        if last < first || last == u32::MAX {
            return Err(format!(
                "'{raw}' is not a range of uids (expected A-B, A <= B)"
            ));
        }
        let pool = (last > first).then_some((first + 1, last));
        Ok(Self {
            shared: first,
            pool,
            held: Arc::default(),
        })
    }

    /// How `sandbox_status` names this: `per-run-uid` or `one-uid`.
    pub fn kind(&self) -> &'static str {
        match self.pool {
            None => "one-uid",
            Some(_) => "per-run-uid",
        }
    }

    /// The uid of a turn that writes folders outside its own run folder (`shared`), or one of
    /// its own; `None` when every pool uid is held.
    pub fn take(&self, shared: bool) -> Option<RunUid> {
        let (first, last) = match self.pool {
            Some(pool) if !shared => pool,
            _ => {
                return Some(RunUid {
                    uid: self.shared,
                    held: None,
                });
            }
        };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let start = held
            .last
            .map_or(first, |l| if l >= last { first } else { l + 1 });
        let uid = (start..=last)
            .chain(first..start)
            .find(|uid| !held.taken.contains(uid))?;
        held.taken.insert(uid);
        held.last = Some(uid);
        Some(RunUid {
            uid,
            held: Some(self.held.clone()),
        })
    }

    /// Whether a turn under one of these uids can reach `folder` (each folder on the way lets
    /// others through, `o+x`); else which one stops it.
    pub fn reachable(folder: &Path) -> Result<(), String> {
        for dir in folder.ancestors() {
            let mode = std::fs::metadata(dir)
                .map_err(|e| format!("cannot read '{}': {e}", dir.display()))?
                .permissions()
                .mode();
            if mode & 0o001 == 0 {
                return Err(format!(
                    "'{}' does not let other users through (mode {:o}), so turns under \
                     SKILL_RUNNER_RUN_UIDS cannot reach '{}': allow it (chmod o+x) or move the \
                     folder",
                    dir.display(),
                    mode & 0o7777,
                    folder.display()
                ));
            }
        }
        Ok(())
    }

    /// Gives the shared folder (`OPENSKILL_ALLOWED_ROOT`) to the shared uid, at start-up.
    pub fn own_shared(&self, folder: &Path) -> std::io::Result<()> {
        chown_tree(folder, self.shared)
    }

    /// Takes back every run folder under `parents` (`runs/`, invoke's scratch), at start-up:
    /// a service that died mid-turn left that turn's uid a way in.
    pub fn take_back_all(parents: &[PathBuf]) -> std::io::Result<()> {
        for parent in parents {
            let entries = match std::fs::read_dir(parent) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                if entry.file_type()?.is_dir() {
                    take_back(&entry.path())?;
                }
            }
        }
        Ok(())
    }
}

/// A uid a turn holds until this is dropped.
#[derive(Debug)]
pub struct RunUid {
    pub uid: u32,
    held: Option<Arc<Mutex<Held>>>,
}

impl Drop for RunUid {
    fn drop(&mut self) {
        if let Some(held) = &self.held {
            held.lock()
                .unwrap_or_else(|e| e.into_inner())
                .taken
                .remove(&self.uid);
        }
    }
}

/// A turn's uid, with its run folder handed over to it. Dropped once the turn's tree is dead:
/// it takes the folder back (one `chown`) and gives the uid back.
#[derive(Debug)]
pub struct TurnUid {
    uid: RunUid,
    own: Option<PathBuf>,
}

impl TurnUid {
    /// Takes a uid for a turn of run folder `own` that writes `writable`, and hands those
    /// folders over to it. Blocking.
    pub fn start(
        uids: &RunUids,
        own: Option<&Path>,
        writable: &[PathBuf],
    ) -> std::io::Result<Self> {
        let shared = writable
            .iter()
            .any(|w| !own.is_some_and(|own| w.starts_with(own)));
        let uid = uids.take(shared).ok_or_else(|| {
            std::io::Error::other("every uid of SKILL_RUNNER_RUN_UIDS is held by a running turn")
        })?;
        let turn = Self {
            own: own.map(Path::to_path_buf),
            uid,
        };
        hand_over(own, writable, turn.uid.uid)?;
        Ok(turn)
    }

    pub fn uid(&self) -> u32 {
        self.uid.uid
    }
}

impl Drop for TurnUid {
    fn drop(&mut self) {
        if let Some(own) = &self.own
            && let Err(e) = take_back(own)
        {
            tracing::warn!(folder = %own.display(), "cannot take a run folder back from its turn's uid: {e}");
        }
    }
}

/// Lets `uid` write `writable` (every entry below, links not followed) and pass through its
/// run folder `own` (`root:<uid>`, `0710`), before its turn starts.
fn hand_over(own: Option<&Path>, writable: &[PathBuf], uid: u32) -> std::io::Result<()> {
    if let Some(own) = own {
        std::os::unix::fs::lchown(own, Some(0), Some(uid))?;
        std::fs::set_permissions(own, std::fs::Permissions::from_mode(0o710))?;
    }
    writable
        .iter()
        .filter(|w| own.is_some_and(|own| w.starts_with(own)))
        .try_for_each(|w| chown_tree(w, uid))
}

/// Closes the run folder `own` to every uid but the service's, once its turn is over.
fn take_back(own: &Path) -> std::io::Result<()> {
    std::os::unix::fs::lchown(own, Some(0), Some(0))
}

/// Gives `root` and everything below it to `uid` (group too), without following links. A file
/// with more than one link keeps its owner: the other name may be outside the tree.
fn chown_tree(root: &Path, uid: u32) -> std::io::Result<()> {
    let mut next = vec![root.to_path_buf()];
    while let Some(path) = next.pop() {
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            // Gone since it was listed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                next.push(entry?.path());
            }
        } else if meta.nlink() > 1 {
            continue;
        }
        if meta.uid() != uid || meta.gid() != uid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(uid))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::RunUids;

    #[test]
    fn a_range_shares_its_first_uid_and_hands_out_the_rest_round_robin() {
        let uids = RunUids::parse("200000-200002").unwrap();
        assert_eq!(uids.kind(), "per-run-uid");
        assert_eq!(uids.take(true).unwrap().uid, 200000);
        let a = uids.take(false).unwrap();
        let b = uids.take(false).unwrap();
        assert_eq!((a.uid, b.uid), (200001, 200002));
        assert!(uids.take(false).is_none(), "every pool uid is held");
        drop(a);
        // Back to the freed one only after the rest of the range.
        assert_eq!(uids.take(false).unwrap().uid, 200001);
        drop(b);
        let c = uids.take(false).unwrap();
        assert_eq!(c.uid, 200002);
    }

    /// Runs as root, as the service must to use run uids.
    #[test]
    fn handing_over_follows_no_link_out_of_the_tree() {
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let (own, outside) = (tmp.path().join("run"), tmp.path().join("outside"));
        let workspace = own.join("workspace");
        std::fs::create_dir_all(workspace.join("deep/er")).unwrap();
        std::fs::write(workspace.join("deep/er/file"), "x").unwrap();
        std::fs::write(&outside, "secret").unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join("link")).unwrap();
        std::fs::hard_link(&outside, workspace.join("hard")).unwrap();
        let uids = RunUids::parse("300000-300010").unwrap();
        let turn =
            super::TurnUid::start(&uids, Some(&own), std::slice::from_ref(&workspace)).unwrap();
        let owner = |p: &std::path::Path| {
            let m = std::fs::symlink_metadata(p).unwrap();
            (m.uid(), m.gid())
        };
        assert_eq!(turn.uid(), 300001);
        for mine in ["", "deep", "deep/er", "deep/er/file", "link"] {
            assert_eq!(owner(&workspace.join(mine)), (300001, 300001), "{mine}");
        }
        assert_eq!(owner(&outside), (0, 0), "not through a link");
        assert_eq!(owner(&own), (0, 300001));
        drop(turn);
        assert_eq!(owner(&own), (0, 0), "taken back");
        assert_eq!(uids.take(false).unwrap().uid, 300002);
    }

    #[test]
    fn one_uid_serves_every_turn() {
        let uids = RunUids::parse("65000").unwrap();
        assert_eq!(uids.kind(), "one-uid");
        let a = uids.take(false).unwrap();
        let b = uids.take(false).unwrap();
        assert_eq!((a.uid, b.uid), (65000, 65000));
    }

    #[test]
    fn bad_ranges_are_refused_with_the_reason() {
        for (raw, why) in [
            ("0", "below 1000"),
            ("500-600", "below 1000"),
            ("2000-1000", "not a range"),
            ("abc", "not a uid"),
            ("1000-", "not a uid"),
        ] {
            let e = RunUids::parse(raw).unwrap_err();
            assert!(e.contains(why), "{raw}: {e}");
        }
    }
}
