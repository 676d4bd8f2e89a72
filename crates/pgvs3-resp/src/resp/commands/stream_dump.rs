//! A stream as DUMP reads it and RESTORE writes it: the rows of `pgvs3.resp_stream`'s `xdump`
//! and `xrestore` (functions/resp_stream.sql) to and from rdb.rs's [`Stream`].

use std::collections::HashMap;

use bytes::Bytes;

use super::rdb::{Consumer, Entry, Group, Id, Node, Pending, Stream};
use super::stream::StreamId;
use crate::resp::typed::{Shape, Typed};
use crate::store::{StreamOp, TypedCall, TypedRow};

/// The call that reads stream `key` whole.
pub(super) fn read_call(key: &str) -> TypedCall {
    Typed::new(StreamOp::Xdump, vec![key.to_owned()], &[], Shape::Ok)
        .ints(&[Some(0)])
        .call
}

type Items = std::vec::IntoIter<Option<Bytes>>;
type Scores = std::vec::IntoIter<Option<f64>>;

fn id(items: &mut Items) -> Option<Id> {
    Some(StreamId::from_stored(&items.next()??)?.into())
}

/// A number that is there (not NULL).
fn number(scores: &mut Scores) -> Option<f64> {
    scores.next()?
}

/// The stream `xdump` answered (XINFO STREAM FULL's row of everything, then the nodes); `None`
/// when the row is not that.
pub(super) fn read(row: TypedRow) -> Option<Stream> {
    let mut items = row.items.into_iter();
    let mut scores = row.scores.into_iter();
    let (last, max_deleted, first) = (id(&mut items)?, id(&mut items)?, id(&mut items)?);
    let (added, groups, listed) = (number(&mut scores)?, number(&mut scores)?, number(&mut scores)?);
    let mut entries = Vec::new();
    for _ in 0..listed as usize {
        let id = id(&mut items)?;
        let size = number(&mut scores)? as usize;
        let mut fields = Vec::new();
        for _ in 0..size {
            fields.push(items.next()??);
        }
        entries.push(Entry { id, fields });
    }
    let mut stream = Stream {
        last,
        first,
        max_deleted,
        added: added as u64,
        ..Stream::default()
    };
    for _ in 0..groups as usize {
        stream.groups.push(group(&mut items, &mut scores)?);
    }
    let mut nodes = Vec::new();
    for _ in 0..number(&mut scores)? as usize {
        let (master, last) = (id(&mut items)?, id(&mut items)?);
        nodes.push(Node {
            master,
            entries: Vec::new(),
            given: number(&mut scores)? as u64,
            last,
        });
    }
    stream.nodes = grouped(nodes, entries);
    Some(stream)
}

/// A group as resp_stream_groups_full lists it (functions/resp_stream_group.sql), every PEL
/// entry listed.
fn group(items: &mut Items, scores: &mut Scores) -> Option<Group> {
    let (name, last_delivered) = (items.next()??, id(items)?);
    let entries_read = scores.next()?.map(|read| read as u64);
    let (_lag, _size, listed) = (scores.next()?, scores.next()?, number(scores)?);
    let mut owners = Vec::new();
    let mut pending = Vec::new();
    for _ in 0..listed as usize {
        let (entry, owner) = (id(items)?, items.next()??);
        owners.push(owner);
        pending.push(Pending {
            id: entry,
            delivered: number(scores)? as i64,
            deliveries: number(scores)? as u64,
            consumer: 0,
        });
    }
    let mut consumers = Vec::new();
    for _ in 0..number(scores)? as usize {
        let name = items.next()??;
        let seen = number(scores)? as i64;
        let (_active, _size, listed) = (scores.next()?, scores.next()?, number(scores)?);
        // Its PEL again: the group's lists it with its owner.
        for _ in 0..listed as usize {
            id(items)?;
            scores.next()?;
            scores.next()?;
        }
        consumers.push(Consumer { name, seen });
    }
    let places: HashMap<&Bytes, usize> = consumers
        .iter()
        .enumerate()
        .map(|(place, consumer)| (&consumer.name, place))
        .collect();
    for (entry, owner) in pending.iter_mut().zip(&owners) {
        entry.consumer = *places.get(owner)?;
    }
    Some(Group {
        name,
        last_delivered,
        entries_read,
        pending,
        consumers,
    })
}

/// The entries (in ID order) in their nodes: each in the node with the greatest ID at or
/// before its own (0060_resp_stream_nodes.sql); one before every node starts its own. Nodes
/// left empty are not kept.
fn grouped(nodes: Vec<Node>, entries: Vec<Entry>) -> Vec<Node> {
    let mut nodes = nodes.into_iter().peekable();
    let mut held: Vec<Node> = Vec::new();
    for entry in entries {
        while let Some(node) = nodes.next_if(|node| node.master <= entry.id) {
            held.push(node);
        }
        match held.last_mut() {
            Some(node) => node.entries.push(entry),
            None => held.push(Node {
                master: entry.id,
                given: 1,
                last: entry.id,
                entries: vec![entry],
            }),
        }
    }
    held.retain(|node| !node.entries.is_empty());
    held
}

/// The call that writes `stream` into `key` (which holds nothing), as `xrestore` takes it.
pub(super) fn write_call(key: &str, stream: &Stream) -> TypedCall {
    let stored = |id: Id| StreamId::from(id).stored();
    let int = |value: u64| Some(value as i64);
    let entries = stream.nodes.iter().flat_map(|node| &node.entries);
    let mut ints = Vec::new();
    ints.extend(stored(stream.last));
    ints.extend(stored(stream.max_deleted));
    ints.extend([
        int(stream.added),
        int(stream.nodes.len() as u64),
        int(stream.length()),
        int(stream.groups.len() as u64),
    ]);
    for node in &stream.nodes {
        ints.extend(stored(node.master));
        ints.extend(stored(node.last));
        ints.extend([int(node.given), int(node.entries.len() as u64)]);
    }
    let mut args = Vec::new();
    for entry in entries {
        ints.extend(stored(entry.id));
        ints.push(int(entry.fields.len() as u64));
        args.extend(entry.fields.iter().cloned());
    }
    for group in &stream.groups {
        ints.extend(stored(group.last_delivered));
        ints.extend([
            group.entries_read.and_then(int),
            int(group.consumers.len() as u64),
            int(group.pending.len() as u64),
        ]);
        ints.extend(group.consumers.iter().map(|consumer| Some(consumer.seen)));
        for pending in &group.pending {
            ints.extend(stored(pending.id));
            ints.extend([
                Some(pending.delivered),
                int(pending.deliveries),
                int(pending.consumer as u64 + 1),
            ]);
        }
        args.push(group.name.clone());
        args.extend(group.consumers.iter().map(|consumer| consumer.name.clone()));
    }
    Typed::new(StreamOp::Xrestore, vec![key.to_owned()], &args, Shape::Ok)
        .ints(&ints)
        .call
}
