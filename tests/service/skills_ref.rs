//! Our SKILL.md validator held to the Agent Skills standard's reference validator
//! (`skills-ref` from PyPI, pinned by scripts/install-python-tools.sh): on every shared vector
//! (valid folders and one per rule broken) both give the same verdict, and ours names every
//! problem.

use skill_runner_test_support as common;

use std::process::Command;

use common::agent_skills::validation_vectors;

#[test]
fn our_verdicts_agree_with_skills_ref_on_every_vector() {
    let Some(reference) =
        common::python_tools::program("skills-ref", "SKILL_RUNNER_SKILLS_REF_VENV", "agentskills")
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let vectors = validation_vectors();
    assert!(vectors.len() >= 20);
    for vector in &vectors {
        // Absolute paths: a folder named `-lead` must not read as an option.
        let dir = vector.write_under(root.path());
        let theirs = Command::new(&reference)
            .args(["validate"])
            .arg(&dir)
            .output()
            .unwrap();
        let ours = Command::new(common::bin("skill-runner"))
            .arg("validate")
            .arg(&dir)
            .output()
            .unwrap();
        let (their_text, our_text) = (
            String::from_utf8_lossy(&theirs.stderr).into_owned(),
            String::from_utf8_lossy(&ours.stdout).into_owned(),
        );
        let folder = &vector.folder;
        assert_eq!(
            theirs.status.success(),
            vector.valid,
            "skills-ref on {folder}: {their_text}"
        );
        assert_eq!(
            ours.status.success(),
            vector.valid,
            "ours on {folder}: {our_text}\nskills-ref: {their_text}"
        );
        if vector.valid {
            continue;
        }
        for field in vector.broken {
            assert!(
                our_text
                    .lines()
                    .any(|l| l.starts_with("error: ") && l.contains(field)),
                "{folder}: no problem of '{field}' in\n{our_text}"
            );
        }
        let their_problems = their_text.lines().filter(|l| l.starts_with("  - ")).count();
        let our_problems = our_text
            .lines()
            .filter(|l| l.starts_with("error: "))
            .count();
        assert!(
            our_problems >= their_problems.min(vector.broken.len()),
            "{folder}: ours lists {our_problems}, skills-ref {their_problems}\n{our_text}\n{their_text}"
        );
    }
}

/// The installer judges a standard skill as `agentskills validate` does: each vector zipped
/// as a folder installs exactly when the reference calls it valid, and a refusal names every
/// broken field.
#[tokio::test]
async fn the_installer_and_skills_ref_agree_on_every_vector() {
    let Some(reference) =
        common::python_tools::program("skills-ref", "SKILL_RUNNER_SKILLS_REF_VENV", "agentskills")
    else {
        return;
    };
    let server = common::TestServer::start();
    let root = tempfile::tempdir().unwrap();
    let vectors = validation_vectors();
    let mut rids = Vec::new();
    for vector in &vectors {
        let mut entries = vec![(format!("{}/README.md", vector.folder), b"x".to_vec())];
        if let Some(text) = &vector.skill_md {
            entries.push((
                format!("{}/SKILL.md", vector.folder),
                text.clone().into_bytes(),
            ));
        }
        rids.push(server.install(common::build_zip(entries)).await);
    }
    for (vector, rid) in vectors.iter().zip(rids) {
        let status = server.wait_install(&rid).await;
        let dir = vector.write_under(root.path());
        let theirs = Command::new(&reference)
            .arg("validate")
            .arg(&dir)
            .output()
            .unwrap();
        let folder = &vector.folder;
        assert_eq!(
            status["status"] == "succeeded",
            theirs.status.success(),
            "{folder}: ours {status}, skills-ref {}",
            String::from_utf8_lossy(&theirs.stderr)
        );
        let error = status["error"].as_str().unwrap_or_default();
        for field in vector.broken {
            assert!(
                error.contains(field),
                "{folder}: '{field}' not named in {error}"
            );
        }
    }
}
