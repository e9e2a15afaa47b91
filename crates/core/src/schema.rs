//! HTTP API v1 wire types (spec §8.5), the page token (§8.4) and the error body (§8.3).
//!
//! This file owns the JSON shape of everything that crosses the API: the server (`api`) and the HTTP client
//! (`client::http`) both use these types, so the two can never disagree. Every field is omitted when empty (Go
//! `omitempty`) and read back as empty when missing. Field declaration order follows the Go encoder's (alphabetical)
//! order so that serialised bodies match the original byte for byte.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::rollout::{Action, OnFailure, Phase, RolloutKind, RolloutState, RolloutUnit, Step};
pub use crate::unit::UnitOption;

/// One unit of a rollout request: its name and, for a replace, the new version's options.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RolloutRequestUnit {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<UnitOption>,
}

/// `PUT /fleet/v1/rollouts/<id>` (an extension of this implementation): start a rolling replace (every unit with
/// its new options) or a rolling restart (names only) of existing units.
///
/// Every pace field is optional: what the request leaves out comes from the unit's `[X-Fleet]` update policy
/// (`UpdatePolicy=rolling`: the new version's for a replace, the first unit's that has one), else the defaults
/// (`maxUnavailable` 1, `minHealthyMs` 10 000, `healthTimeoutMs` 300 000, `onFailure` pause, no canary, no order,
/// no deadline). A field the request gives overrides the policy.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RolloutRequest {
    pub kind: RolloutKind,
    #[serde(default)]
    pub units: Vec<RolloutRequestUnit>,
    #[serde(rename = "maxUnavailable", default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<u32>,
    /// `maxUnavailable` as a percentage of the rollout's machines (1–100); not with `maxUnavailable`.
    #[serde(rename = "maxUnavailablePercent", default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable_percent: Option<u32>,
    #[serde(rename = "minHealthyMs", default, skip_serializing_if = "Option::is_none")]
    pub min_healthy_ms: Option<u64>,
    #[serde(rename = "healthTimeoutMs", default, skip_serializing_if = "Option::is_none")]
    pub health_timeout_ms: Option<u64>,
    #[serde(rename = "onFailure", default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<u32>,
    #[serde(rename = "canaryHoldMs", default, skip_serializing_if = "Option::is_none")]
    pub canary_hold_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    #[serde(rename = "progressDeadlineMs", default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_ms: Option<u64>,
    /// A drain (`kind: drain`): the full ID of the machine to empty. No other kind takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// A rollout as the API shows it (`GET /fleet/v1/rollouts[/<id>]`): its spec, the user's last action and the
/// engine's progress (`state` is `running` with no steps until the engine leader has taken it up).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Rollout {
    pub id: String,
    pub kind: RolloutKind,
    pub units: Vec<RolloutUnit>,
    #[serde(rename = "maxUnavailable")]
    pub max_unavailable: u32,
    #[serde(rename = "minHealthyMs")]
    pub min_healthy_ms: u64,
    #[serde(rename = "healthTimeoutMs")]
    pub health_timeout_ms: u64,
    #[serde(rename = "onFailure")]
    pub on_failure: OnFailure,
    #[serde(rename = "createdMs")]
    pub created_ms: u64,
    pub action: Action,
    /// How many times a user resumed it, and how many of those the engine has taken up: while they differ, a
    /// resume is on its way (a pause shown then is the old one).
    #[serde(default)]
    pub resumes: u32,
    #[serde(rename = "resumesTaken", default)]
    pub resumes_taken: u32,
    pub state: RolloutState,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(rename = "maxUnavailablePercent", default, skip_serializing_if = "is_zero32")]
    pub max_unavailable_percent: u32,
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub canary: u32,
    #[serde(rename = "canaryHoldMs", default, skip_serializing_if = "is_zero64")]
    pub canary_hold_ms: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub order: String,
    #[serde(rename = "progressDeadlineMs", default, skip_serializing_if = "is_zero64")]
    pub progress_deadline_ms: u64,
    /// `unit` when the unit's update policy set the pace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// The user promoted the canaries.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub promoted: bool,
    #[serde(rename = "awaitingPromotion", default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_promotion: bool,
    /// While undone and after: the steps returning the changed machines to the old version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undo: Vec<Step>,
    /// While undoing: the state it ends in (`rolled_back` or `aborted`).
    #[serde(rename = "undoEnd", default, skip_serializing_if = "Option::is_none")]
    pub undo_end: Option<RolloutState>,
    #[serde(rename = "startedMs", default, skip_serializing_if = "is_zero64")]
    pub started_ms: u64,
    /// The registry revision of its newest change (0 when the server does not say): pass it back as
    /// `waitRevision` to wait for the next change (`GET /rollouts/<id>?waitRevision=N`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revision: i64,
    /// Set when a key of the rollout does not decode (which key, why, and the start of its value): the rest of
    /// the rollout is what could be read, and no engine drives it until its keys are written again.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// A drain: the machine it empties (full ID).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine: String,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

/// One stored version of a unit (`GET /fleet/v1/units/<name>/history`, an extension of this implementation).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitVersion {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub current: bool,
    pub hash: String,
    /// The version's unit file; empty when its body is gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<UnitOption>,
    /// When it was stored (Unix ms; 0 when not known).
    #[serde(rename = "storedMs", default)]
    pub stored_ms: u64,
    /// Who stored it (`name (via)`), from the audit trail (issue 38); absent when its record is gone or it was
    /// the engine's (a rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// `GET /fleet/v1/units/<name>/history`: the unit's versions, newest (current) first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitHistory {
    #[serde(default)]
    pub versions: Vec<UnitVersion>,
}

/// `GET /fleet/v1/rollouts`: newest first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RolloutList {
    #[serde(default)]
    pub rollouts: Vec<Rollout>,
}

/// `PATCH /fleet/v1/rollouts/<id>`: `run` (resume; failed steps are tried again, or left as they are with
/// `skipFailed`), `pause`, `abort` or `promote` (release the rest after the canaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RolloutControl {
    pub action: Action,
    #[serde(rename = "skipFailed", default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_failed: bool,
}

/// A unit as the API shows it (`GET /units`, `GET /units/<name>`) and accepts it (`PUT /units/<name>`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Unit {
    /// Derived current state (§7.2); read-only, ignored on PUT.
    #[serde(rename = "currentState", default, skip_serializing_if = "String::is_empty")]
    pub current_state: String,
    /// Desired ("target") state: `inactive`, `loaded` or `launched`.
    #[serde(rename = "desiredState", default, skip_serializing_if = "String::is_empty")]
    pub desired_state: String,
    /// Machine the unit is scheduled to; read-only.
    #[serde(rename = "machineID", default, skip_serializing_if = "String::is_empty")]
    pub machine_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Extension of this implementation, only meaningful on a PUT that replaces the content: every machine holding
    /// the unit writes the new file and runs `daemon-reload`, but a running unit keeps its process (and is
    /// reloaded when the new version has `ExecReload=`). Cannot be combined with `reschedule`.
    #[serde(rename = "noRestart", default, skip_serializing_if = "std::ops::Not::not")]
    pub no_restart: bool,
    /// The unit file as an ordered option list (duplicates kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<UnitOption>,
    /// Extension of this implementation, only meaningful on a PUT that replaces the content: drop the unit's
    /// schedule in the same write so the engine places the new version afresh (`--replace` without
    /// `--keep-machine`). Servers that don't know it ignore it and keep the unit on its machine.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reschedule: bool,
}

/// Extension of this implementation: the body of `POST /fleet/v1/units-batch`, many unit writes in one request.
/// Each of `put` is decided and answered exactly as `PUT /units/<its name>` with it as the body would be (create,
/// replace or set the desired state); each of `destroy` as `DELETE /units/<name>`. Servers without the route answer
/// 404 (the original fleet) and clients fall back to one request per unit.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitBatch {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub put: Vec<Unit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destroy: Vec<String>,
}

/// The answer to a [`UnitBatch`]: one result per write, `put` then `destroy`, each in request order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitBatchReply {
    #[serde(default)]
    pub results: Vec<UnitBatchResult>,
}

/// What the single-unit request would have answered: its status code and, for an error, its message (§8.3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitBatchResult {
    #[serde(default)]
    pub name: String,
    pub code: u16,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One page of `GET /units`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitPage {
    #[serde(rename = "nextPageToken", default, skip_serializing_if = "String::is_empty")]
    pub next_page_token: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<Unit>,
}

/// systemd's state of one unit on one machine (`GET /state`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitState {
    /// 40-hex SHA-1 of the unit content the machine runs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hash: String,
    #[serde(rename = "machineID", default, skip_serializing_if = "String::is_empty")]
    pub machine_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Extension of this implementation: 40-hex hash of the version whose process the machine runs (the version
    /// it last started), which lags `hash` (the file on disk) after a replace without restart. Omitted when the
    /// machine has not started the unit.
    #[serde(rename = "runningHash", default, skip_serializing_if = "String::is_empty")]
    pub running_hash: String,
    #[serde(rename = "systemdActiveState", default, skip_serializing_if = "String::is_empty")]
    pub systemd_active_state: String,
    #[serde(rename = "systemdLoadState", default, skip_serializing_if = "String::is_empty")]
    pub systemd_load_state: String,
    #[serde(rename = "systemdSubState", default, skip_serializing_if = "String::is_empty")]
    pub systemd_sub_state: String,
    /// Extension of this implementation: `in-doubt` when the row stands for a unit scheduled to a machine whose
    /// presence is gone (its systemd state unknown; docs/at-most-once.md); omitted for states a machine published.
    #[serde(rename = "machinePresence", default, skip_serializing_if = "String::is_empty")]
    pub machine_presence: String,
    /// Extension of this implementation: the unit's health check on that machine (`status` `unknown`, `healthy` or
    /// `unhealthy`, `sinceMs`, `output`; docs/health.md); omitted for units without `[X-Fleet] HealthCheck=`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::model::Health>,
}

impl UnitState {
    /// `machinePresence` as shown: `present` when omitted (a state the machine published).
    pub fn presence(&self) -> &str {
        if self.machine_presence.is_empty() { "present" } else { &self.machine_presence }
    }
}

/// One page of `GET /state`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitStatePage {
    #[serde(rename = "nextPageToken", default, skip_serializing_if = "String::is_empty")]
    pub next_page_token: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<UnitState>,
}

/// A machine as listed by `GET /machines`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Machine {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    #[serde(rename = "primaryIP", default, skip_serializing_if = "String::is_empty")]
    pub primary_ip: String,
    /// Extension (issue 38): the machine is cordoned — it takes no new unit. Omitted when false, so a machine
    /// that is not cordoned is the original's object byte for byte.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cordoned: bool,
    /// Extension (issue 37): the machine's agent cannot write unit files — which units, and why. Omitted when it
    /// can, so such a machine is the original's object byte for byte.
    #[serde(rename = "loadFault", default, skip_serializing_if = "Option::is_none")]
    pub load_fault: Option<String>,
}

impl Machine {
    /// The machine's state as fleetctl shows it (issue 38): `cordoned` while it takes no new unit, else `ready`.
    pub fn state(&self) -> &'static str {
        if self.cordoned { "cordoned" } else { "ready" }
    }
}

/// One page of `GET /machines`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MachinePage {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<Machine>,
    #[serde(rename = "nextPageToken", default, skip_serializing_if = "String::is_empty")]
    pub next_page_token: String,
}

/// The nested value object of a metadata PATCH operation: `{"value": "<new value>"}` (§8.8).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MetadataValue {
    #[serde(default, alias = "Value", alias = "VALUE")]
    pub value: String,
}

/// One operation of `PATCH /machines`. The original decodes keys case-insensitively; the common spellings are
/// accepted as aliases.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MachineMetadataOp {
    #[serde(default, alias = "Op", alias = "OP")]
    pub op: String,
    #[serde(default, alias = "Path", alias = "PATH")]
    pub path: String,
    #[serde(default, alias = "Value", alias = "VALUE", skip_serializing_if = "Option::is_none")]
    pub value: Option<MetadataValue>,
}

impl MachineMetadataOp {
    /// `add` (= `replace`) of `key` = `value` on `machine_id`.
    pub fn add(machine_id: &str, key: &str, value: &str) -> Self {
        MachineMetadataOp {
            op: "add".into(),
            path: format!("/{machine_id}/metadata/{key}"),
            value: Some(MetadataValue { value: value.into() }),
        }
    }

    /// `remove` of `key` on `machine_id`.
    pub fn remove(machine_id: &str, key: &str) -> Self {
        MachineMetadataOp { op: "remove".into(), path: format!("/{machine_id}/metadata/{key}"), value: None }
    }
}

/// The body of every error response: `{"error":{"code":N,"message":"..."}}`. `message` is always present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The `error` object of [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: u16,
    #[serde(default)]
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: u16, message: impl Into<String>) -> Self {
        ErrorBody { error: ErrorDetail { code, message: message.into() } }
    }

    /// The JSON text of this body.
    pub fn to_json(&self) -> String {
        // Serialising two plain fields cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Pagination token (§8.4): URL-safe base64 *with padding* of `limit` (u16 LE) then `page` (u16 LE).
///
/// The wire format fixes both to 16 bits; index arithmetic is done in `usize` (B10) so nothing wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageToken {
    pub limit: u16,
    /// 1-based page number.
    pub page: u16,
}

/// Why a page token was rejected. The messages are the API's 400 messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("too many values for page token")]
    TooManyValues,
    #[error("illegal base64 data at input byte {0}")]
    Base64(usize),
    #[error("unexpected EOF")]
    UnexpectedEof,
    #[error("EOF")]
    Eof,
    #[error("token limit must be {0}")]
    WrongLimit(u16),
    #[error("token page must be greater than zero")]
    ZeroPage,
}

impl PageToken {
    /// The first page for a server with page size `limit`.
    pub fn first(limit: u16) -> Self {
        PageToken { limit, page: 1 }
    }

    /// The token text.
    pub fn encode(&self) -> String {
        let l = self.limit.to_le_bytes();
        let p = self.page.to_le_bytes();
        encode_base64_url(&[l[0], l[1], p[0], p[1]])
    }

    /// Decode a token's text, without checking it against a server's limit (see [`PageToken::validate`]).
    pub fn decode(text: &str) -> Result<Self, TokenError> {
        let bytes = decode_base64_url(text)?;
        match bytes.len() {
            0 => Err(TokenError::Eof),
            1..=3 => Err(TokenError::UnexpectedEof),
            _ => Ok(PageToken {
                limit: u16::from_le_bytes([bytes[0], bytes[1]]),
                page: u16::from_le_bytes([bytes[2], bytes[3]]),
            }),
        }
    }

    /// Decode and check against the server's page size, as the API does for every list request.
    pub fn parse_for(text: &str, server_limit: u16) -> Result<Self, TokenError> {
        let tok = Self::decode(text)?;
        tok.validate(server_limit)?;
        Ok(tok)
    }

    /// Check the token against the server's page size.
    pub fn validate(&self, server_limit: u16) -> Result<(), TokenError> {
        if self.limit != server_limit {
            return Err(TokenError::WrongLimit(server_limit));
        }
        if self.page == 0 {
            return Err(TokenError::ZeroPage);
        }
        Ok(())
    }

    /// Index of the first item of this page in the full, sorted list.
    pub fn start_index(&self) -> usize {
        (usize::from(self.page).saturating_sub(1)).saturating_mul(usize::from(self.limit))
    }

    /// The items of `items` on this page, and the token of the next page when this page is full (so a list whose
    /// length is a multiple of the limit ends with one empty page, like the original).
    pub fn slice<'a, T>(&self, items: &'a [T]) -> (&'a [T], Option<PageToken>) {
        let start = self.start_index().min(items.len());
        let end = start.saturating_add(usize::from(self.limit)).min(items.len());
        let full = usize::from(self.page).saturating_mul(usize::from(self.limit)) <= items.len();
        let next = if full && self.page < u16::MAX {
            Some(PageToken { limit: self.limit, page: self.page + 1 })
        } else {
            None
        };
        (&items[start..end], next)
    }
}

impl fmt::Display for PageToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

const URL_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn encode_base64_url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE.encode(bytes)
}

fn url_digit(c: u8) -> Option<u8> {
    URL_ALPHABET.iter().position(|&a| a == c).and_then(|p| u8::try_from(p).ok())
}

/// URL-safe, padded base64 decoding that reports errors at the same input offsets as Go's `encoding/base64`, so the
/// API's 400 messages match the original (`illegal base64 data at input byte 4` for `garbage`).
fn decode_base64_url(text: &str) -> Result<Vec<u8>, TokenError> {
    let src = text.as_bytes();
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0usize;
    loop {
        let mut quantum = [0u8; 4];
        let mut j = 0usize;
        let mut dlen = 4usize;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(TokenError::Base64(si - j));
            }
            let c = src[si];
            si += 1;
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if let Some(d) = url_digit(c) {
                quantum[j] = d;
                j += 1;
                continue;
            }
            if c != b'=' {
                return Err(TokenError::Base64(si - 1));
            }
            // Padding.
            match j {
                0 | 1 => return Err(TokenError::Base64(si - 1)),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(TokenError::Base64(src.len()));
                    }
                    if src[si] != b'=' {
                        return Err(TokenError::Base64(si - 1));
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                return Err(TokenError::Base64(si));
            }
            dlen = j;
            break;
        }
        let v = (u32::from(quantum[0]) << 18)
            | (u32::from(quantum[1]) << 12)
            | (u32::from(quantum[2]) << 6)
            | u32::from(quantum[3]);
        let b = v.to_be_bytes();
        match dlen {
            4 => out.extend_from_slice(&b[1..4]),
            3 => out.extend_from_slice(&b[1..3]),
            2 => out.push(b[1]),
            _ => {}
        }
        if dlen < 4 {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(section: &str, name: &str, value: &str) -> UnitOption {
        UnitOption { section: section.into(), name: name.into(), value: value.into() }
    }

    #[test]
    fn page_token_examples_from_the_spec() {
        assert_eq!(PageToken { limit: 100, page: 2 }.encode(), "ZAACAA==");
        assert_eq!(PageToken::first(100).encode(), "ZAABAA==");
        assert_eq!(PageToken::decode("ZAACAA=="), Ok(PageToken { limit: 100, page: 2 }));
        assert_eq!(PageToken::parse_for("ZAACAA==", 100), Ok(PageToken { limit: 100, page: 2 }));
    }

    #[test]
    fn page_token_from_functional_test_is_rejected_for_its_limit() {
        let tok = PageToken::decode("EwBMLg==").unwrap();
        assert_eq!(tok.validate(100).unwrap_err().to_string(), "token limit must be 100");
    }

    #[test]
    fn page_token_errors_match_the_original_messages() {
        assert_eq!(PageToken::decode("garbage").unwrap_err().to_string(), "illegal base64 data at input byte 4");
        assert_eq!(PageToken::decode("ZA==").unwrap_err().to_string(), "unexpected EOF");
        assert_eq!(PageToken::decode("").unwrap_err().to_string(), "EOF");
        assert_eq!(PageToken::decode("ZA!A").unwrap_err().to_string(), "illegal base64 data at input byte 2");
        assert_eq!(
            PageToken::parse_for("ZAAAAA==", 100).unwrap_err().to_string(),
            "token page must be greater than zero"
        );
        // Standard-alphabet characters are not URL-safe base64.
        assert!(PageToken::decode("ZA+/AA==").is_err());
    }

    #[test]
    fn page_slicing_ends_with_an_empty_page_on_exact_multiples() {
        let items: Vec<u32> = (0..4).collect();
        let (p1, next) = PageToken { limit: 2, page: 1 }.slice(&items);
        assert_eq!(p1, &[0, 1]);
        let (p2, next) = next.unwrap().slice(&items);
        assert_eq!(p2, &[2, 3]);
        let (p3, next) = next.unwrap().slice(&items);
        assert!(p3.is_empty());
        assert!(next.is_none());
        let (short, none) = PageToken { limit: 10, page: 1 }.slice(&items);
        assert_eq!(short.len(), 4);
        assert!(none.is_none());
    }

    #[test]
    fn page_index_arithmetic_does_not_wrap_at_16_bits() {
        let tok = PageToken { limit: 1000, page: 100 };
        assert_eq!(tok.start_index(), 99_000);
    }

    #[test]
    fn unit_json_matches_the_original_field_order_and_omits_empty_fields() {
        let u = Unit {
            current_state: "launched".into(),
            desired_state: "launched".into(),
            machine_id: "8606e1a2949979fb223fb4bad77d152c".into(),
            name: "meta-b.service".into(),
            options: vec![
                opt("Unit", "Description", "Only on role=b"),
                opt("Service", "ExecStart", "/bin/sh -c \"while true; do echo meta-b; sleep 5; done\""),
                opt("X-Fleet", "MachineMetadata", "role=b"),
            ],
            reschedule: false,
            no_restart: false,
        };
        // Transcript 13, GET /fleet/v1/units/meta-b.service. UnitOption's own field order is owned by `unit`, so the
        // comparison is on the parsed value plus the top-level order.
        let text = r#"{"currentState":"launched","desiredState":"launched","machineID":"8606e1a2949979fb223fb4bad77d152c","name":"meta-b.service","options":[{"name":"Description","section":"Unit","value":"Only on role=b"},{"name":"ExecStart","section":"Service","value":"/bin/sh -c \"while true; do echo meta-b; sleep 5; done\""},{"name":"MachineMetadata","section":"X-Fleet","value":"role=b"}]}"#;
        let parsed: Unit = serde_json::from_str(text).unwrap();
        assert_eq!(parsed, u);
        let out = serde_json::to_string(&u).unwrap();
        assert!(out.starts_with(r#"{"currentState":"launched","desiredState":"launched","machineID":"8606e1a2949979fb223fb4bad77d152c","name":"meta-b.service","options":["#));
        assert_eq!(serde_json::from_str::<Unit>(&out).unwrap(), u);

        let set_state = Unit { desired_state: "loaded".into(), name: "a.service".into(), ..Default::default() };
        assert_eq!(serde_json::to_string(&set_state).unwrap(), r#"{"desiredState":"loaded","name":"a.service"}"#);
        assert_eq!(serde_json::to_string(&UnitPage::default()).unwrap(), "{}");
    }

    #[test]
    fn unit_state_json_round_trips() {
        let text = r#"{"states":[{"hash":"a376edaa908070a2b0a672a108a06f53dee9b6f7","machineID":"8606e1a2949979fb223fb4bad77d152c","name":"meta-b.service","systemdActiveState":"active","systemdLoadState":"loaded","systemdSubState":"running"}]}"#;
        let page: UnitStatePage = serde_json::from_str(text).unwrap();
        assert_eq!(page.states[0].systemd_sub_state, "running");
        assert_eq!(page.next_page_token, "");
        assert_eq!(serde_json::to_string(&page).unwrap(), text);
        assert_eq!(page.states[0].health, None, "no health key without a check");
    }

    #[test]
    fn unit_state_health_is_an_additive_field() {
        let text = r#"{"name":"web.service","systemdActiveState":"active","health":{"status":"unhealthy","sinceMs":7,"output":"refused"}}"#;
        let state: UnitState = serde_json::from_str(text).unwrap();
        let health = state.health.as_ref().expect("the `health` key is read into UnitState.health");
        assert_eq!(
            (health.status, health.since_ms, health.output.as_str()),
            (crate::model::HealthStatus::Unhealthy, 7, "refused")
        );
        assert_eq!(serde_json::to_string(&state).unwrap(), text);
    }

    #[test]
    fn machine_json_round_trips_with_missing_fields() {
        // api/machines_test.go example.
        let text = r#"{"machines":[{"id":"XXX","metadata":{"foo":"bar"}},{"id":"YYY","metadata":{"ping":"splat"},"primaryIP":"1.2.3.4"}]}"#;
        let page: MachinePage = serde_json::from_str(text).unwrap();
        assert_eq!(page.machines.len(), 2);
        assert_eq!(page.machines[0].primary_ip, "");
        assert_eq!(serde_json::to_string(&page).unwrap(), text);
        let with_token: MachinePage = serde_json::from_str(r#"{"nextPageToken":"ZAACAA=="}"#).unwrap();
        assert_eq!(with_token.next_page_token, "ZAACAA==");
    }

    /// Issue 38: `cordoned` only when true, so the machines of a cluster without cordons are the original's objects.
    #[test]
    fn a_cordoned_machine_says_so_and_no_other_does() {
        let m = Machine { id: "m1".into(), ..Default::default() };
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"id":"m1"}"#);
        let m = Machine { cordoned: true, ..m };
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"id":"m1","cordoned":true}"#);
        assert_eq!(serde_json::from_str::<Machine>(r#"{"id":"m1","cordoned":true}"#).unwrap(), m);
    }

    #[test]
    fn error_body_matches_the_original() {
        assert_eq!(
            ErrorBody::new(404, "unit does not exist").to_json(),
            r#"{"error":{"code":404,"message":"unit does not exist"}}"#
        );
        assert_eq!(ErrorBody::new(405, "").to_json(), r#"{"error":{"code":405,"message":""}}"#);
        let parsed: ErrorBody = serde_json::from_str(r#"{"error":{"code":503}}"#).unwrap();
        assert_eq!(parsed.error.message, "");
    }

    #[test]
    fn metadata_patch_ops_use_the_nested_value_object() {
        let ops = vec![MachineMetadataOp::add("abc", "role", "x"), MachineMetadataOp::remove("abc", "role")];
        assert_eq!(
            serde_json::to_string(&ops).unwrap(),
            r#"[{"op":"add","path":"/abc/metadata/role","value":{"value":"x"}},{"op":"remove","path":"/abc/metadata/role"}]"#
        );
        let parsed: Vec<MachineMetadataOp> =
            serde_json::from_str(r#"[{"op":"replace","path":"/a/metadata/k","Value":{"value":"v"}}]"#).unwrap();
        assert_eq!(parsed[0].value.as_ref().unwrap().value, "v");
        assert!(
            serde_json::from_str::<Vec<MachineMetadataOp>>(r#"[{"op":"add","path":"/a/metadata/k","value":"v"}]"#)
                .is_err()
        );
    }
}
