//! Fetching a profile over HTTP, as `go tool pprof http://HOST/debug/pprof/profile?seconds=N`
//! does: one GET, given the profile's seconds and a margin to answer, the body kept whole up to
//! [`crate::MAX_PROFILE_BYTES`].

/// Seconds a server gets to answer beyond the profile's own duration (`seconds=N`), as
/// `go tool pprof` allows.
const MARGIN_S: u64 = 30;
/// Profiles asked without `seconds=` (a heap, `/debug/pprof/profile`'s default of 30 s).
const DEFAULT_PROFILE_S: u64 = 30;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("onefix fetches profiles over plain http:// only; download it first (curl -o profile.pb.gz '{0}') and pass the file")]
    Https(String),
    #[error("could not fetch {url} ({reason})")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered HTTP {status} {reason}{detail}")]
    Status { url: String, status: u16, reason: String, detail: String },
    #[error("{url} sent more than the {} MiB onefix reads of a profile; download it first if it really is one", crate::MAX_PROFILE_BYTES >> 20)]
    TooLarge { url: String },
}

/// Whether an argument is a URL rather than a file.
pub fn is_url(arg: &str) -> bool {
    arg.starts_with("http://") || arg.starts_with("https://")
}

/// The profile's seconds, from the URL's `seconds=N` query parameter.
fn profile_seconds(url: &str) -> Option<u64> {
    let query = url.split_once('?')?.1;
    query.split('&').find_map(|kv| kv.strip_prefix("seconds=")).and_then(|v| v.parse().ok())
}

/// GETs `url` and returns its body; anything but a 200 answer is an error that says what came.
pub fn fetch(url: &str) -> Result<Vec<u8>, FetchError> {
    if url.starts_with("https://") {
        return Err(FetchError::Https(url.to_owned()));
    }
    let timeout = profile_seconds(url).unwrap_or(DEFAULT_PROFILE_S) + MARGIN_S;
    let mut response = minreq::get(url)
        .with_timeout(timeout)
        .send_lazy()
        .map_err(|e| FetchError::Unreachable { url: url.to_owned(), reason: e.to_string() })?;
    let unreachable = |e: std::io::Error| FetchError::Unreachable { url: url.to_owned(), reason: e.to_string() };
    let too_large = || FetchError::TooLarge { url: url.to_owned() };
    if response.status_code != 200 {
        // Go's pprof handlers answer errors with one line of text (a profile already running).
        let body = crate::read_at_most(&mut response, 4096).map_err(unreachable)?.unwrap_or_default();
        let text = std::str::from_utf8(&body).ok().and_then(|t| t.lines().next()).unwrap_or("").trim();
        let detail = if text.is_empty() || text.len() > 200 { String::new() } else { format!(": {text}") };
        return Err(FetchError::Status {
            url: url.to_owned(),
            status: response.status_code,
            reason: response.reason_phrase.clone(),
            detail,
        });
    }
    // A body declared larger than the bound is refused before any of it is read; one that does
    // not say its length is read up to the bound.
    let declared = response
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > crate::MAX_PROFILE_BYTES) {
        return Err(too_large());
    }
    crate::read_at_most(&mut response, crate::MAX_PROFILE_BYTES).map_err(unreachable)?.ok_or_else(too_large)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_duration_comes_from_the_query() {
        assert_eq!(profile_seconds("http://h:6060/debug/pprof/profile?seconds=10"), Some(10));
        assert_eq!(profile_seconds("http://h/debug/pprof/profile?debug=0&seconds=3"), Some(3));
        assert_eq!(profile_seconds("http://h/debug/pprof/heap"), None);
        assert!(is_url("http://127.0.0.1:1/x") && !is_url("profile.pb.gz"));
    }

    #[test]
    fn a_closed_port_is_one_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let err = fetch(&format!("http://127.0.0.1:{port}/debug/pprof/profile?seconds=1")).unwrap_err();
        assert!(matches!(err, FetchError::Unreachable { .. }), "{err}");
        assert!(matches!(fetch("https://127.0.0.1/x"), Err(FetchError::Https(_))));
    }
}
