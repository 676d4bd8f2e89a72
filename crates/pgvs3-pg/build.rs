//! Generates the list of numbered migrations from `migrations/NNNN_<name>.sql`, so adding one
//! touches only its own file: the list, and the layout version (the highest number), follow.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read at run time, not baked in with env!: a target directory shared by checkouts at other
    // paths reuses this compiled script, and it must read the checkout that runs it.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest_dir).join("migrations");
    // A new or removed file changes the directory; edits to a file are tracked by its include_str!.
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut migrations: Vec<(u32, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
        .map(|entry| {
            entry
                .expect("a directory entry")
                .file_name()
                .into_string()
                .expect("a UTF-8 file name")
        })
        .filter_map(|file| {
            let stem = file.strip_suffix(".sql")?;
            let (number, name) = stem.split_once('_')?;
            let number = number
                .parse()
                .unwrap_or_else(|_| panic!("migrations/{file}: expected NNNN_<name>.sql"));
            Some((number, name.to_owned()))
        })
        .collect();
    migrations.sort();
    for (index, (number, name)) in migrations.iter().enumerate() {
        // Two branches that both added the next number meet here at merge: renumber one.
        assert_eq!(
            *number as usize,
            index + 1,
            "migrations must be numbered 1, 2, 3, ... without gaps or twins (at {number:04}_{name}.sql)"
        );
    }
    let mut out =
        String::from("/// Every numbered migration: version, name, SQL (generated from `migrations/` by build.rs).\n");
    out.push_str("const MIGRATIONS: &[(i32, &str, &str)] = &[\n");
    for (number, name) in &migrations {
        let path = dir.join(format!("{number:04}_{name}.sql"));
        writeln!(
            out,
            "    ({number}, {name:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    out.push_str("];\n\n/// Layout version this gateway reads and writes: the highest numbered migration.\n");
    writeln!(out, "pub const LAYOUT_VERSION: i32 = {};", migrations.len()).unwrap();
    let generated = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("migrations.rs");
    std::fs::write(&generated, out).unwrap_or_else(|err| panic!("writing {}: {err}", generated.display()));
}
