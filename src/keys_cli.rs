//! `skill-runner keys …`: API keys made, listed and revoked from the shell, against the store
//! the service's settings name (`SKILL_RUNNER_DATA_DIR`'s SQLite file, or
//! `SKILL_RUNNER_DATABASE_URL`), so the first admin key needs no token in an environment
//! variable. Each change is an audit row, made by no key (`key_id` null). A running service
//! holds its SQLite file alone: there the commands work while it is stopped, and say so at
//! once otherwise.

use std::path::Path;

use anyhow::Context as _;
use secrecy::ExposeSecret as _;
use skill_runner_core::tenants::manage::Tenants;
use skill_runner_core::tenants::{Caller, Role};
use skill_runner_types::clock::Timestamp;

use crate::config::Config;
use crate::store::{NodeAddress, Store};

/// What to do with keys.
#[derive(Debug, Clone)]
pub enum KeysCommand {
    /// Makes a key and prints it (shown this once).
    Create {
        tenant: String,
        role: Role,
        name: String,
        expires_at: Option<Timestamp>,
    },
    /// Lists the keys (never their secrets), one per line.
    List { tenant: Option<String> },
    /// Revokes a key.
    Revoke { key_id: String },
}

/// Runs `command` against the store of `config`; what it prints on stdout.
pub async fn run(config: &Config, command: KeysCommand) -> anyhow::Result<String> {
    let store = open(config).await?;
    let outcome = act(&store, command).await;
    store.close().await;
    outcome
}

async fn open(config: &Config) -> anyhow::Result<Store> {
    let data = config.data();
    let database = data.database();
    if config.database_url.is_none() {
        std::fs::create_dir_all(database.parent().unwrap_or(Path::new(".")))
            .with_context(|| format!("creating the data dir for {}", database.display()))?;
    }
    // Among nodes it is one more for as long as it runs, serving nothing.
    let node = NodeAddress {
        id: format!("keys-cli-{}", std::process::id()),
        url: String::new(),
    };
    let store = Store::connect(
        config.database_url.as_ref().map(|u| u.expose_secret()),
        &database,
        &node,
        config.jobs.max_queue_size,
    )
    .await;
    store.map_err(|e| match e.downcast_ref::<crate::store::Held>() {
        Some(held) => anyhow::anyhow!(
            "{held}. Stop the service first, or manage keys through it: \
             POST /v1/management/tenants/{{tenant_id}}/keys with an admin key or token (or with \
             no credential while it has neither), GET /v1/management/keys, \
             DELETE /v1/management/keys/{{key_id}}"
        ),
        None => e,
    })
}

async fn act(store: &Store, command: KeysCommand) -> anyhow::Result<String> {
    let tenants = Tenants::new(store.clone());
    let by = Caller::operator();
    Ok(match command {
        KeysCommand::Create {
            tenant,
            role,
            name,
            expires_at,
        } => {
            let issued = tenants
                .create_key(&by, &tenant, role, &name, expires_at)
                .await
                .map_err(|e| anyhow::anyhow!(e.message().unwrap_or_else(|| format!("{e:#}"))))?;
            format!("{}\n", issued.secret)
        }
        KeysCommand::List { tenant } => {
            let keys = tenants
                .keys(&by, tenant.as_deref())
                .await
                .map_err(|e| anyhow::anyhow!("{e:#}"))?;
            keys.into_iter()
                .map(|k| {
                    let state = match (&k.revoked_at, &k.expires_at) {
                        (Some(at), _) => format!("revoked {at}"),
                        (None, Some(end)) if *end <= Timestamp::now() => format!("expired {end}"),
                        (None, Some(end)) => format!("expires {end}"),
                        (None, None) => "in force".to_owned(),
                    };
                    format!(
                        "{}\tsr_{}_…\t{}\t{}\t{}\t{state}\n",
                        k.key_id,
                        k.prefix,
                        k.tenant_id,
                        k.role.as_str(),
                        k.name
                    )
                })
                .collect()
        }
        KeysCommand::Revoke { key_id } => {
            let key = tenants
                .revoke_key(&by, &key_id)
                .await
                .map_err(|e| anyhow::anyhow!(e.message().unwrap_or_else(|| format!("{e:#}"))))?;
            format!("{} revoked\n", key.key_id)
        }
    })
}
