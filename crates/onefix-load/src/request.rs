//! The request to send: the target parsed from the URL template, and the bytes of each request
//! rendered from the templates of its path, headers and body.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::template::{Compiler, Place, RenderCtx, Template};
use crate::LoadError;

/// Where the requests go.
#[derive(Clone, Debug)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub addr: SocketAddr,
    /// https: the requests go over TLS.
    pub tls: bool,
    /// `host[:port]` as written in the URL: the Host header, and HTTP/2's `:authority`.
    pub authority: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.addr)
    }
}

/// A request compiled from its templates.
pub struct RequestPlan {
    pub method: String,
    pub target: Target,
    pub keep_alive: bool,
    pub seed: u64,
    /// The bytes of every request when nothing in it is drawn per request.
    pub fixed: Option<Vec<u8>>,
    head: Vec<u8>,
    path: Template,
    /// After the path: the end of the request line, `Host:` and any `Connection: close`.
    after_path: Vec<u8>,
    /// The user's headers: `Name: ` and the value's template.
    headers: Vec<(Vec<u8>, Template)>,
    body: Option<Template>,
    var_count: usize,
}

/// One request rendered in parts, for HTTP/2 (which frames the head itself).
#[derive(Default)]
pub struct RequestParts {
    pub path: Vec<u8>,
    /// The values of the plan's headers, in the order of [`RequestPlan::header_names`].
    pub header_values: Vec<Vec<u8>>,
    pub body: Option<Vec<u8>>,
}

/// The parts of a URL template.
struct UrlParts<'a> {
    tls: bool,
    host: String,
    port: u16,
    host_header: String,
    path: &'a str,
}

fn parse_url(url: &str) -> Result<UrlParts<'_>, LoadError> {
    let bad = |why: &str| LoadError::Input(format!("`{url}` is not a URL onefix can load: {why}"));
    let (tls, rest) = if url.len() >= 7 && url[..7].eq_ignore_ascii_case("http://") {
        (false, &url[7..])
    } else if url.len() >= 8 && url[..8].eq_ignore_ascii_case("https://") {
        (true, &url[8..])
    } else {
        return Err(bad("it must start with http:// or https://"));
    };
    let default_port = if tls { 443 } else { 80 };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let mut path = &rest[end..];
    if authority.contains("{{") {
        return Err(bad("placeholders may appear in the path and query, not in the host or port"));
    }
    if authority.contains('@') {
        return Err(bad("user names and passwords in the URL are not supported (send an Authorization header)"));
    }
    if authority.is_empty() {
        return Err(bad("the host is missing"));
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let close = inner.find(']').ok_or_else(|| bad("the IPv6 address has no closing `]`"))?;
        let host = &inner[..close];
        let after = &inner[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| bad(&format!("`{p}` is not a port")))?,
            None if after.is_empty() => default_port,
            None => return Err(bad("junk after the IPv6 address")),
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse::<u16>().map_err(|_| bad(&format!("`{p}` is not a port")))?),
            None => (authority.to_string(), default_port),
        }
    };
    if port == 0 {
        return Err(bad("port 0 cannot be connected to"));
    }
    if let Some(hash) = path.find('#') {
        if !path[hash..].contains("}}") {
            path = &path[..hash];
        }
    }
    Ok(UrlParts { tls, host, port, host_header: authority.to_string(), path })
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// What the user asked to send.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    pub url: String,
    pub method: String,
    /// `Name: value` lines; values may be templates.
    pub headers: Vec<String>,
    /// The body template, if any.
    pub body: Option<String>,
    pub keep_alive: bool,
    pub seed: u64,
}

impl RequestPlan {
    /// Checks everything up front: an invalid URL, header or template is one sentence.
    pub fn compile(spec: &RequestSpec) -> Result<RequestPlan, LoadError> {
        let parts = parse_url(&spec.url)?;
        if !is_token(&spec.method) {
            return Err(LoadError::Input(format!("`{}` is not an HTTP method", spec.method)));
        }
        let mut compiler = Compiler::new(spec.seed);
        let path_text = if parts.path.is_empty() {
            "/".to_string()
        } else if parts.path.starts_with('?') {
            format!("/{}", parts.path)
        } else {
            parts.path.to_string()
        };
        let path = compiler.compile(&path_text, Place::Url).map_err(|e| LoadError::Input(e.0))?;
        let mut headers = Vec::new();
        let mut has_host = false;
        let mut has_connection = false;
        for line in &spec.headers {
            let Some((name, value)) = line.split_once(':') else {
                return Err(LoadError::Input(format!("the header `{line}` has no `:` (write it as 'Name: value')")));
            };
            let name = name.trim();
            if !is_token(name) {
                return Err(LoadError::Input(format!("`{name}` is not a header name (in `{line}`)")));
            }
            if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(LoadError::Input(format!(
                    "the {name} header is set by onefix from the body; leave it out"
                )));
            }
            has_host |= name.eq_ignore_ascii_case("host");
            has_connection |= name.eq_ignore_ascii_case("connection");
            let value = compiler.compile(value.trim(), Place::Header).map_err(|e| LoadError::Input(e.0))?;
            let mut prefix = name.as_bytes().to_vec();
            prefix.extend_from_slice(b": ");
            headers.push((prefix, value));
        }
        let body = match &spec.body {
            None => None,
            Some(text) => Some(compiler.compile(text, Place::Body).map_err(|e| LoadError::Input(e.0))?),
        };

        let mut head = Vec::new();
        head.extend_from_slice(spec.method.as_bytes());
        head.push(b' ');
        let mut after_path = b" HTTP/1.1\r\n".to_vec();
        if !has_host {
            after_path.extend_from_slice(b"Host: ");
            after_path.extend_from_slice(parts.host_header.as_bytes());
            after_path.extend_from_slice(b"\r\n");
        }
        if !spec.keep_alive && !has_connection {
            after_path.extend_from_slice(b"Connection: close\r\n");
        }

        let addr = resolve(&parts.host, parts.port)?;
        let mut plan = RequestPlan {
            method: spec.method.clone(),
            target: Target { host: parts.host, port: parts.port, addr, tls: parts.tls, authority: parts.host_header },
            keep_alive: spec.keep_alive,
            seed: spec.seed,
            fixed: None,
            head,
            path,
            after_path,
            headers,
            body,
            var_count: compiler.var_count(),
        };
        let literal = plan.path.is_literal()
            && plan.headers.iter().all(|(_, v)| v.is_literal())
            && !plan.body.as_ref().is_some_and(|b| b.has_placeholders());
        if literal {
            let mut ctx = plan.new_ctx();
            let mut out = Vec::new();
            plan.render_into(&mut ctx, 0, &mut out);
            plan.fixed = Some(out);
        }
        Ok(plan)
    }

    /// The names of the user's headers, in the order their values are rendered.
    pub fn header_names(&self) -> impl Iterator<Item = &[u8]> {
        self.headers.iter().map(|(prefix, _)| &prefix[..prefix.len() - 2])
    }

    /// Renders request number `seq` in parts (the same values as [`Self::render_into`] draws).
    pub fn render_parts(&self, ctx: &mut RenderCtx, seq: u64, out: &mut RequestParts) {
        ctx.begin(seq);
        out.path.clear();
        ctx.render(&self.path, &mut out.path);
        out.header_values.resize_with(self.headers.len(), Vec::new);
        for ((_, value), buf) in self.headers.iter().zip(out.header_values.iter_mut()) {
            buf.clear();
            ctx.render(value, buf);
        }
        out.body = self.body.as_ref().map(|body| {
            let mut b = Vec::new();
            ctx.render(body, &mut b);
            b
        });
    }

    pub fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    pub fn new_ctx(&self) -> RenderCtx {
        RenderCtx::new(self.seed, self.var_count)
    }

    /// Writes request number `seq` into `out` (cleared first).
    pub fn render_into(&self, ctx: &mut RenderCtx, seq: u64, out: &mut Vec<u8>) {
        out.clear();
        ctx.begin(seq);
        out.extend_from_slice(&self.head);
        ctx.render(&self.path, out);
        out.extend_from_slice(&self.after_path);
        for (prefix, value) in &self.headers {
            out.extend_from_slice(prefix);
            ctx.render(value, out);
            out.extend_from_slice(b"\r\n");
        }
        match &self.body {
            None => out.extend_from_slice(b"\r\n"),
            Some(body) => {
                // The length precedes the body: render the body at the end, then move it.
                let mark = out.len();
                ctx.render(body, out);
                let len = out.len() - mark;
                let mut line = b"Content-Length: ".to_vec();
                crate::template::write_u64(len as u64, &mut line);
                line.extend_from_slice(b"\r\n\r\n");
                out.splice(mark..mark, line);
            }
        }
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, LoadError> {
    let found = (host, port)
        .to_socket_addrs()
        .map_err(|e| LoadError::Input(format!("cannot resolve the host `{host}`: {}", e.to_string().to_lowercase())))?;
    let addrs: Vec<SocketAddr> = found.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| LoadError::Input(format!("the host `{host}` has no address")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str) -> RequestSpec {
        RequestSpec {
            url: url.to_string(),
            method: "GET".into(),
            headers: vec![],
            body: None,
            keep_alive: true,
            seed: 1,
        }
    }

    fn render(spec: &RequestSpec, seq: u64) -> String {
        let plan = RequestPlan::compile(spec).unwrap();
        let mut ctx = plan.new_ctx();
        let mut out = Vec::new();
        plan.render_into(&mut ctx, seq, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn fixed_requests_are_rendered_once() {
        let s = spec("http://127.0.0.1:8080");
        let plan = RequestPlan::compile(&s).unwrap();
        assert_eq!(plan.fixed.as_deref(), Some(&b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"[..]));
        assert_eq!(plan.target.addr.port(), 8080);
        assert_eq!(render(&spec("http://localhost:9/?q=1#frag"), 0), "GET /?q=1 HTTP/1.1\r\nHost: localhost:9\r\n\r\n");
        let tls = RequestPlan::compile(&spec("https://localhost/x")).unwrap();
        assert!(tls.target.tls);
        assert_eq!(tls.target.addr.port(), 443);
        assert_eq!(tls.target.authority, "localhost");
    }

    #[test]
    fn parts_draw_the_same_values_as_the_http1_request() {
        let mut s = spec("https://127.0.0.1:8443/items/{{id = int 1 1000}}");
        s.headers = vec!["X-Id: {{id}}".into()];
        s.body = Some("{{id}}".into());
        let plan = RequestPlan::compile(&s).unwrap();
        let mut ctx = plan.new_ctx();
        let mut parts = RequestParts::default();
        plan.render_parts(&mut ctx, 7, &mut parts);
        let whole = render(&s, 7);
        let path = String::from_utf8(parts.path.clone()).unwrap();
        let id = path.strip_prefix("/items/").unwrap();
        assert!(whole.starts_with(&format!("GET {path} HTTP/1.1")), "{whole}");
        assert_eq!(parts.header_values, vec![id.as_bytes().to_vec()]);
        assert_eq!(parts.body.as_deref(), Some(id.as_bytes()));
        assert_eq!(plan.header_names().collect::<Vec<_>>(), vec![&b"X-Id"[..]]);
    }

    #[test]
    fn headers_and_body_are_templated_with_a_content_length() {
        let mut s = spec("http://127.0.0.1:8080/items/{{id = int 10 10}}");
        s.method = "POST".into();
        s.headers = vec!["X-Id: {{id}}".into(), "Content-Type: application/json".into()];
        s.body = Some("{\"id\": {{id}}}".into());
        s.keep_alive = false;
        let r = render(&s, 3);
        assert_eq!(
            r,
            "POST /items/10 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\nX-Id: 10\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"id\": 10}"
        );
        assert!(RequestPlan::compile(&s).unwrap().fixed.is_none());
    }

    #[test]
    fn bad_urls_and_headers_are_one_sentence() {
        let cases = [
            ("ftp://x/", "must start with http:// or https://"),
            ("http://{{int 1 2}}:80/", "not in the host or port"),
            ("http://127.0.0.1:99999/", "is not a port"),
            ("http://127.0.0.1:0/", "port 0"),
            ("http:///x", "the host is missing"),
        ];
        for (url, want) in cases {
            let e = RequestPlan::compile(&spec(url)).err().unwrap().to_string();
            assert!(e.contains(want), "{url}: {e}");
        }
        let mut s = spec("http://127.0.0.1:1/");
        s.headers = vec!["NoColon".into()];
        assert!(RequestPlan::compile(&s).err().unwrap().to_string().contains("has no `:`"));
        s.headers = vec!["Content-Length: 3".into()];
        assert!(RequestPlan::compile(&s).err().unwrap().to_string().contains("set by onefix"));
        s.headers = vec![];
        s.method = "GE T".into();
        assert!(RequestPlan::compile(&s).err().unwrap().to_string().contains("not an HTTP method"));
    }
}
