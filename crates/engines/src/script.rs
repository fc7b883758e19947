//! The `script` engine: runs the skill's own `entrypoint.script`, no model involved.
//!
//! The contract (product notes): stdin carries one JSON object with the inputs, parameters and
//! turn state; the environment names the run and skill folders; the answer is the last JSON
//! object on stdout, with the same extraction rules as the agent engines.

use anyhow::Context;
use serde_json::json;

use super::{Engine, EngineAdapter, Prepared, Reading, Said, Transcriber, Turn};
use crate::answer;

#[derive(Debug)]
pub struct ScriptEngine;

impl EngineAdapter for ScriptEngine {
    fn engine(&self) -> Engine {
        Engine::Script
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let skill = turn.skill;
        let script = skill
            .script
            .as_ref()
            .context("the skill declares no entrypoint.script")?;
        // Relative paths that exist in the skill folder are made absolute, because the process
        // runs in the run folder; everything else (the program name, flags) passes unchanged.
        let argv = script
            .iter()
            .enumerate()
            .map(|(i, arg)| {
                let candidate = skill.path.join(arg);
                let path_like = i > 0 || arg.contains('/');
                if path_like && !arg.starts_with('/') && candidate.exists() {
                    candidate.to_string_lossy().into_owned()
                } else {
                    arg.clone()
                }
            })
            .collect();
        let workspace = turn.workspace();
        let stdin = json!({
            "input": turn.input,
            "parameter": turn.parameter,
            "run_dir": workspace,
            "skill_dir": skill.path,
            "execution_mode": turn.execution_mode.as_str(),
            "turn": turn.number,
            "reply": turn.reply,
            "history": turn.history,
        });
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        // The script reads its own folder; it writes only the workspace.
        let mut spec = turn.folder.process(
            argv,
            vec![
                ("SKILL_RUNNER_RUN_DIR".into(), path(&workspace)),
                ("SKILL_RUNNER_SKILL_DIR".into(), path(&skill.path)),
                ("SKILL_RUNNER_REQUEST_ID".into(), turn.request_id.to_owned()),
                ("SKILL_RUNNER_TURN".into(), turn.number.to_string()),
            ],
            vec![skill.path.clone()],
        );
        spec.stdin = Some(serde_json::to_vec(&stdin)?);
        Ok(Prepared {
            spec,
            session: None,
            login: Default::default(),
            prompt: None,
        })
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        Reading {
            answer: answer::extract(stdout),
            ..Reading::default()
        }
    }

    /// Each line the script prints is one message.
    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(|line: &str, said: &mut Vec<Said>| {
            if !line.trim().is_empty() {
                said.push(Said::Text {
                    text: line.to_owned(),
                    continues: false,
                });
            }
        })
    }
}
