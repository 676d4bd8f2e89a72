//! Golden manifests: `render` of the documented examples must match `tests/golden/` exactly,
//! and the committed CRDs must match what the types generate. `UPDATE_GOLDEN=1 cargo test -p
//! pgvs3-operator --test operator golden` rewrites the goldens (review the diff before committing).

use std::path::{Path, PathBuf};

use pgvs3_operator::gateway_pool::build::Inputs;
use pgvs3_operator::render::render;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn check(golden: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(golden);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("missing {}", path.display()));
    assert!(
        expected == actual,
        "{golden} differs from the rendered output; rerun with UPDATE_GOLDEN=1 and review.\n--- rendered ---\n{actual}"
    );
}

fn examples(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| std::fs::read_to_string(workspace().join("docs/examples").join(name)).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

#[test]
fn primary_pool_renders_as_golden() {
    let text = examples(&["gatewaypool-primary.yaml"]);
    check("gatewaypool-primary.yaml", &render(&text, &Inputs::default()).unwrap());
}

#[test]
fn standby_pool_with_autoscaling_and_service_monitor_renders_as_golden() {
    let text = examples(&["gatewaypool-standby.yaml"]);
    let inputs = Inputs {
        service_monitor_crd: true,
        ..Inputs::default()
    };
    check("gatewaypool-standby.yaml", &render(&text, &inputs).unwrap());
}

#[test]
fn bucket_and_origin_cache_render_as_golden() {
    let text = examples(&[
        "gatewaypool-primary.yaml",
        "gatewaypool-standby.yaml",
        "bucket.yaml",
        "origincache.yaml",
    ]);
    let rendered = render(&text, &Inputs::default()).unwrap();
    // Only the Bucket's and OriginCache's part (from the Bucket's Secret on): the pools have
    // goldens of their own.
    let tail = &rendered[rendered
        .find("name: photos-credentials")
        .map(|i| rendered[..i].rfind("---\n").unwrap())
        .unwrap()..];
    check("bucket-and-origincache.yaml", tail);
}

/// A pool whose OriginCaches' origins have private CAs (their bundles in a Secret and a
/// ConfigMap): its ConfigMap names the mounted files, its Deployment mounts them.
#[test]
fn a_pool_mounts_its_origin_caches_ca_bundles_as_golden() {
    let cache = |name: &str, bundle: &str| {
        format!(
            "apiVersion: pgvs3.io/v1alpha1\nkind: OriginCache\nmetadata: {{name: {name}, namespace: pgvs3-demo}}\n\
             spec:\n  gatewayPoolRef: demo-primary\n  bucket: {name}-cache\n  credentialsSecretRef: {name}-origin\n  \
             origin: {{endpoint: 'https://minio.storage.svc:9000', bucket: {name}, caBundle: {bundle}}}\n"
        )
    };
    let text = [
        examples(&["gatewaypool-primary.yaml"]),
        cache("datasets", "{secretRef: minio-tls, key: ca.crt}"),
        cache("models", "{configMapRef: corporate-roots, key: roots.pem}"),
    ]
    .join("---\n");
    let rendered = render(&text, &Inputs::default()).unwrap();
    let pool_parts: Vec<&str> = rendered
        .split("---\n")
        .filter(|part| part.contains("\nkind: ConfigMap\n") || part.contains("\nkind: Deployment\n"))
        .collect();
    assert_eq!(pool_parts.len(), 2, "{rendered}");
    check("gatewaypool-origin-ca.yaml", &pool_parts.join("---\n"));
}

/// `UPDATE_GOLDEN=1` rewrites them too.
#[test]
fn committed_crds_match_the_types() {
    for (dir, crd) in ["crds", "charts/pgvs3-operator/crds"]
        .into_iter()
        .flat_map(|dir| pgvs3_operator::crd::all().into_iter().map(move |crd| (dir, crd)))
    {
        let path = workspace().join(dir).join(format!("{}.yaml", crd.spec.names.plural));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, pgvs3_operator::crd::to_yaml(&crd).unwrap()).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("missing {}", path.display()));
        assert!(
            committed == pgvs3_operator::crd::to_yaml(&crd).unwrap(),
            "{} drifted: run `just crds`",
            path.display()
        );
    }
}

#[test]
fn render_rejects_unknown_kinds() {
    let err = render("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", &Inputs::default()).unwrap_err();
    assert!(err.to_string().contains("cannot render kind \"Pod\""), "{err}");
}
