//! Several `monitor run` nodes as one cluster, on loopback addresses of their own (127.0.0.2, 127.0.0.3 …), each
//! with a python3 `http.server` master and worker: membership by gossip, and a graceful leave.

mod membership;
