//! Parsing of the perf ring-buffer records this sampler asks for (see `perf::attr`): samples
//! with identifier, ip, tid, time, user registers and user stack; MMAP2, COMM, FORK, EXIT,
//! SWITCH and LOST side-band records, each ending in `sample_id` (tid, time, identifier).

pub const RECORD_MMAP2: u32 = 10;
pub const RECORD_COMM: u32 = 3;
pub const RECORD_FORK: u32 = 7;
pub const RECORD_EXIT: u32 = 4;
pub const RECORD_SAMPLE: u32 = 9;
pub const RECORD_SWITCH: u32 = 14;
pub const RECORD_LOST: u32 = 2;
pub const RECORD_LOST_SAMPLES: u32 = 13;

const MISC_CPUMODE_MASK: u16 = 7;
const MISC_KERNEL: u16 = 1;
const MISC_COMM_EXEC: u16 = 1 << 13;
const MISC_SWITCH_OUT: u16 = 1 << 13;
const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;

/// Size of the `sample_id` trailer: pid+tid, time, identifier.
const SAMPLE_ID_LEN: usize = 24;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleRecord {
    pub id: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub ip: u64,
    /// The sampled instruction was in the kernel (the user registers are those at entry).
    pub in_kernel: bool,
    /// User-mode registers (bp, sp, ip); `None` for a kernel thread.
    pub regs: Option<[u64; 3]>,
    /// The user-mode DI register: at a system call, its first argument (a read's descriptor).
    pub arg0: Option<u64>,
    /// Copy of the user stack from `sp` upwards.
    pub stack: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Sample(SampleRecord),
    Mmap2 {
        pid: u32,
        tid: u32,
        time: u64,
        start: u64,
        len: u64,
        pgoff: u64,
        ino: u64,
        prot: u32,
        path: String,
    },
    Comm {
        pid: u32,
        tid: u32,
        time: u64,
        name: String,
        exec: bool,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
    },
    Exit {
        pid: u32,
        tid: u32,
        time: u64,
    },
    Switch {
        pid: u32,
        tid: u32,
        time: u64,
        out: bool,
        preempt: bool,
    },
    Lost {
        time: u64,
        count: u64,
    },
    /// Thread `tid` of `pid` woke thread `wakee` (`sched:sched_waking`).
    Wake {
        pid: u32,
        tid: u32,
        time: u64,
        wakee: u32,
    },
}

impl Record {
    pub fn time(&self) -> u64 {
        match self {
            Record::Sample(s) => s.time,
            Record::Mmap2 { time, .. }
            | Record::Comm { time, .. }
            | Record::Fork { time, .. }
            | Record::Exit { time, .. }
            | Record::Switch { time, .. }
            | Record::Lost { time, .. }
            | Record::Wake { time, .. } => *time,
        }
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_ne_bytes(self.data.get(self.at..self.at + 8)?.try_into().ok()?);
        self.at += 8;
        Some(v)
    }
    fn u32(&mut self) -> Option<u32> {
        let v = u32::from_ne_bytes(self.data.get(self.at..self.at + 4)?.try_into().ok()?);
        self.at += 4;
        Some(v)
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let v = self.data.get(self.at..self.at + n)?;
        self.at += n;
        Some(v)
    }
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// (pid, tid, time) from the `sample_id` trailer.
fn sample_id(rec: &[u8]) -> Option<(u32, u32, u64)> {
    let at = rec.len().checked_sub(SAMPLE_ID_LEN)?;
    let mut c = Cursor { data: rec, at };
    Some((c.u32()?, c.u32()?, c.u64()?))
}

/// Whether a record is of a kind [`parse`] reads (so a `None` from it means a malformed one).
pub fn is_used_kind(rec: &[u8]) -> bool {
    let kind = rec.get(..4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())).unwrap_or(0);
    matches!(
        kind,
        RECORD_SAMPLE
            | RECORD_MMAP2
            | RECORD_COMM
            | RECORD_FORK
            | RECORD_EXIT
            | RECORD_SWITCH
            | RECORD_LOST
            | RECORD_LOST_SAMPLES
    )
}

/// Offset of the woken thread's id (`pid`) in `sched_waking`'s raw data: after the common
/// fields (8 bytes) and `comm[16]`, the same in every kernel since the tracepoint exists.
const WAKING_PID_OFFSET: usize = 24;

/// The identifier of a sample record (its first field), to tell which event it came from.
pub fn sample_event_id(rec: &[u8]) -> Option<u64> {
    let kind = u32::from_ne_bytes(rec.get(..4)?.try_into().ok()?);
    if kind != RECORD_SAMPLE {
        return None;
    }
    Some(u64::from_ne_bytes(rec.get(8..16)?.try_into().ok()?))
}

/// Parses a sample of the wake-up event (`perf::WAKE_SAMPLE_TYPE`: identifier, tid, time, raw).
pub fn parse_wake(rec: &[u8]) -> Option<Record> {
    let mut c = Cursor { data: rec, at: 8 };
    let _id = c.u64()?;
    let pid = c.u32()?;
    let tid = c.u32()?;
    let time = c.u64()?;
    let size = c.u32()? as usize;
    let raw = c.bytes(size)?;
    let wakee = i32::from_ne_bytes(raw.get(WAKING_PID_OFFSET..WAKING_PID_OFFSET + 4)?.try_into().ok()?);
    (wakee > 0).then_some(Record::Wake { pid, tid, time, wakee: wakee as u32 })
}

/// Parses one record (header included). `None` for records this sampler does not use or
/// cannot read.
pub fn parse(rec: &[u8]) -> Option<Record> {
    let mut c = Cursor { data: rec, at: 0 };
    let kind = c.u32()?;
    let misc = u16::from_ne_bytes(c.bytes(2)?.try_into().ok()?);
    c.bytes(2)?;
    match kind {
        RECORD_SAMPLE => {
            let id = c.u64()?;
            let ip = c.u64()?;
            let pid = c.u32()?;
            let tid = c.u32()?;
            let time = c.u64()?;
            let abi = c.u64()?;
            // In the order of perf::REGS_MASK's bits: DI, BP, SP, IP.
            let (arg0, regs) =
                if abi != 0 { (Some(c.u64()?), Some([c.u64()?, c.u64()?, c.u64()?])) } else { (None, None) };
            let size = c.u64()? as usize;
            let mut stack = Vec::new();
            if size > 0 {
                let data = c.bytes(size)?;
                let dyn_size = (c.u64()? as usize).min(size);
                stack.extend_from_slice(&data[..dyn_size]);
            }
            Some(Record::Sample(SampleRecord {
                id,
                pid,
                tid,
                time,
                ip,
                in_kernel: misc & MISC_CPUMODE_MASK == MISC_KERNEL,
                regs,
                arg0,
                stack,
            }))
        }
        RECORD_MMAP2 => {
            let pid = c.u32()?;
            let tid = c.u32()?;
            let start = c.u64()?;
            let len = c.u64()?;
            let pgoff = c.u64()?;
            let _maj_min = c.u64()?;
            let ino = c.u64()?;
            let _ino_generation = c.u64()?;
            let prot = c.u32()?;
            let _flags = c.u32()?;
            let end = rec.len().checked_sub(SAMPLE_ID_LEN)?;
            let path = c_string(rec.get(c.at..end)?);
            let (_, _, time) = sample_id(rec)?;
            Some(Record::Mmap2 { pid, tid, time, start, len, pgoff, ino, prot, path })
        }
        RECORD_COMM => {
            let pid = c.u32()?;
            let tid = c.u32()?;
            let end = rec.len().checked_sub(SAMPLE_ID_LEN)?;
            let name = c_string(rec.get(c.at..end)?);
            let (_, _, time) = sample_id(rec)?;
            Some(Record::Comm { pid, tid, time, name, exec: misc & MISC_COMM_EXEC != 0 })
        }
        RECORD_FORK | RECORD_EXIT => {
            let pid = c.u32()?;
            let ppid = c.u32()?;
            let tid = c.u32()?;
            let ptid = c.u32()?;
            let time = c.u64()?;
            Some(if kind == RECORD_FORK {
                Record::Fork { pid, ppid, tid, ptid, time }
            } else {
                Record::Exit { pid, tid, time }
            })
        }
        RECORD_SWITCH => {
            let (pid, tid, time) = sample_id(rec)?;
            Some(Record::Switch {
                pid,
                tid,
                time,
                out: misc & MISC_SWITCH_OUT != 0,
                preempt: misc & MISC_SWITCH_OUT_PREEMPT != 0,
            })
        }
        RECORD_LOST => {
            let _id = c.u64()?;
            let count = c.u64()?;
            let (_, _, time) = sample_id(rec)?;
            Some(Record::Lost { time, count })
        }
        RECORD_LOST_SAMPLES => {
            let count = c.u64()?;
            let (_, _, time) = sample_id(rec)?;
            Some(Record::Lost { time, count })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let size = (8 + body.len()) as u16;
        let mut v = kind.to_ne_bytes().to_vec();
        v.extend_from_slice(&misc.to_ne_bytes());
        v.extend_from_slice(&size.to_ne_bytes());
        v.extend_from_slice(body);
        v
    }

    fn sid(pid: u32, tid: u32, time: u64) -> Vec<u8> {
        let mut v = pid.to_ne_bytes().to_vec();
        v.extend_from_slice(&tid.to_ne_bytes());
        v.extend_from_slice(&time.to_ne_bytes());
        v.extend_from_slice(&77u64.to_ne_bytes());
        v
    }

    #[test]
    fn parses_a_sample_with_registers_and_stack() {
        let mut body = Vec::new();
        for v in [5u64, 0x401000] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body.extend_from_slice(&10u32.to_ne_bytes());
        body.extend_from_slice(&11u32.to_ne_bytes());
        for v in [1234u64, 2, 7, 0x7ff0, 0x7fe0, 0x401000, 16] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body.extend_from_slice(&[1u8; 16]);
        body.extend_from_slice(&8u64.to_ne_bytes());
        let rec = header(RECORD_SAMPLE, 2, &body);
        let Some(Record::Sample(s)) = parse(&rec) else { panic!() };
        assert_eq!((s.id, s.pid, s.tid, s.time, s.ip), (5, 10, 11, 1234, 0x401000));
        assert_eq!(s.regs, Some([0x7ff0, 0x7fe0, 0x401000]));
        assert_eq!(s.arg0, Some(7));
        assert_eq!(s.stack, vec![1u8; 8], "only the dynamic size is kept");
        assert!(!s.in_kernel);
    }

    #[test]
    fn parses_a_wake_up_with_the_woken_thread() {
        let mut body = 9u64.to_ne_bytes().to_vec();
        body.extend_from_slice(&10u32.to_ne_bytes());
        body.extend_from_slice(&11u32.to_ne_bytes());
        body.extend_from_slice(&5000u64.to_ne_bytes());
        let mut raw = vec![0u8; 36];
        raw[24..28].copy_from_slice(&12i32.to_ne_bytes());
        body.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        body.extend_from_slice(&raw);
        body.extend_from_slice(&[0u8; 4]);
        let rec = header(RECORD_SAMPLE, 1, &body);
        assert_eq!(sample_event_id(&rec), Some(9));
        assert_eq!(parse_wake(&rec), Some(Record::Wake { pid: 10, tid: 11, time: 5000, wakee: 12 }));
        assert_eq!(parse_wake(&rec[..30]), None, "a truncated record");
    }

    #[test]
    fn parses_side_band_records() {
        let mut body = Vec::new();
        body.extend_from_slice(&3u32.to_ne_bytes());
        body.extend_from_slice(&3u32.to_ne_bytes());
        for v in [0x1000u64, 0x2000, 0x0, 0, 42, 0] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body.extend_from_slice(&5u32.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend_from_slice(b"/bin/true\0\0\0\0\0\0\0");
        body.extend_from_slice(&sid(3, 3, 99));
        let rec = header(RECORD_MMAP2, 2, &body);
        assert_eq!(
            parse(&rec),
            Some(Record::Mmap2 {
                pid: 3,
                tid: 3,
                time: 99,
                start: 0x1000,
                len: 0x2000,
                pgoff: 0,
                ino: 42,
                prot: 5,
                path: "/bin/true".into()
            })
        );
        let rec = header(RECORD_SWITCH, MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT, &sid(3, 4, 7));
        assert_eq!(parse(&rec), Some(Record::Switch { pid: 3, tid: 4, time: 7, out: true, preempt: true }));
        let mut body = b"worker\0\0".to_vec();
        body.splice(0..0, [3u32.to_ne_bytes(), 4u32.to_ne_bytes()].concat());
        body.extend_from_slice(&sid(3, 4, 8));
        let rec = header(RECORD_COMM, MISC_COMM_EXEC, &body);
        assert_eq!(parse(&rec), Some(Record::Comm { pid: 3, tid: 4, time: 8, name: "worker".into(), exec: true }));
    }
}
