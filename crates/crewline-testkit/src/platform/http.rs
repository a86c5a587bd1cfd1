//! A raw HTTP/1.1 client for a crew server's HTTP surface (`/health`, `/ready`, `/metrics`,
//! `/mcp`): the request is written byte for byte, so a test can send what a well-behaved
//! client library would not (a `Host` header of its choosing, a token in the query, odd
//! header lines), and the response is read as it came.
//!
//! Hand-written on purpose: an HTTP client crate would normalise exactly what these tests
//! need to control.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let addr = "127.0.0.1:8080".parse().expect("address");
//! let health = crewline_testkit::platform::http::get(addr, "/health").await?;
//! assert_eq!(health.status, 200);
//! # Ok(()) }
//! ```

use std::{io, net::SocketAddr, time::Duration};

use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// How long a request may take, from connecting to the end of the response.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP response, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers, in order, as sent.
    pub headers: Vec<(String, String)>,
    /// The body (after the blank line), as text.
    pub body: String,
}

impl HttpResponse {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.body)
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the HTTP exchange took too long")
}

/// `GET path` over a fresh connection (`Connection: close`).
pub async fn get(addr: SocketAddr, path: &str) -> io::Result<HttpResponse> {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await
}

/// Writes `raw` (a whole request) on a fresh connection and reads the response to the end
/// of the connection, within [`HTTP_TIMEOUT`]; a chunked body is returned decoded.
pub async fn request(addr: SocketAddr, raw: &str) -> io::Result<HttpResponse> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(raw.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, io::Error>(response)
    };
    let response = tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .map_err(|_| timed_out())??;
    // Lossy: a test asserting on the text sees a broken byte as U+FFFD rather than no answer.
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("a response without the end of its head"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(status_of)
        .ok_or_else(|| invalid("a response without a status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers.iter().any(|(key, value)| {
        key.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// The data of a chunked body (up to its last chunk, or as far as it is whole).
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size || !rest.is_char_boundary(size) {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Writes `raw` on a fresh connection and reads the response's head only (an answer may be
/// an event stream that stays open); returns the status line.
pub async fn request_head(addr: SocketAddr, raw: &str) -> io::Result<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(raw.as_bytes()).await?;
        let mut response = Vec::new();
        let mut buf = [0u8; 1024];
        while !response.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            response.extend_from_slice(&buf[..n]);
        }
        Ok::<_, io::Error>(response)
    };
    let response = tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .map_err(|_| timed_out())??;
    Ok(String::from_utf8_lossy(&response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// The code of a status line (`HTTP/1.1 200 OK`).
fn status_of(line: &str) -> Option<u16> {
    line.split(' ').nth(1)?.parse().ok()
}
