//! cgroup discovery and reading, v1 and v2.
