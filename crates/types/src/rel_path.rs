//! Relative paths that come from outside — an API request, a zip entry, an `:invoke` input, a
//! skill's `runner.json` — and must stay inside whatever folder they are joined to.

use std::path::Path;

/// A path of names only: no root, no drive (`C:`), no `..`, no NUL; `.` and empty components
/// are dropped; `/` and `\` both separate (zip entries and Windows clients write `\`). Shown
/// `/`-separated. Joined to a folder it names something inside it, unless a symbolic link on
/// the way leads out: opening it is still the caller's to do without following links.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelPath(String);

/// Why a path is not a [`RelPath`], in the order the rules are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelPathError {
    /// A NUL byte: no file name holds one.
    Nul,
    /// It starts at a root (`/x`, `\x`, `\\server\share`).
    Absolute,
    /// It starts with a drive (`C:`).
    Drive,
    /// A `..` component.
    Parent,
    /// Nothing is left once `.` and empty components are dropped (`""`, `.`, `./`).
    Empty,
}

impl std::fmt::Display for RelPathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Nul => "it contains a NUL byte",
            Self::Absolute => "it is absolute",
            Self::Drive => "it names a drive",
            Self::Parent => "it contains '..'",
            Self::Empty => "it names no file or folder",
        })
    }
}

impl std::error::Error for RelPathError {}

impl RelPath {
    pub fn parse(raw: &str) -> Result<Self, RelPathError> {
        if raw.contains('\0') {
            return Err(RelPathError::Nul);
        }
        if raw.starts_with(['/', '\\']) {
            return Err(RelPathError::Absolute);
        }
        let bytes = raw.as_bytes();
        if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
            return Err(RelPathError::Drive);
        }
        let mut names = Vec::new();
        for part in raw.split(['/', '\\']) {
            match part {
                "" | "." => {}
                ".." => return Err(RelPathError::Parent),
                name => names.push(name),
            }
        }
        if names.is_empty() {
            return Err(RelPathError::Empty);
        }
        Ok(Self(names.join("/")))
    }

    /// The path, `/`-separated.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its names, first to last.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl AsRef<Path> for RelPath {
    fn as_ref(&self) -> &Path {
        Path::new(&self.0)
    }
}

impl std::fmt::Display for RelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_only_and_each_refusal_says_why() {
        for (raw, shown) in [
            ("a", "a"),
            ("./a//b/./c/", "a/b/c"),
            ("a\\b", "a/b"),
            ("ab:c", "ab:c"),
            ("..a/b..", "..a/b.."),
        ] {
            assert_eq!(RelPath::parse(raw).unwrap().as_str(), shown, "{raw}");
        }
        for (raw, why) in [
            ("a\0b", RelPathError::Nul),
            ("/etc/passwd", RelPathError::Absolute),
            ("\\\\server\\share", RelPathError::Absolute),
            ("C:\\x", RelPathError::Drive),
            ("c:x", RelPathError::Drive),
            ("a/../b", RelPathError::Parent),
            ("a\\..\\..\\b", RelPathError::Parent),
            ("..", RelPathError::Parent),
            ("", RelPathError::Empty),
            ("./", RelPathError::Empty),
            ("/..", RelPathError::Absolute),
        ] {
            assert_eq!(RelPath::parse(raw), Err(why), "{raw:?}");
        }
        let path = RelPath::parse("a/b").unwrap();
        assert_eq!(path.names().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(Path::new("/root").join(&path), Path::new("/root/a/b"));
    }
}
