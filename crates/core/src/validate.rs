//! `skill-runner validate <path>`: checks, without a running service, what an author is about
//! to ship — a skill folder with a `SKILL.md` (or the file itself), a skill package (a folder
//! with `assets/runner.json`, or a zip of one skill or of a repository's standard skills) as
//! the installer would judge it, or a tool definition
//! (`.json`, `.yaml`, `.yml`). Findings are printed one per line (`error: …`, `warning: …`),
//! then a verdict; the exit code is 1 when there are errors, 2 when the path cannot be read.

use std::collections::BTreeSet;
use std::path::Path;

use crate::config::PackageLimits;
use crate::invoke::builtin::Builtin;
use crate::packages::install::stage;
use crate::skill::docs::document::{self, Profile as DocProfile};
use crate::skill::manifest::{self, Rules};
use crate::tool_defs::{builtin, validate as tool_validate};

/// What was checked and what was found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub what: String,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

impl Outcome {
    /// The lines to print, the verdict last.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .errors
            .iter()
            .map(|e| format!("error: {e}"))
            .chain(self.warnings.iter().map(|w| format!("warning: {w}")))
            .collect();
        lines.push(if self.errors.is_empty() {
            format!("valid: {}", self.what)
        } else {
            let n = self.errors.len();
            let plural = if n == 1 { "" } else { "s" };
            format!("invalid: {} ({n} error{plural})", self.what)
        });
        lines
    }
}

/// Checks `path` under `profile` (for a `SKILL.md`: strict, the default, lenient or
/// anthropic-upload; for a tool definition: strict or compat); `Err` when it cannot be checked
/// at all (a usage problem).
pub fn check(path: &Path, profile: Option<&str>) -> Result<Outcome, String> {
    if path.is_dir() {
        if path.join("assets/runner.json").is_file() {
            return Ok(package(path, "skill package"));
        }
        if path.join("SKILL.md").is_file() {
            return skill_md(&path.join("SKILL.md"), profile);
        }
        return Err(format!(
            "{}: neither a skill package (assets/runner.json) nor a skill folder (SKILL.md)",
            path.display()
        ));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if name == "skill.md" {
        skill_md(path, profile)
    } else if name.ends_with(".zip") {
        zipped_package(path)
    } else if name.ends_with(".json") || name.ends_with(".yaml") || name.ends_with(".yml") {
        tool_definition(path, profile)
    } else {
        Err(format!(
            "{}: expected a folder, a SKILL.md, a .zip package or a .json/.yaml tool definition",
            path.display()
        ))
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn skill_md(path: &Path, profile: Option<&str>) -> Result<Outcome, String> {
    let name = profile.unwrap_or("strict");
    let profile = DocProfile::parse(name)
        .ok_or_else(|| format!("--profile {name}: not one of {}", DocProfile::NAMES))?;
    let text = read(path)?;
    let dir_name = path
        .parent()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let checked = document::check(&text, dir_name.as_deref(), profile);
    Ok(Outcome {
        what: format!("SKILL.md '{}' ({name})", checked.document.name),
        errors: checked.errors.iter().map(ToString::to_string).collect(),
        warnings: checked.warnings.iter().map(ToString::to_string).collect(),
    })
}

/// A package as the installer judges it: each problem of its refusal is an error, the
/// specification's findings on its `SKILL.md` are warnings.
fn package(dir: &Path, what: &str) -> Outcome {
    match manifest::load(dir, Rules::INSTALL) {
        Ok(manifest) => Outcome {
            what: format!(
                "{what} '{}' {}",
                manifest.id,
                manifest.version.as_deref().unwrap_or_default()
            ),
            errors: Vec::new(),
            warnings: manifest.warnings,
        },
        Err(e) => Outcome {
            what: what.to_owned(),
            errors: e.0.lines().map(str::to_owned).collect(),
            warnings: Vec::new(),
        },
    }
}

/// A zipped package as the installer judges it: one skill, or each of a repository's (each
/// finding then names the skill's folder in the zip).
fn zipped_package(path: &Path) -> Result<Outcome, String> {
    let scratch = tempfile::tempdir().map_err(|e| format!("cannot make a scratch folder: {e}"))?;
    let staging = scratch.path().join("staging");
    let (collection, found) = match stage(path, &staging, &PackageLimits::default()) {
        Ok(staged) => staged,
        Err(e) => {
            return Ok(Outcome {
                what: "skill package".into(),
                errors: e.lines().map(str::to_owned).collect(),
                warnings: Vec::new(),
            });
        }
    };
    if !collection {
        let one = found.into_iter().next().expect("one skill staged");
        return Ok(match one.outcome {
            Ok((dir, _)) => package(&dir, "skill package"),
            Err(e) => Outcome {
                what: "skill package".into(),
                errors: e.lines().map(str::to_owned).collect(),
                warnings: Vec::new(),
            },
        });
    }
    let mut outcome = Outcome {
        what: format!("package of {} skills", found.len()),
        ..Outcome::default()
    };
    for skill in found {
        let at = |line: &str| format!("{}: {line}", skill.path);
        match &skill.outcome {
            Ok((_, manifest)) => outcome
                .warnings
                .extend(manifest.warnings.iter().map(|w| at(w))),
            Err(e) => outcome.errors.extend(e.lines().map(at)),
        }
    }
    Ok(outcome)
}

fn tool_definition(path: &Path, profile: Option<&str>) -> Result<Outcome, String> {
    let name = profile.unwrap_or("strict");
    let profile = tool_validate::Profile::parse(name)
        .ok_or_else(|| format!("--profile {name}: not strict or compat"))?;
    let text = read(path)?;
    let is_yaml = path.extension().is_none_or(|e| e != "json");
    let parsed: Result<serde_json::Value, String> = if is_yaml {
        serde_yaml_ng::from_str(&text).map_err(|e| e.to_string())
    } else {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    };
    let definition = match parsed {
        Ok(definition) => definition,
        Err(e) => {
            return Ok(Outcome {
                what: "tool definition".into(),
                errors: vec![format!("cannot be read: {e}")],
                warnings: Vec::new(),
            });
        }
    };
    // Without a service, the built-in tools are the registered ones.
    let registered: BTreeSet<String> = Builtin::ALL
        .iter()
        .filter_map(|b| builtin::definition(*b)["name"].as_str().map(str::to_owned))
        .collect();
    let report = tool_validate::validate(&definition, profile, &registered);
    Ok(Outcome {
        what: format!(
            "tool definition '{}' ({name})",
            definition["name"].as_str().unwrap_or("?")
        ),
        errors: report.errors.iter().map(ToString::to_string).collect(),
        warnings: report.warnings.iter().map(ToString::to_string).collect(),
    })
}
