//! Skills: folders holding a `SKILL.md`, an `assets/runner.json` and three JSON Schemas, or a
//! `SKILL.md` alone as the Agent Skills standard writes them ([`standard`]) — read and checked
//! ([`manifest`], [`schema`]), kept as a snapshot of the skills dir ([`registry`]),
//! read as documents across the configured roots ([`docs`]), and unpacked safely from an
//! uploaded zip ([`archive`]).

pub mod archive;
pub mod docs;
pub mod finding;
pub mod manifest;
pub mod registry;
pub mod schema;
pub mod schema_bounds;
pub mod standard;
pub mod walk;

pub use manifest::{
    ArtifactSpec, ExecutionMode, InputSource, InvalidSkill, Rules, SchemaPaths, SkillFormat,
    SkillManifest,
};
pub use registry::{Registry, SkillEntry, Snapshot};
