//! `onefix agent` and `onefix fleet` against a real ClickHouse: Debian's clickhouse-server
//! (18.16, installed by ./setup), started here on free loopback ports with a scratch data
//! directory and killed at the end. chdb (PyPI, a current ClickHouse) checks the same SQL.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, line_of, onefix, repo, Scratch};
use serde_json::Value;

/// The command's process is killed when the test's thread ends, even if the test is killed
/// before its cleanup runs: no server or service outlives the test.
fn with_parent(mut cmd: Command) -> Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child being started.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// A ClickHouse server of our own: its config, users and data in a scratch directory.
struct ClickHouse {
    dir: PathBuf,
    http_port: u16,
    child: Option<Child>,
}

impl ClickHouse {
    fn start(scratch: &Scratch) -> ClickHouse {
        let dir = scratch.path("clickhouse");
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let (http_port, tcp_port) = (free_port(), free_port());
        let d = dir.display();
        let config = format!(
            r#"<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/error.log</errorlog></logger>
  <http_port>{http_port}</http_port>
  <tcp_port>{tcp_port}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/data/tmp/</tmp_path>
  <user_files_path>{d}/data/user_files/</user_files_path>
  <format_schema_path>{d}/data/format_schemas/</format_schema_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>5368709</mark_cache_size>
  <remote_servers><two_shards>
    <shard><replica><host>127.0.0.1</host><port>{tcp_port}</port><default_database>shard1</default_database></replica></shard>
    <shard><replica><host>127.0.0.1</host><port>{tcp_port}</port><default_database>shard2</default_database></replica></shard>
  </two_shards></remote_servers>
</yandex>
"#
        );
        // `default` without a password, and `fleet` with one, both from loopback only.
        let users = r#"<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users>
    <default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default>
    <fleet><password>s3cret</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></fleet>
  </users>
  <quotas><default></default></quotas>
</yandex>
"#;
        std::fs::write(dir.join("config.xml"), config).unwrap();
        std::fs::write(dir.join("users.xml"), users).unwrap();
        let mut ch = ClickHouse { dir, http_port, child: None };
        ch.run();
        ch.sql("CREATE DATABASE IF NOT EXISTS onefix");
        ch
    }

    /// Starts the server (again) on its directory and waits for /ping.
    fn run(&mut self) {
        let exe = ["/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("clickhouse-server is not installed: run ./setup (Debian's clickhouse-server package)");
        let child = with_parent(Command::new(exe))
            .arg(format!("--config-file={}", self.dir.join("config.xml").display()))
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.get("/ping").is_some_and(|b| b.starts_with("Ok")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("clickhouse-server did not answer /ping within 60 s: see {}", self.dir.display());
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/?database=onefix", self.http_port)
    }

    fn get(&self, path: &str) -> Option<String> {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.http_port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
    }

    /// Runs a statement as `default` in the onefix database (or none, before it exists).
    fn sql(&self, statement: &str) -> String {
        let db = if statement.starts_with("CREATE DATABASE") { "" } else { "?database=onefix" };
        self.sql_in(db, statement)
    }

    fn sql_in(&self, db: &str, statement: &str) -> String {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.http_port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(s, "POST /{db} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{statement}", statement.len())
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{statement}: {body}");
        body.trim().to_owned()
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The service, started as a child; killed when dropped.
struct Service(Child);

impl Service {
    fn start(heavy: u32) -> Service {
        Service::start_marked(heavy, "")
    }

    /// With `marker` as an extra argument (ignored by the program), for `--match`.
    fn start_marked(heavy: u32, marker: &str) -> Service {
        let program = repo().join("crates/onefix/tests/fleet/service.py");
        let mut child = with_parent(Command::new("python3"))
            .arg(&program)
            .arg(heavy.to_string())
            .arg(marker)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait for its first line: the interpreter is up and the loop runs.
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Service(child)
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `onefix fleet ARGS... --to URL`, as the passwordless `default` user.
fn fleet(ch: &ClickHouse, args: &[&str]) -> Output {
    onefix().arg("fleet").args(args).args(["--to", &ch.url()]).output().unwrap()
}

fn agent(ch: &ClickHouse, spool: &Path, pid: u32, labels: &[&str], interval: &str, duration: &str) -> Command {
    let mut cmd = onefix();
    cmd.args(["agent", "--pid", &pid.to_string(), "--to", &ch.url(), "--interval", interval, "--duration", duration])
        .arg("--spool")
        .arg(spool)
        .args(labels);
    cmd
}

/// The samples ClickHouse holds for a service, each (batch, stack, thread, state) once.
fn stored_samples(ch: &ClickHouse, service: &str) -> u64 {
    ch.sql(&format!(
        "SELECT sum(w) FROM (SELECT any(weight) AS w FROM samples WHERE service = '{service}' GROUP BY batch_id, stack_id, tid, state)"
    ))
    .parse()
    .unwrap_or(0)
}

/// What the agent said it produced: `spooled N batches (S samples)`.
fn agent_summary(stderr: &str) -> (u64, u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("onefix: spooled "))
        .unwrap_or_else(|| panic!("no summary in:\n{stderr}"));
    let numbers: Vec<u64> =
        line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
    // spooled B batches (S samples); sent N batches (Y bytes); dropped D batches (X samples) ...;
    // L wait ... in DIR
    (numbers[0], numbers[1], numbers[6], numbers[4])
}

#[test]
fn the_fleet_report_names_the_planted_line_and_the_agent_survives_a_clickhouse_restart() {
    let s = Scratch::new("fleet-report");
    let mut ch = ClickHouse::start(&s);
    let out = fleet(&ch, &["init"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("created onefix schema version 2"), "{:?}", text(&out));
    let again = fleet(&ch, &["init"]);
    assert!(text(&again).0.contains("already holds"), "{:?}", text(&again));

    let service = Service::start(8);
    let spool = s.path("spool");
    let running =
        agent(&ch, &spool, service.pid(), &["--service", "api", "--host", "web-1", "--version", "v1"], "1s", "9s")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    // ClickHouse goes away in the middle of the run, and comes back.
    std::thread::sleep(Duration::from_secs(3));
    ch.kill();
    std::thread::sleep(Duration::from_secs(3));
    ch.run();
    let finished = running.wait_with_output().unwrap();
    let (_, stderr) = text(&finished);
    assert!(finished.status.success(), "{stderr}");
    assert!(stderr.contains("unreachable"), "the outage is said:\n{stderr}");
    let (mut batches, mut samples, mut left, dropped) = agent_summary(&stderr);
    assert!(batches >= 6, "one batch per interval:\n{stderr}");
    assert_eq!(dropped, 0, "{stderr}");
    // What the last 5 s of flushing could not send (a slow restart) waits in the spool and
    // goes first at the next start.
    let labels = ["--service", "api", "--host", "web-1", "--version", "v1"];
    for _ in 0..3 {
        if left == 0 {
            break;
        }
        let next = agent(&ch, &spool, service.pid(), &labels, "1s", "2s").output().unwrap();
        let (_, stderr) = text(&next);
        assert!(stderr.contains("wait in") && stderr.contains("sending them first"), "{stderr}");
        let (b, s, l, d) = agent_summary(&stderr);
        (batches, samples, left) = (batches + b, samples + s, l);
        assert_eq!(d, 0, "{stderr}");
    }
    assert_eq!(left, 0, "everything was delivered:\n{stderr}");
    // Exactly once: what the agent spooled is what ClickHouse holds, no more, no less.
    assert_eq!(stored_samples(&ch, "api"), samples, "{stderr}");
    let distinct: u64 = ch.sql("SELECT uniqExact(batch_id) FROM samples WHERE service = 'api'").parse().unwrap();
    assert_eq!(distinct, batches);

    // The report names the planted line first, from aggregates.
    let json = s.path("fleet.json");
    let out = fleet(&ch, &["report", "--service", "api", "--since", "1h", "--json", json.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    common::assert_follows_findings_schema(&report);
    let top = &report["findings"][0];
    let program = repo().join("crates/onefix/tests/fleet/service.py");
    assert_eq!(top["line"].as_u64(), Some(line_of(&program, "# CULPRIT")), "{report:#}");
    assert!(top["file"].as_str().unwrap().ends_with("service.py"));
    assert!(stdout.contains("1 host,"), "{stdout}");
    assert!(stdout.contains("seen on 1 of 1 hosts"), "{stdout}");
    // The trend: the run is in the last sixth of the hour asked for, and the line is most of it.
    let first = stdout.lines().find(|l| l.trim_start().starts_with("#1 ")).unwrap_or_else(|| panic!("{stdout}"));
    let trend: Vec<&str> = first.rsplit(": ").next().unwrap().split(' ').collect();
    assert_eq!(trend.len(), 6, "{first}");
    assert!(trend[..5].iter().all(|t| *t == "-"), "{first}");
    let last: f64 = trend[5].trim_end_matches('%').parse().unwrap();
    assert!(last > 30.0, "{first}");
    // Rows returned are aggregates: far fewer than the samples.
    let returned: u64 = stdout
        .split("returned ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(returned > 0 && returned < samples, "{returned} rows for {samples} samples:\n{stdout}");
    // The same fleet figures are in the JSON report (its schema checked them above).
    let fleet_json = &report["fleet"];
    assert_eq!(fleet_json["service"], "api", "{fleet_json:#}");
    assert_eq!(fleet_json["hosts"], 1);
    assert_eq!(fleet_json["batches"].as_u64(), Some(batches));
    assert_eq!(fleet_json["query"]["rows_returned"].as_u64(), Some(returned), "{fleet_json:#}\n{stdout}");
    assert!(
        fleet_json["query"]["rows_read"].as_u64().unwrap() >= fleet_json["query"]["rows_returned"].as_u64().unwrap()
    );
    let at_line = &top["fleet"];
    assert_eq!((at_line["hosts_seen"].as_u64(), at_line["hosts_total"].as_u64()), (Some(1), Some(1)), "{at_line:#}");
    let trend = at_line["trend"].as_array().unwrap();
    assert_eq!(trend.len(), 6);
    assert!(trend[..5].iter().all(Value::is_null), "{at_line:#}");
    assert!((trend[5].as_f64().unwrap() * 100.0 - last).abs() < 1.0, "{at_line:#}\n{first}");
    // One busy Python thread: the planted line keeps under one core busy, and most of it.
    let cores = at_line["cores_busy"].as_f64().unwrap();
    assert!(cores > 0.2 && cores <= 1.05, "{at_line:#}");
    let sampled = at_line["sampled_share"].as_f64().unwrap();
    assert!(sampled > 0.3 && sampled <= top["share"].as_f64().unwrap() + 1e-4, "{at_line:#}\n{top:#}");
    drop(service);
}

#[test]
fn a_retried_batch_counts_once() {
    use onefix_fleet::batch::{aggregate, Labels};
    let s = Scratch::new("fleet-retry");
    let ch = ClickHouse::start(&s);
    assert!(fleet(&ch, &["init"]).status.success());
    let mut profile = onefix_model::Profile::new(onefix_model::Meta::default());
    let t = profile.intern_thread(1, 1, Some("main"));
    let f = profile.intern_frame(onefix_model::Frame::python("work", "/srv/app.py", 3));
    let stack = profile.intern_stack([f]);
    profile.samples.push(onefix_model::Sample {
        time_us: 0,
        thread: t,
        stack,
        state: onefix_model::ThreadState::new(true, true),
        weight: 7,
    });
    let labels = Labels { service: "retry".into(), host: "h".into(), ..Labels::default() };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let batch = aggregate(&profile, &labels, now, 10);
    let client = onefix_fleet::Client::new(
        onefix_fleet::Endpoint::parse(&ch.url()).unwrap(),
        onefix_fleet::Credentials::default(),
        Duration::from_secs(10),
    );
    // An answer lost after the insert: the agent sends the batch again.
    batch.upload(&client).unwrap();
    batch.upload(&client).unwrap();
    assert_eq!(ch.sql("SELECT count() FROM samples WHERE service = 'retry'"), "2", "both copies are stored");
    assert_eq!(stored_samples(&ch, "retry"), 7, "and counted once");
    let out = fleet(&ch, &["report", "--service", "retry", "--since", "1h", "--json", "-"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{:?}", text(&out)));
    common::assert_follows_findings_schema(&report);
    let head = text(&out).1;
    assert!(head.contains("1 host, 1 batches"), "{head}");
}

#[test]
fn bad_input_gets_one_sentence_and_a_failure() {
    let s = Scratch::new("fleet-bad");
    let ch = ClickHouse::start(&s);
    let one_sentence = |out: &Output, expect: &str| {
        let (_, stderr) = text(out);
        assert!(!out.status.success(), "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one sentence:\n{stderr}");
        assert!(lines[0].contains(expect), "expected {expect:?} in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    };
    // Nothing listens on a fresh port.
    let dead = format!("http://127.0.0.1:{}/?database=onefix", free_port());
    let out = onefix().args(["fleet", "init", "--to", &dead]).output().unwrap();
    one_sentence(&out, "unreachable");
    let wrong_db = format!("http://127.0.0.1:{}/?database=nosuchdb", ch.http_port);
    let out = onefix().args(["fleet", "init", "--to", &wrong_db]).output().unwrap();
    one_sentence(&out, "database `nosuchdb` does not exist");
    let out = onefix()
        .args(["fleet", "init", "--to", &ch.url()])
        .env("ONEFIX_CLICKHOUSE_USER", "fleet")
        .env("ONEFIX_CLICKHOUSE_PASSWORD", "wrong")
        .output()
        .unwrap();
    one_sentence(&out, "refused the user `fleet`");
    // The right password, from a file.
    let creds = s.path("creds");
    std::fs::write(&creds, "user=fleet\npassword=s3cret\n").unwrap();
    let out = onefix().args(["fleet", "init", "--to", &ch.url(), "--credentials"]).arg(&creds).output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let out = fleet(&ch, &["report", "--service", "nothing-here", "--since", "10m"]);
    one_sentence(&out, "no samples of the service `nothing-here`");
    let out = onefix()
        .args(["agent", "--user", "no-such-user-onefix", "--to", &ch.url(), "--duration", "1s", "--spool"])
        .arg(s.path("spool-user"))
        .output()
        .unwrap();
    one_sentence(&out, "no user `no-such-user-onefix` on this machine");
    let out = onefix().args(["fleet", "init", "--to", "http://u:p@127.0.0.1:1/?database=x"]).output().unwrap();
    one_sentence(&out, "process list");
    // 18.16 has no table TTL: said, not a syntax error.
    ch.sql("DROP TABLE schema_version");
    let out = fleet(&ch, &["init", "--ttl-days", "30"]);
    one_sentence(&out, "no table TTL");
    ch.sql("DROP TABLE IF EXISTS schema_version");
    assert!(fleet(&ch, &["init"]).status.success());
    // Version 1 (before `samples.command`): refused in one sentence, then upgraded by init,
    // and the stored rows are kept.
    let before = ch.sql("SELECT count() FROM samples");
    ch.sql("ALTER TABLE samples DROP COLUMN command");
    ch.sql("DROP TABLE schema_version");
    ch.sql("CREATE TABLE schema_version (version UInt32, applied DateTime) ENGINE = TinyLog");
    ch.sql("INSERT INTO schema_version VALUES (1, now())");
    let out = fleet(&ch, &["report", "--service", "api", "--since", "1h"]);
    one_sentence(&out, "schema version 1, older than this onefix's 2");
    let out = fleet(&ch, &["init"]);
    assert!(text(&out).0.contains("upgraded `onefix` from onefix schema version 1 to 2"), "{:?}", text(&out));
    assert_eq!(
        ch.sql(
            "SELECT count() FROM system.columns WHERE database = 'onefix' AND table = 'samples' AND name = 'command'"
        ),
        "1"
    );
    assert_eq!(ch.sql("SELECT count() FROM samples"), before);
    assert!(text(&fleet(&ch, &["init"])).0.contains("already holds onefix schema version 2"));
    // A newer onefix wrote this database.
    ch.sql("INSERT INTO schema_version VALUES (99, now())");
    let out = fleet(&ch, &["report", "--service", "api", "--since", "1h"]);
    one_sentence(&out, "schema version 99, newer than this onefix's 2");
    let out = fleet(&ch, &["init"]);
    one_sentence(&out, "schema version 99");
    let spool = s.path("spool");
    let out = onefix()
        .args(["agent", "--pid", &std::process::id().to_string(), "--to", &ch.url(), "--duration", "1s", "--spool"])
        .arg(&spool)
        .output()
        .unwrap();
    one_sentence(&out, "schema version 99");
}

#[test]
fn a_regressed_deploy_is_named_first() {
    let s = Scratch::new("fleet-compare");
    let ch = ClickHouse::start(&s);
    assert!(fleet(&ch, &["init"]).status.success());
    // v41 hashes once per request, v42 eight times: the same service, a heavier line.
    let (old, new) = (Service::start(1), Service::start(8));
    let spool_a = s.path("spool-a");
    let spool_b = s.path("spool-b");
    let mut a = agent(&ch, &spool_a, old.pid(), &["--service", "shop", "--host", "h1", "--version", "v41"], "1s", "7s")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let b = agent(&ch, &spool_b, new.pid(), &["--service", "shop", "--host", "h2", "--version", "v42"], "1s", "7s")
        .output()
        .unwrap();
    assert!(b.status.success(), "{:?}", text(&b));
    assert!(a.wait().unwrap().success());
    let _ = a.stderr.take();
    let json = s.path("compare.json");
    let out = fleet(
        &ch,
        &[
            "compare",
            "--service",
            "shop",
            "--since",
            "1h",
            "--version",
            "v41",
            "--version",
            "v42",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let c: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let first = &c["lines"][0];
    let program = repo().join("crates/onefix/tests/fleet/service.py");
    let planted = format!("service.py:{}", line_of(&program, "# CULPRIT"));
    assert_eq!(first["at_b"].as_str(), Some(planted.as_str()), "{stdout}\n{c:#}");
    assert_eq!(first["change"], "up", "{stdout}\n{c:#}");
    assert!(first["cost"]["mean_b"].as_f64().unwrap() > first["cost"]["mean_a"].as_f64().unwrap());
}

#[test]
fn every_statement_runs_on_a_current_clickhouse_too() {
    let sql = onefix().args(["fleet", "sql"]).output().unwrap();
    assert!(sql.status.success());
    let script = repo().join("crates/onefix/tests/fleet/chdb_check.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&sql.stdout).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "chdb (pip install chdb, in tests/programs/requirements.txt) refused or could not run:\n{stderr}"
    );
    let statements = String::from_utf8_lossy(&sql.stdout).matches("\n;\n").count();
    let ran: usize = stdout.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap();
    assert_eq!(ran, statements, "{stdout}");
    let major: u32 = stdout.split('.').next().and_then(|m| m.parse().ok()).unwrap();
    assert!(major >= 23, "chdb embeds a current ClickHouse, not {stdout}");
}

#[test]
fn a_two_shard_cluster_holds_the_fleet_behind_distributed_tables() {
    use onefix_fleet::batch::{aggregate, Labels};
    let s = Scratch::new("fleet-cluster");
    let ch = ClickHouse::start(&s);
    let base = format!("http://127.0.0.1:{}/", ch.http_port);
    for shard in ["shard1", "shard2"] {
        ch.sql(&format!("CREATE DATABASE IF NOT EXISTS {shard}"));
        let out = onefix().args(["fleet", "init", "--to", &format!("{base}?database={shard}")]).output().unwrap();
        assert!(out.status.success(), "{:?}", text(&out));
    }
    let out = onefix().args(["fleet", "init", "--cluster", "two_shards", "--to", &ch.url()]).output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("Distributed over the cluster `two_shards`"));
    let out = onefix()
        .args(["fleet", "init", "--cluster", "nope", "--to", &format!("{base}?database=default")])
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out).1.contains("no cluster `nope`"), "{:?}", text(&out));

    // Sixteen intervals of one host: a hot line and a cold one.
    let mut profile = onefix_model::Profile::new(onefix_model::Meta::default());
    profile.meta.user_code = vec!["/srv".into()];
    let t = profile.intern_thread(1, 1, Some("main"));
    let main = profile.intern_frame(onefix_model::Frame::python("<module>", "/srv/app.py", 1));
    let hot = profile.intern_frame(onefix_model::Frame::python("hot", "/srv/app.py", 10));
    let cold = profile.intern_frame(onefix_model::Frame::python("cold", "/srv/app.py", 20));
    let client = onefix_fleet::Client::new(
        onefix_fleet::Endpoint::parse(&ch.url()).unwrap(),
        onefix_fleet::Credentials::default(),
        Duration::from_secs(10),
    );
    let labels =
        Labels { service: "sharded".into(), host: "h".into(), user_code: vec!["/srv".into()], ..Labels::default() };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    for i in 0..16u64 {
        profile.take_samples();
        for (leaf, weight) in [(hot, 9), (cold, 1)] {
            let stack = profile.intern_stack([main, leaf]);
            let state = onefix_model::ThreadState::new(true, true);
            profile.samples.push(onefix_model::Sample { time_us: 0, thread: t, stack, state, weight });
        }
        let batch = aggregate(&profile, &labels, now - 100 + i, 1);
        batch.upload(&client).unwrap();
        if i == 0 {
            batch.upload(&client).unwrap();
        }
    }
    // The batches went to both shards, and the Distributed table sees them all, once.
    let on = |shard: &str| -> u64 {
        ch.sql_in(&format!("?database={shard}"), "SELECT uniqExact(batch_id) FROM samples").parse().unwrap()
    };
    let (one, two) = (on("shard1"), on("shard2"));
    assert_eq!(one + two, 16);
    assert!(one > 0 && two > 0, "both shards hold batches: {one} and {two}");
    assert_eq!(stored_samples(&ch, "sharded"), 160);
    let out = fleet(&ch, &["report", "--service", "sharded", "--since", "1h", "--json", "-"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{:?}", text(&out)));
    assert_eq!(report["findings"][0]["line"], 10, "{report:#}");
    assert!(text(&out).1.contains("16 batches"), "{:?}", text(&out));
}

#[test]
fn the_agent_follows_a_restarted_process_by_its_command_line() {
    let s = Scratch::new("fleet-restart");
    let ch = ClickHouse::start(&s);
    assert!(fleet(&ch, &["init"]).status.success());
    let marker = format!("fleet-restart-{}", std::process::id());
    let first = Service::start_marked(2, &marker);
    let agent = onefix()
        .args(["agent", "--match", &marker, "--service", "restart", "--to", &ch.url(), "--interval", "1s"])
        .args(["--duration", "7s", "--spool"])
        .arg(s.path("spool"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let first_pid = first.pid();
    drop(first);
    let second = Service::start_marked(2, &marker);
    let out = agent.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("process {first_pid} exited")), "{stderr}");
    let pids = ch.sql("SELECT groupUniqArray(pid) FROM samples WHERE service = 'restart'");
    assert!(
        pids.contains(&first_pid.to_string()) && pids.contains(&second.pid().to_string()),
        "both processes were sampled: {pids}\n{stderr}"
    );
}

#[test]
fn with_clickhouse_away_the_spool_keeps_its_bound_and_every_batch_is_accounted_for() {
    let s = Scratch::new("fleet-spool");
    let service = Service::start(2);
    let spool = s.path("spool");
    let dead = format!("http://127.0.0.1:{}/?database=onefix", free_port());
    let out = onefix()
        .args(["agent", "--pid", &service.pid().to_string(), "--to", &dead, "--interval", "1s", "--duration", "6s"])
        .args(["--spool-max", "4k", "--spool"])
        .arg(&spool)
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("unreachable"), "{stderr}");
    assert!(stderr.contains("the spool is full: dropped"), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("onefix: spooled ")).unwrap();
    let n: Vec<u64> =
        line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
    let (spooled, sent, dropped, left) = (n[0], n[2], n[4], n[6]);
    assert_eq!(sent, 0);
    assert!(dropped >= 1 && left >= 1, "{line}");
    assert_eq!(spooled, dropped + left, "nothing is lost without being said: {line}");
    let files: Vec<_> = std::fs::read_dir(&spool).unwrap().flatten().collect();
    assert_eq!(files.len() as u64, left);
    let bytes: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(bytes <= 4 * 1024 || files.len() == 1, "{bytes} bytes in the spool");
}

#[test]
fn sighup_reopens_the_agent_s_log_after_rotation() {
    let s = Scratch::new("fleet-log");
    let service = Service::start(2);
    let (log, rotated) = (s.path("agent.log"), s.path("agent.log.1"));
    let dead = format!("http://127.0.0.1:{}/?database=onefix", free_port());
    let mut agent = onefix()
        .args(["agent", "--pid", &service.pid().to_string(), "--to", &dead, "--interval", "1s", "--duration", "4s"])
        .arg("--spool")
        .arg(s.path("spool"))
        .arg("--log")
        .arg(&log)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::rename(&log, &rotated).unwrap();
    // SAFETY: a signal to the agent we started and have not yet waited for.
    unsafe { libc::kill(agent.id() as i32, libc::SIGHUP) };
    assert!(agent.wait().unwrap().success(), "SIGHUP does not end the agent");
    let before = std::fs::read_to_string(&rotated).unwrap();
    let after = std::fs::read_to_string(&log).unwrap();
    assert!(before.contains("unreachable"), "{before}");
    assert!(after.contains("onefix: spooled "), "the last words go to the new file:\n{after}");
}

#[test]
fn a_clickhouse_that_never_answers_costs_a_timeout_and_the_batches_wait() {
    let s = Scratch::new("fleet-slow");
    let service = Service::start(2);
    // A server that accepts and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().take(64) {
            held.push(conn);
        }
    });
    let out = onefix()
        .args(["agent", "--pid", &service.pid().to_string(), "--interval", "1s", "--duration", "3s", "--timeout", "1s"])
        .args(["--to", &format!("http://127.0.0.1:{port}/?database=onefix"), "--spool"])
        .arg(s.path("spool"))
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("did not answer within 1 s"), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("onefix: spooled ")).unwrap();
    let n: Vec<u64> =
        line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
    assert_eq!(n[2], 0, "nothing sent: {line}");
    assert!(n[0] >= 2 && n[6] == n[0], "every batch waits in the spool: {line}");
}

/// A user of its own for the `--user` test, created once (as root, `useradd --system`): its
/// processes are only the ones the test starts. Returns its uid and gid.
fn test_user() -> (u32, u32) {
    const NAME: &str = "onefix-fleet-test";
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, NAME]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let out = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NAME])
            .output()
            .expect("useradd (passwd package) runs");
        // Another test binary may have made it meanwhile.
        assert!(out.status.success() || id("-u").is_some(), "useradd {NAME}: {:?}", text(&out));
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

/// `program args...` as the test user, killed with the test; for Python, after its "ready".
fn start_as(uid: u32, gid: u32, program: &str, args: &[&str]) -> Service {
    use std::os::unix::process::CommandExt;
    let mut cmd = with_parent(Command::new(program));
    cmd.args(args).uid(uid).gid(gid).current_dir("/").stderr(Stdio::null());
    if program == "python3" {
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Service(child)
    } else {
        Service(cmd.stdout(Stdio::null()).spawn().unwrap())
    }
}

#[test]
fn the_agent_follows_every_process_of_a_user_as_they_start() {
    let s = Scratch::new("fleet-user");
    let ch = ClickHouse::start(&s);
    assert!(fleet(&ch, &["init"]).status.success());
    let (uid, gid) = test_user();
    let program = repo().join("crates/onefix/tests/fleet/service.py");
    let program = program.to_str().unwrap();
    // A Python service and a native program (a checksum of an endless stream: busy in C).
    let python = start_as(uid, gid, "python3", &[program, "2", "fleet-user-python"]);
    let native = start_as(uid, gid, "sha256sum", &["/dev/zero"]);
    // Not the test user's: never a target.
    let other = Service::start_marked(2, "fleet-user-root");
    let agent = onefix()
        .args(["agent", "--user", "onefix-fleet-test", "--service", "per-user", "--to", &ch.url()])
        .args(["--interval", "1s", "--duration", "6s", "--spool"])
        .arg(s.path("spool"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Started after the agent: picked up as it starts.
    std::thread::sleep(Duration::from_millis(2500));
    let later = start_as(uid, gid, "python3", &[program, "2", "fleet-user-later"]);
    let out = agent.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let rows = ch.sql(
        "SELECT pid, any(runtime), any(command), sum(weight) FROM samples WHERE service = 'per-user' \
         GROUP BY pid ORDER BY pid FORMAT TSV",
    );
    let by_pid: std::collections::HashMap<u32, Vec<&str>> = rows
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            (cols[0].parse().unwrap(), cols[1..].to_vec())
        })
        .collect();
    assert_eq!(by_pid.len(), 3, "exactly the user's three processes:\n{rows}\n{stderr}");
    for (service, runtime, command) in [
        (&python, "python", "fleet-user-python"),
        (&native, "native", "sha256sum /dev/zero"),
        (&later, "python", "fleet-user-later"),
    ] {
        let row = by_pid.get(&service.pid()).unwrap_or_else(|| panic!("{command} was not profiled:\n{rows}\n{stderr}"));
        assert!(row[0].starts_with(runtime), "{command}: {row:?}");
        assert!(row[1].contains(command), "the command is its label: {row:?}");
        assert!(row[2].parse::<u64>().unwrap() > 0, "{row:?}");
    }
    assert!(!by_pid.contains_key(&other.pid()), "a process of another user is not a target: {rows}");
}

/// The words of a unit's `ExecStart=`, its continuation lines joined and its double quotes
/// read as systemd reads them.
fn exec_start(unit: &str) -> Vec<String> {
    let mut line = String::new();
    for l in unit.lines().skip_while(|l| !l.starts_with("ExecStart=")) {
        match l.strip_suffix('\\') {
            Some(part) => line.push_str(part),
            None => {
                line.push_str(l);
                break;
            }
        }
    }
    let mut words = Vec::new();
    let (mut word, mut quoted) = (String::new(), false);
    for c in line.trim_start_matches("ExecStart=").chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[test]
fn the_systemd_unit_verifies_and_starts_the_agent() {
    let s = Scratch::new("fleet-unit");
    let unit = std::fs::read_to_string(repo().join("dist/onefix-agent.service")).unwrap();
    // systemd checks that ExecStart's program exists: this build stands in for the installed one.
    assert!(unit.contains("ExecStart=/usr/local/bin/onefix agent"), "{unit}");
    let local = s.path("onefix-agent.service");
    std::fs::write(&local, unit.replace("/usr/local/bin/onefix", env!("CARGO_BIN_EXE_onefix"))).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&local)
        .output()
        .expect("systemd-analyze runs (the systemd package, installed by ./setup)");
    // verify warns and still exits 0 for a setting it ignores: any word from it is a defect.
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stdout.is_empty() && stderr.is_empty(), "{stdout}{stderr}");

    // Its command is one the agent takes: run as written, with this test's spool, credentials
    // and an address where nothing listens, for a second.
    let words = exec_start(&unit);
    assert_eq!(&words[..2], ["/usr/local/bin/onefix", "agent"], "{words:?}");
    let creds = s.path("credentials");
    std::fs::write(&creds, "user=onefix\npassword=x\n").unwrap();
    let dead = format!("http://127.0.0.1:{}/?database=onefix", free_port());
    let args: Vec<String> = words[1..]
        .iter()
        .map(|w| match w.as_str() {
            "${ONEFIX_VERSION}" => "v0".to_owned(),
            "/var/lib/onefix/spool" => s.path("spool").display().to_string(),
            "/etc/onefix/clickhouse.credentials" => creds.display().to_string(),
            w if w.starts_with("http://clickhouse.internal:8123/") => dead.clone(),
            w => w.to_owned(),
        })
        .collect();
    let out = onefix().args(&args).args(["--duration", "1s"]).output().unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}:\n{stderr}");
    assert!(stderr.contains("unreachable") && stderr.contains("onefix: spooled 0 batches"), "{stderr}");
}
