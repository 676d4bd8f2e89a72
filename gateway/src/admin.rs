//! The admin port: liveness, readiness and Prometheus metrics. It has its own listener so
//! probes and scrapes never queue behind data traffic.

use std::convert::Infallible;
use std::sync::Arc;

use crate::request_body::RequestBody;
use bytes::Bytes;
use deadpool_postgres::Pool;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;

use crate::config::RequiredRole;
use crate::metrics::Metrics;
use crate::pg::health::DatabaseHealth;
use crate::pg::migrate::LAYOUT_VERSION;
use crate::readiness::Readiness;
use crate::replica_lag::ReplicaLag;

#[derive(Clone)]
pub struct AdminService {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    metrics: Metrics,
    require_role: RequiredRole,
    lag: ReplicaLag,
    health: DatabaseHealth,
    readiness: Readiness,
}

impl AdminService {
    pub fn new(
        database: &crate::pg::Database,
        metrics: Metrics,
        require_role: RequiredRole,
        lag: ReplicaLag,
        health: DatabaseHealth,
        readiness: Readiness,
    ) -> AdminService {
        AdminService {
            inner: Arc::new(Inner {
                pool: database.pool.clone(),
                metrics,
                require_role,
                lag,
                health,
                readiness,
            }),
        }
    }

    async fn handle(self, request: Request<RequestBody>) -> Response<Full<Bytes>> {
        match request.uri().path() {
            "/healthz" => self.live(),
            "/readyz" => self.ready().await,
            "/metrics" => text(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                self.inner.metrics.render(&self.inner.pool),
            ),
            _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        }
    }

    /// Live = the gateway can still recover by itself. A database that is away is no reason to
    /// restart the gateway (it reconnects on its own), but an embedded one that could not be
    /// restarted is.
    fn live(&self) -> Response<Full<Bytes>> {
        match self.inner.health.fatal() {
            None => text(StatusCode::OK, "text/plain", "ok\n".into()),
            Some(reason) => text(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("{reason}\n")),
        }
    }

    /// Ready = the database answers, its layout is the one this gateway speaks, and its role is
    /// known (and the one required, if any). Asked each time, on readiness's own connection,
    /// within the probe timeout; while
    /// the health probe finds the database unreachable the answer is no without asking.
    async fn ready(&self) -> Response<Full<Bytes>> {
        let (status, body) = match self.inner.readiness.check().await {
            Ok((layout, standby)) => {
                let role = if standby { "standby" } else { "primary" };
                let role_ok = match self.inner.require_role {
                    RequiredRole::Any => true,
                    RequiredRole::Primary => !standby,
                    RequiredRole::Standby => standby,
                };
                let current = self.inner.lag.too_far_behind().is_none();
                let ready = layout == LAYOUT_VERSION && role_ok && current;
                let status = if ready {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                (
                    status,
                    serde_json::json!({
                        "ready": ready,
                        "layout": layout,
                        "expected_layout": LAYOUT_VERSION,
                        "role": role,
                        "required_role": format!("{:?}", self.inner.require_role).to_lowercase(),
                        "replication_lag_seconds": self.inner.lag.current().as_secs_f64(),
                        "max_replication_lag_seconds": self.inner.lag.limit().map(|limit| limit.as_secs_f64()),
                    }),
                )
            }
            Err(err) => (
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({ "ready": false, "error": format!("{err:#}") }),
            ),
        };
        text(status, "application/json", format!("{body}\n"))
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    response
}

impl hyper::service::Service<Request<RequestBody>> for AdminService {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<RequestBody>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(service.handle(request).await) })
    }
}
