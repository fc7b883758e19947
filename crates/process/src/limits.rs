//! How much a turn may use: memory, processes, CPU time, the size of one file, the size of its
//! workspace, open files. The operator sets caps (defaults below, `SKILL_RUNNER_RUN_*`); a skill
//! may ask for less in `runner.json` `limits`, never for more. A turn over a limit ends `failed`
//! with the limit's own code ([`Resource::code`]).
//!
//! Where they are held: memory and processes by the turn's cgroups ([`super::cgroups`]; v1
//! `memory` and `pids` controllers) where the service may create them, else by `RLIMIT_DATA`
//! (memory; `RLIMIT_AS` would break V8 and Bun, which reserve large address ranges) and
//! `RLIMIT_NPROC` (processes, counted per uid, binding no uid 0 process: a `fork` past it fails,
//! which the turn's program sees); CPU time, file size and open files by rlimits; the
//! workspace's size by the supervisor, which walks it while the turn runs.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Limits of one turn. Sizes in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_mb: u64,
    pub pids: u64,
    pub cpu_seconds: u64,
    pub file_mb: u64,
    pub disk_mb: u64,
    pub open_files: u64,
}

impl Default for Limits {
    /// Room for an agent CLI (Node or Bun) and the tools it runs.
    fn default() -> Self {
        Self {
            memory_mb: 4096,
            pids: 1024,
            cpu_seconds: 3600,
            file_mb: 1024,
            disk_mb: 4096,
            open_files: 8192,
        }
    }
}

/// One of the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Resource {
    Memory,
    Pids,
    Cpu,
    File,
    Disk,
}

impl Resource {
    pub const ALL: [Resource; 5] = [
        Resource::Memory,
        Resource::Pids,
        Resource::Cpu,
        Resource::File,
        Resource::Disk,
    ];

    /// The run's error code.
    pub fn code(self) -> &'static str {
        match self {
            Resource::Memory => "RESOURCE_MEMORY",
            Resource::Pids => "RESOURCE_PIDS",
            Resource::Cpu => "RESOURCE_CPU",
            Resource::File => "RESOURCE_FILE",
            Resource::Disk => "RESOURCE_DISK",
        }
    }

    /// The key in `runner.json` `limits`.
    pub fn key(self) -> &'static str {
        match self {
            Resource::Memory => "memory_mb",
            Resource::Pids => "pids",
            Resource::Cpu => "cpu_seconds",
            Resource::File => "file_mb",
            Resource::Disk => "disk_mb",
        }
    }

    /// The operator's variable.
    pub fn variable(self) -> &'static str {
        match self {
            Resource::Memory => "SKILL_RUNNER_RUN_MEMORY_MB",
            Resource::Pids => "SKILL_RUNNER_RUN_PIDS",
            Resource::Cpu => "SKILL_RUNNER_RUN_CPU_SECONDS",
            Resource::File => "SKILL_RUNNER_RUN_FILE_MB",
            Resource::Disk => "SKILL_RUNNER_RUN_MAX_DISK_MB",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::Pids => "processes",
            Resource::Cpu => "CPU time",
            Resource::File => "size of one file",
            Resource::Disk => "size of its workspace",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Resource::Memory | Resource::File | Resource::Disk => " MiB",
            Resource::Pids => "",
            Resource::Cpu => " s",
        }
    }
}

/// A limit a turn ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitHit {
    pub resource: Resource,
    pub limit: u64,
}

impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.resource;
        write!(
            f,
            "The turn went over its limit on {} ({}{}) and was stopped. To raise it, set \
             runner.json limits.{} (up to the operator's cap) or the operator's {}",
            r.what(),
            self.limit,
            r.unit(),
            r.key(),
            r.variable()
        )
    }
}

impl Limits {
    /// The limit on `resource`.
    pub fn of(&self, resource: Resource) -> u64 {
        match resource {
            Resource::Memory => self.memory_mb,
            Resource::Pids => self.pids,
            Resource::Cpu => self.cpu_seconds,
            Resource::File => self.file_mb,
            Resource::Disk => self.disk_mb,
        }
    }

    /// These caps, lowered where `requested` asks for less.
    pub fn lowered_by(self, requested: &Requested) -> Self {
        let low = |cap: u64, asked: Option<u64>| asked.map_or(cap, |a| a.min(cap));
        Self {
            memory_mb: low(self.memory_mb, requested.memory_mb),
            pids: low(self.pids, requested.pids),
            cpu_seconds: low(self.cpu_seconds, requested.cpu_seconds),
            file_mb: low(self.file_mb, requested.file_mb),
            disk_mb: low(self.disk_mb, requested.disk_mb),
            open_files: low(self.open_files, requested.open_files),
        }
    }
}

/// What a skill asks for in `runner.json` `limits` (each optional, each at least 1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requested {
    pub memory_mb: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub file_mb: Option<u64>,
    pub disk_mb: Option<u64>,
    pub open_files: Option<u64>,
}

impl Requested {
    /// Reads `runner.json` `limits` (absent or `null`: nothing asked).
    pub fn parse(limits: Option<&Value>) -> Result<Self, String> {
        let map = match limits {
            None | Some(Value::Null) => return Ok(Self::default()),
            Some(Value::Object(map)) => map,
            Some(_) => return Err("'limits' must be an object like {\"memory_mb\": 512}".into()),
        };
        let mut requested = Self::default();
        for (key, value) in map {
            let slot = match key.as_str() {
                "memory_mb" => &mut requested.memory_mb,
                "pids" => &mut requested.pids,
                "cpu_seconds" => &mut requested.cpu_seconds,
                "file_mb" => &mut requested.file_mb,
                "disk_mb" => &mut requested.disk_mb,
                "open_files" => &mut requested.open_files,
                other => {
                    return Err(format!(
                        "'limits.{other}' is not a limit (memory_mb, pids, cpu_seconds, \
                         file_mb, disk_mb, open_files)"
                    ));
                }
            };
            *slot =
                Some(value.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                    format!("'limits.{key}' must be a whole number of at least 1")
                })?);
        }
        Ok(requested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_skill_can_only_lower_the_caps() {
        let caps = Limits::default();
        let asked = Requested::parse(Some(&json!({"memory_mb": 256, "pids": 100000}))).unwrap();
        let got = caps.lowered_by(&asked);
        assert_eq!(got.memory_mb, 256);
        assert_eq!(got.pids, caps.pids, "more than the cap is the cap");
        assert_eq!(got.disk_mb, caps.disk_mb);
    }

    #[test]
    fn bad_limits_are_named() {
        assert!(
            Requested::parse(Some(&json!({"ram": 1})))
                .unwrap_err()
                .contains("limits.ram")
        );
        assert!(
            Requested::parse(Some(&json!({"pids": 0})))
                .unwrap_err()
                .contains("at least 1")
        );
        assert!(Requested::parse(Some(&json!({"pids": "9"}))).is_err());
        assert!(Requested::parse(Some(&json!([1]))).is_err());
        assert_eq!(Requested::parse(None), Ok(Requested::default()));
    }

    #[test]
    fn a_hit_says_how_to_raise_the_limit() {
        let hit = LimitHit {
            resource: Resource::Memory,
            limit: 256,
        };
        let text = hit.to_string();
        assert!(text.contains("memory (256 MiB)"), "{text}");
        assert!(text.contains("limits.memory_mb") && text.contains("SKILL_RUNNER_RUN_MEMORY_MB"));
        for r in Resource::ALL {
            assert!(r.code().starts_with("RESOURCE_"));
        }
    }
}
