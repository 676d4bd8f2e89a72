//! A stream key's page: its entries a page at a time by ID, its consumer groups with their
//! consumers (`XINFO CONSUMERS`) and pending entries (`XPENDING`), and its edits — add an entry,
//! delete one, create or destroy a group, set a group's last delivered ID, acknowledge or claim
//! a pending entry. Each is one RESP command over the session's connection, as its key, so the
//! gateway's RESP rules decide (a key that does not own the database's bucket gets `NOPERM`).

use std::fmt::Write;

use super::keyspace::{Connection, ELEMENTS, cell, pairs};
use super::{Context, Request};
use crate::html::{button, esc, link, name};
use crate::resp::Reply;

/// Consumer groups shown with their consumers and pending entries (each costs two commands).
const GROUPS_DETAILED: usize = 20;

/// A stream edit of the key page: the RESP command and what it says once done.
pub(super) fn command(op: &str, k: Vec<u8>, request: &Request) -> Result<(Vec<Vec<u8>>, String), String> {
    let arg = |field: &str| request.arg(field).trim().as_bytes().to_vec();
    let word = |word: &str| word.as_bytes().to_vec();
    let id_or = |default: &str| match request.arg("id").trim() {
        "" => word(default),
        id => word(id),
    };
    let (args, done) = match op {
        "xadd" => {
            let mut args = vec![word("XADD"), k, id_or("*")];
            for line in request.arg("fields").lines().filter(|line| !line.trim().is_empty()) {
                let (field, value) = line
                    .split_once('=')
                    .ok_or_else(|| format!("{:?} is not field=value.", line.trim()))?;
                args.push(word(field.trim()));
                args.push(word(value.trim_end_matches('\r')));
            }
            if args.len() == 3 {
                return Err("An entry has at least one field=value line.".to_owned());
            }
            (args, "Entry added.")
        }
        "xdel" => (vec![word("XDEL"), k, arg("id")], "Entry deleted."),
        "xgroup-create" => (
            vec![word("XGROUP"), word("CREATE"), k, arg("group"), id_or("$")],
            "Group created.",
        ),
        "xgroup-destroy" => (
            vec![word("XGROUP"), word("DESTROY"), k, arg("group")],
            "Group destroyed.",
        ),
        "xgroup-setid" => (
            vec![word("XGROUP"), word("SETID"), k, arg("group"), arg("id")],
            "The group's last delivered ID is set.",
        ),
        "xack" => (vec![word("XACK"), k, arg("group"), arg("id")], "Entry acknowledged."),
        "xclaim" => (
            vec![word("XCLAIM"), k, arg("group"), arg("consumer"), word("0"), arg("id")],
            "Entry claimed.",
        ),
        _ => return Err("no such edit".to_owned()),
    };
    Ok((args, done.to_owned()))
}

/// The field `wanted` of a flat `XINFO` reply, as text.
fn field(fields: &[(String, &Reply)], wanted: &str) -> String {
    fields
        .iter()
        .find(|(name, _)| name == wanted)
        .and_then(|(_, value)| value.text())
        .unwrap_or_default()
}

impl Context<'_> {
    /// A stream's entries from an ID on, and its consumer groups with their consumers and
    /// pending entries, each with its edits.
    pub(super) async fn stream_view(
        &self,
        resp: &mut Connection<'_>,
        db: &str,
        key: &str,
        after: &str,
    ) -> Result<String, String> {
        let start = if after == "0" || after.is_empty() {
            "-".to_owned()
        } else if after.len() <= 41 && after.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
            format!("({after}")
        } else {
            "-".to_owned()
        };
        let k = key.as_bytes().to_vec();
        let replies = resp
            .pipeline(&[
                vec![b"XLEN".to_vec(), k.clone()],
                vec![
                    b"XRANGE".to_vec(),
                    k.clone(),
                    start.into_bytes(),
                    b"+".to_vec(),
                    b"COUNT".to_vec(),
                    ELEMENTS.to_string().into_bytes(),
                ],
                vec![b"XINFO".to_vec(), b"GROUPS".to_vec(), k.clone()],
            ])
            .await?;
        if let Some(err) = replies.iter().find_map(Reply::error) {
            return Err(err.to_owned());
        }
        let mut out = self.stream_entries(db, key, replies[0].int().unwrap_or(0), replies[1].items());
        out.push_str("</section><section><h2>Consumer groups</h2>");
        let create = self.key_edit(
            db,
            key,
            "xgroup-create",
            &[],
            "<label>Group <input name=\"group\" id=\"new-group\" required></label>\
             <label>From ID (empty: $, new entries only) <input name=\"id\" id=\"new-group-id\"></label><button id=\"create-group\">Create group</button>",
        );
        let groups = replies[2].items();
        if groups.is_empty() {
            out.push_str("<p>No consumer groups.</p>");
            out.push_str(&create);
            out.push_str("</section>");
            return Ok(out);
        }
        let (table, details) = self.stream_groups(resp, db, key, groups).await?;
        out.push_str(&table);
        out.push_str(&create);
        out.push_str("</section>");
        out.push_str(&details);
        Ok(out)
    }

    /// The entries section (left open for the groups): a page of `entries` of the `length`
    /// the stream has, the link to the next page, and the form adding one.
    fn stream_entries(&self, db: &str, key: &str, length: i64, entries: &[Reply]) -> String {
        let mut out = format!(
            "<section><h2>Entries ({})</h2><table id=\"elements\"><thead><tr><th>ID</th><th>Fields</th><th></th></tr></thead><tbody>",
            length
        );
        for entry in entries {
            let [id, fields] = entry.items() else { continue };
            let id = id.text().unwrap_or_default();
            let fields: Vec<String> = fields
                .items()
                .chunks_exact(2)
                .map(|pair| format!("{} = {}", cell(&pair[0]), cell(&pair[1])))
                .collect();
            let _ = write!(
                out,
                "<tr class=\"element\" data-id=\"{}\"><td><code>{}</code></td><td>{}</td><td class=\"actions\">{}</td></tr>",
                esc(&id),
                esc(&id),
                fields.join("<br>"),
                self.key_edit(
                    db,
                    key,
                    "xdel",
                    &[("id", &id)],
                    &button("Delete", "danger", Some("Delete this entry?"))
                ),
            );
        }
        out.push_str("</tbody></table>");
        let last = entries.last().and_then(|e| e.items().first()).and_then(Reply::text);
        if let Some(last) = last.filter(|_| entries.len() as i64 == ELEMENTS) {
            let _ = write!(
                out,
                "<p><a id=\"next-elements\" href=\"{}\">Next page</a></p>",
                esc(&link("/key", &[("db", db), ("key", key), ("cursor", &last)]))
            );
        }
        out.push_str(&self.key_edit(
            db,
            key,
            "xadd",
            &[],
            "<label>Fields (field=value, one a line) <textarea name=\"fields\" id=\"entry-fields\" rows=\"3\" required></textarea></label>\
             <label>ID (empty: *) <input name=\"id\" id=\"entry-id\"></label><button id=\"add-entry\">Add entry</button>",
        ));
        out
    }

    /// The table of consumer `groups` (`XINFO GROUPS`), and the sections of the first
    /// [`GROUPS_DETAILED`] groups' consumers and pending entries (which follow the groups'
    /// section). Per group one more command, the pending summary; for the first
    /// [`GROUPS_DETAILED`] two more, its consumers and its oldest pending entries.
    async fn stream_groups(
        &self,
        resp: &mut Connection<'_>,
        db: &str,
        key: &str,
        groups: &[Reply],
    ) -> Result<(String, String), String> {
        let k = key.as_bytes().to_vec();
        let names: Vec<String> = groups
            .iter()
            .filter_map(|group| {
                pairs(group)
                    .into_iter()
                    .find(|(field, _)| field == "name")
                    .and_then(|(_, v)| v.text())
            })
            .collect();
        let mut commands = Vec::new();
        for (n, group) in names.iter().enumerate() {
            let g = group.as_bytes().to_vec();
            commands.push(vec![b"XPENDING".to_vec(), k.clone(), g.clone()]);
            if n < GROUPS_DETAILED {
                commands.push(vec![b"XINFO".to_vec(), b"CONSUMERS".to_vec(), k.clone(), g.clone()]);
                commands.push(vec![
                    b"XPENDING".to_vec(),
                    k.clone(),
                    g,
                    b"-".to_vec(),
                    b"+".to_vec(),
                    ELEMENTS.to_string().into_bytes(),
                ]);
            }
        }
        let answers = resp.pipeline(&commands).await?;
        let mut answers = answers.iter();
        let mut out = String::from(
            "<table id=\"groups\"><thead><tr><th>Group</th><th>Consumers</th><th>Pending</th><th>Last delivered</th><th>Lag</th>\
             <th>Pending per consumer</th><th></th></tr></thead><tbody>",
        );
        let mut details = String::new();
        for (n, (group, group_name)) in groups.iter().zip(&names).enumerate() {
            out.push_str(&self.group_row(db, key, group, group_name, answers.next()));
            if n < GROUPS_DETAILED {
                let (members, pending) = (answers.next(), answers.next());
                details.push_str(&self.group_detail(db, key, group_name, members, pending));
            }
        }
        out.push_str("</tbody></table>");
        if names.len() > GROUPS_DETAILED {
            let _ = write!(
                out,
                "<p class=\"hint\">The first {GROUPS_DETAILED} groups are shown with their consumers and pending entries.</p>"
            );
        }
        Ok((out, details))
    }

    /// A group's row: its `XINFO GROUPS` fields, its pending count per consumer (from the
    /// `XPENDING` `summary`), and its edits.
    fn group_row(&self, db: &str, key: &str, group: &Reply, group_name: &str, summary: Option<&Reply>) -> String {
        let fields = pairs(group);
        let consumers: Vec<String> = match summary.map(Reply::items) {
            Some([_, _, _, consumers]) => consumers
                .items()
                .iter()
                .map(|c| match c.items() {
                    [consumer, count] => format!("{}: {}", cell(consumer), cell(count)),
                    _ => String::new(),
                })
                .collect(),
            _ => summary
                .and_then(Reply::error)
                .map(|err| vec![name(err)])
                .unwrap_or_default(),
        };
        let group_edits = format!(
            "{}{}",
            self.key_edit(
                db,
                key,
                "xgroup-setid",
                &[("group", group_name)],
                "<label>Last delivered ID <input name=\"id\" class=\"setid\" required></label><button class=\"setid\">Set ID</button>",
            ),
            self.key_edit(
                db,
                key,
                "xgroup-destroy",
                &[("group", group_name)],
                &button("Destroy", "danger", Some("Destroy this group and its pending entries?")),
            ),
        );
        format!(
            "<tr class=\"group\" data-group=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"actions\">{group_edits}</td></tr>",
            esc(group_name),
            name(group_name),
            esc(&field(&fields, "consumers")),
            esc(&field(&fields, "pending")),
            esc(&field(&fields, "last-delivered-id")),
            esc(&field(&fields, "lag")),
            consumers.join("<br>")
        )
    }

    /// One group's consumers and its oldest [`ELEMENTS`] pending entries, each pending entry
    /// with *Acknowledge* and *Claim* (to a consumer named in the form).
    fn group_detail(
        &self,
        db: &str,
        key: &str,
        group: &str,
        consumers: Option<&Reply>,
        pending: Option<&Reply>,
    ) -> String {
        let mut out = format!(
            "<section class=\"group-detail\" data-group=\"{}\"><h3>Group <span class=\"name\">{}</span></h3>",
            esc(group),
            name(group)
        );
        match consumers {
            Some(Reply::Error(err)) => out.push_str(&super::jobs::refused(err)),
            Some(consumers) if !consumers.items().is_empty() => {
                out.push_str(
                    "<table class=\"consumers\"><thead><tr><th>Consumer</th><th>Pending</th><th>Idle</th></tr></thead><tbody>",
                );
                for consumer in consumers.items() {
                    let fields = pairs(consumer);
                    let _ = write!(
                        out,
                        "<tr class=\"consumer\"><td>{}</td><td>{}</td><td>{} ms</td></tr>",
                        name(&field(&fields, "name")),
                        esc(&field(&fields, "pending")),
                        esc(&field(&fields, "idle")),
                    );
                }
                out.push_str("</tbody></table>");
            }
            _ => out.push_str("<p>No consumers.</p>"),
        }
        match pending {
            Some(Reply::Error(err)) => out.push_str(&super::jobs::refused(err)),
            Some(pending) if !pending.items().is_empty() => {
                out.push_str(
                    "<table class=\"pending\"><thead><tr><th>Entry</th><th>Consumer</th><th>Idle</th><th>Deliveries</th><th></th></tr></thead><tbody>",
                );
                for entry in pending.items() {
                    let [id, consumer, idle, deliveries] = entry.items() else {
                        continue;
                    };
                    let id = id.text().unwrap_or_default();
                    let fields = [("group", group), ("id", id.as_str())];
                    let _ = write!(
                        out,
                        "<tr class=\"pending-entry\" data-id=\"{}\"><td><code>{}</code></td><td>{}</td><td>{} ms</td><td>{}</td><td class=\"actions\">{}{}</td></tr>",
                        esc(&id),
                        esc(&id),
                        cell(consumer),
                        cell(idle),
                        cell(deliveries),
                        self.key_edit(db, key, "xack", &fields, &button("Acknowledge", "xack", None)),
                        self.key_edit(
                            db,
                            key,
                            "xclaim",
                            &fields,
                            "<label>to <input name=\"consumer\" class=\"claim-to\" required></label><button class=\"xclaim\">Claim</button>",
                        ),
                    );
                }
                out.push_str("</tbody></table>");
                if pending.items().len() as i64 == ELEMENTS {
                    let _ = write!(
                        out,
                        "<p class=\"hint\">The oldest {ELEMENTS} pending entries are shown.</p>"
                    );
                }
            }
            _ => out.push_str("<p>No pending entries.</p>"),
        }
        out.push_str("</section>");
        out
    }
}
