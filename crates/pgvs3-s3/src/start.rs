//! Starts the S3 endpoint from its flags: admission classes, the front, and its listeners.

use pgvs3_base::args::SimulateArgs;
use pgvs3_base::feature::{Listen, Shared, Started, spawn_http};
use pgvs3_base::http_server;
use pgvs3_store::bucket::Buckets;

use crate::admission::Admission;
use crate::args::S3Args;
use crate::s3::{FrontSettings, PostLimits, S3Admission, S3Endpoint, busy_response};

/// Binds the S3 listeners (`--s3-addr` and its plaintext twin) and serves S3 on them; with
/// `simulate`'s constraints, answers like a distant store.
pub async fn start(
    args: &S3Args,
    buckets: Buckets,
    shared: &Shared,
    listen: Listen,
    simulate: &SimulateArgs,
) -> anyhow::Result<Started> {
    let listeners = listen.bind("S3", "--s3-addr", "--s3-plaintext-addr").await?;
    let mut started = Started::bound(&listeners.0, listeners.1.as_ref())?;
    let admission = S3Admission {
        requests: Admission::new("s3", args.limits(shared.admission), shared.metrics.clone()),
        uploads: Admission::new(
            "s3_upload",
            args.upload_limits(shared.admission),
            shared.metrics.clone(),
        ),
        upload_threshold: args.s3_upload_threshold,
    };
    let endpoint = S3Endpoint::new(
        buckets,
        FrontSettings {
            region: args.region.clone(),
            default_ownership: args.s3_default_object_ownership,
        },
        &args.s3_domains,
        shared.metrics.clone(),
        admission,
        shared.lag.clone(),
        PostLimits {
            max_file: args.s3_post_max_size,
            budget: shared.buffers.clone(),
        },
    )?;
    let settings = http_server::Listener {
        name: "s3",
        limits: shared.http.limits(args.s3_max_connections),
        busy_response: busy_response(),
        tls: listen.tls,
    };
    let simulated = simulate.constraints();
    started.servers = if simulated.any() {
        tracing::warn!(?simulated, "the S3 endpoint simulates a constrained remote store");
        let endpoint = pgvs3_base::simulate::Constrained::new(endpoint, simulated);
        spawn_http(listeners, endpoint, settings, shared)
    } else {
        spawn_http(listeners, endpoint, settings, shared)
    };
    Ok(started)
}
