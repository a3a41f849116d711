//! A minimal HTTP/1.0 GET: enough for a node's `/readyz`, `/health` and
//! `/metrics`, without an HTTP client dependency in the library.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::KitError;

/// `GET path` from `addr`, with `Authorization: Bearer <token>` when given:
/// the status code and the body.
pub async fn http_get(addr: &str, path: &str, bearer: Option<&str>) -> Result<(u16, String), KitError> {
    let fail = |detail: String| KitError::Http { addr: addr.to_string(), path: path.to_string(), detail };
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| fail("connect timed out".into()))?
        .map_err(|e| fail(e.to_string()))?;
    let auth = bearer.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").as_bytes())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf))
        .await
        .map_err(|_| fail("no complete answer within 3 s".into()))?
        .map_err(|e| fail(e.to_string()))?;
    parse_response(&String::from_utf8_lossy(&buf)).ok_or_else(|| fail("no status line".into()))
}

/// The status of `GET path`, 0 when the node cannot be reached or answers
/// nonsense: what readiness polls compare with 200.
pub async fn http_status(addr: &str, path: &str) -> u16 {
    http_get(addr, path, None).await.map_or(0, |(code, _)| code)
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
