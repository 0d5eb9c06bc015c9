//! Alert hooks for `[alerts] command`: python scripts that record each alert they get on stdin, one JSON line per
//! run, in the file named by their first argument (read back with [`crate::json_lines`]).

/// Appends the alert it gets on stdin as one JSON line.
pub const ALERT_TO_FILE: &str = r#"
import json, sys
alert = json.load(sys.stdin)
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(alert) + "\n")
"#;
