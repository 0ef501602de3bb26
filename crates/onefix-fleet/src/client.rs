//! ClickHouse over its HTTP interface: one statement per request, the database named in the
//! URL, credentials in a Basic authorization header. Answers are read as `FORMAT JSON`, whose
//! `statistics` (rows and bytes read) every release since before 18.16 sends.

use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use crate::FleetError;

/// Where the fleet's data lives: `http://HOST:PORT/?database=NAME`.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `http://HOST:PORT`, without a trailing slash.
    pub base: String,
    pub database: String,
    /// The URL as given, for messages.
    pub url: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, FleetError> {
        let bad = |why: &str| FleetError::BadUrl { url: without_password(url), why: why.to_owned() };
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            if url.starts_with("https://") {
                bad("this onefix speaks plain HTTP only (put a TLS proxy such as stunnel in front, or use the server's HTTP port)")
            } else {
                bad("it must start with http://")
            }
        })?;
        let (authority, tail) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("it names no host"));
        }
        if authority.contains('@') {
            return Err(bad(
                "it holds credentials, which would show in the process list: set ONEFIX_CLICKHOUSE_USER and ONEFIX_CLICKHOUSE_PASSWORD, or give --credentials FILE",
            ));
        }
        let query = tail.split_once('?').map(|(_, q)| q).unwrap_or("");
        let mut database = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("database", name)) => database = Some(name.to_owned()),
                _ => return Err(bad(&format!("onefix reads only ?database= from it, not `{pair}`"))),
            }
        }
        let database = database.ok_or_else(|| bad("it names no database (add ?database=onefix)"))?;
        if database.is_empty() || !database.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad("the database name must be letters, digits and underscores"));
        }
        Ok(Endpoint { base: format!("http://{authority}"), database, url: url.to_owned() })
    }

    /// `HOST:PORT`, for messages.
    pub fn address(&self) -> &str {
        self.base.trim_start_matches("http://")
    }
}

/// `url` as it may be said back: a password in it (`http://user:secret@host`) shown as `***`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return url.to_owned() };
    let user = rest[..at].split_once(':').map_or(&rest[..at], |(user, _)| user);
    format!("{scheme}://{user}:***{}", &rest[at..])
}

/// A user and password, from the environment or a file: never from the command line, where
/// every user of the machine could read them in the process list.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Credentials {
    /// ONEFIX_CLICKHOUSE_USER and ONEFIX_CLICKHOUSE_PASSWORD, or `file`: `user=NAME` and
    /// `password=SECRET` lines (a systemd credential or a file readable by the agent only).
    pub fn load(file: Option<&std::path::Path>) -> Result<Credentials, FleetError> {
        let mut creds = Credentials {
            user: std::env::var("ONEFIX_CLICKHOUSE_USER").ok().filter(|u| !u.is_empty()),
            password: std::env::var("ONEFIX_CLICKHOUSE_PASSWORD").ok(),
        };
        if let Some(path) = file {
            let fail = |why: String| FleetError::Credentials { path: path.display().to_string(), why };
            let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
            // Two lines: anything much longer is not a credentials file.
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::Read::take(file, 64 * 1024), &mut text)
                .map_err(|e| fail(e.to_string()))?;
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                match line.split_once('=') {
                    Some(("user", v)) => creds.user = Some(v.trim().to_owned()),
                    Some(("password", v)) => creds.password = Some(v.trim().to_owned()),
                    _ => return Err(fail("each line must be user=NAME or password=SECRET".into())),
                }
            }
        }
        Ok(creds)
    }

    /// A warning when the credentials file may be read by others than its owner (a password in a
    /// 0644 file is every local user's).
    pub fn exposure(file: &std::path::Path) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let mode = std::fs::metadata(file).ok()?.mode() & 0o777;
        (mode & 0o077 != 0).then(|| {
            format!("the credentials file {} can be read by others (mode {mode:04o}): chmod 600 it", file.display())
        })
    }

    fn user_name(&self) -> &str {
        self.user.as_deref().unwrap_or("default")
    }
}

/// A statement's answer: its rows (for `FORMAT JSON`), and what the server read for it.
#[derive(Debug, Default)]
pub struct Answer {
    pub rows: Vec<serde_json::Map<String, Value>>,
    pub rows_read: u64,
    pub bytes_read: u64,
    /// Bytes of the answer itself, as sent over the wire.
    pub bytes_returned: u64,
}

/// The largest answer read: far above any aggregate, but a bound.
const MAX_ANSWER_BYTES: u64 = 1 << 30;

pub struct Client {
    agent: ureq::Agent,
    pub endpoint: Endpoint,
    credentials: Credentials,
    timeout: Duration,
}

impl Client {
    pub fn new(endpoint: Endpoint, credentials: Credentials, timeout: Duration) -> Client {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            // ClickHouse says what went wrong in the body of a 4xx or 5xx answer: read it.
            .http_status_as_error(false)
            .build();
        Client { agent: config.into(), endpoint, credentials, timeout }
    }

    /// Runs `sql` (with `data` after it, for an INSERT's rows) and returns the body.
    pub fn execute(&self, sql: &str, data: Option<&[u8]>) -> Result<String, FleetError> {
        let ep = &self.endpoint;
        let mut url = format!("{}/?database={}", ep.base, ep.database);
        let body: Vec<u8> = match data {
            // The statement goes in the URL, its rows in the body.
            Some(rows) => {
                // Into a Distributed table, the rows reach their shards before the answer.
                url.push_str("&insert_distributed_sync=1&query=");
                url.push_str(&percent_encode(sql));
                rows.to_vec()
            }
            None => sql.as_bytes().to_vec(),
        };
        let mut request = self.agent.post(&url);
        if self.credentials.user.is_some() || self.credentials.password.is_some() {
            let pair =
                format!("{}:{}", self.credentials.user_name(), self.credentials.password.as_deref().unwrap_or(""));
            let token = base64::engine::general_purpose::STANDARD.encode(pair);
            request = request.header("Authorization", format!("Basic {token}"));
        }
        let response = request.send(&body[..]).map_err(|e| self.transport_error(e))?;
        let status = response.status().as_u16();
        // An aggregate over a large fleet may be more than ureq's default 10 MB.
        let text = response
            .into_body()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(|e| self.transport_error(e))?;
        if status == 200 {
            return Ok(text);
        }
        Err(self.server_error(status, &text))
    }

    /// Runs a `SELECT` and reads its rows and statistics (`FORMAT JSON` is appended).
    pub fn select(&self, sql: &str) -> Result<Answer, FleetError> {
        let text = self.execute(&format!("{sql}\nFORMAT JSON"), None)?;
        let value: Value = serde_json::from_str(&text).map_err(|e| FleetError::BadAnswer(e.to_string()))?;
        let rows = match value.get("data") {
            Some(Value::Array(rows)) => rows
                .iter()
                .map(|r| r.as_object().cloned().ok_or_else(|| FleetError::BadAnswer("a row is not an object".into())))
                .collect::<Result<Vec<_>, _>>()?,
            _ => return Err(FleetError::BadAnswer("no `data` in the answer".into())),
        };
        let stat = |k: &str| value.get("statistics").and_then(|s| s.get(k)).map(as_u64).unwrap_or(0);
        Ok(Answer {
            rows,
            rows_read: stat("rows_read"),
            bytes_read: stat("bytes_read"),
            bytes_returned: text.len() as u64,
        })
    }

    /// Inserts rows given as JSON objects, one per line (`FORMAT JSONEachRow`).
    pub fn insert_json_rows(&self, table: &str, rows: &[u8]) -> Result<(), FleetError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.execute(&format!("INSERT INTO {table} FORMAT JSONEachRow"), Some(rows)).map(|_| ())
    }

    fn transport_error(&self, e: ureq::Error) -> FleetError {
        let address = self.endpoint.address().to_owned();
        match e {
            ureq::Error::Timeout(_) => FleetError::TimedOut { address, seconds: self.timeout.as_secs().max(1) },
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                FleetError::TimedOut { address, seconds: self.timeout.as_secs().max(1) }
            }
            ureq::Error::Io(io) => FleetError::Unreachable { address, why: io.to_string() },
            other => FleetError::Unreachable { address, why: other.to_string() },
        }
    }

    /// The server's refusal, by its error code: old releases say `Code: 81, e.displayText() =
    /// DB::Exception: ...`, new ones `Code: 81. DB::Exception: ... (UNKNOWN_DATABASE)`.
    fn server_error(&self, status: u16, text: &str) -> FleetError {
        let code = text
            .split_once("Code: ")
            .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|d| d.parse::<u32>().ok());
        let address = self.endpoint.address().to_owned();
        match code {
            Some(81) => FleetError::NoDatabase { address, database: self.endpoint.database.clone() },
            // Unknown user, wrong password, authentication failed, required password.
            Some(192 | 193 | 194 | 195 | 516) => {
                FleetError::AuthRefused { address, user: self.credentials.user_name().to_owned() }
            }
            _ if status == 401 || status == 403 => {
                FleetError::AuthRefused { address, user: self.credentials.user_name().to_owned() }
            }
            _ => FleetError::Refused { code, message: exception_text(text) },
        }
    }
}

/// The message of a ClickHouse exception without its code and stack trace.
fn exception_text(text: &str) -> String {
    let first = text.lines().next().unwrap_or("").trim();
    let message = first.split_once("DB::Exception: ").map(|(_, m)| m).unwrap_or(first);
    let message = message.split(", e.what()").next().unwrap_or(message);
    let message = message.split(" Stack trace").next().unwrap_or(message);
    message.trim().trim_end_matches('.').to_owned()
}

/// A JSON number or a quoted one: `FORMAT JSON` quotes 64-bit integers.
pub fn as_u64(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)).unwrap_or(0),
        Value::String(s) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

pub fn as_f64(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap_or(0.0),
        Value::String(s) => s.parse().unwrap_or(0.0),
        _ => 0.0,
    }
}

pub fn as_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A string literal for ClickHouse SQL: quotes and backslashes escaped.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refused_url_is_said_without_its_password() {
        let err = super::Endpoint::parse("http://ingest:hunter2@127.0.0.1:8123/?database=onefix").err().unwrap();
        let said = err.to_string();
        assert!(!said.contains("hunter2"), "{said}");
        assert!(said.contains("`http://ingest:***@127.0.0.1:8123/?database=onefix`"), "{said}");
        assert_eq!(super::without_password("http://127.0.0.1:1/?database=a@b"), "http://127.0.0.1:1/?database=a@b");
    }

    use super::*;

    #[test]
    fn urls_name_a_database_and_never_credentials() {
        let ep = Endpoint::parse("http://127.0.0.1:8123/?database=onefix").unwrap();
        assert_eq!((ep.base.as_str(), ep.database.as_str()), ("http://127.0.0.1:8123", "onefix"));
        assert!(Endpoint::parse("http://u:p@127.0.0.1:8123/?database=onefix").is_err());
        assert!(Endpoint::parse("http://127.0.0.1:8123/").is_err());
        assert!(Endpoint::parse("127.0.0.1:8123/?database=x").is_err());
        assert!(Endpoint::parse("http://127.0.0.1:8123/?database=a;drop").is_err());
    }

    #[test]
    fn literals_are_escaped_and_exceptions_shortened() {
        assert_eq!(quote("it's a\\b"), "'it\\'s a\\\\b'");
        let old = "Code: 81, e.displayText() = DB::Exception: Database nope doesn't exist, e.what() = DB::Exception\n";
        assert_eq!(exception_text(old), "Database nope doesn't exist");
        let new = "Code: 60. DB::Exception: Table x.y does not exist. (UNKNOWN_TABLE) (version 24.1)\n";
        assert_eq!(exception_text(new), "Table x.y does not exist. (UNKNOWN_TABLE) (version 24.1)");
    }
}
