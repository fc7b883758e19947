//! One `SKILL.md`: its frontmatter (the Agent Skills fields `name`, `description`, `license`,
//! `compatibility`, `metadata`, `allowed-tools`), and from its body the title, summary and
//! checklist of the openagentic SDK's simple parser — checked under a validation profile.
//!
//! - Frontmatter only when line 1 is exactly `---` and a later line closes it; otherwise the whole
//!   file is the body. It is read as YAML; when that fails (an unquoted colon in a value, as in
//!   `description: Use when: PDFs`) it is read again line by line, `key: value` split at the first
//!   colon, values trimmed and unquoted, empty values dropped — an error under `strict`, a warning
//!   under `lenient`.
//! - Title: the first `# ` line. Summary: the first paragraph after the title (or of the body
//!   when there is none), its lines trimmed and joined by `\n`, ending at a blank line or a
//!   heading. Checklist: the `-`/`*` bullets after the first `## Checklist` line (any case) up to
//!   the next heading. The name is the frontmatter's, else the title, else the folder's; the
//!   description comes from the frontmatter only.
//!
//! Profiles: `strict` is the Agent Skills specification (and its `skills-ref` validator): name
//! 1–64 of `a-z`, `0-9` and single inner hyphens, equal to the folder name; description 1–1024;
//! compatibility ≤ 500; no other top-level fields (a `license` that is not a string, a `metadata`
//! that is not a string map or an `allowed-tools` list is a warning, as the standard's reference
//! validator does not check them). `lenient` is the client
//! guide: the same findings are warnings, a name may use any lower-case letters, and only a
//! missing description (or no readable frontmatter) is an error. `anthropic-upload` adds the
//! upload rules of the Anthropic platform (no `anthropic`/`claude` in the name, no XML tags).
//! Names are compared after NFKC normalisation.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_yaml_ng::Value as Yaml;
use unicode_normalization::UnicodeNormalization;

pub use crate::finding::Finding;

/// How strictly a document is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    Strict,
    Lenient,
    AnthropicUpload,
}

impl Profile {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "strict" => Some(Self::Strict),
            "lenient" => Some(Self::Lenient),
            "anthropic-upload" => Some(Self::AnthropicUpload),
            _ => None,
        }
    }

    /// The profiles by name, for messages.
    pub const NAMES: &str = "strict, lenient, anthropic-upload";
}

/// What a `SKILL.md` says.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Document {
    pub name: String,
    pub description: String,
    pub title: Option<String>,
    pub summary: String,
    pub checklist: Vec<String>,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub allowed_tools: Vec<String>,
    /// The file without its frontmatter.
    pub body: String,
}

/// A document and what its profile found wrong with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checked {
    pub document: Document,
    pub errors: Vec<Finding>,
    pub warnings: Vec<Finding>,
    /// Whether the file has a frontmatter block.
    #[serde(skip)]
    pub has_frontmatter: bool,
    /// Why the frontmatter is not YAML, when it is not.
    #[serde(skip)]
    pub yaml_error: Option<String>,
    /// The frontmatter's own `name`.
    #[serde(skip)]
    pub frontmatter_name: Option<String>,
}

impl Checked {
    pub fn valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The top-level fields of the specification.
const KNOWN_FIELDS: [&str; 6] = [
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
];

const MAX_NAME: usize = 64;
const MAX_DESCRIPTION: usize = 1024;
const MAX_COMPATIBILITY: usize = 500;

/// Reads `text` (a `SKILL.md` in folder `dir_name`, when known) and judges it by `profile`.
pub fn check(text: &str, dir_name: Option<&str>, profile: Profile) -> Checked {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut report = Report {
        profile,
        errors: Vec::new(),
        warnings: Vec::new(),
        yaml_error: None,
    };
    let (frontmatter, body) = split(text);
    let fields = match frontmatter {
        Some(yaml) => read_fields(yaml, &mut report),
        None => {
            report.flag(
                Severity::Error,
                "",
                "SKILL.md must start with a '---' frontmatter block",
            );
            BTreeMap::new()
        }
    };
    let mut document = Document {
        body: body.to_owned(),
        ..Document::default()
    };
    read_body(body, &mut document);
    for key in fields.keys() {
        if !KNOWN_FIELDS.contains(&key.as_str()) {
            report.flag(
                Severity::Strict,
                key,
                format!("unexpected field in frontmatter: {key}"),
            );
        }
    }
    let name = scalar(&fields, "name", Severity::Error, &mut report);
    document.description =
        scalar(&fields, "description", Severity::Error, &mut report).unwrap_or_default();
    // The standard's reference validator checks neither `license`, `metadata` nor
    // `allowed-tools`: a skill it accepts is not refused for their shape here.
    document.license = scalar(&fields, "license", Severity::Warning, &mut report);
    document.compatibility = scalar(&fields, "compatibility", Severity::Error, &mut report);
    document.metadata = metadata(&fields, &mut report);
    document.allowed_tools = allowed_tools(&fields, &mut report);
    document.name = match (&name, &document.title, dir_name) {
        (Some(name), ..) => name.nfkc().collect(),
        (None, Some(title), _) => title.clone(),
        (None, None, Some(dir)) => dir.to_owned(),
        (None, None, None) => String::new(),
    };
    check_name(name.as_deref(), dir_name, &mut report);
    check_description(&document.description, &mut report);
    if let Some(compatibility) = &document.compatibility
        && compatibility.chars().count() > MAX_COMPATIBILITY
    {
        report.flag(
            Severity::Strict,
            "compatibility",
            format!("must be at most {MAX_COMPATIBILITY} characters"),
        );
    }
    Checked {
        has_frontmatter: frontmatter.is_some(),
        yaml_error: report.yaml_error,
        frontmatter_name: name,
        document,
        errors: report.errors,
        warnings: report.warnings,
    }
}

/// How bad a finding is, before the profile decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Severity {
    /// An error under every profile.
    Error,
    /// An error under `strict` and `anthropic-upload`, a warning under `lenient`.
    Strict,
    /// An error under `anthropic-upload` only.
    Upload,
    Warning,
}

struct Report {
    profile: Profile,
    errors: Vec<Finding>,
    warnings: Vec<Finding>,
    yaml_error: Option<String>,
}

impl Report {
    fn flag(&mut self, severity: Severity, field: &str, message: impl Into<String>) {
        if severity == Severity::Upload && self.profile != Profile::AnthropicUpload {
            return;
        }
        let error = match severity {
            Severity::Error => true,
            Severity::Strict => self.profile != Profile::Lenient,
            Severity::Upload => true,
            Severity::Warning => false,
        };
        let finding = Finding::new(field, message);
        if error {
            self.errors.push(finding);
        } else {
            self.warnings.push(finding);
        }
    }
}

/// The frontmatter's YAML (when line 1 is `---` and a later `---` line closes it) and the body.
fn split(text: &str) -> (Option<&str>, &str) {
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else {
        return (None, text);
    };
    if first.trim_end_matches(['\n', '\r']) != "---" {
        return (None, text);
    }
    let mut offset = first.len();
    for line in lines {
        if line.trim_end_matches(['\n', '\r']) == "---" {
            let yaml = &text[first.len()..offset];
            return (Some(yaml), &text[offset + line.len()..]);
        }
        offset += line.len();
    }
    (None, text)
}

/// The frontmatter's top-level fields: as YAML, else line by line.
fn read_fields(yaml: &str, report: &mut Report) -> BTreeMap<String, Yaml> {
    match serde_yaml_ng::from_str::<Yaml>(yaml) {
        Ok(Yaml::Mapping(map)) => map
            .into_iter()
            .filter_map(|(k, v)| Some((yaml_text(&k)?, v)))
            .collect(),
        Ok(Yaml::Null) => BTreeMap::new(),
        Ok(_) => {
            report.flag(Severity::Error, "", "the frontmatter must be a mapping");
            BTreeMap::new()
        }
        Err(e) => {
            let problem = e.to_string();
            let problem = problem.lines().next().unwrap_or_default();
            report.yaml_error = Some(problem.to_owned());
            report.flag(
                Severity::Strict,
                "",
                format!("the frontmatter is not valid YAML ({problem}); read line by line"),
            );
            simple_fields(yaml)
        }
    }
}

/// `key: value` per line, split at the first colon; values trimmed and unquoted, empty dropped.
fn simple_fields(yaml: &str) -> BTreeMap<String, Yaml> {
    yaml.lines()
        .filter(|line| !line.starts_with([' ', '\t', '#']))
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            let value = unquote(value.trim());
            (!key.trim().is_empty() && !value.is_empty())
                .then(|| (key.trim().to_owned(), Yaml::String(value.to_owned())))
        })
        .collect()
}

fn unquote(value: &str) -> &str {
    for quote in ['\'', '"'] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// A YAML scalar as text (`1.0` stays `1.0`); `None` for null, mappings and sequences.
fn yaml_text(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A field that must be a string (trimmed; empty counts as absent); another shape is flagged
/// with `severity` and left out.
fn scalar(
    fields: &BTreeMap<String, Yaml>,
    key: &str,
    severity: Severity,
    report: &mut Report,
) -> Option<String> {
    let value = fields.get(key)?;
    if matches!(value, Yaml::Null) {
        return None;
    }
    match yaml_text(value) {
        Some(text) => Some(text.trim().to_owned()).filter(|t| !t.is_empty()),
        None => {
            report.flag(severity, key, "must be a string");
            None
        }
    }
}

fn metadata(fields: &BTreeMap<String, Yaml>, report: &mut Report) -> BTreeMap<String, String> {
    match fields.get("metadata") {
        None | Some(Yaml::Null) => BTreeMap::new(),
        Some(Yaml::Mapping(map)) => map
            .iter()
            .filter_map(|(k, v)| {
                let key = yaml_text(k)?;
                match yaml_text(v) {
                    Some(value) => Some((key, value)),
                    None => {
                        report.flag(
                            Severity::Warning,
                            "metadata",
                            format!("'{key}' should be a string; it is left out"),
                        );
                        None
                    }
                }
            })
            .collect(),
        Some(_) => {
            report.flag(
                Severity::Warning,
                "metadata",
                "should be a mapping of strings; it is left out",
            );
            BTreeMap::new()
        }
    }
}

/// `allowed-tools`: space-separated (`Bash(git:*) Read`). A comma-separated list keeps its
/// commas under `strict` (with a warning) and loses them under `lenient`; a YAML list is taken
/// as it is (with a warning).
fn allowed_tools(fields: &BTreeMap<String, Yaml>, report: &mut Report) -> Vec<String> {
    let lenient = report.profile == Profile::Lenient;
    match fields.get("allowed-tools") {
        None | Some(Yaml::Null) => Vec::new(),
        Some(Yaml::Sequence(items)) => {
            report.flag(
                Severity::Warning,
                "allowed-tools",
                "should be a space-separated string, not a list",
            );
            items.iter().filter_map(yaml_text).collect()
        }
        Some(value) => {
            let text = yaml_text(value).unwrap_or_default();
            if text.contains(',') {
                let message = if lenient {
                    "is space-separated; its commas were dropped"
                } else {
                    "is space-separated; its commas are kept as part of the names"
                };
                report.flag(Severity::Warning, "allowed-tools", message);
            }
            text.split_whitespace()
                .map(|tool| {
                    if lenient {
                        tool.trim_matches(',')
                    } else {
                        tool
                    }
                })
                .filter(|tool| !tool.is_empty())
                .map(str::to_owned)
                .collect()
        }
    }
}

fn check_name(name: Option<&str>, dir_name: Option<&str>, report: &mut Report) {
    let Some(raw) = name else {
        report.flag(Severity::Strict, "name", "is required");
        return;
    };
    let name: String = raw.nfkc().collect();
    let chars = name.chars().count();
    if chars > MAX_NAME {
        report.flag(
            Severity::Strict,
            "name",
            format!("must be at most {MAX_NAME} characters, has {chars}"),
        );
    }
    let ascii = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let unicode = name
        .chars()
        .all(|c| (c.is_alphanumeric() && !c.is_uppercase()) || c == '-');
    if !ascii {
        let message = "must use only lower-case letters a-z, digits and hyphens";
        // The client guide loads names of other scripts (`技能`); the specification does not.
        let severity = if unicode {
            Severity::Strict
        } else {
            Severity::Error
        };
        report.flag(severity, "name", message);
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        report.flag(
            Severity::Strict,
            "name",
            "must not start or end with a hyphen or hold two in a row",
        );
    }
    if let Some(dir) = dir_name {
        let dir: String = dir.nfkc().collect();
        if dir != name {
            report.flag(
                Severity::Strict,
                "name",
                format!("'{name}' must equal the folder name '{dir}'"),
            );
        }
    }
    let lower = name.to_lowercase();
    if lower.contains("anthropic") || lower.contains("claude") {
        report.flag(
            Severity::Upload,
            "name",
            "must not contain the reserved words 'anthropic' or 'claude'",
        );
    }
    if has_xml_tag(&name) {
        report.flag(Severity::Upload, "name", "must not contain XML tags");
    }
}

fn check_description(description: &str, report: &mut Report) {
    if description.trim().is_empty() {
        report.flag(Severity::Error, "description", "is required");
        return;
    }
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION {
        report.flag(
            Severity::Strict,
            "description",
            format!("must be at most {MAX_DESCRIPTION} characters, has {chars}"),
        );
    }
    if has_xml_tag(description) {
        report.flag(Severity::Upload, "description", "must not contain XML tags");
    }
}

/// Whether `text` holds something like `<tag>` or `</tag>`.
fn has_xml_tag(text: &str) -> bool {
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        let after = &rest[start + 1..];
        let tag = after.strip_prefix('/').unwrap_or(after);
        if tag.starts_with(|c: char| c.is_ascii_alphabetic()) && tag.contains('>') {
            return true;
        }
        rest = after;
    }
    false
}

/// The title, summary and checklist of the body.
fn read_body(body: &str, document: &mut Document) {
    let lines: Vec<&str> = body.lines().collect();
    let title_at = lines.iter().position(|l| l.starts_with("# "));
    document.title = title_at.map(|i| lines[i][2..].trim().to_owned());
    let from = title_at.map_or(0, |i| i + 1);
    let paragraph: Vec<&str> = lines[from..]
        .iter()
        .map(|l| l.trim())
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    document.summary = paragraph.join("\n");
    if let Some(start) = lines
        .iter()
        .position(|l| l.trim().eq_ignore_ascii_case("## checklist"))
    {
        document.checklist = lines[start + 1..]
            .iter()
            .map(|l| l.trim())
            .take_while(|l| !l.starts_with('#'))
            .filter_map(|l| l.strip_prefix('-').or_else(|| l.strip_prefix('*')))
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_owned)
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(text: &str, dir: Option<&str>) -> Checked {
        check(text, dir, Profile::Strict)
    }

    fn lenient(text: &str, dir: Option<&str>) -> Checked {
        check(text, dir, Profile::Lenient)
    }

    fn fm(fields: &str) -> String {
        format!("---\n{fields}\n---\n\n# Title\n\nSummary.\n")
    }

    #[test]
    fn vector_4_1_the_simple_parser() {
        // 1: no frontmatter.
        let doc = lenient(
            "# skill-example\n\nOne line summary.\n\n## Checklist\n- Do A\n- Do B\n\n## Notes\nUse the Read tool first.",
            None,
        )
        .document;
        assert_eq!(doc.name, "skill-example");
        assert_eq!(doc.summary, "One line summary.");
        assert_eq!(doc.checklist, ["Do A", "Do B"]);
        assert_eq!(doc.description, "");
        // 2: the frontmatter wins over the title.
        let doc = lenient(
            "---\nname: main-process\ndescription: demo\n---\n\n# Main Process\n\nSummary.",
            None,
        )
        .document;
        assert_eq!(
            (
                doc.name.as_str(),
                doc.description.as_str(),
                doc.summary.as_str()
            ),
            ("main-process", "demo", "Summary.")
        );
        assert_eq!(doc.title.as_deref(), Some("Main Process"));
        assert!(!doc.body.contains("name: main-process"));
        // 3: quotes are dropped, an empty value is absent.
        let checked = lenient(&fm("name: 'quoted-x'\ndescription:"), None);
        assert_eq!(checked.document.name, "quoted-x");
        assert_eq!(checked.document.description, "");
        assert!(
            checked.errors.iter().any(|f| f.field == "description"),
            "{checked:?}"
        );
        // 4: checklist heading in any case, both bullets, stops at the next heading.
        let doc = lenient(
            "# T\n\nS\n\n## CHECKLIST\n* a\n  - b\n-\n### Sub\n- c\n",
            None,
        )
        .document;
        assert_eq!(doc.checklist, ["a", "b"]);
        // 5: a summary of two lines.
        let doc = lenient("# T\n\nLine 1\nLine 2\n\nMore.", None).document;
        assert_eq!(doc.summary, "Line 1\nLine 2");
        // 6: an unclosed frontmatter is no frontmatter; the name comes from the title.
        let checked = lenient("---\nname: x\n# Real\n\nBody.", None);
        assert!(!checked.has_frontmatter);
        assert_eq!(checked.document.name, "Real");
        // 7: neither frontmatter nor title: the folder's name.
        assert_eq!(lenient("Just text.", Some("foo")).document.name, "foo");
    }

    #[test]
    fn vector_4_2_names_under_strict() {
        for good in ["pdf-processing", "a", "a1-b2", &"a".repeat(64)] {
            let checked = strict(&fm(&format!("name: {good}\ndescription: d")), Some(good));
            assert!(checked.valid(), "{good}: {:?}", checked.errors);
        }
        for bad in [
            "PDF-Processing",
            "-pdf",
            "pdf-",
            "pdf--processing",
            "my_skill",
            &"a".repeat(65),
        ] {
            let checked = strict(&fm(&format!("name: {bad}\ndescription: d")), Some(bad));
            assert!(
                checked.errors.iter().any(|f| f.field == "name"),
                "{bad} passed"
            );
        }
        let checked = strict(&fm("name: \"\"\ndescription: d"), None);
        assert!(checked.errors.iter().any(|f| f.field == "name"));
        let checked = strict(&fm("name: correct-name\ndescription: d"), Some("other"));
        assert!(
            checked.errors[0]
                .message
                .contains("must equal the folder name"),
            "{:?}",
            checked.errors
        );
        let checked = lenient(&fm("name: correct-name\ndescription: d"), Some("other"));
        assert!(checked.valid() && checked.warnings.len() == 1);
    }

    #[test]
    fn vector_4_2_fields_under_both_profiles() {
        let with = |fields: &str| fm(&format!("name: x\n{fields}"));
        let d1024 = format!("description: {}", "d".repeat(1024));
        assert!(strict(&with(&d1024), None).valid());
        let d1025 = format!("description: {}", "d".repeat(1025));
        assert!(!strict(&with(&d1025), None).valid());
        assert!(lenient(&with(&d1025), None).valid());
        assert!(!strict(&with("description: '   '"), None).valid());
        assert!(!lenient(&with("description: '   '"), None).valid());
        let c500 = format!("description: d\ncompatibility: {}", "c".repeat(500));
        assert!(strict(&with(&c500), None).valid());
        let c501 = format!("description: d\ncompatibility: {}", "c".repeat(501));
        assert!(!strict(&with(&c501), None).valid());

        let extra = with("description: d\nversion: 1.0");
        let checked = strict(&extra, None);
        assert_eq!(
            checked.errors[0].message,
            "unexpected field in frontmatter: version"
        );
        let checked = lenient(&extra, None);
        assert!(checked.valid() && checked.warnings[0].message.contains("version"));

        let tools = strict(
            &with("description: d\nallowed-tools: Bash(git:*) Bash(jq:*) Read"),
            None,
        );
        assert_eq!(
            tools.document.allowed_tools,
            ["Bash(git:*)", "Bash(jq:*)", "Read"]
        );
        let commas = with("description: d\nallowed-tools: Read, Write");
        assert_eq!(
            strict(&commas, None).document.allowed_tools,
            ["Read,", "Write"]
        );
        assert_eq!(
            lenient(&commas, None).document.allowed_tools,
            ["Read", "Write"]
        );

        let meta = strict(
            &with("description: d\nmetadata:\n  version: 1.0\n  author: me"),
            None,
        );
        assert!(meta.valid(), "{:?}", meta.errors);
        assert_eq!(meta.document.metadata["version"], "1.0");
        assert_eq!(meta.document.metadata["author"], "me");
        // Shapes the reference validator does not check: warnings, the value left out.
        for odd in [
            "metadata: [1, 2]",
            "metadata:\n  nested:\n    a: b",
            "license:\n  - MIT",
        ] {
            let checked = strict(&with(&format!("description: d\n{odd}")), None);
            assert!(checked.valid(), "{odd}: {:?}", checked.errors);
            assert_eq!(checked.warnings.len(), 1, "{odd}");
        }
        let listed = strict(
            &with("description: d\nallowed-tools:\n  - Read\n  - Bash"),
            None,
        );
        assert!(listed.valid() && listed.warnings.len() == 1);
        assert_eq!(listed.document.allowed_tools, ["Read", "Bash"]);
    }

    #[test]
    fn vector_4_2_yaml_corner_cases() {
        // An unquoted colon: not YAML, read line by line.
        let colon = fm("name: pdf\ndescription: Use when: PDFs");
        let checked = strict(&colon, Some("pdf"));
        assert!(
            checked.errors[0].message.contains("not valid YAML"),
            "{checked:?}"
        );
        let checked = lenient(&colon, Some("pdf"));
        assert!(checked.valid(), "{:?}", checked.errors);
        assert_eq!(checked.document.description, "Use when: PDFs");
        // A folded description.
        let folded = strict(&fm("name: x\ndescription: >\n  two\n  lines"), Some("x"));
        assert_eq!(folded.document.description, "two lines");
        // Other scripts: the specification's ASCII profile refuses, the client guide loads.
        let han = fm("name: 技能\ndescription: d");
        assert!(!strict(&han, Some("技能")).valid());
        let loaded = lenient(&han, Some("技能"));
        assert!(loaded.valid());
        assert_eq!(loaded.document.name, "技能");
        // Names are compared after NFKC.
        let decomposed = "cafe\u{301}";
        let checked = lenient(
            &fm(&format!("name: {decomposed}\ndescription: d")),
            Some("caf\u{e9}"),
        );
        assert_eq!(checked.document.name.chars().count(), 4);
        assert!(
            checked
                .warnings
                .iter()
                .all(|w| !w.message.contains("folder"))
        );
    }

    #[test]
    fn the_upload_profile_adds_reserved_words_and_tags() {
        let upload = |fields: &str| check(&fm(fields), None, Profile::AnthropicUpload);
        assert!(upload("name: pdf-helper\ndescription: Reads PDFs.").valid());
        assert!(!upload("name: claude-helper\ndescription: d").valid());
        assert!(!upload("name: x\ndescription: Reads <b>PDFs</b>.").valid());
        assert!(upload("name: x\ndescription: a < b > c").valid());
        assert!(strict(&fm("name: claude-helper\ndescription: d"), None).valid());
    }
}
