//! Agent Skills (agentskills.io) folders shared by the tests: validation vectors, each a folder
//! whose `SKILL.md` is valid or breaks one rule of the standard (or several), held to the
//! standard's reference validator (`skills-ref`) and to ours.

use std::path::Path;

/// One folder to validate.
pub struct Vector {
    /// The folder's name (the skill's name must equal it).
    pub folder: String,
    /// The `SKILL.md`; `None`: the folder has none.
    pub skill_md: Option<String>,
    pub valid: bool,
    /// Fields our answer must name, one problem each (`"frontmatter"` for the document itself).
    pub broken: &'static [&'static str],
}

impl Vector {
    /// Writes the folder under `parent`; returns its path.
    pub fn write_under(&self, parent: &Path) -> std::path::PathBuf {
        let dir = parent.join(&self.folder);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(text) = &self.skill_md {
            std::fs::write(dir.join("SKILL.md"), text).unwrap();
        }
        dir
    }
}

fn doc(frontmatter: &str) -> String {
    format!("---\n{frontmatter}\n---\n# Use\n\nWhat to do, step by step.\n")
}

fn vector(folder: &str, skill_md: Option<String>, broken: &'static [&'static str]) -> Vector {
    Vector {
        folder: folder.to_owned(),
        skill_md,
        valid: broken.is_empty(),
        broken,
    }
}

/// Valid folders, then one per rule broken, then one breaking three.
pub fn validation_vectors() -> Vec<Vector> {
    let named = |name: &str, rest: &str| doc(&format!("name: {name}\n{rest}"));
    let said = "description: Fills in PDF forms. Use when the user gives a form to fill.";
    let long_name = format!("a{}", "-b".repeat(31) + "c");
    let too_long_name = format!("{long_name}d");
    vec![
        vector("valid-minimal", Some(named("valid-minimal", said)), &[]),
        vector(
            "valid-full",
            Some(named(
                "valid-full",
                &format!(
                    "{said}\nlicense: Apache-2.0\ncompatibility: Needs Python 3 and network \
                     access\nmetadata:\n  author: example\n  version: \"1.0\"\n\
                     allowed-tools: Bash(git:*) Read"
                ),
            )),
            &[],
        ),
        vector(
            "valid-crlf",
            Some(named("valid-crlf", said).replace('\n', "\r\n")),
            &[],
        ),
        vector(&long_name, Some(named(&long_name, said)), &[]),
        vector(
            "description-1024",
            Some(named(
                "description-1024",
                &format!("description: {}", "d".repeat(1024)),
            )),
            &[],
        ),
        vector(
            "compatibility-500",
            Some(named(
                "compatibility-500",
                &format!("{said}\ncompatibility: {}", "c".repeat(500)),
            )),
            &[],
        ),
        vector("a1-b2", Some(named("a1-b2", said)), &[]),
        vector(
            "folded-description",
            Some(named(
                "folded-description",
                "description: >\n  Reads spreadsheets\n  and writes them.",
            )),
            &[],
        ),
        // Shapes the reference does not check: accepted (ours warns).
        vector(
            "tools-as-a-list",
            Some(named(
                "tools-as-a-list",
                &format!("{said}\nallowed-tools:\n  - Read\n  - Bash"),
            )),
            &[],
        ),
        vector(
            "metadata-as-text",
            Some(named(
                "metadata-as-text",
                &format!("{said}\nmetadata: by example"),
            )),
            &[],
        ),
        vector(
            "license-as-a-list",
            Some(named(
                "license-as-a-list",
                &format!("{said}\nlicense:\n  - MIT\n  - Apache-2.0"),
            )),
            &[],
        ),
        vector("Bad-Upper", Some(named("Bad-Upper", said)), &["name"]),
        vector(
            "bad_underscore",
            Some(named("bad_underscore", said)),
            &["name"],
        ),
        vector("-lead", Some(named("-lead", said)), &["name"]),
        vector("trail-", Some(named("trail-", said)), &["name"]),
        vector(
            "double--hyphen",
            Some(named("double--hyphen", said)),
            &["name"],
        ),
        vector(&too_long_name, Some(named(&too_long_name, said)), &["name"]),
        vector(
            "not-the-folder",
            Some(named("another-name", said)),
            &["name"],
        ),
        vector("missing-name", Some(doc(said)), &["name"]),
        vector("empty-name", Some(named("\"\"", said)), &["name"]),
        vector(
            "missing-description",
            Some(named("missing-description", "license: MIT")),
            &["description"],
        ),
        vector(
            "blank-description",
            Some(named("blank-description", "description: \"  \"")),
            &["description"],
        ),
        vector(
            "description-1025",
            Some(named(
                "description-1025",
                &format!("description: {}", "d".repeat(1025)),
            )),
            &["description"],
        ),
        vector(
            "compatibility-501",
            Some(named(
                "compatibility-501",
                &format!("{said}\ncompatibility: {}", "c".repeat(501)),
            )),
            &["compatibility"],
        ),
        vector(
            "extra-key",
            Some(named("extra-key", &format!("{said}\nversion: 1.0"))),
            &["version"],
        ),
        vector(
            "no-frontmatter",
            Some("# A skill\n\nNo frontmatter at all.\n".to_owned()),
            &["frontmatter"],
        ),
        vector(
            "unclosed-frontmatter",
            Some(format!("---\nname: unclosed-frontmatter\n{said}\n# Use\n")),
            &["frontmatter"],
        ),
        vector(
            "invalid-yaml",
            Some(named("invalid-yaml", "description: Use when: PDFs")),
            &["frontmatter"],
        ),
        vector(
            "frontmatter-a-list",
            Some("---\n- name\n- description\n---\nbody\n".to_owned()),
            &["frontmatter"],
        ),
        vector(
            "three-problems",
            Some(named(
                "Three-Problems",
                &format!("description: {}\nversion: 2", "d".repeat(1025)),
            )),
            &["name", "description", "version"],
        ),
    ]
}
