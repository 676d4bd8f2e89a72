//! A Parquet file's schema, read from its footer: the Thrift `FileMetaData` in the compact
//! protocol, parsed by a small reader bounded in depth and in what it allocates (every count is
//! checked against the bytes left), so a hostile footer costs no more than its own size. Only
//! the schema, the row count and `created_by` are kept; every other field is skipped.
//! (The `parquet` crate would do this with dozens of dependencies.)

/// A footer longer than this is not read (the preview says so).
pub const MAX_FOOTER: u32 = 4 << 20;
/// Thrift structs nested deeper than this are refused (real footers need a handful).
const MAX_DEPTH: usize = 32;

/// What the preview shows of a file.
pub struct FileSchema {
    pub num_rows: i64,
    pub created_by: Option<String>,
    /// Depth-first, as stored: the root first, then each node's children after it.
    pub columns: Vec<Column>,
}

pub struct Column {
    /// 0 for the root's children.
    pub depth: usize,
    pub name: String,
    /// The physical type, for a leaf.
    pub physical: Option<&'static str>,
    pub repetition: Option<&'static str>,
    /// The logical (or, without one, converted) type.
    pub annotation: Option<String>,
}

/// The footer's length, from a file's last 8 bytes (`<u32 LE length>PAR1`).
pub fn footer_length(tail: &[u8]) -> Result<u32, String> {
    match tail {
        [a, b, c, d, b'P', b'A', b'R', b'1'] => Ok(u32::from_le_bytes([*a, *b, *c, *d])),
        [_, _, _, _, b'P', b'A', b'R', b'E'] => Err("its footer is encrypted".to_owned()),
        _ => Err("it does not end in PAR1, so it is not a Parquet file".to_owned()),
    }
}

/// Parses a `FileMetaData`.
pub fn schema(footer: &[u8]) -> Result<FileSchema, String> {
    let mut reader = Reader {
        data: footer,
        at: 0,
        depth: 0,
    };
    let mut elements = Vec::new();
    let mut num_rows = 0;
    let mut created_by = None;
    let mut last = 0;
    while let Some((id, kind)) = reader.field(&mut last)? {
        match (id, kind) {
            (2, LIST) => {
                let (count, element) = reader.list_header()?;
                if element != STRUCT {
                    return Err("its schema is not a list of structs".to_owned());
                }
                for _ in 0..count {
                    elements.push(reader.nested(Reader::element)?);
                }
            }
            (3, I64) => num_rows = reader.zigzag()?,
            (6, BINARY) => created_by = Some(String::from_utf8_lossy(reader.binary()?).into_owned()),
            (_, kind) => reader.skip(kind)?,
        }
    }
    Ok(FileSchema {
        num_rows,
        created_by,
        columns: tree(elements)?,
    })
}

/// Depths from the flattened tree (each node's `num_children` follow it); the root is left out.
fn tree(elements: Vec<Element>) -> Result<Vec<Column>, String> {
    let mut elements = elements.into_iter();
    let root = elements.next().ok_or("its schema is empty")?;
    let mut open = vec![root.num_children.unwrap_or(0)];
    let mut columns = Vec::new();
    for element in elements {
        while open.last() == Some(&0) {
            open.pop();
        }
        let Some(remaining) = open.last_mut() else {
            return Err("its schema has more columns than its root holds".to_owned());
        };
        *remaining -= 1;
        let depth = open.len() - 1;
        let children = element.num_children.unwrap_or(0);
        columns.push(Column {
            depth,
            name: element.name,
            physical: (children == 0).then(|| element.physical.map(physical_name)).flatten(),
            repetition: element.repetition.map(repetition_name),
            annotation: element
                .logical
                .or_else(|| element.converted.and_then(converted_name).map(str::to_owned))
                .map(
                    |annotation| match (annotation.as_str(), element.precision, element.scale) {
                        ("DECIMAL", Some(precision), Some(scale)) => format!("DECIMAL({precision}, {scale})"),
                        _ => annotation,
                    },
                ),
        });
        if children > 0 {
            open.push(children);
        }
    }
    Ok(columns)
}

#[derive(Default)]
struct Element {
    name: String,
    physical: Option<i32>,
    repetition: Option<i32>,
    num_children: Option<i32>,
    converted: Option<i32>,
    logical: Option<String>,
    scale: Option<i32>,
    precision: Option<i32>,
}

// Compact protocol types.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    depth: usize,
}

const TRUNCATED: &str = "its footer ends in the middle of a value";

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.data.len() - self.at
    }

    fn byte(&mut self) -> Result<u8, String> {
        let byte = *self.data.get(self.at).ok_or(TRUNCATED)?;
        self.at += 1;
        Ok(byte)
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], String> {
        if len > self.left() {
            return Err(TRUNCATED.to_owned());
        }
        let bytes = &self.data[self.at..self.at + len];
        self.at += len;
        Ok(bytes)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("its footer has a number longer than ten bytes".to_owned())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let value = self.varint()?;
        Ok((value >> 1) as i64 ^ -((value & 1) as i64))
    }

    fn i32(&mut self) -> Result<i32, String> {
        i32::try_from(self.zigzag()?).map_err(|_| "its footer has an i32 out of range".to_owned())
    }

    fn binary(&mut self) -> Result<&'a [u8], String> {
        let len = usize::try_from(self.varint()?).unwrap_or(usize::MAX);
        self.bytes(len)
    }

    /// The next field's id and type; `None` at the struct's end.
    fn field(&mut self, last: &mut i16) -> Result<Option<(i16, u8)>, String> {
        let header = self.byte()?;
        if header == 0 {
            return Ok(None);
        }
        let delta = i16::from(header >> 4);
        let id = match delta {
            0 => i16::try_from(self.zigzag()?).map_err(|_| "its footer has a field id out of range")?,
            _ => last
                .checked_add(delta)
                .ok_or("its footer has a field id out of range")?,
        };
        *last = id;
        Ok(Some((id, header & 0x0f)))
    }

    /// A list's (or set's) size and element type; the size is at most the bytes left, as each
    /// element takes one at least.
    fn list_header(&mut self) -> Result<(usize, u8), String> {
        let header = self.byte()?;
        let size = match header >> 4 {
            15 => usize::try_from(self.varint()?).unwrap_or(usize::MAX),
            size => usize::from(size),
        };
        if size > self.left() {
            return Err("its footer has a list longer than the footer".to_owned());
        }
        Ok((size, header & 0x0f))
    }

    /// `read` one level deeper, refusing nesting past [`MAX_DEPTH`].
    fn nested<T>(&mut self, read: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<T, String> {
        if self.depth == MAX_DEPTH {
            return Err("its footer nests deeper than a schema needs".to_owned());
        }
        self.depth += 1;
        let value = read(self);
        self.depth -= 1;
        value
    }

    fn skip(&mut self, kind: u8) -> Result<(), String> {
        match kind {
            BOOL_TRUE | BOOL_FALSE => {}
            BYTE => {
                self.byte()?;
            }
            I16 | I32 | I64 => {
                self.varint()?;
            }
            DOUBLE => {
                self.bytes(8)?;
            }
            BINARY => {
                self.binary()?;
            }
            LIST | SET => self.nested(|reader| {
                let (size, element) = reader.list_header()?;
                for _ in 0..size {
                    match element {
                        // In a list a boolean is a byte of its own.
                        BOOL_TRUE | BOOL_FALSE => {
                            reader.byte()?;
                        }
                        _ => reader.skip(element)?,
                    }
                }
                Ok(())
            })?,
            MAP => self.nested(|reader| {
                let size = usize::try_from(reader.varint()?).unwrap_or(usize::MAX);
                if size == 0 {
                    return Ok(());
                }
                if size > reader.left() {
                    return Err("its footer has a map longer than the footer".to_owned());
                }
                let kinds = reader.byte()?;
                for _ in 0..size {
                    reader.skip(kinds >> 4)?;
                    reader.skip(kinds & 0x0f)?;
                }
                Ok(())
            })?,
            STRUCT => self.nested(|reader| {
                let mut last = 0;
                while let Some((_, kind)) = reader.field(&mut last)? {
                    reader.skip(kind)?;
                }
                Ok(())
            })?,
            other => return Err(format!("its footer has an unknown Thrift type {other}")),
        }
        Ok(())
    }

    /// A `SchemaElement`.
    fn element(&mut self) -> Result<Element, String> {
        let mut element = Element::default();
        let mut last = 0;
        while let Some((id, kind)) = self.field(&mut last)? {
            match (id, kind) {
                (1, I32) => element.physical = Some(self.i32()?),
                (3, I32) => element.repetition = Some(self.i32()?),
                (4, BINARY) => element.name = String::from_utf8_lossy(self.binary()?).into_owned(),
                (5, I32) => element.num_children = Some(self.i32()?.max(0)),
                (6, I32) => element.converted = Some(self.i32()?),
                (7, I32) => element.scale = Some(self.i32()?),
                (8, I32) => element.precision = Some(self.i32()?),
                (10, STRUCT) => element.logical = Some(self.nested(Reader::logical)?),
                (_, kind) => self.skip(kind)?,
            }
        }
        Ok(element)
    }

    /// A `LogicalType` union: the name of its one member.
    fn logical(&mut self) -> Result<String, String> {
        let mut name = String::from("unknown");
        let mut last = 0;
        while let Some((id, kind)) = self.field(&mut last)? {
            name = match id {
                1 => "STRING",
                2 => "MAP",
                3 => "LIST",
                4 => "ENUM",
                5 => "DECIMAL",
                6 => "DATE",
                7 => "TIME",
                8 => "TIMESTAMP",
                10 => "INTEGER",
                11 => "NULL",
                12 => "JSON",
                13 => "BSON",
                14 => "UUID",
                15 => "FLOAT16",
                16 => "VARIANT",
                17 => "GEOMETRY",
                18 => "GEOGRAPHY",
                _ => "unknown",
            }
            .to_owned();
            self.skip(kind)?;
        }
        Ok(name)
    }
}

fn physical_name(value: i32) -> &'static str {
    match value {
        0 => "BOOLEAN",
        1 => "INT32",
        2 => "INT64",
        3 => "INT96",
        4 => "FLOAT",
        5 => "DOUBLE",
        6 => "BYTE_ARRAY",
        7 => "FIXED_LEN_BYTE_ARRAY",
        _ => "unknown",
    }
}

fn repetition_name(value: i32) -> &'static str {
    match value {
        0 => "required",
        1 => "optional",
        2 => "repeated",
        _ => "unknown",
    }
}

fn converted_name(value: i32) -> Option<&'static str> {
    Some(match value {
        0 => "UTF8",
        1 => "MAP",
        2 => "MAP_KEY_VALUE",
        3 => "LIST",
        4 => "ENUM",
        5 => "DECIMAL",
        6 => "DATE",
        7 => "TIME_MILLIS",
        8 => "TIME_MICROS",
        9 => "TIMESTAMP_MILLIS",
        10 => "TIMESTAMP_MICROS",
        11 => "UINT_8",
        12 => "UINT_16",
        13 => "UINT_32",
        14 => "UINT_64",
        15 => "INT_8",
        16 => "INT_16",
        17 => "INT_32",
        18 => "INT_64",
        19 => "JSON",
        20 => "BSON",
        21 => "INTERVAL",
        _ => return None,
    })
}
