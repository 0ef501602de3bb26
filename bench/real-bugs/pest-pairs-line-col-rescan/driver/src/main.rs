//! Parses a JSON document with the pest book's JSON grammar and walks the parse tree into a
//! value with `into_inner()`, the standard way to build an AST from pest's pairs (the use in
//! pest-parser/pest#784).

use pest::iterators::Pair;
use pest::Parser;
use pest_derive::Parser;
use std::fmt::Write;

#[derive(Parser)]
#[grammar_inline = r#"
WHITESPACE = _{ " " | "\t" | "\r" | "\n" }
value = _{ object | array | string | number | boolean | null }
object = { "{" ~ "}" | "{" ~ pair ~ ("," ~ pair)* ~ "}" }
pair = { string ~ ":" ~ value }
array = { "[" ~ "]" | "[" ~ value ~ ("," ~ value)* ~ "]" }
string = ${ "\"" ~ inner ~ "\"" }
inner = @{ char* }
char = {
    !("\"" | "\\") ~ ANY
    | "\\" ~ ("\"" | "\\" | "/" | "b" | "f" | "n" | "r" | "t")
    | "\\" ~ ("u" ~ ASCII_HEX_DIGIT{4})
}
number = @{ "-"? ~ ("0" | ASCII_NONZERO_DIGIT ~ ASCII_DIGIT*) ~ ("." ~ ASCII_DIGIT*)? }
boolean = { "true" | "false" }
null = { "null" }
json = _{ SOI ~ value ~ EOI }
"#]
struct JsonParser;

enum Json {
    Null,
    Bool(bool),
    Number(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

fn to_json(pair: Pair<Rule>) -> Json {
    match pair.as_rule() {
        Rule::object => Json::Object(
            pair.into_inner()
                .map(|member| {
                    let mut kv = member.into_inner();
                    let key = kv.next().unwrap().into_inner().next().unwrap().as_str().to_owned();
                    (key, to_json(kv.next().unwrap()))
                })
                .collect(),
        ),
        Rule::array => Json::Array(pair.into_inner().map(to_json).collect()),
        Rule::string => Json::Str(pair.into_inner().next().unwrap().as_str().to_owned()),
        Rule::number => Json::Number(pair.as_str().parse().unwrap()),
        Rule::boolean => Json::Bool(pair.as_str() == "true"),
        Rule::null => Json::Null,
        _ => unreachable!("the grammar yields only values here"),
    }
}

fn count(value: &Json) -> usize {
    match value {
        Json::Array(items) => 1 + items.iter().map(count).sum::<usize>(),
        Json::Object(members) => 1 + members.iter().map(|(_, v)| count(v)).sum::<usize>(),
        _ => 1,
    }
}

const USERS: usize = 1_000;

fn users_document() -> String {
    let mut doc = String::from("[\n");
    for id in 0..USERS {
        let sep = if id + 1 == USERS { "" } else { "," };
        let _ = writeln!(
            doc,
            "  {{\"id\": {id}, \"name\": \"user {id}\", \"active\": {}, \"score\": {}.5, \"tags\": [\"a\", \"b\"], \"manager\": null}}{sep}",
            id % 3 == 0,
            id % 100
        );
    }
    doc.push(']');
    doc
}

fn main() {
    let doc = users_document();
    let root = JsonParser::parse(Rule::json, &doc).expect("the document is valid JSON").next().unwrap();
    let value = to_json(root);
    println!("built {} JSON values from {} bytes", count(&value), doc.len());
}
