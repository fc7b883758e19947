//! `skill-runner validate <path>`: SKILL.md folders and files, packages (folder and zip) and
//! tool definitions, findings one per line, exit codes 0, 1 and 2.

use skill_runner_test_support as common;

use std::process::Command;

use common::skill_package;

fn validate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_skill-runner"))
        .arg("validate")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn skill_folders_packages_and_tool_definitions_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let bundled = concat!(env!("CARGO_MANIFEST_DIR"), "/skills/text-stats");
    let (code, out, _) = validate(&[bundled]);
    assert_eq!(
        (code, out.as_str()),
        (0, "valid: skill package 'text-stats' 1.0.0\n")
    );

    let doc = root.join("My_Skill");
    std::fs::create_dir_all(&doc).unwrap();
    std::fs::write(
        doc.join("SKILL.md"),
        "---\nname: My_Skill\ndescription: Does things.\nversion: 2\n---\n# My skill\n",
    )
    .unwrap();
    let (code, out, _) = validate(&[doc.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "error: version: unexpected field in frontmatter: version",
            "error: name: must use only lower-case letters a-z, digits and hyphens",
            "invalid: SKILL.md 'My_Skill' (strict) (2 errors)"
        ]
    );
    let file = doc.join("SKILL.md");
    let (code, out, _) = validate(&[file.to_str().unwrap(), "--profile", "lenient"]);
    assert_eq!(
        code, 1,
        "an uppercase name is refused by every profile: {out}"
    );
    std::fs::write(
        &file,
        "---\nname: my-skill\ndescription: Does things.\nversion: 2\n---\n# My skill\n",
    )
    .unwrap();
    let (code, out, _) = validate(&[file.to_str().unwrap(), "--profile", "lenient"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("warning: version: unexpected field"), "{out}");
    assert!(out.contains("warning: name: 'my-skill' must equal the folder name 'My_Skill'"));

    // Packages, zipped: one that installs, one the installer refuses.
    let good = root.join("good.zip");
    std::fs::write(&good, skill_package("zipped", "1.2.0").zip()).unwrap();
    let (code, out, _) = validate(&[good.to_str().unwrap()]);
    assert_eq!(
        (code, out.as_str()),
        (0, "valid: skill package 'zipped' 1.2.0\n")
    );
    let bad = root.join("bad.zip");
    std::fs::write(
        &bad,
        skill_package("zipped", "1.2.0")
            .runner(serde_json::json!({"version": null,
                "entrypoint": {"script": ["python3", "scripts/missing.py"]}}))
            .zip(),
    )
    .unwrap();
    let (code, out, _) = validate(&[bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    // Every problem, each on its own line, in one pass.
    assert!(
        out.starts_with("error: runner.json: 'version' is required"),
        "{out}"
    );
    assert!(
        out.contains("\nerror: runner.json: 'entrypoint.script' names 'scripts/missing.py'"),
        "{out}"
    );

    // Tool definitions, JSON and YAML.
    let def = root.join("browser_navigate.json");
    let description = format!(
        "Navigates to a URL. When you need to: (1) open a page.{}",
        " x".repeat(80)
    );
    std::fs::write(
        &def,
        serde_json::json!({
            "name": "browser_navigate", "description": description,
            "input_schema": {"type": "object", "properties": {"url": {"type": "string", "description": "URL"}},
                             "required": ["url", "tab"]}
        })
        .to_string(),
    )
    .unwrap();
    let (code, out, _) = validate(&[def.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("error: description: has 214 characters; at most 200"),
        "{out}"
    );
    assert!(
        out.contains("error: input_schema.required: names 'tab'"),
        "{out}"
    );
    let yaml = root.join("echo.yaml");
    std::fs::write(
        &yaml,
        "name: echo_twice\ndescription: 'Echoes twice. When you need to: (1) test.'\ninput_schema:\n  type: object\n  properties:\n    text: {type: string, description: The text.}\n  required: [text]\nrelated_tools:\n  - name: echo\n",
    )
    .unwrap();
    let (code, out, _) = validate(&[yaml.to_str().unwrap(), "--profile", "compat"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "valid: tool definition 'echo_twice' (compat)\n")
    );

    // Usage problems.
    let (code, _, err) = validate(&[root.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = validate(&[yaml.to_str().unwrap(), "--profile", "loose"]);
    assert_eq!(code, 2);
    assert!(err.contains("not strict or compat"), "{err}");
}

/// Zips of standard skills are judged as the installer judges them: one at the zip's root
/// under its own name, or each skill of a repository's archive, a finding naming its folder.
#[test]
fn zips_of_standard_skills_are_checked_as_the_installer_would() {
    let tmp = tempfile::tempdir().unwrap();
    let zip_at = |name: &str, bytes: Vec<u8>| {
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let root = zip_at(
        "root.zip",
        common::build_zip(
            common::standard_skill("notes", "Notes.")
                .files
                .into_iter()
                .collect(),
        ),
    );
    let (code, out, _) = validate(&[&root]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("valid: skill package 'notes' sha256-"),
        "{out}"
    );

    let mut entries = Vec::new();
    for skill in [
        common::standard_skill("alpha", "First."),
        common::standard_skill("Broken", "x"),
    ] {
        for (path, bytes) in &skill.files {
            entries.push((format!("repo/skills/{}/{path}", skill.top), bytes.clone()));
        }
    }
    let repository = zip_at("repository.zip", common::build_zip(entries));
    let (code, out, _) = validate(&[&repository]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("error: repo/skills/Broken: SKILL.md: name:")),
        "{out}"
    );
    assert!(
        out.ends_with("invalid: package of 2 skills (1 error)\n"),
        "{out}"
    );
}
