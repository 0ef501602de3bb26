//! Renders an HTML report of a large list with `{{#each}}`, as in sunng87/handlebars-rust#166
//! and #195: a table row per entry, with the rest of the page's data in the same context.

use handlebars::Handlebars;
use serde_json::{json, Value};

const ENTRIES: usize = 2_300;

const PAGE: &str = "<h1>{{title}}</h1>\n<table>\n{{#each entries}}<tr><td>{{@index}}</td><td><a href=\"/u/{{this.user}}\">{{this.name}}</a></td><td>{{this.score}}</td></tr>\n{{/each}}</table>\n";

fn report() -> Value {
    let entries: Vec<Value> = (0..ENTRIES)
        .map(|i| json!({"user": format!("u{i}"), "name": format!("User {i}"), "score": i % 97, "bio": "x".repeat(40)}))
        .collect();
    json!({"title": "Leaderboard", "entries": entries})
}

fn main() {
    let mut registry = Handlebars::new();
    registry.register_template_string("page", PAGE).expect("the template parses");
    let data = report();
    let html = registry.render("page", &data).expect("the page renders");
    println!("rendered {} bytes of HTML for {ENTRIES} entries", html.len());
}
