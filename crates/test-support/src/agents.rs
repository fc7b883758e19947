//! Agent CLIs in tests: for engine administration, a temporary managed npm prefix, agent home
//! and extra `PATH` folder, fake CLIs that only answer `--version`, and package tarballs; for
//! runs, the real CLIs of the managed npm prefix, each test inside its own network namespace
//! with the service pointed at the fake model server.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{FakeModel, TestDirs, TestServer};

/// A temporary managed npm prefix, agent home and extra `PATH` folder.
pub struct Agents {
    tmp: tempfile::TempDir,
}

impl Default for Agents {
    fn default() -> Self {
        Self::new()
    }
}

impl Agents {
    pub fn new() -> Self {
        let agents = Self {
            tmp: tempfile::tempdir().unwrap(),
        };
        for dir in ["npm/bin", "agent-home", "global-bin"] {
            std::fs::create_dir_all(agents.path(dir)).unwrap();
        }
        agents
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// A CLI that only answers `--version`, in `dir` (`npm/bin` or `global-bin`).
    pub fn fake_cli(&self, dir: &str, name: &str, version: &str) {
        let path = self.path(dir).join(name);
        std::fs::write(&path, format!("#!/bin/sh\necho '{name} {version}'\n")).unwrap();
        make_executable(&path);
    }

    pub fn login(&self, rel: &str) {
        let path = self.path("agent-home").join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "{}").unwrap();
    }

    pub fn env(&self) -> Vec<(String, String)> {
        let path = format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            self.path("global-bin").display()
        );
        vec![
            (
                "SKILL_RUNNER_NPM_PREFIX".into(),
                self.path("npm").display().to_string(),
            ),
            (
                "SKILL_RUNNER_AGENT_HOME".into(),
                self.path("agent-home").display().to_string(),
            ),
            ("PATH".into(), path),
        ]
    }

    pub fn server(&self, dirs: std::sync::Arc<TestDirs>, extra: &[(&str, &str)]) -> TestServer {
        let env = self.env();
        let mut all: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.extend_from_slice(extra);
        TestServer::start_with(dirs, &all)
    }
}

pub fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `npm pack` of a package whose `bin/<program>` prints `<program> <version>`.
pub fn tarball(dir: &Path, name: &str, program: &str, version: &str) -> PathBuf {
    let src = dir.join(format!("{program}-src"));
    std::fs::create_dir_all(src.join("bin")).unwrap();
    std::fs::write(
        src.join("package.json"),
        json!({"name": name, "version": version, "bin": {program: format!("bin/{program}.js")}})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        src.join(format!("bin/{program}.js")),
        format!("#!/usr/bin/env node\nconsole.log('{program} {version}');\n"),
    )
    .unwrap();
    let out = std::process::Command::new("npm")
        .args(["pack", "--pack-destination"])
        .arg(dir)
        .current_dir(&src)
        .output()
        .expect("npm runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .lines()
        .last()
        .unwrap()
        .to_owned();
    dir.join(file)
}

/// The managed npm prefix the agent CLIs are installed in (`scripts/install-agent-clis.sh`).
pub fn npm_prefix() -> PathBuf {
    if let Some(prefix) = std::env::var_os("SKILL_RUNNER_NPM_PREFIX") {
        return prefix.into();
    }
    let cache = std::env::var_os("SKILL_RUNNER_AGENT_CACHE_DIR").map_or_else(
        || {
            PathBuf::from(std::env::var("HOME").unwrap())
                .join(".local/share/skill-runner/agent-cache")
        },
        PathBuf::from,
    );
    cache.join("npm")
}

/// True inside the namespace, where the test body runs. Outside, re-runs `test` in a new
/// namespace and checks it passed (or prints why it cannot), and returns false.
pub fn in_netns(test: &str, cli: &str) -> bool {
    if std::env::var_os(super::netns::IN_NETNS).is_none()
        && !npm_prefix().join("bin").join(cli).is_file()
    {
        let line = format!(
            "skipped: {cli} CLI not installed in {} (run scripts/install-agent-clis.sh) — {test}",
            npm_prefix().display()
        );
        assert!(std::env::var_os("CI").is_none(), "{line}");
        eprintln!("\n*** {line} ***\n");
        return false;
    }
    matches!(super::netns::isolate(test), super::netns::Isolation::Inside)
}

/// The engines' API key in tests: distinctive, so a search for it finds nothing else.
pub const ENGINE_KEY: &str = "sk-test-engine-key-7c41d9e2b08a";

/// The service with `engine` pointed at the fake model server.
pub fn server_for(
    engine: &str,
    fake: &FakeModel,
    skills: &[super::Package],
    extra: &[(&str, &str)],
) -> TestServer {
    let upper = engine.to_ascii_uppercase();
    let base = match engine {
        "codex" | "opencode" | "qwen" | "kilo" => format!("{}/v1", fake.base),
        _ => fake.base.clone(),
    };
    let base_var = format!("SKILL_RUNNER_{upper}_BASE_URL");
    let key_var = format!("SKILL_RUNNER_{upper}_API_KEY");
    let mut env: Vec<(&str, &str)> = vec![
        (&base_var, &base),
        (&key_var, ENGINE_KEY),
        ("SKILL_RUNNER_ENGINE_MAX_RETRIES", "0"),
        // Legacy engines (gemini) take new runs only while allowed.
        ("SKILL_RUNNER_LEGACY_ENGINES", "gemini,iflow"),
    ];
    env.extend_from_slice(extra);
    let dirs = TestDirs::new();
    for skill in skills {
        skill.write_into(&dirs.skills);
    }
    TestServer::start_with(dirs, &env)
}
