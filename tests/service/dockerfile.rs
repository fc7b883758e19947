//! The Dockerfile users build: `docker build .` with no argument builds from the official
//! bases and compiles the binary, whatever the test lane (`scripts/container-test.sh`) passes
//! to build without a registry.

/// The `ARG` defaults declared before the first `FROM`, and each stage's `FROM` line.
fn read() -> (Vec<(String, String)>, Vec<String>) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap();
    let mut args = Vec::new();
    let mut stages = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(from) = line.strip_prefix("FROM ") {
            stages.push(from.to_owned());
        } else if let Some(arg) = line.strip_prefix("ARG ")
            && stages.is_empty()
        {
            let (name, value) = arg.split_once('=').expect("a global ARG has a default");
            args.push((name.to_owned(), value.to_owned()));
        }
    }
    (args, stages)
}

#[test]
fn with_no_build_argument_the_image_builds_from_the_official_bases() {
    let (args, stages) = read();
    let default = |name: &str| {
        args.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no ARG {name} before the first FROM"))
    };
    assert_eq!(default("RUST_IMAGE"), "rust:1.95-slim-bookworm");
    assert_eq!(default("RUNTIME_IMAGE"), "node:20-bookworm-slim");
    assert_eq!(
        default("BINARY"),
        "build",
        "the binary is compiled by default"
    );
    assert_eq!(
        stages,
        [
            "${RUST_IMAGE} AS build",
            "scratch AS prebuilt",
            "${BINARY} AS binary",
            "${RUNTIME_IMAGE} AS runtime",
        ],
        "the last stage is the image, on the runtime base, with the binary of the stage BINARY names"
    );
}
