//! What to do about a run's failure, by its error code: the `hint` next to the `code` and
//! `message` wherever a failed run is shown (the status, the result, the console, the example
//! client). A code not listed here (a skill's own) has no hint: its message is the skill's.

/// The hint for `code`, if the service knows what to do about it.
pub fn for_code(code: &str) -> Option<&'static str> {
    Some(match code {
        "TIMEOUT" => {
            "The turn ran past its hard timeout and was stopped: raise \
             runtime_options.hard_timeout_seconds (up to SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS), \
             or make the skill do less per turn."
        }
        "CANCELED_BY_USER" => "The run was canceled; create it again to run it.",
        "MODEL_ENDPOINT_ERROR" => {
            "The model endpoint failed (a server error, a rate limit, or no connection): this \
             usually passes. Create the run again, or send retry: {\"max_attempts\": 3} so the \
             service tries again itself."
        }
        "AUTH_REQUIRED" => {
            "The engine refused its credentials: log it in again (POST \
             /v1/management/engines/{engine}/auth/import, or an API key through \
             .../auth/sessions) or check SKILL_RUNNER_<ENGINE>_API_KEY, then create the run again."
        }
        "AUTH_WAIT_TIMEOUT" => {
            "Nobody logged the engine in while the run waited: log it in (see the message), \
             then create the run again; SKILL_RUNNER_AUTH_WAIT_SECONDS sets how long runs wait."
        }
        "SKILL_EXITED" => {
            "The skill's program ended with an error: the end of its stderr is in the message \
             (all of it under stderr on the run page, logs/stderr.txt in the run's bundle). Fix \
             the input or the skill, then run it again."
        }
        "ENGINE_EXITED" => {
            "The agent CLI ended with an error without saying why in its output: read the end of \
             its stderr in the message (all of it under stderr on the run page); a login, model \
             or network problem is the usual cause. Fix it, then run it again."
        }
        "COMMAND_NOT_FOUND" => {
            "The program was not found inside the sandbox: install it, or add its folder to \
             SKILL_RUNNER_SANDBOX_READ_PATHS (an interpreter from pyenv needs ~/.pyenv there)."
        }
        "COMMAND_NOT_EXECUTABLE" => {
            "The program could not be started: make it executable (chmod +x) and check its \
             first line (#!) names an interpreter that exists inside the sandbox."
        }
        "INTERACTION_WAIT_TIMEOUT" => {
            "Nobody answered the question in time: create the run again and reply sooner, raise \
             runtime_options.interactive_reply_timeout_sec, or set interactive_auto_reply."
        }
        "INTERACTIVE_MAX_ATTEMPT_EXCEEDED" => {
            "The skill kept asking past runner.json max_attempt: give it the missing facts in \
             the input, or raise max_attempt."
        }
        "SESSION_RESUME_FAILED" => {
            "The engine's conversation could not be resumed: create the run again."
        }
        "RUNTIME_ENV_SECRET_MISSING" => {
            "The request's runtime_options.env values were no longer kept (they are forgotten \
             after a while): create the job again."
        }
        "UPLOAD_INPUT_MISSING" => {
            "The upload lacked a required file: zip it under the input's name (or under the path \
             the request's input names for it) and create the job again."
        }
        "WORKSPACE_SOURCE_MISSING" => {
            "The run whose files this one was to reuse is gone (cleaned up): reuse a newer run, \
             or send the files again."
        }
        "EGRESS_NOT_PERMITTED" => {
            "The skill asks for a network host the operator does not allow: add it to \
             SKILL_RUNNER_EGRESS_ALLOW, or remove it from the skill's runner.json."
        }
        "DISK_FULL" => {
            "The service's data volume is full: free space there (or lower retention with \
             SKILL_RUNNER_RUN_RETENTION_SECONDS), then run it again."
        }
        "RESOURCE_MEMORY" => {
            "The turn used more memory than allowed: make the skill use less, or raise \
             SKILL_RUNNER_RUN_MEMORY_MB (and the skill's runner.json limits.memory_mb, if it set \
             a lower one)."
        }
        "RESOURCE_PIDS" => {
            "The turn started more processes than allowed: raise SKILL_RUNNER_RUN_PIDS (and the \
             skill's runner.json limits.pids, if it set a lower one)."
        }
        "RESOURCE_CPU" => {
            "The turn used more CPU time than allowed: raise SKILL_RUNNER_RUN_CPU_SECONDS (and \
             the skill's runner.json limits.cpu_seconds, if it set a lower one)."
        }
        "RESOURCE_FILE" | "RESOURCE_DISK" => {
            "The turn wrote more than allowed: write less, or raise SKILL_RUNNER_RUN_FILE_MB / \
             SKILL_RUNNER_RUN_MAX_DISK_MB (and the skill's runner.json limits, if it set lower \
             ones)."
        }
        "RESOURCE_OUTPUT" => {
            "The turn printed more than its log keeps: print less, or raise \
             SKILL_RUNNER_RUN_MAX_LOG_MB."
        }
        "ORCHESTRATOR_RESTART_INTERRUPTED" | "NODE_LOST" => {
            "The service stopped while the turn ran: create the run again."
        }
        "INTERNAL_ERROR" => {
            "The service failed, not the skill: its log has the cause (search for the run id); \
             create the run again."
        }
        "MCP_SERVER_UNAVAILABLE" => {
            "Add the server to the registry (PUT /v1/management/mcp/servers/{id}) as a \
             'declared' server for this engine, or run the skill on an engine it has."
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_service_s_codes_have_hints_and_a_skill_s_own_have_none() {
        for code in [
            "TIMEOUT",
            "COMMAND_NOT_FOUND",
            "AUTH_WAIT_TIMEOUT",
            "RESOURCE_MEMORY",
        ] {
            assert!(super::for_code(code).is_some(), "{code}");
        }
        assert_eq!(super::for_code("MY_SKILL_FAILED"), None);
    }
}
