//! Skills: folders holding a `SKILL.md`, an `assets/runner.json` and three JSON Schemas.

pub mod manifest;
pub mod registry;
pub mod schema;
pub mod schema_bounds;

pub use manifest::{
    ArtifactSpec, ExecutionMode, InputSource, InvalidSkill, Rules, SchemaPaths, SkillManifest,
};
pub use registry::{Registry, SkillEntry, Snapshot};
