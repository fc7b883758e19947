//! What a validator found wrong: the field it concerns (empty for the whole document) and why.
//! The `SKILL.md` profiles, the tool definition profiles and `skill-runner validate` share it.

use serde::Serialize;

/// One finding, an error or a warning by where it is listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub field: String,
    pub message: String,
}

impl Finding {
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}
