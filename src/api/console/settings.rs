//! `/ui/settings`: the configuration in effect — every setting with its variable, its flag,
//! its value and where that value came from — so an operator can check what the service was
//! started with without reading its environment. Secrets read as set or not
//! ([`crate::config::effective`]).

use askama::Template;
use axum::extract::State;

use super::{Lang, Page, render};
use crate::config::effective::{Effective, Source};
use crate::state::AppState;

#[derive(Template)]
#[template(path = "settings.html")]
struct SettingsPage<'a> {
    l: Lang,
    section: &'static str,
    settings: &'a [Effective],
    /// How many were given (by a variable or a flag) rather than left to their default.
    given: usize,
}

impl SettingsPage<'_> {
    fn source(&self, source: &Source) -> &str {
        self.l.tr(match source {
            Source::Flag => "settings.flag",
            Source::Environment => "settings.environment",
            Source::Default => "settings.default",
            Source::Derived => "settings.derived",
            Source::Unset => "settings.unset",
        })
    }
}

/// `GET /ui/settings`.
pub async fn page(l: Lang, State(state): State<AppState>) -> Page {
    let settings = &state.config.effective;
    render(&SettingsPage {
        l,
        section: "settings",
        settings,
        given: settings
            .iter()
            .filter(|s| matches!(s.source, Source::Flag | Source::Environment))
            .count(),
    })
}
