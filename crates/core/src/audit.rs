//! The audit trail's records (issue 38): who made a write request, what it was, when, and how it ended. Pure: the
//! record as stored under `P/audit/` (`store::keys`), how a write is described in words ([`describe`]), which
//! records are too old or too many to keep ([`Limits`]), and who stored each version of a unit ([`authors`]).
//!
//! The API (`fleetd::api::audit`) records one per write request, the fleetctl etcd driver one per write it makes;
//! both describe the write here, so a record reads the same whoever wrote it. docs/audit.md has the whole story.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::rollout::{Action, RolloutKind};
use crate::schema::{MachineMetadataOp, RolloutControl, RolloutRequest, Unit, UnitBatch, UnitHistory};
use crate::store::DecodeError;
use crate::store::records::{decode_error, decode_json};
use crate::unit::UnitFile;

/// How the writer reached fleet, which says what [`Who::name`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// The API over TLS with a client certificate: the name is the certificate's subject.
    Certificate,
    /// The API's Unix socket: the name is the peer's user (`uid 1000` when it has no name).
    Unix,
    /// The API over TCP without client certificates: the name is the peer's address.
    Tcp,
    /// fleetctl `--driver=etcd`, writing to etcd directly: the name is `user@host` of the fleetctl process.
    EtcdDriver,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Certificate => "certificate",
            Via::Unix => "unix",
            Via::Tcp => "tcp",
            Via::EtcdDriver => "etcd-driver",
        }
    }
}

/// Who made a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Who {
    pub via: Via,
    pub name: String,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.via.as_str())
    }
}

/// `P/audit/<ms>-<suffix>`: one write request and its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When the answer was decided (Unix ms).
    #[serde(rename = "atMs")]
    pub at_ms: u64,
    pub who: Who,
    /// The HTTP method and path (the etcd driver: the request the API would have received).
    pub method: String,
    pub path: String,
    /// The write in words: `submit a.service (launched)`, `cordon m1`, `pause rollout r1`.
    pub action: String,
    /// The units it names, in request order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<String>,
    /// The unit versions (40-hex hashes) it asked to store, by unit: what [`authors`] matches history against.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, String>,
    /// The answer's HTTP status (the etcd driver: the status the API would have answered).
    pub status: u16,
    /// The answer's error message, when it was one (a batch: the writes that failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl AuditRecord {
    /// Whether the write was done (a 2xx answer with no failed part).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status) && self.error.is_none()
    }
}

/// An audit record as stored; anything else (another client may write garbage there) is a [`DecodeError`]
/// naming the key.
pub fn decode(key: &str, raw: &[u8]) -> Result<AuditRecord, DecodeError> {
    let record: AuditRecord = decode_json(key, "audit record", raw)?;
    if record.method.is_empty() {
        return Err(decode_error(key, "audit record", "its method is empty".into(), raw));
    }
    Ok(record)
}

/// A write, as the API receives it (or the etcd driver makes it), to be described in words.
#[derive(Debug, Clone, Copy)]
pub enum Write<'a> {
    /// `PUT /units/<name>`: with options a creation or replacement, without a desired state change.
    PutUnit(&'a Unit),
    /// `DELETE /units/<name>`.
    DestroyUnit(&'a str),
    /// `POST /units-batch`.
    Batch(&'a UnitBatch),
    /// `PATCH /machines`.
    Metadata(&'a [MachineMetadataOp]),
    /// `PUT` (`true`) or `DELETE` (`false`) `/machines/<id>/cordon`.
    Cordon(&'a str, bool),
    /// `PUT /rollouts/<id>`.
    CreateRollout(&'a str, &'a RolloutRequest),
    /// `PATCH /rollouts/<id>`.
    ControlRollout(&'a str, RolloutControl),
    /// Anything else that is not a read (a body that does not decode, a path no route serves): method and path.
    Other(&'a str, &'a str),
}

/// What a record says a write was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Described {
    pub action: String,
    pub units: Vec<String>,
    pub versions: BTreeMap<String, String>,
}

impl Described {
    /// The record of this write: made by `who` at `at_ms` as `(method, path)`, answered `(status, error)`.
    pub fn into_record(
        self,
        at_ms: u64,
        who: Who,
        (method, path): (String, String),
        (status, error): (u16, Option<String>),
    ) -> AuditRecord {
        let Described { action, units, versions } = self;
        AuditRecord { at_ms, who, method, path, action, units, versions, status, error }
    }
}

/// The hash of the version a unit with `options` is stored as (the API's and the driver's: the canonical text's).
fn version_of(unit: &Unit) -> Option<String> {
    (!unit.options.is_empty()).then(|| UnitFile::from_options(unit.options.clone()).hash().to_hex())
}

/// `a.service`, or `3 units`.
fn units_phrase(names: &[&str]) -> String {
    match names {
        [one] => (*one).to_string(),
        many => format!("{} units", many.len()),
    }
}

/// `submit a.service (launched)` / `set a.service launched`: a unit PUT with / without options.
fn put_phrase(stored: bool, names: &[&str], desired: &str) -> String {
    let units = units_phrase(names);
    match (stored, desired) {
        // The API stores a new unit without a desired state as inactive: a plain submit.
        (true, "") => format!("submit {units}"),
        (true, desired) => format!("submit {units} ({desired})"),
        (false, "") => format!("set {units} (no desired state)"),
        (false, desired) => format!("set {units} {desired}"),
    }
}

/// The write in words, the units it names and the versions it stores.
pub fn describe(write: Write<'_>) -> Described {
    let mut described = Described::default();
    let note_unit = |d: &mut Described, unit: &Unit| {
        d.units.push(unit.name.clone());
        if let Some(hash) = version_of(unit) {
            d.versions.insert(unit.name.clone(), hash);
        }
    };
    described.action = match write {
        Write::PutUnit(unit) => {
            note_unit(&mut described, unit);
            put_phrase(!unit.options.is_empty(), &[&unit.name], &unit.desired_state)
        }
        Write::DestroyUnit(name) => {
            described.units.push(name.to_string());
            format!("destroy {name}")
        }
        Write::Batch(batch) => {
            // One phrase per kind of write, in the order the batch applies them: stores, desired states, destroys.
            let mut groups: BTreeMap<(bool, &str), Vec<&str>> = BTreeMap::new();
            for unit in &batch.put {
                note_unit(&mut described, unit);
                groups.entry((unit.options.is_empty(), &unit.desired_state)).or_default().push(&unit.name);
            }
            let mut phrases: Vec<String> =
                groups.iter().map(|((set_only, desired), names)| put_phrase(!set_only, names, desired)).collect();
            if !batch.destroy.is_empty() {
                described.units.extend(batch.destroy.iter().cloned());
                let names: Vec<&str> = batch.destroy.iter().map(String::as_str).collect();
                phrases.push(format!("destroy {}", units_phrase(&names)));
            }
            if phrases.is_empty() { "empty batch".to_string() } else { phrases.join("; ") }
        }
        Write::Metadata(ops) => {
            let ops: Vec<String> = ops.iter().map(|op| format!("{} {}", op.op, op.path)).collect();
            format!("change machine metadata: {}", ops.join(", "))
        }
        Write::Cordon(machine, true) => format!("cordon {machine}"),
        Write::Cordon(machine, false) => format!("uncordon {machine}"),
        Write::CreateRollout(id, request) => {
            let names: Vec<&str> = request.units.iter().map(|u| u.name.as_str()).collect();
            for unit in &request.units {
                described.units.push(unit.name.clone());
                let as_unit = Unit { name: unit.name.clone(), options: unit.options.clone(), ..Unit::default() };
                if let Some(hash) = version_of(&as_unit) {
                    described.versions.insert(unit.name.clone(), hash);
                }
            }
            let kind = match request.kind {
                RolloutKind::Replace => "rolling replace",
                RolloutKind::Restart => "rolling restart",
                RolloutKind::Rebalance => "rebalance",
                RolloutKind::Drain => "drain",
            };
            if let Some(machine) = request.machine.as_deref().filter(|_| request.kind == RolloutKind::Drain) {
                return Described { action: format!("start drain {id} of machine {machine}"), ..described };
            }
            match names.as_slice() {
                [] => format!("start {kind} {id}"),
                names => format!("start {kind} {id} of {}", names.join(", ")),
            }
        }
        Write::ControlRollout(id, control) => {
            let verb = match control.action {
                Action::Run => "resume",
                Action::Pause => "pause",
                Action::Abort => "abort",
                Action::Promote => "promote",
            };
            let skip = if control.skip_failed { " (skip failed)" } else { "" };
            format!("{verb} rollout {id}{skip}")
        }
        Write::Other(method, path) => format!("{method} {path}"),
    };
    described
}

/// Records `GET /audit` answers when the request names no `limit`.
pub const DEFAULT_LIMIT: usize = 1_000;
/// The most records one answer holds.
pub const MAX_LIMIT: usize = 10_000;

/// Which records a reader asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Only records naming this unit.
    pub unit: Option<String>,
    /// Only records written at or after this time (Unix ms).
    pub since_ms: u64,
    /// At most this many, the newest.
    pub limit: usize,
}

impl Default for Query {
    fn default() -> Query {
        Query { unit: None, since_ms: 0, limit: DEFAULT_LIMIT }
    }
}

/// `GET /fleet/v1/audit`: the records asked for, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AuditList {
    #[serde(default)]
    pub records: Vec<AuditRecord>,
    /// More records matched than `limit`: the oldest of them are left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Stored records that do not decode (each error names its key): shown, never hidden.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// The answer to `query` from `read` (records as stored, oldest first, each decoded or its error): the newest
/// `limit` records that match, oldest first.
pub fn select(read: impl IntoIterator<Item = Result<AuditRecord, DecodeError>>, query: &Query) -> AuditList {
    let mut list = AuditList::default();
    for record in read {
        match record {
            Ok(r) if r.at_ms >= query.since_ms && query.unit.as_ref().is_none_or(|u| r.units.contains(u)) => {
                list.records.push(r)
            }
            Ok(_) => {}
            Err(e) => list.errors.push(e.to_string()),
        }
    }
    if list.records.len() > query.limit {
        list.truncated = true;
        list.records.drain(..list.records.len() - query.limit);
    }
    list
}

/// How much of the trail is kept (fleet.conf `audit_max_records`, `audit_max_age`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// At most this many records; the oldest go first.
    pub max_records: u64,
    /// Records older than this (ms) go.
    pub max_age_ms: u64,
}

/// 10,000 records, 30 days.
impl Default for Limits {
    fn default() -> Limits {
        Limits { max_records: 10_000, max_age_ms: 30 * 24 * 3600 * 1000 }
    }
}

impl Limits {
    /// Records written before this time (Unix ms) are too old at `now_ms`.
    pub fn oldest_kept_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.max_age_ms)
    }

    /// How many of `count` records (those left after the age limit) are too many, oldest first.
    pub fn excess(&self, count: u64) -> u64 {
        count.saturating_sub(self.max_records)
    }
}

/// Fills in who stored each version of `unit` in `history` from `records` (oldest first, as read): the successful
/// write naming `unit` with that version's hash whose time is the nearest at or after the version's (a record is
/// written once its write is answered, so never before it; a version stored twice is matched to each write). A
/// version whose record is gone (trimmed) or that the engine stored (a rollback) keeps no author.
pub fn authors(unit: &str, history: &mut UnitHistory, records: &[AuditRecord]) {
    // Clocks of two fleetds may differ a little: a record may read up to this much before the version it stored.
    const SKEW_MS: u64 = 5_000;
    for version in &mut history.versions {
        let made = records
            .iter()
            .filter(|r| r.succeeded() && r.versions.get(unit).is_some_and(|h| *h == version.hash))
            .filter(|r| version.stored_ms == 0 || r.at_ms + SKEW_MS >= version.stored_ms)
            .min_by_key(|r| r.at_ms.abs_diff(version.stored_ms));
        if let Some(record) = made {
            version.by = Some(record.who.to_string());
        }
    }
}

/// This process's part of the next record key it writes (`<pid>x<start time>.<n>`): unique among writers, so two
/// fleetds (or two runs of one, or two fleetctls) writing in the same millisecond do not collide.
pub fn next_suffix() -> String {
    static START: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = START.get_or_init(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        format!("{:x}x{:x}", std::process::id(), nanos.as_nanos() % (1 << 48))
    });
    format!("{start}.{}", COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// The name of `uid` in passwd(5) text (`name:password:uid:…`); the first entry wins. Users known only to NSS
/// (LDAP, …) have none here: callers name them `uid N`.
pub fn user_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let entry_uid = fields.nth(1)?.parse::<u32>().ok()?;
        (entry_uid == uid && !name.is_empty() && !name.starts_with('#')).then(|| name.to_string())
    })
}

/// The text of an error answer's message (`{"error":{"code":…,"message":…}}`, spec §8.3), or of a batch answer's
/// failed writes; `None` for a success.
pub fn error_of(status: u16, body: &[u8]) -> Option<String> {
    if (200..300).contains(&status) {
        let reply: crate::schema::UnitBatchReply = serde_json::from_slice(body).ok()?;
        let failed: Vec<String> = reply
            .results
            .iter()
            .filter(|r| !(200..300).contains(&r.code))
            .map(|r| format!("{} {} {}", r.name, r.code, r.message).trim_end().to_string())
            .collect();
        return (!failed.is_empty())
            .then(|| format!("{} of {} writes failed: {}", failed.len(), reply.results.len(), failed.join("; ")));
    }
    #[derive(Deserialize)]
    struct Body {
        error: Inner,
    }
    #[derive(Deserialize)]
    struct Inner {
        #[serde(default)]
        message: String,
    }
    let message = serde_json::from_slice::<Body>(body).map(|b| b.error.message).unwrap_or_default();
    Some(if message.is_empty() { format!("status {status}") } else { message })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{RolloutRequestUnit, UnitOption, UnitVersion};

    fn unit(name: &str, desired: &str, with_options: bool) -> Unit {
        let options = if with_options {
            vec![UnitOption { section: "Service".into(), name: "ExecStart".into(), value: "/bin/true".into() }]
        } else {
            Vec::new()
        };
        Unit { name: name.into(), desired_state: desired.into(), options, ..Unit::default() }
    }

    fn record(at_ms: u64, who: &str, versions: &[(&str, &str)], status: u16) -> AuditRecord {
        AuditRecord {
            at_ms,
            who: Who { via: Via::Unix, name: who.into() },
            method: "PUT".into(),
            path: "/fleet/v1/units/a.service".into(),
            action: "submit a.service (launched)".into(),
            units: versions.iter().map(|(u, _)| u.to_string()).collect(),
            versions: versions.iter().map(|(u, h)| (u.to_string(), h.to_string())).collect(),
            status,
            error: None,
        }
    }

    #[test]
    fn a_record_round_trips_in_its_documented_form() {
        let r = AuditRecord { error: Some("unit does not exist".into()), ..record(7, "root", &[], 404) };
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(
            json,
            r#"{"atMs":7,"who":{"via":"unix","name":"root"},"method":"PUT","path":"/fleet/v1/units/a.service","action":"submit a.service (launched)","status":404,"error":"unit does not exist"}"#
        );
        assert_eq!(decode("k", json.as_bytes()).unwrap(), r);
        let driver = Who { via: Via::EtcdDriver, name: "ops@host".into() };
        assert_eq!(serde_json::to_string(&driver).unwrap(), r#"{"via":"etcd-driver","name":"ops@host"}"#);
    }

    #[test]
    fn a_malformed_record_is_an_error_naming_its_key() {
        for bad in [&b"garbage"[..], b"", b"{}", br#"{"atMs":"soon"}"#, b"\xff\xfe", br#"{"atMs":1,"who":{"via":"carrier-pigeon","name":"x"},"method":"PUT","path":"/","action":"x","status":200}"#] {
            let err = decode("/p/audit/00000000000000000001-x", bad).unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("/p/audit/00000000000000000001-x: cannot decode audit record: "), "{text}");
        }
        let empty_method =
            br#"{"atMs":1,"who":{"via":"tcp","name":"x"},"method":"","path":"/","action":"x","status":200}"#;
        assert!(decode("k", empty_method).unwrap_err().to_string().contains("its method is empty"));
    }

    #[test]
    fn writes_are_described_in_words_with_their_units_and_versions() {
        let put = describe(Write::PutUnit(&unit("a.service", "launched", true)));
        assert_eq!(put.action, "submit a.service (launched)");
        assert_eq!(put.units, ["a.service"]);
        let hash = UnitFile::from_options(unit("a.service", "", true).options).hash().to_hex();
        assert_eq!(put.versions.get("a.service"), Some(&hash));

        assert_eq!(describe(Write::PutUnit(&unit("a.service", "", true))).action, "submit a.service");
        let set = describe(Write::PutUnit(&unit("a.service", "loaded", false)));
        assert_eq!((set.action.as_str(), set.versions.len()), ("set a.service loaded", 0));

        let batch = UnitBatch {
            put: vec![
                unit("t@1.service", "launched", false),
                unit("t@2.service", "launched", false),
                unit("t@3.service", "launched", false),
                unit("n.service", "launched", true),
            ],
            destroy: vec!["old.service".into()],
        };
        let d = describe(Write::Batch(&batch));
        assert_eq!(d.action, "submit n.service (launched); set 3 units launched; destroy old.service");
        assert_eq!(d.units, ["t@1.service", "t@2.service", "t@3.service", "n.service", "old.service"]);

        assert_eq!(describe(Write::DestroyUnit("a.service")).action, "destroy a.service");
        assert_eq!(describe(Write::Cordon("m1", true)).action, "cordon m1");
        assert_eq!(describe(Write::Cordon("m1", false)).action, "uncordon m1");
        let pause = RolloutControl { action: Action::Pause, skip_failed: false };
        assert_eq!(describe(Write::ControlRollout("r1", pause)).action, "pause rollout r1");
        let request = RolloutRequest {
            kind: RolloutKind::Restart,
            units: vec![RolloutRequestUnit { name: "db.service".into(), options: Vec::new() }],
            ..RolloutRequest::default()
        };
        let rollout = describe(Write::CreateRollout("r2", &request));
        assert_eq!((rollout.action.as_str(), rollout.units.len()), ("start rolling restart r2 of db.service", 1));
        let ops = [MachineMetadataOp::add("m1", "role", "db")];
        assert_eq!(describe(Write::Metadata(&ops)).action, "change machine metadata: add /m1/metadata/role");
        assert_eq!(describe(Write::Other("POST", "/fleet/v1/units")).action, "POST /fleet/v1/units");
    }

    #[test]
    fn a_query_selects_the_newest_matching_records_and_shows_undecodable_ones() {
        let mut b = record(20, "bob", &[("b.service", "h")], 201);
        b.units = vec!["b.service".into()];
        let read = vec![
            Ok(record(10, "alice", &[("a.service", "h")], 201)),
            Err(decode("/p/audit/x", b"garbage").unwrap_err()),
            Ok(b),
            Ok(record(30, "carol", &[("a.service", "h")], 201)),
            Ok(record(40, "dave", &[("a.service", "h")], 201)),
        ];
        let names = |l: &AuditList| l.records.iter().map(|r| r.who.name.clone()).collect::<Vec<_>>();
        let all = select(read.clone(), &Query::default());
        assert_eq!(
            (names(&all), all.truncated),
            (vec!["alice".into(), "bob".into(), "carol".into(), "dave".into()], false)
        );
        assert_eq!(all.errors.len(), 1);
        assert!(all.errors[0].starts_with("/p/audit/x: cannot decode audit record"), "{:?}", all.errors);
        let query = Query { unit: Some("a.service".into()), since_ms: 15, limit: 1 };
        let some = select(read, &query);
        assert_eq!((names(&some), some.truncated), (vec!["dave".to_string()], true), "newest kept");
    }

    #[test]
    fn limits_keep_the_newest_records_within_the_age() {
        let limits = Limits { max_records: 3, max_age_ms: 1_000 };
        assert_eq!(limits.oldest_kept_ms(5_000), 4_000);
        assert_eq!(limits.oldest_kept_ms(500), 0, "nothing is too old before the age has passed once");
        assert_eq!((limits.excess(2), limits.excess(3), limits.excess(10)), (0, 0, 7));
        assert_eq!(Limits::default(), Limits { max_records: 10_000, max_age_ms: 2_592_000_000 });
    }

    #[test]
    fn each_version_is_authored_by_the_write_that_stored_it() {
        let version = |hash: &str, stored_ms| UnitVersion { hash: hash.into(), stored_ms, ..UnitVersion::default() };
        let mut history = UnitHistory { versions: vec![version("h2", 2_000), version("h1", 1_000), version("h0", 0)] };
        let records = [
            record(1_003, "alice", &[("a.service", "h1")], 201),
            record(2_001, "mallory", &[("a.service", "h2")], 409),
            record(1_600, "carol", &[("b.service", "h2")], 201),
            record(2_004, "bob", &[("a.service", "h2")], 201),
            record(9_000, "dave", &[("a.service", "h1")], 201),
        ];
        authors("a.service", &mut history, &records);
        let by: Vec<Option<&str>> = history.versions.iter().map(|v| v.by.as_deref()).collect();
        assert_eq!(by, [Some("bob (unix)"), Some("alice (unix)"), None]);
    }

    #[test]
    fn a_uid_is_named_by_its_first_passwd_entry() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n# comment:x:5:5\nbroken\nops:x:1000:1000::/home/ops:/bin/sh\ntwin:x:1000:1000::/:/bin/sh\n";
        assert_eq!(user_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(user_name(passwd, 1000).as_deref(), Some("ops"));
        assert_eq!(user_name(passwd, 5), None, "a commented line names nobody");
        assert_eq!(user_name(passwd, 42), None);
        assert_eq!(user_name("", 0), None);
    }

    #[test]
    fn record_key_suffixes_differ_per_write() {
        let (a, b) = (next_suffix(), next_suffix());
        assert_ne!(a, b);
        let id = crate::store::audit_id(1, &a);
        assert_eq!(crate::store::check_component(crate::store::Component::AuditId, &id), Ok(()));
    }

    #[test]
    fn error_answers_and_failed_batch_writes_are_the_records_error() {
        assert_eq!(error_of(204, b""), None);
        assert_eq!(error_of(400, br#"{"error":{"code":400,"message":"bad unit"}}"#).as_deref(), Some("bad unit"));
        assert_eq!(error_of(500, br#"{"error":{"code":500,"message":""}}"#).as_deref(), Some("status 500"));
        let batch = br#"{"results":[{"name":"a.service","code":201},{"name":"b.service","code":404,"message":"unit does not exist"}]}"#;
        assert_eq!(error_of(200, batch).as_deref(), Some("1 of 2 writes failed: b.service 404 unit does not exist"));
        assert_eq!(error_of(200, br#"{"results":[{"name":"a.service","code":201}]}"#), None);
    }
}
