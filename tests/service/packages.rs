//! Package installs through the HTTP API of the real binary.

use skill_runner_test_support as common;

use common::{TestServer, build_zip, skill_package, tree};
use futures::future::join_all;
use serde_json::{Value, json};

fn assert_failed(status: &Value, expected: &str) {
    assert_eq!(status["status"], "failed", "{status}");
    let error = status["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(expected),
        "error '{error}' should contain '{expected}'"
    );
}

#[tokio::test]
async fn install_update_and_refuse_downgrade() {
    let server = TestServer::start();
    let skills = server.dirs.skills.clone();

    let v1 = skill_package("demo", "1.0.0")
        .runner(json!({"unsupport_engine": ["iflow"]}))
        .file(".git/HEAD", "ref: refs/heads/main")
        .file(".gitignore", "target/")
        .file(".github/workflows/ci.yml", "on: push");
    let status = server.install_and_wait(v1.zip()).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["action"], "install");
    assert_eq!(status["skill_id"], "demo");
    assert_eq!(status["version"], "1.0.0");
    assert_eq!(status["error"], Value::Null);
    for field in ["created_at", "updated_at"] {
        assert!(status[field].as_str().unwrap().ends_with('Z'), "{status}");
    }
    assert!(!skills.join("demo/.git").exists(), ".git is removed");
    assert!(skills.join("demo/.gitignore").is_file(), ".gitignore stays");
    assert!(
        skills.join("demo/.github/workflows/ci.yml").is_file(),
        ".github stays"
    );

    let (code, list) = server.get("/v1/skills").await;
    assert_eq!(code, 200);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], "demo");
    assert_eq!(list[0]["health"], "healthy");
    assert_eq!(
        list[0]["effective_engines"],
        json!([
            "codex",
            "gemini",
            "claude",
            "opencode",
            "qwen",
            "kilo",
            "codebuddy"
        ])
    );
    assert_eq!(list[0]["unsupport_engine"], json!(["iflow"]));
    assert_eq!(
        list[0]["artifacts"],
        json!([{"role": "output", "pattern": "report.md", "required": false}])
    );
    let (code, one) = server.get("/v1/skills/demo").await;
    assert_eq!(code, 200);
    assert_eq!(one["version"], "1.0.0");
    let (code, missing) = server.get("/v1/skills/nope").await;
    assert_eq!((code, missing), (404, json!({"detail": "Skill not found"})));

    // A higher version updates and archives the old one.
    let v2 = skill_package("demo", "1.2.0");
    let status = server.install_and_wait(v2.zip()).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["action"], "update");
    assert_eq!(
        std::fs::read(skills.join("demo/VERSION")).unwrap(),
        b"1.2.0"
    );
    assert_eq!(
        std::fs::read(skills.join(".archive/demo/1.0.0/VERSION")).unwrap(),
        b"1.0.0"
    );
    assert!(skills.join(".archive/demo/1.0.0/.gitignore").is_file());
    let (_, one) = server.get("/v1/skills/demo").await;
    assert_eq!(one["version"], "1.2.0");

    // Same and lower versions fail, naming both, and change nothing; build metadata does not
    // make a version higher.
    let before = common::digest(&skills);
    for version in ["1.2.0", "1.1.9", "1.2.0+b2"] {
        let status = server
            .install_and_wait(skill_package("demo", version).zip())
            .await;
        assert_failed(
            &status,
            &format!("version {version} of 'demo' is not higher than the installed version 1.2.0"),
        );
    }
    assert_eq!(
        common::digest(&skills),
        before,
        "a refused update leaves the skills dir as it was"
    );
    assert!(!skills.join(".staging").exists() || tree(&skills.join(".staging")).is_empty());
    assert!(
        tree(&server.dirs.data.join("skill_installs")).is_empty(),
        "no uploads are kept"
    );
}

#[tokio::test]
async fn existing_archive_path_fails_the_update_and_keeps_the_live_skill() {
    let server = TestServer::start();
    let skills = server.dirs.skills.clone();
    assert_eq!(
        server
            .install_and_wait(skill_package("demo", "1.0.0").zip())
            .await["status"],
        "succeeded"
    );
    std::fs::create_dir_all(skills.join(".archive/demo/1.0.0")).unwrap();
    let status = server
        .install_and_wait(skill_package("demo", "2.0.0").zip())
        .await;
    assert_failed(&status, "archive path .archive/demo/1.0.0 already exists");
    assert_eq!(
        std::fs::read(skills.join("demo/VERSION")).unwrap(),
        b"1.0.0"
    );
}

#[tokio::test]
async fn invalid_live_folder_is_quarantined_and_install_proceeds() {
    let server = TestServer::start();
    let skills = server.dirs.skills.clone();
    std::fs::create_dir_all(skills.join("demo")).unwrap();
    std::fs::write(skills.join("demo/notes.txt"), "not a skill").unwrap();
    // A broken folder shows up degraded and does not hide a healthy one.
    assert_eq!(
        server
            .install_and_wait(skill_package("other", "0.1.0").zip())
            .await["status"],
        "succeeded"
    );
    let (_, list) = server.get("/v1/skills").await;
    let list = list.as_array().unwrap().clone();
    assert_eq!(list.len(), 2, "{list:?}");
    let demo = list.iter().find(|s| s["id"] == "demo").unwrap();
    assert_eq!(demo["health"], "degraded");
    assert_eq!(demo["health_error"], "missing required file SKILL.md");
    assert_eq!(
        list.iter().find(|s| s["id"] == "other").unwrap()["health"],
        "healthy"
    );

    let status = server
        .install_and_wait(skill_package("demo", "1.0.0").zip())
        .await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["action"], "install");
    let invalid: Vec<_> = std::fs::read_dir(skills.join(".invalid"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(invalid.len(), 1);
    assert!(
        invalid[0].starts_with("demo-") && invalid[0].ends_with('Z'),
        "{invalid:?}"
    );
    assert!(
        skills
            .join(".invalid")
            .join(&invalid[0])
            .join("notes.txt")
            .is_file()
    );
    let (_, demo) = server.get("/v1/skills/demo").await;
    assert_eq!(demo["health"], "healthy");
}

/// Each validation rule has a package that breaks it; the error names the rule.
#[tokio::test]
async fn every_validation_rule_fails_with_a_named_error() {
    let server = TestServer::start();
    let ok = || skill_package("rules", "1.0.0");
    let zip_slip = build_zip(vec![
        ("rules/SKILL.md".into(), b"---\nname: rules\n---\n".to_vec()),
        ("rules/../x".into(), b"evil".to_vec()),
    ]);
    let absolute = build_zip(vec![("/rules/SKILL.md".into(), b"x".to_vec())]);
    let symlink = {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (p, b) in &ok().files {
            use std::io::Write;
            w.start_file(
                format!("rules/{p}"),
                zip::write::SimpleFileOptions::default(),
            )
            .unwrap();
            w.write_all(b).unwrap();
        }
        w.add_symlink(
            "rules/link",
            "/etc/passwd",
            zip::write::SimpleFileOptions::default(),
        )
        .unwrap();
        w.finish().unwrap().into_inner()
    };
    let bomb = ok().file("zeros.bin", vec![0u8; 16 * 1024 * 1024]).zip();
    let two_tops = {
        let mut entries: Vec<(String, Vec<u8>)> = ok()
            .files
            .into_iter()
            .map(|(k, v)| (format!("rules/{k}"), v))
            .collect();
        entries.push(("second/README.md".into(), b"x".to_vec()));
        build_zip(entries)
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("two top-level folders", two_tops, "exactly one top-level folder; found 2: rules, second"),
        ("missing SKILL.md", ok().without("SKILL.md").zip(), "missing required file SKILL.md"),
        (
            "identity mismatch",
            ok().runner(json!({"id": "other"})).zip(),
            "identity mismatch: folder 'rules', SKILL.md name 'rules' and runner.json id 'other'",
        ),
        (
            "frontmatter mismatch",
            ok().file("SKILL.md", "---\nname: wrong\n---\n").zip(),
            "identity mismatch",
        ),
        (
            "overlapping engines",
            ok().runner(json!({"engines": ["codex", "gemini"], "unsupport_engine": ["gemini"]})).zip(),
            "'engines' and 'unsupport_engine' overlap: gemini",
        ),
        (
            "empty effective engines",
            ok().runner(json!({"unsupport_engine": ["codex", "gemini", "iflow", "claude", "opencode", "qwen", "kilo", "codebuddy"]}))
                .zip(),
            "effective engines are empty",
        ),
        ("missing execution_modes", ok().runner(json!({"execution_modes": null})).zip(), "'execution_modes' must be a non-empty array"),
        ("bad execution_modes", ok().runner(json!({"execution_modes": ["auto", "batch"]})).zip(), "\"batch\" is not a mode"),
        (
            "bad x-input-source",
            ok().file("assets/input.schema.json", r#"{"type":"object","properties":{"a":{"type":"string","x-input-source":"url"}}}"#).zip(),
            "property 'a' has x-input-source \"url\"",
        ),
        (
            "bad x-type",
            ok().file("assets/output.schema.json", r#"{"type":"object","properties":{"a":{"type":"string","x-type":"blob"}}}"#).zip(),
            "property 'a' has x-type \"blob\"",
        ),
        (
            "remote $ref",
            ok().file("assets/parameter.schema.json", r#"{"type":"object","properties":{"a":{"$ref":"https://schemas.example.com/a.json"}}}"#).zip(),
            "refers to 'https://schemas.example.com/a.json' outside itself",
        ),
        ("unparsable version", ok().runner(json!({"version": "one"})).zip(), "version 'one' is not a valid semantic version"),
        ("missing version", ok().runner(json!({"version": null})).zip(), "'version' is required"),
        (
            "hidden skill id",
            skill_package(".archive", "1.0.0").zip(),
            "id '.archive' is not a valid skill id",
        ),
        (
            "id outside the one rule",
            skill_package("Demo.Skill", "1.0.0").zip(),
            "id 'Demo.Skill' is not a valid skill id (1-64 of a-z, 0-9, '_' and '-'",
        ),
        ("zip-slip", zip_slip, "escapes the package with '..' (zip-slip)"),
        ("absolute path", absolute, "has an absolute path"),
        ("symlink entry", symlink, "symlink entry 'rules/link' is not allowed"),
        ("zip bomb", bomb, "zip bomb"),
        ("not a zip", b"PK but not really".to_vec(), "not a valid zip file"),
    ];
    let mut rids = Vec::new();
    for (name, bytes, _) in &cases {
        rids.push((name, server.install(bytes.clone()).await));
    }
    for ((name, rid), (_, _, expected)) in rids.iter().zip(&cases) {
        let status = server.wait_install(rid).await;
        assert_eq!(status["status"], "failed", "{name}: {status}");
        let error = status["error"].as_str().unwrap();
        assert!(
            error.contains(expected),
            "{name}: '{error}' should contain '{expected}'"
        );
    }
    assert!(
        tree(&server.dirs.skills).is_empty(),
        "failed installs leave no trace"
    );
    assert!(tree(&server.dirs.data.join("skill_installs")).is_empty());
    let (_, list) = server.get("/v1/skills").await;
    assert_eq!(list, json!([]));
}

#[tokio::test]
async fn upload_errors() {
    let server = TestServer::start();
    let (code, body) = server.upload(Vec::new()).await;
    assert_eq!(code, 400);
    assert!(
        body["detail"].as_str().unwrap().starts_with("Empty upload"),
        "{body}"
    );

    let form = reqwest::multipart::Form::new().text("package", "x");
    let (code, body) = server.post_install_form(form).await;
    assert_eq!(code, 422);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "file"]));
    assert!(
        body["detail"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("'file' is missing")
    );

    let resp = server
        .client
        .post(server.url("/v1/skill-packages/install"))
        .json(&json!({"file": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("multipart/form-data")
    );

    let (code, body) = server.get("/v1/skill-packages/0000-unknown").await;
    assert_eq!(
        (code, body),
        (404, json!({"detail": "Install request not found"}))
    );
    assert!(
        tree(&server.dirs.data.join("skill_installs")).is_empty(),
        "refused uploads keep nothing"
    );
}

#[tokio::test]
async fn oversized_upload_is_refused_with_413() {
    let server = TestServer::start_with(
        common::TestDirs::new(),
        &[("SKILL_RUNNER_PACKAGE_MAX_BYTES", "1024")],
    );
    let big = skill_package("big", "1.0.0").file("blob", vec![7u8; 4096]);
    let mut bytes = big.zip();
    bytes.extend(vec![0u8; 2048]);
    let (code, body) = server.upload(bytes).await;
    assert_eq!(code, 413, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("limit of 1024 bytes")
    );
    assert!(tree(&server.dirs.data.join("skill_installs")).is_empty());
}

#[tokio::test]
async fn twenty_concurrent_distinct_installs_all_succeed() {
    let server = TestServer::start();
    let uploads = (0..20).map(|i| {
        let bytes = skill_package(&format!("skill-{i:02}"), "1.0.0").zip();
        let server = &server;
        async move { server.install_and_wait(bytes).await }
    });
    let results = join_all(uploads).await;
    for r in &results {
        assert_eq!(r["status"], "succeeded", "{r}");
        assert_eq!(r["action"], "install");
    }
    let (_, list) = server.get("/v1/skills").await;
    let ids: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        (0..20).map(|i| format!("skill-{i:02}")).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn concurrent_installs_of_one_id_have_one_winner_per_version() {
    let server = TestServer::start();
    let skills = server.dirs.skills.clone();
    // Four uploads each of three versions, all at once.
    let versions = ["1.0.0", "2.0.0", "3.0.0"];
    let uploads = versions
        .iter()
        .flat_map(|v| std::iter::repeat_n(*v, 4))
        .map(|v| {
            let bytes = skill_package("race", v);
            let server = &server;
            async move { (v, server.install_and_wait(bytes.zip()).await) }
        });
    let results = join_all(uploads).await;
    let winners: Vec<&str> = results
        .iter()
        .filter(|(_, r)| r["status"] == "succeeded")
        .map(|(v, _)| *v)
        .collect();
    for (v, r) in &results {
        if r["status"] == "failed" {
            assert!(
                r["error"]
                    .as_str()
                    .unwrap()
                    .contains("is not higher than the installed version"),
                "{v}: {r}"
            );
        }
    }
    let mut unique = winners.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        winners.len(),
        unique.len(),
        "at most one winner per version: {winners:?}"
    );
    assert_eq!(
        winners.iter().filter(|v| **v == "3.0.0").count(),
        1,
        "the highest version always wins once: {winners:?}"
    );
    // The live version is the highest winner; every other winner is archived exactly once.
    let live = String::from_utf8(std::fs::read(skills.join("race/VERSION")).unwrap()).unwrap();
    let mut sorted = winners.clone();
    sorted.sort();
    assert_eq!(
        Some(&live.as_str()),
        sorted.last(),
        "live is the last winner"
    );
    let archived: Vec<String> = match std::fs::read_dir(skills.join(".archive/race")) {
        Ok(d) => {
            let mut a: Vec<String> = d
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            a.sort();
            a
        }
        Err(_) => Vec::new(),
    };
    let expected_archive: Vec<String> = sorted[..sorted.len() - 1]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(archived, expected_archive);
    for v in &archived {
        assert_eq!(
            std::fs::read(skills.join(".archive/race").join(v).join("VERSION")).unwrap(),
            v.as_bytes()
        );
    }
}

/// As the reference (since 7c30f86 and v0.7): a `runner.json` without `schemas` takes each from
/// `assets/<role>.schema.json`, and one without input and parameter schemas takes any; the
/// job of such a skill is created and runs.
#[tokio::test]
async fn a_runner_json_without_schemas_uses_the_assets_files() {
    let server = TestServer::start();
    let package = common::probe_skill("fallback", Some(true)).runner(json!({"schemas": null}));
    let status = server.install_and_wait(package.zip()).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, skill) = server.get("/v1/skills/fallback").await;
    assert_eq!(skill["health"], "healthy", "{skill}");
    assert_eq!(skill["schemas"]["input"], "assets/input.schema.json");
    let rid = server
        .create_job(
            json!({"skill_id": "fallback", "input": {"text": "hi"}, "parameter": {"mode": "ok"}}),
        )
        .await;
    server
        .upload_inputs(&rid, vec![("doc", b"a document".as_slice())])
        .await;
    assert_eq!(server.wait_job(&rid).await["status"], "succeeded");

    // Without input and parameter schemas at all: any input and parameter, and no upload.
    let bare = common::probe_skill("bare", Some(true))
        .runner(json!({"schemas": null}))
        .without("assets/input.schema.json")
        .without("assets/parameter.schema.json");
    let status = server.install_and_wait(bare.zip()).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (code, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "bare", "input": {"anything": 1}, "parameter": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["status"], "queued", "{created}");
}
