//! Shared storage (`SKILL_RUNNER_STORAGE_URL`): where a run's folder goes once its turn
//! settles, so that the nodes of a cluster can serve a finished run, or resume a waiting one,
//! after the node that ran it is gone.
//!
//! Run folders stay in the data dir of the node running the turn; storage holds a copy of each
//! settled folder as one zip (`runs/<run_id>.zip`, without its bundles, which are rebuilt on
//! demand), and the package of each skill installed (`skills/<id>/<version>.zip`), which the
//! other nodes install into their own skills dirs. Any `object_store` URL works: `file:///mnt/shared` (a folder every node mounts,
//! NFS), `s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`, with the
//! provider's usual variables (`AWS_ACCESS_KEY_ID`, `AWS_REGION`, `GOOGLE_SERVICE_ACCOUNT`,
//! `AZURE_STORAGE_ACCOUNT_NAME`, …). Without it, a run's files live only where it ran.
//!
//! A copy is written by the service from files it opened without following links (regular
//! files only), and unpacked by the service into a fresh folder under names it checks, so a
//! turn's symlinks or odd names never reach another node.

use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt as _};
use tokio::io::AsyncWriteExt as _;

use crate::run_folder::{RunFolder, open_beneath};
use skill_runner_skill::walk::files_under;

/// The object of a skill's folder in storage that names its current version.
const CURRENT: &str = "current";

/// Where settled run folders are copied for the other nodes.
#[derive(Debug, Clone)]
pub struct Storage {
    objects: Arc<dyn ObjectStore>,
    prefix: Key,
    /// Temporary files of copies on their way in or out (in the data dir).
    scratch: PathBuf,
}

impl Storage {
    /// The storage at `url`, configured from the provider's variables `vars` (as the service
    /// was started with them); `scratch` is a folder of this node's for the archives under way.
    pub fn open(url: &str, scratch: PathBuf, vars: Vec<(String, String)>) -> anyhow::Result<Self> {
        let parsed = url::Url::parse(url)
            .with_context(|| format!("SKILL_RUNNER_STORAGE_URL '{url}' is not a URL"))?;
        let (objects, prefix) = object_store::parse_url_opts(&parsed, vars)
            .with_context(|| format!("SKILL_RUNNER_STORAGE_URL '{url}' names no usable storage"))?;
        Ok(Self {
            objects: Arc::from(objects),
            prefix,
            scratch,
        })
    }

    /// Whether the storage answers: its run copies can be listed.
    pub async fn check(&self) -> anyhow::Result<()> {
        self.objects
            .list_with_delimiter(Some(&self.prefix))
            .await
            .context("listing the shared storage")?;
        Ok(())
    }

    fn key(&self, run_id: &str) -> Key {
        self.prefix
            .clone()
            .join("runs")
            .join(format!("{run_id}.zip"))
    }

    /// Copies `folder` (but its bundles) into the storage as run `run_id`'s.
    pub async fn save(&self, run_id: &str, folder: &RunFolder) -> anyhow::Result<()> {
        tokio::fs::create_dir_all(&self.scratch).await?;
        let root = folder.root().to_path_buf();
        let scratch = self.scratch.clone();
        let archive = tokio::task::spawn_blocking(move || pack(&root, &scratch)).await??;
        let file = tokio::fs::File::from_std(archive.reopen()?);
        self.put(self.key(run_id), file).await
    }

    /// Unpacks run `run_id`'s copy into `folder`, which must not exist yet; false when the
    /// storage has none. The folder appears whole or not at all.
    pub async fn restore(&self, run_id: &str, folder: &RunFolder) -> anyhow::Result<bool> {
        tokio::fs::create_dir_all(&self.scratch).await?;
        let archive = tempfile::NamedTempFile::new_in(&self.scratch)?;
        let file = tokio::fs::File::from_std(archive.reopen()?);
        if !self.get(&self.key(run_id), file).await? {
            return Ok(false);
        }
        let root = folder.root().to_path_buf();
        let scratch = self.scratch.clone();
        tokio::task::spawn_blocking(move || unpack(archive.reopen()?, &root, &scratch)).await??;
        Ok(true)
    }

    fn package_key(&self, id: &str, version: &str) -> Key {
        self.prefix
            .clone()
            .join("skills")
            .join(id)
            .join(format!("{version}.zip"))
    }

    /// The object naming a skill's version kept last (`skills/<id>/current`).
    fn current_key(&self, id: &str) -> Key {
        self.prefix.clone().join("skills").join(id).join(CURRENT)
    }

    /// Keeps an installed skill's package (`skills/<id>/<version>.zip`) for the other nodes,
    /// then names it the skill's current one.
    pub async fn save_package(&self, id: &str, version: &str, zip: &Path) -> anyhow::Result<()> {
        let file = tokio::fs::File::open(zip).await?;
        self.put(self.package_key(id, version), file).await?;
        self.objects
            .put(
                &self.current_key(id),
                version.to_owned().into_bytes().into(),
            )
            .await
            .context("writing to the shared storage")?;
        Ok(())
    }

    /// The newest package kept of each skill, as `(id, version)`: the highest semantic
    /// version when all of a skill's versions are one (a refused downgrade may have been kept
    /// after the install it lost to), else the one named current, kept last (a standard skill
    /// versioned by its contents). Object stores time their objects to the second (S3), so two
    /// packages kept within one second cannot be told apart by their times: the name can.
    pub async fn packages(&self) -> anyhow::Result<Vec<(String, String)>> {
        let root = self.prefix.clone().join("skills");
        let mut listed = self.objects.list(Some(&root));
        let mut kept: std::collections::BTreeMap<String, Vec<(String, _)>> = Default::default();
        while let Some(object) = listed.next().await {
            let object = object.context("listing the shared storage")?;
            let mut parts: Vec<_> = object.location.parts().collect();
            let (Some(file), Some(id)) = (parts.pop(), parts.pop()) else {
                continue;
            };
            let Some(version) = file.as_ref().strip_suffix(".zip") else {
                continue;
            };
            kept.entry(id.as_ref().to_owned())
                .or_default()
                .push((version.to_owned(), object.last_modified));
        }
        let mut newest = Vec::new();
        for (id, versions) in kept {
            let semantic: Option<Vec<semver::Version>> = versions
                .iter()
                .map(|(v, _)| semver::Version::parse(v).ok())
                .collect();
            let chosen = match semantic {
                Some(semantic) => semantic.into_iter().max().map(|v| v.to_string()),
                None => match self.current(&id).await? {
                    Some(current) if versions.iter().any(|(v, _)| *v == current) => Some(current),
                    _ => versions
                        .into_iter()
                        .max_by_key(|(_, written)| *written)
                        .map(|(v, _)| v),
                },
            };
            newest.extend(chosen.map(|version| (id, version)));
        }
        Ok(newest)
    }

    /// The version named current of skill `id`, if one is.
    async fn current(&self, id: &str) -> anyhow::Result<Option<String>> {
        match self.objects.get(&self.current_key(id)).await {
            Ok(got) => {
                let bytes = got.bytes().await.context("reading the shared storage")?;
                Ok(Some(String::from_utf8_lossy(&bytes).trim().to_owned()))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e).context("reading the shared storage"),
        }
    }

    /// Writes the package of skill `id` at `version` to `dest`.
    pub async fn fetch_package(&self, id: &str, version: &str, dest: &Path) -> anyhow::Result<()> {
        let file = tokio::fs::File::create(dest).await?;
        anyhow::ensure!(
            self.get(&self.package_key(id, version), file).await?,
            "the shared storage has no package {id} {version}"
        );
        Ok(())
    }

    /// Writes `file` as `key` (in parts, when it is large).
    async fn put(&self, key: Key, mut file: tokio::fs::File) -> anyhow::Result<()> {
        let mut upload = object_store::buffered::BufWriter::new(self.objects.clone(), key);
        tokio::io::copy(&mut file, &mut upload).await?;
        upload
            .shutdown()
            .await
            .context("writing to the shared storage")
    }

    /// Writes `key` into `file`; false when there is no such object.
    async fn get(&self, key: &Key, mut file: tokio::fs::File) -> anyhow::Result<bool> {
        let got = match self.objects.get(key).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e).context("reading the shared storage"),
        };
        let mut bytes = got.into_stream();
        while let Some(chunk) = bytes.next().await {
            file.write_all(&chunk.context("reading the shared storage")?)
                .await?;
        }
        file.flush().await?;
        Ok(true)
    }

    /// Removes run `run_id`'s copy, if there is one.
    pub async fn forget(&self, run_id: &str) -> anyhow::Result<()> {
        match self.objects.delete(&self.key(run_id)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Zips the regular files under `root` (but `bundle/`) into a temporary file in `scratch`.
fn pack(root: &Path, scratch: &Path) -> anyhow::Result<tempfile::NamedTempFile> {
    let archive = tempfile::NamedTempFile::new_in(scratch)?;
    let mut zip = zip::ZipWriter::new(archive.reopen()?);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (rel, _) in files_under(root)? {
        if rel.starts_with("bundle/") {
            continue;
        }
        // A link, a FIFO or a device is no file of the run's; one gone meanwhile neither.
        let Ok(file) = open_beneath(root, Path::new(&rel)) else {
            continue;
        };
        let meta = file.metadata()?;
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o755;
        zip.start_file(
            rel.as_str(),
            options
                .unix_permissions(mode | 0o600)
                .large_file(meta.len() >= u64::from(u32::MAX)),
        )?;
        std::io::copy(&mut file.take(meta.len()), &mut zip)?;
    }
    zip.finish()?.flush()?;
    Ok(archive)
}

/// Unpacks `archive` into a fresh folder beside `root`, then renames it to `root`.
fn unpack(mut archive: std::fs::File, root: &Path, scratch: &Path) -> anyhow::Result<()> {
    archive.rewind()?;
    let mut zip = zip::ZipArchive::new(archive).context("the stored copy is no zip")?;
    let fresh = tempfile::TempDir::new_in(scratch)?;
    for index in 0..zip.len() {
        let mut entry = zip.by_index(index)?;
        let Some(rel) = entry.enclosed_name().filter(|_| entry.is_file()) else {
            anyhow::bail!("the stored copy's entry {index} is no plain file under the run folder");
        };
        let path = fresh.path().join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mode = entry.unix_mode().unwrap_or(0o644) & 0o755;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        std::io::copy(&mut entry, &mut out)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    }
    if let Some(parent) = root.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::rename(fresh.keep(), root)
        .with_context(|| format!("moving the copy to {}", root.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_folder_comes_back_whole_without_its_bundles_links_or_fifos() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        let url = format!("file://{}", shared.display());
        let storage = Storage::open(&url, dir.path().join("scratch"), Vec::new()).unwrap();
        storage.check().await.unwrap();

        let folder = RunFolder::new(dir.path().join("runs/r1"));
        folder.create(Some(b"{}".to_vec())).await.unwrap();
        std::fs::write(folder.stdout_log(), "line 1\nwärme\n").unwrap();
        std::fs::write(folder.artifacts().join("report.md"), "report").unwrap();
        let tool = folder.workspace().join("tool.sh");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::create_dir_all(folder.bundle_dir()).unwrap();
        std::fs::write(folder.bundle_dir().join("run_bundle.zip"), "old").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", folder.workspace().join("passwd")).unwrap();
        nix::unistd::mkfifo(
            &folder.workspace().join("pipe"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        storage.save("r1", &folder).await.unwrap();

        let elsewhere = RunFolder::new(dir.path().join("other/runs/r1"));
        assert!(storage.restore("r1", &elsewhere).await.unwrap());
        let read = |f: &RunFolder, rel: &str| std::fs::read_to_string(f.root().join(rel)).ok();
        assert_eq!(
            read(&elsewhere, "logs/stdout.txt").as_deref(),
            Some("line 1\nwärme\n")
        );
        assert_eq!(
            read(&elsewhere, "workspace/artifacts/report.md").as_deref(),
            Some("report")
        );
        let mode = std::fs::metadata(elsewhere.workspace().join("tool.sh"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o755
        );
        assert_eq!(
            read(&elsewhere, "bundle/run_bundle.zip"),
            None,
            "rebuilt, not copied"
        );
        for odd in ["passwd", "pipe"] {
            assert!(
                std::fs::symlink_metadata(elsewhere.workspace().join(odd)).is_err(),
                "{odd} is not copied"
            );
        }
        assert!(
            !storage
                .restore("r2", &RunFolder::new(dir.path().join("r2")))
                .await
                .unwrap(),
            "no copy, nothing restored"
        );
        storage.forget("r1").await.unwrap();
        storage.forget("r1").await.unwrap();
        assert!(
            !storage
                .restore("r1", &RunFolder::new(dir.path().join("r3")))
                .await
                .unwrap()
        );
        assert!(
            std::fs::read_dir(dir.path().join("scratch"))
                .unwrap()
                .next()
                .is_none(),
            "no scratch file left behind"
        );
    }
}
