//! The server's CPU time and memory, read from `/proc/<pid>/` (Linux only).

use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on every Linux
/// architecture crewline targets; reading `sysconf` would need `unsafe`).
const TICKS_PER_SEC: u64 = 100;

/// User plus system CPU time the process (all its threads) has used so far.
pub(crate) fn cpu_time(pid: u32) -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_time(&stat).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unexpected /proc/{pid}/stat"),
        )
    })
}

/// utime + stime from a `/proc/<pid>/stat` line.
fn parse_cpu_time(stat: &str) -> Option<Duration> {
    // The command name (field 2) is in parentheses and may hold spaces: skip past its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state is field 3, utime field 14, stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SEC))
}

/// The process's resident memory now and at its peak, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Memory {
    /// `VmRSS`.
    pub(crate) rss_kib: u64,
    /// `VmHWM` (the peak resident size since the process started).
    pub(crate) hwm_kib: u64,
}

/// Reads `VmRSS` and `VmHWM` from `/proc/<pid>/status`.
pub(crate) fn memory(pid: u32) -> std::io::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(parse_memory(&status))
}

fn parse_memory(status: &str) -> Memory {
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_utime_plus_stime_even_with_spaces_in_the_name() {
        let stat = "4242 (tokio (w) 1) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 \
                    3 0 100 1000 200 18446744073709551615";
        assert_eq!(parse_cpu_time(stat), Some(Duration::from_secs(3)));
        assert_eq!(parse_cpu_time("garbage"), None);
    }

    #[test]
    fn memory_reads_rss_and_peak() {
        let status = "Name:\tx\nVmHWM:\t  20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(
            parse_memory(status),
            Memory {
                rss_kib: 10240,
                hwm_kib: 20480
            }
        );
    }

    #[test]
    fn this_process_can_be_read() {
        let pid = std::process::id();
        assert!(memory(pid).unwrap().rss_kib > 0);
        cpu_time(pid).unwrap();
    }
}
