//! `log_transform`: a text or JSONL log under the allowed root → records
//! `{line_no, timestamp, level, message}`.
//!
//! Text lines: an optional ISO-8601 timestamp at the start (or the first match of
//! `rules.timestamp_regex`: its `ts` group, else its first group, else the whole match), then
//! an optional level token (TRACE, DEBUG, INFO, WARN, WARNING, ERROR, FATAL; case-insensitive,
//! bracketed or followed by `:`), then the message. JSONL lines take `timestamp`/`ts`/`time`,
//! `level`/`severity`/`lvl` and `message`/`msg`; lines that are not JSON objects are dropped,
//! as are blank lines. `rules.level_map` renames levels after extraction. `limit` caps the
//! records returned (`output: stdout`) or written (`output: file`, a JSONL file under
//! `<root>/out/`).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::io::Write;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::{Ctx, limit};
use crate::invoke::paths::MAX_FILE_BYTES;
use crate::invoke::result::{Output, SkillError};

const LEVELS: [&str; 7] = [
    "TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL",
];

static ISO_TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\]?",
    )
    .expect("valid regex")
});

pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "input_path": {"type": "string", "description": "The log file, relative to the allowed root."},
            "format": {"type": "string", "description": "text (default) or jsonl.", "default": "text"},
            "output": {"type": "string", "description": "stdout (default: records in the answer) or file (JSONL under out/).", "default": "stdout"},
            "rules": {
                "type": "object",
                "description": "timestamp_regex: where a line's timestamp is (text logs); level_map: levels renamed, e.g. {\"WARNING\": \"WARN\"}.",
                "default": {},
                "properties": {
                    "timestamp_regex": {"type": "string"},
                    "level_map": {"type": "object", "additionalProperties": {"type": "string"}}
                },
                "additionalProperties": false
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Most records (default 200).", "default": 200}
        },
        "required": ["input_path"],
        "additionalProperties": false
    })
}

struct Rules {
    timestamp: Option<Regex>,
    level_map: BTreeMap<String, String>,
}

pub fn run(input: &Value, ctx: &Ctx<'_>) -> Result<Output, SkillError> {
    let choice = |field: &str, allowed: [&'static str; 2]| -> Result<&'static str, SkillError> {
        match input.get(field).and_then(Value::as_str) {
            None => Ok(allowed[0]),
            Some(v) => allowed.into_iter().find(|a| *a == v).ok_or_else(|| {
                SkillError::invalid(field, format!("must be {} or {}", allowed[0], allowed[1]))
            }),
        }
    };
    let jsonl = choice("format", ["text", "jsonl"])? == "jsonl";
    let to_file = choice("output", ["stdout", "file"])? == "file";
    let limit = limit(input, "limit", 200, 10_000)?;
    let rules = Rules {
        timestamp: match input
            .pointer("/rules/timestamp_regex")
            .and_then(Value::as_str)
        {
            Some(re) => Some(Regex::new(re).map_err(|e| {
                SkillError::invalid(
                    "rules.timestamp_regex",
                    format!("is not a valid regex: {e}"),
                )
            })?),
            None => None,
        },
        level_map: input
            .pointer("/rules/level_map")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.to_ascii_uppercase(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let raw_path = input["input_path"].as_str().unwrap_or_default();
    let path = ctx.root.resolve("input_path", raw_path)?;
    let file = crate::run_folder::open_plain(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => {
            SkillError::invalid("input_path", format!("is not a plain file ({e})"))
        }
        _ => SkillError::internal(format!("input_path cannot be read: {e}")),
    })?;
    let len = file
        .metadata()
        .map_err(|e| SkillError::internal(format!("input_path cannot be read: {e}")))?
        .len();
    if len > MAX_FILE_BYTES {
        return Err(SkillError::invalid(
            "input_path",
            format!("is {len} bytes; the limit is {MAX_FILE_BYTES}"),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| SkillError::internal(format!("input_path cannot be read: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| SkillError::invalid("input_path", "is not UTF-8 text"))?;

    let (mut records, mut lines_total, mut dropped) = (Vec::new(), 0usize, 0usize);
    let mut matched = 0usize;
    for (i, line) in text.lines().enumerate() {
        if i % 4096 == 0 {
            ctx.check_time()?;
        }
        lines_total += 1;
        let parsed = if jsonl {
            jsonl_record(line, &rules)
        } else {
            text_record(line, &rules)
        };
        let Some((timestamp, level, message)) = parsed else {
            dropped += 1;
            continue;
        };
        matched += 1;
        if records.len() < limit {
            records.push(json!({
                "line_no": i + 1,
                "timestamp": timestamp,
                "level": level,
                "message": message,
            }));
        }
    }
    let truncated = matched > records.len();
    let stats = json!({
        "lines_total": lines_total,
        "records": records.len(),
        "dropped": dropped,
        "truncated": truncated,
    });
    let data = if to_file {
        let written = write_records(ctx, &path, &records)?;
        json!({"output_path": written, "stats": stats})
    } else {
        json!({"records": records, "stats": stats})
    };
    Ok(Output {
        data,
        truncated: Some(truncated),
    })
}

type Parsed = (Option<String>, Option<String>, String);

fn text_record(line: &str, rules: &Rules) -> Option<Parsed> {
    let line = line.trim_end_matches('\r');
    if line.trim().is_empty() {
        return None;
    }
    let (timestamp, rest) = match &rules.timestamp {
        Some(re) => match re.captures(line) {
            Some(caps) => {
                let whole = caps.get(0).expect("group 0 always matches");
                let ts = caps.name("ts").or(caps.get(1)).unwrap_or(whole);
                let rest = format!("{}{}", &line[..whole.start()], &line[whole.end()..]);
                (Some(ts.as_str().to_owned()), rest)
            }
            None => (None, line.to_owned()),
        },
        None => match ISO_TIMESTAMP.captures(line) {
            Some(caps) => (
                Some(caps[1].to_owned()),
                line[caps.get(0).expect("group 0").end()..].to_owned(),
            ),
            None => (None, line.to_owned()),
        },
    };
    let rest = rest.trim();
    let (level, message) = match rest.split_once(char::is_whitespace) {
        Some((first, tail)) => match level_token(first) {
            Some(level) => (Some(level), tail.trim()),
            None => (None, rest),
        },
        None => match level_token(rest) {
            Some(level) => (Some(level), ""),
            None => (None, rest),
        },
    };
    Some((
        timestamp,
        level.map(|l| mapped(l, rules)),
        message.to_owned(),
    ))
}

/// `INFO`, `[info]`, `Info:` → `INFO`.
fn level_token(token: &str) -> Option<String> {
    let bare = token
        .trim_start_matches('[')
        .trim_end_matches(':')
        .trim_end_matches(']')
        .to_ascii_uppercase();
    LEVELS.contains(&bare.as_str()).then_some(bare)
}

fn mapped(level: String, rules: &Rules) -> String {
    rules.level_map.get(&level).cloned().unwrap_or(level)
}

fn jsonl_record(line: &str, rules: &Rules) -> Option<Parsed> {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(line) else {
        return None;
    };
    let text = |keys: &[&str]| {
        keys.iter().find_map(|k| match obj.get(*k)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        })
    };
    let level = text(&["level", "severity", "lvl"]).map(|l| mapped(l.to_ascii_uppercase(), rules));
    Some((
        text(&["timestamp", "ts", "time", "@timestamp"]),
        level,
        text(&["message", "msg"]).unwrap_or_default(),
    ))
}

/// Writes `records` as JSONL to a new file under `<root>/out/`; returns its root-relative path.
fn write_records(
    ctx: &Ctx<'_>,
    source: &std::path::Path,
    records: &[Value],
) -> Result<String, SkillError> {
    let dir = ctx.root.output_dir("out")?;
    let stem = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "log".into());
    let name = format!(
        "{stem}-{}-{}.jsonl",
        crate::clock::now_compact(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let target = dir.join(name);
    let fail =
        |e: std::io::Error| SkillError::internal(format!("cannot write the output file: {e}"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&target)
        .map_err(fail)?;
    let mut buf = Vec::new();
    for record in records {
        serde_json::to_writer(&mut buf, record).expect("records serialise");
        buf.push(b'\n');
    }
    file.write_all(&buf).map_err(fail)?;
    Ok(ctx.root.relative(&target))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invoke::paths::AllowedRoot;
    use crate::invoke::result::ErrorCode;

    fn transform(root: &AllowedRoot, input: Value) -> Result<Output, SkillError> {
        run(&input, &Ctx::for_test(root))
    }

    fn root_with(files: &[(&str, &str)]) -> (tempfile::TempDir, AllowedRoot) {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        for (name, body) in files {
            let path = base.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, body).unwrap();
        }
        (tmp, AllowedRoot::new(base))
    }

    #[test]
    fn text_lines_become_records() {
        let log = "2026-01-05T10:00:00Z INFO started\n\n[2026-01-05 10:00:01.5] [warn] disk 91%\nplain line\n2026-01-05T10:00:02+08:00 Error: boom\n";
        let (_tmp, root) = root_with(&[("logs/app.log", log)]);
        let out = transform(
            &root,
            json!({"input_path": "logs/app.log", "rules": {"level_map": {"WARN": "WARNING"}}}),
        )
        .unwrap();
        assert_eq!(
            out.data["records"],
            json!([
                {"line_no": 1, "timestamp": "2026-01-05T10:00:00Z", "level": "INFO", "message": "started"},
                {"line_no": 3, "timestamp": "2026-01-05 10:00:01.5", "level": "WARNING", "message": "disk 91%"},
                {"line_no": 4, "timestamp": null, "level": null, "message": "plain line"},
                {"line_no": 5, "timestamp": "2026-01-05T10:00:02+08:00", "level": "ERROR", "message": "boom"},
            ])
        );
        assert_eq!(
            out.data["stats"],
            json!({"lines_total": 5, "records": 4, "dropped": 1, "truncated": false})
        );

        let out = transform(&root, json!({"input_path": "logs/app.log", "limit": 2})).unwrap();
        assert_eq!(out.data["records"].as_array().unwrap().len(), 2);
        assert_eq!(out.truncated, Some(true));
        assert_eq!(out.data["stats"]["truncated"], true);
    }

    #[test]
    fn custom_timestamps_jsonl_and_files() {
        let (_tmp, root) = root_with(&[
            ("a.log", "[05/Jan/2026:10:00:00] DEBUG hi\n"),
            (
                "b.jsonl",
                "{\"ts\":\"t1\",\"level\":\"warn\",\"msg\":\"m1\"}\nnot json\n[1]\n{\"message\":\"m2\"}\n",
            ),
        ]);
        let out = transform(
            &root,
            json!({"input_path": "a.log", "rules": {"timestamp_regex": "\\[(?P<ts>[^\\]]+)\\]"}}),
        )
        .unwrap();
        assert_eq!(
            out.data["records"][0],
            json!({"line_no": 1, "timestamp": "05/Jan/2026:10:00:00", "level": "DEBUG", "message": "hi"})
        );
        let out = transform(&root, json!({"input_path": "b.jsonl", "format": "jsonl", "rules": {"level_map": {"warn": "W"}}, "output": "file"})).unwrap();
        assert_eq!(
            out.data["stats"],
            json!({"lines_total": 4, "records": 2, "dropped": 2, "truncated": false})
        );
        let written = out.data["output_path"].as_str().unwrap();
        assert!(
            written.starts_with("out/b-") && written.ends_with(".jsonl"),
            "{written}"
        );
        let body = std::fs::read_to_string(root.path().join(written)).unwrap();
        let lines: Vec<Value> = body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[0],
            json!({"line_no": 1, "timestamp": "t1", "level": "W", "message": "m1"})
        );
        assert_eq!(
            lines[1],
            json!({"line_no": 4, "timestamp": null, "level": null, "message": "m2"})
        );
    }

    #[test]
    fn bad_arguments() {
        let (_tmp, root) = root_with(&[("a.log", "x\n"), ("bin.log", "\u{0}\u{1}"), ("d/x", "")]);
        std::fs::write(root.path().join("bad.log"), b"\xff\xfe").unwrap();
        for (input, field) in [
            (json!({"input_path": "a.log", "format": "csv"}), "format"),
            (json!({"input_path": "a.log", "output": "db"}), "output"),
            (
                json!({"input_path": "a.log", "rules": {"timestamp_regex": "("}}),
                "rules.timestamp_regex",
            ),
            (json!({"input_path": "bad.log"}), "input_path"),
            (json!({"input_path": "d"}), "input_path"),
        ] {
            let e = transform(&root, input.clone()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{input}");
            assert_eq!(e.details.unwrap()["field"], field, "{input}");
        }
        assert_eq!(
            transform(&root, json!({"input_path": "nope.log"}))
                .unwrap_err()
                .code,
            ErrorCode::NotFound
        );
    }
}
