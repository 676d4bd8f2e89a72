//! The RESP keyspace pages: keys found by pattern with SCAN (never KEYS) a cursor at a time, a
//! view per type, TTL, and edits. Pages and changes go over the session's connection to the
//! gateway's RESP listener, authenticated as the session's key (`AUTH <key> <secret>`), so the
//! gateway's RESP rules decide what the key sees and changes: a key that does not own the database's bucket gets
//! `NOPERM`, which the page shows. Pages, previews and replies are bounded.

use std::fmt::Write;

use http::StatusCode;

use super::{Context, Outcome, Request, Response};
use crate::html::{self, button, esc, form, link, name};
use crate::resp::{Reply, Resp};

pub(super) type Connection<'a> = tokio::sync::MappedMutexGuard<'a, Resp>;

/// Keys asked of one SCAN step (Redis's COUNT: a hint, a page may hold fewer or a few more).
const SCAN_COUNT: &str = "100";
/// Elements of a hash, set, sorted set, list or stream on one page.
pub(super) const ELEMENTS: i64 = 50;
/// The bytes of a string value shown (and editable when the value is no longer).
const PREVIEW_BYTES: i64 = 16 * 1024;
/// The characters of one element shown in a table cell.
const CELL_CHARS: usize = 512;
/// Patterns and key names as the gateway bounds keys.
const MAX_KEY: usize = 1024;

/// A cell's text: at most [`CELL_CHARS`] characters, as text.
pub(super) fn cell(reply: &Reply) -> String {
    let text = reply.text().unwrap_or_default();
    match text.char_indices().nth(CELL_CHARS) {
        Some((end, _)) => format!("{}<span class=\"hint\">…</span>", name(&text[..end])),
        None => name(&text),
    }
}

/// A SCAN-family cursor from a link: a number, else the start.
fn scan_cursor(cursor: &str) -> &str {
    if !cursor.is_empty() && cursor.len() <= 20 && cursor.bytes().all(|b| b.is_ascii_digit()) {
        cursor
    } else {
        "0"
    }
}

fn refused(err: &str) -> String {
    format!("<p class=\"flash error\" role=\"alert\">{}</p>", name(err))
}

/// A flat `[name, value, ...]` reply (RESP2's maps) as pairs.
pub(super) fn pairs(reply: &Reply) -> Vec<(String, &Reply)> {
    reply
        .items()
        .chunks_exact(2)
        .map(|pair| (pair[0].text().unwrap_or_default(), &pair[1]))
        .collect()
}

fn ttl(millis: Option<i64>) -> String {
    match millis {
        Some(-1) => "none".to_owned(),
        Some(ms) if ms >= 0 => {
            let seconds = ms / 1000;
            match seconds {
                0..60 => format!("{seconds} s"),
                60..3600 => format!("{} min {} s", seconds / 60, seconds % 60),
                _ => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
            }
        }
        _ => String::new(),
    }
}

/// An edit the key page offers: the RESP command it sends and what it says once done.
fn command(op: &str, key: &str, request: &Request) -> Result<(Vec<Vec<u8>>, String), String> {
    let arg = |field: &str| request.arg(field).as_bytes().to_vec();
    let word = |word: &str| word.as_bytes().to_vec();
    let k = key.as_bytes().to_vec();
    let (args, done) = match op {
        "set" => (vec![word("SET"), k, arg("value"), word("KEEPTTL")], "Value saved."),
        "del" => (vec![word("DEL"), k], "Key deleted."),
        "expire" => match request.arg("ttl").trim() {
            "" | "0" => (vec![word("PERSIST"), k], "The key no longer expires."),
            seconds => {
                let seconds = seconds
                    .parse::<u32>()
                    .map_err(|_| "TTL: a whole number of seconds.".to_owned())?;
                let args = vec![word("EXPIRE"), k, word(&seconds.to_string())];
                return Ok((args, format!("The key now expires in {seconds} s.")));
            }
        },
        "hset" => (vec![word("HSET"), k, arg("field"), arg("value")], "Field saved."),
        "hdel" => (vec![word("HDEL"), k, arg("field")], "Field deleted."),
        "sadd" => (vec![word("SADD"), k, arg("member")], "Member added."),
        "srem" => (vec![word("SREM"), k, arg("member")], "Member removed."),
        "zadd" => (vec![word("ZADD"), k, arg("score"), arg("member")], "Member saved."),
        "zrem" => (vec![word("ZREM"), k, arg("member")], "Member removed."),
        "rpush" => (vec![word("RPUSH"), k, arg("value")], "Element appended."),
        "lrem" => (vec![word("LREM"), k, word("1"), arg("value")], "Element removed."),
        stream_op => return super::stream::command(stream_op, k, request),
    };
    Ok((args, done.to_owned()))
}

impl Context<'_> {
    /// The session's connection as its key, on database `db`.
    async fn resp(&self, db: &str) -> Result<Connection<'_>, String> {
        let addr = self.app.gateway.resp.ok_or(
            "The console reaches no RESP listener: it is off, or speaks TLS without a plaintext twin on loopback (--resp-plaintext-addr).",
        )?;
        self.session
            .keyspace
            .get(addr, &self.session.access_key, &self.session.secret, db)
            .await
    }

    /// The database a request names: a number, 0 when none.
    fn db(request: &Request) -> Result<String, String> {
        match request.arg("db").trim() {
            "" => Ok("0".to_owned()),
            db => db
                .parse::<u16>()
                .map(|n| n.to_string())
                .map_err(|_| "The database is a number, as SELECT takes.".to_owned()),
        }
    }

    pub(super) async fn keys(&self, request: &Request) -> Response {
        let pattern = match request.arg("pattern") {
            "" => "*",
            pattern => pattern,
        };
        let db = Self::db(request);
        let shown_db = db.clone().unwrap_or_default();
        let mut body = format!(
            "<h1>Keys</h1><form method=\"get\" action=\"/keys\" class=\"search\">\
             <label>Database <input name=\"db\" id=\"db\" type=\"number\" min=\"0\" value=\"{}\"></label> \
             <label>Pattern <input name=\"pattern\" id=\"pattern\" value=\"{}\" maxlength=\"{MAX_KEY}\"></label> \
             <button id=\"find-keys\">Find</button></form>\
             <p class=\"hint\">Found with SCAN (never KEYS), {SCAN_COUNT} keys a step: a page may hold fewer, \
             even none, while the scan goes on.</p>",
            esc(&shown_db),
            esc(pattern)
        );
        let listed = match db {
            Err(err) => Err(err),
            Ok(_) if pattern.len() > MAX_KEY => Err(format!("A pattern is at most {MAX_KEY} bytes.")),
            Ok(db) => self.scan(&db, pattern, request.arg("cursor")).await,
        };
        match listed {
            Err(err) => body.push_str(&refused(&err)),
            Ok(table) => body.push_str(&table),
        }
        body.push_str(&form(
            "/key/command",
            self.csrf(),
            &[("db", &shown_db), ("op", "set")],
            &format!(
                "<fieldset><legend>New string key</legend>\
                 <label>Key <input name=\"key\" id=\"new-key\" required maxlength=\"{MAX_KEY}\"></label>\
                 <label>Value <input name=\"value\" id=\"new-value\"></label>\
                 <button id=\"create-key\">Save</button></fieldset>"
            ),
        ));
        self.page(StatusCode::OK, "Keys", body)
    }

    /// One SCAN step and each key's type and TTL, as a table with the next step's link.
    async fn scan(&self, db: &str, pattern: &str, cursor: &str) -> Result<String, String> {
        let cursor = scan_cursor(cursor);
        let mut resp = self.resp(db).await?;
        let step = resp
            .call(&[
                b"SCAN",
                cursor.as_bytes(),
                b"MATCH",
                pattern.as_bytes(),
                b"COUNT",
                SCAN_COUNT.as_bytes(),
            ])
            .await?;
        match step.error() {
            // Cursors are single-use and live in the connection that issued them.
            Some("ERR invalid cursor") => {
                return Err(
                    "This page of the scan was read already, or its connection has closed: start again from the first page."
                        .to_owned(),
                );
            }
            Some(err) => return Err(err.to_owned()),
            None => {}
        }
        let [next, keys] = step.items() else {
            return Err("the RESP listener sent a malformed SCAN reply".to_owned());
        };
        let next = next.text().unwrap_or_default();
        let keys: Vec<String> = keys.items().iter().filter_map(Reply::text).collect();
        let commands: Vec<Vec<Vec<u8>>> = keys
            .iter()
            .flat_map(|key| {
                [
                    vec![b"TYPE".to_vec(), key.as_bytes().to_vec()],
                    vec![b"PTTL".to_vec(), key.as_bytes().to_vec()],
                ]
            })
            .collect();
        let details = resp.pipeline(&commands).await?;
        let mut out =
            String::from("<table id=\"keys\"><thead><tr><th>Key</th><th>Type</th><th>TTL</th></tr></thead><tbody>");
        for (key, detail) in keys.iter().zip(details.chunks_exact(2)) {
            let _ = write!(
                out,
                "<tr><td><a class=\"key\" href=\"{}\">{}</a></td><td class=\"type\">{}</td><td>{}</td></tr>",
                esc(&link("/key", &[("db", db), ("key", key)])),
                name(key),
                esc(&detail[0].text().unwrap_or_default()),
                esc(&ttl(detail[1].int())),
            );
        }
        out.push_str("</tbody></table>");
        if keys.is_empty() {
            out.push_str("<p>No keys in this step.</p>");
        }
        if next != "0" {
            let _ = write!(
                out,
                "<p><a id=\"next-keys\" href=\"{}\">Next page</a></p>",
                esc(&link("/keys", &[("db", db), ("pattern", pattern), ("cursor", &next)]))
            );
        }
        Ok(out)
    }

    pub(super) async fn key(&self, request: &Request) -> Response {
        let key = request.arg("key");
        let mut body = String::new();
        let result = match Self::db(request) {
            Err(err) => Err(err),
            Ok(db) => {
                let _ = write!(
                    body,
                    "<h1><a href=\"{}\">Keys</a> / <span class=\"name\">{}</span></h1>",
                    esc(&link("/keys", &[("db", &db)])),
                    name(key)
                );
                self.key_view(&db, key, request.arg("cursor")).await
            }
        };
        match result {
            Ok(view) => body.push_str(&view),
            Err(err) => body.push_str(&refused(&err)),
        }
        self.page(StatusCode::OK, "Key", body)
    }

    async fn key_view(&self, db: &str, key: &str, cursor: &str) -> Result<String, String> {
        let mut resp = self.resp(db).await?;
        let k = key.as_bytes();
        let head = resp
            .pipeline(&[vec![b"TYPE".to_vec(), k.to_vec()], vec![b"PTTL".to_vec(), k.to_vec()]])
            .await?;
        if let Some(err) = head.iter().find_map(Reply::error) {
            return Err(err.to_owned());
        }
        let kind = head[0].text().unwrap_or_default();
        if kind == "none" {
            return Ok("<p>No such key (or it has expired).</p>".to_owned());
        }
        let hidden = |op: &'static str| vec![("db", db), ("key", key), ("op", op)];
        let mut out = format!(
            "<dl class=\"meta\"><dt>Type</dt><dd id=\"key-type\">{}</dd><dt>TTL</dt><dd id=\"key-ttl\">{}</dd></dl>",
            esc(&kind),
            esc(&ttl(head[1].int()))
        );
        let _ = write!(
            out,
            "<p class=\"actions\">{}{}</p>",
            form(
                "/key/command",
                self.csrf(),
                &hidden("expire"),
                "<label>TTL (s, empty: none) <input name=\"ttl\" id=\"ttl\" type=\"number\" min=\"0\"></label> <button id=\"set-ttl\">Set TTL</button>",
            ),
            form(
                "/key/command",
                self.csrf(),
                &hidden("del"),
                &button("Delete key", "danger", Some("Delete this key?")),
            )
        );
        // Offsets (lists, sorted sets), SCAN cursors (hashes, sets) or a stream ID to go on from.
        let offset = cursor.parse::<i64>().unwrap_or(0).max(0);
        let cursor = if cursor.is_empty() { "0" } else { cursor };
        let section = match kind.as_str() {
            "string" => self.string_view(&mut resp, db, key).await?,
            "hash" | "set" => self.scanned_view(&mut resp, db, key, &kind, cursor).await?,
            "zset" | "list" => self.ranged_view(&mut resp, db, key, &kind, offset).await?,
            "stream" => self.stream_view(&mut resp, db, key, cursor).await?,
            other => format!("<p>A {} key: open it with a RESP client.</p>", esc(other)),
        };
        out.push_str(&section);
        Ok(out)
    }

    async fn string_view(&self, resp: &mut Connection<'_>, db: &str, key: &str) -> Result<String, String> {
        let k = key.as_bytes().to_vec();
        let replies = resp
            .pipeline(&[
                vec![b"STRLEN".to_vec(), k.clone()],
                vec![
                    b"GETRANGE".to_vec(),
                    k,
                    b"0".to_vec(),
                    (PREVIEW_BYTES - 1).to_string().into_bytes(),
                ],
            ])
            .await?;
        if let Some(err) = replies.iter().find_map(Reply::error) {
            return Err(err.to_owned());
        }
        let length = replies[0].int().unwrap_or(0);
        let bytes = match &replies[1] {
            Reply::Bulk(Some(bytes)) => bytes.as_slice(),
            _ => &[],
        };
        let text = std::str::from_utf8(bytes);
        let mut out = format!(
            "<section><h2>Value</h2><p class=\"hint\">{}</p>",
            esc(&html::size(length))
        );
        match text {
            Ok(text) if length <= PREVIEW_BYTES => {
                out.push_str(&form(
                    "/key/command",
                    self.csrf(),
                    &[("db", db), ("key", key), ("op", "set")],
                    &format!(
                        "<textarea name=\"value\" id=\"value\" rows=\"8\" spellcheck=\"false\">{}</textarea>\
                         <button id=\"save-value\">Save value</button>",
                        esc(text)
                    ),
                ));
            }
            _ => {
                let _ = write!(
                    out,
                    "<pre id=\"value\" class=\"value\">{}</pre><p class=\"hint\">{}; not editable here.</p>",
                    html::value(&String::from_utf8_lossy(bytes)),
                    if length > PREVIEW_BYTES {
                        format!("The first {} shown", html::size(PREVIEW_BYTES))
                    } else {
                        "Not UTF-8 text (shown with replacement characters)".to_owned()
                    }
                );
            }
        }
        out.push_str("</section>");
        Ok(out)
    }

    /// A hash's fields or a set's members, a HSCAN/SSCAN step at a time.
    async fn scanned_view(
        &self,
        resp: &mut Connection<'_>,
        db: &str,
        key: &str,
        kind: &str,
        cursor: &str,
    ) -> Result<String, String> {
        let cursor = scan_cursor(cursor);
        let hash = kind == "hash";
        let (length, scan): (&[u8], &[u8]) = if hash {
            (b"HLEN", b"HSCAN")
        } else {
            (b"SCARD", b"SSCAN")
        };
        let k = key.as_bytes().to_vec();
        let replies = resp
            .pipeline(&[
                vec![length.to_vec(), k.clone()],
                vec![
                    scan.to_vec(),
                    k,
                    cursor.as_bytes().to_vec(),
                    b"COUNT".to_vec(),
                    ELEMENTS.to_string().into_bytes(),
                ],
            ])
            .await?;
        if let Some(err) = replies.iter().find_map(Reply::error) {
            return Err(err.to_owned());
        }
        let [next, items] = replies[1].items() else {
            return Err("the RESP listener sent a malformed scan reply".to_owned());
        };
        let mut out = format!(
            "<section><h2>{} ({})</h2><table id=\"elements\"><thead><tr>{}<th></th></tr></thead><tbody>",
            if hash { "Fields" } else { "Members" },
            replies[0].int().unwrap_or(0),
            if hash {
                "<th>Field</th><th>Value</th>"
            } else {
                "<th>Member</th>"
            }
        );
        let width = if hash { 2 } else { 1 };
        for element in items.items().chunks_exact(width) {
            let first = element[0].text().unwrap_or_default();
            let (op, field) = if hash { ("hdel", "field") } else { ("srem", "member") };
            let remove = self.key_edit(db, key, op, &[(field, &first)], &button("Delete", "danger", None));
            let _ = write!(
                out,
                "<tr class=\"element\"><td>{}</td>{}<td class=\"actions\">{remove}</td></tr>",
                cell(&element[0]),
                if hash {
                    format!("<td>{}</td>", cell(&element[1]))
                } else {
                    String::new()
                }
            );
        }
        out.push_str("</tbody></table>");
        let next = next.text().unwrap_or_default();
        if next != "0" {
            let _ = write!(
                out,
                "<p><a id=\"next-elements\" href=\"{}\">Next page</a></p>",
                esc(&link("/key", &[("db", db), ("key", key), ("cursor", &next)]))
            );
        }
        let add = if hash {
            "<label>Field <input name=\"field\" id=\"field\" required></label><label>Value <input name=\"value\" id=\"field-value\"></label><button id=\"add-element\">Save field</button>"
        } else {
            "<label>Member <input name=\"member\" id=\"member\" required></label><button id=\"add-element\">Add member</button>"
        };
        out.push_str(&self.key_edit(db, key, if hash { "hset" } else { "sadd" }, &[], add));
        out.push_str("</section>");
        Ok(out)
    }

    /// A sorted set's members by rank or a list's elements by index, a page at a time.
    async fn ranged_view(
        &self,
        resp: &mut Connection<'_>,
        db: &str,
        key: &str,
        kind: &str,
        offset: i64,
    ) -> Result<String, String> {
        let zset = kind == "zset";
        let k = key.as_bytes().to_vec();
        let (from, to) = (
            offset.to_string().into_bytes(),
            (offset + ELEMENTS - 1).to_string().into_bytes(),
        );
        let range = if zset {
            vec![b"ZRANGE".to_vec(), k.clone(), from, to, b"WITHSCORES".to_vec()]
        } else {
            vec![b"LRANGE".to_vec(), k.clone(), from, to]
        };
        let length: &[u8] = if zset { b"ZCARD" } else { b"LLEN" };
        let replies = resp.pipeline(&[vec![length.to_vec(), k], range]).await?;
        if let Some(err) = replies.iter().find_map(Reply::error) {
            return Err(err.to_owned());
        }
        let total = replies[0].int().unwrap_or(0);
        let mut out = format!(
            "<section><h2>{} ({total})</h2><table id=\"elements\"><thead><tr><th>{}</th>{}<th></th></tr></thead><tbody>",
            if zset { "Members by score" } else { "Elements" },
            if zset { "Member" } else { "Index" },
            if zset { "<th>Score</th>" } else { "<th>Value</th>" }
        );
        let width = if zset { 2 } else { 1 };
        for (n, element) in replies[1].items().chunks_exact(width).enumerate() {
            let text = element[0].text().unwrap_or_default();
            let (op, field) = if zset { ("zrem", "member") } else { ("lrem", "value") };
            let remove = self.key_edit(db, key, op, &[(field, &text)], &button("Delete", "danger", None));
            let _ = if zset {
                write!(
                    out,
                    "<tr class=\"element\"><td>{}</td><td>{}</td><td class=\"actions\">{remove}</td></tr>",
                    cell(&element[0]),
                    cell(&element[1])
                )
            } else {
                write!(
                    out,
                    "<tr class=\"element\"><td>{}</td><td>{}</td><td class=\"actions\">{remove}</td></tr>",
                    offset + n as i64,
                    cell(&element[0])
                )
            };
        }
        out.push_str("</tbody></table>");
        if offset + ELEMENTS < total {
            let _ = write!(
                out,
                "<p><a id=\"next-elements\" href=\"{}\">Next page</a></p>",
                esc(&link(
                    "/key",
                    &[("db", db), ("key", key), ("cursor", &(offset + ELEMENTS).to_string())]
                ))
            );
        }
        let add = if zset {
            "<label>Score <input name=\"score\" id=\"score\" required></label><label>Member <input name=\"member\" id=\"member\" required></label><button id=\"add-element\">Save member</button>"
        } else {
            "<label>Value <input name=\"value\" id=\"element-value\"></label><button id=\"add-element\">Append</button>"
        };
        out.push_str(&self.key_edit(db, key, if zset { "zadd" } else { "rpush" }, &[], add));
        out.push_str("</section>");
        Ok(out)
    }

    /// A key page's edit form: command `op` on `key` of database `db`, with `fields` hidden
    /// too; `inner` holds its inputs and button.
    pub(super) fn key_edit(&self, db: &str, key: &str, op: &str, fields: &[(&str, &str)], inner: &str) -> String {
        let mut hidden = vec![("db", db), ("key", key), ("op", op)];
        hidden.extend_from_slice(fields);
        form("/key/command", self.csrf(), &hidden, inner)
    }

    /// A key page's edit: one RESP command as the session's key.
    pub(super) async fn key_command(&self, request: &Request) -> Response {
        let key = request.arg("key");
        let db = Self::db(request);
        let op = request.arg("op");
        let outcome: Outcome = async {
            // A database that does not parse is refused, never taken for database 0.
            let db = db.clone()?;
            if key.is_empty() || key.len() > MAX_KEY {
                return Err(format!("A key is 1 to {MAX_KEY} bytes."));
            }
            let (args, done) = command(op, key, request)?;
            let mut resp = self.resp(&db).await?;
            let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            match resp.call(&args).await? {
                Reply::Error(err) => Err(err),
                _ => Ok(done),
            }
        }
        .await;
        let db = db.unwrap_or_default();
        let to = if op == "del" && outcome.is_ok() {
            link("/keys", &[("db", &db)])
        } else {
            link("/key", &[("db", &db), ("key", key)])
        };
        self.done(outcome, &to)
    }
}
