//! `bare-hop --port 8080 --upstream 3001 --upstream 3002`: the least a hyper HTTP/1.1 hop can do, as a floor for
//! `cargo xtask bench proxy` to measure the front door against: one hyper client and server, nothing else.
//!
//! One thread per core, each a current-thread runtime accepting from the same listening socket (as the front door
//! does). Each client connection gets its own upstream connection, to the upstreams in turn, and every request on
//! it is sent there as it came: no routing, no pool, no header rewriting, no timeout, no retry, no shedding.
//! Not a proxy to use: it is only correct for the benchmark's GETs.

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

fn main() -> ExitCode {
    let (port, upstreams) = match monitor_tests::port_and_upstreams(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bare-hop: {e}");
            return ExitCode::from(2);
        }
    };
    let listener = match std::net::TcpListener::bind(("127.0.0.1", port)).and_then(|l| {
        l.set_nonblocking(true)?;
        Ok(l)
    }) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bare-hop: listening on 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let upstreams: Arc<[SocketAddr]> = upstreams.into();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut handles = Vec::new();
    for i in 0..threads {
        let l = match listener.try_clone() {
            Ok(l) => l,
            Err(e) => {
                eprintln!("bare-hop: {e}");
                return ExitCode::FAILURE;
            }
        };
        let ups = upstreams.clone();
        handles.push(std::thread::spawn(move || serve(l, ups, i)));
    }
    for h in handles {
        if let Ok(Err(e)) = h.join() {
            eprintln!("bare-hop: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn serve(listener: std::net::TcpListener, upstreams: Arc<[SocketAddr]>, first: usize) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        let mut next = first;
        loop {
            let (stream, _) = listener.accept().await?;
            let up = upstreams[next % upstreams.len()];
            next += 1;
            // A connection's end is not reported: wrk cuts its connections mid-request at the end of every run.
            tokio::spawn(async move {
                let _ = connection(stream, up).await;
            });
        }
    })
}

async fn connection(client: TcpStream, up: SocketAddr) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    client.set_nodelay(true)?;
    let upstream = TcpStream::connect(up).await?;
    upstream.set_nodelay(true)?;
    let (tx, conn) = hyper::client::conn::http1::handshake::<_, Incoming>(TokioIo::new(upstream)).await?;
    tokio::spawn(conn);
    // hyper's HTTP/1 server handles one request of a connection at a time: the lock is never contended.
    let tx: Arc<Mutex<SendRequest<Incoming>>> = Arc::new(Mutex::new(tx));
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let tx = tx.clone();
        async move {
            let r: Result<Response<Incoming>, hyper::Error> = tx.lock().await.send_request(req).await;
            r
        }
    });
    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(client), svc).await?;
    Ok(())
}
