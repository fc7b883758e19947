//! What a turn cannot do: the hostile-skill suite, file confinement and per-run uids.
//! One test binary per resource group (each links the whole server once); a module per file.

mod confinement;
mod containment;
mod run_uids;
mod secrets;
