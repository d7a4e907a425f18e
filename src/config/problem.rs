//! One problem in a configuration: where, which key, why. The daemon's configuration, the
//! web config file and the remediation receiver's file all report their problems this way,
//! so every tool prints them alike: `PATH:LINE: key.path: reason`.

use std::fmt;

/// One problem found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: `PATH:LINE`, `PATH`, `env:VAR` or `flag --name`; empty inside a file that
    /// is itself named by another configuration's key (that key's problem says where).
    pub location: String,
    /// Dotted key path, or `(document)` for a syntax error; empty when the reason names
    /// what it is about itself (a file that cannot be read, a file's parse error).
    pub key: String,
    /// Why it is wrong, and what to write instead where that is knowable.
    pub reason: String,
}

impl Problem {
    /// A problem with `key` at `location`.
    pub fn new(location: impl Into<String>, key: impl Into<String>, reason: impl ToString) -> Self {
        Self {
            location: location.into(),
            key: key.into(),
            reason: reason.to_string(),
        }
    }

    /// A problem with `key` whose location the caller adds later ([`Problem::at`]).
    pub fn key(key: impl Into<String>, reason: impl ToString) -> Self {
        Self::new(String::new(), key, reason)
    }

    /// A problem that names what it is about in its reason alone.
    pub fn reason(reason: impl ToString) -> Self {
        Self::new(String::new(), String::new(), reason)
    }

    /// Every problem of a list, one per line.
    pub fn lines(problems: &[Problem]) -> String {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The same problem, placed at `location`.
    pub fn at(mut self, location: impl Into<String>) -> Self {
        self.location = location.into();
        self
    }
}

impl fmt::Display for Problem {
    /// `location: key: reason`, leaving out an empty location or key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in [&self.location, &self.key] {
            if !part.is_empty() {
                write!(f, "{part}: ")?;
            }
        }
        f.write_str(&self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_parts_are_left_out() {
        assert_eq!(
            Problem::new("a.toml:3", "web.x", "bad").to_string(),
            "a.toml:3: web.x: bad"
        );
        assert_eq!(Problem::key("web.x", "bad").to_string(), "web.x: bad");
        assert_eq!(Problem::reason("bad").at("f").to_string(), "f: bad");
        assert_eq!(Problem::reason("bad").to_string(), "bad");
    }
}
