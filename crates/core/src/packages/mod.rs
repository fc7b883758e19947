//! Skill packages: zip uploads that install or update a skill in the skills dir (unpacked by
//! `skill::archive`).

pub mod install;

pub use install::Installer;
