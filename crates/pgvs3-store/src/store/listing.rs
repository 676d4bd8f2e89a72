//! Listing keys in UTF-8 byte order with prefix, delimiter and resumable pages.

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::{BucketInfo, Store, StoreError, StoreResult};

pub const MAX_KEYS: usize = 1000;

#[derive(Debug, Clone, Default)]
pub struct ListRequest {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// Start after this key (S3's `start-after` / `marker`); unused with a continuation token.
    pub start_after: Option<String>,
    /// An opaque token from a previous page's [`ListPage::next_token`].
    pub continuation: Option<String>,
    pub max_keys: usize,
}

#[derive(Debug, Clone)]
pub struct ListedObject {
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub last_modified: SystemTime,
}

#[derive(Debug, Clone, Default)]
pub struct ListPage {
    pub objects: Vec<ListedObject>,
    pub common_prefixes: Vec<String>,
    /// Set when the listing was cut at `max_keys`: where the next page starts.
    pub next_token: Option<String>,
    /// The last key or common prefix returned (S3's `NextMarker`).
    pub last_entry: Option<String>,
}

/// Where a page resumes: after a key, or after every key under a common prefix.
enum Resume {
    AfterKey(String),
    AfterPrefix(String),
}

impl Resume {
    fn encode(&self) -> String {
        let (tag, text) = match self {
            Resume::AfterKey(key) => ('k', key),
            Resume::AfterPrefix(prefix) => ('p', prefix),
        };
        URL_SAFE_NO_PAD.encode(format!("{tag}{text}"))
    }

    fn decode(token: &str) -> StoreResult<Resume> {
        let invalid = || StoreError::InvalidArgument("the continuation token provided is incorrect".into());
        let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
        let text = String::from_utf8(raw).map_err(|_| invalid())?;
        let mut chars = text.chars();
        match chars.next() {
            Some('k') => Ok(Resume::AfterKey(chars.as_str().to_owned())),
            Some('p') => Ok(Resume::AfterPrefix(chars.as_str().to_owned())),
            _ => Err(invalid()),
        }
    }
}

/// The smallest string greater than every string that starts with `prefix` (in byte order),
/// or `None` when there is none.
pub(super) fn prefix_successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (last as u32 + 1..=char::MAX as u32).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// How many rows a listing's next query fetches. Keys taken one by one want the whole page in
/// one query; but once a query ends inside a common prefix the listing jumps past it, and the
/// rows under the next prefix are skipped too, so a full window there would read a page of rows
/// per prefix to keep one (a thousand prefixes of a thousand keys: a million rows for one
/// page). After a jump the window is small, and it doubles back while keys come one by one.
pub(super) struct Window {
    rows: i64,
    full: i64,
}

impl Window {
    /// Rows fetched after a jump past a common prefix.
    const AFTER_JUMP: i64 = 32;

    pub(super) fn new(full: i64) -> Window {
        Window { rows: full, full }
    }

    pub(super) fn rows(&self) -> i64 {
        self.rows
    }

    /// The query just read ended inside a common prefix: the next one starts past it.
    pub(super) fn jumped(&mut self) {
        self.rows = Self::AFTER_JUMP.min(self.full);
    }

    /// The query just read ended on a key of its own: the next one resumes after it.
    pub(super) fn walked(&mut self) {
        self.rows = (self.rows * 2).min(self.full);
    }
}

/// The listing SQL of one namespace.
#[derive(Debug)]
pub(super) struct ListingSql {
    list: String,
    /// Below `$5` too: the end of the listed prefix.
    list_below: String,
}

impl ListingSql {
    pub(super) fn new(ns: &str) -> ListingSql {
        let list = format!(
            "SELECT key, size, etag, last_modified FROM {ns}.objects
              WHERE bucket_id = $1 AND key > $2 AND key >= $3
                AND (expires_at IS NULL OR expires_at > now())"
        );
        ListingSql {
            list_below: format!("{list} AND key < $5 ORDER BY key LIMIT $4"),
            list: format!("{list} ORDER BY key LIMIT $4"),
        }
    }
}

impl Store {
    #[tracing::instrument(name = "store", skip_all, fields(otel.name = "store list_objects", otel.kind = "client", db.system = "postgresql"))]
    pub(crate) async fn list_objects(&self, bucket: &BucketInfo, request: &ListRequest) -> StoreResult<ListPage> {
        if request.max_keys == 0 {
            return Ok(ListPage::default());
        }
        let delimiter = request.delimiter.as_deref().filter(|d| !d.is_empty());
        // Bounds of the next query: key > after AND key >= from (AND key < below).
        let mut after = String::new();
        let mut from = request.prefix.clone();
        match resume_point(request, delimiter)? {
            Some(Resume::AfterKey(key)) => after = key,
            Some(Resume::AfterPrefix(prefix)) => match prefix_successor(&prefix) {
                Some(next) => from = from.max(next),
                None => return Ok(ListPage::default()),
            },
            None => {}
        }
        let below = (!request.prefix.is_empty())
            .then(|| prefix_successor(&request.prefix))
            .flatten();
        let max_keys = request.max_keys.min(MAX_KEYS);
        let mut window = Window::new((max_keys + 1).clamp(64, MAX_KEYS + 1) as i64);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(if below.is_some() {
                &bucket.sql.listing.list_below
            } else {
                &bucket.sql.listing.list
            })
            .await?;
        let mut filling = Filling {
            prefix: &request.prefix,
            delimiter,
            max_keys,
            page: ListPage::default(),
            last_prefix: None,
            entries: 0,
        };
        'pages: loop {
            let batch = window.rows();
            let rows = match &below {
                Some(below) => {
                    client
                        .query(&statement, &[&bucket.id, &after, &from, &batch, below])
                        .await?
                }
                None => client.query(&statement, &[&bucket.id, &after, &from, &batch]).await?,
            };
            let exhausted = (rows.len() as i64) < batch;
            for row in &rows {
                if !filling.take(row) {
                    break 'pages;
                }
            }
            if exhausted {
                break;
            }
            // Resume after the last row; skip the rest of a common prefix in one jump.
            let last_key: String = rows.last().map(|row| row.get("key")).unwrap_or_default();
            match &filling.last_prefix {
                Some(common) if last_key.starts_with(common.as_str()) => match prefix_successor(common) {
                    Some(next) => {
                        from = from.max(next);
                        window.jumped();
                    }
                    None => break,
                },
                _ => {
                    after = last_key;
                    window.walked();
                }
            }
        }
        Ok(filling.page)
    }
}

/// Where a listing starts. A continuation token alone says where a later page resumes: S3
/// applies `start-after` to the first page only, and clients (minio-py) send it again with
/// every token.
fn resume_point(request: &ListRequest, delimiter: Option<&str>) -> StoreResult<Option<Resume>> {
    Ok(match request.continuation.as_deref() {
        Some(token) => Some(Resume::decode(token)?),
        None => request.start_after.clone().map(|marker| {
            // A marker that is itself a common prefix (what S3 hands out as NextMarker)
            // resumes after every key under it.
            let rolls_up = delimiter.is_some_and(|d| {
                marker
                    .strip_prefix(request.prefix.as_str())
                    .and_then(|rest| rest.find(d).map(|at| at + d.len() == rest.len()))
                    .unwrap_or(false)
            });
            if rolls_up {
                Resume::AfterPrefix(marker)
            } else {
                Resume::AfterKey(marker)
            }
        }),
    })
}

/// A page of ListObjects as its rows come in.
struct Filling<'a> {
    prefix: &'a str,
    delimiter: Option<&'a str>,
    max_keys: usize,
    page: ListPage,
    /// The common prefix taken last: the keys under it roll up into it.
    last_prefix: Option<String>,
    entries: usize,
}

impl Filling<'_> {
    /// Takes a row: an object, or the common prefix it rolls up into. False when the page is
    /// done: full (its next token then set) or past the prefix.
    fn take(&mut self, row: &tokio_postgres::Row) -> bool {
        let key: String = row.get("key");
        if !key.starts_with(self.prefix) {
            return false;
        }
        let rolled_up = self.delimiter.and_then(|d| {
            let rest = &key[self.prefix.len()..];
            rest.find(d)
                .map(|at| key[..self.prefix.len() + at + d.len()].to_owned())
        });
        if let Some(common) = rolled_up {
            if self.last_prefix.as_deref() == Some(common.as_str()) {
                return true;
            }
            if self.entries == self.max_keys {
                self.page.next_token = Some(last_resume(&self.page, &self.last_prefix).encode());
                return false;
            }
            self.entries += 1;
            self.page.last_entry = Some(common.clone());
            self.page.common_prefixes.push(common.clone());
            self.last_prefix = Some(common);
            return true;
        }
        if self.entries == self.max_keys {
            self.page.next_token = Some(last_resume(&self.page, &self.last_prefix).encode());
            return false;
        }
        self.entries += 1;
        self.page.last_entry = Some(key.clone());
        self.page.objects.push(ListedObject {
            size: row.get::<_, i64>("size") as u64,
            etag: row.get("etag"),
            last_modified: row.get("last_modified"),
            key,
        });
        true
    }
}

/// The resume point after the last entry of a page.
fn last_resume(page: &ListPage, last_prefix: &Option<String>) -> Resume {
    let last = page.last_entry.clone().unwrap_or_default();
    if last_prefix.as_deref() == Some(last.as_str()) {
        Resume::AfterPrefix(last)
    } else {
        Resume::AfterKey(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successor_bounds_every_extension() {
        assert_eq!(prefix_successor("a/").as_deref(), Some("a0"));
        assert_eq!(prefix_successor("abc").as_deref(), Some("abd"));
        assert_eq!(prefix_successor("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_successor("\u{10FFFF}"), None);
        let successor = prefix_successor("photos/é").unwrap();
        assert!("photos/é\u{10FFFF}zzz".as_bytes() < successor.as_bytes());
    }

    #[test]
    fn resume_tokens_round_trip_and_reject_garbage() {
        let token = Resume::AfterPrefix("dir/ü/".into()).encode();
        assert!(matches!(Resume::decode(&token), Ok(Resume::AfterPrefix(p)) if p == "dir/ü/"));
        assert!(Resume::decode("!!!").is_err());
        assert!(Resume::decode(&URL_SAFE_NO_PAD.encode("xabc")).is_err());
    }
}
