//! A run form the console sent back (with mistakes, or refused by the service), kept a while
//! under a random token: the form's answer is a redirect to the skill's page showing it again
//! (post/redirect/get), so a reload or Back never sends it twice and the address opens the
//! form again. Files chosen are not kept (a browser cannot be given them back).

use std::collections::VecDeque;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use skill_runner_web::form::FieldError;

/// How long a draft can be shown again.
const KEEP: Duration = Duration::from_secs(30 * 60);
/// The most drafts kept (the oldest go first).
const MOST: usize = 256;

/// What a sent-back form shows.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub values: Vec<(String, String)>,
    pub errors: Vec<FieldError>,
    /// Why the service refused it, when it did.
    pub refused: Option<String>,
    /// The run it repeated, when it did.
    pub from: Option<String>,
}

struct Kept {
    token: String,
    tenant: String,
    at: Instant,
    draft: Draft,
}

static DRAFTS: LazyLock<Mutex<VecDeque<Kept>>> = LazyLock::new(Mutex::default);

/// Keeps `draft` of `tenant`'s caller; the token that shows it.
pub fn keep(tenant: &str, draft: Draft) -> String {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let mut drafts = DRAFTS.lock().expect("drafts lock");
    drafts.retain(|k| k.at.elapsed() < KEEP);
    while drafts.len() >= MOST {
        drafts.pop_front();
    }
    drafts.push_back(Kept {
        token: token.clone(),
        tenant: tenant.to_owned(),
        at: Instant::now(),
        draft,
    });
    token
}

/// The draft under `token`, if `tenant` kept it and it is recent; shown as often as asked.
pub fn shown(tenant: &str, token: &str) -> Option<Draft> {
    let drafts = DRAFTS.lock().expect("drafts lock");
    drafts
        .iter()
        .find(|k| k.token == token && k.tenant == tenant && k.at.elapsed() < KEEP)
        .map(|k| k.draft.clone())
}
