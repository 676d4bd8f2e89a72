//! Writes the CRDs as YAML, one file per kind, into each directory given
//! (default: `crds/` and the Helm chart's `charts/pgvs3-operator/crds/`).

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut dirs: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if dirs.is_empty() {
        dirs = vec!["crds".into(), "charts/pgvs3-operator/crds".into()];
    }
    for dir in &dirs {
        std::fs::create_dir_all(dir)?;
        for crd in pgvs3_operator::crd::all() {
            let path = dir.join(format!("{}.yaml", crd.spec.names.plural));
            std::fs::write(&path, pgvs3_operator::crd::to_yaml(&crd)?)?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}
