//! `onefix fleet`: the fleet's store in ClickHouse. `init` creates or upgrades its schema;
//! `report` has ClickHouse aggregate a service's window per stack and runs the diagnosis and
//! writers of `onefix report` on it, with fleet figures; `compare` sets two deploys side by
//! side line by line; `sql` prints every statement onefix sends.

use onefix_model::fmt::escape_controls_keeping_lines;
use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use onefix_fleet::query::{self, Filter};
use onefix_fleet::schema::{self, InitOutcome, SchemaOptions};
use onefix_fleet::{Client, Credentials, Endpoint};
use onefix_model::attachments::{self, FleetLine, FleetSummary};
use onefix_model::Mode;

use crate::cli::{FleetCommand, FleetCompareArgs, FleetInitArgs, FleetReportArgs, FleetWindowArgs, StoreArgs};
use crate::outputs;

pub fn run(command: FleetCommand) -> Result<ExitCode> {
    match command {
        FleetCommand::Init(args) => init(args),
        FleetCommand::Report(args) => report(args),
        FleetCommand::Compare(args) => compare(args),
        FleetCommand::Sql => {
            let mut out = std::io::stdout().lock();
            for statement in query::example_statements() {
                writeln!(out, "{statement}\n;")?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A client for `--to`, with credentials from the environment or `--credentials`.
pub fn client(store: &StoreArgs) -> Result<Client> {
    let endpoint = Endpoint::parse(&store.to)?;
    let credentials = Credentials::load(store.credentials.as_deref())?;
    if let Some(warning) = store.credentials.as_deref().and_then(Credentials::exposure) {
        crate::messages::say(warning);
    }
    Ok(Client::new(endpoint, credentials, store.timeout))
}

fn init(args: FleetInitArgs) -> Result<ExitCode> {
    let client = client(&args.store)?;
    let opts = SchemaOptions { ttl_days: args.ttl_days, cluster: args.cluster.clone() };
    let db = client.endpoint.database.clone();
    match schema::init(&client, &opts)? {
        InitOutcome::Created => {
            let over =
                args.cluster.as_deref().map(|c| format!(", Distributed over the cluster `{c}`")).unwrap_or_default();
            println!(
                "created onefix schema version {} in `{db}` on {}{over}",
                schema::SCHEMA_VERSION,
                client.endpoint.address()
            )
        }
        InitOutcome::Upgraded { from } => {
            println!("upgraded `{db}` from onefix schema version {from} to {}", schema::SCHEMA_VERSION)
        }
        InitOutcome::AlreadyCurrent => {
            println!("`{db}` already holds onefix schema version {}: nothing to do", schema::SCHEMA_VERSION)
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn filter(w: &FleetWindowArgs, version: Option<String>) -> Result<Filter> {
    let (from, to) = match (w.from, w.until) {
        (Some(from), Some(until)) => {
            if until <= from {
                bail!("--until must come after --from");
            }
            (from, until)
        }
        // The current second is included: an agent's batch is stamped with its interval's start.
        _ => {
            let now = now_s() + 1;
            (now.saturating_sub(w.since.map_or(3600, |d| d.as_secs().max(1))), now)
        }
    };
    Ok(Filter { service: w.service.clone(), from, to, version, host: w.host.clone() })
}

fn report(args: FleetReportArgs) -> Result<ExitCode> {
    // Outputs are checked before ClickHouse is asked anything.
    let planned = outputs::Planned::check(&args.outputs)?;
    crate::output::check_distinct(&planned.all(), &[])?;
    let client = client(&args.store)?;
    schema::check(&client)?;
    let filter = filter(&args.window, args.version.clone())?;
    let mut fleet = query::fleet_profile(&client, &filter)?;
    let diagnosis = outputs::run_diagnosis(&fleet.profile, Mode::Wall, &args.outputs);
    let figures = onefix_fleet::figures::figures(&fleet, &diagnosis);
    // Each finding's share in each sixth of the window, asked of ClickHouse in one query (one
    // row per part, one column per finding).
    const TREND_PARTS: u64 = 6;
    let lines: Vec<(&str, u32)> = figures.iter().map(|f| (f.file.as_str(), f.line)).collect();
    let trends = fleet.trends(&client, &filter, &lines, TREND_PARTS)?;
    // The same figures go with the profile, for the JSON and HTML reports.
    let summary = FleetSummary {
        service: filter.service.clone(),
        from_unix_s: filter.from,
        to_unix_s: filter.to,
        version: filter.version.clone(),
        host: filter.host.clone(),
        span_s: fleet.span_s,
        hosts: fleet.overview.hosts,
        batches: fleet.overview.batches,
        rows_returned: fleet.cost.rows_returned,
        bytes_returned: fleet.cost.bytes_returned,
        rows_read: fleet.cost.rows_read,
        bytes_read: fleet.cost.bytes_read,
        lines: figures
            .iter()
            .zip(&trends)
            .map(|(f, trend)| FleetLine {
                file: f.file.clone(),
                line: f.line,
                sampled_share: f.sampled_share,
                cores_busy: f.cores_busy,
                hosts_seen: f.hosts_seen as u64,
                hosts_total: f.hosts_total,
                trend: trend.clone(),
            })
            .collect(),
    };
    fleet.profile.attach(attachments::FLEET, &summary);
    let profile = &fleet.profile;
    // The fleet's figures lead: what the window held and what reading it cost.
    let mut head = String::new();
    let o = &fleet.overview;
    let c = &fleet.cost;
    head.push_str(&format!(
        "fleet: service {} over {:.0} s: {} host{}, {} batches; ClickHouse returned {} aggregate rows ({} bytes), having read {} rows ({} bytes)\n",
        filter.service,
        fleet.span_s,
        o.hosts,
        if o.hosts == 1 { "" } else { "s" },
        o.batches,
        c.rows_returned,
        c.bytes_returned,
        c.rows_read,
        c.bytes_read
    ));
    for (i, (f, trend)) in figures.iter().zip(&trends).enumerate() {
        let trend: Vec<String> =
            trend.iter().map(|s| s.map_or_else(|| "-".to_owned(), |s| format!("{:.0}%", s * 100.0))).collect();
        head.push_str(&format!(
            "  #{} {}:{} {}: {:.0}% of {} ({:.0}% of the service's samples), {:.2} cores busy on average across the fleet, \
             seen on {} of {} hosts; share of all samples by sixth of the window: {}\n",
            i + 1,
            onefix_model::fmt::file_name(&f.file),
            f.line,
            f.function,
            f.share * 100.0,
            diagnosis.share_of,
            f.sampled_share * 100.0,
            f.cores_busy,
            f.hosts_seen,
            f.hosts_total,
            trend.join(" ")
        ));
    }
    if planned.uses_stdout() {
        eprint!("{}", escape_controls_keeping_lines(&head));
    } else {
        print!("{}", escape_controls_keeping_lines(&head));
    }
    outputs::write_all(profile, &diagnosis, Mode::Wall, planned, true)?;
    Ok(ExitCode::SUCCESS)
}

fn compare(args: FleetCompareArgs) -> Result<ExitCode> {
    let [a, b] = <[String; 2]>::try_from(args.version.clone())
        .map_err(|_| anyhow::anyhow!("give two deploys to compare: --version BEFORE --version AFTER"))?;
    let json = args.json.as_deref().map(|p| crate::output::check(p, "comparison's JSON", true)).transpose()?;
    let client = client(&args.store)?;
    schema::check(&client)?;
    // Enough slots for a test, few enough that diagnosing each stays quick.
    const MAX_SLOTS: u64 = 120;
    let side_a = query::slot_profile(&client, &filter(&args.window, Some(a.clone()))?, MAX_SLOTS)?;
    let side_b = query::slot_profile(&client, &filter(&args.window, Some(b.clone()))?, MAX_SLOTS)?;
    let lines = onefix_fleet::compare::compare_slots(&side_a, &side_b, outputs::knowledge_base());
    let text = format!(
        "fleet: service {}: {} {} s slots of {a}, {} of {b} (one per host and interval)\n{}",
        args.window.service,
        side_a.slots,
        side_a.slot_s,
        side_b.slots,
        onefix_report::compare::render_lines(&lines, &a, &b)
    );
    match &json {
        Some(o) if o.is_stdout() => eprint!("{}", escape_controls_keeping_lines(&text)),
        _ => print!("{}", escape_controls_keeping_lines(&text)),
    }
    if let Some(out) = json {
        let shown = out.shown.display().to_string();
        out.write_with(|w| {
            serde_json::to_writer_pretty(&mut *w, &lines)?;
            writeln!(w)
        })
        .with_context(|| format!("cannot write the comparison's JSON to {shown}"))?;
    }
    Ok(ExitCode::SUCCESS)
}
