//! SIGKILL the server while it installs, restart it, and check nothing is half-done.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Package, TestDirs, TestServer, digest, digest_files, skill_package, tree};

/// Incompressible bytes, so extraction takes long enough to be interrupted.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn big_package(major: u64) -> Package {
    let mut p = skill_package("big", &format!("{major}.0.0"));
    for i in 0..200 {
        p = p.file(
            &format!("data/part-{i:03}.bin"),
            noise(major * 1000 + i, 100 * 1024),
        );
    }
    p
}

fn expected(p: &Package) -> BTreeMap<String, (usize, u64)> {
    digest_files(&p.files)
}

fn version(p: &Package) -> String {
    String::from_utf8(p.files["VERSION"].clone()).unwrap()
}

#[tokio::test]
async fn sigkill_during_install_leaves_old_or_new_never_a_mix() {
    let dirs = TestDirs::new();
    let mut live = big_package(1);
    {
        let server = TestServer::start_with(dirs.clone(), &[]);
        assert_eq!(
            server.install_and_wait(live.zip()).await["status"],
            "succeeded"
        );
    }

    let mut outcomes = Vec::new();
    for (round, delay_ms) in [0u64, 5, 15, 30, 60, 100, 200, 400].into_iter().enumerate() {
        let next = big_package(round as u64 + 2);
        let mut server = TestServer::start_with(dirs.clone(), &[]);
        let rid = server.install(next.zip()).await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        server.kill();

        let server = TestServer::start_with(dirs.clone(), &[]);
        let status = server.wait_install(&rid).await;
        let now_live = digest(&dirs.skills.join("big"));
        let old_version = version(&live);
        match status["status"].as_str().unwrap() {
            "succeeded" => {
                assert_eq!(
                    now_live,
                    expected(&next),
                    "round {round}: live must be the new version"
                );
                assert_eq!(
                    digest(&dirs.skills.join(".archive/big").join(&old_version)),
                    expected(&live),
                    "round {round}: the old version is archived whole"
                );
                live = next;
            }
            "failed" => {
                let error = status["error"].as_str().unwrap();
                assert!(error.contains("service restart"), "round {round}: {error}");
                assert_eq!(
                    now_live,
                    expected(&live),
                    "round {round}: live must be the old version"
                );
                assert!(!dirs.skills.join(".archive/big").join(&old_version).exists());
            }
            other => panic!("round {round}: unexpected status {other}"),
        }
        assert!(
            tree(&dirs.skills.join(".staging")).is_empty(),
            "round {round}: staging is cleared"
        );
        assert!(
            tree(&dirs.data.join("skill_installs")).is_empty(),
            "round {round}: uploads are cleared"
        );
        let (_, skill) = server.get("/v1/skills/big").await;
        assert_eq!(skill["health"], "healthy");
        outcomes.push((delay_ms, status["status"].as_str().unwrap().to_owned()));
    }
    eprintln!("kill delay → outcome: {outcomes:?}");
}
