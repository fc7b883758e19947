//! The agent: a chat loop that lets a model call the invocable skills as tools, every step kept
//! in an append-only session. So far: the session store ([`session`]) and the caps on what a
//! tool's output may cost the model ([`tool_output`]).

pub mod session;
pub mod tool_output;
