//! The configuration in effect, as an operator reads it on the console's Settings page: every
//! setting with its variable, its flag, its value and where that value came from. Secrets are
//! never shown: a password, a token or an API key reads as set or not, and a URL's password
//! (or a `password=` in its query) is masked.

/// Where a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag (which wins over the variable).
    Flag,
    /// The environment variable.
    Environment,
    /// The documented default.
    Default,
    /// Worked out from other settings or the machine (the node's name, the run slots, …).
    Derived,
    /// Not set, and nothing stands in for it.
    Unset,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Environment => "environment",
            Source::Default => "default",
            Source::Derived => "derived",
            Source::Unset => "unset",
        }
    }
}

/// One setting as it is in effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub variable: String,
    /// `--port`; `None` for what is read from the environment only.
    pub flag: Option<String>,
    /// The value, masked where it is secret; `None` when unset.
    pub value: Option<String>,
    pub source: Source,
    /// What the setting does (its `--help` line).
    pub help: String,
}

impl Effective {
    /// A setting with `value` (as given) from `source`; the value is masked if secret.
    pub fn new(
        variable: &str,
        flag: Option<&str>,
        value: Option<&str>,
        source: Source,
        help: &str,
    ) -> Self {
        Self {
            variable: variable.to_owned(),
            flag: flag.map(|f| format!("--{f}")),
            value: value.map(|v| masked(variable, v)),
            source,
            help: help.to_owned(),
        }
    }
}

/// What a secret reads as.
pub const HIDDEN: &str = "•••••• (set)";

/// Whether the variable `name` holds a secret as a whole (a file naming secrets does not).
fn is_secret(name: &str) -> bool {
    !name.ends_with("_FILE")
        && ["PASSWORD", "TOKEN", "API_KEY", "SECRET", "CREDENTIAL"]
            .iter()
            .any(|word| name.contains(word))
}

/// Whether a query parameter named `key` may carry a credential.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "pass",
        "token",
        "key",
        "secret",
        "sig",
        "auth",
        "credential",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// `value` of `variable` as a page may show it: a secret variable as set, any other value
/// [`without_credentials`].
pub fn masked(variable: &str, value: &str) -> String {
    if is_secret(variable) {
        return HIDDEN.to_owned();
    }
    without_credentials(value)
}

/// `value` as a page may show it whatever it is: in a URL, whatever names a user or a
/// credential (`user:pass@`, `?password=`, `?api-key=`…) as `****`; a value that looks like a
/// URL but does not parse as one, or names a password outside one, as set.
pub fn without_credentials(value: &str) -> String {
    match url::Url::parse(value) {
        Ok(mut url) if value.contains("://") => {
            if !url.username().is_empty() {
                let _ = url.set_username("****");
            }
            if url.password().is_some() {
                let _ = url.set_password(Some("****"));
            }
            if url.query().is_some() {
                let pairs: Vec<(String, String)> = url
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if is_secret_key(&k) {
                            "****".into()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                url.query_pairs_mut().clear().extend_pairs(pairs);
            }
            url.to_string()
        }
        _ if value.contains("://") || value.to_ascii_lowercase().contains("password") => {
            HIDDEN.to_owned()
        }
        _ => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show() {
        for (variable, value, shown) in [
            ("UI_BASIC_AUTH_PASSWORD", "hunter2", HIDDEN),
            ("SKILL_RUNNER_API_TOKENS", "a,b", HIDDEN),
            ("SKILL_RUNNER_CODEX_API_KEY", "sk-1", HIDDEN),
            (
                "SKILL_RUNNER_API_TOKENS_FILE",
                "/etc/skill-runner/tokens",
                "/etc/skill-runner/tokens",
            ),
            (
                "SKILL_RUNNER_DATABASE_URL",
                "postgres://runner:s3cret@db:5432/runs",
                "postgres://****:****@db:5432/runs",
            ),
            (
                "SKILL_RUNNER_DATABASE_URL",
                "postgres://db/runs?user=runner&password=s3cret&sslmode=require",
                "postgres://db/runs?user=runner&password=****&sslmode=require",
            ),
            (
                "SKILL_RUNNER_DATABASE_URL",
                "postgres:///runs?host=/run/postgresql&user=runner&password=s3cret",
                "postgres:///runs?host=%2Frun%2Fpostgresql&user=runner&password=****",
            ),
            (
                "SKILL_RUNNER_DATABASE_URL",
                "postgres://runner:s3cret@[db",
                HIDDEN,
            ),
            (
                "SKILL_RUNNER_CODEX_NPM_PACKAGE",
                "git+https://s3cret@github.com/me/codex.git",
                "git+https://****@github.com/me/codex.git",
            ),
            (
                "SKILL_RUNNER_CODEX_BASE_URL",
                "https://proxy.example/v1?api-key=s3cret&region=eu",
                "https://proxy.example/v1?api-key=****&region=eu",
            ),
            (
                "SKILL_RUNNER_CODEX_BASE_URL",
                "http://127.0.0.1:18080/v1",
                "http://127.0.0.1:18080/v1",
            ),
            (
                "SKILL_RUNNER_CODEX_NPM_PACKAGE",
                "@openai/codex@0.170.0",
                "@openai/codex@0.170.0",
            ),
            (
                "SKILL_RUNNER_ENGINE_LIMITS",
                "codex=2,claude=1",
                "codex=2,claude=1",
            ),
            ("PORT", "9000", "9000"),
        ] {
            assert_eq!(masked(variable, value), shown, "{variable}");
            assert!(!masked(variable, value).contains("s3cret"));
        }
    }
}
