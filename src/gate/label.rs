//! Checks and quoting of names, shared by gate keys and cluster names.

/// Input echoed in an error: shortened and escaped, so that a hostile name
/// cannot fill a log line or a reply.
pub(crate) fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(64).flat_map(char::escape_default).collect();
    if s.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// Kubernetes namespaces (RFC 1123 label).
pub(crate) fn valid_k8s_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}
