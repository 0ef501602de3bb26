use super::*;

fn render(text: &str, seq: u64) -> String {
    render_one(text, Place::Url, 7, seq).unwrap()
}

fn error(text: &str) -> String {
    let mut c = Compiler::new(1);
    c.compile(text, Place::Url).unwrap_err().0
}

#[test]
fn literals_pass_through() {
    assert_eq!(render("/a/b?c=d", 0), "/a/b?c=d");
    let mut c = Compiler::new(1);
    assert!(c.compile("/plain", Place::Url).unwrap().is_literal());
    assert!(c.compile("/x/{{int 1 2}}", Place::Url).unwrap().has_placeholders());
}

#[test]
fn int_ranges_are_inclusive_and_cover_the_range() {
    let mut seen = [false; 5];
    for seq in 0..500 {
        let v: i64 = render("{{int 3 7}}", seq).parse().unwrap();
        assert!((3..=7).contains(&v), "{v}");
        seen[(v - 3) as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
    assert_eq!(render("{{ int -5 -5 }}", 3), "-5");
    assert_eq!(render("{{int -9223372036854775808 -9223372036854775808}}", 0), "-9223372036854775808");
}

#[test]
fn choices_keep_quoted_words_and_escape_braces() {
    for seq in 0..50 {
        let v = render_one("{{choice a bb \"c d\"}}", Place::Body, 1, seq).unwrap();
        assert!(["a", "bb", "c d"].contains(&v.as_str()), "{v}");
    }
    assert_eq!(render("x{{choice {{}}y", 0), "x{{y");
}

#[test]
fn bytes_encode_to_the_right_length_and_alphabet() {
    let hex = render("{{bytes 20 hex}}", 1);
    assert_eq!(hex.len(), 40);
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
    let url = render("{{bytes 20 urlencode}}", 1);
    let decoded = url.matches('%').count() + (url.len() - 3 * url.matches('%').count());
    assert_eq!(decoded, 20, "{url}");
    assert_eq!(render("{{bytes 3 base64}}", 2).len(), 4);
    assert_eq!(render("{{bytes 4 base64}}", 2).len(), 8);
    assert!(render("{{bytes 4 base64}}", 2).ends_with("=="));
    assert_eq!(render("{{bytes 4 base64url}}", 2).len(), 6);
}

#[test]
fn encodings_match_known_values() {
    let mut out = Vec::new();
    Encoding::Base64.encode(b"Man is", &mut out);
    assert_eq!(out, b"TWFuIGlz");
    out.clear();
    Encoding::Base64.encode(b"Ma", &mut out);
    assert_eq!(out, b"TWE=");
    out.clear();
    Encoding::UrlEncode.encode(b"a b/\x00~", &mut out);
    assert_eq!(out, b"a%20b%2F%00~");
    out.clear();
    Encoding::Hex.encode(&[0xde, 0xad, 0x01], &mut out);
    assert_eq!(out, b"dead01");
}

#[test]
fn pick_draws_from_a_stable_pool_of_the_given_size() {
    let mut distinct = std::collections::HashSet::new();
    for seq in 0..2000 {
        distinct.insert(render("{{pick 10 bytes 20 hex}}", seq));
    }
    assert_eq!(distinct.len(), 10);
    // The pool depends on the seed alone, not on other placeholders' draws.
    let a: std::collections::HashSet<_> = (0..500).map(|s| render("{{pick 5 int 1 1000000}}", s)).collect();
    let b: std::collections::HashSet<_> = (0..500)
        .map(|s| render("{{int 1 9}}-{{pick 5 int 1 1000000}}", s).split('-').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(a, b);
}

#[test]
fn seeded_rendering_is_deterministic_per_request_number() {
    let t = "/announce?info_hash={{pick 2000 bytes 20 urlencode}}&peer_id={{pick 1000 bytes 20 urlencode}}&port={{int 1024 65535}}&n={{seq}}&u={{uuid}}";
    let first: Vec<String> = (0..20).map(|s| render_one(t, Place::Url, 42, s).unwrap()).collect();
    let again: Vec<String> = (0..20).rev().map(|s| render_one(t, Place::Url, 42, s).unwrap()).collect();
    let again: Vec<String> = again.into_iter().rev().collect();
    assert_eq!(first, again);
    let other: Vec<String> = (0..20).map(|s| render_one(t, Place::Url, 43, s).unwrap()).collect();
    assert_ne!(first, other);
    assert!(first[3].contains("&n=3&"));
    let uuid = first[0].rsplit("u=").next().unwrap();
    assert_eq!(uuid.len(), 36);
    assert_eq!(&uuid[14..15], "4");
}

#[test]
fn variables_repeat_a_value_within_a_request() {
    let mut c = Compiler::new(5);
    let url = c.compile("/x?id={{id = int 1 1000000000}}", Place::Url).unwrap();
    let body = c.compile("{\"id\": {{id}}, \"again\": \"{{ id }}\"}", Place::Body).unwrap();
    let mut ctx = RenderCtx::new(5, c.var_count());
    for seq in 0..10 {
        ctx.begin(seq);
        let mut u = Vec::new();
        let mut b = Vec::new();
        ctx.render(&url, &mut u);
        ctx.render(&body, &mut b);
        let id = String::from_utf8(u).unwrap().rsplit('=').next().unwrap().to_string();
        assert_eq!(String::from_utf8(b).unwrap(), format!("{{\"id\": {id}, \"again\": \"{id}\"}}"));
    }
}

#[test]
fn lines_come_from_the_file() {
    let dir = std::env::temp_dir().join(format!("onefix-load-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("names.txt");
    std::fs::write(&path, "alice\r\n\nbob\ncarol dee\n").unwrap();
    let p = path.display().to_string();
    let mut seen = std::collections::HashSet::new();
    for seq in 0..100 {
        seen.insert(render_one(&format!("{{{{line {p}}}}}"), Place::Body, 1, seq).unwrap());
    }
    assert_eq!(seen, ["alice", "bob", "carol dee"].iter().map(|s| s.to_string()).collect());
    // In the URL a line with a space must be encoded.
    let e = error(&format!("/u/{{{{line {p}}}}}"));
    assert!(e.contains("add `urlencode`"), "{e}");
    let v = render(&format!("/u/{{{{line {p} urlencode}}}}"), 0);
    assert!(!v.contains(' '));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn invalid_templates_are_one_clear_sentence() {
    let cases = [
        ("/x/{{int 5 1}}", "the range is empty (5 is above 1)"),
        ("/x/{{int 1}}", "`int` takes two bounds"),
        ("/x/{{int a 3}}", "must be a whole number, not `a`"),
        ("/x/{{bytes 20 rot13}}", "`rot13` is not an encoding"),
        ("/x/{{bytes 0 hex}}", "between 1 and"),
        ("/x/{{frob 1}}", "`frob` is not a generator"),
        ("/x/{{int 1 2", "is never closed"),
        ("/x/{{}}", "it is empty"),
        ("/x/{{pick 0 int 1 2}}", "pool size must be between"),
        ("/x/{{pick 5 seq}}", "cannot draw from `seq`"),
        ("/x/{{pick 5}}", "needs a generator"),
        ("/x/{{line /dev/zero}}", "larger than 256 MiB"),
        // Found by fuzzing (bench/fuzz.sh template): a pool too large to build.
        ("/x/{{pick 3000 bytes 1048576 hex}}", "would hold more than 256 MiB"),
        ("/x/{{nope}}", "nor a variable defined earlier"),
        ("/x/{{choice \"a}}", "never closed"),
        ("/x/{{line /nonexistent/file.txt}}", "cannot read the file /nonexistent/file.txt"),
        ("/a b", "cannot hold the character ' '"),
        ("/x/{{choice \"a b\" c}}", "holds the character ' '"),
        ("/x/{{a = int 1 2}}{{a = int 1 2}}", "already defined"),
    ];
    for (text, want) in cases {
        let got = error(text);
        assert!(got.contains(want), "{text}: {got}");
        assert!(!got.contains('\n'), "{got}");
    }
    let mut c = Compiler::new(1);
    assert!(c.compile("x\r\ny", Place::Header).is_err());
    assert!(c.compile("x\r\ny", Place::Body).is_ok());
}
