//! The keyspace-wide generic commands that are not key commands: KEYS, SCAN, RANDOMKEY.

use bytes::Bytes;

use crate::resp::codec::Reply;
use crate::resp::command::{self, syntax_error};
use crate::resp::connection::{Connection, store_error};
use crate::resp::glob;
use crate::store::{Access, KeyType, KvBatch, StoreResult};

const SCAN_DEFAULT_COUNT: i64 = 10;
const KEYS_PAGE: i64 = 1000;
/// Open SCAN cursors kept per connection.
const MAX_CURSORS: usize = 256;

impl Connection {
    pub(crate) async fn randomkey(&self) -> Reply {
        match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace
                .random_key()
                .await
                .map_or_else(store_error, |key| key.map_or(Reply::Nil, Reply::bulk)),
            Err(reply) => reply,
        }
    }

    pub(crate) async fn keys(&self, pattern: &[u8]) -> Reply {
        self.within(false, self.keys_now(pattern))
            .await
            .unwrap_or_else(|reply| reply)
    }

    async fn keys_now(&self, pattern: &[u8]) -> Reply {
        let keyspace = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace,
            Err(reply) => return reply,
        };
        let mut keys = Keys::new(pattern, self.server.settings.output_limit);
        loop {
            match keyspace.scan(&keys.after, &keys.prefix, KEYS_PAGE).await {
                Ok(page) => {
                    if let Some(reply) = keys.absorb(page) {
                        return reply;
                    }
                }
                Err(err) => return store_error(err),
            }
        }
    }

    /// SCAN walks keys in order; a cursor names where the previous page ended. Cursors are
    /// numbers (clients parse them) kept per connection.
    pub(crate) async fn scan(&mut self, args: &[Bytes]) -> Reply {
        let request = match self.scan_request(args) {
            Ok(request) => request,
            Err(reply) => return reply,
        };
        let keyspace = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace,
            Err(reply) => return reply,
        };
        let page = match self
            .within(false, keyspace.scan(&request.after, &request.prefix, request.count))
            .await
        {
            Ok(Ok(page)) => page,
            Ok(Err(err)) => return store_error(err),
            Err(reply) => return reply,
        };
        self.scan_reply(request.page_reply(page))
    }

    /// SCAN's arguments, its cursor taken back (it names where the previous page ended).
    pub(crate) fn scan_request(&mut self, args: &[Bytes]) -> Result<ScanRequest, Reply> {
        let after = match command::parse_integer(&args[1]) {
            Some(0) => String::new(),
            Some(cursor) => match self.cursors.remove(&(cursor as u64)) {
                Some(after) => after,
                None => return Err(Reply::error("ERR invalid cursor")),
            },
            None => return Err(Reply::error("ERR invalid cursor")),
        };
        let mut pattern: Option<Bytes> = None;
        let mut count = SCAN_DEFAULT_COUNT;
        let mut wanted_type: Option<Vec<u8>> = None;
        let mut i = 2;
        while i < args.len() {
            let Some(value) = args.get(i + 1) else {
                return Err(syntax_error());
            };
            match args[i].to_ascii_lowercase().as_slice() {
                b"match" => pattern = Some(value.clone()),
                b"count" => match command::parse_integer(value) {
                    Some(n) if n >= 1 => count = n.min(100_000),
                    Some(_) => return Err(syntax_error()),
                    None => return Err(command::not_an_integer()),
                },
                b"type" => wanted_type = Some(value.to_ascii_lowercase()),
                _ => return Err(syntax_error()),
            }
            i += 2;
        }
        let prefix = pattern.as_deref().map(glob::literal_prefix).unwrap_or_default();
        Ok(ScanRequest {
            after,
            prefix,
            count,
            pattern,
            wanted_type,
        })
    }

    /// SCAN's reply from [`ScanRequest::page_reply`]'s: the key a full page ended at becomes a
    /// new cursor.
    pub(crate) fn scan_reply(&mut self, page: Reply) -> Reply {
        let Reply::Array(mut parts) = page else {
            return page;
        };
        let next = match parts.first() {
            Some(Reply::Bulk(last)) => {
                if self.cursors.len() >= MAX_CURSORS {
                    let oldest = *self.cursors.keys().min().expect("not empty");
                    self.cursors.remove(&oldest);
                }
                let cursor = self.next_cursor;
                self.next_cursor += 1;
                self.cursors.insert(cursor, String::from_utf8_lossy(last).into_owned());
                cursor
            }
            _ => 0,
        };
        parts[0] = Reply::text(&next.to_string());
        Reply::Array(parts)
    }
}

/// A SCAN: where its page begins and what it keeps of it.
pub(crate) struct ScanRequest {
    after: String,
    prefix: String,
    count: i64,
    pattern: Option<Bytes>,
    /// SCAN ... TYPE: `None` for every key, else the type's name ("string" for strings).
    wanted_type: Option<Vec<u8>>,
}

impl ScanRequest {
    /// One page as a reply whose first part is the key a full page ended at (nil when the
    /// walk is done), for [`Connection::scan_reply`] to make a cursor of.
    fn page_reply(&self, page: Vec<(String, Option<KeyType>)>) -> Reply {
        let next = match page.last() {
            Some((last, _)) if page.len() as i64 == self.count => Reply::bulk(last.clone()),
            _ => Reply::Nil,
        };
        let keys = page
            .into_iter()
            .filter(|(key, typed)| {
                let name = typed.map_or("string", |typed| typed.name());
                self.wanted_type.as_ref().is_none_or(|wanted| wanted == name.as_bytes())
                    && self
                        .pattern
                        .as_ref()
                        .is_none_or(|pattern| glob::matches(pattern, key.as_bytes()))
            })
            .map(|(key, _)| Reply::bulk(key))
            .collect();
        Reply::Array(vec![next, Reply::Array(keys)])
    }
}

/// KEYS's walk: every key matching its pattern, page by page (each [`Keys::page`] long, from
/// [`Keys::after`] on, of keys that start with [`Keys::prefix`]). Past its output limit, its
/// reply is over the limit.
struct Keys<'a> {
    pattern: &'a [u8],
    prefix: String,
    after: String,
    limit: Option<usize>,
    found: Vec<Reply>,
    /// Bytes of the reply so far: past the output limit it is not gathered further.
    bytes: usize,
}

impl<'a> Keys<'a> {
    fn new(pattern: &'a [u8], limit: Option<usize>) -> Keys<'a> {
        Keys {
            pattern,
            prefix: glob::literal_prefix(pattern),
            after: String::new(),
            limit,
            found: Vec::new(),
            bytes: 0,
        }
    }

    /// Takes in the next page: the reply once the walk is over.
    fn absorb(&mut self, page: Vec<(String, Option<KeyType>)>) -> Option<Reply> {
        let done = (page.len() as i64) < KEYS_PAGE;
        if let Some((last, _)) = page.last() {
            self.after = last.clone();
        }
        for (key, _) in page {
            if glob::matches(self.pattern, key.as_bytes()) {
                self.bytes += key.len() + 5;
                self.found.push(Reply::bulk(key));
            }
        }
        if self.limit.is_some_and(|limit| self.bytes > limit) {
            return Some(Reply::OverLimit(None));
        }
        done.then(|| Reply::Array(std::mem::take(&mut self.found)))
    }
}

/// A keyspace-wide command queued in MULTI, run in EXEC's batch in its queue position (see
/// `KvBatch::scan_keys` and the rest): KEYS, SCAN, DBSIZE, RANDOMKEY, FLUSHDB.
pub(crate) enum Wide {
    /// The pattern, and the output limit.
    Keys(Bytes, Option<usize>),
    Scan(ScanRequest),
    DbSize,
    RandomKey,
    FlushDb,
}

impl Wide {
    pub(crate) fn writes(&self) -> bool {
        matches!(self, Wide::FlushDb)
    }

    /// Runs it in `batch` (a batch holding the whole keyspace).
    pub(crate) async fn run(&self, batch: &mut KvBatch) -> StoreResult<Reply> {
        Ok(match self {
            Wide::Keys(pattern, limit) => {
                let mut keys = Keys::new(pattern, *limit);
                loop {
                    let page = batch.scan_keys(&keys.after, &keys.prefix, KEYS_PAGE).await?;
                    if let Some(reply) = keys.absorb(page) {
                        break reply;
                    }
                }
            }
            Wide::Scan(request) => {
                let page = batch.scan_keys(&request.after, &request.prefix, request.count).await?;
                request.page_reply(page)
            }
            Wide::DbSize => Reply::Integer(batch.count_keys().await?.0),
            Wide::RandomKey => batch.random_key().await?.map_or(Reply::Nil, Reply::bulk),
            Wide::FlushDb => {
                batch.flush_keys().await?;
                Reply::OK
            }
        })
    }
}
