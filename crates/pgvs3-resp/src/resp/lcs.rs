//! LCS: the longest common subsequence of two string values, with Redis's dynamic programme
//! (a table of `(len(a) + 1) × (len(b) + 1)` lengths) and its way of walking it back into
//! matched ranges, last match first.

/// The most table cells one LCS may use (4 bytes each): 256 MiB, as Redis's default
/// proto-max-bulk-len bounds its table. Beyond, LCS is refused rather than run out of memory.
pub const MAX_CELLS: u64 = 64 << 20;

/// One matched range: `a[a.0..=a.1]` equals `b[b.0..=b.1]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    pub a: (usize, usize),
    pub b: (usize, usize),
}

impl Match {
    pub fn len(&self) -> usize {
        self.a.1 - self.a.0 + 1
    }
}

pub struct Lcs {
    /// The common subsequence itself.
    pub sequence: Vec<u8>,
    /// The matched ranges at least `min_len` long, from the end of the strings backwards.
    pub matches: Vec<Match>,
}

/// Whether two values are small enough for [`lcs`].
pub fn fits(a: usize, b: usize) -> bool {
    (a as u64 + 1).saturating_mul(b as u64 + 1) <= MAX_CELLS
}

/// The LCS of `a` and `b`, and its ranges of at least `min_len` (0: all). Callers check
/// [`fits`] first.
pub fn lcs(a: &[u8], b: &[u8], min_len: usize) -> Lcs {
    let width = b.len() + 1;
    let mut table = vec![0u32; (a.len() + 1) * width];
    let at = |i: usize, j: usize| i * width + j;
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[at(i, j)] = if a[i - 1] == b[j - 1] {
                table[at(i - 1, j - 1)] + 1
            } else {
                table[at(i - 1, j)].max(table[at(i, j - 1)])
            };
        }
    }
    let length = table[at(a.len(), b.len())] as usize;
    let mut sequence = vec![0u8; length];
    let mut matches = Vec::new();
    let (mut i, mut j, mut left) = (a.len(), b.len(), length);
    // The range being grown backwards, if any.
    let mut range: Option<Match> = None;
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            sequence[left - 1] = a[i - 1];
            match &mut range {
                None => {
                    range = Some(Match {
                        a: (i - 1, i - 1),
                        b: (j - 1, j - 1),
                    })
                }
                Some(current) if current.a.0 == i && current.b.0 == j => {
                    current.a.0 -= 1;
                    current.b.0 -= 1;
                }
                Some(_) => emit = true,
            }
            if range.is_some_and(|current| current.a.0 == 0 || current.b.0 == 0) {
                emit = true;
            }
            left -= 1;
            i -= 1;
            j -= 1;
        } else {
            if table[at(i - 1, j)] > table[at(i, j - 1)] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = range.is_some();
        }
        if emit
            && let Some(found) = range.take()
            && (min_len == 0 || found.len() >= min_len)
        {
            matches.push(found);
        }
    }
    Lcs { sequence, matches }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_of_redis_documentation() {
        let found = lcs(b"ohmytext", b"mynewtext", 0);
        assert_eq!(found.sequence, b"mytext");
        assert_eq!(
            found.matches,
            [Match { a: (4, 7), b: (5, 8) }, Match { a: (2, 3), b: (0, 1) },]
        );
        assert_eq!(
            lcs(b"ohmytext", b"mynewtext", 4).matches,
            [Match { a: (4, 7), b: (5, 8) }]
        );
        assert!(lcs(b"", b"abc", 0).sequence.is_empty());
        assert!(fits(1000, 1000) && !fits(1 << 20, 1 << 20));
    }
}
