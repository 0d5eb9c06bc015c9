//! The JSON answers every route of the agent's web server shares: an error with its status, 405 for a known path
//! asked with a method it does not take, and 503 with `Retry-After` when a bounded gate is full.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};

/// `{"error": msg}` with `code`.
pub fn error(code: StatusCode, msg: String) -> Response {
    (code, Json(serde_json::json!({ "error": msg }))).into_response()
}

/// A known path asked with a method it does not take: 405 with a JSON body (GET and HEAD are what it serves).
pub(crate) async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not served on {}: use GET", uri.path()))
}

/// The answer to a request its gate refused: 503 with `Retry-After` and the reason as JSON.
pub fn busy(e: &web::pool::PoolError) -> Response {
    let mut resp = error(StatusCode::SERVICE_UNAVAILABLE, format!("busy: {e}; try again shortly"));
    resp.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    resp
}
