//! Shared storage for the cluster tests: a folder (`file://`), or an S3-compatible server on
//! loopback (moto's, from `scripts/install-python-tools.sh`) and a bucket of the test's own
//! (`s3://`), so that the `s3://` path the docs promise is exercised too.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which storage a test's nodes share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    S3,
}

/// A storage the nodes share, gone when dropped.
pub struct SharedStorage {
    pub url: String,
    /// The variables the nodes need besides the URL (the S3 endpoint and credentials).
    pub env: Vec<(String, String)>,
    place: Place,
}

enum Place {
    Folder(tempfile::TempDir),
    S3 {
        server: Child,
        endpoint: String,
        bucket: String,
    },
}

impl SharedStorage {
    /// A fresh storage of `kind`; `None`, said loudly, when moto is not installed (which fails
    /// the test under `CI`).
    pub async fn new(kind: Kind) -> Option<Self> {
        match kind {
            Kind::File => {
                let dir = tempfile::tempdir().unwrap();
                Some(Self {
                    url: format!("file://{}", dir.path().display()),
                    env: Vec::new(),
                    place: Place::Folder(dir),
                })
            }
            Kind::S3 => {
                let program =
                    crate::python_tools::program("moto", "SKILL_RUNNER_MOTO_VENV", "moto_server")?;
                let port = TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                let server = Command::new(program)
                    .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                let endpoint = format!("http://127.0.0.1:{port}");
                let bucket = format!("runs-{}", std::process::id());
                let client = crate::client();
                let deadline = Instant::now() + Duration::from_secs(30);
                // Moto takes no credentials: the bucket is made with a plain PUT.
                loop {
                    match client.put(format!("{endpoint}/{bucket}")).send().await {
                        Ok(r) if r.status().is_success() => break,
                        _ if Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        other => panic!("moto's server did not start: {other:?}"),
                    }
                }
                let env = [
                    ("AWS_ENDPOINT", endpoint.as_str()),
                    ("AWS_ALLOW_HTTP", "true"),
                    ("AWS_REGION", "us-east-1"),
                    ("AWS_ACCESS_KEY_ID", "test"),
                    ("AWS_SECRET_ACCESS_KEY", "test"),
                ]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
                Some(Self {
                    url: format!("s3://{bucket}/shared"),
                    env,
                    place: Place::S3 {
                        server,
                        endpoint,
                        bucket,
                    },
                })
            }
        }
    }

    /// The settings a node gets: the URL and the variables.
    pub fn settings(&self) -> Vec<(&str, &str)> {
        std::iter::once(("SKILL_RUNNER_STORAGE_URL", self.url.as_str()))
            .chain(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .collect()
    }

    /// Whether the storage holds `key` (e.g. `runs/<id>.zip`).
    pub async fn holds(&self, key: &str) -> bool {
        match &self.place {
            Place::Folder(dir) => dir.path().join(key).exists(),
            // Listed rather than asked for: moto refuses an unsigned HEAD of an object.
            Place::S3 {
                endpoint, bucket, ..
            } => {
                let listed = crate::client()
                    .get(format!(
                        "{endpoint}/{bucket}?list-type=2&prefix=shared/{key}"
                    ))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                listed.contains(&format!("<Key>shared/{key}</Key>"))
            }
        }
    }
}

impl SharedStorage {
    /// Puts `bytes` at `key`, as a node that never announced it would have.
    pub async fn put(&self, key: &str, bytes: Vec<u8>) {
        match &self.place {
            Place::Folder(dir) => {
                let path = dir.path().join(key);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, bytes).unwrap();
            }
            Place::S3 {
                endpoint, bucket, ..
            } => {
                let put = crate::client()
                    .put(format!("{endpoint}/{bucket}/shared/{key}"))
                    .body(bytes)
                    .send()
                    .await
                    .unwrap();
                assert!(put.status().is_success(), "{put:?}");
            }
        }
    }
}

impl Drop for SharedStorage {
    fn drop(&mut self) {
        if let Place::S3 { server, .. } = &mut self.place {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}
