//! A minimal HTTP/1.1 client: the bounded GETs of `monitor status` and the fleet poller, and the JSON POSTs of the
//! actions and alert sinks, over plain http or TLS (`https://`: the host's CA store, plus a private CA when the
//! config names one). URLs are [`HttpUrl`]s, split once when parsed. Each request has a connection of its own,
//! driven beside the answer and dropped with it: when a request ends or times out, so does its connection.

use crate::config::{HttpUrl, UrlError};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How much a GET may cost: how long it may take, connection included, and the largest body read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The whole request, from connecting to the body's end.
    pub timeout: Duration,
    /// The largest body read; a larger one is an error, not read further.
    pub max_body: usize,
}

/// The bounds of [`Client::get`] (`monitor status`): 10 s and 16 MiB.
pub(crate) const GET_BOUNDS: Bounds = Bounds { timeout: Duration::from_secs(10), max_body: 16 << 20 };
/// How long a POST may take, connection included.
pub(crate) const POST_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// No complete answer within the time limit (the second field).
    #[error("{0}: no answer within {secs} s", secs = .1.as_secs_f64())]
    Timeout(String, Duration),
    /// A body longer than the bound, cut off there.
    #[error("{url}: an answer over {max} bytes")]
    TooLarge { url: String, max: usize },
    /// A `Content-Length` over the bound, not read at all.
    #[error("{url}: an answer of {length} bytes, over the bound of {max}")]
    TooLong { url: String, length: u64, max: usize },
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

    /// Sends `req` to `url` on a new connection and returns what `read` makes of the answer.
    async fn send<T, F>(
        &self,
        url: &HttpUrl,
        mut req: hyper::Request<Full<Bytes>>,
        read: impl FnOnce(hyper::Response<Incoming>) -> F,
    ) -> Result<T, ClientError>
    where
        F: Future<Output = Result<T, ClientError>>,
    {
        let authority = url.authority();
        if let Some(a) = &self.authorization {
            req.headers_mut().insert(hyper::header::AUTHORIZATION, a.clone());
        }
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| ClientError::Connect(authority.to_string(), e))?;
        if !url.tls() {
            return exchange(stream, req, url, read).await;
        }
        let name = rustls_pki_types::ServerName::try_from(url.host().to_string())
            .map_err(|e| ClientError::Tls(authority.to_string(), std::io::Error::other(e)))?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, stream)
            .await
            .map_err(|e| ClientError::Tls(authority.to_string(), e))?;
        exchange(tls, req, url, read).await
    }

    /// GETs `url` within `bounds`: the body of a 2xx answer that comes complete within `bounds.timeout`
    /// (connection included) and holds at most `bounds.max_body` bytes. Another status is an error, its body unread.
    pub async fn fetch(&self, url: &HttpUrl, bounds: Bounds) -> Result<Bytes, ClientError> {
        let work = async {
            let req = hyper::Request::get(url.path())
                .header(hyper::header::HOST, url.authority())
                .body(Full::new(Bytes::new()))
                .map_err(|_| ClientError::BadPath(url.to_string()))?;
            self.send(url, req, |resp| bounded_body(resp, url, bounds.max_body)).await
        };
        tokio::time::timeout(bounds.timeout, work)
            .await
            .unwrap_or_else(|_| Err(ClientError::Timeout(url.to_string(), bounds.timeout)))
    }

    /// GETs `url` within [`GET_BOUNDS`] and returns the body as text (see [`Client::fetch`]).
    pub async fn get(&self, url: &str) -> Result<String, ClientError> {
        let url: HttpUrl = url.parse()?;
        let body = self.fetch(&url, GET_BOUNDS).await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// POSTs a JSON body; any 2xx is success, another status a [`ClientError::Refused`] with the server's
    /// `Retry-After`. [`POST_TIMEOUT`].
    pub(crate) async fn post_json(&self, url: &HttpUrl, body: &str) -> Result<(), ClientError> {
        self.post_json_with(url, body, &[]).await
    }

    /// [`Client::post_json`] with more headers (name, value): a value that cannot be sent in a header is
    /// [`ClientError::Setup`].
    pub(crate) async fn post_json_with(
        &self,
        url: &HttpUrl,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Result<(), ClientError> {
        let work = async {
            let mut req = hyper::Request::post(url.path())
                .header(hyper::header::HOST, url.authority())
                .header(hyper::header::CONTENT_TYPE, "application/json");
            for (name, value) in headers {
                let value = hyper::header::HeaderValue::from_str(value)
                    .map_err(|_| ClientError::Setup(format!("{name}: cannot be sent in a header")))?;
                req = req.header(*name, value);
            }
            let req = req
                .body(Full::new(Bytes::from(body.to_string())))
                .map_err(|_| ClientError::BadPath(url.to_string()))?;
            self.send(url, req, |resp| posted(resp, url)).await
        };
        tokio::time::timeout(POST_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| Err(ClientError::Timeout(url.to_string(), POST_TIMEOUT)))
    }
}

/// One request on a new connection over `io`, its answer read by `read`. The connection is driven beside the
/// answer and dropped with it, when `read` is done or when a time limit drops this future: no task is left
/// holding it. Should the connection end first, the answer has what it sent.
async fn exchange<I, T, F>(
    io: I,
    req: hyper::Request<Full<Bytes>>,
    url: &HttpUrl,
    read: impl FnOnce(hyper::Response<Incoming>) -> F,
) -> Result<T, ClientError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    F: Future<Output = Result<T, ClientError>>,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| ClientError::Http(url.to_string(), e))?;
    let answer = async move {
        let resp = sender.send_request(req).await.map_err(|e| ClientError::Http(url.to_string(), e))?;
        // No second request: the connection ends once this answer is read.
        drop(sender);
        read(resp).await
    };
    let (mut answer, mut conn) = (std::pin::pin!(answer), std::pin::pin!(conn));
    tokio::select! {
        got = &mut answer => got,
        _ = &mut conn => answer.await,
    }
}

/// The body of a 2xx answer, at most `max` bytes of it; another status is an error, its body unread.
async fn bounded_body(resp: hyper::Response<Incoming>, url: &HttpUrl, max: usize) -> Result<Bytes, ClientError> {
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(ClientError::Status(url.to_string(), status));
    }
    let length = resp.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(length) = length.filter(|n| *n > max as u64) {
        return Err(ClientError::TooLong { url: url.to_string(), length, max });
    }
    match Limited::new(resp.into_body(), max).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) => match e.downcast::<hyper::Error>() {
            Ok(e) => Err(ClientError::Http(url.to_string(), *e)),
            // The only other error `Limited` makes: the bound reached.
            Err(_) => Err(ClientError::TooLarge { url: url.to_string(), max }),
        },
    }
}

/// A POST's outcome: Ok for a 2xx, else the status and the wait the server asked for.
async fn posted(resp: hyper::Response<Incoming>, url: &HttpUrl) -> Result<(), ClientError> {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(hyper::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after(v, std::time::SystemTime::now()));
    // Read the body to its end, keeping none of it, so the server sees a complete exchange.
    let mut body = resp.into_body();
    while let Some(Ok(_)) = body.frame().await {}
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(ClientError::Refused { url: url.to_string(), status, retry_after })
    }
}

/// GETs `url` within `bounds` with the plain client (see [`Client::fetch`]).
pub async fn fetch(url: &HttpUrl, bounds: Bounds) -> Result<Bytes, ClientError> {
    Client::plain()?.fetch(url, bounds).await
}

/// GETs `url` with the plain client (see [`Client::get`]).
pub async fn get(url: &str) -> Result<String, ClientError> {
    Client::plain()?.get(url).await
}

/// POSTs a JSON body with the plain client (see [`Client::post_json`]).
#[cfg(test)]
async fn post_json(url: &HttpUrl, body: &str) -> Result<(), ClientError> {
    Client::plain()?.post_json(url, body).await
}

/// POSTs a JSON body with more headers with the plain client (see [`Client::post_json_with`]).
pub(crate) async fn post_json_with(url: &HttpUrl, body: &str, headers: &[(&str, &str)]) -> Result<(), ClientError> {
    Client::plain()?.post_json_with(url, body, headers).await
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

    /// A server on loopback for one connection: it reads the request, writes `answer` (nothing when None), then
    /// reads on until the client closes. The receiver says whether it closed within 5 s.
    async fn once(answer: Option<Vec<u8>>) -> (std::net::SocketAddr, tokio::sync::oneshot::Receiver<bool>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let (closed, seen) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let Ok((mut s, _)) = l.accept().await else { return };
            let mut buf = vec![0u8; 64 * 1024];
            let _ = s.read(&mut buf).await;
            if let Some(a) = answer {
                let _ = s.write_all(&a).await;
            }
            // Whatever else the client sends (a POST's body) is read and dropped; EOF or a reset is its close.
            let eof = async {
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            let _ = closed.send(tokio::time::timeout(Duration::from_secs(5), eof).await.is_ok());
        });
        (addr, seen)
    }

    fn url(addr: std::net::SocketAddr) -> HttpUrl {
        format!("http://{addr}/x").parse().expect("url")
    }

    const SMALL: Bounds = Bounds { timeout: Duration::from_secs(5), max_body: 1000 };

    #[tokio::test]
    async fn a_body_within_the_bound_is_read_and_the_connection_closed() {
        let (addr, closed) = once(Some(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".to_vec())).await;
        assert_eq!(fetch(&url(addr), SMALL).await.expect("an answer"), &b"hello"[..]);
        assert_eq!(closed.await, Ok(true), "the connection outlived the answer");
    }

    #[tokio::test]
    async fn a_body_over_the_bound_is_an_error_and_not_read_further() {
        // Announced too large: refused before reading it.
        let (addr, closed) = once(Some(b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n".to_vec())).await;
        let e = fetch(&url(addr), SMALL).await.expect_err("too long");
        assert!(matches!(e, ClientError::TooLong { length: 5000, max: 1000, .. }), "{e}");
        assert_eq!(e.to_string(), format!("http://{addr}/x: an answer of 5000 bytes, over the bound of 1000"));
        assert_eq!(closed.await, Ok(true));

        // Not announced (chunked): cut at the bound, and the connection closed with the rest unread.
        let mut chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..10 {
            chunked.extend_from_slice(b"1f4\r\n");
            chunked.extend(std::iter::repeat_n(b'x', 500));
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let (addr, closed) = once(Some(chunked)).await;
        let e = fetch(&url(addr), SMALL).await.expect_err("too large");
        assert!(matches!(e, ClientError::TooLarge { max: 1000, .. }), "{e}");
        assert_eq!(e.to_string(), format!("http://{addr}/x: an answer over 1000 bytes"));
        assert_eq!(closed.await, Ok(true));
    }

    #[tokio::test]
    async fn a_silent_server_is_given_up_at_the_timeout_and_its_connection_closed() {
        let (addr, closed) = once(None).await;
        let t = std::time::Instant::now();
        let bounds = Bounds { timeout: Duration::from_millis(300), max_body: 1000 };
        let e = fetch(&url(addr), bounds).await.expect_err("silent");
        assert!(matches!(e, ClientError::Timeout(_, d) if d == bounds.timeout), "{e}");
        assert_eq!(e.to_string(), format!("http://{addr}/x: no answer within 0.3 s"));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // No task holds the connection past the timeout: the server sees it closed.
        assert_eq!(closed.await, Ok(true), "the connection outlived the timeout");
    }

    #[tokio::test]
    async fn a_status_other_than_2xx_is_an_error_naming_the_url() {
        let (addr, closed) = once(Some(b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\nno!".to_vec())).await;
        let e = get(url(addr).as_str()).await.expect_err("404");
        assert!(matches!(e, ClientError::Status(_, 404)), "{e}");
        assert_eq!(e.to_string(), format!("http://{addr}/x: HTTP 404"));
        assert_eq!(closed.await, Ok(true));
    }

    #[tokio::test]
    async fn a_refused_post_says_when_to_retry_and_closes_its_connection() {
        let answer = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 7\r\ncontent-length: 4\r\n\r\nbusy";
        let (addr, closed) = once(Some(answer.to_vec())).await;
        let e = post_json(&url(addr), "{}").await.expect_err("503");
        match e {
            ClientError::Refused { status, retry_after, .. } => {
                assert_eq!((status, retry_after), (503, Some(Duration::from_secs(7))))
            }
            e => panic!("not a refusal: {e}"),
        }
        assert_eq!(closed.await, Ok(true));

        let (addr, closed) = once(Some(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec())).await;
        post_json(&url(addr), "{}").await.expect("204 is success");
        assert_eq!(closed.await, Ok(true));
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
