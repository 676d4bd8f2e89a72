//! Redis's glob patterns for KEYS and SCAN MATCH: `*`, `?`, `[abc]`, `[^a-z]`, `\x`.

/// Whether `text` matches `pattern`, as Redis's `stringmatchlen` decides.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after the last `*`: backtracking to it is enough (no nested stars).
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, text[t])
                        && matched
                    {
                        p = next;
                        t += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == text[t] {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                literal => {
                    if literal == text[t] {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((star_p, star_t)) => {
                p = star_p + 1;
                t = star_t + 1;
                star = Some((star_p, star_t + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&byte| byte == b'*')
}

/// Matches one byte against the class starting at `pattern[open] == b'['`; returns whether it
/// matched and where the pattern continues.
fn class(pattern: &[u8], open: usize, byte: u8) -> Option<(bool, usize)> {
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            matched |= pattern[i + 1] == byte;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (low, high) = (pattern[i].min(pattern[i + 2]), pattern[i].max(pattern[i + 2]));
            matched |= (low..=high).contains(&byte);
            i += 3;
        } else {
            matched |= pattern[i] == byte;
            i += 1;
        }
    }
    // An unclosed class runs to the end of the pattern, as in Redis.
    Some((matched != negate, (i + 1).min(pattern.len())))
}

/// The literal text every match starts with: lets SCAN and KEYS read only that key range.
pub fn literal_prefix(pattern: &[u8]) -> String {
    let end = pattern
        .iter()
        .position(|byte| matches!(byte, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    String::from_utf8_lossy(&pattern[..end])
        .trim_end_matches(char::REPLACEMENT_CHARACTER)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_like_redis() {
        let yes = |pattern: &str, text: &str| matches(pattern.as_bytes(), text.as_bytes());
        assert!(yes("*", "anything"));
        assert!(yes("h?llo", "hello"));
        assert!(!yes("h?llo", "hllo"));
        assert!(yes("h*llo", "heeeello"));
        assert!(yes("h[ae]llo", "hallo"));
        assert!(!yes("h[ae]llo", "hillo"));
        assert!(yes("h[^e]llo", "hallo"));
        assert!(!yes("h[^e]llo", "hello"));
        assert!(yes("h[a-b]llo", "hbllo"));
        assert!(yes("user:*:name", "user:42:name"));
        assert!(!yes("user:*:name", "user:42:age"));
        assert!(yes("a\\*b", "a*b"));
        assert!(!yes("a\\*b", "axb"));
        assert!(yes("*a*b*", "xxaxxbxx"));
        assert_eq!(literal_prefix(b"user:*:name"), "user:");
        assert_eq!(literal_prefix(b"*"), "");
        assert_eq!(literal_prefix(b"plain"), "plain");
    }
}
