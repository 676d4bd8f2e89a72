//! The keyspace-wide generic commands that are not key commands: KEYS, SCAN, RANDOMKEY.

use bytes::Bytes;

use crate::resp::codec::Reply;
use crate::resp::command::{self, syntax_error};
use crate::resp::connection::{Connection, store_error};
use crate::resp::glob;
use crate::store::Access;

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
        let prefix = glob::literal_prefix(pattern);
        let keyspace = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace,
            Err(reply) => return reply,
        };
        let mut after = String::new();
        let mut found = Vec::new();
        // Bytes of the reply so far: past the output limit it is not gathered further.
        let mut bytes = 0;
        loop {
            let page = keyspace.scan(&after, &prefix, KEYS_PAGE).await;
            let page = match page {
                Ok(page) => page,
                Err(err) => return store_error(err),
            };
            let done = (page.len() as i64) < KEYS_PAGE;
            if let Some((last, _)) = page.last() {
                after = last.clone();
            }
            found.extend(
                page.into_iter()
                    .filter(|(key, _)| glob::matches(pattern, key.as_bytes()))
                    .inspect(|(key, _)| bytes += key.len() + 5)
                    .map(|(key, _)| Reply::bulk(key)),
            );
            if self.server.settings.output_limit.is_some_and(|limit| bytes > limit) {
                return Reply::OverLimit(None);
            }
            if done {
                return Reply::Array(found);
            }
        }
    }

    /// SCAN walks keys in order; a cursor names where the previous page ended. Cursors are
    /// numbers (clients parse them) kept per connection.
    pub(crate) async fn scan(&mut self, args: &[Bytes]) -> Reply {
        let after = match command::parse_integer(&args[1]) {
            Some(0) => String::new(),
            Some(cursor) => match self.cursors.remove(&(cursor as u64)) {
                Some(after) => after,
                None => return Reply::error("ERR invalid cursor"),
            },
            None => return Reply::error("ERR invalid cursor"),
        };
        let mut pattern: Option<&[u8]> = None;
        let mut count = SCAN_DEFAULT_COUNT;
        // SCAN ... TYPE: `None` for every key, else the type's name ("string" for strings).
        let mut wanted_type: Option<Vec<u8>> = None;
        let mut i = 2;
        while i < args.len() {
            let Some(value) = args.get(i + 1) else {
                return syntax_error();
            };
            match args[i].to_ascii_lowercase().as_slice() {
                b"match" => pattern = Some(value),
                b"count" => match command::parse_integer(value) {
                    Some(n) if n >= 1 => count = n.min(100_000),
                    Some(_) => return syntax_error(),
                    None => return command::not_an_integer(),
                },
                b"type" => wanted_type = Some(value.to_ascii_lowercase()),
                _ => return syntax_error(),
            }
            i += 2;
        }
        let prefix = pattern.map(glob::literal_prefix).unwrap_or_default();
        let keyspace = match self.keyspace(Access::Read).await {
            Ok(keyspace) => keyspace,
            Err(reply) => return reply,
        };
        let page = match self.within(false, keyspace.scan(&after, &prefix, count)).await {
            Ok(Ok(page)) => page,
            Ok(Err(err)) => return store_error(err),
            Err(reply) => return reply,
        };
        let next = match page.last() {
            Some((last, _)) if page.len() as i64 == count => {
                if self.cursors.len() >= MAX_CURSORS {
                    let oldest = *self.cursors.keys().min().expect("not empty");
                    self.cursors.remove(&oldest);
                }
                let cursor = self.next_cursor;
                self.next_cursor += 1;
                self.cursors.insert(cursor, last.clone());
                cursor
            }
            _ => 0,
        };
        let keys = page
            .into_iter()
            .filter(|(key, typed)| {
                let name = typed.map_or("string", |typed| typed.name());
                wanted_type.as_ref().is_none_or(|wanted| wanted == name.as_bytes())
                    && pattern.is_none_or(|pattern| glob::matches(pattern, key.as_bytes()))
            })
            .map(|(key, _)| Reply::bulk(key))
            .collect();
        Reply::Array(vec![Reply::text(&next.to_string()), Reply::Array(keys)])
    }
}
