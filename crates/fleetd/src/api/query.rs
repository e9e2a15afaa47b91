//! Query-string parsing for the API: `application/x-www-form-urlencoded` pairs, every value kept (a repeated
//! `nextPageToken` is an error, spec §8.4).

use super::route::decode_segment;

/// All `(key, value)` pairs of a query string, decoded; malformed pairs are skipped.
pub fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    let Some(query) = query else { return Vec::new() };
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((decode_form(k)?, decode_form(v)?))
        })
        .collect()
}

fn decode_form(text: &str) -> Option<String> {
    decode_segment(&text.replace('+', " "))
}

/// Every value of `key`.
pub fn values<'a>(pairs: &'a [(String, String)], key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    pairs.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_pairs_and_keeps_repeats() {
        let p = pairs(Some("alt=json&nextPageToken=ZAACAA%3D%3D&unitName=a%40b.service&x&nextPageToken=b"));
        assert_eq!(values(&p, "nextPageToken").collect::<Vec<_>>(), vec!["ZAACAA==", "b"]);
        assert_eq!(values(&p, "unitName").collect::<Vec<_>>(), vec!["a@b.service"]);
        assert_eq!(values(&p, "x").collect::<Vec<_>>(), vec![""]);
        assert!(pairs(None).is_empty());
    }
}
