//! An append's answer as a gRPC status: the code, and the `chitin-outcome`
//! trailers that say whether it was applied and who holds the shard. The
//! client crate's `classify` reads them back (and so does a node reading a
//! forward's answer); the test below holds the two to each other.

use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::node::journal::AppendError;
use crate::proto::outcome;

impl From<AppendError> for Status {
    fn from(e: AppendError) -> Status {
        let mut status = match &e {
            AppendError::Invalid(_) => return Status::invalid_argument(e.to_string()),
            AppendError::Reused(_) => return Status::already_exists(e.to_string()),
            AppendError::NotApplied { .. } => Status::unavailable(e.to_string()),
            AppendError::OutcomeUnknown(_) => Status::unknown(e.to_string()),
        };
        let meta = status.metadata_mut();
        match &e {
            AppendError::NotApplied { holder, .. } => {
                put(meta, outcome::KEY, outcome::NOT_APPLIED);
                if let Some(h) = holder {
                    put(meta, outcome::HOLDER, &h.name);
                    put(meta, outcome::HOLDER_ADDRESS, &h.address);
                }
            }
            _ => put(meta, outcome::KEY, outcome::UNKNOWN),
        }
        status
    }
}

/// Sets a trailer; a value that is no header value (a name with a
/// newline) is left out rather than failing the answer.
fn put(meta: &mut MetadataMap, key: &'static str, value: &str) {
    if let Ok(v) = value.parse() {
        meta.insert(key, v);
    }
}

#[cfg(test)]
mod tests {
    use chitin_client::outcome::{Attempt, Holder, classify};
    use tonic::Code;

    use super::*;

    /// Every answer a node gives is read by a client as what it means.
    #[test]
    fn every_answer_reads_back_as_its_meaning() {
        let holder = Holder { name: "node-02".into(), address: "10.0.0.2:50051".into() };
        let cases = [
            (
                AppendError::NotApplied { reason: "moved".into(), holder: Some(holder.clone()) },
                Attempt::NotApplied { reason: String::new(), holder: Some(holder) },
            ),
            (AppendError::not_applied("no holder"), Attempt::NotApplied { reason: String::new(), holder: None }),
            (AppendError::OutcomeUnknown("db".into()), Attempt::Unknown(String::new())),
            (AppendError::Invalid("bad".into()), Attempt::Refused { code: Code::InvalidArgument, message: String::new() }),
            (AppendError::Reused("again".into()), Attempt::Refused { code: Code::AlreadyExists, message: String::new() }),
        ];
        for (error, want) in cases {
            let text = error.to_string();
            let read = classify(&Status::from(error));
            // The message is the error's text, whatever the meaning.
            let blank = match read {
                Attempt::NotApplied { reason, holder } => {
                    assert_eq!(reason, text);
                    Attempt::NotApplied { reason: String::new(), holder }
                }
                Attempt::Unknown(why) => {
                    assert_eq!(why, text);
                    Attempt::Unknown(String::new())
                }
                Attempt::Refused { code, message } => {
                    assert_eq!(message, text);
                    Attempt::Refused { code, message: String::new() }
                }
            };
            assert_eq!(blank, want, "{text}");
        }
    }
}
