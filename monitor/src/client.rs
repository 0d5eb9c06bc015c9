//! A minimal HTTP/1.1 GET for `monitor status` (plain http, loopback or LAN agents).

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;

/// Why a GET failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}: only http://host:port/path URLs are supported")]
    BadUrl(String),
    #[error("connecting to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("{0}: {1}")]
    Http(String, hyper::Error),
    #[error("{0}: HTTP {1}")]
    Status(String, u16),
    #[error("{0}: request timed out")]
    Timeout(String),
}

/// Splits `http://host:port/path` into (`host:port`, `/path`).
pub fn split_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return None;
    }
    let authority = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Some((authority, path.to_string()))
}

/// GETs `url` and returns the body as text; a non-2xx status is an error. 10 s timeout.
pub async fn get(url: &str) -> Result<String, ClientError> {
    tokio::time::timeout(std::time::Duration::from_secs(10), get_inner(url))
        .await
        .unwrap_or_else(|_| Err(ClientError::Timeout(url.to_string())))
}

async fn get_inner(url: &str) -> Result<String, ClientError> {
    let (authority, path) = split_url(url).ok_or_else(|| ClientError::BadUrl(url.to_string()))?;
    let stream =
        tokio::net::TcpStream::connect(&authority).await.map_err(|e| ClientError::Connect(authority.clone(), e))?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(io).await.map_err(|e| ClientError::Http(url.to_string(), e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, authority.as_str())
        .body(Empty::<Bytes>::new())
        .map_err(|_| ClientError::BadUrl(url.to_string()))?;
    let resp = sender.send_request(req).await.map_err(|e| ClientError::Http(url.to_string(), e))?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(|e| ClientError::Http(url.to_string(), e))?.to_bytes();
    if !(200..300).contains(&status) {
        return Err(ClientError::Status(url.to_string(), status));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// POSTs a JSON body; any 2xx is success. 5 s timeout.
pub async fn post_json(url: &str, body: &str) -> Result<(), ClientError> {
    let fut = async {
        let (authority, path) = split_url(url).ok_or_else(|| ClientError::BadUrl(url.to_string()))?;
        let stream =
            tokio::net::TcpStream::connect(&authority).await.map_err(|e| ClientError::Connect(authority.clone(), e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Http(url.to_string(), e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .map_err(|_| ClientError::BadUrl(url.to_string()))?;
        let resp = sender.send_request(req).await.map_err(|e| ClientError::Http(url.to_string(), e))?;
        let status = resp.status().as_u16();
        // Drain the body so the server sees a complete exchange.
        let _ = resp.into_body().collect().await;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(ClientError::Status(url.to_string(), status))
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), fut)
        .await
        .unwrap_or_else(|_| Err(ClientError::Timeout(url.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(split_url("http://127.0.0.1:9464/api"), Some(("127.0.0.1:9464".into(), "/api".into())));
        assert_eq!(split_url("http://localhost"), Some(("localhost:80".into(), "/".into())));
        assert_eq!(split_url("http://[::1]:9/x"), Some(("[::1]:9".into(), "/x".into())));
        assert_eq!(split_url("https://x"), None);
        assert_eq!(split_url("http:///x"), None);
    }
}
