//! The S3 endpoint's flags (`S3Args`, flattened into `pgvs3 serve`).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use pgvs3_base::admission::Limits;
use pgvs3_base::args::{parse_bytes, parse_duration};
use pgvs3_base::feature::AdmissionDefaults;
use pgvs3_store::access::acl::Ownership;

#[derive(Debug, Clone, Args)]
pub struct S3Args {
    /// Listen address of the S3 endpoint.
    #[arg(long, env = "PGVS3_S3_ADDR", default_value = "127.0.0.1:9000")]
    pub s3_addr: SocketAddr,

    /// S3 requests served at once (0: twice the pool size); beyond it requests wait.
    #[arg(long, env = "PGVS3_S3_MAX_ACTIVE", default_value_t = 0)]
    pub s3_max_active: usize,

    /// S3 requests that may wait for a slot (0: twice the active limit); beyond it they get
    /// 503 SlowDown at once.
    #[arg(long, env = "PGVS3_S3_MAX_WAITING", default_value_t = 0)]
    pub s3_max_waiting: usize,

    /// The largest file a browser upload (POST Object) may carry. s3s holds the file in memory
    /// before storing it, so each form draws its size from the buffer budget while it is read
    /// (a form that does not fit gets 503 SlowDown); keep it well below --buffer-budget.
    #[arg(long, env = "PGVS3_S3_POST_MAX_SIZE", default_value = "64MiB", value_parser = parse_bytes)]
    pub s3_post_max_size: u64,

    /// The object ownership of a bucket created without `x-amz-object-ownership`:
    /// BucketOwnerEnforced (AWS's default: ACLs off), or ObjectWriter / BucketOwnerPreferred for
    /// ACL-era tools (`create_bucket(ACL=...)`, s3cmd `--acl-public`, PutBucketAcl), as buckets
    /// made on MinIO or Ceph behave.
    #[arg(
        long,
        env = "PGVS3_S3_DEFAULT_OBJECT_OWNERSHIP",
        default_value = "BucketOwnerEnforced",
        value_parser = parse_ownership
    )]
    pub s3_default_object_ownership: Ownership,

    /// Region reported by GetBucketLocation and accepted in signatures.
    #[arg(long, env = "PGVS3_REGION", default_value = "us-east-1")]
    pub region: String,

    /// Base domain(s) for virtual-host-style requests (`<bucket>.<domain>`); path style always works.
    #[arg(long = "s3-domain", env = "PGVS3_S3_DOMAINS", value_delimiter = ',')]
    pub s3_domains: Vec<String>,

    /// S3 connections open at once; beyond it a connection is answered 503 SlowDown and closed.
    #[arg(long, env = "PGVS3_S3_MAX_CONNECTIONS", default_value_t = 4096)]
    pub s3_max_connections: usize,

    /// S3 requests whose body is declared larger than this (or not declared) are admitted as
    /// uploads, in their own class (--s3-max-active-uploads), so large bodies cannot take the
    /// slots small requests need.
    #[arg(long, env = "PGVS3_S3_UPLOAD_THRESHOLD", default_value = "1MiB", value_parser = parse_bytes)]
    pub s3_upload_threshold: u64,

    /// Uploads (see --s3-upload-threshold) streaming at once (0: as many as --s3-max-active);
    /// beyond it they wait (up to --s3-upload-wait), then get 503 SlowDown.
    #[arg(long, env = "PGVS3_S3_MAX_ACTIVE_UPLOADS", default_value_t = 0)]
    pub s3_max_active_uploads: usize,

    /// How long an upload waits for its turn. Longer than --admission-wait: a waiting upload
    /// costs an idle connection (its body is not read yet), while one turned away is sent again
    /// by its client, body and all.
    #[arg(long, env = "PGVS3_S3_UPLOAD_WAIT", default_value = "30s", value_parser = parse_duration)]
    pub s3_upload_wait: Duration,

    /// Multipart uploads neither completed nor aborted this long after they started are
    /// aborted by the maintenance reaper.
    #[arg(long, env = "PGVS3_MULTIPART_MAX_AGE", default_value = "168h", value_parser = parse_duration)]
    pub multipart_max_age: Duration,
}

impl S3Args {
    /// The admission limits of requests without a large body, defaults filled in.
    pub fn limits(&self, defaults: AdmissionDefaults) -> Limits {
        defaults.limits(self.s3_max_active, self.s3_max_waiting)
    }

    /// The admission limits of uploads (large or undeclared bodies), defaults filled in.
    pub fn upload_limits(&self, defaults: AdmissionDefaults) -> Limits {
        let requests = self.limits(defaults);
        // Measured (docs/benchmarks.md, "Small requests beside large uploads"): fewer upload
        // slots than small-request slots made 4 KiB GETs beside 10 MiB PUTs slower, not faster.
        let max_active = if self.s3_max_active_uploads == 0 {
            requests.max_active
        } else {
            self.s3_max_active_uploads
        };
        Limits {
            max_active,
            // As many as the other requests may have waiting: uploads wait rather than retry.
            max_waiting: requests.max_waiting,
            max_wait: self.s3_upload_wait,
        }
    }
}

fn parse_ownership(text: &str) -> Result<Ownership, String> {
    Ownership::parse(text)
        .ok_or_else(|| format!("{text}: not BucketOwnerEnforced, BucketOwnerPreferred or ObjectWriter"))
}
