//! A headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`, from
//! `scripts/install-browser.sh`), with a fresh profile, that reports the page's console errors
//! and every resource it asked for.

use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

pub struct Browser {
    pub client: Client,
    driver: Child,
    driver_url: String,
    _profile: tempfile::TempDir,
}

/// Whether the browser and its driver are installed; under `CI=true` they must be.
pub fn available() -> bool {
    let found = ["chromium", "chromedriver"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !found {
        let line =
            "skipped: chromium or chromedriver not installed (run scripts/install-browser.sh)";
        assert!(std::env::var_os("CI").is_none(), "{line}");
        eprintln!("\n*** {line} ***\n");
    }
    found
}

/// Where `scripts/install-axe.sh` put axe-core (`SKILL_RUNNER_AXE_DIR` moves it).
fn axe_path() -> std::path::PathBuf {
    let dir = std::env::var_os("SKILL_RUNNER_AXE_DIR").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            std::path::Path::new(&home).join(".cache/skill-runner/axe-core-4.14.1")
        },
        std::path::PathBuf::from,
    );
    dir.join("axe.min.js")
}

impl Browser {
    pub async fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // In a group of its own, so the browsers it starts go with it (see `Drop`).
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver_url = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--no-first-run", "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let caps: serde_json::Map<String, Value> = caps.as_object().unwrap().clone();
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&driver_url)
                .await
            {
                Ok(client) => break client,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot start a browser session: {e}"),
            }
        };
        Browser {
            client,
            driver,
            driver_url,
            _profile: profile,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// Waits up to 30 s for an element matching `css`.
    pub async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        match self
            .client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(css))
            .await
        {
            Ok(element) => element,
            Err(e) => {
                let page = self
                    .client
                    .execute("return document.body.innerText", vec![])
                    .await
                    .unwrap_or_default();
                panic!("no element '{css}' appeared ({e}); the page shows:\n{page}")
            }
        }
    }

    /// Clicks the element matching `css`, found again when the page replaced it between the
    /// find and the click (a live page re-renders its parts).
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.wait_for(css).await.click().await {
                Ok(()) => return,
                Err(fantoccini::error::CmdError::Standard(e))
                    if e.error == fantoccini::error::ErrorStatus::StaleElementReference
                        && Instant::now() < deadline => {}
                Err(e) => panic!("clicking '{css}': {e}"),
            }
        }
    }

    /// Types `text` into the `field` of `form` and presses the form's button.
    pub async fn submit(&self, form: &str, field: &str, text: &str) {
        self.wait_for(&format!("{form} {field}"))
            .await
            .send_keys(text)
            .await
            .unwrap();
        self.click(&format!("{form} button")).await;
    }

    /// Waits up to 30 s until the text of the element matching `css` contains `text`.
    pub async fn wait_text(&self, css: &str, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let shown = match self.client.find(Locator::Css(css)).await {
                Ok(element) => element.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if shown.contains(text) {
                return;
            }
            if Instant::now() >= deadline {
                let page = self
                    .client
                    .execute("return document.body.innerText", vec![])
                    .await
                    .unwrap_or_default();
                let errors = self.console_errors().await;
                panic!(
                    "'{css}' never showed '{text}'; it shows: {shown}\nthe page shows:\n{page}\nconsole errors: {errors:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The browser log's errors since the last call (a failed request, a refused script, an
    /// exception, a Content-Security-Policy violation).
    pub async fn console_errors(&self) -> Vec<String> {
        let session = self.client.session_id().await.unwrap().unwrap();
        let url = format!("{}/session/{session}/se/log", self.driver_url);
        let body: Value = reqwest::Client::new()
            .post(url)
            .json(&json!({"type": "browser"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body["value"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|entry| entry["level"] == "SEVERE")
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Every resource the page loaded, by URL.
    pub async fn resources(&self) -> Vec<String> {
        let list = self
            .client
            .execute(
                "return performance.getEntriesByType('resource').map(e => e.name)",
                vec![],
            )
            .await
            .unwrap();
        serde_json::from_value(list).unwrap()
    }

    /// Checks the page loaded nothing from outside `origin` and logged no error. Credentials in
    /// a URL (`http://user:pw@host/`) do not make it another origin.
    pub async fn assert_clean(&self, origin: &str) {
        let bare = |url: &str| match url.split_once("://") {
            Some((scheme, rest)) => {
                let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
                let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                format!("{scheme}://{host}/{path}")
            }
            None => url.to_owned(),
        };
        let origin = bare(origin);
        let outside: Vec<String> = self
            .resources()
            .await
            .into_iter()
            .filter(|url| !bare(url).starts_with(&origin))
            .collect();
        assert!(outside.is_empty(), "requests beyond {origin}: {outside:?}");
        let errors = self.console_errors().await;
        assert!(errors.is_empty(), "console errors: {errors:#?}");
    }

    /// The page's accessibility violations of `serious` or `critical` impact, by axe-core
    /// (`scripts/install-axe.sh`), each as `rule: what (where)`.
    pub async fn accessibility_violations(&self) -> Vec<String> {
        let source = std::fs::read_to_string(axe_path()).unwrap_or_else(|e| {
            panic!(
                "axe-core is not at {} ({e}): run scripts/install-axe.sh",
                axe_path().display()
            )
        });
        self.client.execute(&source, vec![]).await.unwrap();
        let found = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 axe.run(document, {resultTypes: ['violations']})
                   .then(r => done(r.violations
                     .filter(v => v.impact === 'serious' || v.impact === 'critical')
                     .map(v => `${v.id}: ${v.help} (${v.nodes.map(n => n.target.join(' ')).join(', ')})`)))
                   .catch(e => done([`axe failed: ${e}`]));",
                vec![],
            )
            .await
            .unwrap();
        serde_json::from_value(found).unwrap()
    }

    /// Saves the page as `<name>.png` in `$SKILL_RUNNER_SCREENSHOTS` when that is set (the
    /// README's pictures come from `scripts/screenshots.sh`); does nothing otherwise.
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("SKILL_RUNNER_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the session (the browser quits), then the driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.driver.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}
