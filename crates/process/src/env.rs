//! The environment child processes start from: an allow-list, never the service's own.
//!
//! Every child (agent CLIs, script skills, invoke programs, npm) starts from an empty
//! environment plus the names below, read once at start-up, plus what its spec sets (the run's
//! `HOME`, `TMPDIR`, `SKILL_RUNNER_*` / `OPENSKILL_*` variables, the engine adapter's own key).
//! So `AWS_*`, `GITHUB_TOKEN`, a database URL or any other variable an operator exports reaches
//! no skill unless the operator names it in `SKILL_RUNNER_CHILD_ENV_PASSTHROUGH`.

use std::collections::BTreeMap;

/// Names every child inherits when the service has them.
const INHERITED: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// Whether a child inherits `name` from the service: the allow-list, the locale (`LC_*`), or
/// a name the operator passes through.
fn inherited(name: &str, passthrough: &[String]) -> bool {
    INHERITED.contains(&name) || name.starts_with("LC_") || passthrough.iter().any(|p| p == name)
}

/// What npm needs besides the allow-list: its own settings and the real `HOME` (its cache and
/// `.npmrc`).
fn npm_needs(name: &str) -> bool {
    name == "HOME" || name.to_ascii_lowercase().starts_with("npm_config_") || name == "NODE_OPTIONS"
}

/// The variables children start from, and npm's, read once at start-up.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChildEnv {
    /// Every child's base.
    pub base: Vec<(String, String)>,
    /// npm upgrades' base: `base` plus what npm needs.
    pub npm: Vec<(String, String)>,
}

impl std::fmt::Debug for ChildEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values may be secrets (a passed-through token, a proxy with credentials).
        let names = |vars: &[(String, String)]| vars.iter().map(|(k, _)| k.clone()).collect();
        f.debug_struct("ChildEnv")
            .field("base", &names(&self.base) as &Vec<String>)
            .field("npm", &names(&self.npm) as &Vec<String>)
            .finish()
    }
}

impl ChildEnv {
    /// Picks from the service's environment `vars` the allowed names and `passthrough`.
    pub fn from_vars(vars: &BTreeMap<String, String>, passthrough: &[String]) -> Self {
        let pick = |keep: &dyn Fn(&str) -> bool| {
            vars.iter()
                .filter(|(k, _)| keep(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        Self {
            base: pick(&|k| inherited(k, passthrough)),
            npm: pick(&|k| inherited(k, passthrough) || npm_needs(k)),
        }
    }

    /// The base's `PATH`.
    pub fn path(&self) -> Option<&str> {
        self.base
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
    }
}

/// Parses `SKILL_RUNNER_CHILD_ENV_PASSTHROUGH` (`NAME,NAME`); a bad name is reported.
pub fn parse_passthrough(raw: &str) -> Result<Vec<String>, String> {
    raw.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            let valid = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if valid {
                Ok(name.to_owned())
            } else {
                Err(format!("'{name}' is not a variable name"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_and_passed_names_reach_children() {
        let vars: BTreeMap<String, String> = [
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("LC_ALL", "C.UTF-8"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("GITHUB_TOKEN", "t"),
            ("SKILL_RUNNER_CODEX_API_KEY", "k"),
            ("https_proxy", "http://p:3128"),
            ("MY_TOOL_URL", "u"),
            ("NPM_CONFIG_REGISTRY", "http://r"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let env = ChildEnv::from_vars(&vars, &["MY_TOOL_URL".to_owned()]);
        fn names(v: &[(String, String)]) -> Vec<&str> {
            v.iter().map(|(k, _)| k.as_str()).collect()
        }
        assert_eq!(
            names(&env.base),
            ["LC_ALL", "MY_TOOL_URL", "PATH", "https_proxy"]
        );
        assert_eq!(
            names(&env.npm),
            [
                "HOME",
                "LC_ALL",
                "MY_TOOL_URL",
                "NPM_CONFIG_REGISTRY",
                "PATH",
                "https_proxy"
            ]
        );
        assert_eq!(env.path(), Some("/usr/bin"));
        assert!(!format!("{env:?}").contains("3128"));
    }

    #[test]
    fn passthrough_names_are_checked() {
        assert_eq!(
            parse_passthrough(" A_1, B ,,").unwrap(),
            ["A_1".to_owned(), "B".to_owned()]
        );
        assert!(parse_passthrough("A,B-C").unwrap_err().contains("B-C"));
        assert!(parse_passthrough("1A").is_err());
    }
}
