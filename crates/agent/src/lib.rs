//! The agent: a chat loop that lets a model call the invocable skills as tools, every step kept
//! in an append-only session.
//!
//! - [`chat`]: one chat, from the user's message to the model's answer.
//! - [`provider`]: the model providers and their wire formats.
//! - [`tools`]: the skills as tools, and the checks a call passes before it runs.
//! - [`session`]: the event log of each session; [`history`]: a stored session as the
//!   conversation a resumed chat sends; [`live`]: following a chat as it happens.
//! - [`tool_output`]: the caps on what a tool's output may cost the model.
//!
//! A chat holds its session's writer from start to end, so a second chat on the same session
//! waits for the first to finish and then continues after it (documented in docs/api.md).

pub mod chat;
pub mod config;
pub mod history;
pub mod live;
pub mod provider;
pub mod session;
pub mod tool_output;
pub mod tools;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use chat::{ChatOutcome, ChatRequest, Prepared};
use live::{Live, Published};
use provider::{PickError, Providers};
use session::{SessionError, Store};
use skill_runner_core::invoke::Host;
use tools::{Toolbox, UnknownAllowed};

/// The agent of one service.
#[derive(Debug)]
pub struct Agent {
    sessions: Store,
    providers: Providers,
    host: Arc<Host>,
    live: Live,
    /// Fires when the service shuts down: chats and streams end.
    closing: CancellationToken,
    /// The folder the file skills work in, as `system.init` reports it.
    cwd: String,
}

/// Why a chat could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Provider(#[from] PickError),
    #[error(transparent)]
    Tools(#[from] UnknownAllowed),
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl Agent {
    /// The agent keeping its sessions under `sessions_dir`, whose file skills work in `cwd`.
    pub fn new(
        chat: &config::ChatConfig,
        sessions_dir: PathBuf,
        cwd: &Path,
        host: Arc<Host>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            sessions: Store::new(sessions_dir),
            providers: Providers::new(chat)?,
            host,
            live: Live::default(),
            closing: CancellationToken::new(),
            cwd: cwd.display().to_string(),
        })
    }

    /// Chooses the chat's provider and tools and takes its session (a new one, or the one
    /// `conversation_id` names once no other chat holds it).
    pub async fn prepare(&self, request: ChatRequest) -> Result<Prepared, StartError> {
        let started = Instant::now();
        let provider = self.providers.pick(request.provider.as_deref())?.clone();
        let toolbox = Toolbox::new(self.host.catalog().await, request.allowed_tools.as_deref())?;
        let model = request.model.as_deref().unwrap_or(&provider.model);
        let metadata = chat::session_metadata(&request, &provider, model);
        let store = self.sessions.clone();
        let conversation = request.conversation_id.clone();
        let caller = request.caller.clone();
        let opened = tokio::task::spawn_blocking(move || match conversation {
            Some(id) => {
                // Another tenant's session is not there for this caller.
                if !store
                    .meta(&id)?
                    .visible_to(caller.visible_tenant().as_deref())
                {
                    return Err(SessionError::NotFound(id));
                }
                store
                    .writer(&id)
                    .map(|(writer, events)| (writer, events, false))
            }
            None => store
                .create(metadata, &caller.tenant_id)
                .map(|writer| (writer, Vec::new(), true)),
        })
        .await
        .map_err(|e| SessionError::Io(std::io::Error::other(e)))??;
        let (writer, events, new_session) = opened;
        Ok(Prepared {
            request,
            provider,
            toolbox,
            writer,
            events,
            new_session,
            started,
        })
    }

    /// Runs a prepared chat as its own task (a client that goes away does not cut it short);
    /// `stream` gets its events as they happen.
    pub fn start(
        self: &Arc<Self>,
        prepared: Prepared,
        stream: Option<mpsc::Sender<Published>>,
    ) -> tokio::task::JoinHandle<ChatOutcome> {
        tokio::spawn(chat::run(self.clone(), prepared, stream))
    }

    /// The sessions.
    pub fn sessions(&self) -> &Store {
        &self.sessions
    }

    /// The events of the chat under way on session `id`, if there is one.
    pub fn follow(&self, id: &str) -> Option<broadcast::Receiver<Published>> {
        self.live.follow(id)
    }

    /// Fires when the service shuts down.
    pub fn closing(&self) -> &CancellationToken {
        &self.closing
    }

    /// Ends chats and streams: the service is shutting down.
    pub fn close(&self) {
        self.closing.cancel();
    }
}
