//! `SKILL.md` skills over HTTP: the index across roots with precedence, the three levels of
//! disclosure, the catalog block and validation (JSON and a zipped folder).

use skill_runner_test_support as common;

use std::path::Path;

use common::{TestDirs, TestServer, build_zip, skill_package};
use serde_json::{Value, json};

fn write_skill(root: &Path, rel: &str, front: &str, body: &str) {
    let dir = root.join(rel);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), format!("---\n{front}\n---\n{body}")).unwrap();
}

#[tokio::test]
async fn three_roots_disclose_skills_level_by_level() {
    let dirs = TestDirs::new();
    let (project, user, shared) = (
        dirs.root.join("project"),
        dirs.root.join("user"),
        dirs.root.join("shared"),
    );
    write_skill(
        &project,
        "pdf",
        "name: pdf\ndescription: Reads PDFs (project copy).\nallowed-tools: Read Bash(pdftotext:*)",
        "\n# PDF\n\nExtracts text from PDFs.\nUse it for reports.\n\n## Checklist\n- Open the file\n- Extract text\n\n## Notes\nSee reference.md.\n",
    );
    std::fs::write(project.join("pdf/reference.md"), "# Reference\nflags").unwrap();
    std::fs::create_dir_all(project.join("pdf/scripts")).unwrap();
    std::fs::write(project.join("pdf/scripts/run.sh"), "echo run").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", project.join("pdf/passwd")).unwrap();
    write_skill(
        &user,
        "pdf",
        "name: pdf\ndescription: Reads PDFs (user copy).",
        "\n# PDF\n",
    );
    write_skill(
        &user,
        "team/sheets",
        "name: sheets\ndescription: Edits <sheets> & tables.",
        "\n# Sheets\n",
    );
    write_skill(&shared, "broken", "name: broken", "\n# Broken\n");
    write_skill(
        &shared,
        "colon",
        "name: colon\ndescription: Use when: the YAML has a colon",
        "\n# Colon\n",
    );
    let roots = std::env::join_paths([&project, &user, &shared]).unwrap();
    let server = TestServer::start_with(
        dirs.clone(),
        &[("SKILL_RUNNER_SKILL_DOC_ROOTS", roots.to_str().unwrap())],
    );

    let (status, list) = server.get("/v1/skill-docs").await;
    assert_eq!(status, 200, "{list}");
    let names: Vec<&str> = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["colon", "pdf", "sheets"]);
    let pdf = &list["skills"][1];
    assert_eq!(pdf["description"], "Reads PDFs (project copy).");
    assert_eq!(
        pdf["location"],
        project.join("pdf/SKILL.md").display().to_string()
    );
    let problems = list["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["message"].as_str().unwrap().contains("shadowed")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(
            |p| p["location"].as_str().unwrap().ends_with("broken/SKILL.md")
                && p["message"].as_str().unwrap().contains("description")
        ),
        "{problems:?}"
    );
    assert_eq!(list["truncated"], false);
    assert_eq!(list["roots"][0], project.display().to_string());

    let resp = server
        .client
        .get(server.url("/v1/skill-docs:catalog"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let catalog = resp.text().await.unwrap();
    assert!(catalog.starts_with("<available_skills>\n"), "{catalog}");
    assert!(catalog.contains("<description>Edits &lt;sheets&gt; &amp; tables.</description>"));
    assert_eq!(catalog.matches("<skill>").count(), 3);

    let (status, detail) = server.get("/v1/skill-docs/pdf").await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(
        detail["summary"],
        "Extracts text from PDFs.\nUse it for reports."
    );
    assert_eq!(
        detail["checklist"],
        json!(["Open the file", "Extract text"])
    );
    assert_eq!(
        detail["allowed_tools"],
        json!(["Read", "Bash(pdftotext:*)"])
    );
    assert!(detail["body"].as_str().unwrap().starts_with("\n# PDF"));
    assert!(!detail["body"].as_str().unwrap().contains("allowed-tools"));
    assert_eq!(
        detail["base_dir"],
        project.join("pdf").display().to_string()
    );
    assert_eq!(
        detail["resources"],
        json!(["reference.md", "scripts/run.sh"])
    );
    let (_, colon) = server.get("/v1/skill-docs/colon").await;
    assert_eq!(colon["description"], "Use when: the YAML has a colon");
    assert!(!colon["warnings"].as_array().unwrap().is_empty());
    assert_eq!(server.get("/v1/skill-docs/nope").await.0, 404);

    let resp = server
        .client
        .get(server.url("/v1/skill-docs/pdf/files/scripts/run.sh"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
    assert_eq!(resp.text().await.unwrap(), "echo run");
    for (path, status) in [
        ("passwd", 400),
        ("..%2F..%2Fuser%2Fpdf%2FSKILL.md", 400),
        ("scripts/..%2F..%2Fsheets", 400),
        ("missing.md", 404),
    ] {
        let (got, body) = server
            .get(&format!("/v1/skill-docs/pdf/files/{path}"))
            .await;
        assert_eq!(got, status, "{path}: {body}");
    }
}

#[tokio::test]
async fn installed_skills_are_indexed_by_default_and_documents_validate() {
    let server = TestServer::with_skills(&[skill_package("greeter", "1.0.0")], &[]);
    let (_, list) = server.get("/v1/skill-docs").await;
    let greeter = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "greeter")
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        greeter["location"]
            .as_str()
            .unwrap()
            .ends_with("skills/greeter/SKILL.md")
    );

    let validate = |body: Value| server.post_json("/v1/skill-docs:validate", body);
    let (status, answer) = validate(json!({
        "skill_md": "---\nname: pdf-processing\ndescription: Reads PDFs.\nversion: 1.0\n---\n# PDF\n\nSummary.",
        "dir_name": "pdf-processing",
    }))
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["valid"], false);
    assert_eq!(answer["profile"], "strict");
    assert_eq!(
        answer["errors"],
        json!([{"field": "version", "message": "unexpected field in frontmatter: version"}])
    );
    assert_eq!(answer["document"]["summary"], "Summary.");
    let (_, answer) = validate(json!({
        "skill_md": "---\nname: pdf-processing\ndescription: Reads PDFs.\nversion: 1.0\n---\n",
        "profile": "lenient",
    }))
    .await;
    assert_eq!(answer["valid"], true);
    assert_eq!(answer["warnings"][0]["field"], "version");
    let (status, answer) = validate(json!({"skill_md": "x", "profile": "loose"})).await;
    assert_eq!(status, 400);
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("strict, lenient")
    );
    assert_eq!(validate(json!({"profile": "strict"})).await.0, 422);

    // A zipped folder: the folder's name is the one the skill's name must equal.
    let zip = build_zip(vec![
        (
            "other-name/SKILL.md".into(),
            b"---\nname: claude-pdf\ndescription: Reads PDFs.\n---\n# PDF\n".to_vec(),
        ),
        ("other-name/scripts/run.sh".into(), b"echo".to_vec()),
    ]);
    let form = |profile: &str| {
        reqwest::multipart::Form::new()
            .part(
                "file",
                reqwest::multipart::Part::bytes(zip.clone()).file_name("skill.zip"),
            )
            .text("profile", profile.to_owned())
    };
    let (status, answer) = server
        .post_form("/v1/skill-docs:validate", form("anthropic-upload"))
        .await;
    assert_eq!(status, 200, "{answer}");
    let messages: Vec<&str> = answer["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("'other-name'")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("reserved words")),
        "{messages:?}"
    );
    let empty = build_zip(vec![("README.md".into(), b"no skill".to_vec())]);
    let (status, _) = server
        .post_form(
            "/v1/skill-docs:validate",
            reqwest::multipart::Form::new().part(
                "file",
                reqwest::multipart::Part::bytes(empty).file_name("x.zip"),
            ),
        )
        .await;
    assert_eq!(status, 400);
}
