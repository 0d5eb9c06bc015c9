//! A minimal HTTP/1.1 client: the GET of `monitor status` and the JSON POSTs of the actions and alert sinks
//! (plain http, loopback or LAN; URLs are [`HttpUrl`]s, split once when parsed).

use crate::config::{HttpUrl, UrlError};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;

/// Why a GET failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    BadUrl(#[from] UrlError),
    /// A path that cannot be a request target.
    #[error("{0}: not a request path")]
    BadPath(String),
    #[error("connecting to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("{0}: {1}")]
    Http(String, hyper::Error),
    #[error("{0}: HTTP {1}")]
    Status(String, u16),
    /// A POST answered with a status other than 2xx, and how long the server asked to wait (`Retry-After`).
    #[error("{url}: HTTP {status}")]
    Refused { url: String, status: u16, retry_after: Option<std::time::Duration> },
    #[error("{0}: request timed out")]
    Timeout(String),
}

/// GETs `url` and returns the body as text; a non-2xx status is an error. 10 s timeout.
pub async fn get(url: &str) -> Result<String, ClientError> {
    tokio::time::timeout(std::time::Duration::from_secs(10), get_inner(url))
        .await
        .unwrap_or_else(|_| Err(ClientError::Timeout(url.to_string())))
}

async fn get_inner(url: &str) -> Result<String, ClientError> {
    let url: HttpUrl = url.parse()?;
    let (authority, path) = (url.authority(), url.path());
    let stream =
        tokio::net::TcpStream::connect(authority).await.map_err(|e| ClientError::Connect(authority.to_string(), e))?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(io).await.map_err(|e| ClientError::Http(url.to_string(), e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|_| ClientError::BadPath(url.to_string()))?;
    let resp = sender.send_request(req).await.map_err(|e| ClientError::Http(url.to_string(), e))?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(|e| ClientError::Http(url.to_string(), e))?.to_bytes();
    if !(200..300).contains(&status) {
        return Err(ClientError::Status(url.to_string(), status));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// POSTs a JSON body; any 2xx is success. 5 s timeout.
pub async fn post_json(url: &HttpUrl, body: &str) -> Result<(), ClientError> {
    let fut = async {
        let (authority, path) = (url.authority(), url.path());
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| ClientError::Connect(authority.to_string(), e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Http(url.to_string(), e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .map_err(|_| ClientError::BadPath(url.to_string()))?;
        let resp = sender.send_request(req).await.map_err(|e| ClientError::Http(url.to_string(), e))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, std::time::SystemTime::now()));
        // Drain the body so the server sees a complete exchange.
        let _ = resp.into_body().collect().await;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(ClientError::Refused { url: url.to_string(), status, retry_after })
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), fut)
        .await
        .unwrap_or_else(|_| Err(ClientError::Timeout(url.to_string())))
}

/// A `Retry-After` value (RFC 9110 §10.2.3): seconds, or an HTTP date (the wait until then from `now`).
pub fn retry_after(v: &str, now: std::time::SystemTime) -> Option<std::time::Duration> {
    let v = v.trim();
    match v.parse::<u64>() {
        Ok(secs) => Some(std::time::Duration::from_secs(secs)),
        Err(_) => httpdate::parse_http_date(v).ok().map(|at| at.duration_since(now).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00 UTC
        assert_eq!(retry_after("120", now), Some(std::time::Duration::from_secs(120)));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now), Some(std::time::Duration::from_secs(30)));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(std::time::Duration::ZERO));
        assert_eq!(retry_after("soon", now), None);
    }

    #[tokio::test]
    async fn an_https_url_is_refused_before_connecting() {
        let e = get("https://127.0.0.1:1/api").await.expect_err("https");
        assert!(matches!(e, ClientError::BadUrl(UrlError::Https(_))), "{e}");
        assert!(e.to_string().contains("https is not supported yet"), "{e}");
    }
}
