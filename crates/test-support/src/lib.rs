//! Test support for every crate of the workspace: the real `skill-runner` binary on port 0
//! with fresh temp dirs, the fake model server (over HTTP or HTTPS), the example client, a
//! browser, network namespaces, skill package builders, a test CA ([`tls`]) with echo servers
//! ([`echo`]), and small HTTP helpers.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod agent_skills;
pub mod agents;
pub mod browser;
pub mod container;
pub mod echo;
pub mod example;
pub mod immutable;
pub mod netns;
pub mod postgres;
pub mod python_tools;
pub mod shared_storage;
pub mod tls;

pub use echo::EchoServer;
pub use tls::TestCa;

/// The repository's root folder (skills, fixtures and front-end files live there).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A binary of the workspace, built beside the running test (`target/<profile>/<name>`).
/// `cargo nextest run --workspace` (the test command's) builds every member's binaries; a run
/// of one crate's tests may not, and says so here.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's own path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary lives in target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{} is not built: run the tests with `--workspace` (as `scripts/test.sh` does), or \
         `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// A running server process; killed when dropped.
pub struct TestServer {
    child: Child,
    /// The service's pid: the child's own, or the service's in its container.
    service: i32,
    /// The container the service runs in ([`container`]), if any.
    container: Option<String>,
    pub base: String,
    pub dirs: Arc<TestDirs>,
    pub client: reqwest::Client,
    log: Arc<Mutex<Vec<String>>>,
}

/// The data and skills dirs of a test, kept across restarts. The server runs in `root`, so
/// relative defaults (`./data/files`, `./skills_cli`) land in the test's own folder.
pub struct TestDirs {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub data: PathBuf,
    pub skills: PathBuf,
}

impl TestDirs {
    pub fn new() -> Arc<Self> {
        Self::in_folder(&std::env::temp_dir())
    }

    /// [`Self::new`] under `parent` (e.g. `/dev/shm`).
    pub fn in_folder(parent: &Path) -> Arc<Self> {
        let tmp = tempfile::tempdir_in(parent).unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        Arc::new(Self {
            _tmp: tmp,
            data: root.join("data"),
            skills: root.join("skills"),
            root,
        })
    }
}

/// An HTTP client. The service builds reqwest with rustls but no built-in crypto provider, so
/// a provider is installed first (as the service does at start-up).
pub fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::new()
}

/// Installs ring as the process's rustls provider unless one already is.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Starts `cmd` (stderr piped) and waits until it logs `listening on http://...`; returns the
/// child, that base URL and the log lines so far (kept growing).
pub fn spawn_listening(mut cmd: Command) -> (Child, String, Arc<Mutex<Vec<String>>>) {
    let mut child = cmd
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(i) = line.find("listening on http://") {
                let url: String = line[i + "listening on ".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || ":/.[]".contains(*c))
                    .collect();
                let _ = tx.send(url);
            }
            sink.lock().unwrap().push(line);
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(url) => (child, url, log),
        Err(_) => {
            let exited = child.try_wait();
            let _ = child.kill();
            panic!(
                "the process did not start listening ({exited:?}); log:\n{}",
                log.lock().unwrap().join("\n")
            );
        }
    }
}

impl TestServer {
    pub fn start() -> Self {
        Self::start_with(TestDirs::new(), &[])
    }

    /// Starts the binary on port 0 over `dirs`, with extra environment variables.
    pub fn start_with(dirs: Arc<TestDirs>, env: &[(&str, &str)]) -> Self {
        Self::start_command(dirs, env, Command::new(bin("skill-runner")))
    }

    /// [`Self::start_with`], the service inheriting `file` open for reading as descriptor 9
    /// (as from a shell's `9<file`), the way a careless launcher leaves descriptors behind.
    pub fn start_inheriting(dirs: Arc<TestDirs>, env: &[(&str, &str)], file: &Path) -> Self {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exec \"$0\" 9<\"$1\""])
            .arg(bin("skill-runner"))
            .arg(file);
        Self::start_command(dirs, env, cmd)
    }

    /// [`Self::start_with`], the binary started by `wrapper` (e.g. `prlimit --nofile=…`).
    pub fn start_under(dirs: Arc<TestDirs>, env: &[(&str, &str)], wrapper: &[&str]) -> Self {
        let mut cmd = Command::new(wrapper[0]);
        cmd.args(&wrapper[1..]).arg(bin("skill-runner"));
        Self::start_command(dirs, env, cmd)
    }

    fn start_command(dirs: Arc<TestDirs>, env: &[(&str, &str)], mut cmd: Command) -> Self {
        for name in [
            "OPENSKILL_ALLOWED_ROOT",
            "OPENSKILL_CLI_DIR",
            "OPENSKILL_MANIFEST_DIR",
            "OPENSKILL_TIMEOUT_MS",
            "OPENSKILL_DEBUG",
        ] {
            cmd.env_remove(name);
        }
        cmd.env_remove("SKILL_RUNNER_BIND")
            .env_remove("RUST_LOG")
            .env("PORT", "0")
            .env("LOG_LEVEL", "info")
            .env("SKILL_RUNNER_DATA_DIR", &dirs.data)
            .env("SKILL_RUNNER_SKILLS_DIR", &dirs.skills)
            .current_dir(&dirs.root)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let (child, base, log, container) = match container::image() {
            None => {
                let (child, base, log) = spawn_listening(cmd);
                (child, base, log, None)
            }
            Some(image) => {
                assert_eq!(
                    Path::new(cmd.get_program()),
                    bin("skill-runner"),
                    "a service started through a wrapper cannot run in a container"
                );
                let started = container::run_in(&image, &cmd, &dirs.root);
                let (child, base, log) = spawn_listening(started.command);
                (child, base, log, Some(started.name))
            }
        };
        let service = match &container {
            Some(name) => container::service_pid(name),
            None => child.id() as i32,
        };
        Self {
            child,
            service,
            container,
            base,
            dirs,
            client: client(),
            log,
        }
    }

    /// The service's process id (on the host, also when it runs in a container).
    pub fn pid(&self) -> i32 {
        self.service
    }

    /// Whether the service runs in a container ([`container`]).
    pub fn in_container(&self) -> bool {
        self.container.is_some()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits up to 10 s for the service's log to show `needle`: its lines reach the test
    /// through a pipe and a reader thread, a moment after the service wrote them.
    pub async fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "the log never showed '{needle}':\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `signal` to the service while its process lives. Once the child was reaped its pid
    /// may belong to another process (pids wrap at 32768 on a busy test machine): never then.
    fn signal(&mut self, signal: nix::sys::signal::Signal) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.service), signal);
        }
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "server ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        decode(self.client.get(self.url(path))).await
    }

    /// A page (or any answer) as text, with its status.
    pub async fn text(&self, path: &str) -> (u16, String) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    /// Uploads a package; returns the HTTP status and body.
    pub async fn upload(&self, bytes: Vec<u8>) -> (u16, Value) {
        let part = reqwest::multipart::Part::bytes(bytes).file_name("skill.zip");
        self.post_install_form(reqwest::multipart::Form::new().part("file", part))
            .await
    }

    /// Posts any multipart form to the install route.
    pub async fn post_install_form(&self, form: reqwest::multipart::Form) -> (u16, Value) {
        let resp = self
            .client
            .post(self.url("/v1/skill-packages/install"))
            .multipart(form)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    /// Uploads a package and returns its request id.
    pub async fn install(&self, bytes: Vec<u8>) -> String {
        let (status, body) = self.upload(bytes).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "queued");
        body["request_id"].as_str().unwrap().to_owned()
    }

    /// Polls an install request until it succeeds or fails.
    pub async fn wait_install(&self, rid: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = self.get(&format!("/v1/skill-packages/{rid}")).await;
            assert_eq!(status, 200, "{body}");
            if body["status"] == "succeeded" || body["status"] == "failed" {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "install {rid} did not finish: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn install_and_wait(&self, bytes: Vec<u8>) -> Value {
        let rid = self.install(bytes).await;
        self.wait_install(&rid).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        if let Some(name) = &self.container {
            container::remove(name);
        }
    }
}

/// A skill package under construction: file path (inside the top folder) → bytes.
#[derive(Clone)]
pub struct Package {
    pub top: String,
    pub files: BTreeMap<String, Vec<u8>>,
}

/// A valid package of skill `id` at `version`.
pub fn skill_package(id: &str, version: &str) -> Package {
    let mut files = BTreeMap::new();
    files.insert(
        "SKILL.md".to_owned(),
        format!("---\nname: {id}\ndescription: test skill\n---\n# {id}\n").into_bytes(),
    );
    let runner = json!({
        "id": id, "version": version, "name": format!("Skill {id}"),
        "execution_modes": ["auto"],
        "schemas": {"input": "assets/input.schema.json", "parameter": "assets/parameter.schema.json",
                    "output": "assets/output.schema.json"}
    });
    files.insert(
        "assets/runner.json".to_owned(),
        runner.to_string().into_bytes(),
    );
    files.insert(
        "assets/input.schema.json".to_owned(),
        json!({"type": "object", "properties": {"text": {"type": "string", "x-input-source": "inline"}}})
            .to_string()
            .into_bytes(),
    );
    files.insert(
        "assets/parameter.schema.json".to_owned(),
        br#"{"type": "object"}"#.to_vec(),
    );
    files.insert(
        "assets/output.schema.json".to_owned(),
        json!({"type": "object", "properties": {
            "summary": {"type": "string"},
            "report": {"type": "string", "x-type": "artifact", "x-filename": "report.md"}}})
        .to_string()
        .into_bytes(),
    );
    files.insert("VERSION".to_owned(), version.as_bytes().to_vec());
    Package {
        top: id.to_owned(),
        files,
    }
}

impl Package {
    /// Merges `patch` into `assets/runner.json` (a `null` value removes the key).
    pub fn runner(mut self, patch: Value) -> Self {
        let mut runner: Value = serde_json::from_slice(&self.files["assets/runner.json"]).unwrap();
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                runner.as_object_mut().unwrap().remove(k);
            } else {
                runner[k] = v.clone();
            }
        }
        self.files.insert(
            "assets/runner.json".to_owned(),
            runner.to_string().into_bytes(),
        );
        self
    }

    pub fn file(mut self, path: &str, bytes: impl Into<Vec<u8>>) -> Self {
        self.files.insert(path.to_owned(), bytes.into());
        self
    }

    pub fn without(mut self, path: &str) -> Self {
        self.files.remove(path);
        self
    }

    pub fn zip(&self) -> Vec<u8> {
        build_zip(
            self.files
                .iter()
                .map(|(p, b)| (format!("{}/{p}", self.top), b.clone()))
                .collect(),
        )
    }
}

/// A standard Agent Skills package (no `runner.json`): `<name>/SKILL.md` saying
/// `description`, and `scripts/make.sh`, which writes `artifacts/out.txt` in the folder it
/// runs in.
pub fn standard_skill(name: &str, description: &str) -> Package {
    let mut files = BTreeMap::new();
    files.insert(
        "SKILL.md".to_owned(),
        format!(
            "---\nname: {name}\ndescription: {description}\nlicense: MIT\n---\n# {name}\n\n\
             Run `scripts/make.sh` from the workspace.\n"
        )
        .into_bytes(),
    );
    files.insert(
        "scripts/make.sh".to_owned(),
        b"mkdir -p artifacts && echo made > artifacts/out.txt\n".to_vec(),
    );
    Package {
        top: name.to_owned(),
        files,
    }
}

/// A zip of `(name, bytes)` entries, names taken as they are; `.sh` files are executable.
pub fn build_zip(entries: Vec<(String, Vec<u8>)>) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in entries {
        let mode = if name.ends_with(".sh") { 0o755 } else { 0o644 };
        w.start_file(
            name,
            zip::write::SimpleFileOptions::default().unix_permissions(mode),
        )
        .unwrap();
        w.write_all(&bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// Every entry of a zip, by name.
pub fn unzip(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).unwrap();
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut buf).unwrap();
            (f.name().unwrap().to_string(), buf)
        })
        .collect()
}

/// Path → bytes of every file under `dir`, relative to it. A file or folder that vanishes
/// while it is walked (a live service's temporary files) is left out.
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Some(entries) = present(std::fs::read_dir(dir)) else {
            return;
        };
        for entry in entries {
            let Some(entry) = present(entry) else {
                continue;
            };
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if let Some(bytes) = present(std::fs::read(&path)) {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, bytes);
            }
        }
    }
    fn present<T>(result: std::io::Result<T>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("{e}"),
        }
    }
    let mut out = BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out
}

/// Path → (size, hash) of every file under `dir`: comparable, and short when an assert prints it.
pub fn digest(dir: &Path) -> BTreeMap<String, (usize, u64)> {
    digest_files(&tree(dir))
}

/// The same digest of an in-memory file map.
pub fn digest_files(files: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, (usize, u64)> {
    use std::hash::{Hash, Hasher};
    files
        .iter()
        .map(|(path, bytes)| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            (path.clone(), (bytes.len(), h.finish()))
        })
        .collect()
}

/// Copies the repository's bundled `skills/` folder into `dest`.
pub fn copy_bundled_skills(dest: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy(&path, &target);
            } else {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    copy(&repo_root().join("skills"), dest);
}

/// The shell entrypoint of the `probe` test skill: `parameter.mode` picks a behaviour.
pub const PROBE_SCRIPT: &str = r#"#!/bin/sh
req=$(cat)
field() { printf '%s' "$req" | sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
mode=$(field mode)
echo $PPID > pgid.txt
case "$mode" in
  ok)
    mkdir -p artifacts
    doc=$(field doc)
    if [ -n "$doc" ]; then cp "$doc" artifacts/report.md; else printf 'report' > artifacts/report.md; fi
    printf 'working\n'
    printf 'wärme ✓\n' >&2
    printf '{"summary":"%s","turn":%s}\n' "$(field text)" "$SKILL_RUNNER_TURN" ;;
  exit) echo 'boom on stderr' >&2; exit 3 ;;
  nojson) echo 'no json here' ;;
  badschema) mkdir -p artifacts; printf r > artifacts/report.md; echo '{"summary": 5}' ;;
  noartifact) echo '{"summary":"x"}' ;;
  error) echo '{"success": false, "error": {"code": "BAD_INPUT", "message": "skill said no"}}' ;;
  sleep) sleep 30; echo '{"summary":"late"}' ;;
  hangfirst)
    if [ "$SKILL_RUNNER_TURN" = 1 ]; then sleep 300; fi
    mkdir -p artifacts; printf r > artifacts/report.md
    printf '{"summary":"attempt %s","turn":%s}\n' "$SKILL_RUNNER_TURN" "$SKILL_RUNNER_TURN" ;;
  drip)
    mkdir -p artifacts; printf 'dripped' > artifacts/report.md
    for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
      printf 'line %s of the drip, wärme ✓\n' "$i"; printf 'err %s\n' "$i" >&2; sleep 0.1
    done
    printf '{"summary":"drip"}\n' ;;
  late)
    trap 'mkdir -p artifacts; printf r > artifacts/report.md; echo "{\"summary\":\"late\"}"; exit 0' TERM
    sleep 30 & wait ;;
  grandchild) sh -c 'sleep 300' & sleep 300 ;;
  big)
    mkdir -p artifacts
    head -c 25165824 /dev/zero | tr '\0' 'a' > artifacts/report.md
    yes 'a line of output' | head -c 3145728
    printf '{"summary":"big","turn":1}\n' ;;
esac
"#;

/// A `script` skill `id` running the Python `script` (`<id>.py`), which takes its request on
/// stdin and answers `{"observed": {...}}`; `required` are its parameter's required keys.
pub fn observer_skill(id: &str, script: &str, required: &[&str]) -> Package {
    let file = format!("{id}.py");
    skill_package(id, "1.0.0")
        .runner(json!({"entrypoint": {"script": ["python3", file]}}))
        .file(&file, script)
        .file(
            "assets/input.schema.json",
            json!({"type": "object", "properties": {}}).to_string(),
        )
        .file(
            "assets/parameter.schema.json",
            json!({"type": "object", "required": required}).to_string(),
        )
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["observed"]}).to_string(),
        )
}

/// A `script` skill running [`PROBE_SCRIPT`]: inline `text`, parameter `mode` (required),
/// required artifact `report.md`, and a file input `doc`: absent (`None`), optional
/// (`Some(false)`) or required (`Some(true)`).
pub fn probe_skill(id: &str, doc: Option<bool>) -> Package {
    let required: Vec<&str> = if doc == Some(true) {
        vec!["doc"]
    } else {
        vec![]
    };
    let mut inputs = json!({"text": {"type": "string", "x-input-source": "inline"}});
    if doc.is_some() {
        inputs["doc"] = json!({"type": "string", "x-input-source": "file"});
    }
    skill_package(id, "1.0.0")
        .runner(json!({
            "entrypoint": {"script": ["sh", "run.sh"]},
            "artifacts": [{"role": "report", "pattern": "report.md", "required": true}]
        }))
        .file("run.sh", PROBE_SCRIPT)
        .file(
            "assets/input.schema.json",
            json!({"type": "object", "required": required, "properties": inputs}).to_string(),
        )
        .file(
            "assets/parameter.schema.json",
            json!({"type": "object", "required": ["mode"], "properties": {
                "mode": {"type": "string"}, "n": {"type": "integer"}}})
            .to_string(),
        )
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["summary"], "properties": {
                "summary": {"type": "string"}, "turn": {"type": "integer"}}})
            .to_string(),
        )
}

impl Package {
    /// Writes the skill folder into `skills_dir`.
    pub fn write_into(&self, skills_dir: &Path) {
        for (path, bytes) in &self.files {
            let target = skills_dir.join(&self.top).join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, bytes).unwrap();
        }
    }
}

impl TestServer {
    /// Starts a server whose skills dir holds `skills`.
    pub fn with_skills(skills: &[Package], env: &[(&str, &str)]) -> Self {
        let dirs = TestDirs::new();
        for s in skills {
            s.write_into(&dirs.skills);
        }
        Self::start_with(dirs, env)
    }

    /// A key of the default tenant with `role`, the server's first: made by `skill-runner keys
    /// create` against the PostgreSQL `database` when it has one; on SQLite, whose file the
    /// running server holds alone, through its API while no key is in force (it is open).
    pub async fn first_key(&self, role: &str, database: Option<&str>) -> String {
        let Some(url) = database else {
            let (status, issued) = self
                .post_json(
                    "/v1/management/tenants/default/keys",
                    json!({"role": role, "name": "made by a test"}),
                )
                .await;
            assert_eq!(status, 200, "{issued}");
            return issued["key"].as_str().unwrap().to_owned();
        };
        let out = Command::new(bin("skill-runner"))
            .args(["keys", "create", "--role", role, "--name", "made by a test"])
            .env("SKILL_RUNNER_DATA_DIR", &self.dirs.data)
            .env("SKILL_RUNNER_DATABASE_URL", url)
            .output()
            .expect("skill-runner keys create runs");
        assert!(
            out.status.success(),
            "skill-runner keys create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(key.starts_with("sr_"), "{key}");
        key
    }

    /// The run folder of a status body (`run_id`).
    pub fn run_dir(&self, status: &Value) -> PathBuf {
        self.dirs
            .data
            .join("runs")
            .join(status["run_id"].as_str().unwrap())
    }

    /// The run's workspace: the turn's working directory, the only folder it may write.
    pub fn workspace(&self, status: &Value) -> PathBuf {
        self.run_dir(status).join("workspace")
    }

    /// Opens an event stream (asserting 200 and the SSE content type).
    pub async fn events(&self, path: &str, last_event_id: Option<&str>) -> EventStream {
        let mut request = self
            .client
            .get(self.url(path))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        EventStream::of(request.send().await.unwrap())
    }

    pub async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        decode(self.client.post(self.url(path)).json(&body)).await
    }

    pub async fn patch_json(&self, path: &str, body: Value) -> (u16, Value) {
        decode(self.client.patch(self.url(path)).json(&body)).await
    }

    pub async fn put_json(&self, path: &str, body: Value) -> (u16, Value) {
        decode(self.client.put(self.url(path)).json(&body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        decode(self.client.delete(self.url(path))).await
    }

    pub async fn post_form(&self, path: &str, form: reqwest::multipart::Form) -> (u16, Value) {
        decode(self.client.post(self.url(path)).multipart(form)).await
    }

    /// Uploads an inputs zip to `/v1/jobs/{rid}/upload`.
    pub async fn upload_inputs(&self, rid: &str, entries: Vec<(&str, &[u8])>) -> (u16, Value) {
        let zip = build_zip(
            entries
                .into_iter()
                .map(|(n, b)| (n.to_owned(), b.to_vec()))
                .collect(),
        );
        let part = reqwest::multipart::Part::bytes(zip).file_name("inputs.zip");
        self.post_form(
            &format!("/v1/jobs/{rid}/upload"),
            reqwest::multipart::Form::new().part("file", part),
        )
        .await
    }

    /// Creates a job and returns its request id (asserting 200).
    pub async fn create_job(&self, body: Value) -> String {
        let (status, created) = self.post_json("/v1/jobs", body).await;
        assert_eq!(status, 200, "{created}");
        created["request_id"].as_str().unwrap().to_owned()
    }

    /// Creates a job and waits until it runs; returns its request id.
    pub async fn create_running(&self, body: Value) -> String {
        let rid = self.create_job(body).await;
        self.wait_status(&format!("/v1/jobs/{rid}"), &["running"])
            .await;
        rid
    }

    /// Polls `path` (a status route) until `status` is one of `wanted`, for up to two minutes:
    /// a slow agent CLI (Kilo) takes a minute of a loaded 2-core machine to start, and a wait
    /// that ends early only turns a slow pass into a failure.
    pub async fn wait_status(&self, path: &str, wanted: &[&str]) -> Value {
        self.wait_status_within(path, wanted, Duration::from_secs(120))
            .await
    }

    /// [`Self::wait_status`] with a time limit of its own.
    pub async fn wait_status_within(&self, path: &str, wanted: &[&str], limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let (code, body) = self.get(path).await;
            assert_eq!(code, 200, "{body}");
            if wanted.iter().any(|w| body["status"] == *w) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{path} never reached {wanted:?}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for a job to end.
    pub async fn wait_job(&self, rid: &str) -> Value {
        self.wait_status(
            &format!("/v1/jobs/{rid}"),
            &["succeeded", "failed", "canceled"],
        )
        .await
    }

    pub async fn get_bytes(&self, path: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
        let resp = self.client.get(self.url(path)).send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, headers, resp.bytes().await.unwrap().to_vec())
    }
}

/// Fields of `/proc/<pid>/stat` after the command name (state, ppid, pgrp, ...).
pub fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    )
}

/// Live (non-zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            stat_fields(*pid)
                .is_some_and(|rest| rest[0] != "Z" && rest[2].parse::<i32>() == Ok(pgid))
        })
        .collect()
}

/// Waits until group `pgid` has no live process; panics after 10 s.
pub fn assert_group_gone(pgid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let members = group_members(pgid);
        if members.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process group {pgid} survives: {members:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `request` and returns the status and the body as JSON (or as a JSON string).
async fn decode(request: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = request.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Waits for the probe script of a run to write `pgid.txt` and for its children to start, and
/// returns the process group, as this machine numbers it.
pub async fn wait_pgid(run_dir: &Path) -> i32 {
    let file = run_dir.join("pgid.txt");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !file.exists() {
        assert!(Instant::now() < deadline, "the probe script never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen: i32 = std::fs::read_to_string(&file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    host_id(run_dir, "NSpgid", seen).expect("a process of the probe's group works in its folder")
}

/// What this machine numbers the process (`field` `NSpid`) or group (`NSpgid`) a turn knows as
/// `id`, among the live processes working under `dir`: a turn in a pid namespace of its own
/// numbers its processes from 1. `None` when no such process lives.
pub fn host_id(dir: &Path, field: &str, id: i32) -> Option<i32> {
    let label = format!("{field}:");
    processes_in(dir).into_iter().find_map(|pid| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let ids: Vec<i32> = status
            .lines()
            .find(|l| l.starts_with(&label))?
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        (ids.last() == Some(&id)).then(|| ids[0])
    })
}

/// Waits until no process works under `dir`; panics after 10 s.
pub fn assert_nothing_runs_in(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<i32> = processes_in(dir)
            .into_iter()
            .filter(|pid| stat_fields(*pid).is_some_and(|f| f[0] != "Z"))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left under {}: {left:?}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub name: String,
    pub id: Option<String>,
    pub data: Value,
}

/// An open event stream; dropping it disconnects.
pub struct EventStream {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl EventStream {
    /// The stream of `resp` (asserting 200 and the SSE content type).
    pub fn of(resp: reqwest::Response) -> Self {
        assert_eq!(resp.status().as_u16(), 200, "{}", resp.url());
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Self {
            resp,
            buf: Vec::new(),
        }
    }

    /// The next complete event, or `None` when the server closed the stream.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let frame: Vec<u8> = self.buf.drain(..end + 2).collect();
                let frame = String::from_utf8(frame).expect("events are UTF-8");
                let (mut name, mut id, mut data) = (String::from("message"), None, String::new());
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim_start().to_owned();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim_start().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if data.is_empty() && id.is_none() {
                    continue; // a comment
                }
                return Some(SseEvent {
                    name,
                    id,
                    data: serde_json::from_str(&data).expect("event data is JSON"),
                });
            }
            match self.resp.chunk().await {
                Ok(Some(bytes)) => self.buf.extend_from_slice(&bytes),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Every event up to and including `end` (or until the server closes the stream).
    pub async fn collect(mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        while let Some(event) = tokio::time::timeout(Duration::from_secs(60), self.next())
            .await
            .expect("the stream went silent")
        {
            let end = event.name == "end";
            events.push(event);
            if end {
                break;
            }
        }
        events
    }
}

/// The bytes of one log (`stdout` or `stderr`) carried by `events`, checking that the chunks
/// are contiguous from `start`.
pub fn reassemble(events: &[SseEvent], log: &str, start: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut at = start;
    for e in events.iter().filter(|e| e.name == log) {
        assert_eq!(
            e.data["from"].as_u64().unwrap(),
            at,
            "{log} chunks are contiguous"
        );
        let chunk = e.data["chunk"].as_str().unwrap();
        at = e.data["to"].as_u64().unwrap();
        assert_eq!(at - e.data["from"].as_u64().unwrap(), chunk.len() as u64);
        bytes.extend_from_slice(chunk.as_bytes());
    }
    bytes
}

/// The Python entrypoint of the `asker` test skill: asks `parameter.asks` questions, one per
/// turn, then answers with every reply it received (after a minute when `parameter.linger`).
pub const ASKER_SCRIPT: &str = r#"import json, sys, time
req = json.load(sys.stdin)
history = req["history"]
print(f"turn {req['turn']} of an asker", flush=True)
if len(history) < req["parameter"].get("asks", 2):
    n = len(history) + 1
    print(json.dumps({"ask_user": {"interaction_id": 10 + n, "kind": "choose_one",
        "prompt": f"question {n}?", "options": ["left", "right"],
        "default_decision_policy": "pick_first"}}))
else:
    if req["parameter"].get("linger"):
        print("lingering", flush=True)
        time.sleep(60)
    print(json.dumps({"summary": "done", "turn": req["turn"], "reply": req["reply"],
        "replies": [h["response"] for h in history],
        "asked": [h["question"]["interaction_id"] for h in history]}))
"#;

/// An interactive `script` skill running [`ASKER_SCRIPT`].
pub fn asker_skill(id: &str) -> Package {
    python_skill(
        id,
        ASKER_SCRIPT,
        json!({"asks": {"type": "integer"}, "linger": {"type": "boolean"}}),
    )
    .runner(json!({"execution_modes": ["auto", "interactive"]}))
}

/// A `script` skill running Python `script`, with parameters `parameters` (schema properties)
/// and an output that must hold a string `summary`.
fn python_skill(id: &str, script: &str, parameters: Value) -> Package {
    skill_package(id, "1.0.0")
        .runner(json!({"entrypoint": {"script": ["python3", "run.py"]}}))
        .file("run.py", script)
        .file(
            "assets/parameter.schema.json",
            json!({"type": "object", "properties": parameters}).to_string(),
        )
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["summary"], "properties": {
                "summary": {"type": "string"}}})
            .to_string(),
        )
}

/// The Python entrypoint of the `talker` test skill: `parameter.bursts` bursts of output on
/// both logs, `parameter.pause` seconds apart, with multi-byte characters split across
/// writes and a large burst every tenth time.
pub const TALKER_SCRIPT: &str = r#"import json, sys, time
req = json.load(sys.stdin)
p = req["parameter"]
out, err = sys.stdout.buffer, sys.stderr.buffer
euro = "€".encode()
for i in range(p.get("bursts", 20)):
    out.write(f"burst {i}: wärme ✓ 😀 ".encode())
    out.write(euro[:1]); out.flush(); time.sleep(0.005)
    out.write(euro[1:2]); out.flush(); time.sleep(0.005)
    out.write(euro[2:] + b"\n")
    if i % 10 == 9:
        out.write(("ünïcødé " * 3000).encode() + b"\n")
    out.flush()
    err.write(f"err {i} 😀\n".encode()); err.flush()
    time.sleep(p.get("pause", 0.05))
print(json.dumps({"summary": "talked"}))
"#;

/// A `script` skill running [`TALKER_SCRIPT`].
pub fn talker_skill(id: &str) -> Package {
    python_skill(
        id,
        TALKER_SCRIPT,
        json!({"bursts": {"type": "integer"}, "pause": {"type": "number"}}),
    )
}

/// A server on a free loopback port, run by a thread of its own (with its own current-thread
/// runtime) so a test's runtime never starves it; stopped when dropped.
struct ServerThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: std::net::SocketAddr,
}

impl ServerThread {
    /// Binds `127.0.0.1:0` and runs `serve` on that listener in the thread until dropped.
    fn start<F, Fut>(serve: F) -> Self
    where
        F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
        Fut: std::future::Future,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                tokio::select! {
                    _ = serve(listener) => {}
                    _ = stopped => {}
                }
            });
        });
        Self {
            stop: Some(stop),
            thread: Some(thread),
            addr,
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves HTTP/1.1 over TLS on `listener` forever, each connection by the router `app` makes
/// from the SNI the client sent (so a server can tell which name was asked for).
async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    app: impl Fn(Option<String>) -> axum::Router + Send + Sync + 'static,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let app = Arc::new(app);
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            // A failed handshake (an untrusting client, say) only ends its own connection.
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let sni = tls.get_ref().1.server_name().map(str::to_owned);
            let service = hyper_util::service::TowerToHyperService::new(app(sni));
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .http1_only()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
        });
    }
}

/// The fake model server (`skill-runner-fake-model`) on a free loopback port, served by a
/// thread of its own so a test's runtime never starves it; stopped when dropped.
pub struct FakeModel {
    _server: ServerThread,
    pub base: String,
    pub client: reqwest::Client,
}

impl FakeModel {
    pub fn start() -> Self {
        let server = ServerThread::start(|listener| {
            skill_runner_fake_model::serve(listener, "all done".into(), None)
        });
        Self {
            base: format!("http://{}", server.addr),
            _server: server,
            client: client(),
        }
    }

    /// [`Self::start`] over HTTPS with a leaf of `ca` for `127.0.0.1` and `localhost`, for
    /// tests of what reaches a model through TLS (an egress proxy's injected secrets); its
    /// `client` trusts `ca`.
    pub fn start_tls(ca: &tls::TestCa) -> Self {
        let config = ca.server_config(&["127.0.0.1", "localhost"]);
        let server = ServerThread::start(move |listener| {
            let app = skill_runner_fake_model::app("all done".into(), None);
            serve_tls(listener, config, move |_| app.clone())
        });
        Self {
            base: format!("https://{}", server.addr),
            _server: server,
            client: ca.client(),
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, String) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    pub async fn script(&self, replies: Value) {
        let (status, _) = self.post("/__script", json!({ "replies": replies })).await;
        assert_eq!(status, 200);
    }

    /// Every request the server received, in order.
    pub async fn requests(&self) -> Vec<Value> {
        let log: Value = self
            .client
            .get(format!("{}/__log", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        log["requests"].as_array().unwrap().clone()
    }
}

/// A skill for agents: writes a report artifact and answers its summary.
pub fn report_skill(id: &str) -> Package {
    skill_package(id, "1.0.0")
        .runner(json!({"engines": ["codex", "gemini", "iflow", "claude", "opencode", "qwen", "kilo", "codebuddy"],
                       "execution_modes": ["auto", "interactive"]}))
        .file(
            "SKILL.md",
            format!("---\nname: {id}\ndescription: writes a report\n---\n# {id}\n\nWrite artifacts/report.txt, then answer.\n"),
        )
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["summary", "report"],
                   "properties": {"summary": {"type": "string"}, "report": {"type": "string"}}})
            .to_string(),
        )
}

/// Whether any file under `dir` contains `needle`.
pub fn folder_mentions(dir: &std::path::Path, needle: &str) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|entry| {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => folder_mentions(&path, needle),
            Ok(t) if t.is_file() => std::fs::read(&path)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes())),
            _ => false,
        }
    })
}

/// Processes whose working directory is under `dir`.
pub fn processes_in(dir: &Path) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .collect()
}
