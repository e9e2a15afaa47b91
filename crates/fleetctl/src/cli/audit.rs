//! `audit [UNIT]` (issue 38, an extension): the cluster's audit trail, oldest first, as a table (TIME, WHO, ACTION,
//! RESULT) or JSON. `--since` is a duration back from now or an RFC 3339 time; the records come from the client
//! (the API's `GET /fleet/v1/audit`, or etcd directly).

use super::context::Ctx;
use super::json::{self, Format};
use super::rollout::utc;
use super::table::render;
use fleet_core::audit::{AuditList, MAX_LIMIT, Query};

/// `fleetctl audit [UNIT]`.
pub fn audit(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let Some(format) = json::format(ctx) else { return 1 };
    let unit = match args {
        [] => None,
        [unit] => Some(fleet_core::unit::name::mangle(unit)),
        _ => {
            ctx.warn("At most one unit may be given");
            return 1;
        }
    };
    let since_ms = match parse_since(ctx.flags.str("since"), fleet_core::model::now_ms()) {
        Ok(since) => since,
        Err(e) => {
            ctx.warn(&e);
            return 1;
        }
    };
    let limit = ctx.flags.int("limit");
    let Some(limit) = usize::try_from(limit).ok().filter(|l| (1..=MAX_LIMIT).contains(l)) else {
        ctx.warn(&format!("Invalid --limit {limit}: expected 1 to {MAX_LIMIT}"));
        return 1;
    };
    let list = match ctx.client.audit(&Query { unit, since_ms, limit }) {
        Ok(list) => list,
        Err(e) => {
            ctx.warn(&format!("Error retrieving the audit trail: {e}"));
            return 1;
        }
    };
    for error in &list.errors {
        ctx.warn(&format!("Unreadable audit record: {error}"));
    }
    match format {
        Format::Json => json::print(ctx, &json::audit_doc(&list)),
        Format::Text => {
            let text = render_audit(&list, !ctx.flags.bool("no-legend"));
            let _ = ctx.out.write_all(text.as_bytes());
        }
    }
    0
}

/// The table: TIME, WHO, ACTION, RESULT (the status, then the error if any).
pub fn render_audit(list: &AuditList, legend: bool) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    if legend {
        rows.push(["TIME", "WHO", "ACTION", "RESULT"].map(String::from).to_vec());
    }
    for r in &list.records {
        let result = match &r.error {
            Some(error) => format!("{} {error}", r.status),
            None => r.status.to_string(),
        };
        rows.push(vec![utc(r.at_ms), r.who.to_string(), r.action.clone(), result]);
    }
    render(&rows)
}

/// `--since`: empty (everything), a Go duration back from `now_ms`, or an RFC 3339 time
/// (`2026-12-01T08:00:00Z`, `2026-12-01T09:00:00.5+01:00`).
pub fn parse_since(text: &str, now_ms: u64) -> Result<u64, String> {
    if text.is_empty() {
        return Ok(0);
    }
    if let Ok(back) = fleet_core::go::parse_duration(text) {
        return Ok(now_ms.saturating_sub(back.as_millis() as u64));
    }
    rfc3339_ms(text).ok_or_else(|| {
        format!("Invalid --since {text:?}: expected a duration (90m, 24h) or an RFC 3339 time (2026-12-01T08:00:00Z)")
    })
}

/// Unix ms of an RFC 3339 time; `None` when it is not one (or before 1970).
fn rfc3339_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' {
        return None;
    }
    if b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        millis = format!("{:0<3}", &fraction[..digits.min(3)]).parse::<i64>().ok()?;
        rest = &fraction[digits..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        zone if zone.len() == 6 && matches!(&zone[..1], "+" | "-") && &zone[3..4] == ":" => {
            let (h, m) = (zone[1..3].parse::<i64>().ok()?, zone[4..6].parse::<i64>().ok()?);
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    u64::try_from(secs * 1000 + millis).ok()
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm; the inverse of `fleet_core::go::utc_fields`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_core::audit::{AuditRecord, Via, Who};

    #[test]
    fn since_is_a_duration_back_or_an_rfc3339_time() {
        let now = 1_796_018_721_000; // 2026-11-30T06:05:21Z
        assert_eq!(parse_since("", now), Ok(0));
        assert_eq!(parse_since("90m", now), Ok(now - 90 * 60 * 1000));
        assert_eq!(parse_since("2026-11-30T06:05:21Z", now), Ok(now));
        assert_eq!(parse_since("2026-11-30T07:05:21.25+01:00", now), Ok(now + 250));
        assert_eq!(parse_since("2000-02-29T00:00:00Z", now), Ok(951_782_400_000));
        assert_eq!(parse_since("1970-01-01T00:00:00Z", now), Ok(0));
        for bad in ["yesterday", "2026-13-01T00:00:00Z", "2026-11-30", "2026-11-30T06:05:21", "2026-11-30T06:05:21+1"] {
            let err = parse_since(bad, now).unwrap_err();
            assert!(err.starts_with(&format!("Invalid --since {bad:?}: expected a duration")), "{err}");
        }
        for ms in [0u64, 951_782_400_000, now, 4_102_444_800_000] {
            let (y, mo, d, h, mi, s) = fleet_core::go::utc_fields(ms / 1000);
            let text = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z");
            assert_eq!(rfc3339_ms(&text), Some(ms), "{text}");
        }
    }

    #[test]
    fn the_table_shows_time_who_action_and_result() {
        let record = |at_ms, status, error: Option<&str>| AuditRecord {
            at_ms,
            who: Who { via: Via::Certificate, name: "CN=ops".into() },
            method: "PUT".into(),
            path: "/fleet/v1/units/a.service".into(),
            action: "submit a.service (launched)".into(),
            units: vec!["a.service".into()],
            versions: Default::default(),
            status,
            error: error.map(str::to_string),
        };
        let list = AuditList {
            records: vec![record(1_796_018_721_000, 201, None), record(1_796_018_722_000, 400, Some("bad"))],
            ..AuditList::default()
        };
        assert_eq!(
            render_audit(&list, true),
            "TIME\t\t\tWHO\t\t\tACTION\t\t\t\tRESULT\n\
             2026-11-30 06:05:21\tCN=ops (certificate)\tsubmit a.service (launched)\t201\n\
             2026-11-30 06:05:22\tCN=ops (certificate)\tsubmit a.service (launched)\t400 bad\n"
        );
    }
}
