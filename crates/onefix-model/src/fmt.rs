//! Wording shared by every writer and command, so that one thing is always said one way:
//! sizes, a file's short name, how a process ended, and text from the target made safe for a
//! terminal.

use std::borrow::Cow;
use std::io::{self, Write};

use crate::TargetExit;

/// Text that came from the target (its argv, thread names, paths, function names, source lines,
/// environment) as it may be shown on a terminal: every control character is written as its
/// escape (`\x1b`, `\x07`, `\x0a`), so that no ESC, OSC or BEL from the target can retitle,
/// clear or rewrite the user's terminal. Printable UTF-8 is kept as it is.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    escape_controls_except(text, &[])
}

/// [`escape_controls`] for a block of several lines (a whole report): line breaks and tabs, which
/// only lay the text out, are kept; every other control character is escaped.
pub fn escape_controls_keeping_lines(text: &str) -> Cow<'_, str> {
    escape_controls_except(text, &['\n', '\t'])
}

fn escape_controls_except<'a>(text: &'a str, kept: &[char]) -> Cow<'a, str> {
    if !text.chars().any(|c| c.is_control() && !kept.contains(&c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && !kept.contains(&c) {
            // Control characters (C0, DEL, C1) all lie below U+0100.
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A writer for a terminal that passes everything through [`escape_controls_keeping_lines`]:
/// for output that holds no styling of onefix's own (a dump, a comparison, a fleet's table).
pub struct ControlEscapingWriter<W: Write> {
    inner: W,
    /// The first byte of a two-byte UTF-8 sequence split across two writes (0xC2 may begin a C1
    /// control character).
    pending: Option<u8>,
}

impl<W: Write> ControlEscapingWriter<W> {
    pub fn new(inner: W) -> ControlEscapingWriter<W> {
        ControlEscapingWriter { inner, pending: None }
    }
}

impl<W: Write> Write for ControlEscapingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len() + 8);
        let mut bytes = self.pending.take().into_iter().chain(buf.iter().copied()).peekable();
        while let Some(b) = bytes.next() {
            match b {
                b'\n' | b'\t' => out.push(b),
                0x00..=0x1f | 0x7f => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                // U+0080..U+009F, the C1 controls, are 0xC2 0x80..0x9F in UTF-8.
                0xc2 => match bytes.peek() {
                    Some(&next @ 0x80..=0x9f) => {
                        bytes.next();
                        out.extend_from_slice(format!("\\x{next:02x}").as_bytes());
                    }
                    Some(_) => out.push(b),
                    None => self.pending = Some(b),
                },
                _ => out.push(b),
            }
        }
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(b) = self.pending.take() {
            self.inner.write_all(&[b])?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for ControlEscapingWriter<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Bytes in decimal units, as allocation profilers print them: `512 B`, `3.4 kB`, `21.4 MB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if n < 1000 {
        return format!("{n} B");
    }
    let mut value = n as f64;
    let mut unit = "B";
    for next in UNITS {
        if value < 1000.0 {
            break;
        }
        value /= 1000.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// Milliseconds with as many digits as they deserve.
pub fn millis(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

/// The last component of a path: `app.py` for `/srv/app/app.py`.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `SIGSEGV (signal 11)`, or `signal N` for the rest (Linux numbers).
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        2 => "SIGINT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    format!("{name} (signal {sig})")
}

/// How a process ended, as a clause: `exited with 0`, `killed by SIGKILL (signal 9)`, ...
/// SIGINT and SIGTERM ask a program to stop (Ctrl-C, or onefix at the end of a duration or a
/// load): it was stopped, not killed.
pub fn exit_clause(exit: &TargetExit) -> String {
    match exit {
        TargetExit::Code(code) => format!("exited with {code}"),
        TargetExit::Signal(signal @ (2 | 15)) => format!("stopped by {}", signal_name(*signal)),
        TargetExit::Signal(signal) => format!("killed by {}", signal_name(*signal)),
        TargetExit::StillRunning => "still running when recording stopped".to_owned(),
        TargetExit::Unknown => "exit status unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_asked_to_stop_was_stopped_and_one_that_crashed_was_killed() {
        assert_eq!(exit_clause(&TargetExit::Signal(2)), "stopped by SIGINT (signal 2)");
        assert_eq!(exit_clause(&TargetExit::Signal(15)), "stopped by SIGTERM (signal 15)");
        assert_eq!(exit_clause(&TargetExit::Signal(11)), "killed by SIGSEGV (signal 11)");
        assert_eq!(exit_clause(&TargetExit::Signal(64)), "killed by signal 64");
        assert_eq!(exit_clause(&TargetExit::Code(3)), "exited with 3");
    }

    #[test]
    fn control_characters_from_the_target_are_shown_escaped() {
        assert_eq!(escape_controls("\x1b]0;pwn\x07 ok"), "\\x1b]0;pwn\\x07 ok");
        assert_eq!(escape_controls("a\nb\u{9b}2J"), "a\\x0ab\\x9b2J");
        assert_eq!(escape_controls("naïve 名前"), "naïve 名前");
        assert_eq!(escape_controls_keeping_lines("a\n\tb\r\x1b[2J"), "a\n\tb\\x0d\\x1b[2J");
    }

    #[test]
    fn the_escaping_writer_escapes_what_escape_controls_would_even_split_across_writes() {
        let mut out = Vec::new();
        {
            let mut w = ControlEscapingWriter::new(&mut out);
            let text = "thread \x1b]0;pwn\x07\n\u{9b}é名\n".as_bytes();
            let split = text.iter().position(|&b| b == 0xc2).unwrap() + 1;
            w.write_all(&text[..split]).unwrap();
            w.write_all(&text[split..]).unwrap();
        }
        assert_eq!(String::from_utf8(out).unwrap(), "thread \\x1b]0;pwn\\x07\n\\x9bé名\n");
    }

    #[test]
    fn sizes_and_names_read_as_people_write_them() {
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(21_400_000), "21.4 MB");
        assert_eq!(bytes(3_400), "3.4 kB");
        assert_eq!(file_name("/srv/app/app.py"), "app.py");
        assert_eq!(file_name("app.py"), "app.py");
    }
}
