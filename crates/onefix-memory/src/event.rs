//! The agent's datagrams (little endian; see agent/agent.c).

const MAGIC: u32 = 0x4f4e_4546;
const HEADER: usize = 24;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonFrame {
    pub line: i32,
    pub file: String,
    pub function: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A process started carrying the agent (start-up, exec, or fork).
    Hello {
        rate_bytes: u64,
        ppid: u32,
        python: bool,
        forked: bool,
    },
    Alloc {
        addr: u64,
        size: u64,
        /// Bytes this sample stands for: size / (1 - exp(-size / rate)).
        weight: u64,
        mmap: bool,
        /// The agent will report this allocation's free.
        tracked: bool,
        /// Python frames, innermost first (when the thread held the GIL).
        python: Vec<PythonFrame>,
        /// Return addresses, innermost first (when there are no Python frames).
        native: Vec<u64>,
    },
    Free {
        addr: u64,
    },
    /// The text of the process's /proc/self/maps, as it was when the agent started.
    Maps {
        text: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC, nanoseconds.
    pub time_ns: u64,
    pub body: Body,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// Reads one datagram; `None` for anything malformed (it is counted, not fatal).
pub fn parse(buf: &[u8]) -> Option<Event> {
    if buf.len() < HEADER {
        return None;
    }
    let mut r = Reader { buf, pos: 0 };
    if r.u32()? != MAGIC {
        return None;
    }
    let kind = r.u16()?;
    let flags = r.u16()?;
    let pid = r.u32()?;
    let tid = r.u32()?;
    let time_ns = r.u64()?;
    let body = match kind {
        1 => Body::Hello { rate_bytes: r.u64()?, ppid: r.u32()?, python: r.u32()? != 0, forked: flags & 1 != 0 },
        2 => {
            let (addr, size, weight) = (r.u64()?, r.u64()?, r.u64()?);
            let (nnative, npython, flags) = (r.u16()?, r.u16()?, r.u32()?);
            let mut python = Vec::with_capacity(npython as usize);
            for _ in 0..npython {
                let line = r.u32()? as i32;
                let (flen, nlen) = (r.u16()? as usize, r.u16()? as usize);
                let file = String::from_utf8_lossy(r.take(flen)?).into_owned();
                let function = String::from_utf8_lossy(r.take(nlen)?).into_owned();
                python.push(PythonFrame { line, file, function });
            }
            let native = (0..nnative).map(|_| r.u64()).collect::<Option<Vec<u64>>>()?;
            Body::Alloc { addr, size, weight, mmap: flags & 1 != 0, tracked: flags & 2 != 0, python, native }
        }
        3 => Body::Free { addr: r.u64()? },
        4 => Body::Maps { text: String::from_utf8_lossy(&buf[HEADER..]).into_owned() },
        _ => return None,
    };
    Some(Event { pid, tid, time_ns, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u16) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(MAGIC.to_le_bytes());
        b.extend(kind.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b.extend(7u32.to_le_bytes());
        b.extend(8u32.to_le_bytes());
        b.extend(99u64.to_le_bytes());
        b
    }

    #[test]
    fn reads_allocations_with_both_kinds_of_frames_and_rejects_truncation() {
        let mut b = header(2);
        for v in [0x1000u64, 64, 524_288] {
            b.extend(v.to_le_bytes());
        }
        b.extend(1u16.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(2u32.to_le_bytes());
        b.extend(12u32.to_le_bytes());
        b.extend(4u16.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(b"a.pyf");
        b.extend(0xdeadu64.to_le_bytes());
        let e = parse(&b).expect("a whole event");
        assert_eq!((e.pid, e.tid, e.time_ns), (7, 8, 99));
        let Body::Alloc { addr, size, weight, mmap, tracked, python, native } = e.body else { panic!("{e:?}") };
        assert_eq!((addr, size, weight, mmap, tracked), (0x1000, 64, 524_288, false, true));
        assert_eq!(python, vec![PythonFrame { line: 12, file: "a.py".into(), function: "f".into() }]);
        assert_eq!(native, vec![0xdead]);
        assert_eq!(parse(&b[..b.len() - 1]), None);
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert_eq!(parse(&bad), None);
    }
}
