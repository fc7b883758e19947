//! The one entry point that runs the service on a listener until a shutdown signal.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use secrecy::ExposeSecret;
use tokio::net::TcpListener;

use crate::agent::Agent;
use crate::api;
use crate::config::Config;
use crate::engines::Engines;
use crate::engines::upgrades::Upgrader;
use crate::invoke::Host;
use crate::jobs::Jobs;
use crate::packages::Installer;
use crate::process::run_uids::RunUids;
use crate::process::{Launch, Reaper, SandboxStatus, Supervisor, sandbox};
use crate::skill::Registry;
use crate::skill::docs::index::{Docs, Limits};
use crate::state::AppState;
use crate::storage::Storage;
use crate::store::{NodeAddress, Store};
use skill_runner_core::config::JobsConfig;

/// What every skill process runs under: the supervisor (with its group reaper) and the engines.
struct Runtime {
    supervisor: Supervisor,
    engines: Engines,
}

fn runtime(config: &Config) -> anyhow::Result<Runtime> {
    let exe = config
        .self_exe
        .clone()
        .context("the service's own executable is unknown (it leads every process it starts)")?;
    let reaper = Arc::new(Reaper::spawn(&exe).context("starting the process group reaper")?);
    let supervisor = Supervisor::new(launch(config, exe)?, Some(reaper), config.jobs.kill_grace);
    let engines = crate::engines::config::EngineConfig {
        model_door: supervisor.model_door(),
        ..config.engines.clone()
    };
    Ok(Runtime {
        supervisor,
        engines: Engines::new(&engines),
    })
}

async fn open_registry(config: &Config) -> anyhow::Result<Arc<Registry>> {
    Ok(Arc::new(
        Registry::open(config.skills_dir.clone())
            .await
            .context("scanning the skills dir")?,
    ))
}

fn skill_docs(config: &Config) -> Arc<Docs> {
    Arc::new(Docs::new(config.skill_doc_roots.clone(), Limits::default()))
}

/// Serves the MCP server over stdin and stdout until the client closes them (`skill-runner
/// mcp`): the same tools and resources as `/mcp`, for clients that start their servers
/// themselves. Logs go to stderr.
pub async fn mcp_stdio(config: Config) -> anyhow::Result<()> {
    let registry = open_registry(&config).await?;
    let Runtime {
        supervisor,
        engines,
    } = runtime(&config)?;
    let host = Arc::new(
        Host::new(
            &config.invoke,
            config.data().invocations(),
            registry,
            engines,
            &supervisor,
        )
        .await
        .context("starting the invoke host")?,
    );
    let docs = skill_docs(&config);
    let server = crate::mcp::SkillServer::new(host, docs);
    let running = rmcp::ServiceExt::serve(server, rmcp::transport::stdio())
        .await
        .context("starting the MCP session")?;
    running.waiting().await.context("serving MCP")?;
    Ok(())
}

/// How long installs under way may finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Opens the store, settles work a previous process left unfinished, and serves on `listener`
/// until `shutdown` resolves. `config` must have its directories prepared
/// ([`Config::prepare_dirs`]). Used by `main` and by tests alike.
pub async fn serve(
    mut config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let descriptors = skill_runner_web::connections::raise_descriptor_limit();
    // Runs, logs and turn pipes need descriptors beside the connections.
    if config.connections.max as u64 + 1024 > descriptors {
        tracing::warn!(
            descriptors,
            max_connections = config.connections.max,
            "SKILL_RUNNER_MAX_CONNECTIONS leaves fewer than 1024 of this process's descriptors \
             for runs: past them, new connections are turned away (503)"
        );
    }
    let data = config.data();
    let database_url = config
        .database_url
        .as_ref()
        .map(ExposeSecret::expose_secret);
    let node = NodeAddress {
        id: config.node_id.clone(),
        url: config.node_url(listener.local_addr()?),
    };
    let store = Store::connect(
        database_url,
        &data.database(),
        &node,
        config.jobs.max_queue_size,
    )
    .await?;
    if store.cluster().is_some() {
        // The other nodes forward reads here under this node's URL.
        config.admit_host_of(&node.url);
    }
    // Shared storage serves nodes sharing a database only: on SQLite the data dir is all.
    let storage = match (&config.storage_url, store.cluster()) {
        (Some(url), Some(_)) => Some(Storage::open(
            url,
            data.storage_scratch(),
            config.storage_env.clone(),
        )?),
        (Some(_), None) => {
            tracing::warn!(
                "SKILL_RUNNER_STORAGE_URL is for nodes sharing a PostgreSQL database \
                 (SKILL_RUNNER_DATABASE_URL); on SQLite, run folders stay in the data dir only"
            );
            None
        }
        (None, _) => None,
    };
    let registry = open_registry(&config).await?;
    let installer = Arc::new(Installer::new(
        store.clone(),
        registry.clone(),
        &data,
        config.package_limits,
        storage.clone(),
    ));
    installer
        .recover()
        .await
        .context("recovering unfinished installs")?;
    installer.keep_in_sync();
    let Runtime {
        supervisor,
        engines,
    } = runtime(&config)?;
    let invoke = Arc::new(
        Host::new(
            &config.invoke,
            data.invocations(),
            registry.clone(),
            engines.clone(),
            &supervisor,
        )
        .await
        .context("starting the invoke host")?,
    );
    let agent = Agent::new(
        &config.chat,
        data.sessions(),
        &config.invoke.allowed_root,
        invoke.clone(),
    )
    .context("starting the agent")?;
    let agent = Arc::new(agent);
    let skill_docs = skill_docs(&config);
    let config = Arc::new(config);
    let jobs = Jobs::new(
        JobsConfig {
            storage,
            engine_limits: config.engine_limits.clone(),
            tenant_quotas: config.tenant_quotas,
            node_id: config.node_id.clone(),
            data: data.clone(),
            limits: config.jobs,
            package_limits: config.package_limits,
            webhook_allow: config.webhook_allow.clone(),
        },
        store.clone(),
        installer.clone(),
        engines,
        supervisor.clone(),
    );
    jobs.start().await.context("recovering runs")?;
    jobs.engines()
        .load_added_snapshots(&store)
        .await
        .context("reading the added model snapshots")?;
    let upgrades = Arc::new(Upgrader::new(
        store.clone(),
        jobs.engines().clone(),
        supervisor.clone(),
        data.upgrades(),
    ));
    upgrades
        .recover()
        .await
        .context("recovering engine upgrades")?;

    let state = AppState {
        streams: Arc::new(skill_runner_web::stream_caps::StreamCaps::new(
            config.streams,
        )),
        config,
        store: store.clone(),
        registry,
        installer: installer.clone(),
        logins: Arc::new(skill_runner_core::engine_login::EngineLogins::new(
            jobs.clone(),
        )),
        jobs: jobs.clone(),
        invoke,
        agent: agent.clone(),
        skill_docs,
        upgrades: upgrades.clone(),
        tenants: Arc::new(skill_runner_core::tenants::manage::Tenants::new(
            store.clone(),
        )),
        terminal: Default::default(),
        draining: Default::default(),
    };
    crate::metrics::start(&state.config.node_id, store.kind());
    let draining = state.draining.clone();
    let terminal = state.terminal.clone();
    let addr = listener.local_addr()?;
    tracing::info!(
        startup_ms = started.elapsed().as_millis() as u64,
        "listening on http://{addr}"
    );
    crate::log_book::book().mark_serving();
    // Event streams never end by themselves; end them when the signal comes, so the HTTP
    // server can drain its connections.
    let streams = jobs.clone();
    let shutdown = async move {
        shutdown.await;
        draining.store(true, std::sync::atomic::Ordering::Relaxed);
        streams.close_streams();
        agent.close();
    };
    let limits = state.config.connections;
    crate::idle::start();
    skill_runner_web::connections::serve(listener, api::router(state), limits, shutdown)
        .await
        .context("serving HTTP")?;

    tracing::info!("shutting down");
    terminal.kill();
    tokio::join!(
        installer.shutdown(SHUTDOWN_GRACE),
        jobs.shutdown(SHUTDOWN_GRACE),
        upgrades.shutdown(SHUTDOWN_GRACE)
    );
    supervisor.release();
    store.close().await;
    Ok(())
}

/// How processes start: the turn leader, the allow-listed environment and the sandbox.
fn launch(config: &Config, exe: std::path::PathBuf) -> anyhow::Result<Launch> {
    let supported = sandbox::landlock_supported();
    let status = sandbox::decide(config.sandbox, supported)
        .map_err(|problem| anyhow::anyhow!("SKILL_RUNNER_SANDBOX: {problem}"))?;
    match status {
        SandboxStatus::Landlock => tracing::info!("turns are confined with Landlock"),
        SandboxStatus::Unavailable => tracing::warn!(
            "this kernel does not enforce Landlock: turns run unconfined (set \
             SKILL_RUNNER_SANDBOX=required to refuse to start without it)"
        ),
        SandboxStatus::Off => {
            tracing::warn!("SKILL_RUNNER_SANDBOX=off: turns run unconfined")
        }
    }
    // Not the folders on PATH: an entry like `~/bin` or `.` would open a home or the service's
    // own folder. Interpreters outside the system dirs are named by the operator.
    let readable = std::iter::once(config.engines.npm_prefix.clone())
        .chain(config.sandbox_read_paths.iter().cloned())
        .collect();
    let isolate =
        status != SandboxStatus::Off && config.namespaces && sandbox::namespaces_supported();
    let tcp_rules = status == SandboxStatus::Landlock && sandbox::landlock_tcp_supported();
    match (isolate, status) {
        (true, _) => tracing::info!("turns run in pid, network and mount namespaces of their own"),
        (false, SandboxStatus::Off) => {}
        (false, _) => tracing::warn!(
            tcp_rules,
            "turns run without namespaces of their own (SKILL_RUNNER_NAMESPACES=off, not root, \
             or a seccomp profile refuses them): they share the service's network (bounded to \
             their egress proxy where Landlock restricts TCP: tcp_rules), see no private \
             /dev/shm, and a double-forked daemon can outlive a killed service"
        ),
    }
    Ok(Launch {
        exe,
        env: config.child_env.clone(),
        sandbox: status,
        isolate,
        tcp_rules,
        egress_allow: config.egress_allow.clone(),
        limits: config.run_limits,
        cgroups: match status {
            SandboxStatus::Off => Default::default(),
            _ => crate::process::cgroups::Cgroups::setup(),
        },
        readable,
        run_uids: run_uids(config, status)?,
        tls: match status {
            SandboxStatus::Off => None,
            _ => Some(std::sync::Arc::new(
                crate::process::egress::tls::Tls::load(
                    &config.data_dir,
                    config.egress_ca_bundle.as_deref(),
                )
                .map_err(|e| anyhow::anyhow!("the egress's CA under the data dir: {e}"))?,
            )),
        },
    })
}

/// The uids turns run under, once the folders they need are theirs to reach.
fn run_uids(config: &Config, status: SandboxStatus) -> anyhow::Result<Option<RunUids>> {
    let Some(uids) = config.run_uids.clone() else {
        if nix::unistd::geteuid().is_root() && status != SandboxStatus::Off {
            tracing::warn!(
                "turns run as root (with no capability): set SKILL_RUNNER_RUN_UIDS so runs \
                 cannot signal or read each other where Landlock is missing"
            );
        }
        return Ok(None);
    };
    if status == SandboxStatus::Off {
        tracing::warn!("SKILL_RUNNER_SANDBOX=off: SKILL_RUNNER_RUN_UIDS does not apply");
        return Ok(None);
    }
    anyhow::ensure!(
        nix::unistd::geteuid().is_root(),
        "SKILL_RUNNER_RUN_UIDS: only a service running as root can start turns under other \
         uids (this one runs as uid {}); unset it",
        nix::unistd::geteuid()
    );
    for needed in [&config.data_dir, &config.skills_dir] {
        RunUids::reachable(needed)
            .map_err(|problem| anyhow::anyhow!("SKILL_RUNNER_RUN_UIDS: {problem}"))?;
    }
    // Only the turns that use them need these (an engine's CLIs, an interpreter).
    for wanted in std::iter::once(&config.engines.npm_prefix).chain(&config.sandbox_read_paths) {
        if let Err(problem) = RunUids::reachable(wanted) {
            tracing::warn!("SKILL_RUNNER_RUN_UIDS: {problem}");
        }
    }
    uids.own_shared(&config.invoke.allowed_root)
        .context("handing OPENSKILL_ALLOWED_ROOT to the shared run uid")?;
    let data = config.data();
    RunUids::take_back_all(&[data.runs(), data.temp_runs(), data.invocations()])
        .context("taking back the run folders of turns a stopped service left")?;
    tracing::info!(kind = uids.kind(), "turns run under uids of their own");
    Ok(Some(uids))
}
