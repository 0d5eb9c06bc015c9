//! Header rewriting on the way through: hop-by-hop fields dropped (RFC 9110 §7.6.1: `Connection` and every field
//! it names, plus `Proxy-Connection`, `Keep-Alive`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`), and the
//! client's address appended to `X-Forwarded-For`.

use hyper::header::{Entry, HeaderMap, HeaderName, HeaderValue, CONNECTION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use std::net::IpAddr;

pub(super) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// What [`strip_hop_by_hop`] removed that the proxy must act on.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Stripped {
    /// The `Upgrade` field.
    pub upgrade: Option<HeaderValue>,
    /// `Transfer-Encoding` named a coding besides one `chunked`: hyper took off the chunked framing only, and the
    /// body, sent on without the field, would lose the rest (RFC 9112 §6.1: 501 for a request; nginx does so).
    pub other_coding: bool,
    /// `Connection` listed `close`: the sender closes the connection after this message.
    pub close: bool,
    /// `Connection` listed `keep-alive` (what keeps an HTTP/1.0 connection open).
    pub keep_alive: bool,
}

/// Removes the hop-by-hop fields of one connection, before the message goes out on another.
pub(crate) fn strip_hop_by_hop(h: &mut HeaderMap) -> Stripped {
    // One pass over the names first: most requests and responses carry none of these, and comparing names is
    // cheaper than hashing each of the seven for a lookup.
    let hop = [&CONNECTION, &PROXY_CONNECTION, &KEEP_ALIVE, &TE, &TRAILER, &TRANSFER_ENCODING];
    if !h.keys().any(|k| hop.contains(&k) || k == UPGRADE) {
        return Stripped::default();
    }
    let upgrade = h.remove(UPGRADE);
    let other_coding = h.contains_key(TRANSFER_ENCODING) && !only_chunked(h);
    let (mut close, mut keep_alive) = (false, false);
    if h.contains_key(CONNECTION) {
        let listed: Vec<HeaderName> = h
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|s| s.split(','))
            .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
            .collect();
        for n in listed {
            close |= n.as_str() == "close";
            keep_alive |= n == KEEP_ALIVE;
            h.remove(n);
        }
    }
    for n in hop {
        h.remove(n);
    }
    Stripped { upgrade, other_coding, close, keep_alive }
}

/// True when every `Transfer-Encoding` field together name one coding, `chunked`.
fn only_chunked(h: &HeaderMap) -> bool {
    let mut codings = h
        .get_all(TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty());
    codings.next().is_some_and(|c| c.eq_ignore_ascii_case("chunked")) && codings.next().is_none()
}

/// True when an `Upgrade` field lists `protocol` (e.g. `websocket`, any case, any version).
pub(crate) fn names_protocol(upgrade: &HeaderValue, protocol: &str) -> bool {
    upgrade.to_str().is_ok_and(|s| {
        s.split(',').any(|p| p.trim().split('/').next().is_some_and(|name| name.trim().eq_ignore_ascii_case(protocol)))
    })
}

/// The most fields a head may hold for [`first`] to compare names rather than look one up.
const SCAN_MAX: usize = 16;

/// The first value of `name` in `h`. In a head of a few fields (as most are) the name is first looked for by
/// comparing names, which costs less than hashing a name that is not one of the standard ones: most heads do not
/// hold the fields asked for here.
pub(crate) fn first<'a>(h: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if h.keys_len() <= SCAN_MAX && !h.keys().any(|k| k == name) {
        return None;
    }
    h.get(name)
}

/// A client's address as a header value, made once per connection.
pub(crate) fn client_value(client: IpAddr) -> HeaderValue {
    // An address's text is always a valid header value.
    HeaderValue::from_str(&client.to_string()).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// Appends `client` (from [`client_value`]) to `X-Forwarded-For` (several fields are joined into one, in order).
/// Without a prior field this is one reference-counted copy of the connection's value.
pub(crate) fn append_forwarded_for(h: &mut HeaderMap, client: &HeaderValue) {
    match h.entry(&X_FORWARDED_FOR) {
        Entry::Vacant(v) => {
            v.insert(client.clone());
        }
        Entry::Occupied(mut o) => {
            let joined = {
                let mut s: Vec<&str> = o.iter().filter_map(|v| v.to_str().ok()).collect();
                s.push(client.to_str().unwrap_or("unknown"));
                s.join(", ")
            };
            if let Ok(v) = HeaderValue::from_str(&joined) {
                o.insert(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).expect("name"), HeaderValue::from_str(v).expect("value"));
        }
        h
    }

    #[test]
    fn hop_by_hop_fields_and_those_named_by_connection_go() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret, Upgrade"),
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("trailer", "x"),
            ("x-cache-id", "tx1.1"),
            ("content-length", "3"),
        ]);
        let stripped = strip_hop_by_hop(&mut h);
        let upgrade = Some(HeaderValue::from_static("websocket"));
        assert_eq!(stripped, Stripped { upgrade, other_coding: false, close: true, keep_alive: true });
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-length", "x-cache-id"]);
        let mut h = map(&[("x-cache-id", "tx1.1")]);
        assert_eq!(strip_hop_by_hop(&mut h), Stripped::default());
        assert_eq!(h.len(), 1);
        // Any case: the tokens are names.
        let mut h = map(&[("connection", "Close")]);
        assert!(strip_hop_by_hop(&mut h).close);
    }

    #[test]
    fn a_transfer_coding_besides_one_chunked_is_named() {
        let cases: &[(&[&str], bool)] = &[
            (&["chunked"], false),
            (&["Chunked "], false),
            (&["chunked,"], false),
            (&["gzip, chunked"], true),
            (&["chunked, chunked"], true),
            (&["gzip", "chunked"], true),
            (&["identity"], true),
        ];
        for (fields, other) in cases {
            let pairs: Vec<(&str, &str)> = fields.iter().map(|v| ("transfer-encoding", *v)).collect();
            let mut h = map(&pairs);
            assert_eq!(strip_hop_by_hop(&mut h).other_coding, *other, "{fields:?}");
            assert!(h.is_empty());
        }
    }

    #[test]
    fn upgrade_protocols_are_named_by_token() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert!(names_protocol(&v("websocket"), "websocket"));
        assert!(names_protocol(&v("h2c, WebSocket/13"), "websocket"));
        assert!(!names_protocol(&v("h2c"), "websocket"));
        assert!(!names_protocol(&v("websockets"), "websocket"));
    }

    #[test]
    fn forwarded_for_is_appended() {
        let ip: IpAddr = "127.0.0.9".parse().expect("ip");
        let mut h = HeaderMap::new();
        append_forwarded_for(&mut h, &client_value(ip));
        assert_eq!(h["x-forwarded-for"], "127.0.0.9");
        let mut h = map(&[("x-forwarded-for", "203.0.113.7"), ("X-Forwarded-For", "10.1.1.1, 10.2.2.2")]);
        append_forwarded_for(&mut h, &client_value(ip));
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-for"], "203.0.113.7, 10.1.1.1, 10.2.2.2, 127.0.0.9");
    }
}
