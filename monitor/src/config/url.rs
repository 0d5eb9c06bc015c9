//! `HttpUrl`: a URL the agent sends to (`[alerts] webhook`, `[alerts] alertmanager`, `[actions] post_url`),
//! split once into the address to connect to, the name the server's certificate must carry (`https://`) and the
//! request path.

use serde::Deserialize;

/// `http://host[:port][/path]` or `https://…`: the port defaults to 80 or 443, the path to `/`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct HttpUrl {
    /// As written.
    text: String,
    /// `https://`: spoken over TLS.
    tls: bool,
    /// The host, without brackets or port: the name the server's certificate must carry.
    host: String,
    /// `host:port`, the port always present.
    authority: String,
    /// From the first `/` after the host on (query included); `/` when there is none.
    path: String,
}

/// Why a URL is not one the agent can send to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("{0:?} is not an http:// or https://host[:port]/path URL")]
    NotHttp(String),
}

impl HttpUrl {
    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Spoken over TLS (`https://`).
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The host the server's certificate must name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `host:port` to connect to and send as `Host`.
    pub(crate) fn authority(&self) -> &str {
        &self.authority
    }

    /// The request target: the path and query.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// This URL with `rest` (starting with `/`) after its path, without doubling a `/` between them:
    /// `http://am:9093/` joined with `/api/v2/alerts` is `http://am:9093/api/v2/alerts`.
    pub fn join(&self, rest: &str) -> HttpUrl {
        HttpUrl {
            text: format!("{}{rest}", self.text.trim_end_matches('/')),
            tls: self.tls,
            host: self.host.clone(),
            authority: self.authority.clone(),
            path: format!("{}{rest}", self.path.trim_end_matches('/')),
        }
    }
}

impl std::str::FromStr for HttpUrl {
    type Err = UrlError;

    fn from_str(url: &str) -> Result<HttpUrl, UrlError> {
        let not_http = || UrlError::NotHttp(url.to_string());
        // Sent as the request line and the Host header: nothing that would break them.
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(not_http());
        }
        let scheme = |s: &str| url.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s));
        let (tls, rest) = match () {
            _ if scheme("http://") => (false, &url[7..]),
            _ if scheme("https://") => (true, &url[8..]),
            _ => return Err(not_http()),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains(['@', '?', '#']) {
            return Err(not_http());
        }
        let (host, authority) = match authority.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok()) {
            Some((host, _)) if !host.ends_with(':') => (host, authority.to_string()),
            _ => (authority, format!("{authority}:{}", if tls { 443 } else { 80 })),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        if host.is_empty() {
            return Err(not_http());
        }
        Ok(HttpUrl { text: url.to_string(), tls, host, authority, path: path.to_string() })
    }
}

impl TryFrom<String> for HttpUrl {
    type Error = UrlError;

    fn try_from(url: String) -> Result<HttpUrl, UrlError> {
        url.parse()
    }
}

impl std::fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::err;
    use crate::config::Config;
    use std::path::Path;

    fn parts(url: &str) -> Option<(String, String)> {
        let u: HttpUrl = url.parse().ok()?;
        Some((u.authority().to_string(), u.path().to_string()))
    }

    #[test]
    fn splits_into_address_and_path() {
        assert_eq!(parts("http://127.0.0.1:9464/api"), Some(("127.0.0.1:9464".into(), "/api".into())));
        assert_eq!(parts("http://localhost"), Some(("localhost:80".into(), "/".into())));
        assert_eq!(parts("http://[::1]:9/x?y=1"), Some(("[::1]:9".into(), "/x?y=1".into())));
        assert_eq!(parts("http://[::1]/x"), Some(("[::1]:80".into(), "/x".into())));
        for bad in ["http:///x", "ftp://x", "x", "", "http://a b/", "http://u@h/", "http://h/\r\nX: y"] {
            assert_eq!(parts(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn https_is_spoken_over_tls_to_the_host_its_certificate_names() {
        let u: HttpUrl = "https://alerts.example/hook".parse().expect("https");
        assert_eq!(
            (u.tls(), u.host(), u.authority(), u.path()),
            (true, "alerts.example", "alerts.example:443", "/hook")
        );
        let u: HttpUrl = "HTTPS://[::1]:8443".parse().expect("https");
        assert_eq!((u.tls(), u.host(), u.authority()), (true, "::1", "[::1]:8443"));
        let u: HttpUrl = "http://h:9/x".parse().expect("http");
        assert_eq!((u.tls(), u.host()), (false, "h"));
        assert!(u.join("/y").tls() == u.tls());
    }

    #[test]
    fn join_adds_a_path() {
        let base: HttpUrl = "http://am:9093/".parse().expect("url");
        let j = base.join("/api/v2/alerts");
        assert_eq!(
            (j.as_str(), j.authority(), j.path()),
            ("http://am:9093/api/v2/alerts", "am:9093", "/api/v2/alerts")
        );
        let base: HttpUrl = "http://am/prefix".parse().expect("url");
        assert_eq!(base.join("/api/v2/alerts").path(), "/prefix/api/v2/alerts");
    }

    #[test]
    fn parsed_from_the_file() {
        let c = Config::from_toml("[alerts]\nwebhook = \"http://127.0.0.1:5001/hook\"\n", Path::new("m.toml"))
            .expect("valid");
        assert_eq!(c.alerts.webhook.as_ref().map(HttpUrl::path), Some("/hook"));
    }

    #[test]
    fn bad_urls_are_parse_errors_at_their_key_and_line() {
        let e = err("[alerts]\n\nwebhook = \"https://\"\n");
        assert!(e.starts_with("m.toml:3: alerts.webhook: \"https://\" is not an http:// or https://"), "{e}");
        let e = err("[alerts]\nalertmanager = \"ftp://x\"\n");
        assert!(e.starts_with("m.toml:2: alerts.alertmanager: \"ftp://x\" is not an http:// or https://"), "{e}");
        let e = err("[actions]\n\npost_url = \"ftp://x\"\n");
        assert!(e.starts_with("m.toml:3: actions.post_url:"), "{e}");
    }
}
