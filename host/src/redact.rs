//! One redaction for everything the node shows: log lines, errors, `/health`,
//! `Admin.Status`, settings refusals and the chaos report.
//!
//! It masks, anywhere in a text: the password of a URL's user info
//! (`postgres://u:pw@h` → `postgres://u:***@h`), a `password=` query or
//! connection-string parameter, a bearer token after `Bearer `, and every
//! secret this process registered ([`register_secret`]: the node's tokens,
//! once read). Patterns catch secrets the process never saw in full (a URL
//! inside a driver's error); the registry catches a token in any wording.

use std::io::Write;
use std::sync::RwLock;

/// What a masked secret is shown as.
pub const MASK: &str = "***";

/// Secrets shorter than this are not registered: masking every occurrence of
/// a two-letter string would garble logs and hide nothing worth hiding. So
/// the settings refuse tokens shorter than this: every token is masked.
pub const MIN_SECRET: usize = 4;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Masks `secret` in everything [`redact`] sees from now on.
pub fn register_secret(secret: &str) {
    if secret.len() < MIN_SECRET {
        return;
    }
    let mut all = SECRETS.write().unwrap_or_else(|p| p.into_inner());
    if !all.iter().any(|s| s == secret) {
        all.push(secret.to_owned());
        // Longest first, so a secret containing another is masked whole.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// Masks the password of `url` (its user info's, or a `password=`
/// parameter's) in everything [`redact`] sees from now on, whatever the
/// wording it comes back in.
pub fn register_url_password(url: &str) {
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        if let Some((info, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = info.split_once(':')
        {
            register_secret(password);
        }
    }
    if let Some(at) = find_ci(url, "password=") {
        let tail = &url[at + "password=".len()..];
        register_secret(&tail[..tail.find(ends_value).unwrap_or(tail.len())]);
    }
}

/// `text` with every secret masked (see the module docs).
pub fn redact(text: &str) -> String {
    let mut out = mask_patterns(text);
    for secret in SECRETS.read().unwrap_or_else(|p| p.into_inner()).iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MASK);
        }
    }
    out
}

/// Characters that end a URL or a parameter value in running text.
fn ends_value(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ',' | ';' | ')' | ']' | '>' | '&')
}

fn mask_patterns(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        // The next of the three patterns, whichever comes first.
        let url = rest.find("://").map(|i| (i, 0));
        let param = find_ci(rest, "password=").map(|i| (i, 1));
        let bearer = rest.find("Bearer ").map(|i| (i, 2));
        let Some((at, kind)) = [url, param, bearer].into_iter().flatten().min() else {
            out.push_str(rest);
            return out;
        };
        match kind {
            0 => {
                let start = at + 3;
                out.push_str(&rest[..start]);
                let tail = &rest[start..];
                let end = tail.find(|c: char| ends_value(c) || c == '/' || c == '?').unwrap_or(tail.len());
                let authority = &tail[..end];
                match authority.rfind('@') {
                    Some(a) => {
                        let user_info = &authority[..a];
                        // A lone user name is no secret (drivers read it as the user).
                        match user_info.split_once(':') {
                            Some((user, _)) => {
                                out.push_str(user);
                                out.push(':');
                                out.push_str(MASK);
                            }
                            None => out.push_str(user_info),
                        }
                        out.push_str(&authority[a..]);
                    }
                    None => out.push_str(authority),
                }
                rest = &tail[end..];
            }
            1 => {
                let start = at + "password=".len();
                out.push_str(&rest[..start]);
                let tail = &rest[start..];
                let end = tail.find(ends_value).unwrap_or(tail.len());
                if end > 0 {
                    out.push_str(MASK);
                }
                rest = &tail[end..];
            }
            _ => {
                let start = at + "Bearer ".len();
                out.push_str(&rest[..start]);
                let tail = &rest[start..];
                let end = tail.find(ends_value).unwrap_or(tail.len());
                // `Bearer <token>` as a placeholder in a message is no secret.
                if end > 0 && !tail.starts_with('<') {
                    out.push_str(MASK);
                    rest = &tail[end..];
                } else {
                    rest = tail;
                }
            }
        }
    }
}

/// The byte offset of `needle` (ASCII) in `hay`, ignoring ASCII case.
fn find_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    (0..h.len().saturating_sub(n.len() - 1)).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Standard error, with every line [`redact`]ed: the node's log writer.
///
/// The formatter writes one event per `write` call; a partial line is
/// redacted on its own, which can only leave a secret split across two
/// writes unmasked in the registry check, never in the patterns' prefixes.
#[derive(Clone, Copy, Debug, Default)]
pub struct RedactingStderr;

impl Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactingStderr {
    type Writer = RedactingStderr;

    fn make_writer(&'a self) -> RedactingStderr {
        RedactingStderr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_masked_wherever_they_appear() {
        let cases = [
            ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
            (
                "error: cannot reach mysql://root:s3cret@10.0.0.1:3306/test (timeout)",
                "error: cannot reach mysql://root:***@10.0.0.1:3306/test (timeout)",
            ),
            ("redis://:secret@redis:6379/0", "redis://:***@redis:6379/0"),
            ("rediss://user:secret@redis:6380", "rediss://user:***@redis:6380"),
            ("url=\"postgres://a:b@h\" and redis://c:d@e", "url=\"postgres://a:***@h\" and redis://c:***@e"),
            ("postgres://h/db?user=u&password=pw&sslmode=require", "postgres://h/db?user=u&password=***&sslmode=require"),
            ("host=h PASSWORD=pw dbname=x", "host=h PASSWORD=*** dbname=x"),
            ("authorization: Bearer abc.def", "authorization: Bearer ***"),
            ("needs `authorization: Bearer <[api] admin_token>`", "needs `authorization: Bearer <[api] admin_token>`"),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://u@h", "redis://u@h"),
            ("postgres://postgres@127.0.0.1:5432/db", "postgres://postgres@127.0.0.1:5432/db"),
            ("plain text, no secrets", "plain text, no secrets"),
            ("", ""),
            ("ends with ://", "ends with ://"),
            ("password=", "password="),
        ];
        for (text, want) in cases {
            assert_eq!(mask_patterns(text), want, "{text}");
        }
    }

    #[test]
    fn registered_secrets_are_masked_in_any_wording() {
        register_secret("tok-registered-1234");
        register_secret("ab");
        assert_eq!(redact("the token tok-registered-1234 was wrong"), "the token *** was wrong");
        // The settings refuse such a token (`settings::well_formed`).
        assert_eq!(redact("ab stays"), "ab stays", "too short to register");
        register_url_password("postgres://u:pw-in-a-url-77@h/db");
        register_url_password("mysql://h/db?password=pw-param-88&x=1");
        assert_eq!(redact("auth failed (pw-in-a-url-77, pw-param-88)"), "auth failed (***, ***)");
    }
}
