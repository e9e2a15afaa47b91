//! Building API responses: JSON bodies, bodiless statuses and the error shape of spec §8.3.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use serde::Serialize;

use fleet_core::api_rules::ApiError;

pub use super::serve::error_response as error;

/// 200 with a JSON body.
pub fn json<T: Serialize>(value: &T) -> Response<Bytes> {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut response = Response::new(Bytes::from(body));
            response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(err) => {
            tracing::error!(error = %err, "cannot encode API response");
            error(StatusCode::INTERNAL_SERVER_ERROR, "")
        }
    }
}

/// A status without a body (201 on create, 204 on update and delete).
pub fn status(status: StatusCode) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = status;
    response
}

/// 204 with `Content-Type: application/json`, which clients of `PATCH /machines` check (spec §8.8).
pub fn no_content_json() -> Response<Bytes> {
    let mut response = status(StatusCode::NO_CONTENT);
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A plain-text 200 (metrics).
pub fn text(body: String, content_type: &'static str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body));
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The error body of spec §8.3 for a refused request, with its status.
pub fn refused(err: &ApiError) -> Response<Bytes> {
    error(err.status, &err.message)
}
