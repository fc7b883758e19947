//! Per-run uids (`SKILL_RUNNER_RUN_UIDS`, the service running as root): each turn runs under a
//! uid of its own, so runs cannot read or signal each other by plain file and process
//! permissions, which the tests try themselves with `setpriv` (no Landlock or namespace in the
//! way); invoke programs write the shared allowed root as the range's first uid; and the
//! service refuses to start where such turns could not work.

use skill_runner_test_support as common;

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TestDirs, TestServer};
use serde_json::{Value, json};

const UIDS: &str = "200000-200099";

/// Reports its ids, leaves a secret in its workspace, reopens its stderr by name, marks itself
/// ready (its pid in `ready`) and stays `seconds`.
const HOLDER: &str = r#"
import json, os, sys, time
p = json.load(sys.stdin)["parameter"]
with open("secret.txt", "w") as f:
    f.write("s3cret")
os.chmod("secret.txt", 0o644)
with open("/dev/stderr", "w") as e:
    e.write("stderr reopened by name\n")
with open("ready.tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename("ready.tmp", "ready")
time.sleep(p["seconds"])
print(json.dumps({"observed": {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}}))
"#;

/// A server over `dirs`, reachable for other uids.
fn server(dirs: std::sync::Arc<TestDirs>, env: &[(&str, &str)]) -> TestServer {
    std::fs::set_permissions(&dirs.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    TestServer::start_with(dirs, env)
}

/// Runs `argv` as `uid` (and gid, no other group); its combined output and whether it worked.
fn as_uid(uid: u32, argv: &[&str]) -> (bool, String) {
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .args(argv)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

async fn wait_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(Instant::now() < deadline, "{} never came", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn observed(server: &TestServer, rid: &str) -> Value {
    let status = server.wait_job(rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    result["result"]["data"]["observed"].clone()
}

#[tokio::test]
async fn runs_have_uids_of_their_own() {
    runs_apart("auto").await;
}

/// Where turns share the service's pid namespace, uids are what keeps one from signalling
/// another.
#[tokio::test]
async fn runs_have_uids_of_their_own_without_namespaces() {
    runs_apart("off").await;
}

async fn runs_apart(namespaces: &str) {
    let dirs = TestDirs::new();
    common::observer_skill("holder", HOLDER, &["seconds"]).write_into(&dirs.skills);
    let server = server(
        dirs,
        &[
            ("SKILL_RUNNER_RUN_UIDS", UIDS),
            ("SKILL_RUNNER_MAX_CONCURRENT", "2"),
            ("SKILL_RUNNER_NAMESPACES", namespaces),
        ],
    );
    let (_, engines) = server.get("/v1/management/engines").await;
    assert_eq!(
        engines["engines"][0]["barriers"]["users"], "per-run-uid",
        "{engines}"
    );

    let holder = server
        .create_job(json!({"skill_id": "holder", "parameter": {"seconds": 8}}))
        .await;
    let status = server
        .wait_status(&format!("/v1/jobs/{holder}"), &["running"])
        .await;
    let run_dir = server.run_dir(&status);
    let workspace = server.workspace(&status);
    let inner_pid: i32 = wait_file(&workspace.join("ready")).await.parse().unwrap();
    let pid = common::host_id(&workspace, "NSpid", inner_pid).expect("the holder runs");
    let uid = std::fs::metadata(format!("/proc/{pid}")).unwrap().uid();
    assert!((200_001..=200_099).contains(&uid), "turn uid {uid}");

    // Its run folder lets its uid's group through and nobody else; its workspace is its own.
    let folder = std::fs::metadata(&run_dir).unwrap();
    assert_eq!(
        (folder.uid(), folder.gid(), folder.mode() & 0o7777),
        (0, uid, 0o710)
    );
    assert_eq!(std::fs::metadata(&workspace).unwrap().uid(), uid);
    let secret = workspace.join("secret.txt");
    let secret = secret.to_str().unwrap();
    let pid_text = pid.to_string();
    assert_eq!(as_uid(uid, &["cat", secret]), (true, "s3cret".to_owned()));
    // Another run's uid can neither read its files nor signal its processes.
    let (read, why) = as_uid(200_050, &["cat", secret]);
    assert!(!read && why.contains("Permission denied"), "{why}");
    let (signaled, why) = as_uid(200_050, &["kill", "-0", &pid_text]);
    assert!(!signaled && why.contains("not permitted"), "{why}");

    // A second run at the same time gets another uid.
    let other = server
        .create_job(json!({"skill_id": "holder", "parameter": {"seconds": 0}}))
        .await;
    let seen = observed(&server, &other).await;
    let other_uid = seen["uid"].as_u64().unwrap() as u32;
    assert_ne!(other_uid, uid);
    assert!((200_001..=200_099).contains(&other_uid), "{seen}");
    assert_eq!(seen["gid"], other_uid, "{seen}");
    assert_eq!(seen["groups"], json!([]), "no supplementary group: {seen}");

    let seen = observed(&server, &holder).await;
    assert_eq!(seen["uid"], uid, "{seen}");
    let stderr = std::fs::read_to_string(run_dir.join("logs/stderr.txt")).unwrap();
    assert!(stderr.contains("stderr reopened by name"), "{stderr}");
    // Once the run is over, its folder is closed to the uid it had.
    let folder = std::fs::metadata(&run_dir).unwrap();
    assert_eq!((folder.uid(), folder.gid()), (0, 0));
    let (read, why) = as_uid(uid, &["cat", secret]);
    assert!(!read && why.contains("Permission denied"), "{why}");
}

/// Appends a line to a private file in a private folder each turn; asks once, then answers
/// with the file.
const KEEPER: &str = r#"
import json, os, sys
req = json.load(sys.stdin)
os.makedirs("notes", mode=0o700, exist_ok=True)
with open("notes/log.txt", "a") as f:
    f.write("turn %d\n" % req["turn"])
os.chmod("notes/log.txt", 0o600)
if not req["history"]:
    print(json.dumps({"ask_user": {"interaction_id": 1, "kind": "choose_one", "prompt": "on?",
        "options": ["yes"], "default_decision_policy": "pick_first"}}))
else:
    print(json.dumps({"observed": {"log": open("notes/log.txt").read(), "uid": os.getuid()}}))
"#;

/// The next turn of a run may get another uid; what the run's earlier turns wrote is handed to
/// it, private files and folders too.
#[tokio::test]
async fn a_later_turn_under_another_uid_keeps_the_runs_files() {
    let dirs = TestDirs::new();
    common::observer_skill("keeper", KEEPER, &[])
        .runner(json!({"execution_modes": ["auto", "interactive"]}))
        .write_into(&dirs.skills);
    let server = server(dirs, &[("SKILL_RUNNER_RUN_UIDS", UIDS)]);
    let body = json!({"skill_id": "keeper", "parameter": {},
        "runtime_options": {"execution_mode": "interactive"}});
    let rid = server.create_job(body.clone()).await;
    let status = server
        .wait_status(&format!("/v1/jobs/{rid}"), &["waiting_user"])
        .await;
    let notes = server.workspace(&status).join("notes");
    let first = std::fs::metadata(&notes).unwrap().uid();
    // Another run takes the next uid meanwhile.
    let other = server.create_job(body).await;
    server
        .wait_status(&format!("/v1/jobs/{other}"), &["waiting_user"])
        .await;
    let (code, body) = server
        .post_json(
            &format!("/v1/jobs/{rid}/interaction/reply"),
            json!({"interaction_id": 1, "response": "yes"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let seen = observed(&server, &rid).await;
    assert_eq!(seen["log"], "turn 1\nturn 2\n", "{seen}");
    assert_ne!(seen["uid"], first, "{seen}");
    assert_eq!(std::fs::metadata(&notes).unwrap().uid(), seen["uid"]);
}

#[tokio::test]
async fn invoke_programs_write_the_allowed_root_as_the_shared_uid() {
    let dirs = TestDirs::new();
    let cli = dirs.root.join("skills_cli");
    std::fs::create_dir_all(&cli).unwrap();
    std::fs::write(
        cli.join("note.py"),
        "import json, os, sys\nroot = os.environ['OPENSKILL_ALLOWED_ROOT']\n\
         open(os.path.join(root, 'note.txt'), 'a').write('x')\n\
         print(json.dumps({'uid': os.getuid(), 'size': os.path.getsize(os.path.join(root, 'note.txt'))}))\n",
    )
    .unwrap();
    let manifests = dirs.root.join("skills_manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(
        manifests.join("note.yaml"),
        "id: note\ntype: cli\nruntime: python\nentry: ./skills_cli/note.py\n",
    )
    .unwrap();
    // A file the operator left in the root before the start becomes the shared uid's too.
    let files = dirs.data.join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("note.txt"), "").unwrap();
    let server = server(dirs.clone(), &[("SKILL_RUNNER_RUN_UIDS", UIDS)]);
    for size in [1, 2] {
        let (code, body) = server
            .post_json("/v1/skills/note:invoke", json!({"input": {}}))
            .await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["data"], json!({"uid": 200000, "size": size}), "{body}");
    }
    assert_eq!(
        std::fs::metadata(files.join("note.txt")).unwrap().uid(),
        200_000
    );
}

/// Starts the service as it would be started, expecting it to refuse; returns its stderr.
fn refused(dirs: &TestDirs, uids: &str, wrapper: &[String]) -> String {
    let exe = env!("CARGO_BIN_EXE_skill-runner");
    // Bounded: a service that starts after all would otherwise hold the test forever.
    let mut argv: Vec<String> = vec!["timeout".into(), "60".into()];
    argv.extend_from_slice(wrapper);
    argv.push(exe.to_owned());
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env("SKILL_RUNNER_RUN_UIDS", uids)
        .env("HOME", &dirs.root)
        .env("PORT", "0")
        .env("SKILL_RUNNER_DATA_DIR", &dirs.data)
        .env("SKILL_RUNNER_SKILLS_DIR", &dirs.skills)
        .env("OPENSKILL_ALLOWED_ROOT", dirs.data.join("files"))
        .current_dir(&dirs.root)
        .output()
        .unwrap();
    assert!(!out.status.success(), "it started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_service_refuses_run_uids_it_cannot_honour() {
    // The data folder sits in a 0700 folder: turns under other uids could not reach it.
    let dirs = TestDirs::new();
    std::fs::set_permissions(&dirs.root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let why = refused(&dirs, UIDS, &[]);
    assert!(
        why.contains("does not let other users through") && why.contains("chmod o+x"),
        "{why}"
    );
    // Not root: no other uid to switch to.
    let dirs = TestDirs::new();
    std::fs::set_permissions(&dirs.root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let why = refused(
        &dirs,
        UIDS,
        &[
            "setpriv",
            "--reuid=200098",
            "--regid=200098",
            "--clear-groups",
        ]
        .map(String::from),
    );
    assert!(why.contains("only a service running as root"), "{why}");
    // A uid of the system's.
    let why = refused(&dirs, "33", &[]);
    assert!(
        why.contains("SKILL_RUNNER_RUN_UIDS") && why.contains("below 1000"),
        "{why}"
    );
}
