//! A workflow (OJS chain, group or batch) as a graph: an SVG drawn on the server from the
//! workflow as `GET /workflows/{id}` shows it — a chain's steps left to right, a group's or a
//! batch's jobs in one column and a batch's callbacks in the next, each node its type and state
//! (colours from the stylesheet by class), linked to the job or, for a nested workflow, to its
//! own graph. No script and no charting library, nothing the CSP has to allow. Root-key sessions
//! only, as every jobs page.

use std::fmt::Write;

use http::{Method, StatusCode};
use serde_json::Value;

use super::jobs::{job_id, refused, tenant, text};
use super::{Context, Request, Response};
use crate::html::{esc, link, name, svg_name};

const NODE_WIDTH: f64 = 170.0;
const NODE_HEIGHT: f64 = 44.0;
const GAP_X: f64 = 50.0;
const GAP_Y: f64 = 14.0;
/// Nodes drawn at most (a workflow may hold thousands of jobs); the rest are counted.
const MAX_NODES: usize = 200;
/// Characters of a job type on a node.
const LABEL_CHARS: usize = 22;

struct Node {
    /// Shown whole in the node's title, cut to [`LABEL_CHARS`] on it.
    label: String,
    state: String,
    href: Option<String>,
}

fn node(entry: &Value, tenant: &str) -> Node {
    let href = match (entry["workflow_id"].as_str(), entry["job_id"].as_str()) {
        (Some(workflow), _) => Some(link("/jobs/workflow", &[("id", workflow), ("tenant", tenant)])),
        (None, Some(job)) => Some(link("/job", &[("id", job), ("tenant", tenant)])),
        (None, None) => None,
    };
    // A nested workflow by its kind and name; a job by its type.
    let label = match (entry["type"].as_str(), entry["workflow"]["name"].as_str()) {
        (Some(kind), Some(workflow)) => format!("{kind} {workflow}"),
        (kind, _) => kind.unwrap_or("").to_owned(),
    };
    Node {
        label,
        state: entry["state"].as_str().unwrap_or("").to_owned(),
        href,
    }
}

/// The workflow's members as columns, left to right.
fn columns(workflow: &Value, tenant: &str) -> Vec<Vec<Node>> {
    let members = |key: &str| workflow[key].as_array().cloned().unwrap_or_default();
    let mut columns: Vec<Vec<Node>> = match workflow["type"].as_str() {
        Some("chain") => members("steps").iter().map(|step| vec![node(step, tenant)]).collect(),
        _ => vec![members("jobs").iter().map(|job| node(job, tenant)).collect()],
    };
    let callbacks: Vec<Node> = members("callbacks").iter().map(|job| node(job, tenant)).collect();
    if !callbacks.is_empty() {
        columns.push(callbacks);
    }
    columns.retain(|column| !column.is_empty());
    columns
}

/// A state as a class name: its letters only.
fn state_class(state: &str) -> String {
    state.chars().filter(|c| c.is_ascii_lowercase() || *c == '_').collect()
}

/// The SVG of `columns`, every node of a column joined to every node of the next, and how
/// many nodes were left out past [`MAX_NODES`].
fn graph(mut columns: Vec<Vec<Node>>) -> (String, usize) {
    let mut left_out = 0;
    let mut budget = MAX_NODES;
    for column in &mut columns {
        let keep = column.len().min(budget);
        left_out += column.len() - keep;
        column.truncate(keep);
        budget -= keep;
    }
    columns.retain(|column| !column.is_empty());
    let rows = columns.iter().map(Vec::len).max().unwrap_or(0);
    let width = columns.len() as f64 * (NODE_WIDTH + GAP_X) + GAP_X;
    let height = rows as f64 * (NODE_HEIGHT + GAP_Y) + GAP_Y;
    let x = |column: usize| GAP_X + column as f64 * (NODE_WIDTH + GAP_X);
    let y = |row: usize| GAP_Y + row as f64 * (NODE_HEIGHT + GAP_Y);
    let mut out = format!(
        "<svg id=\"workflow-graph\" class=\"workflow\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" role=\"img\" aria-label=\"The workflow's jobs\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\">\
         <path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>"
    );
    for (index, pair) in columns.windows(2).enumerate() {
        for from in 0..pair[0].len() {
            for to in 0..pair[1].len() {
                let _ = write!(
                    out,
                    "<line class=\"edge\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" marker-end=\"url(#arrow)\"/>",
                    x(index) + NODE_WIDTH,
                    y(from) + NODE_HEIGHT / 2.0,
                    x(index + 1),
                    y(to) + NODE_HEIGHT / 2.0,
                );
            }
        }
    }
    for (column, nodes) in columns.iter().enumerate() {
        for (row, node) in nodes.iter().enumerate() {
            let short = match node.label.char_indices().nth(LABEL_CHARS) {
                Some((end, _)) => format!("{}…", &node.label[..end]),
                None => node.label.clone(),
            };
            let shape = format!(
                "<g class=\"node state-{}\" data-state=\"{}\"><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{NODE_WIDTH}\" height=\"{NODE_HEIGHT}\" rx=\"6\"/>\
                 <text class=\"node-type\" x=\"{}\" y=\"{}\">{}</text><text class=\"node-state\" x=\"{}\" y=\"{}\">{}</text></g>",
                state_class(&node.state),
                esc(&node.state),
                svg_name(&node.label),
                x(column),
                y(row),
                x(column) + 8.0,
                y(row) + 18.0,
                svg_name(&short),
                x(column) + 8.0,
                y(row) + 36.0,
                svg_name(&node.state),
            );
            match &node.href {
                Some(href) => {
                    let _ = write!(out, "<a href=\"{}\">{shape}</a>", esc(href));
                }
                None => out.push_str(&shape),
            }
        }
    }
    out.push_str("</svg>");
    (out, left_out)
}

impl Context<'_> {
    pub(super) async fn workflow(&self, request: &Request) -> Response {
        let mut body = String::from("<h1><a href=\"/jobs\">Jobs</a> / workflow</h1>");
        let answer = async {
            let ojs = self.ojs()?;
            let tenant = tenant(request)?;
            let id = job_id(request.arg("id").trim())?;
            Ok::<_, String>((
                ojs.call(Method::GET, &format!("/workflows/{id}"), tenant).await?,
                tenant,
            ))
        }
        .await;
        let status = match answer {
            Err(err) => {
                body.push_str(&refused(&err));
                if self.session.admin {
                    StatusCode::OK
                } else {
                    StatusCode::FORBIDDEN
                }
            }
            Ok((answer, tenant)) => {
                let workflow = if answer["workflow"].is_object() {
                    &answer["workflow"]
                } else {
                    &answer
                };
                let _ = write!(
                    body,
                    "<dl class=\"meta\"><dt>Id</dt><dd><code>{}</code></dd><dt>Type</dt><dd id=\"workflow-type\">{}</dd>\
                     <dt>Name</dt><dd>{}</dd><dt>State</dt><dd id=\"workflow-state\">{}</dd>\
                     <dt>Jobs</dt><dd>{} of {} completed, {} failed</dd>",
                    text(&workflow["id"]),
                    text(&workflow["type"]),
                    text(&workflow["name"]),
                    text(&workflow["state"]),
                    text(&workflow["jobs_completed"]),
                    text(&workflow["jobs_total"]),
                    text(&workflow["jobs_failed"]),
                );
                if let Some(parent) = workflow["parent_workflow_id"].as_str() {
                    let _ = write!(
                        body,
                        "<dt>Part of</dt><dd><a href=\"{}\">{}</a></dd>",
                        esc(&link("/jobs/workflow", &[("id", parent), ("tenant", tenant)])),
                        name(parent)
                    );
                }
                body.push_str("</dl><section><h2>Graph</h2>");
                let (svg, left_out) = graph(columns(workflow, tenant));
                body.push_str(&svg);
                if left_out > 0 {
                    let _ = write!(body, "<p class=\"hint\">{left_out} more jobs are not drawn.</p>");
                }
                body.push_str(
                    "<p class=\"hint\">A chain's steps run left to right; a group's or batch's jobs (one column) run \
                     at once, and a batch's callbacks (the next column) after them. A node opens its job, or a \
                     nested workflow's own graph.</p></section>",
                );
                StatusCode::OK
            }
        };
        self.page(status, "Workflow", body)
    }
}
