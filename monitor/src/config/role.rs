//! `Role`: what a `[[process]]` is to the group, `master` or `worker`. The one type for it: the launcher keeps it
//! per member, the front door's routing table reads it, `/api/v1/status` shows it.

use serde::{Deserialize, Serialize};

/// A process's role in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Started first; serves the master-only paths (and tx paths unless `master_serves_tx = false`).
    Master,
    /// Started once the master is healthy; serves tx paths.
    Worker,
}

impl Role {
    /// `master` or `worker`, as in the config and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Worker => "worker",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::err;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn parsed_and_shown_lowercase() {
        let text = "[[process]]\nname = \"m0\"\nrole = \"master\"\ncommand = [\"x\"]\nport = 1\n\
                    [[process]]\nname = \"tx1\"\nrole = \"worker\"\ncommand = [\"x\"]\nport = 2\n";
        let c = Config::from_toml(text, Path::new("m.toml")).expect("valid");
        assert_eq!(c.processes.iter().map(|p| p.role).collect::<Vec<_>>(), [Role::Master, Role::Worker]);
        assert_eq!(serde_json::to_string(&Role::Worker).expect("json"), "\"worker\"");
        assert_eq!(format!("[{:<7}]", Role::Master), "[master ]");
    }

    #[test]
    fn another_role_is_a_parse_error_at_its_key_and_line() {
        let e = err("[[process]]\nname = \"m0\"\nrole = \"boss\"\ncommand = [\"x\"]\nport = 1\n");
        assert!(e.starts_with("m.toml:3: process[0].role:") && e.contains("boss"), "{e}");
        let e = err("[[process]]\nname = \"m0\"\nrole = \"Master\"\ncommand = [\"x\"]\nport = 1\n");
        assert!(e.starts_with("m.toml:3: process[0].role:"), "{e}");
    }
}
