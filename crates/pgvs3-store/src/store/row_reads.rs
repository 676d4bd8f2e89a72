//! Keeps rows read by column name (issue 32): a read by position (`row.get(3)`) breaks silently
//! when a column is added to or moved in a SELECT, a read by name fails loudly. This test scans
//! the workspace's Rust sources and names every number-indexed read of a row it finds.

use std::path::{Path, PathBuf};

/// The source trees scanned, from the workspace root.
const TREES: &[&str] = &["crates", "gateway", "operator", "e2e"];

/// Receivers that are rows by their name (`row`, `first_row`, `first`, `written`, …).
fn names_a_row(receiver: &str) -> bool {
    receiver.contains("row") || matches!(receiver, "first" | "written" | "part" | "upload" | "counted" | "counts")
}

/// The number-indexed row reads in `source`, as 1-based line numbers. A read is `.get(N)`,
/// `.try_get(N)` or `.get::<…>(N)` on a row: tokio-postgres's turbofish (`get::<_, T>`), a
/// query's result (`…?.get(0)`, `.expect("…").get(0)`), or a receiver named like a row.
/// `args.get(1)` on a slice is no row read.
fn positional_reads(source: &str) -> Vec<usize> {
    let mut found = Vec::new();
    for (at, _) in source.match_indices("get") {
        let before = &source[..at];
        let Some(receiver) = before.strip_suffix(".try_").or_else(|| before.strip_suffix('.')) else {
            continue;
        };
        let receiver = receiver.trim_end();
        let mut rest = &source[at + "get".len()..];
        let mut turbofish_row = false;
        if let Some(generics) = rest.strip_prefix("::<") {
            let mut depth = 1;
            let Some(end) = generics.find(|c| {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                depth == 0
            }) else {
                continue;
            };
            turbofish_row = generics.trim_start().starts_with('_');
            rest = &generics[end + 1..];
        }
        let Some(args) = rest.strip_prefix('(') else {
            continue;
        };
        let digits = args.len() - args.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 || !args[digits..].starts_with(')') {
            continue;
        }
        let ident_start = receiver
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let query_result = receiver.ends_with('?') || receiver.ends_with("\")") || receiver.ends_with(".unwrap()");
        if turbofish_row || query_result || names_a_row(&receiver[ident_start..]) {
            found.push(source[..at].matches('\n').count() + 1);
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if !matches!(name.to_str(), Some("target" | "node_modules" | ".git")) {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn rows_are_read_by_column_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for tree in TREES {
        rust_files(&root.join(tree), &mut files);
    }
    assert!(
        files.len() > 100,
        "the workspace's sources were not found under {root:?}"
    );
    let mut offenders = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(&root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        // This file's own examples are not reads.
        if relative == "crates/pgvs3-store/src/store/row_reads.rs" {
            continue;
        }
        let source = std::fs::read_to_string(&file).expect("a readable source file");
        offenders.extend(
            positional_reads(&source)
                .into_iter()
                .map(|line| format!("{relative}:{line}")),
        );
    }
    assert!(
        offenders.is_empty(),
        "rows read by position (read them by column name, `row.get(\"name\")`, with `AS name` in the SQL):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_scan_tells_row_reads_from_slice_reads() {
    let source = "let a = row.get(3);\nlet b: i64 = client.query_one(q, &[]).await?\n    .get(0);\n\
                  let c = first.get::<_, i64>(1);\nlet d = row.try_get(0)?;\nlet e = args.get(1).cloned();\n\
                  let f = text.as_bytes().get(10);\nlet g = row.get(\"name\");\nlet h = x.get::<usize>(2);\n";
    assert_eq!(positional_reads(source), vec![1, 3, 4, 5]);
}
