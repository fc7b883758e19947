//! Agent Skills standard folders (a `SKILL.md` without `runner.json`) installed through the
//! HTTP API of the real binary: one at a time, versioned, and many from a repository's zip.

use skill_runner_test_support as common;

use std::os::unix::fs::PermissionsExt as _;

use common::{TestServer, build_zip, standard_skill};
use serde_json::{Value, json};

fn listed(list: &Value, id: &str) -> Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} is not listed: {list}"))
}

#[tokio::test]
async fn a_standard_skill_installs_and_lists_as_an_agent_skill() {
    let server = TestServer::start();
    let package = standard_skill("pdf-report", "Writes PDF-like reports.");
    let status = server.install_and_wait(package.zip()).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["action"], "install");
    assert_eq!(status["skill_id"], "pdf-report");
    assert!(
        status.get("skills").is_none(),
        "one skill, no report: {status}"
    );
    let version = status["version"].as_str().unwrap();
    assert!(version.starts_with("sha256-"), "{version}");

    let (_, list) = server.get("/v1/skills").await;
    let skill = listed(&list, "pdf-report");
    assert_eq!(skill["format"], "agent-skill");
    assert_eq!(skill["health"], "healthy");
    assert_eq!(skill["description"], "Writes PDF-like reports.");
    assert_eq!(skill["license"], "MIT");
    assert_eq!(skill["files"], json!(["SKILL.md", "scripts/make.sh"]));
    assert_eq!(skill["schemas"], Value::Null);
    assert_eq!(skill["version"], version);
    assert_eq!(skill["execution_modes"], json!(["auto"]));

    // The folder as it came: no runner.json added, the script still executable.
    let dir = server.dirs.skills.join("pdf-report");
    assert_eq!(
        common::tree(&dir).into_keys().collect::<Vec<_>>(),
        ["SKILL.md", "scripts/make.sh"]
    );
    let mode = std::fs::metadata(dir.join("scripts/make.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);

    // A zip holding the files at its root installs under the skill's name.
    let root = build_zip(
        standard_skill("at-root", "Sits at the zip's root.")
            .files
            .into_iter()
            .collect(),
    );
    let status = server.install_and_wait(root).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["skill_id"], "at-root");
    assert!(server.dirs.skills.join("at-root/SKILL.md").is_file());
}

#[tokio::test]
async fn standard_versions_come_from_metadata_or_the_contents() {
    let server = TestServer::start();
    let versioned = |version: &str, body: &str| {
        standard_skill("notes", "Takes notes.").file(
            "SKILL.md",
            format!(
                "---\nname: notes\ndescription: Takes notes.\nmetadata:\n  version: \"{version}\"\n---\n{body}\n"
            ),
        )
    };
    let first = server.install_and_wait(versioned("1.2", "one").zip()).await;
    assert_eq!(
        (first["status"].as_str(), first["version"].as_str()),
        (Some("succeeded"), Some("1.2"))
    );
    let again = server.install_and_wait(versioned("1.2", "one").zip()).await;
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(again["action"], "unchanged");
    let same_version = server.install_and_wait(versioned("1.2", "two").zip()).await;
    assert_eq!(same_version["status"], "failed");
    assert!(
        same_version["error"]
            .as_str()
            .unwrap()
            .contains("not higher than the installed version 1.2"),
        "{same_version}"
    );
    let higher = server
        .install_and_wait(versioned("1.3.0", "two").zip())
        .await;
    assert_eq!(higher["action"], "update", "{higher}");
    assert!(
        server
            .dirs
            .skills
            .join(".archive/notes/1.2/SKILL.md")
            .is_file()
    );

    // Without a declared version, a changed skill replaces the old one, archived by hash.
    let plain = standard_skill("plain", "Plain.");
    let first = server.install_and_wait(plain.zip()).await;
    let old = first["version"].as_str().unwrap().to_owned();
    let same = server.install_and_wait(plain.zip()).await;
    assert_eq!(
        (same["action"].as_str(), same["version"].as_str()),
        (Some("unchanged"), Some(old.as_str()))
    );
    let changed = server
        .install_and_wait(plain.file("scripts/make.sh", "echo changed\n").zip())
        .await;
    assert_eq!(changed["action"], "update", "{changed}");
    assert_ne!(changed["version"], old);
    assert!(
        server
            .dirs
            .skills
            .join(".archive/plain")
            .join(&old)
            .join("SKILL.md")
            .is_file()
    );
    let (_, list) = server.get("/v1/skills").await;
    assert_eq!(listed(&list, "plain")["version"], changed["version"]);
}

#[tokio::test]
async fn every_problem_of_a_standard_skill_is_named_in_one_answer() {
    let server = TestServer::start();
    let broken = standard_skill("Bad-Name", "x").file(
        "SKILL.md",
        format!(
            "---\nname: Bad-Name\ndescription: {}\nversion: 1.0\n---\n",
            "d".repeat(1025)
        ),
    );
    let status = server.install_and_wait(broken.zip()).await;
    assert_eq!(status["status"], "failed");
    let error = status["error"].as_str().unwrap();
    assert_eq!(error.lines().count(), 3, "{error}");
    for field in ["name", "description", "version"] {
        assert!(error.contains(field), "{field}: {error}");
    }
    let unlike = standard_skill("folder-name", "x")
        .file("SKILL.md", "---\nname: other-name\ndescription: d\n---\n");
    let status = server.install_and_wait(unlike.zip()).await;
    assert_eq!(status["status"], "failed");
    assert!(
        status["error"].as_str().unwrap().contains("name"),
        "{status}"
    );
    assert!(
        common::tree(&server.dirs.skills).is_empty(),
        "nothing installed"
    );
}

/// `skills-main/skills/<name>/` as GitHub serves a repository's archive.
fn repository_zip(skills: &[common::Package]) -> Vec<u8> {
    let mut entries = vec![("skills-main/README.md".to_owned(), b"# Skills\n".to_vec())];
    for skill in skills {
        for (path, bytes) in &skill.files {
            entries.push((
                format!("skills-main/skills/{}/{path}", skill.top),
                bytes.clone(),
            ));
        }
    }
    build_zip(entries)
}

#[tokio::test]
async fn a_repository_zip_of_five_skills_installs_all_five() {
    let server = TestServer::start();
    let names = ["alpha", "beta", "gamma", "delta", "epsilon"];
    let skills: Vec<common::Package> = names
        .iter()
        .map(|name| standard_skill(name, &format!("The {name} skill.")))
        .collect();
    let status = server.install_and_wait(repository_zip(&skills)).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let report = status["skills"].as_array().unwrap();
    assert_eq!(report.len(), 5, "{status}");
    assert!(
        report
            .iter()
            .all(|e| e["status"] == "succeeded" && e["action"] == "install"),
        "{status}"
    );
    assert_eq!(
        (&status["skill_id"], &status["version"], &status["action"]),
        (&Value::Null, &Value::Null, &Value::Null)
    );
    let (_, list) = server.get("/v1/skills").await;
    for name in names {
        assert_eq!(listed(&list, name)["health"], "healthy");
    }
}

#[tokio::test]
async fn a_repository_zip_installs_each_skill_and_reports_the_broken_one() {
    let server = TestServer::start();
    let mut skills: Vec<common::Package> = ["alpha", "beta", "gamma", "delta"]
        .iter()
        .map(|name| standard_skill(name, &format!("The {name} skill.")))
        .collect();
    skills.push(
        standard_skill("broken", "x").file("SKILL.md", "---\nname: Broken\ndescription: d\n---\n"),
    );
    let zip = repository_zip(&skills);
    let status = server.install_and_wait(zip.clone()).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let report = status["skills"].as_array().unwrap();
    assert_eq!(report.len(), 5, "{status}");
    for entry in report {
        let path = entry["path"].as_str().unwrap();
        if path.ends_with("/broken") {
            assert_eq!(entry["status"], "failed", "{entry}");
            assert!(entry["error"].as_str().unwrap().contains("name"), "{entry}");
        } else {
            assert_eq!(entry["status"], "succeeded", "{entry}");
            assert_eq!(entry["action"], "install");
            assert_eq!(entry["format"], "agent-skill");
        }
    }
    let (_, list) = server.get("/v1/skills").await;
    for name in ["alpha", "beta", "gamma", "delta"] {
        assert_eq!(listed(&list, name)["format"], "agent-skill");
    }
    assert!(!server.dirs.skills.join("broken").exists());

    // The same archive again: the four are unchanged, the broken one fails again.
    let again = server.install_and_wait(zip).await;
    let actions: Vec<&str> = again["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["action"]
                .as_str()
                .unwrap_or(e["status"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        actions,
        ["unchanged", "unchanged", "failed", "unchanged", "unchanged"],
        "{again}"
    );

    // Only broken skills: the request fails, naming each.
    let none = server.install_and_wait(repository_zip(&skills[4..])).await;
    assert_eq!(none["status"], "failed");
    assert!(
        none["error"]
            .as_str()
            .unwrap()
            .contains("none of the 1 skills"),
        "{none}"
    );
}
