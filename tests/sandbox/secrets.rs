//! A skill's secret at the egress: the turn holds a placeholder, and the proxy puts the value in
//! only where the secret is bound (its host, over TLS it terminates, in its header), never on
//! another host, a mismatched SNI or `Host`, a body or query, plain HTTP or a redirect; a
//! rotation reaches the running turn's next request. The echo servers (TLS with a test CA the
//! service trusts through `SKILL_RUNNER_EGRESS_CA_BUNDLE`) record what arrived.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skill_runner_test_support::netns::{Isolation, isolate};
use skill_runner_test_support::{self as common, EchoServer, TestCa, TestServer, folder_mentions};

const VALUE: &str = "ghp-real-secret-value-3d9a61c5";
const ROTATED: &str = "ghp-rotated-secret-value-77b1e0f2";

/// Sends each probe through the turn's proxy by hand (so each can name its own CONNECT target,
/// SNI and `Host`), follows a redirect as a client that keeps its headers would, and waits for
/// the test's word (`rotated` in the workspace) before the last probe.
const CLIENT: &str = r#"
import json, os, socket, ssl, sys, time, urllib.parse
p = json.load(sys.stdin)["parameter"]
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
token = os.environ["T"]
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
ctx.load_verify_locations(cadata=p["test_ca"])
seen = {"placeholder": token}

def read_all(s):
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError as e:
            return got.decode("latin-1") + " failed: " + str(e)
        if not chunk:
            return got.decode("latin-1")
        got += chunk

def send(probe):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    target = probe["connect"]
    headers = "Host: %s\r\nConnection: close\r\n" % probe["host"]
    for name, value in probe.get("headers", {}).items():
        headers += "%s: %s\r\n" % (name, value.replace("TOKEN", token))
    body = probe.get("body", "").replace("TOKEN", token)
    path = probe["path"].replace("TOKEN", token)
    if probe.get("plain"):
        s.sendall(("POST http://%s%s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
                   % (target, path, headers, len(body), body)).encode())
        return read_all(s)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1024)
        if not chunk:
            return "failed: the proxy closed"
        head += chunk
    try:
        s = ctx.wrap_socket(s, server_hostname=probe["sni"])
        s.sendall(("POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
                   % (path, headers, len(body), body)).encode())
    except (OSError, ssl.SSLError) as e:
        return "failed: " + str(e)
    return read_all(s)

for probe in p["probes"]:
    if probe.get("after_rotation"):
        deadline = time.time() + 30
        while not os.path.exists("rotated") and time.time() < deadline:
            time.sleep(0.05)
    answer = send(probe)
    with open("answers.txt", "a") as out:
        out.write(answer + "\n")
    seen[probe["name"]] = answer.split("\r\n")[0]
    location = [l for l in answer.split("\r\n") if l.lower().startswith("location:")]
    if location:
        url = urllib.parse.urlsplit(location[0].split(":", 1)[1].strip())
        port = url.port or 443
        seen[probe["name"] + " followed"] = send(dict(probe, connect="%s:%d" % (url.hostname, port),
            host="%s:%d" % (url.hostname, port), sni=url.hostname, path=url.path)).split("\r\n")[0]
print(json.dumps({"observed": seen}))
"#;

#[tokio::test]
async fn a_secret_goes_only_where_it_is_bound() {
    if let Isolation::Inside = isolate(concat!(
        module_path!(),
        "::a_secret_goes_only_where_it_is_bound"
    )) {
        secret_at_the_egress(false).await;
    }
}

/// The same where turns share the service's network (no namespaces): the proxy is the one port
/// Landlock lets them connect to, and holds the secret the same way.
#[tokio::test]
async fn a_secret_goes_only_where_it_is_bound_when_sharing_the_network() {
    if let Isolation::Inside = isolate(concat!(
        module_path!(),
        "::a_secret_goes_only_where_it_is_bound_when_sharing_the_network"
    )) {
        secret_at_the_egress(true).await;
    }
}

/// The requests `echo` recorded at `path` (without its query).
fn at(echo: &EchoServer, path: &str) -> Vec<Value> {
    echo.requests()
        .into_iter()
        .filter(|r| r["path"].as_str().unwrap().split('?').next() == Some(path))
        .collect()
}

async fn secret_at_the_egress(shared: bool) {
    let ca = TestCa::new();
    let bound = EchoServer::start_tls(&ca, &["localhost"]);
    let other = EchoServer::start_tls(&ca, &["localhost"]);
    let plain = EchoServer::start_plain();
    let (a, b, c) = (bound.port(), other.port(), plain.port());
    let declared: Vec<String> = [a, b, c].iter().map(|p| format!("localhost:{p}")).collect();
    let skill = common::observer_skill("client", CLIENT, &["probes"]).runner(json!({
        "entrypoint": {"script": ["python3", "client.py"]},
        "network": {"allow": declared},
        "secrets": ["T"],
    }));
    let allow = declared.join(",");
    let ca_bundle = ca.ca_pem_path().to_str().unwrap().to_owned();
    let mut env = vec![
        ("SKILL_RUNNER_EGRESS_ALLOW", allow.as_str()),
        ("SKILL_RUNNER_EGRESS_CA_BUNDLE", ca_bundle.as_str()),
    ];
    if shared {
        env.push(("SKILL_RUNNER_NAMESPACES", "off"));
    }
    let server = TestServer::with_skills(&[skill], &env);

    // Management: the value goes in and never comes out.
    let (code, refused) = server
        .post_json(
            "/v1/management/secrets",
            json!({"name": "T", "value": VALUE, "hosts": ["*"]}),
        )
        .await;
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().starts_with("hosts:"),
        "{refused}"
    );
    let (code, created) = server
        .post_json(
            "/v1/management/secrets",
            json!({"name": "T", "value": VALUE,
                   "hosts": [format!("localhost:{a}"), format!("LOCALHOST.:{c}")]}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["last4"], "61c5");
    assert_eq!(created["header"], "authorization");
    assert_eq!(
        created["hosts"],
        json!([format!("localhost:{a}"), format!("localhost:{c}")])
    );
    let (code, again) = server
        .post_json(
            "/v1/management/secrets",
            json!({"name": "T", "value": VALUE, "hosts": ["localhost"]}),
        )
        .await;
    assert_eq!(code, 409, "{again}");
    let (_, listed) = server.get("/v1/management/secrets").await;
    assert_eq!(listed["secrets"][0]["name"], "T", "{listed}");
    assert!(!listed.to_string().contains(VALUE), "{listed}");
    let (code, pem) = server.text("/v1/management/egress/ca.pem").await;
    assert_eq!(code, 200);
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");

    let auth = json!({"Authorization": "Bearer TOKEN", "Accept-Encoding": "gzip",
                      "Range": "bytes=0-20"});
    let probe = |name: &str, connect: String, sni: &str, host: String, path: &str| {
        json!({"name": name, "connect": connect, "sni": sni, "host": host, "path": path,
               "headers": auth})
    };
    let probes = json!([
        probe("bound", format!("localhost:{a}"), "localhost", format!("localhost:{a}"), "/bound"),
        probe("other host", format!("localhost:{b}"), "localhost", format!("localhost:{b}"), "/other"),
        probe("host differs", format!("localhost:{a}"), "localhost", format!("localhost:{b}"), "/host-differs"),
        probe("sni differs", format!("localhost:{a}"), "elsewhere.localhost", format!("localhost:{a}"), "/sni-differs"),
        probe("connect differs", format!("localhost:{b}"), "localhost", format!("localhost:{a}"), "/connect-differs"),
        {"name": "body and query", "connect": format!("localhost:{a}"), "sni": "localhost",
         "host": format!("localhost:{a}"), "path": "/carried?key=TOKEN",
         "headers": {"X-Echo": "TOKEN"}, "body": "{\"key\": \"TOKEN\"}"},
        {"name": "plain", "plain": true, "connect": format!("localhost:{c}"),
         "host": format!("localhost:{c}"), "path": "/plain", "headers": auth},
        probe("redirect", format!("localhost:{a}"), "localhost", format!("localhost:{a}"),
              &format!("/redirect?to=https%3A%2F%2Flocalhost%3A{b}%2Flanded")),
        dict_with(probe("rotated", format!("localhost:{a}"), "localhost", format!("localhost:{a}"), "/rotated"),
                  "after_rotation", json!(true)),
    ]);
    let rid = server
        .create_job(json!({"skill_id": "client",
                           "parameter": {"probes": probes, "test_ca": std::fs::read_to_string(&ca_bundle).unwrap()}}))
        .await;
    // Rotate once the turn's requests before the rotation arrived.
    let deadline = Instant::now() + Duration::from_secs(60);
    while at(&other, "/landed").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the turn never got to its redirect: {:?}",
            bound.requests()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, rotated) = server
        .put_json(
            "/v1/management/secrets/T",
            json!({"value": ROTATED, "hosts": [format!("localhost:{a}"), format!("localhost:{c}")]}),
        )
        .await;
    assert_eq!(code, 200, "{rotated}");
    assert_eq!(rotated["last4"], "e0f2");
    let status = server
        .wait_status(
            &format!("/v1/jobs/{rid}"),
            &["running", "succeeded", "failed"],
        )
        .await;
    std::fs::write(server.workspace(&status).join("rotated"), "").unwrap();
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    let seen = &result["result"]["data"]["observed"];
    let placeholder = seen["placeholder"].as_str().unwrap().to_owned();
    assert_eq!(
        placeholder,
        format!("sr-secret-{}-T", status["run_id"].as_str().unwrap())
    );

    let header = |r: &Value| {
        r["headers"]["authorization"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    // The bound host got the value in its header; the others the placeholder.
    let got = at(&bound, "/bound");
    assert_eq!(header(&got[0]), format!("Bearer {VALUE}"), "{seen}");
    assert_eq!(got[0]["sni"], "localhost");
    // Nothing comes back compressed or in pieces, where masking could not find the value.
    assert_eq!(got[0]["headers"]["accept-encoding"], "identity");
    assert!(got[0]["headers"].get("range").is_none(), "{}", got[0]);
    assert_eq!(
        header(&at(&other, "/other")[0]),
        format!("Bearer {placeholder}")
    );
    // A Host or SNI that is not the CONNECT target's: refused before anything was sent.
    assert!(
        seen["host differs"].as_str().unwrap().contains("421"),
        "{seen}"
    );
    assert!(at(&bound, "/host-differs").is_empty() && at(&other, "/host-differs").is_empty());
    assert!(
        seen["sni differs"].as_str().unwrap().starts_with("failed"),
        "{seen}"
    );
    assert!(at(&bound, "/sni-differs").is_empty());
    // CONNECT to the other host, Host naming the bound one: a tunnel the proxy cannot read.
    for r in at(&other, "/connect-differs") {
        assert_eq!(header(&r), format!("Bearer {placeholder}"));
    }
    // Not in a body, a query or another header.
    let carried = &at(&bound, "/carried")[0];
    assert!(!carried.to_string().contains(VALUE), "{carried}");
    assert!(
        carried["body"].as_str().unwrap().contains(&placeholder),
        "{carried}"
    );
    assert!(
        carried["path"].as_str().unwrap().contains(&placeholder),
        "{carried}"
    );
    assert_eq!(carried["headers"]["x-echo"], placeholder.as_str());
    // Not on plain HTTP, even to a bound host.
    assert_eq!(
        header(&at(&plain, "/plain")[0]),
        format!("Bearer {placeholder}")
    );
    // A redirect is the client's to follow, and the host it leads to gets the placeholder.
    assert!(seen["redirect"].as_str().unwrap().contains("302"), "{seen}");
    assert_eq!(
        header(&at(&other, "/landed")[0]),
        format!("Bearer {placeholder}")
    );
    // The bound host echoed the header: the turn got it back masked (the answers it kept in
    // its workspace, which nothing else masks).
    let answers = std::fs::read_to_string(server.workspace(&status).join("answers.txt")).unwrap();
    assert!(
        answers.contains(&format!("Bearer {}", "*".repeat(VALUE.len()))),
        "{answers}"
    );
    // The rotated value on the running turn's next request.
    assert_eq!(
        header(&at(&bound, "/rotated")[0]),
        format!("Bearer {ROTATED}")
    );

    // Each injection is a line of the egress log, naming the secret, never its value.
    let egress =
        std::fs::read_to_string(server.run_dir(&status).join("logs/egress.jsonl")).unwrap();
    let injected = egress
        .lines()
        .filter(|l| l.contains("\"secret\":\"T\"") && l.contains("\"injected\":true"))
        .count();
    assert_eq!(injected, 3, "{egress}");
    for value in [VALUE, ROTATED] {
        assert!(!egress.contains(value));
        assert!(
            !folder_mentions(&server.run_dir(&status), value),
            "{value} in the run folder"
        );
    }

    // A skill whose secret no host it declares matches: refused, saying which.
    let (code, _) = server
        .put_json(
            "/v1/management/secrets/T",
            json!({"value": VALUE, "hosts": ["api.example.com"]}),
        )
        .await;
    assert_eq!(code, 200);
    let rid = server
        .create_job(json!({"skill_id": "client", "parameter": {"probes": [], "test_ca": ""}}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(
        status["error"]["code"], "SECRET_HOST_NOT_ALLOWED",
        "{status}"
    );
    // And one whose secret is gone.
    let (code, _) = server.delete("/v1/management/secrets/T").await;
    assert_eq!(code, 200);
    let (code, _) = server.delete("/v1/management/secrets/T").await;
    assert_eq!(code, 404);
    let rid = server
        .create_job(json!({"skill_id": "client", "parameter": {"probes": [], "test_ca": ""}}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["error"]["code"], "SECRET_NOT_FOUND", "{status}");
}

fn dict_with(mut object: Value, key: &str, value: Value) -> Value {
    object[key] = value;
    object
}

/// Reads everything a turn can reach that might hold a secret: its environment, every
/// process's environment and command line it can see, every file under its home, workspace,
/// `/tmp` and the folder of the CA it was told to trust, and the CA's key beside it; all of it
/// goes into `dump.txt` in the workspace for the test to search.
const SEEKER: &str = r#"
import json, os, shutil, sys
p = json.load(sys.stdin)["parameter"]
out = open("dump.txt", "wb")
def take(path):
    try:
        with open(path, "rb") as f:
            out.write(b"\n== " + path.encode() + b"\n" + f.read(4 << 20))
    except OSError as e:
        out.write(("\n== %s: %s\n" % (path, e.strerror)).encode())
out.write(repr(dict(os.environ)).encode())
try:
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
except OSError as e:
    out.write(("\n== listing /proc: %s\n" % e.strerror).encode())
    pids = ["self", "1", "2"] + [str(n) for n in range(os.getpid() - 50, os.getpid() + 50)]
for pid in pids:
    for part in ("environ", "cmdline"):
        take("/proc/%s/%s" % (pid, part))
trust = os.path.dirname(os.environ["SSL_CERT_FILE"])
for root in (os.environ["HOME"], os.getcwd(), "/tmp", trust):
    for folder, _, files in os.walk(root):
        for name in files:
            if os.path.join(folder, name) != os.path.abspath("dump.txt"):
                take(os.path.join(folder, name))
data = os.path.dirname(trust)
take(os.path.join(data, "egress-ca", "key.pem"))
try:
    listed = os.listdir(data)
except OSError as e:
    listed = str(e)
out.write(("\n== listing %s: %s\n" % (data, listed)).encode())
out.close()
# Its artifacts folder becomes a link to a folder of the service's machine holding the value:
# the service must neither list nor rewrite what is there.
shutil.rmtree("artifacts", ignore_errors=True)
os.symlink(p["bait"], "artifacts")
print(json.dumps({"observed": {"trust": trust}}))
"#;

#[tokio::test]
async fn a_turn_finds_no_key_and_no_ca_key() {
    if let Isolation::Inside = isolate(concat!(
        module_path!(),
        "::a_turn_finds_no_key_and_no_ca_key"
    )) {
        nothing_to_find().await;
    }
}

async fn nothing_to_find() {
    const ENGINE_KEY: &str = "sk-engine-key-in-the-services-env-5e0c";
    let ca = TestCa::new();
    let bound = EchoServer::start_tls(&ca, &["localhost"]);
    let host = format!("localhost:{}", bound.port());
    let skill = common::observer_skill("seeker", SEEKER, &[]).runner(json!({
        "entrypoint": {"script": ["python3", "seeker.py"]},
        "network": {"allow": [host]},
        "secrets": ["T"],
    }));
    let server = TestServer::with_skills(
        &[skill],
        &[
            ("SKILL_RUNNER_EGRESS_ALLOW", &host),
            ("SKILL_RUNNER_CODEX_API_KEY", ENGINE_KEY),
        ],
    );
    let (code, _) = server
        .post_json(
            "/v1/management/secrets",
            json!({"name": "T", "value": VALUE, "hosts": [host]}),
        )
        .await;
    assert_eq!(code, 200);
    let bait = tempfile::tempdir().unwrap();
    let bait_file = bait.path().join("bait.txt");
    std::fs::write(&bait_file, format!("the value {VALUE} lives here")).unwrap();
    let rid = server
        .create_job(json!({"skill_id": "seeker", "parameter": {"bait": bait.path()}}))
        .await;
    let status = server.wait_job(&rid).await;
    let (_, logs) = server.get(&format!("/v1/jobs/{rid}/logs")).await;
    assert_eq!(
        status["status"], "succeeded",
        "{status}\n{}",
        logs["stderr"]
    );
    let dump = std::fs::read(server.workspace(&status).join("dump.txt")).unwrap();
    let dump = String::from_utf8_lossy(&dump);
    // It did look: its own placeholder, and the CA's certificate, are there.
    assert!(dump.contains("sr-secret-"), "the turn saw no placeholder");
    assert!(
        dump.contains("BEGIN CERTIFICATE"),
        "the turn read no CA certificate"
    );
    let ca_key = std::fs::read_to_string(server.dirs.data.join("egress-ca/key.pem")).unwrap();
    let ca_key_body = ca_key.lines().nth(1).unwrap();
    for (what, needle) in [
        ("the secret's value", VALUE),
        ("the engine's key", ENGINE_KEY),
        ("the CA's key", ca_key_body),
    ] {
        assert!(!dump.contains(needle), "the turn found {what}");
    }
    assert!(
        dump.contains("egress-ca/key.pem: "),
        "reading the CA key did not fail"
    );
    // The linked folder was neither listed as artifacts nor masked.
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["result"]["artifacts"], json!([]), "{result}");
    assert_eq!(
        std::fs::read_to_string(&bait_file).unwrap(),
        format!("the value {VALUE} lives here")
    );
}
