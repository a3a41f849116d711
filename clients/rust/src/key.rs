//! The key of a journal stream, as every node computes it.

/// 32-bit FNV-1a (offset basis 0x811c9dc5, prime 0x01000193): the key hash
/// of journal streams and of replica ids.
pub fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// The 32-bit key of a journal stream: FNV-1a 32 over the stream name's
/// UTF-8 bytes. `Ownership.Route(application, key)` names its shard's holder.
pub fn stream_key(stream: &str) -> u32 {
    fnv1a(stream.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // case: stream-key
    fn stream_key_is_fnv1a_32() {
        assert_eq!(stream_key(""), 0x811c_9dc5);
        assert_eq!(stream_key("a"), 0xe40c_292c);
        assert_eq!(stream_key("foobar"), 0xbf9c_f968);
    }
}
