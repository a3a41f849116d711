//! A minimal HTTP/1.0 GET: enough for a node's `/readyz`, `/health` and
//! `/metrics`, without an HTTP client dependency in the library; over TLS
//! too, for a node with `[tls]`.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::KitError;

/// `GET path` from `addr`, with `Authorization: Bearer <token>` when given:
/// the status code and the body.
pub async fn http_get(addr: &str, path: &str, bearer: Option<&str>) -> Result<(u16, String), KitError> {
    let tcp = connect(addr, path).await?;
    get_over(tcp, addr, path, bearer).await
}

/// [`http_get`] over TLS with `tls` (the CA of the node, and a client
/// certificate when the node requires one); the server's name is the
/// address's host.
pub async fn https_get(
    addr: &str,
    path: &str,
    bearer: Option<&str>,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<(u16, String), KitError> {
    let fail = |detail: String| KitError::Http { addr: addr.to_string(), path: path.to_string(), detail };
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']);
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| fail(format!("server name {host}: {e}")))?;
    let tcp = connect(addr, path).await?;
    let tls = tokio::time::timeout(Duration::from_secs(3), tokio_rustls::TlsConnector::from(tls.clone()).connect(name, tcp))
        .await
        .map_err(|_| fail("TLS handshake timed out".into()))?
        .map_err(|e| fail(format!("TLS: {e}")))?;
    get_over(tls, addr, path, bearer).await
}

async fn connect(addr: &str, path: &str) -> Result<tokio::net::TcpStream, KitError> {
    let fail = |detail: String| KitError::Http { addr: addr.to_string(), path: path.to_string(), detail };
    tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| fail("connect timed out".into()))?
        .map_err(|e| fail(e.to_string()))
}

async fn get_over(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    addr: &str,
    path: &str,
    bearer: Option<&str>,
) -> Result<(u16, String), KitError> {
    let fail = |detail: String| KitError::Http { addr: addr.to_string(), path: path.to_string(), detail };
    let auth = bearer.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").as_bytes())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf))
        .await
        .map_err(|_| fail("no complete answer within 3 s".into()))?;
    // A TLS server may close without close_notify after the answer.
    if let Err(e) = read
        && buf.is_empty()
    {
        return Err(fail(e.to_string()));
    }
    parse_response(&String::from_utf8_lossy(&buf)).ok_or_else(|| fail("no status line".into()))
}

/// The status of `GET path`, 0 when the node cannot be reached or answers
/// nonsense: what readiness polls compare with 200.
pub async fn http_status(addr: &str, path: &str) -> u16 {
    http_get(addr, path, None).await.map_or(0, |(code, _)| code)
}

/// [`http_status`] over TLS.
pub async fn https_status(addr: &str, path: &str, tls: &Arc<rustls::ClientConfig>) -> u16 {
    https_get(addr, path, None, tls).await.map_or(0, |(code, _)| code)
}

fn parse_response(text: &str) -> Option<(u16, String)> {
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((code, body))
}

#[cfg(test)]
mod tests {
    use super::parse_response;

    #[test]
    fn responses_are_parsed() {
        let cases: [(&str, Option<(u16, &str)>); 5] = [
            ("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", Some((200, "ok"))),
            ("HTTP/1.1 503 Service Unavailable\r\n\r\n", Some((503, ""))),
            ("HTTP/1.0 401 Unauthorized", Some((401, ""))),
            ("", None),
            ("garbage here", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_response(text), want.map(|(c, b)| (c, b.to_string())), "{text:?}");
        }
    }
}
