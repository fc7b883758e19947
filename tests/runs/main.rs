//! Runs: creating, following, answering, recovering and invoking them.
//! One test binary per resource group (each links the whole server once); a module per file.

mod api_words;
mod arrivals;
mod cluster;
mod crash_recovery;
mod invoke;
mod jobs;
mod live;
mod quickstart;
mod schedules;
mod tenants;
mod v07_client;
mod webhooks;
