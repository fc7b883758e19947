//! Sign-in sessions of a vendor account ([`crate::account_login`]). An OpenAI account (codex,
//! opencode, kilo): `callback` gives the authorization page; the browser comes back to
//! `GET /v1/engines/auth/callback/openai` when `SKILL_RUNNER_OAUTH_CALLBACK_BASE_URL` names the
//! service, else the user pastes the address it ended on as the session's input;
//! `auth_code_or_url` gives a device code to enter at the issuer's device page, polled in the
//! background until approved. A Claude account (claude): `auth_code_or_url` gives the sign-in
//! page, whose last page shows a code the user pastes. Either way the tokens become the CLI's
//! login file and the engine's waiting runs are queued.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skill_runner_types::engine::Engine;

use super::{AuthSession, EngineLogins};
use crate::account_login::openai::{self, DeviceCode, Issuer, LOCAL_REDIRECT};
use crate::account_login::{self, Pkce, Tokens, anthropic};
use crate::error::{Error, Result};

/// Whose account a sign-in is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Vendor {
    OpenAi,
    Anthropic,
}

/// What a sign-in under way keeps besides its session: never shown.
#[derive(Debug, Clone)]
pub(super) enum Flow {
    Browser {
        vendor: Vendor,
        state: String,
        pkce: Pkce,
        redirect_uri: String,
    },
    Device {
        device: DeviceCode,
    },
}

fn refused(message: impl Into<String>) -> Error {
    Error::Unprocessable(json!(message.into()))
}

/// Whether `engine` signs a vendor account in here.
fn signs_in(engine: Engine) -> bool {
    matches!(
        engine,
        Engine::Codex | Engine::Opencode | Engine::Kilo | Engine::Claude
    )
}

/// The sign-in methods `engine` has here.
pub fn sign_in_methods(engine: Engine) -> &'static [&'static str] {
    match engine {
        Engine::Claude => &["auth_code_or_url"],
        e if signs_in(e) => &["callback", "auth_code_or_url"],
        _ => &[],
    }
}

impl EngineLogins {
    fn issuer(&self) -> Issuer {
        Issuer::new(&self.jobs.engines().config().openai_auth_issuer)
    }

    /// Starts signing a vendor account in for `engine` (`callback` or `auth_code_or_url`).
    pub(super) async fn start_sign_in(
        self: &Arc<Self>,
        engine: Engine,
        method: &str,
        transport: Option<&str>,
        provider_id: Option<&str>,
    ) -> Result<AuthSession> {
        let provider = provider_id
            .map(|p| p.trim().to_ascii_lowercase())
            .filter(|p| !p.is_empty());
        let (vendor, originator) = match (engine, provider.as_deref()) {
            (Engine::Codex, None | Some("openai")) => (Vendor::OpenAi, "codex_cli_rs"),
            (Engine::Opencode | Engine::Kilo, None | Some("openai")) => {
                (Vendor::OpenAi, "opencode")
            }
            (Engine::Claude, None | Some("anthropic")) if method == "auth_code_or_url" => {
                (Vendor::Anthropic, "claude")
            }
            (Engine::Claude, None | Some("anthropic")) => {
                return Err(refused(
                    "auth_method: claude signs in with the code its sign-in page shows at the \
                     end: use 'auth_code_or_url'",
                ));
            }
            _ => {
                return Err(refused(format!(
                    "auth_method '{method}' signs an account in for codex, opencode and kilo \
                     (provider_id 'openai') and claude ('anthropic'); log '{engine}' in with \
                     'api_key', or import the login files its CLI leaves (POST \
                     /v1/management/engines/{engine}/auth/import)"
                )));
            }
        };
        let config = self.jobs.engines().config().clone();
        let mut session = self.new_session(engine, method, transport);
        session.status = "waiting_user".into();
        session.input_kind = Some("text".into());
        let flow = match (vendor, method) {
            (Vendor::Anthropic, _) => {
                session.provider_id = Some("anthropic".into());
                let issuer = anthropic::Issuer::new(&config.anthropic_auth_issuer);
                let (pkce, state) = (Pkce::new(), account_login::random_token(32));
                session.auth_url = Some(issuer.authorize_url(&state, &pkce));
                Flow::Browser {
                    vendor,
                    state,
                    pkce,
                    redirect_uri: issuer.code_page(),
                }
            }
            (Vendor::OpenAi, "callback") => {
                session.provider_id = Some("openai".into());
                let (pkce, state) = (Pkce::new(), account_login::random_token(32));
                let redirect_uri = match &config.oauth_callback_base {
                    Some(base) => format!(
                        "{}/v1/engines/auth/callback/openai",
                        base.trim_end_matches('/')
                    ),
                    None => LOCAL_REDIRECT.to_owned(),
                };
                session.auth_url =
                    Some(
                        self.issuer()
                            .authorize_url(&redirect_uri, &state, &pkce, originator),
                    );
                Flow::Browser {
                    vendor,
                    state,
                    pkce,
                    redirect_uri,
                }
            }
            (Vendor::OpenAi, _) => {
                session.provider_id = Some("openai".into());
                let issuer = self.issuer();
                let device = issuer.device_code().await.map_err(refused)?;
                session.auth_url = Some(issuer.device_page());
                session.user_code = Some(device.user_code.clone());
                session.input_kind = None;
                Flow::Device { device }
            }
        };
        let session = self.keep(session)?;
        let interval = match &flow {
            Flow::Device { device } => Some(device.interval),
            Flow::Browser { .. } => None,
        };
        self.flows
            .lock()
            .expect("flows lock")
            .insert(session.session_id.clone(), flow);
        if let Some(interval) = interval {
            self.poll_in_background(session.session_id.clone(), interval);
        }
        tracing::info!(%engine, session_id = session.session_id, method, "account sign-in started");
        Ok(session)
    }

    /// Polls the device code of session `id` every `interval` seconds until the user approves
    /// it, the issuer refuses it, or the session ends (canceled, expired).
    fn poll_in_background(self: &Arc<Self>, id: String, interval: u64) {
        let logins = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(interval)).await;
                let Some(logins) = logins.upgrade() else {
                    return;
                };
                let device = match logins.flows.lock().expect("flows lock").get(&id) {
                    Some(Flow::Device { device }) => device.clone(),
                    _ => return,
                };
                let session = match logins.session(&id, None) {
                    Ok(session) if session.waiting() => session,
                    _ => return,
                };
                match logins.issuer().poll_device(&device).await {
                    Ok(None) => {}
                    Ok(Some(tokens)) => {
                        if let Err(e) = logins.signed_in(&session, tokens).await {
                            tracing::error!(
                                session_id = id,
                                error = format!("{e:#}"),
                                "cannot keep a sign-in"
                            );
                            logins.fail(&id, "The service could not keep the login".into());
                        }
                        return;
                    }
                    Err(message) => {
                        logins.fail(&id, message);
                        return;
                    }
                }
            }
        });
    }

    /// The input of a browser sign-in: the address the browser ended on, or the code.
    pub(super) async fn sign_in_input(
        &self,
        session: &AuthSession,
        kind: &str,
        value: &str,
    ) -> Result<AuthSession> {
        let id = &session.session_id;
        let flow = self.flows.lock().expect("flows lock").get(id).cloned();
        let Some(Flow::Browser { state, .. }) = &flow else {
            return Err(refused(format!(
                "this sign-in takes no input: enter the code {} at {}",
                session.user_code.as_deref().unwrap_or_default(),
                session.auth_url.as_deref().unwrap_or_default()
            )));
        };
        if !matches!(kind, "text" | "code") {
            return Err(refused(format!(
                "kind: this session takes 'text' (the address the browser ended on) or 'code', \
                 not '{kind}'"
            )));
        }
        let Some((code, given)) = account_login::code_of(value) else {
            return Err(refused(
                "value: paste the whole address the browser ended on (…?code=…&state=…), or \
                 the code",
            ));
        };
        if given.is_some_and(|given| &given != state) {
            return Err(refused(
                "value: that address belongs to another sign-in (its state differs); use the \
                 address of this session's sign-in page",
            ));
        }
        self.redeem(session, &code, flow.expect("matched above"))
            .await
    }

    /// `GET /v1/engines/auth/callback/openai`: the browser came back with `code` (or `error`)
    /// for the sign-in of `state`; the session as it ended, or why it did not.
    pub async fn callback(
        &self,
        state: &str,
        code: Option<&str>,
        error: Option<&str>,
    ) -> std::result::Result<AuthSession, String> {
        let found = {
            let mut flows = self.flows.lock().expect("flows lock");
            let id = flows
                .iter()
                .find(|(_, f)| {
                    matches!(f, Flow::Browser { vendor: Vendor::OpenAi, state: s, .. } if s == state)
                })
                .map(|(id, _)| id.clone());
            // One use per sign-in: the same address twice finds nothing.
            id.and_then(|id| flows.remove(&id).map(|flow| (id, flow)))
        };
        let Some((id, flow)) = found else {
            return Err(
                "This sign-in is unknown, over or was already completed: start the login again"
                    .into(),
            );
        };
        let session = self.session(&id, None).map_err(|e| e.to_string())?;
        if let Some(error) = error.filter(|e| !e.is_empty()) {
            let message = format!("The sign-in was refused: {error}");
            self.fail(&id, message.clone());
            return Err(message);
        }
        let Some(code) = code.filter(|c| !c.is_empty()) else {
            let message = "The sign-in came back without a code".to_owned();
            self.fail(&id, message.clone());
            return Err(message);
        };
        self.redeem(&session, code, flow)
            .await
            .map_err(|e| e.message().unwrap_or_else(|| e.to_string()))
    }

    /// Trades the code of a browser sign-in for tokens, and keeps them.
    async fn redeem(&self, session: &AuthSession, code: &str, flow: Flow) -> Result<AuthSession> {
        let Flow::Browser {
            vendor,
            state,
            pkce,
            redirect_uri,
        } = flow
        else {
            return Err(refused("this sign-in takes no code"));
        };
        let exchanged = match vendor {
            Vendor::OpenAi => {
                self.issuer()
                    .exchange(code, &redirect_uri, &pkce.verifier)
                    .await
            }
            Vendor::Anthropic => {
                let base = self.jobs.engines().config().anthropic_auth_issuer.clone();
                anthropic::Issuer::new(&base)
                    .exchange(code, &state, &pkce.verifier)
                    .await
            }
        };
        match exchanged {
            Ok(tokens) => {
                self.signed_in(session, tokens).await?;
                self.session(&session.session_id, None)
            }
            Err(message) => {
                self.fail(&session.session_id, message.clone());
                Err(refused(message))
            }
        }
    }

    /// Writes the tokens as the engine's login, queues its waiting runs, ends its sessions.
    async fn signed_in(&self, session: &AuthSession, tokens: Tokens) -> Result<()> {
        let home = self.jobs.engines().config().agent_home.clone();
        let engine = session.engine;
        let written = tokio::task::spawn_blocking(move || match engine {
            Engine::Claude => anthropic::write_login(&home, &tokens)
                .map(|()| Some(anthropic::CREDENTIALS.to_owned())),
            _ => openai::write_login(&home, engine, &tokens),
        })
        .await
        .map_err(|e| Error::Internal(e.into()))?
        .map_err(|e| Error::Internal(e.into()))?;
        tracing::info!(%engine, file = ?written, "engine signed in with a vendor account");
        self.flows
            .lock()
            .expect("flows lock")
            .remove(&session.session_id);
        let resumed = self.jobs.login_arrived(engine).await?;
        self.complete_sessions(engine, resumed);
        Ok(())
    }

    /// Ends the waiting session `id` `failed`, saying why.
    pub(super) fn fail(&self, id: &str, message: String) {
        tracing::warn!(session_id = id, message, "sign-in failed");
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if let Some(session) = sessions.get_mut(id).filter(|s| s.waiting()) {
            session.status = "failed".into();
            session.error = Some(message);
            session.input_kind = None;
            session.updated_at = crate::clock::Timestamp::now();
        }
        drop(sessions);
        self.flows.lock().expect("flows lock").remove(id);
    }
}
