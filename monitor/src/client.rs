//! A minimal HTTP/1.1 client: the GET of `monitor status` and the JSON POSTs of the actions and alert sinks, over
//! plain http or TLS (`https://`: the host's CA store, plus a private CA when the config names one). URLs are
//! [`HttpUrl`]s, split once when parsed.

use crate::config::{HttpUrl, UrlError};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    BadUrl(#[from] UrlError),
    /// A path that cannot be a request target.
    #[error("{0}: not a request path")]
    BadPath(String),
    #[error("connecting to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("TLS with {0}: {1}")]
    Tls(String, std::io::Error),
    #[error("{0}: {1}")]
    Http(String, hyper::Error),
    #[error("{0}: HTTP {1}")]
    Status(String, u16),
    /// A POST answered with a status other than 2xx, and how long the server asked to wait (`Retry-After`).
    #[error("{url}: HTTP {status}")]
    Refused { url: String, status: u16, retry_after: Option<Duration> },
    #[error("{0}: request timed out")]
    Timeout(String),
    /// The CA file or the credentials could not be read.
    #[error("{0}")]
    Setup(String),
}

/// How requests are sent: the certificates an `https://` server may present, and the `Authorization` to send.
#[derive(Clone)]
pub struct Client {
    tls: Arc<rustls::ClientConfig>,
    authorization: Option<hyper::header::HeaderValue>,
}

impl Client {
    /// A client trusting the host's CA store and, when given, the PEM certificates in `ca_file` (a private CA),
    /// sending `authorization` (`Bearer …`, `Basic …`) with every request.
    pub fn new(ca_file: Option<&Path>, authorization: Option<&str>) -> Result<Client, ClientError> {
        let mut roots = rustls::RootCertStore::empty();
        // Certificates of the host's store that rustls cannot use are skipped, as every TLS client does.
        let native = rustls_native_certs::load_native_certs();
        let (_added, _skipped) = roots.add_parsable_certificates(native.certs);
        if let Some(file) = ca_file {
            use rustls_pki_types::pem::PemObject;
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(file)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| ClientError::Setup(format!("{}: {e}", file.display())))?;
            if certs.is_empty() {
                return Err(ClientError::Setup(format!("{}: no PEM certificate in it", file.display())));
            }
            for c in certs {
                roots.add(c).map_err(|e| ClientError::Setup(format!("{}: {e}", file.display())))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Setup(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let authorization = match authorization {
            Some(a) => Some(
                hyper::header::HeaderValue::from_str(a)
                    .map_err(|_| ClientError::Setup("the credentials cannot be sent in a header".into()))?,
            ),
            None => None,
        };
        Ok(Client { tls: Arc::new(tls), authorization })
    }

    /// The client of the requests that name no CA or credentials (the host's CA store), built once.
    pub fn plain() -> Result<&'static Client, ClientError> {
        static PLAIN: OnceLock<Result<Client, String>> = OnceLock::new();
        let built = PLAIN.get_or_init(|| Client::new(None, None).map_err(|e| e.to_string()));
        built.as_ref().map_err(|e| ClientError::Setup(e.clone()))
    }

    /// Sends `req` to `url` and returns the answer.
    async fn send(
        &self,
        url: &HttpUrl,
        mut req: hyper::Request<Full<Bytes>>,
    ) -> Result<hyper::Response<Incoming>, ClientError> {
        let authority = url.authority();
        if let Some(a) = &self.authorization {
            req.headers_mut().insert(hyper::header::AUTHORIZATION, a.clone());
        }
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| ClientError::Connect(authority.to_string(), e))?;
        if !url.tls() {
            return exchange(stream, req, url).await;
        }
        let name = rustls_pki_types::ServerName::try_from(url.host().to_string())
            .map_err(|e| ClientError::Tls(authority.to_string(), std::io::Error::other(e)))?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, stream)
            .await
            .map_err(|e| ClientError::Tls(authority.to_string(), e))?;
        exchange(tls, req, url).await
    }

    /// GETs `url` and returns the body as text; a non-2xx status is an error. 10 s timeout.
    pub async fn get(&self, url: &str) -> Result<String, ClientError> {
        let fut = async {
            let url: HttpUrl = url.parse()?;
            let req = hyper::Request::get(url.path())
                .header(hyper::header::HOST, url.authority())
                .body(Full::new(Bytes::new()))
                .map_err(|_| ClientError::BadPath(url.to_string()))?;
            let resp = self.send(&url, req).await?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.map_err(|e| ClientError::Http(url.to_string(), e))?.to_bytes();
            if !(200..300).contains(&status) {
                return Err(ClientError::Status(url.to_string(), status));
            }
            Ok(String::from_utf8_lossy(&body).into_owned())
        };
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .unwrap_or_else(|_| Err(ClientError::Timeout(url.to_string())))
    }

    /// POSTs a JSON body; any 2xx is success. 5 s timeout.
    pub async fn post_json(&self, url: &HttpUrl, body: &str) -> Result<(), ClientError> {
        let fut = async {
            let req = hyper::Request::post(url.path())
                .header(hyper::header::HOST, url.authority())
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .map_err(|_| ClientError::BadPath(url.to_string()))?;
            let resp = self.send(url, req).await?;
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
        tokio::time::timeout(Duration::from_secs(5), fut)
            .await
            .unwrap_or_else(|_| Err(ClientError::Timeout(url.to_string())))
    }
}

/// One request on a new connection over `io`.
async fn exchange<I>(
    io: I,
    req: hyper::Request<Full<Bytes>>,
    url: &HttpUrl,
) -> Result<hyper::Response<Incoming>, ClientError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| ClientError::Http(url.to_string(), e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| ClientError::Http(url.to_string(), e))
}

/// GETs `url` with the plain client (see [`Client::get`]).
pub async fn get(url: &str) -> Result<String, ClientError> {
    Client::plain()?.get(url).await
}

/// POSTs a JSON body with the plain client (see [`Client::post_json`]).
pub async fn post_json(url: &HttpUrl, body: &str) -> Result<(), ClientError> {
    Client::plain()?.post_json(url, body).await
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
    async fn a_server_that_speaks_no_tls_fails_the_handshake_it_does_not_hang() {
        // A plain TCP listener that closes at once: the TLS handshake fails with an error naming the address.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        });
        let e = get(&format!("https://{addr}/api")).await.expect_err("no TLS there");
        assert!(matches!(e, ClientError::Tls(..)), "{e}");
        assert!(e.to_string().starts_with(&format!("TLS with {addr}")), "{e}");
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("monitor-ca-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("empty.pem");
        let _ = std::fs::write(&file, "not a certificate\n");
        let e = Client::new(Some(&file), None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("empty.pem") && e.contains("no PEM certificate"), "{e}");
        let e = Client::new(Some(&dir.join("missing.pem")), None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("missing.pem"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
