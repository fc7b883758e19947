//! `POST /v1/route`: the minimal rule router of the user's documents, which picks a skill for
//! a line of text. Rules apply in order; keywords match case-insensitively anywhere in the text.

use serde::Serialize;

/// The rules after the `echo:` prefix: skill and keywords.
const RULES: [(&str, &[&str]); 3] = [
    ("file_search", &["搜索", "find", "grep", "检索"]),
    (
        "calculator",
        &[
            "平均",
            "均值",
            "mean",
            "中位数",
            "median",
            "min",
            "max",
            "比较",
        ],
    ),
    ("log_transform", &["日志", "log", "转换", "parse", "jsonl"]),
];

/// The chosen skill and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Route {
    pub skill_id: String,
    pub routing_reason: String,
}

pub fn route(text: &str) -> Route {
    let found = |skill_id: &str, routing_reason: String| Route {
        skill_id: skill_id.to_owned(),
        routing_reason,
    };
    if text.trim_start().starts_with("echo:") {
        return found("echo", "text starts with 'echo:'".into());
    }
    let lower = text.to_lowercase();
    for (skill, keywords) in RULES {
        if let Some(keyword) = keywords.iter().find(|k| lower.contains(*k)) {
            return found(skill, format!("keyword '{keyword}'"));
        }
    }
    found(
        "echo",
        "no rule matched; default echo (try 'echo:', find/grep/搜索, mean/median/min/max/比较, log/parse/jsonl/日志)"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_apply_in_order() {
        let cases = [
            ("echo: find me", "echo"),
            ("  echo:hi", "echo"),
            ("find TODO", "file_search"),
            ("GREP the docs", "file_search"),
            ("搜索 openSkill", "file_search"),
            ("mean of 1 2 3", "calculator"),
            ("比较价格", "calculator"),
            ("find the max in the log", "file_search"),
            ("parse app.log", "log_transform"),
            ("日志转换", "log_transform"),
            ("hello there", "echo"),
        ];
        for (text, skill) in cases {
            assert_eq!(route(text).skill_id, skill, "{text}");
        }
        assert_eq!(route("find TODO").routing_reason, "keyword 'find'");
        assert!(route("hello").routing_reason.starts_with("no rule matched"));
    }
}
