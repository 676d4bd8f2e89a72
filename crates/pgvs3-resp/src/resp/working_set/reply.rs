//! Whether a predicted reply surely stays within its call's `reply_limit`.

use bytes::Bytes;

use crate::store::TypedCall;

/// Whether `items` (and `scores` scores) are surely answered whole. PostgreSQL cuts a reply
/// whose datum takes about twice the limit (store/types.rs `TypedSql`: an array element takes
/// up to 7 bytes besides its data, a score 8); one within a quarter of the limit, counting 16
/// bytes an element besides its data, never is. A cut row answers no elements, so predicting a
/// reply near the limit could only cost a rerun.
pub(super) fn within_limit(call: &TypedCall, items: &[Option<Bytes>], scores: usize) -> bool {
    let Some(limit) = call.reply_limit else {
        return true;
    };
    let bytes = items
        .iter()
        .map(|item| item.as_ref().map_or(0, Bytes::len) as u64 + 16)
        .sum::<u64>()
        + 16 * scores as u64;
    u64::try_from(limit).is_ok_and(|limit| bytes <= limit / 4)
}
